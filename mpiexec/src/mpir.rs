//! The MPIR process acquisition interface: how a parallel debugger (TotalView, DDT, gdb
//! scripts, LaunchMON and the tools built on it, such as STAT) learns where the ranks of a
//! job run. The names and layout are the interface (MPI Forum, "The MPIR Process Acquisition
//! Interface", 2010; summarized in `docs/spec/mpir.md`): the debugger reads these symbols
//! from our memory and sets a breakpoint in [`MPIR_Breakpoint`].
//!
//! * A debugger that starts `libi-mpiexec` sets `MPIR_being_debugged` to 1 before it runs;
//!   once every rank started we fill `MPIR_proctable` (rank order: host, executable, pid),
//!   set `MPIR_debug_state` to `MPIR_DEBUG_SPAWNED` and call `MPIR_Breakpoint`.
//! * A debugger that attaches to a running `libi-mpiexec` reads the table, which is filled
//!   at launch for every job of at most [`ATTACH_TABLE_MAX`] ranks (beyond that the table
//!   would be per-rank state held by the front end for nothing; a debugger that starts the
//!   job still gets it, as does `libi-mpiexec --proctable PID`, which asks the tree).
//!
//! Spawned groups are not in the table (as with Hydra, the table is the job's).
#![allow(non_upper_case_globals, non_snake_case)]

use libi::msg::ProcNode;
use std::ffi::{c_char, c_int, CString};
use std::ptr::{addr_of, addr_of_mut};

/// One rank of the table, as the interface defines it.
#[repr(C)]
pub struct MPIR_PROCDESC {
    pub host_name: *const c_char,
    pub executable_name: *const c_char,
    pub pid: c_int,
}

/// The table (rank order) and its length.
#[no_mangle]
pub static mut MPIR_proctable: *mut MPIR_PROCDESC = std::ptr::null_mut();
#[no_mangle]
pub static mut MPIR_proctable_size: c_int = 0;
/// Set by a debugger that started us.
#[no_mangle]
pub static mut MPIR_being_debugged: c_int = 0;
/// `MPIR_DEBUG_SPAWNED` (1) once the table is filled.
#[no_mangle]
pub static mut MPIR_debug_state: c_int = 0;
/// We are a starter, not an MPI process.
#[no_mangle]
pub static mut MPIR_i_am_starter: c_int = 1;
/// A debugger may attach to some of the ranks only.
#[no_mangle]
pub static mut MPIR_partial_attach_ok: c_int = 1;

pub const MPIR_DEBUG_SPAWNED: c_int = 1;

/// The largest job whose table is kept for a debugger that may attach later.
pub const ATTACH_TABLE_MAX: u32 = 65_536;

/// Where the debugger's breakpoint goes; it must not be inlined or optimized away.
#[no_mangle]
#[inline(never)]
pub extern "C" fn MPIR_Breakpoint() {
    // SAFETY: an empty instruction sequence, here so that the call is not elided.
    unsafe { std::arch::asm!("", options(nostack, preserves_flags)) }
}

/// Whether a debugger started us (it set `MPIR_being_debugged` before we ran).
pub fn being_debugged() -> bool {
    // SAFETY: plain ints written by a debugger while we are stopped; read volatile. The
    // flags we only offer are read too, so that the linker keeps them in the executable.
    unsafe {
        std::ptr::read_volatile(addr_of!(MPIR_i_am_starter));
        std::ptr::read_volatile(addr_of!(MPIR_partial_attach_ok));
        std::ptr::read_volatile(addr_of!(MPIR_being_debugged)) != 0
    }
}

/// The strings and entries behind the table: they live as long as the process.
struct Table {
    _strings: Vec<CString>,
    _entries: Vec<MPIR_PROCDESC>,
}

// SAFETY: the entries' pointers point into `_strings`, owned by the same value; nothing
// else refers to them but the debugger, which reads them while we are stopped.
unsafe impl Send for Table {}

static TABLE: std::sync::Mutex<Option<Table>> = std::sync::Mutex::new(None);

/// Fill the table from the job's process table (`exes`: each app's executable), set
/// `MPIR_DEBUG_SPAWNED` and stop at the breakpoint.
pub fn spawned(nodes: &[ProcNode], size: u32, exes: &[String]) {
    let rows = crate::control::rows(nodes, size);
    let cstr = |s: &str| CString::new(s.replace('\0', "")).unwrap_or_default();
    let hosts: Vec<CString> = rows.iter().map(|r| cstr(r.1)).collect();
    let exe_names: Vec<CString> = exes.iter().map(|e| cstr(e)).collect();
    let unknown = cstr("");
    let mut entries: Vec<MPIR_PROCDESC> = rows
        .iter()
        .zip(&hosts)
        .map(|(r, h)| MPIR_PROCDESC {
            host_name: h.as_ptr(),
            executable_name: exe_names.get(r.2 as usize).unwrap_or(&unknown).as_ptr(),
            pid: r.3,
        })
        .collect();
    let mut strings = hosts;
    strings.extend(exe_names);
    strings.push(unknown);
    // SAFETY: the front end's thread is the only writer; the pointers stay valid while the
    // table is kept in TABLE (for the rest of the process).
    unsafe {
        std::ptr::write_volatile(addr_of_mut!(MPIR_proctable), entries.as_mut_ptr());
        std::ptr::write_volatile(addr_of_mut!(MPIR_proctable_size), entries.len() as c_int);
        std::ptr::write_volatile(addr_of_mut!(MPIR_debug_state), MPIR_DEBUG_SPAWNED);
    }
    if let Ok(mut t) = TABLE.lock() {
        *t = Some(Table { _strings: strings, _entries: entries });
    }
    MPIR_Breakpoint();
}

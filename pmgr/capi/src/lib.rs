//! C ABI of the PMGR_COLLECTIVE client library: `libpmgr_collective.so`, declared by
//! `pmgr/include/pmgr_collective_client.h`. A thin layer over [`pmgr::client::Pmgr`]:
//! pointer checks, one process-wide state, no panic crosses the boundary (every entry point
//! runs under `catch_unwind` and answers `PMGR_FAILURE`). The variadic `pmgr_abort` is a C
//! shim (`src/abort_shim.c`) that formats the message and calls [`pmgr_abort_msg`].
//!
//! Errors are printed to stderr as `PMGR_COLLECTIVE ERROR: …` and returned as
//! `PMGR_FAILURE`, except invalid environment values in `pmgr_init`, which exit(1) as the
//! original library does.

#![allow(clippy::missing_safety_doc)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard};

use pmgr::client::{Config, Error, Pmgr, ReduceOp};

pub const PMGR_SUCCESS: c_int = 0;
pub const PMGR_FAILURE: c_int = 1;
pub const PMGR_SUM: c_int = 1;
pub const PMGR_MAX: c_int = 2;

static STATE: Mutex<Option<Pmgr>> = Mutex::new(None);

fn state() -> MutexGuard<'static, Option<Pmgr>> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

fn report(e: &Error) {
    eprintln!("PMGR_COLLECTIVE ERROR: {e}");
}

/// Run `f` without letting a panic out.
fn guard(f: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(PMGR_FAILURE)
}

/// Run `f` on the initialized state.
fn with(f: impl FnOnce(&mut Pmgr) -> Result<(), Error>) -> c_int {
    guard(|| {
        let mut st = state();
        let Some(p) = st.as_mut() else {
            report(&Error::NotOpen);
            return PMGR_FAILURE;
        };
        match f(p) {
            Ok(()) => PMGR_SUCCESS,
            Err(e) => {
                report(&e);
                PMGR_FAILURE
            }
        }
    })
}

fn bad(what: &str) -> Error {
    Error::InvalidArg(what.to_string())
}

/// `n * sz` as a byte count, if it is a valid C-int-sized buffer.
fn times(n: u32, sz: c_int) -> Result<usize, Error> {
    let sz = usize::try_from(sz).ok().filter(|&s| s > 0).ok_or_else(|| bad("count <= 0"))?;
    sz.checked_mul(n as usize)
        .filter(|&t| t <= i32::MAX as usize)
        .ok_or_else(|| bad("count times the number of ranks overflows"))
}

fn root_of(root: c_int) -> Result<u32, Error> {
    u32::try_from(root).map_err(|_| bad("negative root"))
}

/// Copy `len` bytes from `p` (non-null checked) into a Vec (no aliasing with output buffers).
unsafe fn copy_in(p: *const c_void, len: usize, what: &str) -> Result<Vec<u8>, Error> {
    if p.is_null() {
        return Err(bad(what));
    }
    Ok(std::slice::from_raw_parts(p.cast::<u8>(), len).to_vec())
}

unsafe fn out_slice<'a>(p: *mut c_void, len: usize, what: &str) -> Result<&'a mut [u8], Error> {
    if p.is_null() {
        return Err(bad(what));
    }
    Ok(std::slice::from_raw_parts_mut(p.cast::<u8>(), len))
}

/// `int pmgr_init(int *argc_p, char ***argv_p, int *np_p, int *me_p, int *id_p)`.
#[no_mangle]
pub unsafe extern "C" fn pmgr_init(
    _argc_p: *mut c_int,
    _argv_p: *mut *mut *mut c_char,
    np_p: *mut c_int,
    me_p: *mut c_int,
    id_p: *mut c_int,
) -> c_int {
    guard(|| {
        let cfg = match Config::from_env() {
            Ok(c) => c,
            Err(e) => {
                report(&e);
                std::process::exit(1);
            }
        };
        let p = Pmgr::with_config(cfg);
        if !np_p.is_null() {
            *np_p = p.nprocs() as c_int;
        }
        if !me_p.is_null() {
            *me_p = p.rank() as c_int;
        }
        if !id_p.is_null() {
            *id_p = p.id();
        }
        *state() = Some(p);
        PMGR_SUCCESS
    })
}

/// `int pmgr_open(void)`.
#[no_mangle]
pub extern "C" fn pmgr_open() -> c_int {
    with(|p| p.open())
}

/// `int pmgr_close(void)`.
#[no_mangle]
pub extern "C" fn pmgr_close() -> c_int {
    with(|p| p.close())
}

/// `int pmgr_finalize(void)`.
#[no_mangle]
pub extern "C" fn pmgr_finalize() -> c_int {
    guard(|| {
        let p = state().take();
        match p.map(Pmgr::finalize) {
            Some(Err(e)) => {
                report(&e);
                PMGR_FAILURE
            }
            _ => PMGR_SUCCESS,
        }
    })
}

/// Back end of the variadic `pmgr_abort` (C shim): send the abort record. Usable before
/// `pmgr_init` (reads the environment then). Returns -1 if no server can be reached.
#[no_mangle]
pub unsafe extern "C" fn pmgr_abort_msg(code: c_int, msg: *const c_char) -> c_int {
    let rc = catch_unwind(AssertUnwindSafe(|| {
        let text = if msg.is_null() { Vec::new() } else { CStr::from_ptr(msg).to_bytes().to_vec() };
        let st = state();
        let r = match st.as_ref() {
            Some(p) => p.abort(code, &text),
            None => Config::from_env().and_then(|c| Pmgr::with_config(c).abort(code, &text)),
        };
        match r {
            Ok(()) => PMGR_SUCCESS,
            Err(e) => {
                report(&e);
                -1
            }
        }
    }));
    rc.unwrap_or(-1)
}

/// `int pmgr_barrier(void)`.
#[no_mangle]
pub extern "C" fn pmgr_barrier() -> c_int {
    with(|p| p.barrier())
}

/// `int pmgr_bcast(void *buf, int sendcount, int root)`.
#[no_mangle]
pub unsafe extern "C" fn pmgr_bcast(buf: *mut c_void, sendcount: c_int, root: c_int) -> c_int {
    with(|p| {
        let len = times(1, sendcount)?;
        let b = out_slice(buf, len, "NULL buffer")?;
        p.bcast(b, root_of(root)?)
    })
}

/// `int pmgr_gather(void *sendbuf, int sendcount, void *recvbuf, int root)`.
#[no_mangle]
pub unsafe extern "C" fn pmgr_gather(
    sendbuf: *mut c_void,
    sendcount: c_int,
    recvbuf: *mut c_void,
    root: c_int,
) -> c_int {
    with(|p| {
        let root = root_of(root)?;
        let total = times(p.nprocs(), sendcount)?;
        let send = copy_in(sendbuf, times(1, sendcount)?, "NULL send buffer")?;
        if p.rank() == root {
            let recv = out_slice(recvbuf, total, "NULL receive buffer at the root")?;
            p.gather(&send, recv, root)
        } else {
            p.gather(&send, &mut [], root)
        }
    })
}

/// `int pmgr_scatter(void *sendbuf, int sendcount, void *recvbuf, int root)`.
#[no_mangle]
pub unsafe extern "C" fn pmgr_scatter(
    sendbuf: *mut c_void,
    sendcount: c_int,
    recvbuf: *mut c_void,
    root: c_int,
) -> c_int {
    with(|p| {
        let root = root_of(root)?;
        let total = times(p.nprocs(), sendcount)?;
        let send = if p.rank() == root {
            copy_in(sendbuf, total, "NULL send buffer at the root")?
        } else {
            Vec::new()
        };
        let recv = out_slice(recvbuf, times(1, sendcount)?, "NULL receive buffer")?;
        p.scatter(&send, recv, root)
    })
}

/// `int pmgr_allgather(void *sendbuf, int sendcount, void *recvbuf)`.
#[no_mangle]
pub unsafe extern "C" fn pmgr_allgather(
    sendbuf: *mut c_void,
    sendcount: c_int,
    recvbuf: *mut c_void,
) -> c_int {
    with(|p| {
        let total = times(p.nprocs(), sendcount)?;
        let send = copy_in(sendbuf, times(1, sendcount)?, "NULL send buffer")?;
        let recv = out_slice(recvbuf, total, "NULL receive buffer")?;
        p.allgather(&send, recv)
    })
}

/// `int pmgr_alltoall(void *sendbuf, int sendcount, void *recvbuf)`.
#[no_mangle]
pub unsafe extern "C" fn pmgr_alltoall(
    sendbuf: *mut c_void,
    sendcount: c_int,
    recvbuf: *mut c_void,
) -> c_int {
    with(|p| {
        let total = times(p.nprocs(), sendcount)?;
        let send = copy_in(sendbuf, total, "NULL send buffer")?;
        let recv = out_slice(recvbuf, total, "NULL receive buffer")?;
        p.alltoall(&send, times(1, sendcount)?, recv)
    })
}

/// `int pmgr_allgatherstr(char *sendstr, char ***recvstr, char **recvbuf)`: both outputs are
/// `malloc`ed; the caller frees them.
#[no_mangle]
pub unsafe extern "C" fn pmgr_allgatherstr(
    sendstr: *mut c_char,
    recvstr: *mut *mut *mut c_char,
    recvbuf: *mut *mut c_char,
) -> c_int {
    with(|p| {
        if sendstr.is_null() || recvstr.is_null() || recvbuf.is_null() {
            return Err(bad("NULL argument"));
        }
        let s = CStr::from_ptr(sendstr).to_bytes();
        let all = p.allgatherstr(s)?;
        let total: usize = all.iter().map(|v| v.len() + 1).sum();
        let buf = libc::malloc(total.max(1)).cast::<c_char>();
        let ptrs = libc::malloc(all.len().max(1) * std::mem::size_of::<*mut c_char>())
            .cast::<*mut c_char>();
        if buf.is_null() || ptrs.is_null() {
            libc::free(buf.cast());
            libc::free(ptrs.cast());
            return Err(bad("out of memory"));
        }
        let mut off = 0usize;
        for (i, v) in all.iter().enumerate() {
            let dst = buf.add(off);
            std::ptr::copy_nonoverlapping(v.as_ptr().cast::<c_char>(), dst, v.len());
            *dst.add(v.len()) = 0;
            *ptrs.add(i) = dst;
            off += v.len() + 1;
        }
        *recvbuf = buf;
        *recvstr = ptrs;
        Ok(())
    })
}

/// `int pmgr_allreduce_int64t(int64_t *sendint, int64_t *recvint, pmgr_op op)`.
#[no_mangle]
pub unsafe extern "C" fn pmgr_allreduce_int64t(
    sendint: *mut i64,
    recvint: *mut i64,
    op: c_int,
) -> c_int {
    with(|p| {
        if sendint.is_null() || recvint.is_null() {
            return Err(bad("NULL argument"));
        }
        let op = match op {
            PMGR_SUM => ReduceOp::Sum,
            PMGR_MAX => ReduceOp::Max,
            other => return Err(bad(&format!("unknown reduction {other}"))),
        };
        let v = p.allreduce_int64(sendint.read_unaligned(), op)?;
        recvint.write_unaligned(v);
        Ok(())
    })
}

/// `int pmgr_aggregate(const void *sendbuf, int64_t sendcount, void *recvbuf,
/// int64_t recvcount, int64_t *written)`.
#[no_mangle]
pub unsafe extern "C" fn pmgr_aggregate(
    sendbuf: *const c_void,
    sendcount: i64,
    recvbuf: *mut c_void,
    recvcount: i64,
    written: *mut i64,
) -> c_int {
    with(|p| {
        let n = usize::try_from(sendcount).map_err(|_| bad("negative sendcount"))?;
        let cap = usize::try_from(recvcount).map_err(|_| bad("negative recvcount"))?;
        let send = if n == 0 { Vec::new() } else { copy_in(sendbuf, n, "NULL send buffer")? };
        let all = p.aggregate(&send)?;
        if all.len() > cap {
            return Err(bad(&format!("aggregate of {} bytes exceeds recvcount {cap}", all.len())));
        }
        if !all.is_empty() {
            out_slice(recvbuf, all.len(), "NULL receive buffer")?.copy_from_slice(&all);
        }
        if !written.is_null() {
            written.write_unaligned(all.len() as i64);
        }
        Ok(())
    })
}

/// `const char *pmgr_errstr(int rc)`.
#[no_mangle]
pub extern "C" fn pmgr_errstr(rc: c_int) -> *const c_char {
    let s: &'static CStr = match rc {
        0 => c"success",
        1 => c"failure",
        -2 => c"poll error",
        -3 => c"poll timed out",
        -4 => c"connection hung up",
        -5 => c"unexpected poll event",
        -6 => c"invalid poll request",
        -7 => c"no data to read",
        -8 => c"read failed",
        -9 => c"write returned zero",
        _ => c"unknown error",
    };
    s.as_ptr()
}

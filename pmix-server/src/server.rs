//! The companion's server: libpmix's upcalls in, the agent's messages in, one loop.
//!
//! Three kinds of thread meet here, only through one channel of [`Event`]s:
//!
//! * libpmix's progress thread calls the upcalls (`up_*`). Each copies what it was given
//!   into an owned message, keeps the completion (`cbfunc`, `cbdata`) beside it, posts both
//!   and returns at once: it never blocks, never waits for the agent, and never unwinds
//!   (each runs under `catch_unwind`; a panic answers `PMIX_ERROR`).
//! * the reader thread reads the agent's frames (blocking) and posts them;
//! * the main thread takes events one at a time: it writes to the agent, calls libpmix
//!   (`PMIx_server_*`) and calls the completions when the agent answers.
//!
//! Memory given to libpmix stays alive until libpmix says it is done with it: the
//! `pmix_info_t` arrays of a registration until its completion callback (they are kept in
//! [`Op`]), a fence's or a modex's blob until libpmix's release callback (boxed, handed over
//! as the release's `cbdata`).

use crate::ffi::*;
use libc::{c_char, c_int, c_void, size_t};
use libi_pmix::frame::{self, FrameError};
use libi_pmix::jobinfo::{self, Info, Val};
use libi_pmix::proto::{FromCompanion, NspaceInfo, Proc, Published, SpawnApp, Status, ToCompanion};
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::io::Write;
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::OnceLock;

/// The command line.
pub struct Opts {
    pub fd: RawFd,
    pub tmpdir: Option<PathBuf>,
    pub host: Option<String>,
}

/// A `cbdata` (or any pointer libpmix hands over) carried to the main thread. libpmix's
/// completion functions may be called from any thread (they shift to libpmix's own thread
/// themselves, see `docs/spec/pmix-companion.md` §3).
struct CPtr(*mut c_void);
// SAFETY: the pointer is only carried, never dereferenced by us; it goes back to libpmix,
// whose completion functions are thread-safe.
unsafe impl Send for CPtr {}

/// An upcall's completion, held until the agent answers.
enum Completion {
    Op(pmix_op_cbfunc_t, CPtr),
    Modex(pmix_modex_cbfunc_t, CPtr),
    Lookup(pmix_lookup_cbfunc_t, CPtr),
    Spawn(pmix_spawn_cbfunc_t, CPtr),
    Info(pmix_info_cbfunc_t, CPtr),
}

/// What the other threads hand to the main loop.
enum Event {
    /// An upcall: tell the agent `msg`, keep `done` under the message's id.
    Upcall { id: u64, msg: FromCompanion, done: Option<Completion> },
    /// A request of ours to libpmix completed (`token` from [`Server::ops`]).
    OpDone { token: u64, status: Status },
    /// A direct-modex request we made for the agent completed.
    Dmodex { id: u64, status: Status, blob: Vec<u8> },
    /// A message from the agent.
    Agent(ToCompanion),
    /// The agent's socket closed (`None`) or broke.
    AgentGone(Option<String>),
}

static EVENTS: OnceLock<Sender<Event>> = OnceLock::new();
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Hands an event to the main loop; never blocks (the channel is unbounded). A closed
/// channel means the main loop is gone, and the event no longer matters.
fn post(ev: Event) {
    if let Some(tx) = EVENTS.get() {
        let _ = tx.send(ev);
    }
}

fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

// ---------------------------------------------------------------------------------------
// Reading C data (every pointer below comes from libpmix and is valid for the call).

/// A string of a fixed-size C array: up to its first NUL, or all of it.
fn fixed_str(a: &[c_char]) -> String {
    let bytes: Vec<u8> = a.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn proc_of(p: &pmix_proc_t) -> Proc {
    Proc { nspace: fixed_str(&p.nspace), rank: p.rank }
}

/// # Safety
/// `p` is null or points to a `pmix_proc_t`.
unsafe fn opt_proc(p: *const pmix_proc_t) -> Option<Proc> {
    // SAFETY: per this function's contract.
    unsafe { p.as_ref() }.map(proc_of)
}

/// # Safety
/// `p` is null or points to `n` elements valid for `'a`.
unsafe fn slice<'a, T>(p: *const T, n: size_t) -> &'a [T] {
    if p.is_null() || n == 0 {
        &[]
    } else {
        // SAFETY: per this function's contract.
        unsafe { std::slice::from_raw_parts(p, n) }
    }
}

/// # Safety
/// `s` is null or a NUL-terminated string.
unsafe fn opt_string(s: *const c_char) -> Option<String> {
    if s.is_null() {
        None
    } else {
        // SAFETY: per this function's contract.
        Some(unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned())
    }
}

/// # Safety
/// `argv` is null or a NULL-terminated array of NUL-terminated strings.
unsafe fn string_list(argv: *const *mut c_char) -> Vec<String> {
    let mut out = Vec::new();
    if argv.is_null() {
        return out;
    }
    for i in 0.. {
        // SAFETY: the array is NULL-terminated, and we stop at its NULL.
        let s = unsafe { *argv.add(i) };
        if s.is_null() {
            break;
        }
        // SAFETY: a non-NULL entry is a NUL-terminated string.
        out.extend(unsafe { opt_string(s) });
    }
    out
}

/// A value as text, for the types a name service or a spawn directive carries.
fn value_text(v: &pmix_value_t) -> Option<String> {
    // SAFETY: each arm reads the union member that `type_` says is set.
    unsafe {
        Some(match v.type_ {
            PMIX_STRING => return opt_string(v.data.string),
            PMIX_BOOL => v.data.flag.to_string(),
            PMIX_BYTE | PMIX_UINT8 => v.data.uint8.to_string(),
            PMIX_INT8 => v.data.int8.to_string(),
            PMIX_INT16 => v.data.int16.to_string(),
            PMIX_UINT16 => v.data.uint16.to_string(),
            PMIX_INT | PMIX_INT32 | PMIX_STATUS => v.data.int32.to_string(),
            PMIX_UINT | PMIX_UINT32 | PMIX_PROC_RANK => v.data.uint32.to_string(),
            PMIX_INT64 => v.data.int64.to_string(),
            PMIX_UINT64 | PMIX_SIZE => v.data.uint64.to_string(),
            PMIX_PID => v.data.pid.to_string(),
            _ => return None,
        })
    }
}

/// A value as a number (`PMIX_TIMEOUT`, `PMIX_WAIT`, a range), for integer types.
fn value_int(v: &pmix_value_t) -> Option<i64> {
    if v.type_ == PMIX_DATA_RANGE {
        // SAFETY: the type says `range` is set.
        return Some(i64::from(unsafe { v.data.range }));
    }
    value_text(v).and_then(|t| match t.as_str() {
        "true" => Some(1),
        "false" => Some(0),
        t => t.parse().ok(),
    })
}

fn info_pairs(infos: &[pmix_info_t]) -> Vec<(String, String)> {
    infos.iter().filter_map(|i| Some((fixed_str(&i.key), value_text(&i.value)?))).collect()
}

fn find<'a>(infos: &'a [pmix_info_t], key: &str) -> Option<&'a pmix_value_t> {
    infos.iter().find(|i| fixed_str(&i.key) == key).map(|i| &i.value)
}

// ---------------------------------------------------------------------------------------
// Building C data.

fn zero_value() -> pmix_value_t {
    pmix_value_t { type_: 0, data: pmix_value_data { envar: [0; 3] } }
}

fn zero_info() -> pmix_info_t {
    pmix_info_t { key: [0; PMIX_MAX_KEYLEN + 1], flags: 0, value: zero_value() }
}

fn zero_proc() -> pmix_proc_t {
    pmix_proc_t { nspace: [0; PMIX_MAX_NSLEN + 1], rank: PMIX_RANK_UNDEF }
}

/// Copies `s` into a fixed C array, cut to leave room for the NUL.
fn put_fixed(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len() - 1);
    for (d, b) in dst.iter_mut().zip(&s.as_bytes()[..n]) {
        *d = *b as c_char;
    }
    dst[n] = 0;
}

fn c_proc(p: &Proc) -> pmix_proc_t {
    let mut out = zero_proc();
    put_fixed(&mut out.nspace, &p.nspace);
    out.rank = p.rank;
    out
}

fn cstring(s: &str) -> Result<CString, String> {
    CString::new(s).map_err(|_| format!("{s:?} has a NUL byte"))
}

/// Takes a string that libpmix allocated (with malloc) and frees it.
///
/// # Safety
/// `p` is null or a malloc'd NUL-terminated string nobody else frees.
unsafe fn take_malloced(p: *mut c_char) -> Option<String> {
    // SAFETY: per this function's contract.
    let s = unsafe { opt_string(p) };
    if !p.is_null() {
        // SAFETY: libpmix allocated it with malloc and gave it to us.
        unsafe { libc::free(p.cast()) };
    }
    s
}

/// Everything a `pmix_info_t` array points to, kept alive as long as libpmix may read it.
/// Boxed elements: their addresses are in the C arrays, so they must not move when the
/// vectors grow.
#[derive(Default)]
#[allow(clippy::vec_box)]
struct CArena {
    strings: Vec<CString>,
    arrays: Vec<Vec<pmix_info_t>>,
    darrays: Vec<Box<pmix_data_array_t>>,
    procs: Vec<Box<pmix_proc_t>>,
}

// SAFETY: the arena owns all the memory its pointers point to; it is moved between threads
// only as a whole (into and out of the main loop's tables), never shared.
unsafe impl Send for CArena {}

impl CArena {
    fn string(&mut self, s: &str) -> Result<*mut c_char, String> {
        let c = cstring(s)?;
        let p = c.as_ptr() as *mut c_char;
        self.strings.push(c);
        Ok(p)
    }

    /// The C form of `infos` (the array's elements point into the arena).
    fn infos(&mut self, infos: &[Info]) -> Result<Vec<pmix_info_t>, String> {
        let mut out = Vec::with_capacity(infos.len());
        for i in infos {
            if i.key.len() > PMIX_MAX_KEYLEN {
                return Err(format!("key {:?} is too long", i.key));
            }
            let mut c = zero_info();
            put_fixed(&mut c.key, &i.key);
            let v = &mut c.value;
            match &i.val {
                Val::Str(s) => {
                    v.type_ = PMIX_STRING;
                    v.data.string = self.string(s)?;
                }
                Val::U32(n) => {
                    v.type_ = PMIX_UINT32;
                    v.data.uint32 = *n;
                }
                Val::U16(n) => {
                    v.type_ = PMIX_UINT16;
                    v.data.uint16 = *n;
                }
                Val::Rank(n) => {
                    v.type_ = PMIX_PROC_RANK;
                    v.data.rank = *n;
                }
                Val::Bool(b) => {
                    v.type_ = PMIX_BOOL;
                    v.data.flag = *b;
                }
                Val::Proc(p) => {
                    let mut b = Box::new(c_proc(p));
                    v.type_ = PMIX_PROC;
                    v.data.proc_ = &mut *b;
                    self.procs.push(b);
                }
                Val::Array(inner) => {
                    let mut arr = self.infos(inner)?;
                    let mut d = Box::new(pmix_data_array_t {
                        type_: PMIX_INFO,
                        size: arr.len(),
                        array: arr.as_mut_ptr().cast(),
                    });
                    v.type_ = PMIX_DATA_ARRAY;
                    v.data.darray = &mut *d;
                    // Moving the Vec and the Box keeps their heap memory where it is.
                    self.arrays.push(arr);
                    self.darrays.push(d);
                }
                Val::NodeRegex(list) | Val::ProcRegex(list) => {
                    let input = cstring(list)?;
                    let mut re: *mut c_char = std::ptr::null_mut();
                    // SAFETY: `input` is a C string; libpmix stores a malloc'd result in `re`.
                    let rc = unsafe {
                        if matches!(i.val, Val::NodeRegex(_)) {
                            PMIx_generate_regex(input.as_ptr(), &mut re)
                        } else {
                            PMIx_generate_ppn(input.as_ptr(), &mut re)
                        }
                    };
                    // SAFETY: `re` is null or libpmix's malloc'd string, ours to free.
                    let re = unsafe { take_malloced(re) };
                    let Some(re) = re.filter(|_| rc == PMIX_SUCCESS) else {
                        return Err(format!("libpmix made no map of {list:?}: {}", err_str(rc)));
                    };
                    v.type_ = PMIX_STRING;
                    v.data.string = self.string(&re)?;
                }
                Val::Locality(cpus) => match locality(cpus) {
                    Some(l) => {
                        v.type_ = PMIX_STRING;
                        v.data.string = self.string(&l)?;
                    }
                    None => continue,
                },
            }
            out.push(c);
        }
        Ok(out)
    }
}

/// libpmix's locality string for a CPU list (`None`: it makes none, e.g. for every CPU).
fn locality(cpus: &str) -> Option<String> {
    let s = cstring(&format!("hwloc:{cpus}")).ok()?;
    let mut set = pmix_cpuset_t { source: std::ptr::null_mut(), bitmap: std::ptr::null_mut() };
    let mut loc: *mut c_char = std::ptr::null_mut();
    // SAFETY: `s` is a C string and `set` a cpuset for libpmix to fill; it is destructed
    // below whatever happened.
    unsafe {
        if PMIx_Parse_cpuset_string(s.as_ptr(), &mut set) == PMIX_SUCCESS {
            PMIx_server_generate_locality_string(&set, &mut loc);
        }
        PMIx_Cpuset_destruct(&mut set);
    }
    // SAFETY: `loc` is null or libpmix's malloc'd string, ours to free.
    unsafe { take_malloced(loc) }
}

fn err_str(rc: pmix_status_t) -> String {
    // SAFETY: PMIx_Error_string returns a static string (or null) for any status.
    let s = unsafe { opt_string(PMIx_Error_string(rc)) };
    format!("{} ({rc})", s.unwrap_or_default())
}

// ---------------------------------------------------------------------------------------
// Upcalls (libpmix's progress thread). Each: copy, post, return.

/// Runs an upcall's body; a panic answers `PMIX_ERROR` instead of unwinding into C.
fn guard(body: impl FnOnce() -> pmix_status_t) -> pmix_status_t {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(PMIX_ERROR)
}

fn upcall(msg: impl FnOnce(u64) -> FromCompanion, done: Completion) -> pmix_status_t {
    let id = next_id();
    post(Event::Upcall { id, msg: msg(id), done: Some(done) });
    PMIX_SUCCESS
}

unsafe extern "C" fn up_client_connected(
    proc_: *const pmix_proc_t,
    _server_object: *mut c_void,
    _cbfunc: pmix_op_cbfunc_t,
    _cbdata: *mut c_void,
) -> pmix_status_t {
    guard(|| {
        // SAFETY: libpmix passes its client's proc.
        let Some(proc_) = (unsafe { opt_proc(proc_) }) else { return PMIX_ERR_BAD_PARAM };
        post(Event::Upcall {
            id: 0,
            msg: FromCompanion::ClientConnected { proc: proc_ },
            done: None,
        });
        // A notification only: done here, the completion is not called.
        PMIX_OPERATION_SUCCEEDED
    })
}

unsafe extern "C" fn up_client_finalized(
    proc_: *const pmix_proc_t,
    _server_object: *mut c_void,
    cbfunc: pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    guard(|| {
        // SAFETY: libpmix passes its client's proc.
        let Some(proc_) = (unsafe { opt_proc(proc_) }) else { return PMIX_ERR_BAD_PARAM };
        upcall(
            |id| FromCompanion::ClientFinalized { id, proc: proc_ },
            Completion::Op(cbfunc, CPtr(cbdata)),
        )
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn up_abort(
    proc_: *const pmix_proc_t,
    _server_object: *mut c_void,
    status: c_int,
    msg: *const c_char,
    procs: *mut pmix_proc_t,
    nprocs: size_t,
    cbfunc: pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    guard(|| {
        // SAFETY: libpmix passes the caller's proc, its message (or null) and `nprocs` procs.
        let (proc_, message, procs) =
            unsafe { (opt_proc(proc_), opt_string(msg), slice(procs, nprocs)) };
        let Some(proc_) = proc_ else { return PMIX_ERR_BAD_PARAM };
        let procs = procs.iter().map(proc_of).collect();
        upcall(
            |id| FromCompanion::Abort {
                id,
                proc: proc_,
                status,
                message: message.unwrap_or_default(),
                procs,
            },
            Completion::Op(cbfunc, CPtr(cbdata)),
        )
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn up_fence_nb(
    procs: *const pmix_proc_t,
    nprocs: size_t,
    info: *const pmix_info_t,
    ninfo: size_t,
    data: *mut c_char,
    ndata: size_t,
    cbfunc: pmix_modex_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    guard(|| {
        // SAFETY: libpmix passes `nprocs` procs, `ninfo` infos and `ndata` bytes (or nulls),
        // valid for this call; all are copied.
        let (procs, info, blob) =
            unsafe { (slice(procs, nprocs), slice(info, ninfo), slice(data as *const u8, ndata)) };
        let collect = find(info, key::COLLECT_DATA).and_then(value_int).is_some_and(|v| v != 0);
        let timeout =
            find(info, key::TIMEOUT).and_then(value_int).and_then(|t| u32::try_from(t).ok());
        let procs = procs.iter().map(proc_of).collect();
        let blob = blob.to_vec();
        upcall(
            |id| FromCompanion::Fence { id, procs, collect, timeout, blob },
            Completion::Modex(cbfunc, CPtr(cbdata)),
        )
    })
}

/// `PMIx_Connect` / `PMIx_Disconnect` of every local participant: `procs` are all of them.
unsafe fn connect_upcall(
    procs: *const pmix_proc_t,
    nprocs: size_t,
    cbfunc: pmix_op_cbfunc_t,
    cbdata: *mut c_void,
    disconnect: bool,
) -> pmix_status_t {
    guard(|| {
        // SAFETY: libpmix passes `nprocs` procs (or null), valid for this call; copied.
        let procs: Vec<Proc> = unsafe { slice(procs, nprocs) }.iter().map(proc_of).collect();
        upcall(
            |id| match disconnect {
                false => FromCompanion::Connect { id, procs },
                true => FromCompanion::Disconnect { id, procs },
            },
            Completion::Op(cbfunc, CPtr(cbdata)),
        )
    })
}

/// `PMIx_Connect` (`DISCONNECT` false) or `PMIx_Disconnect` (true).
unsafe extern "C" fn up_connect<const DISCONNECT: bool>(
    procs: *const pmix_proc_t,
    nprocs: size_t,
    _info: *const pmix_info_t,
    _ninfo: size_t,
    cbfunc: pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    // SAFETY: as libpmix calls it (see `connect_upcall`).
    unsafe { connect_upcall(procs, nprocs, cbfunc, cbdata, DISCONNECT) }
}

unsafe extern "C" fn up_direct_modex(
    proc_: *const pmix_proc_t,
    _info: *const pmix_info_t,
    _ninfo: size_t,
    cbfunc: pmix_modex_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    guard(|| {
        // SAFETY: libpmix passes the proc whose data is wanted.
        let Some(proc_) = (unsafe { opt_proc(proc_) }) else { return PMIX_ERR_BAD_PARAM };
        upcall(
            |id| FromCompanion::DirectModex { id, proc: proc_ },
            Completion::Modex(cbfunc, CPtr(cbdata)),
        )
    })
}

/// Directives that travel with a publish, lookup or unpublish and are not data.
const DIRECTIVES: [&str; 6] =
    [key::RANGE, key::PERSISTENCE, key::TIMEOUT, key::WAIT, key::USERID, key::GRPID];

unsafe extern "C" fn up_publish(
    proc_: *const pmix_proc_t,
    info: *const pmix_info_t,
    ninfo: size_t,
    cbfunc: pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    guard(|| {
        // SAFETY: libpmix passes the caller and `ninfo` infos.
        let (proc_, info) = unsafe { (opt_proc(proc_), slice(info, ninfo)) };
        let Some(proc_) = proc_ else { return PMIX_ERR_BAD_PARAM };
        let range = find(info, key::RANGE).and_then(value_int).unwrap_or(0) as u8;
        let mut pairs = Vec::new();
        for i in info {
            let k = fixed_str(&i.key);
            if DIRECTIVES.contains(&k.as_str()) {
                continue;
            }
            // The name service holds text (MPI publishes port names); bytes (Open MPI's
            // context-id exchange of a connect) go as text marked as such.
            let v = match i.value.type_ {
                // SAFETY: the type says `bo` is set: `size` bytes at `bytes` (or none).
                PMIX_BYTE_OBJECT => unsafe {
                    let bo = i.value.data.bo;
                    let b = slice(bo.bytes as *const u8, bo.size);
                    bytes_text(b)
                },
                _ => match value_text(&i.value) {
                    Some(v) => v,
                    None => return PMIX_ERR_NOT_SUPPORTED,
                },
            };
            pairs.push((k, v));
        }
        upcall(
            |id| FromCompanion::Publish { id, proc: proc_, range, pairs },
            Completion::Op(cbfunc, CPtr(cbdata)),
        )
    })
}

unsafe extern "C" fn up_lookup(
    proc_: *const pmix_proc_t,
    keys: *mut *mut c_char,
    info: *const pmix_info_t,
    ninfo: size_t,
    cbfunc: pmix_lookup_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    guard(|| {
        // SAFETY: libpmix passes the caller, a NULL-terminated key list and `ninfo` infos.
        let (proc_, keys, info) =
            unsafe { (opt_proc(proc_), string_list(keys), slice(info, ninfo)) };
        let Some(proc_) = proc_ else { return PMIX_ERR_BAD_PARAM };
        let wait = find(info, key::WAIT).and_then(value_int).is_some_and(|v| v != 0);
        upcall(
            |id| FromCompanion::Lookup { id, proc: proc_, keys, wait },
            Completion::Lookup(cbfunc, CPtr(cbdata)),
        )
    })
}

unsafe extern "C" fn up_unpublish(
    proc_: *const pmix_proc_t,
    keys: *mut *mut c_char,
    _info: *const pmix_info_t,
    _ninfo: size_t,
    cbfunc: pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    guard(|| {
        // SAFETY: libpmix passes the caller and a NULL-terminated key list.
        let (proc_, keys) = unsafe { (opt_proc(proc_), string_list(keys)) };
        let Some(proc_) = proc_ else { return PMIX_ERR_BAD_PARAM };
        upcall(
            |id| FromCompanion::Unpublish { id, proc: proc_, keys },
            Completion::Op(cbfunc, CPtr(cbdata)),
        )
    })
}

unsafe extern "C" fn up_spawn(
    proc_: *const pmix_proc_t,
    job_info: *const pmix_info_t,
    ninfo: size_t,
    apps: *const pmix_app_t,
    napps: size_t,
    cbfunc: pmix_spawn_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    guard(|| {
        // SAFETY: libpmix passes the caller, `ninfo` infos and `napps` apps.
        let (proc_, job_info, apps) =
            unsafe { (opt_proc(proc_), slice(job_info, ninfo), slice(apps, napps)) };
        let Some(proc_) = proc_ else { return PMIX_ERR_BAD_PARAM };
        let apps = apps
            .iter()
            .map(|a| {
                // SAFETY: an app's strings and lists are C strings and NULL-terminated lists,
                // its `info` has `ninfo` entries.
                unsafe {
                    SpawnApp {
                        cmd: opt_string(a.cmd).unwrap_or_default(),
                        argv: string_list(a.argv),
                        env: string_list(a.env),
                        cwd: opt_string(a.cwd),
                        maxprocs: a.maxprocs,
                        info: info_pairs(slice(a.info, a.ninfo)),
                    }
                }
            })
            .collect();
        let job_info = info_pairs(job_info);
        upcall(
            |id| FromCompanion::Spawn { id, proc: proc_, apps, job_info },
            Completion::Spawn(cbfunc, CPtr(cbdata)),
        )
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn up_group(
    op: pmix_group_operation_t,
    grp: *mut c_char,
    procs: *const pmix_proc_t,
    nprocs: size_t,
    directives: *const pmix_info_t,
    ndirs: size_t,
    cbfunc: pmix_info_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    guard(|| {
        // SAFETY: libpmix passes the group's name, `nprocs` members and `ndirs` directives,
        // valid for this call; all are copied.
        let (grp, procs, dirs) =
            unsafe { (opt_string(grp), slice(procs, nprocs), slice(directives, ndirs)) };
        let procs = procs.iter().map(proc_of).collect();
        let assign_ctxid =
            find(dirs, key::GROUP_ASSIGN_CONTEXT_ID).is_some_and(|i| value_int(i) != Some(0));
        let construct = op == PMIX_GROUP_CONSTRUCT;
        upcall(
            |id| FromCompanion::Group {
                id,
                construct,
                grp: grp.unwrap_or_default(),
                procs,
                assign_ctxid,
            },
            Completion::Info(cbfunc, CPtr(cbdata)),
        )
    })
}

/// Releases the infos of a group's result (`complete_group`).
unsafe extern "C" fn release_infos(cbdata: *mut c_void) {
    let _ = catch_unwind(|| {
        if !cbdata.is_null() {
            // SAFETY: `cbdata` is the `Box<Vec<pmix_info_t>>` given away in `complete_group`,
            // released once by libpmix.
            drop(unsafe { Box::from_raw(cbdata as *mut Vec<pmix_info_t>) });
        }
    });
}

/// Completes a group operation with its context id, if one was assigned.
fn complete_group(c: Completion, status: Status, ctxid: Option<u64>) {
    let Completion::Info(Some(f), d) = c else { return fail(c, status) };
    let mut infos: Vec<pmix_info_t> = Vec::new();
    if let (Some(id), PMIX_SUCCESS) = (ctxid, status) {
        let mut i = zero_info();
        put_fixed(&mut i.key, key::GROUP_CONTEXT_ID);
        i.value.type_ = PMIX_SIZE;
        i.value.data.uint64 = id;
        infos.push(i);
    }
    let n = infos.len();
    let mut held = Box::new(infos);
    let ptr = held.as_mut_ptr();
    let keep = Box::into_raw(held) as *mut c_void;
    // SAFETY: libpmix's info completion with its cbdata, called once; the infos stay alive
    // until it calls `release_infos` with `keep`.
    unsafe { f(status, ptr, n, d.0, Some(release_infos), keep) }
}

unsafe extern "C" fn up_notify_event(
    _code: pmix_status_t,
    _source: *const pmix_proc_t,
    _range: pmix_data_range_t,
    _info: *mut pmix_info_t,
    _ninfo: size_t,
    _cbfunc: pmix_op_cbfunc_t,
    _cbdata: *mut c_void,
) -> pmix_status_t {
    // Events that ranks raise beyond their node are not carried over the tree yet.
    PMIX_ERR_NOT_SUPPORTED
}

/// Completion of our own requests to libpmix: `cbdata` is the token.
unsafe extern "C" fn op_done(status: pmix_status_t, cbdata: *mut c_void) {
    let _ = catch_unwind(|| post(Event::OpDone { token: cbdata as u64, status }));
}

/// Completion of a direct-modex request we made: `cbdata` is the agent's id.
unsafe extern "C" fn dmodex_done(
    status: pmix_status_t,
    data: *mut c_char,
    sz: size_t,
    cbdata: *mut c_void,
) {
    let _ = catch_unwind(|| {
        // SAFETY: libpmix passes `sz` bytes (or null) valid for this call; they are copied.
        let blob = unsafe { slice(data as *const u8, sz) }.to_vec();
        post(Event::Dmodex { id: cbdata as u64, status, blob });
    });
}

/// Release of a blob handed to a modex completion: `cbdata` is its box.
unsafe extern "C" fn release_blob(cbdata: *mut c_void) {
    let _ = catch_unwind(|| {
        if !cbdata.is_null() {
            // SAFETY: `cbdata` is the `Box<Vec<u8>>` given away in `complete_modex`, and
            // libpmix releases it once.
            drop(unsafe { Box::from_raw(cbdata as *mut Vec<u8>) });
        }
    });
}

// ---------------------------------------------------------------------------------------
// The main loop.

/// A request of ours to libpmix, until its completion.
enum Op {
    Register { nspace: String, _keep: CArena },
    Client { nspace: String, rank: u32, env: Vec<(String, String)> },
    Deregister { nspace: String },
    Notify { _keep: CArena },
}

/// A namespace this companion registered (or is registering).
struct Nspace {
    info: NspaceInfo,
    registered: bool,
    /// `SetupFork` ranks waiting for the registration.
    waiting: Vec<u32>,
}

struct Server {
    out: UnixStream,
    pending: HashMap<u64, Completion>,
    ops: HashMap<u64, Op>,
    next_token: u64,
    nspaces: HashMap<String, Nspace>,
    uid: libc::uid_t,
    gid: libc::gid_t,
}

/// How the loop ended.
enum End {
    Finalize,
    AgentGone,
}

pub fn run(opts: Opts) -> Result<(), String> {
    // SAFETY: the descriptor was given to this process for its agent socket alone; we own
    // it from here on (a descriptor that is not a socket fails at the first read or write).
    let sock = unsafe { UnixStream::from_raw_fd(opts.fd) };
    let reader = sock.try_clone().map_err(|e| format!("agent socket {}: {e}", opts.fd))?;

    let (tmpdir, made) = match opts.tmpdir {
        Some(d) => {
            std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
            (d, false)
        }
        None => (own_tmpdir()?, true),
    };
    let tmp_text = tmpdir.to_string_lossy().into_owned();

    let (tx, rx) = channel();
    if EVENTS.set(tx).is_err() {
        return Err("the server runs once per process".into());
    }

    // The module lives as long as the process (libpmix keeps what it points to).
    let module = Box::leak(Box::new(pmix_server_module_t {
        client_connected: Some(up_client_connected),
        client_finalized: Some(up_client_finalized),
        abort: Some(up_abort),
        fence_nb: Some(up_fence_nb),
        direct_modex: Some(up_direct_modex),
        publish: Some(up_publish),
        lookup: Some(up_lookup),
        unpublish: Some(up_unpublish),
        spawn: Some(up_spawn),
        connect: Some(up_connect::<false>),
        disconnect: Some(up_connect::<true>),
        register_events: None,
        deregister_events: None,
        listener: None,
        notify_event: Some(up_notify_event),
        query: None,
        tool_connected: None,
        log: None,
        allocate: None,
        job_control: None,
        monitor: None,
        get_credential: None,
        validate_credential: None,
        iof_pull: None,
        push_stdin: None,
        group: Some(up_group),
        fabric: None,
        client_connected2: None,
    }));
    let mut init = vec![
        Info { key: key::SERVER_TMPDIR.into(), val: Val::Str(tmp_text.clone()) },
        Info { key: key::SYSTEM_TMPDIR.into(), val: Val::Str(tmp_text.clone()) },
        // The node's topology, loaded once here, is handed to the ranks (shared memory, or
        // XML in the job's data): each need not discover the node itself.
        Info { key: key::SHARE_TOPOLOGY.into(), val: Val::Bool(true) },
    ];
    if let Some(h) = &opts.host {
        init.push(Info { key: key::HOSTNAME.into(), val: Val::Str(h.clone()) });
    }
    let mut arena = CArena::default();
    let mut init = arena.infos(&init)?;
    // SAFETY: the module is leaked (lives forever); `init` and what it points to (in
    // `arena`) live across the call, which copies what it keeps.
    let rc = unsafe { PMIx_server_init(module, init.as_mut_ptr(), init.len()) };
    drop(arena);
    if rc != PMIX_SUCCESS {
        return Err(format!("PMIx_server_init failed: {}", err_str(rc)));
    }
    // SAFETY: returns a static string.
    let version = unsafe { opt_string(PMIx_Get_version()) }.unwrap_or_default();

    std::thread::Builder::new()
        .name("agent-reader".into())
        .spawn(move || {
            let mut r = reader;
            loop {
                match frame::read_frame::<_, ToCompanion>(&mut r) {
                    Ok(Some(m)) => post(Event::Agent(m)),
                    Ok(None) => break post(Event::AgentGone(None)),
                    Err(e) => break post(Event::AgentGone(Some(e.to_string()))),
                }
            }
        })
        .map_err(|e| format!("cannot start the reader thread: {e}"))?;

    // SAFETY: getuid and getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut s = Server {
        out: sock,
        pending: HashMap::new(),
        ops: HashMap::new(),
        next_token: 1,
        nspaces: HashMap::new(),
        uid,
        gid,
    };
    let mut result =
        s.send(&FromCompanion::Ready { pid: std::process::id(), version, tmpdir: tmp_text });
    let mut end = End::AgentGone;
    while result.is_ok() {
        let Ok(ev) = rx.recv() else { break };
        match s.event(ev) {
            Ok(None) => {}
            Ok(Some(e)) => {
                end = e;
                break;
            }
            Err(e) => result = Err(e),
        }
    }
    // Ranks still waiting are told the host is gone, then the server goes.
    for (_, c) in s.pending.drain() {
        fail(c, PMIX_ERR_LOST_CONNECTION);
    }
    for ns in s.nspaces.values() {
        remove_dirs(&ns.info);
    }
    // SAFETY: the server was initialized above; no call of ours is in flight.
    let rc = unsafe { PMIx_server_finalize() };
    if made {
        let _ = std::fs::remove_dir_all(&tmpdir);
    }
    if let End::Finalize = end {
        if rc != PMIX_SUCCESS {
            let _ = s.send(&FromCompanion::Warning {
                message: format!("PMIx_server_finalize: {}", err_str(rc)),
            });
        }
        let _ = s.send(&FromCompanion::Bye);
    }
    result.map_err(|e| e.to_string())
}

/// A fresh directory of our own for the server's files: `libi-pmix.PID.RANDOM`, mode 0700,
/// made by `mkdir` (which fails on anything already there, a link included: another user
/// cannot have us use a directory of theirs), in `$XDG_RUNTIME_DIR` when that is a private
/// directory of ours (a tmpfs: no disk inode work per rank), else in `$TMPDIR` (`/tmp`).
fn own_tmpdir() -> Result<PathBuf, String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let private = |d: &PathBuf| {
        std::fs::symlink_metadata(d)
            .is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o077 == 0)
    };
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|d| d.is_absolute() && private(d))
        .unwrap_or_else(std::env::temp_dir);
    let mut last = String::new();
    for _ in 0..8 {
        let mut r = [0u8; 8];
        if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
            use std::io::Read;
            let _ = f.read_exact(&mut r);
        }
        let name = format!("libi-pmix.{}.{:016x}", std::process::id(), u64::from_ne_bytes(r));
        let d = base.join(name);
        match std::fs::DirBuilder::new().mode(0o700).create(&d) {
            Ok(()) => return Ok(d),
            Err(e) => last = format!("{}: {e}", d.display()),
        }
    }
    Err(last)
}

fn remove_dirs(ns: &NspaceInfo) {
    // A namespace without ranks here has none (and no `tmpdir` to be below).
    if ns.this_node != libi_pmix::proto::REMOTE_NODE {
        let _ = std::fs::remove_dir_all(jobinfo::nspace_dir(ns));
    }
}

/// Completes an upcall with an error (or a bare status).
fn fail(c: Completion, status: Status) {
    // SAFETY: each completion is libpmix's function with its own cbdata, called once (the
    // completion is consumed); null data is allowed with an error status.
    unsafe {
        match c {
            Completion::Op(Some(f), d) => f(status, d.0),
            Completion::Modex(Some(f), d) => {
                f(status, std::ptr::null(), 0, d.0, None, std::ptr::null_mut())
            }
            Completion::Lookup(Some(f), d) => f(status, std::ptr::null_mut(), 0, d.0),
            Completion::Spawn(Some(f), d) => f(status, std::ptr::null_mut(), d.0),
            Completion::Info(Some(f), d) => {
                f(status, std::ptr::null_mut(), 0, d.0, None, std::ptr::null_mut())
            }
            _ => {}
        }
    }
}

impl Server {
    fn send(&mut self, msg: &FromCompanion) -> Result<(), FrameError> {
        let bytes = frame::encode(msg)?;
        self.out.write_all(&bytes)?;
        Ok(())
    }

    fn warn(&mut self, message: String) -> Result<(), FrameError> {
        self.send(&FromCompanion::Warning { message })
    }

    fn token(&mut self, op: Op) -> u64 {
        let t = self.next_token;
        self.next_token += 1;
        self.ops.insert(t, op);
        t
    }

    fn event(&mut self, ev: Event) -> Result<Option<End>, FrameError> {
        match ev {
            Event::Upcall { id, msg, done } => {
                if let Some(d) = done {
                    self.pending.insert(id, d);
                }
                self.send(&msg)?;
            }
            Event::OpDone { token, status } => self.op_done(token, status)?,
            Event::Dmodex { id, status, blob } => {
                self.send(&FromCompanion::DmodexData { id, status, blob })?
            }
            Event::Agent(m) => return self.agent(m),
            Event::AgentGone(why) => {
                if let Some(why) = why {
                    // The socket may still take a last word.
                    let _ = self.warn(format!("agent connection: {why}"));
                }
                return Ok(Some(End::AgentGone));
            }
        }
        Ok(None)
    }

    fn op_done(&mut self, token: u64, status: Status) -> Result<(), FrameError> {
        match self.ops.remove(&token) {
            Some(Op::Register { nspace, .. }) => {
                let waiting = match self.nspaces.get_mut(&nspace) {
                    Some(ns) if status == PMIX_SUCCESS => {
                        ns.registered = true;
                        std::mem::take(&mut ns.waiting)
                    }
                    _ => Vec::new(),
                };
                if status != PMIX_SUCCESS {
                    if let Some(ns) = self.nspaces.remove(&nspace) {
                        remove_dirs(&ns.info);
                    }
                }
                self.send(&FromCompanion::Registered { nspace: nspace.clone(), status })?;
                if !waiting.is_empty() {
                    self.setup_fork(&nspace, waiting)?;
                }
            }
            Some(Op::Client { nspace, rank, env }) => {
                let env = if status == PMIX_SUCCESS { env } else { Vec::new() };
                self.send(&FromCompanion::ForkEnv { nspace, rank, status, env })?;
            }
            Some(Op::Deregister { nspace }) => {
                self.send(&FromCompanion::Deregistered { nspace })?;
            }
            Some(Op::Notify { .. }) if status != PMIX_SUCCESS => {
                self.warn(format!(
                    "an event for the ranks was not delivered: {}",
                    err_str(status)
                ))?;
            }
            Some(Op::Notify { .. }) | None => {}
        }
        Ok(())
    }

    /// A request of ours was handed to libpmix and answered `rc`: on `PMIX_SUCCESS` its
    /// completion comes later through `op_done`; anything else completes it now.
    fn started(&mut self, token: u64, rc: pmix_status_t) -> Result<(), FrameError> {
        match rc {
            PMIX_SUCCESS => Ok(()),
            PMIX_OPERATION_SUCCEEDED => self.op_done(token, PMIX_SUCCESS),
            rc => self.op_done(token, rc),
        }
    }

    fn agent(&mut self, m: ToCompanion) -> Result<Option<End>, FrameError> {
        match m {
            ToCompanion::RegisterNspace(info) => self.register(*info)?,
            ToCompanion::DeregisterNspace { nspace } => {
                match self.nspaces.remove(&nspace) {
                    Some(ns) => {
                        remove_dirs(&ns.info);
                        let c = cstring(&nspace).unwrap_or_default();
                        let t = self.token(Op::Deregister { nspace });
                        // SAFETY: `c` is a C string that libpmix copies; `op_done` gets the token.
                        unsafe {
                            PMIx_server_deregister_nspace(
                                c.as_ptr(),
                                Some(op_done),
                                t as *mut c_void,
                            )
                        };
                    }
                    None => self.send(&FromCompanion::Deregistered { nspace })?,
                }
            }
            ToCompanion::SetupFork { nspace, ranks } => match self.nspaces.get_mut(&nspace) {
                Some(ns) if !ns.registered => ns.waiting.extend(ranks),
                Some(_) => self.setup_fork(&nspace, ranks)?,
                None => {
                    for rank in ranks {
                        self.send(&FromCompanion::ForkEnv {
                            nspace: nspace.clone(),
                            rank,
                            status: PMIX_ERR_NOT_FOUND,
                            env: Vec::new(),
                        })?;
                    }
                }
            },
            ToCompanion::FenceDone { id, status, blob }
            | ToCompanion::ModexData { id, status, blob } => match self.pending.remove(&id) {
                Some(Completion::Modex(Some(f), d)) => complete_modex(f, d, status, blob),
                // libpmix gave no completion to call.
                Some(Completion::Modex(None, _)) => {}
                other => self.mismatch(id, other, "modex data")?,
            },
            ToCompanion::Done { id, status } => match self.pending.remove(&id) {
                Some(Completion::Op(Some(f), d)) => {
                    // SAFETY: libpmix's op completion with its cbdata, called once.
                    unsafe { f(status, d.0) }
                }
                Some(Completion::Op(None, _)) => {}
                other => self.mismatch(id, other, "a status")?,
            },
            ToCompanion::LookupResult { id, status, found } => match self.pending.remove(&id) {
                Some(Completion::Lookup(Some(f), d)) => complete_lookup(f, d, status, &found),
                Some(Completion::Lookup(None, _)) => {}
                other => self.mismatch(id, other, "a lookup result")?,
            },
            ToCompanion::SpawnResult { id, status, nspace } => match self.pending.remove(&id) {
                Some(Completion::Spawn(Some(f), d)) => {
                    let ns = nspace.as_deref().and_then(|n| cstring(n).ok());
                    let p = ns.as_ref().map_or(std::ptr::null_mut(), |c| c.as_ptr() as *mut c_char);
                    // SAFETY: libpmix's spawn completion with its cbdata, called once; it
                    // copies the namespace during the call.
                    unsafe { f(status, p, d.0) }
                }
                Some(Completion::Spawn(None, _)) => {}
                other => self.mismatch(id, other, "a spawn result")?,
            },
            ToCompanion::GroupDone { id, status, ctxid } => match self.pending.remove(&id) {
                Some(c @ Completion::Info(..)) => complete_group(c, status, ctxid),
                other => self.mismatch(id, other, "a group result")?,
            },
            ToCompanion::DmodexRequest { id, proc } => {
                let p = c_proc(&proc);
                // SAFETY: `p` is read during the call; `dmodex_done` gets the agent's id.
                let rc =
                    unsafe { PMIx_server_dmodex_request(&p, Some(dmodex_done), id as *mut c_void) };
                if rc != PMIX_SUCCESS {
                    self.send(&FromCompanion::DmodexData { id, status: rc, blob: Vec::new() })?;
                }
            }
            ToCompanion::Notify { code, nspace, affected, host, exit_code } => {
                self.notify(code, &nspace, &affected, host, exit_code)?
            }
            ToCompanion::Finalize => return Ok(Some(End::Finalize)),
        }
        Ok(None)
    }

    /// The agent answered an id with the wrong kind of message, or one we do not know.
    fn mismatch(&mut self, id: u64, c: Option<Completion>, what: &str) -> Result<(), FrameError> {
        let known = c.is_some();
        if let Some(c) = c {
            fail(c, PMIX_ERROR);
        }
        self.warn(if known {
            format!("request {id} was answered with {what}, which is not its kind of answer")
        } else {
            format!("{what} for request {id}, which is not waiting")
        })
    }

    fn register(&mut self, info: NspaceInfo) -> Result<(), FrameError> {
        let nspace = info.nspace.clone();
        let refuse = |s: &mut Server, why: String| -> Result<(), FrameError> {
            s.send(&FromCompanion::Registered {
                nspace: nspace.clone(),
                status: PMIX_ERR_BAD_PARAM,
            })?;
            s.warn(why)
        };
        if self.nspaces.contains_key(&nspace) {
            return refuse(self, format!("namespace {nspace:?} is registered already"));
        }
        let reg = match jobinfo::registration(&info) {
            Ok(r) => r,
            Err(e) => return refuse(self, e.to_string()),
        };
        // A namespace without ranks here gets no session directories.
        let remote = info.this_node == libi_pmix::proto::REMOTE_NODE;
        for dir in std::iter::once(jobinfo::nspace_dir(&info))
            .filter(|_| !remote)
            .chain(info.local.iter().map(|l| jobinfo::proc_dir(&info, l.rank)))
        {
            if let Err(e) = std::fs::create_dir_all(&dir) {
                remove_dirs(&info);
                return refuse(self, format!("session directory {dir}: {e}"));
            }
        }
        let mut arena = CArena::default();
        let mut c = match arena.infos(&reg) {
            Ok(c) => c,
            Err(e) => {
                remove_dirs(&info);
                return refuse(self, e);
            }
        };
        let ptr = c.as_mut_ptr();
        let n = c.len();
        arena.arrays.push(c);
        let cns = cstring(&nspace).unwrap_or_default();
        let nlocal = info.local.len() as c_int;
        self.nspaces
            .insert(nspace.clone(), Nspace { info, registered: false, waiting: Vec::new() });
        let t = self.token(Op::Register { nspace: nspace.clone(), _keep: arena });
        // SAFETY: the info array and everything it points to are kept in the op's arena
        // until `op_done` reports the registration complete; the namespace is copied.
        let rc = unsafe {
            PMIx_server_register_nspace(
                cns.as_ptr(),
                nlocal,
                ptr,
                n,
                Some(op_done),
                t as *mut c_void,
            )
        };
        self.started(t, rc)
    }

    fn setup_fork(&mut self, nspace: &str, ranks: Vec<u32>) -> Result<(), FrameError> {
        for rank in ranks {
            let p = c_proc(&Proc { nspace: nspace.to_string(), rank });
            let mut envp: *mut *mut c_char = std::ptr::null_mut();
            // SAFETY: `p` is read during the call; libpmix appends malloc'd "NAME=VALUE"
            // strings to the (initially empty) malloc'd array `envp`, which we free below.
            let rc = unsafe { PMIx_server_setup_fork(&p, &mut envp) };
            let mut env = Vec::new();
            if !envp.is_null() {
                for i in 0.. {
                    // SAFETY: the array is NULL-terminated; each entry is ours to free.
                    let e = unsafe { *envp.add(i) };
                    if e.is_null() {
                        break;
                    }
                    // SAFETY: as above.
                    if let Some(kv) = unsafe { take_malloced(e) } {
                        if let Some((k, v)) = kv.split_once('=') {
                            env.push((k.to_string(), v.to_string()));
                        }
                    }
                }
                // SAFETY: the array itself was malloc'd by libpmix.
                unsafe { libc::free(envp.cast()) };
            }
            if rc != PMIX_SUCCESS {
                self.send(&FromCompanion::ForkEnv {
                    nspace: nspace.to_string(),
                    rank,
                    status: rc,
                    env: Vec::new(),
                })?;
                continue;
            }
            let t = self.token(Op::Client { nspace: nspace.to_string(), rank, env });
            // SAFETY: `p` is copied during the call; `op_done` gets the token.
            let rc = unsafe {
                PMIx_server_register_client(
                    &p,
                    self.uid,
                    self.gid,
                    std::ptr::null_mut(),
                    Some(op_done),
                    t as *mut c_void,
                )
            };
            self.started(t, rc)?;
        }
        Ok(())
    }

    fn notify(
        &mut self,
        code: Status,
        nspace: &str,
        affected: &[Proc],
        host: Option<String>,
        exit_code: Option<i32>,
    ) -> Result<(), FrameError> {
        // One event per affected process: its source, in its namespace's range.
        let sources: Vec<Proc> = if affected.is_empty() {
            vec![Proc { nspace: nspace.to_string(), rank: PMIX_RANK_WILDCARD }]
        } else {
            affected.to_vec()
        };
        for src in sources {
            let mut infos =
                vec![Info { key: key::EVENT_AFFECTED_PROC.into(), val: Val::Proc(src.clone()) }];
            if let Some(h) = &host {
                infos.push(Info { key: key::HOSTNAME.into(), val: Val::Str(h.clone()) });
            }
            let mut arena = CArena::default();
            let mut c = match arena.infos(&infos) {
                Ok(c) => c,
                Err(e) => return self.warn(e),
            };
            if let Some(x) = exit_code {
                let mut i = zero_info();
                put_fixed(&mut i.key, key::EXIT_CODE);
                i.value.type_ = PMIX_INT;
                i.value.data.integer = x;
                c.push(i);
            }
            let ptr = c.as_ptr();
            let n = c.len();
            arena.arrays.push(c);
            let source = Box::new(c_proc(&src));
            let sp: *const pmix_proc_t = &*source;
            arena.procs.push(source);
            let t = self.token(Op::Notify { _keep: arena });
            // SAFETY: source and infos live in the op's arena until `op_done`.
            let rc = unsafe {
                PMIx_Notify_event(
                    code,
                    sp,
                    PMIX_RANGE_NAMESPACE,
                    ptr,
                    n,
                    Some(op_done),
                    t as *mut c_void,
                )
            };
            self.started(t, rc)?;
        }
        Ok(())
    }
}

/// Calls a modex completion with the agent's blob; libpmix releases the blob with
/// [`release_blob`] when it has stored it.
fn complete_modex(
    f: unsafe extern "C" fn(
        pmix_status_t,
        *const c_char,
        size_t,
        *mut c_void,
        pmix_release_cbfunc_t,
        *mut c_void,
    ),
    d: CPtr,
    status: Status,
    blob: Vec<u8>,
) {
    let blob = Box::new(blob);
    let (ptr, len) = if blob.is_empty() {
        (std::ptr::null(), 0)
    } else {
        (blob.as_ptr() as *const c_char, blob.len())
    };
    let keep = Box::into_raw(blob);
    // SAFETY: libpmix's modex completion with its cbdata, called once; the blob stays
    // alive until libpmix calls `release_blob` with `keep`.
    unsafe { f(status, ptr, len, d.0, Some(release_blob), keep.cast()) }
}

/// Calls a lookup completion with the agent's answer (libpmix packs it during the call).
fn complete_lookup(
    f: unsafe extern "C" fn(pmix_status_t, *mut pmix_pdata_t, size_t, *mut c_void),
    d: CPtr,
    status: Status,
    found: &[Published],
) {
    let mut strings = Vec::with_capacity(found.len());
    let mut blobs: Vec<Vec<u8>> = Vec::new();
    let mut pdata: Vec<pmix_pdata_t> = Vec::with_capacity(found.len());
    for p in found {
        let mut e = pmix_pdata_t {
            proc_: c_proc(&p.publisher),
            key: [0; PMIX_MAX_KEYLEN + 1],
            value: zero_value(),
        };
        put_fixed(&mut e.key, &p.key);
        if let Some(mut b) = text_bytes(&p.value) {
            e.value.type_ = PMIX_BYTE_OBJECT;
            e.value.data.bo = pmix_byte_object_t { bytes: b.as_mut_ptr().cast(), size: b.len() };
            blobs.push(b);
        } else {
            let Ok(v) = cstring(&p.value) else { continue };
            e.value.type_ = PMIX_STRING;
            e.value.data.string = v.as_ptr() as *mut c_char;
            strings.push(v);
        }
        pdata.push(e);
    }
    let status =
        if status == PMIX_SUCCESS && pdata.is_empty() { PMIX_ERR_NOT_FOUND } else { status };
    let ptr = if pdata.is_empty() { std::ptr::null_mut() } else { pdata.as_mut_ptr() };
    // SAFETY: libpmix's lookup completion with its cbdata, called once; `pdata` and the
    // strings it points to live across the call, during which libpmix packs them.
    unsafe { f(status, ptr, pdata.len(), d.0) }
    drop(strings);
    drop(blobs);
}

/// How a published byte object travels in the (text) name service: marked, in hex.
const BYTES_MARK: &str = "libi-pmix-bytes:";

fn bytes_text(b: &[u8]) -> String {
    let mut s = String::with_capacity(BYTES_MARK.len() + 2 * b.len());
    s.push_str(BYTES_MARK);
    for x in b {
        s.push_str(&format!("{x:02x}"));
    }
    s
}

/// The bytes of a value made by [`bytes_text`] (`None`: plain text).
fn text_bytes(t: &str) -> Option<Vec<u8>> {
    let hex = t.strip_prefix(BYTES_MARK)?;
    if hex.len() % 2 != 0 {
        return None;
    }
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok()).collect()
}

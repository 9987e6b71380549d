//! `liblibi.so`: the LIBI session API for C and C++ (`libi.h`). A thin layer over
//! `libi-session`: the front end and the member are process-wide (one each), every call
//! returns a `libi_rc_e`, never exits, and leaves a one-line message for
//! `LIBI_errorString()` when it fails.
//!
//! Threads: the front end is shared (`Arc`), taken from its slot under a lock held only for
//! that; its calls lock one session at a time and never across a wait, so calls on
//! different sessions, and a send and a receive on one session, run at the same time from
//! different threads. Member calls are serialized (one lock).
#![allow(non_snake_case, clippy::missing_safety_doc)]
#![deny(clippy::undocumented_unsafe_blocks)]

use libi_session::fe::{
    FrontEnd, HostDist, Options, Output, PollFlags, ProcDist, SessionId, Status,
};
use libi_session::member::Member;
use libi_session::{Code, Error, MAX_MSG};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

static FE: Mutex<Option<Arc<FrontEnd>>> = Mutex::new(None);
static MEMBER: Mutex<Option<Member>> = Mutex::new(None);
/// This process is a member of a session (between `LIBI_init` and `LIBI_finalize`): the
/// front end's calls are refused with `LIBI_EFRONTENDONLY`.
static MEMBER_ACTIVE: AtomicBool = AtomicBool::new(false);
/// The master's connection to the front end (between `LIBI_init` and `LIBI_finalize`).
static FE_LINK: Mutex<Option<Arc<libi_session::member::FeLink>>> = Mutex::new(None);
/// Whether the front end (the member) was finalized since its last init: the message of a
/// call without one says which of the two it is.
static FE_FINALIZED: AtomicBool = AtomicBool::new(false);
static MEMBER_FINALIZED: AtomicBool = AtomicBool::new(false);

/// The error of a front-end call with no front end.
fn no_fe() -> Error {
    if FE_FINALIZED.load(Ordering::Relaxed) {
        Error::new(Code::EInit, "LIBI_fe_finalize was called (LIBI_fe_init starts again)")
    } else {
        Error::new(Code::EInit, "LIBI_fe_init was not called")
    }
}

/// The error of a member call with no member.
fn no_member() -> Error {
    if MEMBER_FINALIZED.load(Ordering::Relaxed) {
        Error::new(Code::EInit, "LIBI_finalize was called")
    } else {
        Error::new(Code::EInit, "LIBI_init was not called")
    }
}

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

fn fail(e: Error) -> Code {
    let text = CString::new(e.message.replace('\0', " ")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = text);
    e.code
}

fn done(r: Result<(), Error>) -> Code {
    r.map_or_else(fail, |_| Code::Ok)
}

fn arg(what: &str) -> Code {
    fail(Error::new(Code::EArg, format!("{what}: NULL or negative")))
}

/// The message of this thread's last failed call ("" if none).
#[no_mangle]
pub extern "C" fn LIBI_errorString() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}

/// The name of a result code (`"LIBI_ELAUNCH"`).
#[no_mangle]
pub extern "C" fn LIBI_rcName(rc: c_int) -> *const c_char {
    const NAMES: [&CStr; 15] = [
        c"LIBI_OK",
        c"LIBI_YES",
        c"LIBI_NO",
        c"LIBI_NOTIMPL",
        c"LIBI_EINIT",
        c"LIBI_ELAUNCH",
        c"LIBI_ESESS",
        c"LIBI_EFRONTENDONLY",
        c"LIBI_ESESSALREADYLAUNCHED",
        c"LIBI_EIO",
        c"LIBI_EHOSTDIST",
        c"LIBI_ESESSFAILED",
        c"LIBI_EARG",
        c"LIBI_ENOTMASTER",
        c"LIBI_ETIMEOUT",
    ];
    usize::try_from(rc)
        .ok()
        .and_then(|i| NAMES.get(i))
        .map_or(c"LIBI_UNKNOWN".as_ptr(), |n| n.as_ptr())
}

/// The error of a front-end call in a member.
fn member_not_fe() -> Error {
    Error::new(
        Code::EFrontEndOnly,
        "a front-end call in a member of a session (this process called LIBI_init)",
    )
}

/// The front end, shared: the slot's lock is held only to clone it.
fn fe() -> Result<Arc<FrontEnd>, Error> {
    if MEMBER_ACTIVE.load(Ordering::SeqCst) {
        return Err(member_not_fe());
    }
    FE.lock().unwrap_or_else(|e| e.into_inner()).clone().ok_or_else(no_fe)
}

fn with_fe(f: impl FnOnce(&FrontEnd) -> Result<(), Error>) -> Code {
    match fe() {
        Ok(fe) => done(f(&fe)),
        Err(e) => fail(e),
    }
}

fn with_member(f: impl FnOnce(&mut Member) -> Result<(), Error>) -> Code {
    match MEMBER.lock() {
        Ok(mut g) => match g.as_mut() {
            Some(m) => done(f(m)),
            None => fail(no_member()),
        },
        Err(_) => fail(Error::new(Code::EInit, "the member is broken by an earlier panic")),
    }
}

/// The directory of this library (where `libi-mpiexec` is looked for first).
fn library_dir() -> Option<std::path::PathBuf> {
    // SAFETY: `Dl_info` holds pointers and integers only, for which all-zero bytes (NULL, 0) are
    // valid values.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr reads our own code address and fills `info`.
    let found = unsafe { libc::dladdr(LIBI_fe_init as *const c_void, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated path owned by the loader.
    let path = unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned();
    std::path::Path::new(&path).parent().map(|p| p.to_path_buf())
}

#[no_mangle]
pub extern "C" fn LIBI_fe_init(_ver: c_int) -> Code {
    if MEMBER_ACTIVE.load(Ordering::SeqCst) {
        return fail(member_not_fe());
    }
    let mut g = FE.lock().unwrap_or_else(|e| e.into_inner());
    if g.is_some() {
        return fail(Error::new(Code::EInit, "LIBI_fe_init was called already"));
    }
    let dir = library_dir();
    match Options::from_env(dir.as_deref()).and_then(FrontEnd::with_options) {
        Ok(fe) => {
            *g = Some(Arc::new(fe));
            FE_FINALIZED.store(false, Ordering::Relaxed);
            Code::Ok
        }
        Err(e) => fail(e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn LIBI_fe_createSession(sess: *mut c_int) -> Code {
    if sess.is_null() {
        return arg("the session handle pointer");
    }
    with_fe(|fe| {
        let id = fe.create_session();
        // SAFETY: checked non-null; the caller's int.
        unsafe { *sess = id.0 as c_int };
        Ok(())
    })
}

/// A host distribution (`libi.h`).
#[repr(C)]
pub struct host_dist_t {
    pub hostname: *const c_char,
    pub nproc: c_uint,
    pub next: *const host_dist_t,
}

/// An environment variable list (`libi.h`).
#[repr(C)]
pub struct libi_env_t {
    pub name: *const c_char,
    pub value: *const c_char,
    pub next: *const libi_env_t,
}

/// A process distribution (`libi.h`).
#[repr(C)]
pub struct proc_dist_req_t {
    pub sessionHandle: c_int,
    pub proc_path: *const c_char,
    pub proc_argv: *const *const c_char,
    pub hd: *const host_dist_t,
    pub env: *const libi_env_t,
}

/// A C string, or an error naming it.
unsafe fn text(p: *const c_char, what: &str) -> Result<String, Error> {
    if p.is_null() {
        return Err(Error::new(Code::EArg, format!("{what} is NULL")));
    }
    // SAFETY: the caller passes a NUL-terminated string.
    Ok(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// At most this many list entries are read (a cyclic list is an error, not a hang).
const LIST_MAX: usize = 1 << 20;

/// Distribution `i` read from C.
///
/// # Safety
///
/// `d`'s pointers are NULL or as `libi.h` describes them: `proc_path` a NUL-terminated
/// string, `proc_argv` a NULL-terminated array of such strings, `hd` and `env` lists ending
/// with a NULL `next` whose strings are NULL or NUL-terminated.
unsafe fn dist(i: usize, d: &proc_dist_req_t) -> Result<ProcDist, Error> {
    // SAFETY: `proc_path` is NULL or a NUL-terminated string (this function's contract).
    let exe = unsafe { text(d.proc_path, &format!("distribution {i}'s proc_path"))? };
    let mut args = Vec::new();
    if !d.proc_argv.is_null() {
        for k in 0..LIST_MAX {
            // SAFETY: a NULL-terminated array of strings.
            let a = unsafe { *d.proc_argv.add(k) };
            if a.is_null() {
                break;
            }
            // SAFETY: `a` is not NULL, and an entry of a NULL-terminated array of NUL-terminated
            // strings (this function's contract).
            args.push(unsafe { text(a, "an argument")? });
        }
    }
    let mut hosts = Vec::new();
    let mut h = d.hd;
    while !h.is_null() && hosts.len() < LIST_MAX {
        // SAFETY: a list of host_dist_t ending with a NULL next.
        let e = unsafe { &*h };
        // SAFETY: `e` is an entry of the host list, whose `hostname` is NULL or a NUL-terminated
        // string (this function's contract).
        let host = unsafe { text(e.hostname, &format!("distribution {i}: a hostname"))? };
        hosts.push(HostDist { host, procs: e.nproc });
        h = e.next;
    }
    let mut env = Vec::new();
    let mut v = d.env;
    while !v.is_null() && env.len() < LIST_MAX {
        // SAFETY: a list of libi_env_t ending with a NULL next.
        let e = unsafe { &*v };
        // SAFETY: `e` is an entry of the variable list, whose `name` and `value` are NULL or NUL-
        // terminated strings (this function's contract).
        env.push(unsafe { (text(e.name, "a variable name")?, text(e.value, "a variable value")?) });
        v = e.next;
    }
    let session = SessionId(
        u32::try_from(d.sessionHandle)
            .map_err(|_| Error::new(Code::ESess, format!("no session {}", d.sessionHandle)))?,
    );
    Ok(ProcDist { session, exe, args, hosts, env })
}

#[no_mangle]
pub unsafe extern "C" fn LIBI_fe_launch(dists: *const proc_dist_req_t, ndists: c_int) -> Code {
    let Ok(n) = usize::try_from(ndists) else { return arg("the number of distributions") };
    if dists.is_null() && n > 0 {
        return arg("the distributions");
    }
    let mut list = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: the caller's array of `ndists` distributions.
        match unsafe { dist(i, &*dists.add(i)) } {
            Ok(d) => list.push(d),
            Err(e) => return fail(e),
        }
    }
    with_fe(|fe| fe.launch(&list))
}

#[no_mangle]
pub unsafe extern "C" fn LIBI_fe_getMaxMsgBufLen(max: *mut c_int) -> Code {
    if max.is_null() {
        return arg("the length pointer");
    }
    // SAFETY: checked non-null.
    unsafe { *max = MAX_MSG as c_int };
    Code::Ok
}

unsafe fn bytes<'a>(buf: *const c_void, len: c_int) -> Option<&'a [u8]> {
    let n = usize::try_from(len).ok()?;
    if n == 0 {
        return Some(&[]);
    }
    if buf.is_null() {
        return None;
    }
    // SAFETY: the caller's buffer of `len` bytes.
    Some(unsafe { std::slice::from_raw_parts(buf as *const u8, n) })
}

unsafe fn bytes_mut<'a>(buf: *mut c_void, len: usize) -> Option<&'a mut [u8]> {
    if len == 0 {
        return Some(&mut []);
    }
    if buf.is_null() {
        return None;
    }
    // SAFETY: the caller's buffer of `len` bytes.
    Some(unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, len) })
}

/// Hand a message to C: `*buf` from malloc (the caller frees it), `*len` its length.
unsafe fn give(data: Vec<u8>, buf: *mut *mut c_void, len: *mut c_int) -> Result<(), Error> {
    // SAFETY: malloc of at least one byte; checked for NULL.
    let p = unsafe { libc::malloc(data.len().max(1)) } as *mut u8;
    if p.is_null() {
        return Err(Error::new(Code::EIo, "out of memory"));
    }
    // SAFETY: p has room for data.len() bytes; buf and len were checked by the caller.
    unsafe {
        std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len());
        *buf = p as *mut c_void;
        *len = data.len() as c_int;
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn LIBI_fe_sendUsrData(sess: c_int, buf: *const c_void, len: c_int) -> Code {
    // SAFETY: `buf` is NULL or holds `len` bytes (libi.h's contract); `bytes` refuses NULL and a
    // negative length.
    let Some(data) = (unsafe { bytes(buf, len) }) else { return arg("the message") };
    let Ok(s) = u32::try_from(sess) else {
        return fail(Error::new(Code::ESess, format!("no session {sess}")));
    };
    with_fe(|fe| fe.send_usr_data(SessionId(s), data))
}

/// The next message from the session's master: `*buf` is malloc'ed (free it), `*len` its
/// length.
#[no_mangle]
pub unsafe extern "C" fn LIBI_fe_recvUsrData(
    sess: c_int,
    buf: *mut *mut c_void,
    len: *mut c_int,
) -> Code {
    if buf.is_null() || len.is_null() {
        return arg("the message pointers");
    }
    let Ok(s) = u32::try_from(sess) else {
        return fail(Error::new(Code::ESess, format!("no session {sess}")));
    };
    with_fe(|fe| {
        let d = fe.recv_usr_data(SessionId(s))?;
        // SAFETY: `buf` and `len` were checked not NULL; they are the caller's `void *` and `int`
        // (libi.h).
        unsafe { give(d, buf, len) }
    })
}

/// A session handle from C.
fn sid(sess: c_int) -> Result<SessionId, Error> {
    u32::try_from(sess)
        .map(SessionId)
        .map_err(|_| Error::new(Code::ESess, format!("no session {sess}")))
}

/// A timeout in milliseconds from C: negative is no limit.
fn millis(ms: c_int) -> Option<std::time::Duration> {
    u64::try_from(ms).ok().map(std::time::Duration::from_millis)
}

/// As `LIBI_fe_recvUsrData`, waiting at most `timeout_ms` milliseconds (0: not at all,
/// negative: as long as it takes): `LIBI_ETIMEOUT` when no message came in time.
#[no_mangle]
pub unsafe extern "C" fn LIBI_fe_recvUsrDataTimeout(
    sess: c_int,
    buf: *mut *mut c_void,
    len: *mut c_int,
    timeout_ms: c_int,
) -> Code {
    if buf.is_null() || len.is_null() {
        return arg("the message pointers");
    }
    with_fe(|fe| match fe.recv_timeout(sid(sess)?, millis(timeout_ms))? {
        // SAFETY: `buf` and `len` were checked not NULL; they are the caller's `void *` and `int`
        // (libi.h).
        Some(d) => unsafe { give(d, buf, len) },
        None => Err(Error::new(
            Code::ETimeout,
            format!("no message from session {sess} within {timeout_ms} ms"),
        )),
    })
}

/// One session of `LIBI_fe_poll` (`libi.h`).
#[repr(C)]
pub struct libi_poll_t {
    pub sessionHandle: c_int,
    pub revents: c_int,
}

const POLL_DATA: c_int = 1;
const POLL_END: c_int = 2;

/// Wait at most `timeout_ms` (0: not at all, negative: no limit) until one of the `n`
/// sessions has a message waiting (`LIBI_POLL_DATA`) or has ended (`LIBI_POLL_END`); sets
/// each `revents` and `*nready` (0 when the time ran out).
#[no_mangle]
pub unsafe extern "C" fn LIBI_fe_poll(
    items: *mut libi_poll_t,
    n: c_int,
    timeout_ms: c_int,
    nready: *mut c_int,
) -> Code {
    let Ok(count) = usize::try_from(n) else { return arg("the number of sessions") };
    if (items.is_null() && count > 0) || nready.is_null() {
        return arg("the poll items or nready");
    }
    let items = if count == 0 {
        &mut [][..]
    } else {
        // SAFETY: `items` is not NULL (checked, as `count > 0`) and is the caller's array of
        // `n` items (libi.h).
        unsafe { std::slice::from_raw_parts_mut(items, count) }
    };
    with_fe(|fe| {
        let sids: Vec<SessionId> =
            items.iter().map(|i| sid(i.sessionHandle)).collect::<Result<_, _>>()?;
        let flags = fe.poll(&sids, millis(timeout_ms))?;
        let mut ready = 0;
        for (item, f) in items.iter_mut().zip(flags) {
            let PollFlags { data, ended } = f;
            item.revents = if data { POLL_DATA } else { 0 } | if ended { POLL_END } else { 0 };
            ready += (item.revents != 0) as c_int;
        }
        // SAFETY: checked non-null.
        unsafe { *nready = ready };
        Ok(())
    })
}

/// A descriptor for the tool's own event loop: readable while any session has a message
/// waiting or has ended and no call returned its end yet. The library's (do not close or
/// read it); valid until `LIBI_fe_finalize`.
#[no_mangle]
pub unsafe extern "C" fn LIBI_fe_getEventFd(fd: *mut c_int) -> Code {
    if fd.is_null() {
        return arg("the descriptor pointer");
    }
    with_fe(|fe| {
        let f = fe.event_fd()?;
        // SAFETY: checked non-null.
        unsafe { *fd = f };
        Ok(())
    })
}

const STATUS_CREATED: c_int = 0;
const STATUS_LAUNCHING: c_int = 1;
const STATUS_RUNNING: c_int = 2;
const STATUS_ENDED: c_int = 3;
const STATUS_FAILED: c_int = 4;

fn status_code(st: &Status) -> c_int {
    match st {
        Status::Created => STATUS_CREATED,
        Status::Launching => STATUS_LAUNCHING,
        Status::Running => STATUS_RUNNING,
        Status::Ended => STATUS_ENDED,
        Status::Failed(_) => STATUS_FAILED,
    }
}

/// The session's status (`LIBI_STATUS_*`); does not wait.
#[no_mangle]
pub unsafe extern "C" fn LIBI_fe_getSessionStatus(sess: c_int, status: *mut c_int) -> Code {
    if status.is_null() {
        return arg("the status pointer");
    }
    with_fe(|fe| {
        let st = fe.session_status(sid(sess)?)?;
        // SAFETY: checked non-null.
        unsafe { *status = status_code(&st) };
        Ok(())
    })
}

/// The tool's status callback (`libi.h`).
#[allow(non_camel_case_types)]
pub type libi_status_cb_t = Option<
    unsafe extern "C" fn(sess: c_int, status: c_int, message: *const c_char, arg: *mut c_void),
>;

/// The callback's argument, passed back as it is (the tool's pointer; never dereferenced).
struct CbArg(*mut c_void);
// SAFETY: the pointer is only handed back to the tool's callback, as libi.h documents.
unsafe impl Send for CbArg {}
// SAFETY: `CbArg` gives no access to what the pointer points to: a shared one only copies the
// pointer's value.
unsafe impl Sync for CbArg {}

/// Call `cb(session, status, message, arg)` when a session ends (`LIBI_STATUS_ENDED`) or
/// fails (`LIBI_STATUS_FAILED`, the message says why), from a thread of the library; NULL
/// removes it.
#[no_mangle]
pub extern "C" fn LIBI_fe_setStatusCallback(cb: libi_status_cb_t, arg: *mut c_void) -> Code {
    with_fe(|fe| {
        let arg = CbArg(arg);
        let f = cb.map(|cb| {
            Arc::new(move |s: SessionId, st: &Status| {
                let msg = match st {
                    Status::Failed(e) => e.message.clone(),
                    _ => String::new(),
                };
                let msg = CString::new(msg.replace('\0', " ")).unwrap_or_default();
                let a = &arg;
                // SAFETY: the tool's callback, with its own argument.
                unsafe { cb(s.0 as c_int, status_code(st), msg.as_ptr(), a.0) };
            }) as Arc<libi_session::fe::StatusCallback>
        });
        fe.set_status_callback(f);
        Ok(())
    })
}

/// End one session, leaving the others: its master's `LIBI_recvUsrData` returns
/// `LIBI_ESESS`, it gets `LIBI_FINALIZE_WAIT` seconds to end on its own, then is ended.
/// Returns its failure if it failed on its own (and that was not returned before).
#[no_mangle]
pub extern "C" fn LIBI_fe_endSession(sess: c_int) -> Code {
    with_fe(|fe| fe.end_session(sid(sess)?, None))
}

/// Kill one session now, leaving the others; returns once it is gone.
#[no_mangle]
pub extern "C" fn LIBI_fe_killSession(sess: c_int) -> Code {
    with_fe(|fe| fe.kill_session(sid(sess)?))
}

const OUTPUT_LABEL: c_int = 1;

/// A duplicate of the caller's descriptor (`-1`: none), close-on-exec.
fn dup_fd(fd: c_int, what: &str) -> Result<Option<std::os::fd::OwnedFd>, Error> {
    if fd < 0 {
        return Ok(None);
    }
    // SAFETY: fcntl on the caller's descriptor; a new descriptor we own, or -1.
    let d = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if d < 0 {
        return Err(Error::new(
            Code::EArg,
            format!("{what} {fd}: {}", std::io::Error::last_os_error()),
        ));
    }
    // SAFETY: `d` is a fresh descriptor of ours.
    Ok(Some(unsafe { std::os::fd::FromRawFd::from_raw_fd(d) }))
}

/// Where a session's daemons' output goes (before it is launched): their stdout to
/// `out_fd`, their stderr and the session's diagnostics to `err_fd` (the library takes
/// duplicates; -1: the front end's own), each line prefixed with `[rank] ` with
/// `LIBI_OUTPUT_LABEL` in `flags`.
#[no_mangle]
pub extern "C" fn LIBI_fe_setSessionOutput(
    sess: c_int,
    out_fd: c_int,
    err_fd: c_int,
    flags: c_int,
) -> Code {
    with_fe(|fe| {
        let o = Output {
            stdout: dup_fd(out_fd, "out_fd")?,
            stderr: dup_fd(err_fd, "err_fd")?,
            label: flags & OUTPUT_LABEL != 0,
        };
        fe.set_output(sid(sess)?, o)
    })
}

/// A new file for a session's output (created or truncated, mode 0600).
fn out_file(p: *const c_char, what: &str) -> Result<Option<std::os::fd::OwnedFd>, Error> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's NUL-terminated path.
    let path = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| Error::new(Code::EArg, format!("{what} '{path}': {e}")))?;
    Ok(Some(f.into()))
}

/// As `LIBI_fe_setSessionOutput`, to files (created or truncated, mode 0600; NULL: the
/// front end's own stream).
#[no_mangle]
pub extern "C" fn LIBI_fe_setSessionOutputFiles(
    sess: c_int,
    out_path: *const c_char,
    err_path: *const c_char,
    flags: c_int,
) -> Code {
    with_fe(|fe| {
        let o = Output {
            stdout: out_file(out_path, "out_path")?,
            stderr: out_file(err_path, "err_path")?,
            label: flags & OUTPUT_LABEL != 0,
        };
        fe.set_output(sid(sess)?, o)
    })
}

/// Hosts of a launched session, one per member in rank order (`*size` of them).
#[no_mangle]
pub unsafe extern "C" fn LIBI_fe_getHostlistSize(sess: c_int, size: *mut c_uint) -> Code {
    if size.is_null() {
        return arg("the size pointer");
    }
    with_fe(|fe| {
        let s = u32::try_from(sess).map_err(|_| Error::new(Code::ESess, "no such session"))?;
        let n = fe.hosts(SessionId(s))?.len();
        // SAFETY: checked non-null.
        unsafe { *size = n as c_uint };
        Ok(())
    })
}

/// One rank of a running job (`libi.h`).
#[repr(C)]
pub struct libi_proc_desc_t {
    pub rank: c_int,
    pub pid: c_int,
    pub host_name: *const c_char,
    pub executable_name: *const c_char,
}

/// One malloc'ed block: `n` entries of `T`, then the NUL-terminated strings they point to.
/// It writes only the strings: the caller writes the `n` entries (the block is aligned for
/// any `T` no more aligned than malloc's) and hands the block to C, which frees it.
fn block<T>(n: usize, strings: &[&str]) -> Result<(*mut T, Vec<*const c_char>), Error> {
    let head = std::mem::size_of::<T>() * n;
    let total = head + strings.iter().map(|s| s.len() + 1).sum::<usize>();
    // SAFETY: malloc, checked for NULL; T's alignment is at most malloc's.
    let p = unsafe { libc::malloc(total.max(1)) } as *mut u8;
    if p.is_null() {
        return Err(Error::new(Code::EIo, "out of memory"));
    }
    let mut at = head;
    let mut ptrs = Vec::with_capacity(strings.len());
    for s in strings {
        let clean = s.replace('\0', " ");
        // SAFETY: at + len + 1 <= total by construction.
        unsafe {
            std::ptr::copy_nonoverlapping(clean.as_ptr(), p.add(at), clean.len());
            *p.add(at + clean.len()) = 0;
            ptrs.push(p.add(at) as *const c_char);
        }
        at += clean.len() + 1;
    }
    Ok((p as *mut T, ptrs))
}

/// Hand a process table to C: `*table`, one malloc'ed block (free() it) of `*size`
/// entries (NULL and 0 for none).
unsafe fn give_table(
    t: &[libi_session::fe::ProcEntry],
    table: *mut *mut libi_proc_desc_t,
    size: *mut c_int,
) -> Result<(), Error> {
    let strings: Vec<&str> = t.iter().flat_map(|e| [e.host.as_str(), e.exe.as_str()]).collect();
    let (p, ptrs) = block::<libi_proc_desc_t>(t.len(), &strings)?;
    for (i, e) in t.iter().enumerate() {
        // SAFETY: p has room for t.len() entries.
        unsafe {
            p.add(i).write(libi_proc_desc_t {
                rank: e.rank as c_int,
                pid: e.pid,
                host_name: ptrs[2 * i],
                executable_name: ptrs[2 * i + 1],
            })
        };
    }
    // SAFETY: checked non-null by the callers.
    unsafe {
        *table = p;
        *size = t.len() as c_int;
    }
    Ok(())
}

/// The process table of the running `libi-mpiexec` job with front-end pid `job_pid`, in rank
/// order: `*table` (one malloc'ed block: free() it) of `*size` entries.
#[no_mangle]
pub unsafe extern "C" fn LIBI_fe_getJobProcTable(
    job_pid: c_int,
    table: *mut *mut libi_proc_desc_t,
    size: *mut c_int,
) -> Code {
    if table.is_null() || size.is_null() || job_pid <= 0 {
        return arg("the job pid or the table pointers");
    }
    // SAFETY: `table` and `size` were checked not NULL; they are the caller's pointer and `int`
    // (libi.h).
    with_fe(|fe| unsafe { give_table(&fe.job_table(job_pid as u32)?, table, size) })
}

/// The MPIR process table (`MPIR_proctable`) of a running starter (any MPIR starter:
/// `mpiexec.hydra`, `srun`, `libi-mpiexec`), read with gdb: as `LIBI_fe_getJobProcTable`.
#[no_mangle]
pub unsafe extern "C" fn LIBI_fe_getMPIRProcTable(
    starter_pid: c_int,
    table: *mut *mut libi_proc_desc_t,
    size: *mut c_int,
) -> Code {
    if table.is_null() || size.is_null() || starter_pid <= 0 {
        return arg("the starter pid or the table pointers");
    }
    // SAFETY: `table` and `size` were checked not NULL; they are the caller's pointer and `int`
    // (libi.h).
    with_fe(|_| unsafe {
        give_table(&libi_session::fe::mpir_table(starter_pid as u32)?, table, size)
    })
}

/// Daemons next to a running job (`libi.h`).
#[repr(C)]
pub struct libi_attach_req_t {
    pub sessionHandle: c_int,
    pub job_pid: c_int,
    pub how: c_int,
    pub ranks: *const c_int,
    pub nranks: c_int,
    pub proc_path: *const c_char,
    pub proc_argv: *const *const c_char,
    pub env: *const libi_env_t,
}

/// One daemon per host of a running job (or of some of its ranks), each told its host's
/// ranks (`LIBI_getMyProctab`); returns as `LIBI_fe_launch` does.
#[no_mangle]
pub unsafe extern "C" fn LIBI_fe_attachAndLaunch(req: *const libi_attach_req_t) -> Code {
    if req.is_null() {
        return arg("the attach request");
    }
    // SAFETY: checked non-null; the caller's request.
    let r = unsafe { &*req };
    let via = match r.how {
        0 => libi_session::fe::Via::Libi,
        1 => libi_session::fe::Via::Mpir,
        h => {
            return fail(Error::new(
                Code::EArg,
                format!("how = {h}: LIBI_ATTACH_LIBI or LIBI_ATTACH_MPIR"),
            ))
        }
    };
    if r.job_pid <= 0 {
        return arg("the job pid");
    }
    let ranks = if r.ranks.is_null() || r.nranks == 0 {
        None
    } else {
        let Ok(n) = usize::try_from(r.nranks) else { return arg("the number of ranks") };
        // SAFETY: the caller's array of `nranks` ints.
        let list = unsafe { std::slice::from_raw_parts(r.ranks, n) };
        let mut ranks = Vec::with_capacity(n);
        for &x in list {
            let Ok(x) = u32::try_from(x) else { return arg("a rank") };
            ranks.push(x);
        }
        Some(ranks)
    };
    let d = proc_dist_req_t {
        sessionHandle: r.sessionHandle,
        proc_path: r.proc_path,
        proc_argv: r.proc_argv,
        hd: std::ptr::null(),
        env: r.env,
    };
    // SAFETY: the request's strings and lists.
    let d = match unsafe { dist(0, &d) } {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    let a = libi_session::fe::Attach {
        session: d.session,
        job_pid: r.job_pid as u32,
        via,
        ranks,
        exe: d.exe,
        args: d.args,
        env: d.env,
    };
    with_fe(|fe| fe.attach_and_launch(&a))
}

/// One daemon per host of the running job with front-end pid `job_pid`: `*hd` is a host
/// distribution (one malloc'ed block: free() it), nproc 1 per host, to launch daemons next
/// to the job's ranks.
#[no_mangle]
pub unsafe extern "C" fn LIBI_fe_getJobHosts(job_pid: c_int, hd: *mut *mut host_dist_t) -> Code {
    if hd.is_null() || job_pid <= 0 {
        return arg("the job pid or the host pointer");
    }
    with_fe(|fe| {
        let hosts = libi_session::fe::job_hosts(&fe.job_table(job_pid as u32)?);
        if hosts.is_empty() {
            return Err(Error::new(
                Code::ESess,
                format!("the job with pid {job_pid} has no ranks"),
            ));
        }
        let names: Vec<&str> = hosts.iter().map(|h| h.host.as_str()).collect();
        let (p, ptrs) = block::<host_dist_t>(hosts.len(), &names)?;
        for (i, name) in ptrs.iter().enumerate() {
            // The next entry, within the block (`i + 1 < hosts.len()`).
            let next =
                if i + 1 < hosts.len() { p.wrapping_add(i + 1) } else { std::ptr::null_mut() };
            // SAFETY: p has room for hosts.len() entries.
            unsafe { p.add(i).write(host_dist_t { hostname: *name, nproc: 1, next }) };
        }
        // SAFETY: checked non-null.
        unsafe { *hd = p };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn LIBI_fe_finalize() -> Code {
    if MEMBER_ACTIVE.load(Ordering::SeqCst) {
        return fail(member_not_fe());
    }
    let fe = FE.lock().unwrap_or_else(|e| e.into_inner()).take();
    match fe {
        Some(fe) => {
            FE_FINALIZED.store(true, Ordering::Relaxed);
            done(fe.finalize())
        }
        None => fail(no_fe()),
    }
}

#[no_mangle]
pub unsafe extern "C" fn LIBI_init(
    _ver: c_int,
    _argc: *mut c_int,
    _argv: *mut *mut *mut c_char,
) -> Code {
    let Ok(mut g) = MEMBER.lock() else { return Code::EInit };
    if g.is_some() {
        return fail(Error::new(Code::EInit, "LIBI_init was called already"));
    }
    match Member::init() {
        Ok(m) => {
            *FE_LINK.lock().unwrap_or_else(|e| e.into_inner()) = m.fe_link().ok();
            *g = Some(m);
            MEMBER_ACTIVE.store(true, Ordering::SeqCst);
            MEMBER_FINALIZED.store(false, Ordering::Relaxed);
            Code::Ok
        }
        Err(e) => fail(e),
    }
}

#[no_mangle]
pub extern "C" fn LIBI_finalize() -> Code {
    let m = match MEMBER.lock() {
        Ok(mut g) => g.take(),
        Err(_) => return Code::EInit,
    };
    match m {
        Some(m) => {
            MEMBER_ACTIVE.store(false, Ordering::SeqCst);
            FE_LINK.lock().unwrap_or_else(|e| e.into_inner()).take();
            MEMBER_FINALIZED.store(true, Ordering::Relaxed);
            done(m.finalize())
        }
        None => fail(no_member()),
    }
}

#[no_mangle]
pub unsafe extern "C" fn LIBI_getMyRank(rank: *mut c_int) -> Code {
    if rank.is_null() {
        return arg("the rank pointer");
    }
    with_member(|m| {
        // SAFETY: checked non-null.
        unsafe { *rank = m.rank() as c_int };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn LIBI_getSize(size: *mut c_int) -> Code {
    if size.is_null() {
        return arg("the size pointer");
    }
    with_member(|m| {
        // SAFETY: checked non-null.
        unsafe { *size = m.size() as c_int };
        Ok(())
    })
}

/// `LIBI_YES` for the master (rank 0), `LIBI_NO` for the others.
#[no_mangle]
pub extern "C" fn LIBI_amMaster() -> Code {
    let mut master = false;
    let rc = with_member(|m| {
        master = m.is_master();
        Ok(())
    });
    match rc {
        Code::Ok if master => Code::Yes,
        Code::Ok => Code::No,
        e => e,
    }
}

/// The paper's spelling of [`LIBI_amMaster`].
#[no_mangle]
pub extern "C" fn LIBI_amIMaster() -> Code {
    LIBI_amMaster()
}

#[no_mangle]
pub extern "C" fn LIBI_barrier() -> Code {
    with_member(|m| m.barrier())
}

/// `len` bytes at `buf` (none for 0, whatever `buf`), or `None` for NULL.
unsafe fn bytes_n<'a>(buf: *const c_void, len: usize) -> Option<&'a [u8]> {
    if len == 0 {
        return Some(&[]);
    }
    if buf.is_null() {
        return None;
    }
    // SAFETY: the caller's buffer of `len` bytes.
    Some(unsafe { std::slice::from_raw_parts(buf as *const u8, len) })
}

/// The length argument of collective `call` (negative: `EArg`).
fn coll_len(call: &str, len: c_int) -> Result<usize, Error> {
    usize::try_from(len)
        .map_err(|_| Error::new(Code::EArg, format!("{call}: negative length {len}")))
}

fn null(call: &str, what: &str) -> Error {
    Error::new(Code::EArg, format!("{call}: {what} is NULL"))
}

/// A malloc'ed copy of `data` (at least one byte: never NULL on success).
fn malloced(data: &[u8]) -> Result<*mut c_void, Error> {
    // SAFETY: malloc of at least one byte, checked for NULL.
    let p = unsafe { libc::malloc(data.len().max(1)) } as *mut u8;
    if p.is_null() {
        return Err(Error::new(Code::EIo, "out of memory"));
    }
    // SAFETY: p has room for data.len() bytes.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
    Ok(p as *mut c_void)
}

// The collectives: sizes in size_t arithmetic, the limit (MAX_COLL) checked on every member
// before any buffer is looked at; 0 bytes is a no-op that touches no buffer.

#[no_mangle]
pub unsafe extern "C" fn LIBI_broadcast(buf: *mut c_void, len: c_int) -> Code {
    with_member(|m| {
        let n = coll_len("broadcast", len)?;
        if n == 0 {
            return Ok(());
        }
        libi_session::member::check_len("broadcast", n)?;
        // SAFETY: `buf` is NULL or holds `len` bytes, `n` of them (libi.h); `bytes_mut` refuses
        // NULL.
        let b = unsafe { bytes_mut(buf, n) }.ok_or_else(|| null("broadcast", "buf"))?;
        m.broadcast(b)
    })
}

/// The master's `sendbuf` holds size × `len` bytes; every member gets its `len` in
/// `recvbuf`.
#[no_mangle]
pub unsafe extern "C" fn LIBI_scatter(
    sendbuf: *const c_void,
    len: c_int,
    recvbuf: *mut c_void,
) -> Code {
    with_member(|m| {
        let n = coll_len("scatter", len)?;
        let total = m.total("scatter", n)?;
        if n == 0 {
            return Ok(());
        }
        let total = if m.is_master() { total } else { 0 };
        // SAFETY: the master's `sendbuf` holds size × `len` bytes, `total` (libi.h); the others' is
        // not read (0 bytes). `bytes_n` refuses NULL.
        let send = unsafe { bytes_n(sendbuf, total) }.ok_or_else(|| null("scatter", "sendbuf"))?;
        // SAFETY: every member's `recvbuf` holds `len` bytes, `n` (libi.h); `bytes_mut` refuses
        // NULL.
        let recv = unsafe { bytes_mut(recvbuf, n) }.ok_or_else(|| null("scatter", "recvbuf"))?;
        m.scatter(send, recv)
    })
}

/// Every member's `len` bytes of `sendbuf` land in the master's `recvbuf` (size × `len`
/// bytes, rank order); other members' `recvbuf` is not used.
#[no_mangle]
pub unsafe extern "C" fn LIBI_gather(
    sendbuf: *const c_void,
    len: c_int,
    recvbuf: *mut c_void,
) -> Code {
    with_member(|m| {
        let n = coll_len("gather", len)?;
        let total = m.total("gather", n)?;
        if n == 0 {
            return Ok(());
        }
        // SAFETY: every member's `sendbuf` holds `len` bytes, `n` (libi.h); `bytes_n` refuses NULL.
        let send = unsafe { bytes_n(sendbuf, n) }.ok_or_else(|| null("gather", "sendbuf"))?;
        let total = if m.is_master() { total } else { 0 };
        // SAFETY: the master's `recvbuf` holds size × `len` bytes, `total` (libi.h); the others' is
        // not written (0 bytes). `bytes_mut` refuses NULL.
        let recv = unsafe { bytes_mut(recvbuf, total) }.ok_or_else(|| null("gather", "recvbuf"))?;
        m.gather(send, recv)
    })
}

/// Every member's `len` bytes of `sendbuf` land in every member's `recvbuf` (size × `len`
/// bytes, rank order).
#[no_mangle]
pub unsafe extern "C" fn LIBI_allgather(
    sendbuf: *const c_void,
    len: c_int,
    recvbuf: *mut c_void,
) -> Code {
    with_member(|m| {
        let n = coll_len("allgather", len)?;
        let total = m.total("allgather", n)?;
        if n == 0 {
            return Ok(());
        }
        // SAFETY: every member's `sendbuf` holds `len` bytes, `n` (libi.h); `bytes_n` refuses NULL.
        let send = unsafe { bytes_n(sendbuf, n) }.ok_or_else(|| null("allgather", "sendbuf"))?;
        // SAFETY: every member's `recvbuf` holds size × `len` bytes, `total` (libi.h); `bytes_mut`
        // refuses NULL.
        let recv =
            unsafe { bytes_mut(recvbuf, total) }.ok_or_else(|| null("allgather", "recvbuf"))?;
        m.allgather(send, recv)
    })
}

/// Every member's `sendcount` bytes (any count) reach the master: `*recvbuf` (malloc'ed:
/// free it) holds them in rank order, `recvcounts` (size entries) each member's count.
/// Other members' `recvbuf` and `recvcounts` are not used.
#[no_mangle]
pub unsafe extern "C" fn LIBI_gatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    recvbuf: *mut *mut c_void,
    recvcounts: *mut c_int,
) -> Code {
    use libi_session::member::Refusal;
    with_member(|m| {
        let me = m.rank();
        let send = match usize::try_from(sendcount) {
            Err(_) => Err(Refusal::Negative { member: me, count: i64::from(sendcount) }),
            // SAFETY: `sendbuf` holds `sendcount` bytes, `n` (libi.h); `bytes_n` refuses NULL.
            Ok(n) => unsafe { bytes_n(sendbuf, n) }.ok_or(Refusal::NoBuffer { member: me }),
        };
        let can_receive = !recvbuf.is_null() && !recvcounts.is_null();
        let Some(g) = m.gatherv_with(send, !m.is_master() || can_receive)? else {
            return Ok(());
        };
        let p = malloced(&g.data)?;
        // SAFETY: checked non-null; recvcounts has one entry per member (size).
        unsafe {
            *recvbuf = p;
            for (i, c) in g.counts.iter().enumerate() {
                *recvcounts.add(i) = *c as c_int;
            }
        }
        Ok(())
    })
}

/// The master's `sendbuf` holds `sendcounts[i]` bytes for member i (size entries), in rank
/// order; every member gets its bytes in `*recvbuf` (malloc'ed: free it), their count in
/// `*recvcount`. Other members' `sendbuf` and `sendcounts` are not used.
#[no_mangle]
pub unsafe extern "C" fn LIBI_scatterv(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    recvbuf: *mut *mut c_void,
    recvcount: *mut c_int,
) -> Code {
    use libi_session::member::{check_counts, Refusal};
    with_member(|m| {
        let n = m.size() as usize;
        let master = if !m.is_master() {
            Ok((&[][..], Vec::new()))
        } else if sendcounts.is_null() {
            Err(Refusal::Counts { got: 0 })
        } else {
            // SAFETY: the master's array of one count per member.
            let raw = unsafe { std::slice::from_raw_parts(sendcounts, n) };
            let raw: Vec<i64> = raw.iter().map(|&c| i64::from(c)).collect();
            check_counts(&raw).and_then(|(counts, total)| {
                // SAFETY: the master's `sendbuf` holds the sum of `sendcounts`, `total` (libi.h);
                // `bytes_n` refuses NULL.
                let b =
                    unsafe { bytes_n(sendbuf, total) }.ok_or(Refusal::NoBuffer { member: 0 })?;
                Ok((b, counts))
            })
        };
        let send = match &master {
            Ok((b, c)) => Ok((*b, c.as_slice())),
            Err(r) => Err(*r),
        };
        let data = m.scatterv_with(send, !recvbuf.is_null() && !recvcount.is_null())?;
        let p = malloced(&data)?;
        // SAFETY: both checked non-null (scatterv_with refused otherwise).
        unsafe {
            *recvbuf = p;
            *recvcount = data.len() as c_int;
        }
        Ok(())
    })
}

/// The master's link to the front end, taken from its own slot (not the member's lock): a
/// send and a receive of different threads do not wait for each other, nor for a
/// collective of a third.
fn fe_link() -> Result<Arc<libi_session::member::FeLink>, Error> {
    if !MEMBER_ACTIVE.load(Ordering::SeqCst) {
        return Err(no_member());
    }
    FE_LINK.lock().unwrap_or_else(|e| e.into_inner()).clone().ok_or_else(|| {
        Error::new(Code::ENotMaster, "only the master (rank 0) talks to the front end")
    })
}

#[no_mangle]
pub unsafe extern "C" fn LIBI_sendUsrData(buf: *const c_void, len: c_int) -> Code {
    // SAFETY: `buf` is NULL or holds `len` bytes (libi.h's contract); `bytes` refuses NULL and a
    // negative length.
    let Some(data) = (unsafe { bytes(buf, len) }) else { return arg("the message") };
    done(fe_link().and_then(|l| l.send(data)))
}

/// Master only: the next message from the front end (`*buf` malloc'ed: free it).
#[no_mangle]
pub unsafe extern "C" fn LIBI_recvUsrData(buf: *mut *mut c_void, len: *mut c_int) -> Code {
    if buf.is_null() || len.is_null() {
        return arg("the message pointers");
    }
    // SAFETY: `buf` and `len` were checked not NULL; they are the caller's `void *` and `int`
    // (libi.h).
    done(fe_link().and_then(|l| l.recv()).and_then(|d| unsafe { give(d, buf, len) }))
}

/// The ranks of the job this daemon's session was launched next to
/// (`LIBI_fe_attachAndLaunch`) that run on its host, in rank order: `*table` (one
/// malloc'ed block: free() it) of `*size` entries; none for another session.
#[no_mangle]
pub unsafe extern "C" fn LIBI_getMyProctab(
    table: *mut *mut libi_proc_desc_t,
    size: *mut c_int,
) -> Code {
    if table.is_null() || size.is_null() {
        return arg("the table pointers");
    }
    // SAFETY: `table` and `size` were checked not NULL; they are the caller's pointer and `int`
    // (libi.h).
    with_member(|m| unsafe { give_table(m.proctab(), table, size) })
}

/// This member's host, as the session's host list names it (`PMI_HOSTNAME`): copied into
/// `name` (`len` bytes, NUL included).
#[no_mangle]
pub unsafe extern "C" fn LIBI_getMyHostname(name: *mut c_char, len: c_int) -> Code {
    let Some(buf) = usize::try_from(len).ok().filter(|n| *n > 0) else {
        return arg("the name buffer");
    };
    if name.is_null() {
        return arg("the name buffer");
    }
    with_member(|m| {
        let h = m.host().as_bytes();
        if h.len() + 1 > buf {
            return Err(Error::new(
                Code::EArg,
                format!("the host name needs {} bytes", h.len() + 1),
            ));
        }
        // SAFETY: checked: `name` has room for h.len() + 1 bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(h.as_ptr(), name as *mut u8, h.len());
            *name.add(h.len()) = 0;
        }
        Ok(())
    })
}

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

use libi_session::fe::{FrontEnd, HostDist, Options, ProcDist, SessionId};
use libi_session::member::Member;
use libi_session::{Code, Error, MAX_MSG};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

static FE: Mutex<Option<Arc<FrontEnd>>> = Mutex::new(None);
static MEMBER: Mutex<Option<Member>> = Mutex::new(None);
/// This process is a member of a session (between `LIBI_init` and `LIBI_finalize`): the
/// front end's calls are refused with `LIBI_EFRONTENDONLY`.
static MEMBER_ACTIVE: AtomicBool = AtomicBool::new(false);
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
    const NAMES: [&CStr; 14] = [
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

unsafe fn dist(i: usize, d: &proc_dist_req_t) -> Result<ProcDist, Error> {
    let exe = unsafe { text(d.proc_path, &format!("distribution {i}'s proc_path"))? };
    let mut args = Vec::new();
    if !d.proc_argv.is_null() {
        for k in 0..LIST_MAX {
            // SAFETY: a NULL-terminated array of strings.
            let a = unsafe { *d.proc_argv.add(k) };
            if a.is_null() {
                break;
            }
            args.push(unsafe { text(a, "an argument")? });
        }
    }
    let mut hosts = Vec::new();
    let mut h = d.hd;
    while !h.is_null() && hosts.len() < LIST_MAX {
        // SAFETY: a list of host_dist_t ending with a NULL next.
        let e = unsafe { &*h };
        let host = unsafe { text(e.hostname, &format!("distribution {i}: a hostname"))? };
        hosts.push(HostDist { host, procs: e.nproc });
        h = e.next;
    }
    let mut env = Vec::new();
    let mut v = d.env;
    while !v.is_null() && env.len() < LIST_MAX {
        // SAFETY: a list of libi_env_t ending with a NULL next.
        let e = unsafe { &*v };
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
        unsafe { give(d, buf, len) }
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
unsafe fn block<T>(n: usize, strings: &[&str]) -> Result<(*mut T, Vec<*const c_char>), Error> {
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
    with_fe(|fe| {
        let t = fe.job_table(job_pid as u32)?;
        let strings: Vec<&str> = t.iter().flat_map(|e| [e.host.as_str(), e.exe.as_str()]).collect();
        let (p, ptrs) = unsafe { block::<libi_proc_desc_t>(t.len(), &strings)? };
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
        // SAFETY: checked non-null.
        unsafe {
            *table = p;
            *size = t.len() as c_int;
        }
        Ok(())
    })
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
        let (p, ptrs) = unsafe { block::<host_dist_t>(hosts.len(), &names)? };
        for (i, name) in ptrs.iter().enumerate() {
            let next =
                if i + 1 < hosts.len() { unsafe { p.add(i + 1) } } else { std::ptr::null_mut() };
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
    // SAFETY: checked non-null.
    with_member(|m| {
        unsafe { *rank = m.rank() as c_int };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn LIBI_getSize(size: *mut c_int) -> Code {
    if size.is_null() {
        return arg("the size pointer");
    }
    // SAFETY: checked non-null.
    with_member(|m| {
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

#[no_mangle]
pub unsafe extern "C" fn LIBI_broadcast(buf: *mut c_void, len: c_int) -> Code {
    let Some(b) = usize::try_from(len).ok().and_then(|n| unsafe { bytes_mut(buf, n) }) else {
        return arg("the broadcast buffer");
    };
    with_member(|m| m.broadcast(b))
}

/// The master's `sendbuf` holds size × `len` bytes; every member gets its `len` in
/// `recvbuf`.
#[no_mangle]
pub unsafe extern "C" fn LIBI_scatter(
    sendbuf: *const c_void,
    len: c_int,
    recvbuf: *mut c_void,
) -> Code {
    let Ok(n) = usize::try_from(len) else { return arg("the scatter length") };
    with_member(|m| {
        let total = if m.is_master() { n * m.size() as usize } else { 0 };
        let send = unsafe { bytes(sendbuf, total as c_int) }
            .ok_or_else(|| Error::new(Code::EArg, "scatter: sendbuf is NULL"))?;
        let recv = unsafe { bytes_mut(recvbuf, n) }
            .ok_or_else(|| Error::new(Code::EArg, "scatter: recvbuf is NULL"))?;
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
    let Ok(n) = usize::try_from(len) else { return arg("the gather length") };
    with_member(|m| {
        let send = unsafe { bytes(sendbuf, len) }
            .ok_or_else(|| Error::new(Code::EArg, "gather: sendbuf is NULL"))?;
        let total = if m.is_master() { n * m.size() as usize } else { 0 };
        let recv = unsafe { bytes_mut(recvbuf, total) }
            .ok_or_else(|| Error::new(Code::EArg, "gather: recvbuf is NULL"))?;
        m.gather(send, recv)
    })
}

#[no_mangle]
pub unsafe extern "C" fn LIBI_sendUsrData(buf: *const c_void, len: c_int) -> Code {
    let Some(data) = (unsafe { bytes(buf, len) }) else { return arg("the message") };
    with_member(|m| m.send_usr_data(data))
}

/// Master only: the next message from the front end (`*buf` malloc'ed: free it).
#[no_mangle]
pub unsafe extern "C" fn LIBI_recvUsrData(buf: *mut *mut c_void, len: *mut c_int) -> Code {
    if buf.is_null() || len.is_null() {
        return arg("the message pointers");
    }
    with_member(|m| {
        let d = m.recv_usr_data()?;
        unsafe { give(d, buf, len) }
    })
}

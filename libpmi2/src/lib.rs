//! `libpmi2.so`: the PMI-2 C API (the signatures of Slurm's and MPICH's `pmi2.h`; our
//! header is `libpmi2/include/pmi2.h`) on top of libi's PMI-2 wire protocol.
//!
//! * With `PMI_FD` set (under `libi-mpiexec`, `mpiexec.hydra`, or any PMI-2 server): the
//!   PMI-1 handshake line `cmd=init pmi_version=2 pmi_subversion=0`, then `fullinit` with
//!   `pmirank` = `PMI_RANK` (and `pmijobid` = `PMI_JOBID` if set), then one lock-step PMI-2
//!   frame per call (left-aligned length, `;` in values doubled).
//! * Without `PMI_FD` the process is a **singleton**: rank 0 of 1, appnum 0, a local KVS,
//!   local node attributes, local name service; `universeSize` is 1 and
//!   `PMI_process_mapping` is `(vector,(0,1,1))`.
//!
//! Every function is safe to call from C: null pointers give `PMI2_ERR_INVALID_ARG`, a
//! panic is caught and reported as `PMI2_FAIL`, the state is behind a mutex.

#![allow(clippy::missing_safety_doc)] // C API: the contract is in include/pmi2.h
#![deny(clippy::undocumented_unsafe_blocks)]

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::Mutex;

use pmi_client::cutil::{cstr, env_int, guard, lock, put_cstr, put_cstr_trunc, put_int};
use pmi_client::spawn::{self, Refused};
use pmi_client::Transport;
use pmi_wire::v1::{self, SpawnCmd, MAX_SPAWN_LIST};
use pmi_wire::v2::{Align, Reply, Request, KEYLEN_MAX, VALLEN_MAX};

pub const PMI2_SUCCESS: c_int = 0;
pub const PMI2_FAIL: c_int = -1;
pub const PMI2_ERR_INIT: c_int = 1;
pub const PMI2_ERR_NOMEM: c_int = 2;
pub const PMI2_ERR_INVALID_ARG: c_int = 3;
pub const PMI2_ERR_INVALID_KEY: c_int = 4;
pub const PMI2_ERR_INVALID_KEY_LENGTH: c_int = 5;
pub const PMI2_ERR_INVALID_VAL: c_int = 6;
pub const PMI2_ERR_INVALID_VAL_LENGTH: c_int = 7;
pub const PMI2_ERR_INVALID_LENGTH: c_int = 8;
pub const PMI2_ERR_OTHER: c_int = 14;

struct State {
    conn: Option<Transport>,
    rank: i32,
    size: i32,
    appnum: i32,
    spawned: bool,
    jobid: String,
    /// Singleton stores.
    kvs: HashMap<String, String>,
    node: HashMap<String, String>,
    names: HashMap<String, String>,
    /// `PMIX_Ring` calls so far (each uses keys of its own).
    rings: u32,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

type R<T> = Result<T, c_int>;

impl State {
    /// One request, one reply (`Ok(None)` for a singleton).
    fn call(&mut self, req: &Request) -> R<Option<Reply>> {
        let Some(conn) = self.conn.as_mut() else { return Ok(None) };
        conn.send(&req.to_frame(None, Align::Left)).map_err(|_| PMI2_FAIL)?;
        let body = conn.read_frame().map_err(|_| PMI2_FAIL)?;
        Reply::parse(&body).map(|(r, _)| Some(r)).map_err(|_| PMI2_FAIL)
    }

    fn init() -> R<State> {
        let conn = Transport::from_env().map_err(|_| PMI2_ERR_INIT)?;
        let mut st = State {
            conn,
            rank: 0,
            size: 1,
            appnum: 0,
            spawned: false,
            jobid: format!("singleton-{}", std::process::id()),
            kvs: HashMap::new(),
            node: HashMap::new(),
            names: HashMap::new(),
            rings: 0,
        };
        let Some(conn) = st.conn.as_mut() else { return Ok(st) };
        let mut hello = Vec::new();
        v1::Request::Init { version: 2, subversion: 0 }.encode(&mut hello);
        conn.send(&hello).map_err(|_| PMI2_ERR_INIT)?;
        let line = conn.read_line().map_err(|_| PMI2_ERR_INIT)?;
        match v1::Reply::parse(&line) {
            Ok(v1::Reply::ResponseToInit { version: 2, rc: 0, .. }) => {}
            _ => return Err(PMI2_ERR_INIT),
        }
        let full = Request::FullInit {
            rank: env_int("PMI_RANK").or_else(|| env_int("PMI_ID")).unwrap_or(-1),
            jobid: std::env::var("PMI_JOBID").ok(),
            threaded: false,
        };
        match st.call(&full)? {
            Some(Reply::FullInit { rank, size, appnum, spawner_jobid, .. }) => {
                st.rank = rank;
                st.size = size;
                st.appnum = appnum;
                st.spawned = spawner_jobid.is_some();
            }
            _ => return Err(PMI2_ERR_INIT),
        }
        match st.call(&Request::JobGetId)? {
            Some(Reply::JobGetId { jobid }) => st.jobid = jobid,
            _ => return Err(PMI2_ERR_INIT),
        }
        Ok(st)
    }
}

/// Run `f` on the initialized state (`PMI2_ERR_INIT` before `PMI2_Init`).
fn with(f: impl FnOnce(&mut State) -> R<()>) -> c_int {
    guard(PMI2_FAIL, || {
        let mut g = lock(&STATE);
        match g.as_mut() {
            None => PMI2_ERR_INIT,
            Some(st) => f(st).err().unwrap_or(PMI2_SUCCESS),
        }
    })
}

fn arg(p: *const c_char) -> R<String> {
    // SAFETY: the C contract: null or a NUL-terminated string.
    unsafe { cstr(p) }.ok_or(PMI2_ERR_INVALID_ARG)
}

fn key_arg(p: *const c_char) -> R<String> {
    let k = arg(p)?;
    if k.is_empty() {
        return Err(PMI2_ERR_INVALID_KEY);
    }
    if k.len() > KEYLEN_MAX {
        return Err(PMI2_ERR_INVALID_KEY_LENGTH);
    }
    Ok(k)
}

fn val_arg(p: *const c_char) -> R<String> {
    let v = arg(p)?;
    if v.len() > VALLEN_MAX {
        return Err(PMI2_ERR_INVALID_VAL_LENGTH);
    }
    Ok(v)
}

fn out_int(p: *mut c_int, v: i32) {
    // SAFETY: the C contract: null (ignored) or a valid int pointer.
    unsafe { put_int(p, v) };
}

/// Copy a found value into a caller buffer of `len` bytes.
fn out_value(dst: *mut c_char, len: c_int, v: &str) -> R<()> {
    let cap = usize::try_from(len).map_err(|_| PMI2_ERR_INVALID_LENGTH)?;
    if dst.is_null() {
        return Err(PMI2_ERR_INVALID_ARG);
    }
    // SAFETY: the C contract: `dst` holds `len` bytes.
    if unsafe { put_cstr(dst, cap, v) } {
        Ok(())
    } else {
        Err(PMI2_ERR_INVALID_VAL_LENGTH)
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMI2_Init(
    spawned: *mut c_int,
    size: *mut c_int,
    rank: *mut c_int,
    appnum: *mut c_int,
) -> c_int {
    guard(PMI2_FAIL, || {
        let mut g = lock(&STATE);
        if g.is_none() {
            match State::init() {
                Ok(st) => *g = Some(st),
                Err(rc) => return rc,
            }
        }
        let Some(st) = g.as_ref() else { return PMI2_ERR_INIT };
        out_int(spawned, c_int::from(st.spawned));
        out_int(size, st.size);
        out_int(rank, st.rank);
        out_int(appnum, st.appnum);
        PMI2_SUCCESS
    })
}

#[no_mangle]
pub extern "C" fn PMI2_Finalize() -> c_int {
    guard(PMI2_FAIL, || {
        let Some(mut st) = lock(&STATE).take() else { return PMI2_SUCCESS };
        match st.call(&Request::Finalize) {
            Ok(None | Some(Reply::Finalize)) => PMI2_SUCCESS,
            _ => PMI2_FAIL,
        }
    })
}

#[no_mangle]
pub extern "C" fn PMI2_Initialized() -> c_int {
    guard(0, || c_int::from(lock(&STATE).is_some()))
}

#[no_mangle]
pub unsafe extern "C" fn PMI2_Abort(flag: c_int, msg: *const c_char) -> c_int {
    guard(PMI2_FAIL, || {
        // SAFETY: the C contract: null or a NUL-terminated string.
        let message = unsafe { cstr(msg) };
        if let Some(m) = &message {
            eprintln!("PMI2_Abort: {m}");
        }
        let mut g = lock(&STATE);
        if let Some(conn) = g.as_mut().and_then(|s| s.conn.as_mut()) {
            let req = Request::Abort { exitcode: None, isworld: Some(flag != 0), message };
            let _ = conn.send(&req.to_frame(None, Align::Left));
        }
        std::process::exit(1)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMI2_Job_GetId(jobid: *mut c_char, jobid_size: c_int) -> c_int {
    with(|st| {
        let id = st.jobid.clone();
        out_value(jobid, jobid_size, &id).map_err(|_| PMI2_ERR_INVALID_LENGTH)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMI2_Job_GetRank(rank: *mut c_int) -> c_int {
    with(|st| {
        if rank.is_null() {
            return Err(PMI2_ERR_INVALID_ARG);
        }
        out_int(rank, st.rank);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMI2_KVS_Put(key: *const c_char, value: *const c_char) -> c_int {
    with(|st| {
        let (key, value) = (key_arg(key)?, val_arg(value)?);
        match st.call(&Request::KvsPut { key: key.clone(), value: value.clone() })? {
            None => {
                st.kvs.insert(key, value);
                Ok(())
            }
            Some(Reply::KvsPut) => Ok(()),
            Some(_) => Err(PMI2_FAIL),
        }
    })
}

#[no_mangle]
pub extern "C" fn PMI2_KVS_Fence() -> c_int {
    with(|st| match st.call(&Request::KvsFence)? {
        None | Some(Reply::KvsFence) => Ok(()),
        Some(_) => Err(PMI2_FAIL),
    })
}

/// `*vallen` is the value's length, or minus it when `maxvalue` was too small (the value
/// is then truncated, still NUL-terminated). A missing key is `PMI2_FAIL`.
#[no_mangle]
pub unsafe extern "C" fn PMI2_KVS_Get(
    jobid: *const c_char,
    src_pmi_id: c_int,
    key: *const c_char,
    value: *mut c_char,
    maxvalue: c_int,
    vallen: *mut c_int,
) -> c_int {
    with(|st| {
        let key = key_arg(key)?;
        // SAFETY: the C contract: null or a NUL-terminated string.
        let jobid = unsafe { cstr(jobid) }.filter(|j| !j.is_empty());
        let cap = usize::try_from(maxvalue).map_err(|_| PMI2_ERR_INVALID_LENGTH)?;
        if value.is_null() {
            return Err(PMI2_ERR_INVALID_ARG);
        }
        let req = Request::KvsGet { jobid, srcid: Some(src_pmi_id), key: key.clone() };
        let v = match st.call(&req)? {
            None => st.kvs.get(&key).cloned(),
            Some(Reply::KvsGet { value }) => value,
            Some(_) => return Err(PMI2_FAIL),
        };
        let Some(v) = v else {
            out_int(vallen, 0);
            return Err(PMI2_FAIL);
        };
        // SAFETY: the C contract: `value` holds `maxvalue` bytes.
        let n = unsafe { put_cstr_trunc(value, cap, &v) };
        let len = i32::try_from(v.len()).unwrap_or(i32::MAX);
        out_int(vallen, if n == v.len() { len } else { -len });
        Ok(())
    })
}

/// A found/not-found lookup into a caller buffer.
fn lookup_out(v: Option<String>, value: *mut c_char, len: c_int, found: *mut c_int) -> R<()> {
    match v {
        Some(v) => {
            out_value(value, len, &v)?;
            out_int(found, 1);
        }
        None => out_int(found, 0),
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn PMI2_Info_GetNodeAttr(
    name: *const c_char,
    value: *mut c_char,
    valuelen: c_int,
    found: *mut c_int,
    waitfor: c_int,
) -> c_int {
    with(|st| {
        let v = st.node_attr(key_arg(name)?, waitfor != 0)?;
        lookup_out(v, value, valuelen, found)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMI2_Info_PutNodeAttr(name: *const c_char, value: *const c_char) -> c_int {
    with(|st| {
        let (key, value) = (key_arg(name)?, val_arg(value)?);
        match st.call(&Request::PutNodeAttr { key: key.clone(), value: value.clone() })? {
            None => {
                st.node.insert(key, value);
                Ok(())
            }
            Some(Reply::PutNodeAttr) => Ok(()),
            Some(_) => Err(PMI2_FAIL),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMI2_Info_GetJobAttr(
    name: *const c_char,
    value: *mut c_char,
    valuelen: c_int,
    found: *mut c_int,
) -> c_int {
    with(|st| {
        let v = st.job_attr(key_arg(name)?)?;
        lookup_out(v, value, valuelen, found)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMI2_Nameserv_publish(
    service_name: *const c_char,
    _info_ptr: *const c_void,
    port: *const c_char,
) -> c_int {
    with(|st| {
        let (name, port) = (arg(service_name)?, arg(port)?);
        match st.call(&Request::NamePublish { name: name.clone(), port: port.clone() })? {
            None if st.names.contains_key(&name) => Err(PMI2_FAIL),
            None => {
                st.names.insert(name, port);
                Ok(())
            }
            Some(Reply::NamePublish) => Ok(()),
            Some(_) => Err(PMI2_FAIL),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMI2_Nameserv_lookup(
    service_name: *const c_char,
    _info_ptr: *const c_void,
    port: *mut c_char,
    port_len: c_int,
) -> c_int {
    with(|st| {
        let name = arg(service_name)?;
        let p = match st.call(&Request::NameLookup { name: name.clone() })? {
            None => st.names.get(&name).cloned(),
            Some(Reply::NameLookup { port }) => port,
            Some(_) => return Err(PMI2_FAIL),
        };
        let p = p.ok_or(PMI2_FAIL)?;
        out_value(port, port_len, &p)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMI2_Nameserv_unpublish(
    service_name: *const c_char,
    _info_ptr: *const c_void,
) -> c_int {
    with(|st| {
        let name = arg(service_name)?;
        match st.call(&Request::NameUnpublish { name: name.clone() })? {
            None => st.names.remove(&name).map(|_| ()).ok_or(PMI2_FAIL),
            Some(Reply::NameUnpublish) => Ok(()),
            Some(_) => Err(PMI2_FAIL),
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Spawn, connect, integer-array attributes, and Slurm's extensions.

/// MPICH's `struct MPIR_Info` (what `pmi2.h` declares opaque and MPICH's MPI library passes
/// to `PMI2_Job_Spawn`): a handle and a reference count, then a list link, key and value.
#[repr(C)]
pub struct MPIR_Info {
    pub handle: c_int,
    pub ref_count: c_int,
    pub next: *const MPIR_Info,
    pub key: *const c_char,
    pub value: *const c_char,
}

/// `PMI2_Connect_comm_t` of `pmi2.h` (accepted and not used, as by MPICH's client).
#[repr(C)]
pub struct PMI2_Connect_comm_t {
    pub read: Option<unsafe extern "C" fn(*mut c_void, c_int, *mut c_void) -> c_int>,
    pub write: Option<unsafe extern "C" fn(*const c_void, c_int, *mut c_void) -> c_int>,
    pub ctx: *mut c_void,
    pub is_main: c_int,
}

/// The `n` pairs of one command's info: element 0 at `first`, each next one where the
/// previous one's `next` points, or right after it in memory when `next` is null. MPICH's
/// MPI library hands over its info list (linked by `next`), MPICH's own client reads an
/// array: both layouts are read the same way here.
unsafe fn info_pairs(first: *const MPIR_Info, n: usize) -> Result<Vec<(String, String)>, Refused> {
    let mut out = Vec::with_capacity(n.min(64));
    let mut cur = first;
    for _ in 0..n {
        if cur.is_null() {
            return Err(Refused::Arg);
        }
        // SAFETY: the C contract: `n` entries reachable as described above.
        let e = unsafe { &*cur };
        // SAFETY: as above; key and value are C strings.
        out.push(unsafe { (spawn::text(e.key)?, spawn::text(e.value)?) });
        // SAFETY: as above (the array form: the next element follows).
        cur = if e.next.is_null() { unsafe { cur.add(1) } } else { e.next };
    }
    Ok(out)
}

fn refused(r: Refused) -> c_int {
    match r {
        Refused::Arg => PMI2_ERR_INVALID_ARG,
        Refused::Length => PMI2_ERR_INVALID_LENGTH,
    }
}

/// PMI-2 `spawn` (one `subcmd` per command, the pre-put pairs once). A refused spawn
/// (`rc≠0`) or any other answer is `PMI2_FAIL`; `jobId` (when given with a size > 0) gets the
/// new job's id, cut to fit, and a reply without one is `PMI2_ERR_OTHER`, as in MPICH's
/// client; `errors` gets one 0 per process (the wire carries no codes). A singleton has no
/// process manager to spawn with: `PMI2_FAIL`.
#[no_mangle]
pub unsafe extern "C" fn PMI2_Job_Spawn(
    count: c_int,
    cmds: *const *const c_char,
    argcs: *const c_int,
    argvs: *const *const *const c_char,
    maxprocs: *const c_int,
    info_keyval_sizes: *const c_int,
    info_keyval_vectors: *const *const MPIR_Info,
    preput_keyval_size: c_int,
    preput_keyval_vector: *const *const MPIR_Info,
    job_id: *mut c_char,
    job_id_size: c_int,
    errors: *mut c_int,
) -> c_int {
    with(|st| {
        let n = usize::try_from(count).unwrap_or(0);
        let read = || -> Result<Vec<SpawnCmd>, Refused> {
            let np = spawn::count(preput_keyval_size, MAX_SPAWN_LIST)?;
            let preput = (0..np)
                .map(|i| {
                    // SAFETY: the C contract: `np` pointers to one pair each.
                    let p = unsafe { spawn::at(preput_keyval_vector, np, i) };
                    // SAFETY: as above.
                    unsafe { info_pairs(p.unwrap_or(std::ptr::null()), 1) }
                })
                .collect::<Result<Vec<_>, _>>()?
                .into_iter()
                .flatten()
                .collect();
            let args = |i| {
                // SAFETY: `argcs` and `argvs` hold `count` entries; argv i holds argcs[i].
                let na = unsafe { spawn::at(argcs, n, i) }.unwrap_or(0);
                let na = spawn::count(na, MAX_SPAWN_LIST)?;
                // SAFETY: as above.
                let argv = unsafe { spawn::at(argvs, n, i) }.unwrap_or(std::ptr::null());
                (0..na)
                    .map(|j| {
                        // SAFETY: as above.
                        let a = unsafe { spawn::at(argv, na, j) }.ok_or(Refused::Arg)?;
                        // SAFETY: each argument is a C string.
                        unsafe { spawn::text(a) }
                    })
                    .collect()
            };
            let info = |i| {
                // SAFETY: the sizes and vectors hold `count` entries; vector i `sizes[i]`.
                unsafe { spawn::info_at(info_keyval_sizes, info_keyval_vectors, n, i, info_pairs) }
            };
            // SAFETY: `cmds` and `maxprocs` hold `count` entries.
            unsafe { spawn::read_cmds(count, cmds, maxprocs, args, info, preput) }
        };
        let cmds = read().map_err(refused)?;
        if st.conn.is_none() {
            return Err(PMI2_FAIL);
        }
        let total = spawn::total_procs(&cmds);
        let jobid = match st.call(&Request::Spawn { cmds })? {
            Some(Reply::Spawn { jobid }) => jobid,
            _ => return Err(PMI2_FAIL),
        };
        if !job_id.is_null() && job_id_size > 0 {
            let id = jobid.ok_or(PMI2_ERR_OTHER)?;
            let cap = usize::try_from(job_id_size).unwrap_or(0);
            // SAFETY: the C contract: `jobId` holds `jobIdSize` bytes.
            unsafe { put_cstr_trunc(job_id, cap, &id) };
        }
        // SAFETY: the C contract: `errors` holds one int per process.
        unsafe { spawn::put_errcodes(errors, total, None) };
        Ok(())
    })
}

/// `job-connect` / `job-disconnect` with `jobid`: a refusal (`rc≠0`) is `PMI2_ERR_OTHER`,
/// as in MPICH's client (which also refuses a server that wants the KVS copied). A singleton
/// has no process manager to ask: `PMI2_FAIL`.
fn job_link(jobid: *const c_char, connect: bool) -> c_int {
    with(|st| {
        let jobid = arg(jobid)?;
        if st.conn.is_none() {
            return Err(PMI2_FAIL);
        }
        let req =
            if connect { Request::JobConnect { jobid } } else { Request::JobDisconnect { jobid } };
        match (st.call(&req)?, connect) {
            (Some(Reply::JobConnect), true) | (Some(Reply::JobDisconnect), false) => Ok(()),
            (Some(Reply::Error { .. }), _) => Err(PMI2_ERR_OTHER),
            _ => Err(PMI2_FAIL),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMI2_Job_Connect(
    jobid: *const c_char,
    _conn: *mut PMI2_Connect_comm_t,
) -> c_int {
    job_link(jobid, true)
}

#[no_mangle]
pub unsafe extern "C" fn PMI2_Job_Disconnect(jobid: *const c_char) -> c_int {
    job_link(jobid, false)
}

/// A found attribute's comma-separated integers into `array` (at most `arraylen`),
/// `*outlen` their number; a value that is not such a list is `PMI2_ERR_OTHER` (as in
/// MPICH's client), a null `array` or `arraylen < 1` `PMI2_ERR_INVALID_ARG`.
fn int_array_out(
    v: Option<String>,
    array: *mut c_int,
    arraylen: c_int,
    outlen: *mut c_int,
    found: *mut c_int,
) -> R<()> {
    let Some(v) = v else {
        out_int(found, 0);
        return Ok(());
    };
    let cap = usize::try_from(arraylen).ok().filter(|&n| n > 0);
    let cap = cap.ok_or(PMI2_ERR_INVALID_ARG)?;
    if array.is_null() {
        return Err(PMI2_ERR_INVALID_ARG);
    }
    let nums =
        v.split(',').take(cap).map(|t| t.trim().parse::<c_int>().map_err(|_| PMI2_ERR_OTHER));
    let nums = nums.collect::<R<Vec<c_int>>>()?;
    for (i, x) in nums.iter().enumerate() {
        // SAFETY: the C contract: `array` holds `arraylen` ≥ nums.len() ints.
        unsafe { *array.add(i) = *x };
    }
    out_int(outlen, i32::try_from(nums.len()).unwrap_or(i32::MAX));
    out_int(found, 1);
    Ok(())
}

impl State {
    fn node_attr(&mut self, key: String, wait: bool) -> R<Option<String>> {
        match self.call(&Request::GetNodeAttr { key: key.clone(), wait })? {
            None => Ok(self.node.get(&key).cloned()),
            Some(Reply::GetNodeAttr { value }) => Ok(value),
            Some(_) => Err(PMI2_FAIL),
        }
    }

    fn job_attr(&mut self, key: String) -> R<Option<String>> {
        match self.call(&Request::GetJobAttr { key: key.clone() })? {
            None => Ok(match key.as_str() {
                "universeSize" => Some("1".to_owned()),
                "PMI_process_mapping" => Some("(vector,(0,1,1))".to_owned()),
                _ => None,
            }),
            Some(Reply::GetJobAttr { value }) => Ok(value),
            // Servers that refuse an attribute (rc ≠ 0) just do not have it.
            Some(Reply::Error { .. }) => Ok(None),
            Some(_) => Err(PMI2_FAIL),
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMI2_Info_GetNodeAttrIntArray(
    name: *const c_char,
    array: *mut c_int,
    arraylen: c_int,
    outlen: *mut c_int,
    found: *mut c_int,
) -> c_int {
    with(|st| {
        // MPICH's client never waits for an integer array.
        let v = st.node_attr(key_arg(name)?, false)?;
        int_array_out(v, array, arraylen, outlen, found)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMI2_Info_GetJobAttrIntArray(
    name: *const c_char,
    array: *mut c_int,
    arraylen: c_int,
    outlen: *mut c_int,
    found: *mut c_int,
) -> c_int {
    with(|st| {
        let v = st.job_attr(key_arg(name)?)?;
        int_array_out(v, array, arraylen, outlen, found)
    })
}

/// Slurm's: the number of processes on this node, from the job attribute
/// `PMI_process_mapping` (1 when the server has none that places this rank).
#[no_mangle]
pub unsafe extern "C" fn PMI2_Info_GetSize(size: *mut c_int) -> c_int {
    with(|st| {
        if size.is_null() {
            return Err(PMI2_ERR_INVALID_ARG);
        }
        let m = st.job_attr("PMI_process_mapping".into())?;
        let c = m.and_then(|m| pmi_client::mapping::clique(&m, st.size, st.rank));
        out_int(size, c.map_or(1, |c| i32::try_from(c.len()).unwrap_or(i32::MAX)));
        Ok(())
    })
}

/// Slurm's ring exchange, collective over the job: each process gives `value` and gets its
/// ring rank (its rank), the ring's size, and the values of the ranks before and after it
/// (wrapping). Done with a put, a fence and two gets (keys `libi-ring<N>-<rank>`, N counting
/// the calls), so it works under any PMI-2 server. `value` must be shorter than `maxvalue`,
/// which `left` and `right` hold.
#[no_mangle]
pub unsafe extern "C" fn PMIX_Ring(
    value: *const c_char,
    rank: *mut c_int,
    ranks: *mut c_int,
    left: *mut c_char,
    right: *mut c_char,
    maxvalue: c_int,
) -> c_int {
    with(|st| {
        let v = val_arg(value)?;
        let cap = usize::try_from(maxvalue).map_err(|_| PMI2_ERR_INVALID_LENGTH)?;
        if v.len() >= cap {
            return Err(PMI2_ERR_INVALID_VAL_LENGTH);
        }
        if rank.is_null() || ranks.is_null() || left.is_null() || right.is_null() {
            return Err(PMI2_ERR_INVALID_ARG);
        }
        st.rings += 1;
        let call = st.rings;
        let key = move |r: i32| format!("libi-ring{call}-{r}");
        let (me, n) = (st.rank, st.size.max(1));
        let (l, r) = if st.conn.is_none() {
            (v.clone(), v.clone())
        } else {
            match st.call(&Request::KvsPut { key: key(me), value: v })? {
                Some(Reply::KvsPut) => {}
                _ => return Err(PMI2_FAIL),
            }
            match st.call(&Request::KvsFence)? {
                Some(Reply::KvsFence) => {}
                _ => return Err(PMI2_FAIL),
            }
            let mut get = |r: i32| -> R<String> {
                let req = Request::KvsGet { jobid: None, srcid: Some(r), key: key(r) };
                match st.call(&req)? {
                    Some(Reply::KvsGet { value: Some(v) }) => Ok(v),
                    _ => Err(PMI2_FAIL),
                }
            };
            (get((me + n - 1) % n)?, get((me + 1) % n)?)
        };
        out_value(left, maxvalue, &l)?;
        out_value(right, maxvalue, &r)?;
        out_int(rank, me);
        out_int(ranks, n);
        Ok(())
    })
}

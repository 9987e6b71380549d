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

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::Mutex;

use pmi_client::cutil::{cstr, env_int, guard, lock, put_cstr, put_cstr_trunc, put_int};
use pmi_client::Transport;
use pmi_wire::v1;
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
        let key = key_arg(name)?;
        let req = Request::GetNodeAttr { key: key.clone(), wait: waitfor != 0 };
        let v = match st.call(&req)? {
            None => st.node.get(&key).cloned(),
            Some(Reply::GetNodeAttr { value }) => value,
            Some(_) => return Err(PMI2_FAIL),
        };
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
        let key = key_arg(name)?;
        let v = match st.call(&Request::GetJobAttr { key: key.clone() })? {
            None => match key.as_str() {
                "universeSize" => Some("1".to_owned()),
                "PMI_process_mapping" => Some("(vector,(0,1,1))".to_owned()),
                _ => None,
            },
            Some(Reply::GetJobAttr { value }) => value,
            // Servers that refuse an attribute (rc ≠ 0) just do not have it.
            Some(Reply::Error { .. }) => None,
            Some(_) => return Err(PMI2_FAIL),
        };
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

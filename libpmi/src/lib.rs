//! `libpmi.so`: the PMI-1 C API (as declared by MPICH's `pmi.h`; our header is
//! `libpmi/include/pmi.h`) on top of libi's PMI-1 wire protocol.
//!
//! * With `PMI_FD` set (under `libi-mpiexec`, `mpiexec.hydra` or any PMI-1 server), every
//!   call is one lock-step request/reply on that socket; rank and size come from
//!   `PMI_RANK`/`PMI_SIZE` (as for MPICH's own client), `spawned` from `PMI_SPAWNED`.
//! * Without `PMI_FD` the process is a **singleton**: rank 0 of 1, a local KVS, barriers that
//!   return at once, a local name service.
//!
//! Every function is safe to call from C: null pointers give `PMI_ERR_INVALID_ARG`, a panic
//! is caught and reported as `PMI_FAIL`, the state is behind a mutex.

#![allow(clippy::missing_safety_doc)] // C API: the contract is in include/pmi.h

use std::collections::HashMap;
use std::ffi::{c_char, c_int};
use std::sync::Mutex;

use pmi_client::cutil::{cbytes, cstr, env_int, guard, lock, put_cstr, put_cstr_trunc, put_int};
use pmi_client::Transport;
use pmi_wire::v1::{GetMiss, Reply, Request, KEYLEN_MAX, KVSNAME_MAX, VALLEN_MAX};

pub const PMI_SUCCESS: c_int = 0;
pub const PMI_FAIL: c_int = -1;
pub const PMI_ERR_INIT: c_int = 1;
pub const PMI_ERR_NOMEM: c_int = 2;
pub const PMI_ERR_INVALID_ARG: c_int = 3;
pub const PMI_ERR_INVALID_KEY: c_int = 4;
pub const PMI_ERR_INVALID_KEY_LENGTH: c_int = 5;
pub const PMI_ERR_INVALID_VAL: c_int = 6;
pub const PMI_ERR_INVALID_VAL_LENGTH: c_int = 7;
pub const PMI_ERR_INVALID_LENGTH: c_int = 8;

/// Capacity assumed for the `port` buffer of `PMI_Lookup_name` (MPI_MAX_PORT_NAME).
pub const PMI_MAX_PORT_NAME: usize = 256;

struct State {
    conn: Option<Transport>,
    rank: i32,
    size: i32,
    appnum: i32,
    spawned: bool,
    kvsname: String,
    /// Singleton KVS and name service.
    kvs: HashMap<String, Vec<u8>>,
    names: HashMap<String, String>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

type R<T> = Result<T, c_int>;

impl State {
    fn call(&mut self, req: &Request) -> R<Option<Reply>> {
        let Some(conn) = self.conn.as_mut() else { return Ok(None) };
        let mut bytes = Vec::new();
        req.encode(&mut bytes);
        conn.send(&bytes).map_err(|_| PMI_FAIL)?;
        let line = conn.read_line().map_err(|_| PMI_FAIL)?;
        Reply::parse(&line).map(Some).map_err(|_| PMI_FAIL)
    }

    fn init() -> R<State> {
        let conn = Transport::from_env().map_err(|_| PMI_ERR_INIT)?;
        let mut st = State {
            conn,
            rank: 0,
            size: 1,
            appnum: 0,
            spawned: false,
            kvsname: format!("singinit_kvs_{}_0", std::process::id()),
            kvs: HashMap::new(),
            names: HashMap::new(),
        };
        if st.conn.is_none() {
            return Ok(st);
        }
        match st.call(&Request::Init { version: 1, subversion: 1 })? {
            Some(Reply::ResponseToInit { rc: 0, .. }) => {}
            _ => return Err(PMI_ERR_INIT),
        }
        st.rank = env_int("PMI_RANK").unwrap_or(0);
        st.size = env_int("PMI_SIZE").unwrap_or(1);
        st.spawned = env_int("PMI_SPAWNED") == Some(1);
        if let Some(Reply::Appnum { appnum }) = st.call(&Request::GetAppnum)? {
            st.appnum = appnum;
        } else {
            return Err(PMI_ERR_INIT);
        }
        match st.call(&Request::GetMyKvsname)? {
            Some(Reply::MyKvsname { kvsname }) => st.kvsname = kvsname,
            _ => return Err(PMI_ERR_INIT),
        }
        Ok(st)
    }
}

/// Run `f` on the initialized state (`PMI_ERR_INIT` before `PMI_Init`).
fn with(f: impl FnOnce(&mut State) -> R<()>) -> c_int {
    guard(PMI_FAIL, || {
        let mut g = lock(&STATE);
        match g.as_mut() {
            None => PMI_ERR_INIT,
            Some(st) => f(st).err().unwrap_or(PMI_SUCCESS),
        }
    })
}

fn arg(p: *const c_char) -> R<String> {
    // SAFETY: the C contract: null or a NUL-terminated string.
    unsafe { cstr(p) }.ok_or(PMI_ERR_INVALID_ARG)
}

fn out_int(p: *mut c_int, v: i32) -> R<()> {
    // SAFETY: the C contract: null or a valid int pointer.
    if unsafe { put_int(p, v) } {
        Ok(())
    } else {
        Err(PMI_ERR_INVALID_ARG)
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMI_Init(spawned: *mut c_int) -> c_int {
    guard(PMI_FAIL, || {
        if spawned.is_null() {
            return PMI_ERR_INVALID_ARG;
        }
        let mut g = lock(&STATE);
        if g.is_none() {
            match State::init() {
                Ok(st) => *g = Some(st),
                Err(rc) => return rc,
            }
        }
        let sp = g.as_ref().is_some_and(|s| s.spawned);
        // SAFETY: checked non-null above; the C contract says it is writable.
        unsafe { put_int(spawned, c_int::from(sp)) };
        PMI_SUCCESS
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMI_Initialized(initialized: *mut c_int) -> c_int {
    guard(PMI_FAIL, || {
        let init = lock(&STATE).is_some();
        match out_int(initialized, c_int::from(init)) {
            Ok(()) => PMI_SUCCESS,
            Err(rc) => rc,
        }
    })
}

#[no_mangle]
pub extern "C" fn PMI_Finalize() -> c_int {
    guard(PMI_FAIL, || {
        let mut g = lock(&STATE);
        let Some(mut st) = g.take() else { return PMI_SUCCESS };
        match st.call(&Request::Finalize) {
            Ok(None | Some(Reply::FinalizeAck)) => PMI_SUCCESS,
            _ => PMI_FAIL,
        }
        // `st` dropped here: the socket is closed.
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMI_Get_size(size: *mut c_int) -> c_int {
    with(|st| out_int(size, st.size))
}

#[no_mangle]
pub unsafe extern "C" fn PMI_Get_rank(rank: *mut c_int) -> c_int {
    with(|st| out_int(rank, st.rank))
}

#[no_mangle]
pub unsafe extern "C" fn PMI_Get_appnum(appnum: *mut c_int) -> c_int {
    with(|st| out_int(appnum, st.appnum))
}

#[no_mangle]
pub unsafe extern "C" fn PMI_Get_universe_size(size: *mut c_int) -> c_int {
    with(|st| {
        if size.is_null() {
            return Err(PMI_ERR_INVALID_ARG);
        }
        let u = match st.call(&Request::GetUniverseSize)? {
            None => 1,
            Some(Reply::UniverseSize { size }) => size,
            Some(_) => return Err(PMI_FAIL),
        };
        out_int(size, u)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMI_Abort(exit_code: c_int, error_msg: *const c_char) -> c_int {
    guard(PMI_FAIL, || {
        // SAFETY: the C contract: null or a NUL-terminated string.
        if let Some(m) = unsafe { cstr(error_msg) } {
            eprintln!("PMI_Abort({exit_code}): {m}");
        }
        let mut g = lock(&STATE);
        if let Some(conn) = g.as_mut().and_then(|s| s.conn.as_mut()) {
            let mut bytes = Vec::new();
            // Only the exit code: the form every server (Hydra 4.0 included) reads.
            Request::Abort { exitcode: exit_code, message: None }.encode(&mut bytes);
            let _ = conn.send(&bytes);
        }
        std::process::exit(exit_code)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMI_KVS_Get_my_name(kvsname: *mut c_char, length: c_int) -> c_int {
    with(|st| {
        let cap = usize::try_from(length).map_err(|_| PMI_ERR_INVALID_LENGTH)?;
        if kvsname.is_null() {
            return Err(PMI_ERR_INVALID_ARG);
        }
        // SAFETY: the C contract: `kvsname` holds `length` bytes.
        if unsafe { put_cstr(kvsname, cap, &st.kvsname) } {
            Ok(())
        } else {
            Err(PMI_ERR_INVALID_LENGTH)
        }
    })
}

fn max_out(p: *mut c_int, v: usize) -> c_int {
    guard(PMI_FAIL, || match out_int(p, v as i32) {
        Ok(()) => PMI_SUCCESS,
        Err(rc) => rc,
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMI_KVS_Get_name_length_max(length: *mut c_int) -> c_int {
    max_out(length, KVSNAME_MAX)
}

#[no_mangle]
pub unsafe extern "C" fn PMI_KVS_Get_key_length_max(length: *mut c_int) -> c_int {
    max_out(length, KEYLEN_MAX)
}

#[no_mangle]
pub unsafe extern "C" fn PMI_KVS_Get_value_length_max(length: *mut c_int) -> c_int {
    max_out(length, VALLEN_MAX)
}

#[no_mangle]
pub unsafe extern "C" fn PMI_KVS_Put(
    kvsname: *const c_char,
    key: *const c_char,
    value: *const c_char,
) -> c_int {
    with(|st| {
        let (kvsname, key) = (arg(kvsname)?, arg(key)?);
        // SAFETY: the C contract: null or a NUL-terminated string.
        let value = unsafe { cbytes(value) }.ok_or(PMI_ERR_INVALID_ARG)?;
        if key.is_empty() || key.len() > KEYLEN_MAX || key.contains([' ', '\n', '=']) {
            return Err(PMI_ERR_INVALID_KEY);
        }
        if value.len() > VALLEN_MAX || value.contains(&b'\n') {
            return Err(PMI_ERR_INVALID_VAL);
        }
        match st.call(&Request::Put { kvsname, key: key.clone(), value: value.clone() })? {
            None => {
                st.kvs.insert(key, value);
                Ok(())
            }
            Some(Reply::PutResult { rc: 0, .. }) => Ok(()),
            Some(_) => Err(PMI_FAIL),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMI_KVS_Commit(kvsname: *const c_char) -> c_int {
    with(|_| arg(kvsname).map(|_| ()))
}

#[no_mangle]
pub extern "C" fn PMI_Barrier() -> c_int {
    with(|st| match st.call(&Request::BarrierIn { group: None })? {
        None | Some(Reply::BarrierOut) => Ok(()),
        Some(_) => Err(PMI_FAIL),
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMI_KVS_Get(
    kvsname: *const c_char,
    key: *const c_char,
    value: *mut c_char,
    length: c_int,
) -> c_int {
    with(|st| {
        let (kvsname, key) = (arg(kvsname)?, arg(key)?);
        let cap = usize::try_from(length).map_err(|_| PMI_ERR_INVALID_LENGTH)?;
        if value.is_null() {
            return Err(PMI_ERR_INVALID_ARG);
        }
        let v = match st.call(&Request::Get { kvsname, key: key.clone() })? {
            None => st.kvs.get(&key).cloned().ok_or(PMI_FAIL)?,
            Some(Reply::GetResult { value: Ok(v) }) => v,
            Some(Reply::GetResult { value: Err(GetMiss { .. }) }) => return Err(PMI_FAIL),
            Some(_) => return Err(PMI_FAIL),
        };
        // SAFETY: the C contract: `value` holds `length` bytes.
        if unsafe { put_cstr(value, cap, &v) } {
            Ok(())
        } else {
            Err(PMI_ERR_INVALID_LENGTH)
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMI_Publish_name(
    service_name: *const c_char,
    port: *const c_char,
) -> c_int {
    with(|st| {
        let (service, port) = (arg(service_name)?, arg(port)?);
        match st.call(&Request::PublishName { service: service.clone(), port: port.clone() })? {
            None if st.names.contains_key(&service) => Err(PMI_FAIL),
            None => {
                st.names.insert(service, port);
                Ok(())
            }
            Some(Reply::PublishResult { rc: 0, .. }) => Ok(()),
            Some(_) => Err(PMI_FAIL),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMI_Unpublish_name(service_name: *const c_char) -> c_int {
    with(|st| {
        let service = arg(service_name)?;
        match st.call(&Request::UnpublishName { service: service.clone() })? {
            None => st.names.remove(&service).map(|_| ()).ok_or(PMI_FAIL),
            Some(Reply::UnpublishResult { rc: 0, .. }) => Ok(()),
            Some(_) => Err(PMI_FAIL),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMI_Lookup_name(service_name: *const c_char, port: *mut c_char) -> c_int {
    with(|st| {
        let service = arg(service_name)?;
        if port.is_null() {
            return Err(PMI_ERR_INVALID_ARG);
        }
        let p = match st.call(&Request::LookupName { service: service.clone() })? {
            None => st.names.get(&service).cloned().ok_or(PMI_FAIL)?,
            Some(Reply::LookupResult { port: Some(p) }) => p,
            Some(_) => return Err(PMI_FAIL),
        };
        // SAFETY: the header documents a PMI_MAX_PORT_NAME-byte buffer.
        unsafe { put_cstr_trunc(port, PMI_MAX_PORT_NAME, &p) };
        Ok(())
    })
}

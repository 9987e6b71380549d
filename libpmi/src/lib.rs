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
#![deny(clippy::undocumented_unsafe_blocks)]

use std::collections::HashMap;
use std::ffi::{c_char, c_int};
use std::sync::Mutex;

use pmi_client::cutil::{cbytes, cstr, env_int, guard, lock, put_cstr, put_cstr_trunc, put_int};
use pmi_client::spawn::{self, Refused};
use pmi_client::Transport;
use pmi_wire::v1::{
    GetMiss, Reply, Request, SpawnCmd, KEYLEN_MAX, KVSNAME_MAX, MAX_SPAWN_LIST, VALLEN_MAX,
};

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
    /// Where `PMI_KVS_Iter_next` goes on (the `nextidx` of the last `getbyidx` answer).
    iter_next: u64,
    /// The node-local ranks, once asked for.
    clique: Option<Vec<i32>>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

type R<T> = Result<T, c_int>;

impl State {
    fn call(&mut self, req: &Request) -> R<Option<Reply>> {
        let mut bytes = Vec::new();
        req.encode(&mut bytes);
        match self.call_raw(&bytes)? {
            None => Ok(None),
            Some(line) => Reply::parse(&line).map(Some).map_err(|_| PMI_FAIL),
        }
    }

    /// One request as bytes, its reply line as bytes (`Ok(None)` for a singleton).
    fn call_raw(&mut self, bytes: &[u8]) -> R<Option<Vec<u8>>> {
        let Some(conn) = self.conn.as_mut() else { return Ok(None) };
        conn.send(bytes).map_err(|_| PMI_FAIL)?;
        conn.read_line().map(Some).map_err(|_| PMI_FAIL)
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
            iter_next: 0,
            clique: None,
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

/// Copy `s` and its NUL into the caller's `dst` of `length` bytes (`PMI_ERR_INVALID_LENGTH`
/// when it does not fit).
fn out_str(dst: *mut c_char, length: c_int, s: impl AsRef<[u8]>) -> R<()> {
    let cap = usize::try_from(length).map_err(|_| PMI_ERR_INVALID_LENGTH)?;
    if dst.is_null() {
        return Err(PMI_ERR_INVALID_ARG);
    }
    // SAFETY: the C contract: `dst` holds `length` bytes.
    if unsafe { put_cstr(dst, cap, s) } {
        Ok(())
    } else {
        Err(PMI_ERR_INVALID_LENGTH)
    }
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
    with(|st| out_str(kvsname, length, &st.kvsname))
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
        if length < 0 {
            return Err(PMI_ERR_INVALID_LENGTH);
        }
        if value.is_null() {
            return Err(PMI_ERR_INVALID_ARG);
        }
        let v = match st.call(&Request::Get { kvsname, key: key.clone() })? {
            None => st.kvs.get(&key).cloned().ok_or(PMI_FAIL)?,
            Some(Reply::GetResult { value: Ok(v) }) => v,
            Some(Reply::GetResult { value: Err(GetMiss { .. }) }) => return Err(PMI_FAIL),
            Some(_) => return Err(PMI_FAIL),
        };
        out_str(value, length, &v)
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

// ---------------------------------------------------------------------------------------------
// The rest of the API: what MPICH's older pmi.h and Slurm's libpmi also declare.

/// `PMI_keyval_t` of `pmi.h`: a key and its value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PMI_keyval_t {
    pub key: *const c_char,
    pub val: *mut c_char,
}

/// The value (the text after `name=`, up to a space) of field `name` in a reply line.
fn field(line: &[u8], name: &str) -> Option<String> {
    let line = String::from_utf8_lossy(line);
    line.trim_end_matches('\n')
        .split(' ')
        .find_map(|t| t.strip_prefix(name).and_then(|r| r.strip_prefix('=')))
        .map(str::to_owned)
}

/// `PMI_Get_id`, `PMI_Get_kvs_domain_id`: this job's id, which is its KVS name (as MPICH's
/// client answers both).
#[no_mangle]
pub unsafe extern "C" fn PMI_Get_id(id_str: *mut c_char, length: c_int) -> c_int {
    // SAFETY: same contract as PMI_KVS_Get_my_name's.
    unsafe { PMI_KVS_Get_my_name(id_str, length) }
}

#[no_mangle]
pub unsafe extern "C" fn PMI_Get_kvs_domain_id(id_str: *mut c_char, length: c_int) -> c_int {
    // SAFETY: same contract as PMI_KVS_Get_my_name's.
    unsafe { PMI_KVS_Get_my_name(id_str, length) }
}

#[no_mangle]
pub unsafe extern "C" fn PMI_Get_id_length_max(length: *mut c_int) -> c_int {
    max_out(length, KVSNAME_MAX)
}

impl State {
    /// This process's node-local ranks: from `PMI_process_mapping` (the job's pre-put pair)
    /// when the server has one that places this rank, else this rank alone (what MPICH's
    /// client always answered).
    fn clique(&mut self) -> R<Vec<i32>> {
        if let Some(c) = &self.clique {
            return Ok(c.clone());
        }
        let req = Request::Get { kvsname: self.kvsname.clone(), key: "PMI_process_mapping".into() };
        let mapping = match self.call(&req)? {
            Some(Reply::GetResult { value: Ok(v) }) => {
                Some(String::from_utf8_lossy(&v).into_owned())
            }
            _ => None,
        };
        let c = mapping
            .and_then(|m| pmi_client::mapping::clique(&m, self.size, self.rank))
            .unwrap_or_else(|| vec![self.rank]);
        self.clique = Some(c.clone());
        Ok(c)
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMI_Get_clique_size(size: *mut c_int) -> c_int {
    with(|st| {
        if size.is_null() {
            return Err(PMI_ERR_INVALID_ARG);
        }
        let n = st.clique()?.len();
        out_int(size, i32::try_from(n).unwrap_or(i32::MAX))
    })
}

/// `length` must hold the whole clique (`PMI_Get_clique_size`), else
/// `PMI_ERR_INVALID_LENGTH` and nothing is written.
#[no_mangle]
pub unsafe extern "C" fn PMI_Get_clique_ranks(ranks: *mut c_int, length: c_int) -> c_int {
    with(|st| {
        if ranks.is_null() {
            return Err(PMI_ERR_INVALID_ARG);
        }
        let c = st.clique()?;
        if usize::try_from(length).map_or(true, |l| l < c.len()) {
            return Err(PMI_ERR_INVALID_LENGTH);
        }
        for (i, r) in c.iter().enumerate() {
            // SAFETY: the C contract: `ranks` holds `length` ≥ c.len() ints.
            unsafe { *ranks.add(i) = *r };
        }
        Ok(())
    })
}

/// MPICH's client asks the server with `cmd=create_kvs` (answer `cmd=newkvs kvsname=K`); a
/// server that refuses the command (libi) makes it `PMI_FAIL` (Hydra ends the job on it). A singleton "creates"
/// its own KVS, as MPICH's does.
#[no_mangle]
pub unsafe extern "C" fn PMI_KVS_Create(kvsname: *mut c_char, length: c_int) -> c_int {
    with(|st| {
        if length < 0 {
            return Err(PMI_ERR_INVALID_LENGTH);
        }
        if kvsname.is_null() {
            return Err(PMI_ERR_INVALID_ARG);
        }
        let name = match st.call_raw(b"cmd=create_kvs\n")? {
            None => st.kvsname.clone(),
            Some(line) if field(&line, "cmd").as_deref() == Some("newkvs") => {
                field(&line, "kvsname").ok_or(PMI_FAIL)?
            }
            Some(_) => return Err(PMI_FAIL),
        };
        out_str(kvsname, length, &name)
    })
}

/// `cmd=destroy_kvs kvsname=K` (answer `cmd=kvs_destroyed rc=0`), as MPICH's client sends
/// it; anything else is `PMI_FAIL`. A singleton has nothing to destroy: `PMI_SUCCESS`.
#[no_mangle]
pub unsafe extern "C" fn PMI_KVS_Destroy(kvsname: *const c_char) -> c_int {
    with(|st| {
        let name = arg(kvsname)?;
        if name.is_empty() || name.len() > KVSNAME_MAX || name.contains([' ', '\n', '=']) {
            return Err(PMI_ERR_INVALID_ARG);
        }
        match st.call_raw(format!("cmd=destroy_kvs kvsname={name}\n").as_bytes())? {
            None => Ok(()),
            Some(line)
                if field(&line, "cmd").as_deref() == Some("kvs_destroyed")
                    && field(&line, "rc").as_deref() == Some("0") =>
            {
                Ok(())
            }
            Some(_) => Err(PMI_FAIL),
        }
    })
}

/// One step of the KVS iterator: the pair at index `idx` (`cmd=getbyidx`, as MPICH's client
/// asks; a singleton walks its own KVS in key order). The end is an empty key and
/// `PMI_SUCCESS`.
unsafe fn iter_at(
    kvsname: *const c_char,
    first: bool,
    key: *mut c_char,
    key_len: c_int,
    val: *mut c_char,
    val_len: c_int,
) -> c_int {
    with(|st| {
        let kvsname = arg(kvsname)?;
        if key.is_null() {
            return Err(PMI_ERR_INVALID_KEY);
        }
        if val.is_null() {
            return Err(PMI_ERR_INVALID_VAL);
        }
        let kcap = usize::try_from(key_len).ok().filter(|&n| n > 0);
        let kcap = kcap.ok_or(PMI_ERR_INVALID_KEY_LENGTH)?;
        let vcap = usize::try_from(val_len).ok().filter(|&n| n > 0);
        let vcap = vcap.ok_or(PMI_ERR_INVALID_VAL_LENGTH)?;
        let idx = if first { 0 } else { st.iter_next };
        let entry = match st.call(&Request::GetByIdx { kvsname, idx })? {
            None => {
                let mut keys: Vec<&String> = st.kvs.keys().collect();
                keys.sort();
                let k = usize::try_from(idx).ok().and_then(|i| keys.get(i).copied());
                k.and_then(|k| Some((idx + 1, k.clone(), st.kvs.get(k)?.clone())))
            }
            Some(Reply::GetByIdxResult { entry }) => {
                entry.map(|(next, k, v)| (next, k, v.into_bytes()))
            }
            Some(_) => return Err(PMI_FAIL),
        };
        let Some((next, k, v)) = entry else {
            st.iter_next = 0;
            // SAFETY: key holds key_len ≥ 1 bytes, val val_len ≥ 1.
            unsafe { (*key, *val) = (0, 0) };
            return Ok(());
        };
        st.iter_next = next;
        // SAFETY: the C contract: `key` holds `key_len` bytes, `val` `val_len`.
        if !unsafe { put_cstr(key, kcap, &k) } {
            return Err(PMI_ERR_INVALID_KEY_LENGTH);
        }
        // SAFETY: as above.
        if !unsafe { put_cstr(val, vcap, &v) } {
            return Err(PMI_ERR_INVALID_VAL_LENGTH);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMI_KVS_Iter_first(
    kvsname: *const c_char,
    key: *mut c_char,
    key_len: c_int,
    val: *mut c_char,
    val_len: c_int,
) -> c_int {
    // SAFETY: forwarded C contract.
    unsafe { iter_at(kvsname, true, key, key_len, val, val_len) }
}

#[no_mangle]
pub unsafe extern "C" fn PMI_KVS_Iter_next(
    kvsname: *const c_char,
    key: *mut c_char,
    key_len: c_int,
    val: *mut c_char,
    val_len: c_int,
) -> c_int {
    // SAFETY: forwarded C contract.
    unsafe { iter_at(kvsname, false, key, key_len, val, val_len) }
}

/// The pairs of a `PMI_keyval_t` array of `n` entries (both strings must be there).
unsafe fn keyvals(p: *const PMI_keyval_t, n: usize) -> Result<Vec<(String, String)>, Refused> {
    (0..n)
        .map(|i| {
            // SAFETY: the C contract: `p` holds `n` entries of two C strings each.
            let kv = unsafe { spawn::at(p, n, i) }.ok_or(Refused::Arg)?;
            // SAFETY: as above.
            unsafe { Ok((spawn::text(kv.key)?, spawn::text(kv.val)?)) }
        })
        .collect()
}

/// The arguments of a NULL-terminated argv (none for a null array).
unsafe fn argv_list(argv: *const *const c_char) -> Result<Vec<String>, Refused> {
    let mut out = Vec::new();
    if argv.is_null() {
        return Ok(out);
    }
    loop {
        if out.len() > MAX_SPAWN_LIST {
            return Err(Refused::Length);
        }
        // SAFETY: the C contract: a NULL-terminated array, read up to its NULL.
        let a = unsafe { *argv.add(out.len()) };
        if a.is_null() {
            return Ok(out);
        }
        // SAFETY: a non-null entry is a C string.
        out.push(unsafe { spawn::text(a) }?);
    }
}

fn refused(r: Refused) -> c_int {
    match r {
        Refused::Arg => PMI_ERR_INVALID_ARG,
        Refused::Length => PMI_ERR_INVALID_LENGTH,
    }
}

/// `mcmd=spawn`, one segment per command (MPICH 4.0's form); `spawn_result rc≠0` or any
/// other answer is `PMI_FAIL`. `errors` gets one code per process (all 0 when the server
/// sends none). A singleton has no process manager to spawn with: `PMI_FAIL`.
/// `info_keyval_sizes` may be null (no info for any command).
#[no_mangle]
pub unsafe extern "C" fn PMI_Spawn_multiple(
    count: c_int,
    cmds: *const *const c_char,
    argvs: *const *const *const c_char,
    maxprocs: *const c_int,
    info_keyval_sizes: *const c_int,
    info_keyval_vectors: *const *const PMI_keyval_t,
    preput_keyval_size: c_int,
    preput_keyval_vector: *const PMI_keyval_t,
    errors: *mut c_int,
) -> c_int {
    with(|st| {
        let n = usize::try_from(count).unwrap_or(0);
        let read = || -> Result<Vec<SpawnCmd>, Refused> {
            let np = spawn::count(preput_keyval_size, MAX_SPAWN_LIST)?;
            // SAFETY: the C contract: `preput_keyval_vector` holds `preput_keyval_size` pairs.
            let preput = unsafe { keyvals(preput_keyval_vector, np) }?;
            let args = |i| {
                // SAFETY: `argvs` is null or holds `count` argv arrays.
                unsafe { argv_list(spawn::at(argvs, n, i).unwrap_or(std::ptr::null())) }
            };
            let info = |i| {
                // SAFETY: the sizes and vectors hold `count` entries; vector i `sizes[i]`.
                unsafe { spawn::info_at(info_keyval_sizes, info_keyval_vectors, n, i, keyvals) }
            };
            // SAFETY: `cmds` and `maxprocs` hold `count` entries.
            unsafe { spawn::read_cmds(count, cmds, maxprocs, args, info, preput) }
        };
        let cmds = read().map_err(refused)?;
        if st.conn.is_none() {
            return Err(PMI_FAIL);
        }
        let total = spawn::total_procs(&cmds);
        match st.call(&Request::Spawn { cmds })? {
            Some(Reply::SpawnResult { rc: 0, errcodes }) => {
                // SAFETY: the C contract: `errors` holds one int per process.
                if unsafe { spawn::put_errcodes(errors, total, errcodes.as_deref()) } {
                    Ok(())
                } else {
                    Err(PMI_FAIL)
                }
            }
            _ => Err(PMI_FAIL),
        }
    })
}

pub const PMI_ERR_INVALID_NUM_ARGS: c_int = 9;
pub const PMI_ERR_INVALID_ARGS: c_int = 10;
pub const PMI_ERR_INVALID_NUM_PARSED: c_int = 11;
pub const PMI_ERR_INVALID_KEYVALP: c_int = 12;
pub const PMI_ERR_INVALID_SIZE: c_int = 13;

/// Deprecated; as MPICH's client: the arguments are checked, no option is taken
/// (`*num_parsed = 0`, `*keyvalp = NULL`, `*size = 0`).
#[no_mangle]
pub unsafe extern "C" fn PMI_Parse_option(
    num_args: c_int,
    args: *mut *mut c_char,
    num_parsed: *mut c_int,
    keyvalp: *mut *mut PMI_keyval_t,
    size: *mut c_int,
) -> c_int {
    guard(PMI_FAIL, || {
        if num_args < 1 {
            PMI_ERR_INVALID_NUM_ARGS
        } else if args.is_null() {
            PMI_ERR_INVALID_ARGS
        } else if num_parsed.is_null() {
            PMI_ERR_INVALID_NUM_PARSED
        } else if keyvalp.is_null() {
            PMI_ERR_INVALID_KEYVALP
        } else if size.is_null() {
            PMI_ERR_INVALID_SIZE
        } else {
            // SAFETY: all three checked non-null; the C contract makes them writable.
            unsafe { (*num_parsed, *keyvalp, *size) = (0, std::ptr::null_mut(), 0) };
            PMI_SUCCESS
        }
    })
}

/// Deprecated; as MPICH's client, no argument is taken out of `argv` (`*keyvalp = NULL`,
/// `*size = 0`; argc and argv are left alone).
#[no_mangle]
pub unsafe extern "C" fn PMI_Args_to_keyval(
    argcp: *mut c_int,
    argvp: *mut *mut *mut c_char,
    keyvalp: *mut *mut PMI_keyval_t,
    size: *mut c_int,
) -> c_int {
    guard(PMI_FAIL, || {
        if argcp.is_null() || argvp.is_null() || keyvalp.is_null() || size.is_null() {
            return PMI_ERR_INVALID_ARG;
        }
        // SAFETY: checked non-null; the C contract makes them writable.
        unsafe { (*keyvalp, *size) = (std::ptr::null_mut(), 0) };
        PMI_SUCCESS
    })
}

/// Deprecated; as MPICH's client: frees (with `free`) each key and value and the array of
/// `size` entries. `size < 0`, or a null array with `size > 0`, is `PMI_ERR_INVALID_ARG`;
/// `size == 0` frees nothing.
#[no_mangle]
pub unsafe extern "C" fn PMI_Free_keyvals(keyvalp: *mut PMI_keyval_t, size: c_int) -> c_int {
    guard(PMI_FAIL, || {
        let Ok(n) = usize::try_from(size) else { return PMI_ERR_INVALID_ARG };
        if n == 0 {
            return PMI_SUCCESS;
        }
        if keyvalp.is_null() {
            return PMI_ERR_INVALID_ARG;
        }
        for i in 0..n {
            // SAFETY: the C contract: `size` entries whose strings (and the array) come from
            // malloc, as PMI_Parse_option's and PMI_Args_to_keyval's would.
            unsafe {
                let kv = *keyvalp.add(i);
                libc::free(kv.key as *mut libc::c_void);
                libc::free(kv.val.cast());
            }
        }
        // SAFETY: as above.
        unsafe { libc::free(keyvalp.cast()) };
        PMI_SUCCESS
    })
}

/// Deprecated: this library has no command-line options of its own, so the description is
/// the empty string. `*length` is the buffer's size on entry and the description's length
/// on return (or the size it needs, with `PMI_ERR_NOMEM`, when the buffer is too small).
#[no_mangle]
pub unsafe extern "C" fn PMI_Get_options(str: *mut c_char, length: *mut c_int) -> c_int {
    guard(PMI_FAIL, || {
        const OPTIONS: &str = "";
        if str.is_null() || length.is_null() {
            return PMI_ERR_INVALID_ARG;
        }
        // SAFETY: checked non-null; the C contract makes it readable and writable.
        let cap = unsafe { *length };
        let fits = usize::try_from(cap).is_ok_and(|c| c > OPTIONS.len());
        // SAFETY: `str` holds `*length` bytes when `fits`; nothing is written otherwise.
        if fits && unsafe { put_cstr(str, OPTIONS.len() + 1, OPTIONS) } {
            // SAFETY: as above.
            unsafe { *length = OPTIONS.len() as c_int };
            PMI_SUCCESS
        } else {
            // SAFETY: as above.
            unsafe { *length = OPTIONS.len() as c_int + 1 };
            PMI_ERR_NOMEM
        }
    })
}

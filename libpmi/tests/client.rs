//! libpmi against a real PMI-1 server (pmi-wire's Connection over a socketpair), then as a
//! singleton. One test function: the library state and `PMI_FD` are process-wide.

use std::ffi::{c_char, c_int, CStr, CString};

use libi_test_servers::pmi as pmi_server;

use pmi::*;
use pmi_wire::server::Action;

fn c(s: &str) -> CString {
    CString::new(s).expect("cstring")
}

fn get(kvs: &CStr, key: &str) -> (c_int, String) {
    let mut buf = [0 as c_char; 64];
    // SAFETY: valid C strings and a 64-byte buffer.
    let rc = unsafe { PMI_KVS_Get(kvs.as_ptr(), c(key).as_ptr(), buf.as_mut_ptr(), 64) };
    // SAFETY: the library NUL-terminates within the buffer.
    (rc, unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
}

#[test]
fn over_pmi_fd_then_singleton() {
    // --- with a server
    let server = pmi_server::start();
    let (mut spawned, mut rank, mut size, mut usize_) = (-1, -1, -1, -1);
    // SAFETY: valid out-pointers throughout.
    unsafe {
        assert_eq!(PMI_Get_rank(&mut rank), PMI_ERR_INIT);
        assert_eq!(PMI_Init(&mut spawned), PMI_SUCCESS);
        assert_eq!(spawned, 0);
        assert_eq!(PMI_Get_rank(&mut rank), PMI_SUCCESS);
        assert_eq!(PMI_Get_size(&mut size), PMI_SUCCESS);
        assert_eq!((rank, size), (0, 1));
        assert_eq!(PMI_Get_universe_size(&mut usize_), PMI_SUCCESS);
        assert_eq!(usize_, 3);
        assert_eq!(PMI_Get_rank(std::ptr::null_mut()), PMI_ERR_INVALID_ARG);
    }
    let mut name = [0 as c_char; 256];
    // SAFETY: 256-byte buffer.
    assert_eq!(unsafe { PMI_KVS_Get_my_name(name.as_mut_ptr(), 256) }, PMI_SUCCESS);
    // SAFETY: NUL-terminated by the library.
    let kvs = unsafe { CStr::from_ptr(name.as_ptr()) }.to_owned();
    assert_eq!(kvs.to_str().expect("utf8"), pmi_server::KVSNAME);
    // SAFETY: valid C strings.
    unsafe {
        assert_eq!(PMI_KVS_Put(kvs.as_ptr(), c("k").as_ptr(), c("v=1").as_ptr()), PMI_SUCCESS);
        assert_eq!(PMI_KVS_Put(kvs.as_ptr(), c("").as_ptr(), c("x").as_ptr()), PMI_ERR_INVALID_KEY);
        assert_eq!(
            PMI_KVS_Put(kvs.as_ptr(), std::ptr::null(), c("x").as_ptr()),
            PMI_ERR_INVALID_ARG
        );
        assert_eq!(PMI_KVS_Commit(kvs.as_ptr()), PMI_SUCCESS);
    }
    assert_eq!(PMI_Barrier(), PMI_SUCCESS);
    assert_eq!(get(&kvs, "k"), (PMI_SUCCESS, "v=1".into()));
    assert_eq!(get(&kvs, "nope").0, PMI_FAIL);
    let mut port = [0 as c_char; PMI_MAX_PORT_NAME];
    // SAFETY: valid C strings and a PMI_MAX_PORT_NAME buffer.
    unsafe {
        assert_eq!(PMI_Publish_name(c("svc").as_ptr(), c("p1").as_ptr()), PMI_SUCCESS);
        assert_eq!(PMI_Publish_name(c("svc").as_ptr(), c("p2").as_ptr()), PMI_FAIL);
        assert_eq!(PMI_Lookup_name(c("svc").as_ptr(), port.as_mut_ptr()), PMI_SUCCESS);
        assert_eq!(CStr::from_ptr(port.as_ptr()).to_str(), Ok("p1"));
        assert_eq!(PMI_Unpublish_name(c("svc").as_ptr()), PMI_SUCCESS);
        assert_eq!(PMI_Lookup_name(c("svc").as_ptr(), port.as_mut_ptr()), PMI_FAIL);
    }
    // Legacy calls a server answers: the iterator ends at once (the server lists no pairs),
    // create_kvs is not a command of it.
    assert_eq!(iter(&kvs, true), (PMI_SUCCESS, String::new(), String::new()));
    let mut newkvs = [0 as c_char; 256];
    // SAFETY: 256-byte buffer.
    assert_eq!(unsafe { PMI_KVS_Create(newkvs.as_mut_ptr(), 256) }, PMI_FAIL);
    assert_eq!(PMI_Finalize(), PMI_SUCCESS);
    let seen = server.join().expect("server");
    assert!(seen.contains(&Action::Put { key: "k".into(), value: "v=1".into() }), "{seen:?}");
    assert!(seen.contains(&Action::Finalized), "{seen:?}");

    // --- singleton
    std::env::remove_var("PMI_FD");
    let mut init = -1;
    // SAFETY: valid pointers and strings.
    unsafe {
        assert_eq!(PMI_Initialized(&mut init), PMI_SUCCESS);
        assert_eq!(init, 0);
        assert_eq!(PMI_Init(&mut spawned), PMI_SUCCESS);
        assert_eq!(PMI_Get_size(&mut size), PMI_SUCCESS);
        assert_eq!(size, 1);
        assert_eq!(PMI_KVS_Get_my_name(name.as_mut_ptr(), 256), PMI_SUCCESS);
        assert_eq!(PMI_KVS_Get_my_name(name.as_mut_ptr(), 2), PMI_ERR_INVALID_LENGTH);
        assert_eq!(PMI_KVS_Get_my_name(name.as_mut_ptr(), 256), PMI_SUCCESS);
    }
    // SAFETY: NUL-terminated by the library.
    let kvs = unsafe { CStr::from_ptr(name.as_ptr()) }.to_owned();
    // SAFETY: valid C strings.
    unsafe {
        assert_eq!(PMI_KVS_Put(kvs.as_ptr(), c("a").as_ptr(), c("b").as_ptr()), PMI_SUCCESS);
    }
    assert_eq!(PMI_Barrier(), PMI_SUCCESS);
    assert_eq!(get(&kvs, "a"), (PMI_SUCCESS, "b".into()));
    legacy_singleton(&kvs);
    assert_eq!(PMI_Finalize(), PMI_SUCCESS);
}

/// One step of the KVS iterator with 64-byte buffers: (rc, key, value).
fn iter(kvs: &CStr, first: bool) -> (c_int, String, String) {
    let (mut k, mut v) = ([0 as c_char; 64], [0 as c_char; 64]);
    // SAFETY: valid C string and two 64-byte buffers.
    let rc = unsafe {
        if first {
            PMI_KVS_Iter_first(kvs.as_ptr(), k.as_mut_ptr(), 64, v.as_mut_ptr(), 64)
        } else {
            PMI_KVS_Iter_next(kvs.as_ptr(), k.as_mut_ptr(), 64, v.as_mut_ptr(), 64)
        }
    };
    let s = |b: &[c_char]| {
        // SAFETY: NUL-terminated by the library (or zeroes).
        unsafe { CStr::from_ptr(b.as_ptr()) }.to_string_lossy().into_owned()
    };
    (rc, s(&k), s(&v))
}

/// The calls older MPICH and Slurm declare, as a singleton (one pair "a"="b" in the KVS).
fn legacy_singleton(kvs: &CStr) {
    let (mut n, mut ranks) = (-1, [-1 as c_int; 2]);
    let mut id = [0 as c_char; 256];
    // SAFETY: valid pointers and buffers of the sizes given.
    unsafe {
        assert_eq!(PMI_Get_clique_size(&mut n), PMI_SUCCESS);
        assert_eq!(n, 1);
        assert_eq!(PMI_Get_clique_ranks(ranks.as_mut_ptr(), 0), PMI_ERR_INVALID_LENGTH);
        assert_eq!(PMI_Get_clique_ranks(ranks.as_mut_ptr(), 2), PMI_SUCCESS);
        assert_eq!(ranks, [0, -1]);
        assert_eq!(PMI_Get_id_length_max(&mut n), PMI_SUCCESS);
        assert_eq!(PMI_Get_id(id.as_mut_ptr(), n), PMI_SUCCESS);
        assert_eq!(CStr::from_ptr(id.as_ptr()), kvs);
        assert_eq!(PMI_Get_kvs_domain_id(id.as_mut_ptr(), 256), PMI_SUCCESS);
        assert_eq!(PMI_KVS_Create(id.as_mut_ptr(), 256), PMI_SUCCESS);
        assert_eq!(PMI_KVS_Destroy(id.as_ptr()), PMI_SUCCESS);
    }
    assert_eq!(iter(kvs, true), (PMI_SUCCESS, "a".into(), "b".into()));
    assert_eq!(iter(kvs, false), (PMI_SUCCESS, String::new(), String::new()));
    // A singleton cannot spawn; refused arrays are refused first.
    let exe = c("/bin/true");
    let cmds = [exe.as_ptr()];
    let (procs, mut errs) = ([2], [-1; 2]);
    let spawn = |count: c_int, errs: *mut c_int| {
        use std::ptr::null as p;
        // SAFETY: one-element arrays, null for the optional ones.
        unsafe {
            PMI_Spawn_multiple(count, cmds.as_ptr(), p(), procs.as_ptr(), p(), p(), 0, p(), errs)
        }
    };
    assert_eq!(spawn(0, errs.as_mut_ptr()), PMI_ERR_INVALID_ARG);
    assert_eq!(spawn(1, errs.as_mut_ptr()), PMI_FAIL);
    // Deprecated option calls, as MPICH's client answers them.
    let (mut parsed, mut size) = (-1, -1);
    let mut kv: *mut PMI_keyval_t = std::ptr::dangling_mut();
    let mut arg0 = c("-x").into_raw();
    let args: *mut *mut c_char = &mut arg0;
    // SAFETY: valid pointers; PMI_Free_keyvals gets a malloc'd array of malloc'd strings.
    unsafe {
        assert_eq!(
            PMI_Parse_option(0, args, &mut parsed, &mut kv, &mut size),
            PMI_ERR_INVALID_NUM_ARGS
        );
        assert_eq!(PMI_Parse_option(1, args, &mut parsed, &mut kv, &mut size), PMI_SUCCESS);
        assert_eq!((parsed, kv.is_null(), size), (0, true, 0));
        let mut argc = 1;
        let mut argv = args;
        let argvp = (&mut argv as *mut *mut *mut c_char).cast();
        kv = std::ptr::dangling_mut();
        assert_eq!(PMI_Args_to_keyval(&mut argc, argvp, &mut kv, &mut size), PMI_SUCCESS);
        assert_eq!((argc, kv.is_null(), size), (1, true, 0));
        drop(CString::from_raw(arg0));
        assert_eq!(PMI_Free_keyvals(std::ptr::null_mut(), -1), PMI_ERR_INVALID_ARG);
        assert_eq!(PMI_Free_keyvals(std::ptr::null_mut(), 1), PMI_ERR_INVALID_ARG);
        assert_eq!(PMI_Free_keyvals(std::ptr::null_mut(), 0), PMI_SUCCESS);
        let arr = libc::malloc(std::mem::size_of::<PMI_keyval_t>()).cast::<PMI_keyval_t>();
        let key = libc::strdup(c("k").as_ptr());
        *arr = PMI_keyval_t { key, val: libc::strdup(c("v").as_ptr()) };
        assert_eq!(PMI_Free_keyvals(arr, 1), PMI_SUCCESS);
        let (mut buf, mut len) = ([1 as c_char; 4], 4);
        assert_eq!(PMI_Get_options(buf.as_mut_ptr(), &mut len), PMI_SUCCESS);
        assert_eq!((buf[0], len), (0, 0));
        len = 0;
        assert_eq!(PMI_Get_options(buf.as_mut_ptr(), &mut len), PMI_ERR_NOMEM);
        assert_eq!(len, 1);
    }
}

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
    assert_eq!(PMI_Finalize(), PMI_SUCCESS);
}

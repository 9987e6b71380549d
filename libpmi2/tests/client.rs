//! libpmi2 against a real PMI-2 server (pmi-wire's Connection over a socketpair), then as a
//! singleton. One test function: the library state and `PMI_FD` are process-wide.

use std::ffi::{c_char, c_int, CStr, CString};

use libi_test_servers::pmi as pmi_server;

use pmi2::*;
use pmi_wire::server::Action;

fn c(s: &str) -> CString {
    CString::new(s).expect("cstring")
}

fn get(key: &str, cap: c_int) -> (c_int, String, c_int) {
    let mut buf = vec![0 as c_char; 1025];
    let mut len = 0;
    let cap = cap.min(1025);
    // SAFETY: valid C strings, a buffer of at least `cap` bytes.
    let rc = unsafe {
        PMI2_KVS_Get(std::ptr::null(), -1, c(key).as_ptr(), buf.as_mut_ptr(), cap, &mut len)
    };
    // SAFETY: NUL-terminated by the library.
    (rc, unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned(), len)
}

fn attr(job: bool, key: &str) -> (c_int, c_int, String) {
    let mut buf = [0 as c_char; 128];
    let mut found = -1;
    // SAFETY: valid C strings, a 128-byte buffer, valid out-pointer.
    let rc = unsafe {
        if job {
            PMI2_Info_GetJobAttr(c(key).as_ptr(), buf.as_mut_ptr(), 128, &mut found)
        } else {
            PMI2_Info_GetNodeAttr(c(key).as_ptr(), buf.as_mut_ptr(), 128, &mut found, 0)
        }
    };
    // SAFETY: NUL-terminated (or untouched zeroes).
    (rc, found, unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
}

fn session(singleton: bool) {
    let (mut spawned, mut size, mut rank, mut appnum) = (-1, -1, -1, -1);
    assert_eq!(PMI2_Initialized(), 0);
    // SAFETY: valid out-pointers.
    assert_eq!(unsafe { PMI2_Init(&mut spawned, &mut size, &mut rank, &mut appnum) }, PMI2_SUCCESS);
    assert_eq!((spawned, size, rank, appnum), (0, 1, 0, 0));
    assert_eq!(PMI2_Initialized(), 1);
    let mut id = [0 as c_char; 64];
    // SAFETY: 64-byte buffer.
    assert_eq!(unsafe { PMI2_Job_GetId(id.as_mut_ptr(), 64) }, PMI2_SUCCESS);
    // SAFETY: NUL-terminated by the library.
    let id = unsafe { CStr::from_ptr(id.as_ptr()) }.to_string_lossy().into_owned();
    if !singleton {
        assert_eq!(id, pmi_server::KVSNAME);
    }
    // SAFETY: valid C strings (and one null).
    unsafe {
        assert_eq!(PMI2_KVS_Put(c("k").as_ptr(), c("a;b c=d").as_ptr()), PMI2_SUCCESS);
        assert_eq!(PMI2_KVS_Put(std::ptr::null(), c("x").as_ptr()), PMI2_ERR_INVALID_ARG);
        let long = "x".repeat(65);
        assert_eq!(PMI2_KVS_Put(c(&long).as_ptr(), c("x").as_ptr()), PMI2_ERR_INVALID_KEY_LENGTH);
    }
    assert_eq!(PMI2_KVS_Fence(), PMI2_SUCCESS);
    // The server never sends a `;` back (it becomes `_`); the singleton keeps the value.
    let want = if singleton { "a;b c=d" } else { "a_b c=d" };
    assert_eq!(get("k", 1025), (PMI2_SUCCESS, want.into(), 7));
    assert_eq!(get("k", 4), (PMI2_SUCCESS, want[..3].into(), -7));
    assert_eq!(get("missing", 1025).0, PMI2_FAIL);
    assert_eq!(attr(true, "PMI_process_mapping"), (PMI2_SUCCESS, 1, "(vector,(0,1,1))".into()));
    let us = if singleton { "1" } else { "3" };
    assert_eq!(attr(true, "universeSize"), (PMI2_SUCCESS, 1, us.into()));
    assert_eq!(attr(true, "PMI_nothing").1, 0);
    // SAFETY: valid C strings.
    assert_eq!(unsafe { PMI2_Info_PutNodeAttr(c("na").as_ptr(), c("nv").as_ptr()) }, PMI2_SUCCESS);
    assert_eq!(attr(false, "na"), (PMI2_SUCCESS, 1, "nv".into()));
    assert_eq!(attr(false, "nb").1, 0);
    let mut port = [0 as c_char; 64];
    // SAFETY: valid C strings, null info, 64-byte buffer.
    unsafe {
        let null = std::ptr::null();
        assert_eq!(PMI2_Nameserv_publish(c("svc").as_ptr(), null, c("p1").as_ptr()), PMI2_SUCCESS);
        assert_eq!(PMI2_Nameserv_publish(c("svc").as_ptr(), null, c("p2").as_ptr()), PMI2_FAIL);
        assert_eq!(
            PMI2_Nameserv_lookup(c("svc").as_ptr(), null, port.as_mut_ptr(), 64),
            PMI2_SUCCESS
        );
        assert_eq!(CStr::from_ptr(port.as_ptr()).to_str(), Ok("p1"));
        assert_eq!(PMI2_Nameserv_unpublish(c("svc").as_ptr(), null), PMI2_SUCCESS);
        assert_eq!(PMI2_Nameserv_lookup(c("svc").as_ptr(), null, port.as_mut_ptr(), 64), PMI2_FAIL);
    }
    more_api(singleton, us);
    assert_eq!(PMI2_Finalize(), PMI2_SUCCESS);
    assert_eq!(PMI2_Initialized(), 0);
}

/// The calls beyond put/fence/get: integer arrays, node size, ring, connect, spawn.
fn more_api(singleton: bool, universe: &str) {
    let (mut arr, mut n, mut found, mut local) = ([0 as c_int; 4], -1, -1, -1);
    let null = std::ptr::null();
    // SAFETY: valid C strings, a 4-int array, valid out-pointers.
    unsafe {
        assert_eq!(PMI2_Info_GetSize(&mut local), PMI2_SUCCESS);
        assert_eq!(local, 1);
        let us = c("universeSize");
        assert_eq!(
            PMI2_Info_GetJobAttrIntArray(us.as_ptr(), arr.as_mut_ptr(), 4, &mut n, &mut found),
            PMI2_SUCCESS
        );
        assert_eq!((found, n, arr[0].to_string()), (1, 1, universe.to_owned()));
        assert_eq!(PMI2_Info_PutNodeAttr(c("ints").as_ptr(), c("5,6,7").as_ptr()), PMI2_SUCCESS);
        let ints = c("ints");
        assert_eq!(
            PMI2_Info_GetNodeAttrIntArray(ints.as_ptr(), arr.as_mut_ptr(), 2, &mut n, &mut found),
            PMI2_SUCCESS
        );
        assert_eq!((found, n, arr[0], arr[1], arr[2]), (1, 2, 5, 6, 0), "arr[2] untouched");
        let nv = c("na");
        assert_eq!(
            PMI2_Info_GetNodeAttrIntArray(nv.as_ptr(), arr.as_mut_ptr(), 2, &mut n, &mut found),
            PMI2_ERR_OTHER
        );
        assert_eq!(
            PMI2_Info_GetNodeAttrIntArray(ints.as_ptr(), arr.as_mut_ptr(), 0, &mut n, &mut found),
            PMI2_ERR_INVALID_ARG
        );
        let (mut rank, mut ranks) = (-1, -1);
        let (mut left, mut right) = ([0 as c_char; 8], [0 as c_char; 8]);
        let ring =
            |v: &str, l: *mut c_char, r: *mut c_char, rank: &mut c_int, ranks: &mut c_int| {
                PMIX_Ring(c(v).as_ptr(), rank, ranks, l, r, 8)
            };
        assert_eq!(ring("mine", left.as_mut_ptr(), right.as_mut_ptr(), &mut rank, &mut ranks), 0);
        assert_eq!((rank, ranks), (0, 1));
        assert_eq!(CStr::from_ptr(left.as_ptr()).to_str(), Ok("mine"));
        assert_eq!(CStr::from_ptr(right.as_ptr()).to_str(), Ok("mine"));
        let long = ring("12345678", left.as_mut_ptr(), right.as_mut_ptr(), &mut rank, &mut ranks);
        assert_eq!(long, PMI2_ERR_INVALID_VAL_LENGTH);
        let link = if singleton { PMI2_FAIL } else { PMI2_SUCCESS };
        assert_eq!(PMI2_Job_Connect(c("other").as_ptr(), std::ptr::null_mut()), link);
        assert_eq!(PMI2_Job_Disconnect(c("other").as_ptr()), link);
        assert_eq!(PMI2_Job_Connect(null, std::ptr::null_mut()), PMI2_ERR_INVALID_ARG);
        // Spawn: refused arrays never reach the server; a singleton cannot spawn.
        let exe = c("/bin/true");
        let cmds = [exe.as_ptr()];
        let (procs, argcs, mut errs) = ([2], [0], [-1; 2]);
        let spawn = |count: c_int, errs: *mut c_int| {
            use std::ptr::null as p;
            let (np, ni, info, pre) = (p(), p(), p(), p());
            PMI2_Job_Spawn(
                count,
                cmds.as_ptr(),
                argcs.as_ptr(),
                np,
                procs.as_ptr(),
                ni,
                info,
                0,
                pre,
                std::ptr::null_mut(),
                0,
                errs,
            )
        };
        assert_eq!(spawn(0, errs.as_mut_ptr()), PMI2_ERR_INVALID_ARG);
        assert_eq!(spawn(-1, errs.as_mut_ptr()), PMI2_ERR_INVALID_ARG);
        if singleton {
            assert_eq!(spawn(1, errs.as_mut_ptr()), PMI2_FAIL);
        }
    }
}

#[test]
fn over_pmi_fd_then_singleton() {
    let server = pmi_server::start();
    session(false);
    let seen = server.join().expect("server");
    assert!(seen.contains(&Action::BarrierIn), "{seen:?}");
    assert!(seen.contains(&Action::Finalized), "{seen:?}");
    std::env::remove_var("PMI_FD");
    session(true);
}

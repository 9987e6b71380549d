//! A hand-written binding of the few parts of OpenPMIx's server API (`pmix_server.h`, 4.2)
//! that the companion uses. The unit test at the end compares every size, offset, constant
//! and key written here with the C header, through the probe that `build.rs` compiles.

#![allow(non_camel_case_types, dead_code)]

use libc::{c_char, c_int, c_void, gid_t, size_t, uid_t};

pub type pmix_status_t = c_int;
pub type pmix_rank_t = u32;
pub type pmix_data_type_t = u16;
pub type pmix_data_range_t = u8;

pub const PMIX_SUCCESS: pmix_status_t = 0;
pub const PMIX_ERROR: pmix_status_t = -1;
pub const PMIX_ERR_NOT_FOUND: pmix_status_t = -46;
pub const PMIX_ERR_NOT_SUPPORTED: pmix_status_t = -47;
pub const PMIX_ERR_BAD_PARAM: pmix_status_t = -27;
pub const PMIX_ERR_TIMEOUT: pmix_status_t = -24;
pub const PMIX_ERR_UNREACH: pmix_status_t = -25;
pub const PMIX_ERR_LOST_CONNECTION: pmix_status_t = -61;
pub const PMIX_ERR_PROC_ABORTED: pmix_status_t = -7;
pub const PMIX_PROC_TERMINATED: pmix_status_t = -111;
pub const PMIX_EVENT_PROC_TERMINATED: pmix_status_t = -201;
pub const PMIX_ERR_PROC_TERM_WO_SYNC: pmix_status_t = -200;
pub const PMIX_EVENT_NODE_DOWN: pmix_status_t = -231;
pub const PMIX_OPERATION_SUCCEEDED: pmix_status_t = -157;
pub const PMIX_ERR_OUT_OF_RESOURCE: pmix_status_t = -29;
pub const PMIX_ERR_INIT: pmix_status_t = -31;

pub const PMIX_BOOL: pmix_data_type_t = 1;
pub const PMIX_BYTE: pmix_data_type_t = 2;
pub const PMIX_STRING: pmix_data_type_t = 3;
pub const PMIX_BYTE_OBJECT: pmix_data_type_t = 27;
pub const PMIX_SIZE: pmix_data_type_t = 4;
pub const PMIX_PID: pmix_data_type_t = 5;
pub const PMIX_INT: pmix_data_type_t = 6;
pub const PMIX_INT8: pmix_data_type_t = 7;
pub const PMIX_INT16: pmix_data_type_t = 8;
pub const PMIX_INT32: pmix_data_type_t = 9;
pub const PMIX_INT64: pmix_data_type_t = 10;
pub const PMIX_UINT: pmix_data_type_t = 11;
pub const PMIX_UINT8: pmix_data_type_t = 12;
pub const PMIX_UINT16: pmix_data_type_t = 13;
pub const PMIX_UINT32: pmix_data_type_t = 14;
pub const PMIX_UINT64: pmix_data_type_t = 15;
pub const PMIX_STATUS: pmix_data_type_t = 20;
pub const PMIX_PROC: pmix_data_type_t = 22;
pub const PMIX_INFO: pmix_data_type_t = 24;
pub const PMIX_DATA_RANGE: pmix_data_type_t = 33;
pub const PMIX_DATA_ARRAY: pmix_data_type_t = 39;
pub const PMIX_PROC_RANK: pmix_data_type_t = 40;

pub const PMIX_RANGE_NAMESPACE: pmix_data_range_t = 3;
pub const PMIX_RANGE_SESSION: pmix_data_range_t = 4;

pub const PMIX_RANK_WILDCARD: pmix_rank_t = u32::MAX - 1;
pub const PMIX_RANK_UNDEF: pmix_rank_t = u32::MAX;
pub const PMIX_MAX_NSLEN: usize = 255;
pub const PMIX_MAX_KEYLEN: usize = 511;

/// Keys used only here (the registered ones are in `libi_pmix::jobinfo::keys`).
pub mod key {
    pub const COLLECT_DATA: &str = "pmix.collect";
    pub const SERVER_TMPDIR: &str = "pmix.srvr.tmpdir";
    pub const SYSTEM_TMPDIR: &str = "pmix.sys.tmpdir";
    /// `PMIX_SERVER_SHARE_TOPOLOGY`.
    pub const SHARE_TOPOLOGY: &str = "pmix.srvr.share";
    pub const SERVER_NSPACE: &str = "pmix.srv.nspace";
    pub const SERVER_RANK: &str = "pmix.srv.rank";
    pub const HOSTNAME: &str = "pmix.hname";
    pub const RANGE: &str = "pmix.range";
    pub const PERSISTENCE: &str = "pmix.persist";
    pub const WAIT: &str = "pmix.wait";
    pub const TIMEOUT: &str = "pmix.timeout";
    /// `PMIX_USERID`, `PMIX_GRPID`: the caller's ids, which libpmix adds to a publish.
    pub const USERID: &str = "pmix.euid";
    pub const GRPID: &str = "pmix.egid";
    /// `PMIX_GROUP_ASSIGN_CONTEXT_ID`, `PMIX_GROUP_CONTEXT_ID`.
    pub const GROUP_ASSIGN_CONTEXT_ID: &str = "pmix.grp.actxid";
    pub const GROUP_CONTEXT_ID: &str = "pmix.grp.ctxid";
    pub const EVENT_AFFECTED_PROC: &str = "pmix.evproc";
    pub const EXIT_CODE: &str = "pmix.exit.code";
    pub const EVENT_TERMINATE_JOB: &str = "pmix.evterm.job";
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct pmix_proc_t {
    pub nspace: [c_char; PMIX_MAX_NSLEN + 1],
    pub rank: pmix_rank_t,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct pmix_byte_object_t {
    pub bytes: *mut c_char,
    pub size: size_t,
}

#[repr(C)]
pub struct pmix_data_array_t {
    pub type_: pmix_data_type_t,
    pub size: size_t,
    pub array: *mut c_void,
}

#[repr(C)]
pub struct pmix_cpuset_t {
    pub source: *mut c_char,
    pub bitmap: *mut c_void,
}

/// The union of `pmix_value_t`: the members read or written here, and the largest member
/// (`pmix_envar_t`: two pointers and a char) to give it its C size.
#[repr(C)]
#[derive(Clone, Copy)]
pub union pmix_value_data {
    pub flag: bool,
    pub byte: u8,
    pub string: *mut c_char,
    pub size: size_t,
    pub pid: libc::pid_t,
    pub integer: c_int,
    pub int8: i8,
    pub int16: i16,
    pub int32: i32,
    pub int64: i64,
    pub uint: u32,
    pub uint8: u8,
    pub uint16: u16,
    pub uint32: u32,
    pub uint64: u64,
    pub status: pmix_status_t,
    pub rank: pmix_rank_t,
    pub proc_: *mut pmix_proc_t,
    pub bo: pmix_byte_object_t,
    pub range: pmix_data_range_t,
    pub darray: *mut pmix_data_array_t,
    pub ptr: *mut c_void,
    pub envar: [usize; 3],
}

#[repr(C)]
pub struct pmix_value_t {
    pub type_: pmix_data_type_t,
    pub data: pmix_value_data,
}

#[repr(C)]
pub struct pmix_info_t {
    pub key: [c_char; PMIX_MAX_KEYLEN + 1],
    pub flags: u32,
    pub value: pmix_value_t,
}

#[repr(C)]
pub struct pmix_pdata_t {
    pub proc_: pmix_proc_t,
    pub key: [c_char; PMIX_MAX_KEYLEN + 1],
    pub value: pmix_value_t,
}

#[repr(C)]
pub struct pmix_app_t {
    pub cmd: *mut c_char,
    pub argv: *mut *mut c_char,
    pub env: *mut *mut c_char,
    pub cwd: *mut c_char,
    pub maxprocs: c_int,
    pub info: *mut pmix_info_t,
    pub ninfo: size_t,
}

pub type pmix_op_cbfunc_t = Option<unsafe extern "C" fn(pmix_status_t, *mut c_void)>;
pub type pmix_release_cbfunc_t = Option<unsafe extern "C" fn(*mut c_void)>;
pub type pmix_modex_cbfunc_t = Option<
    unsafe extern "C" fn(
        pmix_status_t,
        *const c_char,
        size_t,
        *mut c_void,
        pmix_release_cbfunc_t,
        *mut c_void,
    ),
>;
pub type pmix_lookup_cbfunc_t =
    Option<unsafe extern "C" fn(pmix_status_t, *mut pmix_pdata_t, size_t, *mut c_void)>;
pub type pmix_spawn_cbfunc_t =
    Option<unsafe extern "C" fn(pmix_status_t, *mut c_char, *mut c_void)>;
pub type pmix_dmodex_response_fn_t =
    Option<unsafe extern "C" fn(pmix_status_t, *mut c_char, size_t, *mut c_void)>;

pub type client_fn_t = Option<
    unsafe extern "C" fn(
        *const pmix_proc_t,
        *mut c_void,
        pmix_op_cbfunc_t,
        *mut c_void,
    ) -> pmix_status_t,
>;
pub type abort_fn_t = Option<
    unsafe extern "C" fn(
        *const pmix_proc_t,
        *mut c_void,
        c_int,
        *const c_char,
        *mut pmix_proc_t,
        size_t,
        pmix_op_cbfunc_t,
        *mut c_void,
    ) -> pmix_status_t,
>;
pub type fencenb_fn_t = Option<
    unsafe extern "C" fn(
        *const pmix_proc_t,
        size_t,
        *const pmix_info_t,
        size_t,
        *mut c_char,
        size_t,
        pmix_modex_cbfunc_t,
        *mut c_void,
    ) -> pmix_status_t,
>;
pub type dmodex_fn_t = Option<
    unsafe extern "C" fn(
        *const pmix_proc_t,
        *const pmix_info_t,
        size_t,
        pmix_modex_cbfunc_t,
        *mut c_void,
    ) -> pmix_status_t,
>;
pub type publish_fn_t = Option<
    unsafe extern "C" fn(
        *const pmix_proc_t,
        *const pmix_info_t,
        size_t,
        pmix_op_cbfunc_t,
        *mut c_void,
    ) -> pmix_status_t,
>;
pub type lookup_fn_t = Option<
    unsafe extern "C" fn(
        *const pmix_proc_t,
        *mut *mut c_char,
        *const pmix_info_t,
        size_t,
        pmix_lookup_cbfunc_t,
        *mut c_void,
    ) -> pmix_status_t,
>;
pub type unpublish_fn_t = Option<
    unsafe extern "C" fn(
        *const pmix_proc_t,
        *mut *mut c_char,
        *const pmix_info_t,
        size_t,
        pmix_op_cbfunc_t,
        *mut c_void,
    ) -> pmix_status_t,
>;
pub type spawn_fn_t = Option<
    unsafe extern "C" fn(
        *const pmix_proc_t,
        *const pmix_info_t,
        size_t,
        *const pmix_app_t,
        size_t,
        pmix_spawn_cbfunc_t,
        *mut c_void,
    ) -> pmix_status_t,
>;
pub type notify_event_fn_t = Option<
    unsafe extern "C" fn(
        pmix_status_t,
        *const pmix_proc_t,
        pmix_data_range_t,
        *mut pmix_info_t,
        size_t,
        pmix_op_cbfunc_t,
        *mut c_void,
    ) -> pmix_status_t,
>;
/// `pmix_info_cbfunc_t`: a result of infos, released through `release_fn`.
pub type pmix_info_cbfunc_t = Option<
    unsafe extern "C" fn(
        pmix_status_t,
        *mut pmix_info_t,
        size_t,
        *mut c_void,
        pmix_release_cbfunc_t,
        *mut c_void,
    ),
>;
/// `pmix_group_operation_t` (a C enum).
pub type pmix_group_operation_t = c_int;
pub const PMIX_GROUP_CONSTRUCT: pmix_group_operation_t = 0;
/// `pmix_server_grp_fn_t`.
pub type group_fn_t = Option<
    unsafe extern "C" fn(
        pmix_group_operation_t,
        *mut c_char,
        *const pmix_proc_t,
        size_t,
        *const pmix_info_t,
        size_t,
        pmix_info_cbfunc_t,
        *mut c_void,
    ) -> pmix_status_t,
>;
/// `pmix_server_connect_fn_t` and `pmix_server_disconnect_fn_t` (the same signature).
pub type connect_fn_t = Option<
    unsafe extern "C" fn(
        *const pmix_proc_t,
        size_t,
        *const pmix_info_t,
        size_t,
        pmix_op_cbfunc_t,
        *mut c_void,
    ) -> pmix_status_t,
>;
/// A slot of the module left empty (libpmix answers "not supported" for it).
pub type unused_fn_t = Option<unsafe extern "C" fn()>;

/// `pmix_server_module_4_0_0_t`: the host's upcalls, in the header's order.
#[repr(C)]
pub struct pmix_server_module_t {
    pub client_connected: client_fn_t,
    pub client_finalized: client_fn_t,
    pub abort: abort_fn_t,
    pub fence_nb: fencenb_fn_t,
    pub direct_modex: dmodex_fn_t,
    pub publish: publish_fn_t,
    pub lookup: lookup_fn_t,
    pub unpublish: unpublish_fn_t,
    pub spawn: spawn_fn_t,
    pub connect: connect_fn_t,
    pub disconnect: connect_fn_t,
    pub register_events: unused_fn_t,
    pub deregister_events: unused_fn_t,
    pub listener: unused_fn_t,
    pub notify_event: notify_event_fn_t,
    pub query: unused_fn_t,
    pub tool_connected: unused_fn_t,
    pub log: unused_fn_t,
    pub allocate: unused_fn_t,
    pub job_control: unused_fn_t,
    pub monitor: unused_fn_t,
    pub get_credential: unused_fn_t,
    pub validate_credential: unused_fn_t,
    pub iof_pull: unused_fn_t,
    pub push_stdin: unused_fn_t,
    pub group: group_fn_t,
    pub fabric: unused_fn_t,
    pub client_connected2: unused_fn_t,
}

#[link(name = "pmix")]
extern "C" {
    pub fn PMIx_server_init(
        module: *mut pmix_server_module_t,
        info: *mut pmix_info_t,
        ninfo: size_t,
    ) -> pmix_status_t;
    pub fn PMIx_server_finalize() -> pmix_status_t;
    pub fn PMIx_generate_regex(input: *const c_char, regex: *mut *mut c_char) -> pmix_status_t;
    pub fn PMIx_generate_ppn(input: *const c_char, ppn: *mut *mut c_char) -> pmix_status_t;
    pub fn PMIx_server_register_nspace(
        nspace: *const c_char,
        nlocalprocs: c_int,
        info: *mut pmix_info_t,
        ninfo: size_t,
        cbfunc: pmix_op_cbfunc_t,
        cbdata: *mut c_void,
    ) -> pmix_status_t;
    pub fn PMIx_server_deregister_nspace(
        nspace: *const c_char,
        cbfunc: pmix_op_cbfunc_t,
        cbdata: *mut c_void,
    );
    pub fn PMIx_server_register_client(
        proc_: *const pmix_proc_t,
        uid: uid_t,
        gid: gid_t,
        server_object: *mut c_void,
        cbfunc: pmix_op_cbfunc_t,
        cbdata: *mut c_void,
    ) -> pmix_status_t;
    pub fn PMIx_server_setup_fork(
        proc_: *const pmix_proc_t,
        env: *mut *mut *mut c_char,
    ) -> pmix_status_t;
    pub fn PMIx_server_dmodex_request(
        proc_: *const pmix_proc_t,
        cbfunc: pmix_dmodex_response_fn_t,
        cbdata: *mut c_void,
    ) -> pmix_status_t;
    pub fn PMIx_server_setup_local_support(
        nspace: *const c_char,
        info: *mut pmix_info_t,
        ninfo: size_t,
        cbfunc: pmix_op_cbfunc_t,
        cbdata: *mut c_void,
    ) -> pmix_status_t;
    pub fn PMIx_server_generate_locality_string(
        cpuset: *const pmix_cpuset_t,
        locality: *mut *mut c_char,
    ) -> pmix_status_t;
    pub fn PMIx_Parse_cpuset_string(
        cpuset_string: *const c_char,
        cpuset: *mut pmix_cpuset_t,
    ) -> pmix_status_t;
    pub fn PMIx_Cpuset_destruct(cpuset: *mut pmix_cpuset_t);
    pub fn PMIx_Notify_event(
        status: pmix_status_t,
        source: *const pmix_proc_t,
        range: pmix_data_range_t,
        info: *const pmix_info_t,
        ninfo: size_t,
        cbfunc: pmix_op_cbfunc_t,
        cbdata: *mut c_void,
    ) -> pmix_status_t;
    pub fn PMIx_Get_version() -> *const c_char;
    pub fn PMIx_Error_string(status: pmix_status_t) -> *const c_char;
}

#[cfg(test)]
mod tests {
    use super::*;
    use libi_pmix::jobinfo::keys;
    use libi_pmix::proto::status;
    use std::mem::{offset_of, size_of};

    mod c {
        include!(concat!(env!("OUT_DIR"), "/c_layout.rs"));
    }

    fn c_layout(name: &str) -> usize {
        c::C_LAYOUT
            .iter()
            .find(|(n, _)| *n == name)
            .map(|p| p.1)
            .unwrap_or_else(|| panic!("the probe does not know {name}"))
    }
    fn c_int(name: &str) -> i64 {
        c::C_INTS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|p| p.1)
            .unwrap_or_else(|| panic!("the probe does not know {name}"))
    }
    fn c_key(name: &str) -> &'static str {
        c::C_KEYS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|p| p.1)
            .unwrap_or_else(|| panic!("the probe does not know {name}"))
    }

    #[test]
    fn structures_match_the_header() {
        let sizes = [
            ("pmix_value_t", size_of::<pmix_value_t>()),
            ("pmix_info_t", size_of::<pmix_info_t>()),
            ("pmix_proc_t", size_of::<pmix_proc_t>()),
            ("pmix_pdata_t", size_of::<pmix_pdata_t>()),
            ("pmix_app_t", size_of::<pmix_app_t>()),
            ("pmix_data_array_t", size_of::<pmix_data_array_t>()),
            ("pmix_byte_object_t", size_of::<pmix_byte_object_t>()),
            ("pmix_cpuset_t", size_of::<pmix_cpuset_t>()),
            ("pmix_server_module_t", size_of::<pmix_server_module_t>()),
            ("pmix_status_t", size_of::<pmix_status_t>()),
            ("pmix_rank_t", size_of::<pmix_rank_t>()),
            ("pmix_data_type_t", size_of::<pmix_data_type_t>()),
            ("pmix_value_t.data", offset_of!(pmix_value_t, data)),
            ("pmix_info_t.flags", offset_of!(pmix_info_t, flags)),
            ("pmix_info_t.value", offset_of!(pmix_info_t, value)),
            ("pmix_proc_t.rank", offset_of!(pmix_proc_t, rank)),
            ("pmix_pdata_t.key", offset_of!(pmix_pdata_t, key)),
            ("pmix_pdata_t.value", offset_of!(pmix_pdata_t, value)),
            ("pmix_app_t.cwd", offset_of!(pmix_app_t, cwd)),
            ("pmix_app_t.maxprocs", offset_of!(pmix_app_t, maxprocs)),
            ("pmix_app_t.info", offset_of!(pmix_app_t, info)),
            ("pmix_app_t.ninfo", offset_of!(pmix_app_t, ninfo)),
            ("pmix_data_array_t.size", offset_of!(pmix_data_array_t, size)),
            ("pmix_data_array_t.array", offset_of!(pmix_data_array_t, array)),
            (
                "pmix_server_module_t.client_finalized",
                offset_of!(pmix_server_module_t, client_finalized),
            ),
            ("pmix_server_module_t.abort", offset_of!(pmix_server_module_t, abort)),
            ("pmix_server_module_t.fence_nb", offset_of!(pmix_server_module_t, fence_nb)),
            ("pmix_server_module_t.direct_modex", offset_of!(pmix_server_module_t, direct_modex)),
            ("pmix_server_module_t.publish", offset_of!(pmix_server_module_t, publish)),
            ("pmix_server_module_t.lookup", offset_of!(pmix_server_module_t, lookup)),
            ("pmix_server_module_t.unpublish", offset_of!(pmix_server_module_t, unpublish)),
            ("pmix_server_module_t.spawn", offset_of!(pmix_server_module_t, spawn)),
            ("pmix_server_module_t.notify_event", offset_of!(pmix_server_module_t, notify_event)),
            (
                "pmix_server_module_t.client_connected2",
                offset_of!(pmix_server_module_t, client_connected2),
            ),
        ];
        for (name, ours) in sizes {
            assert_eq!(ours, c_layout(name), "{name}");
        }
        assert_eq!(sizes.len(), c::C_LAYOUT.len(), "every probed layout is checked");
    }

    #[test]
    fn constants_match_the_header() {
        let ints: &[(&str, i64)] = &[
            ("PMIX_SUCCESS", PMIX_SUCCESS.into()),
            ("PMIX_ERROR", PMIX_ERROR.into()),
            ("PMIX_ERR_NOT_FOUND", PMIX_ERR_NOT_FOUND.into()),
            ("PMIX_ERR_NOT_SUPPORTED", PMIX_ERR_NOT_SUPPORTED.into()),
            ("PMIX_ERR_BAD_PARAM", PMIX_ERR_BAD_PARAM.into()),
            ("PMIX_ERR_TIMEOUT", PMIX_ERR_TIMEOUT.into()),
            ("PMIX_ERR_UNREACH", PMIX_ERR_UNREACH.into()),
            ("PMIX_ERR_LOST_CONNECTION", PMIX_ERR_LOST_CONNECTION.into()),
            ("PMIX_ERR_PROC_ABORTED", PMIX_ERR_PROC_ABORTED.into()),
            ("PMIX_PROC_TERMINATED", PMIX_PROC_TERMINATED.into()),
            ("PMIX_EVENT_PROC_TERMINATED", PMIX_EVENT_PROC_TERMINATED.into()),
            ("PMIX_ERR_PROC_TERM_WO_SYNC", PMIX_ERR_PROC_TERM_WO_SYNC.into()),
            ("PMIX_EVENT_NODE_DOWN", PMIX_EVENT_NODE_DOWN.into()),
            ("PMIX_OPERATION_SUCCEEDED", PMIX_OPERATION_SUCCEEDED.into()),
            ("PMIX_ERR_OUT_OF_RESOURCE", PMIX_ERR_OUT_OF_RESOURCE.into()),
            ("PMIX_ERR_INIT", PMIX_ERR_INIT.into()),
            ("PMIX_BOOL", PMIX_BOOL.into()),
            ("PMIX_BYTE", PMIX_BYTE.into()),
            ("PMIX_STRING", PMIX_STRING.into()),
            ("PMIX_SIZE", PMIX_SIZE.into()),
            ("PMIX_INT", PMIX_INT.into()),
            ("PMIX_INT8", PMIX_INT8.into()),
            ("PMIX_INT16", PMIX_INT16.into()),
            ("PMIX_INT32", PMIX_INT32.into()),
            ("PMIX_INT64", PMIX_INT64.into()),
            ("PMIX_BYTE_OBJECT", PMIX_BYTE_OBJECT.into()),
            ("PMIX_UINT", PMIX_UINT.into()),
            ("PMIX_UINT8", PMIX_UINT8.into()),
            ("PMIX_UINT16", PMIX_UINT16.into()),
            ("PMIX_UINT32", PMIX_UINT32.into()),
            ("PMIX_UINT64", PMIX_UINT64.into()),
            ("PMIX_PROC", PMIX_PROC.into()),
            ("PMIX_INFO", PMIX_INFO.into()),
            ("PMIX_DATA_RANGE", PMIX_DATA_RANGE.into()),
            ("PMIX_DATA_ARRAY", PMIX_DATA_ARRAY.into()),
            ("PMIX_PROC_RANK", PMIX_PROC_RANK.into()),
            ("PMIX_PID", PMIX_PID.into()),
            ("PMIX_STATUS", PMIX_STATUS.into()),
            ("PMIX_RANGE_NAMESPACE", PMIX_RANGE_NAMESPACE.into()),
            ("PMIX_RANGE_SESSION", PMIX_RANGE_SESSION.into()),
            ("PMIX_RANK_WILDCARD", PMIX_RANK_WILDCARD.into()),
            ("PMIX_RANK_UNDEF", PMIX_RANK_UNDEF.into()),
            ("PMIX_MAX_NSLEN", PMIX_MAX_NSLEN as i64),
            ("PMIX_MAX_KEYLEN", PMIX_MAX_KEYLEN as i64),
        ];
        for (name, ours) in ints {
            assert_eq!(*ours, c_int(name), "{name}");
        }
        assert_eq!(ints.len(), c::C_INTS.len(), "every probed constant is checked");
        // The library's copies, which the agent uses without the header.
        let lib: &[(&str, i32)] = &[
            ("PMIX_SUCCESS", status::SUCCESS),
            ("PMIX_ERROR", status::ERROR),
            ("PMIX_ERR_PROC_ABORTED", status::ERR_PROC_ABORTED),
            ("PMIX_ERR_TIMEOUT", status::ERR_TIMEOUT),
            ("PMIX_ERR_UNREACH", status::ERR_UNREACH),
            ("PMIX_ERR_BAD_PARAM", status::ERR_BAD_PARAM),
            ("PMIX_ERR_NOT_FOUND", status::ERR_NOT_FOUND),
            ("PMIX_ERR_NOT_SUPPORTED", status::ERR_NOT_SUPPORTED),
            ("PMIX_ERR_LOST_CONNECTION", status::ERR_LOST_CONNECTION),
            ("PMIX_PROC_TERMINATED", status::PROC_TERMINATED),
            ("PMIX_ERR_PROC_TERM_WO_SYNC", status::ERR_PROC_TERM_WO_SYNC),
            ("PMIX_EVENT_PROC_TERMINATED", status::EVENT_PROC_TERMINATED),
            ("PMIX_EVENT_NODE_DOWN", status::EVENT_NODE_DOWN),
        ];
        for (name, ours) in lib {
            assert_eq!(i64::from(*ours), c_int(name), "{name}");
        }
        assert_eq!(i64::from(libi_pmix::proto::RANK_WILDCARD), c_int("PMIX_RANK_WILDCARD"));
        assert_eq!(libi_pmix::proto::MAX_NSLEN as i64, c_int("PMIX_MAX_NSLEN"));
    }

    #[test]
    fn keys_match_the_header() {
        let ks: &[(&str, &str)] = &[
            ("PMIX_UNIV_SIZE", keys::UNIV_SIZE),
            ("PMIX_JOB_SIZE", keys::JOB_SIZE),
            ("PMIX_MAX_PROCS", keys::MAX_PROCS),
            ("PMIX_JOBID", keys::JOBID),
            ("PMIX_SPAWNED", keys::SPAWNED),
            ("PMIX_JOB_NUM_APPS", keys::JOB_NUM_APPS),
            ("PMIX_NUM_NODES", keys::NUM_NODES),
            ("PMIX_NODE_MAP", keys::NODE_MAP),
            ("PMIX_PROC_MAP", keys::PROC_MAP),
            ("PMIX_NSDIR", keys::NSDIR),
            ("PMIX_TMPDIR", keys::TMPDIR),
            ("PMIX_PROCDIR", keys::PROCDIR),
            ("PMIX_HOSTNAME", keys::HOSTNAME),
            ("PMIX_NODEID", keys::NODEID),
            ("PMIX_LOCAL_SIZE", keys::LOCAL_SIZE),
            ("PMIX_LOCAL_PEERS", keys::LOCAL_PEERS),
            ("PMIX_LOCALLDR", keys::LOCALLDR),
            ("PMIX_APP_INFO", keys::APP_INFO),
            ("PMIX_APPNUM", keys::APPNUM),
            ("PMIX_APP_SIZE", keys::APP_SIZE),
            ("PMIX_APPLDR", keys::APPLDR),
            ("PMIX_WDIR", keys::WDIR),
            ("PMIX_NODE_INFO", keys::NODE_INFO),
            ("PMIX_PROC_DATA", keys::PROC_DATA),
            ("PMIX_RANK", keys::RANK),
            ("PMIX_LOCAL_RANK", keys::LOCAL_RANK),
            ("PMIX_NODE_RANK", keys::NODE_RANK),
            ("PMIX_APP_RANK", keys::APP_RANK),
            ("PMIX_LOCALITY_STRING", keys::LOCALITY_STRING),
            ("PMIX_CPUSET", keys::CPUSET),
            ("PMIX_REINCARNATION", keys::REINCARNATION),
            ("PMIX_PARENT_ID", keys::PARENT_ID),
            ("PMIX_NODE_OVERSUBSCRIBED", keys::NODE_OVERSUBSCRIBED),
            ("PMIX_COLLECT_DATA", key::COLLECT_DATA),
            ("PMIX_SERVER_TMPDIR", key::SERVER_TMPDIR),
            ("PMIX_SYSTEM_TMPDIR", key::SYSTEM_TMPDIR),
            ("PMIX_SERVER_NSPACE", key::SERVER_NSPACE),
            ("PMIX_SERVER_RANK", key::SERVER_RANK),
            ("PMIX_HOSTNAME", key::HOSTNAME),
            ("PMIX_RANGE", key::RANGE),
            ("PMIX_PERSISTENCE", key::PERSISTENCE),
            ("PMIX_WAIT", key::WAIT),
            ("PMIX_TIMEOUT", key::TIMEOUT),
            ("PMIX_EVENT_AFFECTED_PROC", key::EVENT_AFFECTED_PROC),
            ("PMIX_EXIT_CODE", key::EXIT_CODE),
            ("PMIX_EVENT_TERMINATE_JOB", key::EVENT_TERMINATE_JOB),
            ("PMIX_USERID", key::USERID),
            ("PMIX_GRPID", key::GRPID),
            ("PMIX_GROUP_ASSIGN_CONTEXT_ID", key::GROUP_ASSIGN_CONTEXT_ID),
            ("PMIX_GROUP_CONTEXT_ID", key::GROUP_CONTEXT_ID),
            ("PMIX_SERVER_SHARE_TOPOLOGY", key::SHARE_TOPOLOGY),
        ];
        for (name, ours) in ks {
            assert_eq!(*ours, c_key(name), "{name}");
        }
    }
}

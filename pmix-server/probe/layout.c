/* Compiled and run by build.rs: prints, as Rust source, the sizes and offsets of the PMIx
 * structures, the values of the constants and the strings of the keys that src/ffi.rs
 * writes out by hand, so that a unit test can compare the two (src/ffi.rs, mod tests). */
#include <stddef.h>
#include <stdio.h>
#include <pmix_server.h>

#define SIZE(t) printf("    (\"%s\", %zu),\n", #t, sizeof(t))
#define OFF(t, f) printf("    (\"%s.%s\", %zu),\n", #t, #f, offsetof(t, f))
#define INT(c) printf("    (\"%s\", %lld),\n", #c, (long long)(c))
#define KEY(k) printf("    (\"%s\", \"%s\"),\n", #k, k)

int main(void)
{
    printf("/// Sizes and field offsets from the C headers.\n");
    printf("pub const C_LAYOUT: &[(&str, usize)] = &[\n");
    SIZE(pmix_value_t); SIZE(pmix_info_t); SIZE(pmix_proc_t); SIZE(pmix_pdata_t);
    SIZE(pmix_app_t); SIZE(pmix_data_array_t); SIZE(pmix_byte_object_t); SIZE(pmix_cpuset_t);
    SIZE(pmix_server_module_t); SIZE(pmix_status_t); SIZE(pmix_rank_t); SIZE(pmix_data_type_t);
    OFF(pmix_value_t, data); OFF(pmix_info_t, flags); OFF(pmix_info_t, value);
    OFF(pmix_proc_t, rank); OFF(pmix_pdata_t, key); OFF(pmix_pdata_t, value);
    OFF(pmix_app_t, cwd); OFF(pmix_app_t, maxprocs); OFF(pmix_app_t, info); OFF(pmix_app_t, ninfo);
    OFF(pmix_data_array_t, size); OFF(pmix_data_array_t, array);
    OFF(pmix_server_module_t, client_finalized); OFF(pmix_server_module_t, abort);
    OFF(pmix_server_module_t, fence_nb); OFF(pmix_server_module_t, direct_modex);
    OFF(pmix_server_module_t, publish); OFF(pmix_server_module_t, lookup);
    OFF(pmix_server_module_t, unpublish); OFF(pmix_server_module_t, spawn);
    OFF(pmix_server_module_t, notify_event); OFF(pmix_server_module_t, client_connected2);
    printf("];\n");

    printf("/// Integer constants from the C headers.\n");
    printf("pub const C_INTS: &[(&str, i64)] = &[\n");
    INT(PMIX_SUCCESS); INT(PMIX_ERROR); INT(PMIX_ERR_NOT_FOUND); INT(PMIX_ERR_NOT_SUPPORTED);
    INT(PMIX_ERR_BAD_PARAM); INT(PMIX_ERR_TIMEOUT); INT(PMIX_ERR_UNREACH);
    INT(PMIX_ERR_LOST_CONNECTION); INT(PMIX_ERR_PROC_ABORTED); INT(PMIX_PROC_TERMINATED);
    INT(PMIX_EVENT_PROC_TERMINATED); INT(PMIX_ERR_PROC_TERM_WO_SYNC); INT(PMIX_EVENT_NODE_DOWN);
    INT(PMIX_OPERATION_SUCCEEDED); INT(PMIX_ERR_OUT_OF_RESOURCE); INT(PMIX_ERR_INIT);
    INT(PMIX_BOOL); INT(PMIX_BYTE); INT(PMIX_STRING); INT(PMIX_BYTE_OBJECT); INT(PMIX_SIZE); INT(PMIX_INT);
    INT(PMIX_INT8); INT(PMIX_INT16); INT(PMIX_INT32); INT(PMIX_INT64); INT(PMIX_UINT);
    INT(PMIX_UINT8); INT(PMIX_UINT16); INT(PMIX_UINT32); INT(PMIX_UINT64); INT(PMIX_PROC);
    INT(PMIX_INFO); INT(PMIX_DATA_RANGE); INT(PMIX_DATA_ARRAY); INT(PMIX_PROC_RANK);
    INT(PMIX_PID); INT(PMIX_STATUS); INT(PMIX_RANGE_NAMESPACE); INT(PMIX_RANGE_SESSION);
    INT(PMIX_RANK_WILDCARD); INT(PMIX_RANK_UNDEF); INT(PMIX_MAX_NSLEN); INT(PMIX_MAX_KEYLEN);
    printf("];\n");

    printf("/// Attribute keys from the C headers.\n");
    printf("pub const C_KEYS: &[(&str, &str)] = &[\n");
    KEY(PMIX_UNIV_SIZE); KEY(PMIX_JOB_SIZE); KEY(PMIX_MAX_PROCS); KEY(PMIX_JOBID);
    KEY(PMIX_SPAWNED); KEY(PMIX_JOB_NUM_APPS); KEY(PMIX_NUM_NODES); KEY(PMIX_NODE_MAP);
    KEY(PMIX_PROC_MAP); KEY(PMIX_NSDIR); KEY(PMIX_TMPDIR); KEY(PMIX_PROCDIR); KEY(PMIX_HOSTNAME);
    KEY(PMIX_NODEID); KEY(PMIX_LOCAL_SIZE); KEY(PMIX_LOCAL_PEERS); KEY(PMIX_LOCALLDR);
    KEY(PMIX_NODE_SIZE); KEY(PMIX_APP_INFO); KEY(PMIX_APPNUM); KEY(PMIX_APP_SIZE);
    KEY(PMIX_APPLDR); KEY(PMIX_WDIR); KEY(PMIX_NODE_INFO); KEY(PMIX_PROC_DATA); KEY(PMIX_RANK);
    KEY(PMIX_LOCAL_RANK); KEY(PMIX_NODE_RANK); KEY(PMIX_GLOBAL_RANK); KEY(PMIX_APP_RANK);
    KEY(PMIX_LOCALITY_STRING); KEY(PMIX_CPUSET); KEY(PMIX_REINCARNATION); KEY(PMIX_COLLECT_DATA);
    KEY(PMIX_SERVER_TMPDIR); KEY(PMIX_SYSTEM_TMPDIR); KEY(PMIX_PARENT_ID); KEY(PMIX_RANGE);
    KEY(PMIX_WAIT); KEY(PMIX_PERSISTENCE); KEY(PMIX_TIMEOUT); KEY(PMIX_EVENT_AFFECTED_PROC);
    KEY(PMIX_EXIT_CODE); KEY(PMIX_HOSTNAME_KEEP_FQDN); KEY(PMIX_NODE_OVERSUBSCRIBED);
    KEY(PMIX_SERVER_NSPACE); KEY(PMIX_SERVER_RANK); KEY(PMIX_EVENT_TERMINATE_JOB);
    KEY(PMIX_NODE_LIST); KEY(PMIX_USERID); KEY(PMIX_GRPID); KEY(PMIX_GROUP_ASSIGN_CONTEXT_ID);
    KEY(PMIX_GROUP_CONTEXT_ID); KEY(PMIX_SERVER_SHARE_TOPOLOGY);
    printf("];\n");
    return 0;
}

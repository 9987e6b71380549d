/* pmi_bytes: KVS values that are not UTF-8 keep their bytes. Each rank puts
 * "caf\xe9-<rank>-\x01\xff" (Latin-1 text, a control byte, a byte no UTF-8 has) under
 * "bytes-<rank>", fences, and gets every rank's value back over PMI-1; it prints
 * "rank R of N bytes ok" when each one is exactly what that rank put, else names the first
 * that is not and exits 1. No MPI: the wire protocol over PMI_FD. */
#define PMI_RAW_NAME "pmi_bytes"
#include "pmi_raw.h"

static int value_of(int rank, char *out, size_t cap)
{
    return snprintf(out, cap, "caf\xe9-%d-\x01\xff", rank);
}

int main(void)
{
    int rank, size;
    char kvs[256], req[1024], line[4096], want[64];
    pmi_env(&rank, &size);
    pmi_init(kvs, sizeof kvs);
    value_of(rank, want, sizeof want);
    snprintf(req, sizeof req, "cmd=put kvsname=%s key=bytes-%d value=%s\n", kvs, rank, want);
    call(req, line, sizeof line, "cmd=put_result");
    const char *rc = field(line, "rc");
    if (!rc || atoi(rc) != 0)
        die("put refused", line);
    call("cmd=barrier_in\n", line, sizeof line, "cmd=barrier_out");
    for (int r = 0; r < size; r++) {
        snprintf(req, sizeof req, "cmd=get kvsname=%s key=bytes-%d\n", kvs, r);
        call(req, line, sizeof line, "cmd=get_result");
        const char *v = field(line, "value");
        value_of(r, want, sizeof want);
        if (!v || strcmp(v, want) != 0)
            die("a value came back changed", line);
    }
    call("cmd=finalize\n", line, sizeof line, "cmd=finalize_ack");
    printf("rank %d of %d bytes ok\n", rank, size);
    return 0;
}

/* A light PMI-1 client speaking the wire protocol directly over PMI_FD (no MPI):
 *   init, get_maxes, get_my_kvsname, put k<rank> = v<rank>-<pad>, barrier,
 *   get every rank's key REPEAT times (argv[1], default 1) and check each value,
 *   get a missing key (must fail; skipped when argv[2] is "nomiss"), barrier, finalize.
 * Prints "rank R of N ok GETS" and exits 0, or names the first wrong answer and exits 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#define PMI_RAW_NAME "pmi_exchange"
#include "pmi_raw.h"

int main(int argc, char **argv)
{
    char line[4096], req[4096], kvs[300];
    int repeat = argc > 1 ? atoi(argv[1]) : 1;
    int rank, size;
    pmi_env(&rank, &size);

    pmi_init(kvs, sizeof kvs);
    call("cmd=get_maxes\n", line, sizeof line, "cmd=maxes");

    /* 64-byte value: v<rank>- then padding */
    char val[65];
    snprintf(val, sizeof val, "v%d-", rank);
    memset(val + strlen(val), 'x', 64 - strlen(val));
    val[64] = 0;
    snprintf(req, sizeof req, "cmd=put kvsname=%s key=k%d value=%s\n", kvs, rank, val);
    call(req, line, sizeof line, "cmd=put_result");
    if (atoi(field(line, "rc") ? field(line, "rc") : "1") != 0)
        die("put failed", line);
    call("cmd=barrier_in\n", line, sizeof line, "cmd=barrier_out");

    long gets = 0;
    for (int t = 0; t < repeat; t++) {
        for (int r = 0; r < size; r++) {
            snprintf(req, sizeof req, "cmd=get kvsname=%s key=k%d\n", kvs, r);
            call(req, line, sizeof line, "cmd=get_result");
            const char *v = field(line, "value");
            char want[65];
            snprintf(want, sizeof want, "v%d-", r);
            memset(want + strlen(want), 'x', 64 - strlen(want));
            want[64] = 0;
            if (atoi(field(line, "rc") ? field(line, "rc") : "1") != 0 || !v || strcmp(v, want) != 0)
                die("wrong value", line);
            gets++;
        }
    }
    if (!(argc > 2 && strcmp(argv[2], "nomiss") == 0)) {
        snprintf(req, sizeof req, "cmd=get kvsname=%s key=no-such-key\n", kvs);
        call(req, line, sizeof line, "cmd=get_result");
        if (atoi(field(line, "rc") ? field(line, "rc") : "0") == 0)
            die("missing key was found", line);
    }
    call("cmd=barrier_in\n", line, sizeof line, "cmd=barrier_out");
    call("cmd=finalize\n", line, sizeof line, "cmd=finalize_ack");
    printf("rank %d of %d ok %ld\n", rank, size, gets);
    return 0;
}

/* A fence whose release is big, then PMI gets and output for a while, over raw PMI-1:
 *   stall_fence BYTES_PER_RANK DIR SECONDS
 * Each rank puts BYTES_PER_RANK of values (pairs "sf<rank>.<i>" of 1000 bytes), writes the
 * file DIR/in.<rank> and enters the fence; rank 0 enters it only once the file DIR/go
 * exists (the test stops an agent first). After the fence each rank, for SECONDS, gets a
 * pair of the next rank every 100 ms, checks it and prints "rank R tick K" (its stdout
 * line-buffered); then it finalizes and prints "rank R done". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#define PMI_RAW_NAME "stall_fence"
#define PMI_RAW_BUF 16384
#include "pmi_raw.h"

static void value_of(int rank, long i, char *out)
{
    for (int k = 0; k < 1000; k++)
        out[k] = "abcdefghijklmnopqrstuvwxyz0123456789"[(rank * 7 + i * 13 + k) % 36];
    out[1000] = 0;
}

int main(int argc, char **argv)
{
    if (argc != 4)
        die("usage: stall_fence BYTES_PER_RANK DIR SECONDS", NULL);
    long pairs = atol(argv[1]) / 1000;
    const char *dir = argv[2];
    double seconds = atof(argv[3]);
    int rank, size;
    pmi_env(&rank, &size);
    setvbuf(stdout, NULL, _IOLBF, 0);
    char kvs[256], line[4096], val[1001], req[2048], path[4096];
    pmi_init(kvs, sizeof kvs);
    for (long i = 0; i < pairs; i++) {
        value_of(rank, i, val);
        snprintf(req, sizeof req, "cmd=put kvsname=%s key=sf%d.%ld value=%s\n", kvs, rank, i, val);
        call(req, line, sizeof line, "cmd=put_result");
    }
    snprintf(path, sizeof path, "%s/in.%d", dir, rank);
    FILE *f = fopen(path, "w");
    if (f)
        fclose(f);
    if (rank == 0) {
        snprintf(path, sizeof path, "%s/go", dir);
        while (access(path, F_OK) != 0)
            usleep(10000);
    }
    call("cmd=barrier_in\n", line, sizeof line, "cmd=barrier_out");
    int peer = (rank + 1) % size;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long k = 0;; k++) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 > seconds)
            break;
        long i = k % (pairs > 0 ? pairs : 1);
        snprintf(req, sizeof req, "cmd=get kvsname=%s key=sf%d.%ld\n", kvs, peer, i);
        call(req, line, sizeof line, "cmd=get_result");
        value_of(peer, i, val);
        const char *v = field(line, "value");
        if (!v || strncmp(v, val, 1000) != 0)
            die("wrong value", line);
        printf("rank %d tick %ld\n", rank, k);
        usleep(100000);
    }
    call("cmd=finalize\n", line, sizeof line, "cmd=finalize_ack");
    printf("rank %d done\n", rank);
    return 0;
}

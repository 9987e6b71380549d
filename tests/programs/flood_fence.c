/* Output flood during fences (ci/stress.sh, case 6). A PMI-1 client speaking the wire protocol
 * directly over PMI_FD (no MPI), so it runs under libi-mpiexec and mpiexec.hydra alike.
 *
 * Every rank: init, get_my_kvsname, then FENCES (argv[1], default 100) fences, each a put of
 * one key, a barrier and a get of the next rank's key for that round (what MPICH does around
 * a PMI-1 fence), then finalize. Rank 0 also writes to stdout without pause, from a second
 * thread, from before its first fence until its last fence is done: the fences of ranks 1..N-1
 * run while rank 0 floods (a PMI-1 barrier takes every rank, so rank 0 takes part from its
 * main thread; its output never waits for it).
 *
 * stderr: rank 1 (rank 0 in a 1-rank job) prints
 *   "flood_fence: FENCES fences in S.SSS s (max M.MMM ms)"
 * and rank 0 prints "flood_fence: rank 0 wrote B bytes". Exit 0, or 1 after naming the first
 * wrong answer. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#define PMI_RAW_NAME "flood_fence"
#include "pmi_raw.h"

static atomic_int flooding = 1;
static atomic_ullong flooded;

static int rc_ok(const char *line)
{
    const char *rc = field(line, "rc");
    return rc && atoi(rc) == 0;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Rank 0's flood: numbered 64-byte lines, 64 KiB per write, until the fences are done. */
static void *flood(void *arg)
{
    (void)arg;
    static char chunk[65536];
    for (size_t i = 0; i < sizeof chunk; i += 64) {
        snprintf(chunk + i, 65, "%063zu", i / 64);
        chunk[i + 63] = '\n';
    }
    while (atomic_load(&flooding)) {
        ssize_t w = write(1, chunk, sizeof chunk);
        if (w <= 0)
            break; /* stdout gone: nothing more to do */
        atomic_fetch_add(&flooded, (unsigned long long)w);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    char line[4096], req[4096], kvs[300];
    int fences = argc > 1 ? atoi(argv[1]) : 100;
    int rank, size;
    pmi_env(&rank, &size);

    pthread_t flooder;
    if (rank == 0 && pthread_create(&flooder, NULL, flood, NULL) != 0)
        die("pthread_create failed", NULL);

    pmi_init(kvs, sizeof kvs);

    double start = now(), worst = 0;
    for (int f = 0; f < fences; f++) {
        double t0 = now();
        snprintf(req, sizeof req, "cmd=put kvsname=%s key=f%d_%d value=v%d_%d\n", kvs, f, rank, f,
                 rank);
        call(req, line, sizeof line, "cmd=put_result");
        if (!rc_ok(line))
            die("put failed", line);
        call("cmd=barrier_in\n", line, sizeof line, "cmd=barrier_out");
        int peer = (rank + 1) % size;
        snprintf(req, sizeof req, "cmd=get kvsname=%s key=f%d_%d\n", kvs, f, peer);
        call(req, line, sizeof line, "cmd=get_result");
        char want[64];
        snprintf(want, sizeof want, "v%d_%d", f, peer);
        const char *v = field(line, "value");
        if (!rc_ok(line) || !v || strncmp(v, want, strlen(want)) != 0 ||
            (v[strlen(want)] != 0 && v[strlen(want)] != ' '))
            die("wrong value", line);
        double t = now() - t0;
        if (t > worst)
            worst = t;
    }
    double total = now() - start;

    if (rank == 0) {
        /* Not joined: a write blocked on a full stdout must not hold the exit up. */
        atomic_store(&flooding, 0);
        fprintf(stderr, "flood_fence: rank 0 wrote %llu bytes\n",
                (unsigned long long)atomic_load(&flooded));
    }
    if (rank == (size > 1 ? 1 : 0))
        fprintf(stderr, "flood_fence: %d fences in %.3f s (max %.3f ms)\n", fences, total,
                worst * 1e3);
    call("cmd=finalize\n", line, sizeof line, "cmd=finalize_ack");
    return 0;
}

/* A big fence over raw PMI-1 (no MPI), for tests and stress runs:
 *   bigfence TOTAL_BYTES [GETS [VALUE_LEN]]
 * The ranks together put TOTAL_BYTES of KVS data (keys plus values; K/M/G suffixes allowed),
 * each its share in pairs "bf<rank>.<i>" = VALUE_LEN (default 1000) bytes derived from the
 * key, then fence, then each rank gets GETS keys (default 1000; spread over every rank's
 * pairs, plus the last pair of every rank; -1 = every key of every rank) and checks each value.
 * Each rank prints "rank R of N ok G"; rank 0 also prints one "bigfence:" line with the
 * sizes and the time of each phase. A wrong or missing value exits 1 naming it; a put that
 * fails (e.g. over the job's KVS limit) exits 1 too. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#define PMI_RAW_NAME "bigfence"
#define PMI_RAW_BUF 16384
#include "pmi_raw.h"

static int rc_of(const char *line)
{
    const char *rc = field(line, "rc");
    return rc ? atoi(rc) : -999;
}

/* The value of pair (rank, i): VALUE_LEN characters from [a-z0-9], derived from the key. */
static void value_of(int rank, long i, char *out, int len)
{
    uint64_t x = ((uint64_t)rank << 40) ^ (uint64_t)i ^ 0x9e3779b97f4a7c15ull;
    for (int k = 0; k < len; k++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out[k] = "abcdefghijklmnopqrstuvwxyz0123456789"[x % 36];
    }
    out[len] = 0;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

static long long parse_bytes(const char *s)
{
    char *end;
    long long n = strtoll(s, &end, 10);
    switch (*end) {
    case 'k': case 'K': n <<= 10; break;
    case 'm': case 'M': n <<= 20; break;
    case 'g': case 'G': n <<= 30; break;
    case 0: break;
    default: die("bad byte count", s);
    }
    return n;
}

int main(int argc, char **argv)
{
    static char line[8192], req[8192], val[2048], want[2048];
    char kvs[300], key[64];
    if (argc < 2)
        die("usage", "bigfence TOTAL_BYTES [GETS [VALUE_LEN]]");
    long long total = parse_bytes(argv[1]);
    long gets_wanted = argc > 2 ? atol(argv[2]) : 1000;
    int vlen = argc > 3 ? atoi(argv[3]) : 1000;
    if (vlen < 1 || vlen > 1024)
        die("VALUE_LEN must be 1..1024", argv[3]);
    int rank, size;
    pmi_env(&rank, &size);

    pmi_init(kvs, sizeof kvs);

    /* Pairs per rank: this rank's share of TOTAL_BYTES, ~VALUE_LEN + key bytes a pair. */
    long per = (long)((total / size + vlen + 9) / (vlen + 10));
    if (per < 1)
        per = 1;
    double t0 = now();
    long long put_bytes = 0;
    for (long i = 0; i < per; i++) {
        snprintf(key, sizeof key, "bf%d.%ld", rank, i);
        value_of(rank, i, val, vlen);
        snprintf(req, sizeof req, "cmd=put kvsname=%s key=%s value=%s\n", kvs, key, val);
        call(req, line, sizeof line, "cmd=put_result");
        if (rc_of(line) != 0)
            die("put failed", line);
        put_bytes += (long long)strlen(key) + vlen;
    }
    double t1 = now();
    call("cmd=barrier_in\n", line, sizeof line, "cmd=barrier_out");
    double t2 = now();

    long gets = 0;
    long n = gets_wanted < 0 ? per * size : gets_wanted;
    for (long j = 0; j < n + size; j++) {
        int r;
        long i;
        if (j >= n) { /* the last pair of every rank */
            r = (int)(j - n);
            i = per - 1;
        } else if (gets_wanted < 0) {
            r = (int)(j / per);
            i = j % per;
        } else {
            r = (int)((rank + 1 + j) % size);
            i = (long)(((unsigned long long)j * 7919ull) % (unsigned long long)per);
        }
        snprintf(key, sizeof key, "bf%d.%ld", r, i);
        snprintf(req, sizeof req, "cmd=get kvsname=%s key=%s\n", kvs, key);
        call(req, line, sizeof line, "cmd=get_result");
        value_of(r, i, want, vlen);
        const char *v = field(line, "value");
        if (rc_of(line) != 0 || !v || strcmp(v, want) != 0) {
            fprintf(stderr, "bigfence: rank %d: key %s\n", rank, key);
            die("wrong value", line);
        }
        gets++;
    }
    double t3 = now();
    call("cmd=barrier_in\n", line, sizeof line, "cmd=barrier_out");
    call("cmd=finalize\n", line, sizeof line, "cmd=finalize_ack");
    if (rank == 0)
        printf("bigfence: %d ranks x %ld pairs of %d-byte values, %.1f MiB a rank: "
               "put %.2f s, fence %.2f s, %ld gets %.2f s\n",
               size, per, vlen, put_bytes / 1048576.0, t1 - t0, t2 - t1, gets, t3 - t2);
    printf("rank %d of %d ok %ld\n", rank, size, gets);
    return 0;
}

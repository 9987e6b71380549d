/* Throughput of the LIBI member collectives (bench/libi-coll.sh runs it).
 *
 *   libi_coll HOSTS [SIZES_MIB] [OPS]   front end: launches itself as the members on HOSTS
 *                                       (host:n[,host:n...]) and prints one table row per
 *                                       op and size
 *   libi_coll --member SIZES OPS        a member (started by the front end)
 *
 * SIZES_MIB: comma-separated sizes in MiB (default 1,64); OPS: some of bcast,scatter,gather
 * (default all three). A size is the master's buffer: the broadcast's payload, the scatter's
 * send buffer, the gather's receive buffer (size / members bytes per member). Each op runs
 * once to warm up, then ITERS times (LIBI_COLL_ITERS, default: 20 below 16 MiB, else 5),
 * followed by one barrier; the time per op is that total over ITERS. Buffers are filled
 * outside the timed loop (a broadcast's first, middle and last byte change every iteration);
 * every member checks those bytes of what it gets each time, and every byte after the loop;
 * the master counts the errors.
 * Launch options come from LIBI_MPIEXEC_ARGS, as for any LIBI front end. */
#include "../examples/libi/hostlist.h"
#include <libi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int die(const char *who, const char *what, int rc) {
    fprintf(stderr, "libi_coll %s: %s: %s: %s\n", who, what, LIBI_rcName(rc), LIBI_errorString());
    return 1;
}

static unsigned char pat(size_t i, int seed) { return (unsigned char)(i * 131 + (i >> 12) + seed); }

static void fill(unsigned char *b, size_t n, size_t base, int seed) {
    for (size_t i = 0; i < n; i++) b[i] = pat(base + i, seed);
}

/* First, middle and last byte of b[0..n) against the pattern from base. */
static int check(const unsigned char *b, size_t n, size_t base, int seed) {
    if (n == 0) return 0;
    size_t at[3] = {0, n / 2, n - 1};
    int bad = 0;
    for (int k = 0; k < 3; k++) bad += b[at[k]] != pat(base + at[k], seed);
    return bad;
}

/* Every byte of b[0..n) against the pattern from base (first, middle and last: `stamp`'s). */
static int check_all(const unsigned char *b, size_t n, size_t base, int seed, int stamp) {
    int bad = check(b, n, base, stamp);
    for (size_t i = 1; i + 1 < n; i++)
        if (i != n / 2) bad += b[i] != pat(base + i, seed);
    return bad;
}

/* The broadcast's payload of iteration `it`: the seed-0 pattern with first, middle and last
 * byte of seed `it` (so that every iteration's bytes differ, without refilling the buffer
 * inside the timed loop). */
static void stamp(unsigned char *b, size_t n, int it) {
    if (n == 0) return;
    size_t at[3] = {0, n / 2, n - 1};
    for (int k = 0; k < 3; k++) b[at[k]] = pat(at[k], it);
}

static int member(const char *sizes, const char *ops) {
    int rc = LIBI_init(LIBI_VERSION, NULL, NULL);
    if (rc != LIBI_OK) return die("member", "LIBI_init", rc);
    int rank, n;
    LIBI_getMyRank(&rank);
    LIBI_getSize(&n);
    int master = rank == 0;
    const char *it = getenv("LIBI_COLL_ITERS");
    char report[4096];
    size_t used = 0;
    int errors = 0;
    char *list = strdup(sizes);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        size_t total = (size_t)(atof(tok) * 1048576.0);
        size_t per = total / (size_t)n;
        int iters = it ? atoi(it) : (total < (16u << 20) ? 20 : 5);
        unsigned char *big = malloc(total ? total : 1);
        unsigned char *mine = malloc(per ? per : 1);
        if (!big || !mine) return die("member", "malloc", 0);
        const char *names[3] = {"bcast", "scatter", "gather"};
        for (int op = 0; op < 3; op++) {
            if (!strstr(ops, names[op])) continue;
            if (master && op == 1) fill(big, per * (size_t)n, 0, 1);
            if (op == 2) fill(mine, per, (size_t)rank * per, 2);
            if (op == 0) {
                if (master) fill(big, total, 0, 0);
                else memset(big, 0, total);
            }
            int seed = 0;
            double t0 = 0;
            for (int i = -1; i < iters; i++) {
                if (i == 0) {
                    if ((rc = LIBI_barrier()) != LIBI_OK) return die("member", "LIBI_barrier", rc);
                    t0 = now();
                }
                if (op == 0) {
                    seed = (i + 2) & 0xff;
                    if (master) stamp(big, total, seed);
                    if ((rc = LIBI_broadcast(big, (int)total)) != LIBI_OK)
                        return die("member", "LIBI_broadcast", rc);
                    errors += check(big, total, 0, seed);
                } else if (op == 1) {
                    if ((rc = LIBI_scatter(big, (int)per, mine)) != LIBI_OK)
                        return die("member", "LIBI_scatter", rc);
                    errors += check(mine, per, (size_t)rank * per, 1);
                } else {
                    if ((rc = LIBI_gather(mine, (int)per, big)) != LIBI_OK)
                        return die("member", "LIBI_gather", rc);
                    for (int r = 0; master && r < n; r++)
                        errors += check(big + (size_t)r * per, per, (size_t)r * per, 2);
                }
            }
            if ((rc = LIBI_barrier()) != LIBI_OK) return die("member", "LIBI_barrier", rc);
            double t = (now() - t0) / iters;
            if (op == 0) errors += check_all(big, total, 0, 0, seed);
            if (op == 1) errors += check_all(mine, per, (size_t)rank * per, 1, 1);
            for (int r = 0; master && op == 2 && r < n; r++)
                errors += check_all(big + (size_t)r * per, per, (size_t)r * per, 2, 2);
            size_t bytes = op == 0 ? total : per * (size_t)n;
            if (master)
                used += (size_t)snprintf(report + used, sizeof report - used,
                                         "%s %.0f %d %.3f %.1f\n", names[op], total / 1048576.0,
                                         iters, t * 1e3, bytes / t / 1e6);
        }
        free(big);
        free(mine);
    }
    /* Every member's error count reaches the master. */
    int *all = master ? malloc(sizeof(int) * (size_t)n) : NULL;
    if ((rc = LIBI_gather(&errors, sizeof errors, all)) != LIBI_OK)
        return die("member", "LIBI_gather", rc);
    if (master) {
        int sum = 0;
        for (int r = 0; r < n; r++) sum += all[r];
        used += (size_t)snprintf(report + used, sizeof report - used, "errors %d\n", sum);
        if ((rc = LIBI_sendUsrData(report, (int)used)) != LIBI_OK)
            return die("member", "LIBI_sendUsrData", rc);
    }
    if ((rc = LIBI_finalize()) != LIBI_OK) return die("member", "LIBI_finalize", rc);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 4 && strcmp(argv[1], "--member") == 0) return member(argv[2], argv[3]);
    if (argc < 2) {
        fprintf(stderr, "usage: libi_coll host:n[,host:n...] [SIZES_MIB] [OPS]\n");
        return 2;
    }
    const char *sizes = argc > 2 ? argv[2] : "1,64";
    const char *ops = argc > 3 ? argv[3] : "bcast,scatter,gather";
    const char *margv[] = {"--member", sizes, ops, NULL};
    int rc = LIBI_fe_init(LIBI_VERSION);
    if (rc != LIBI_OK) return die("fe", "LIBI_fe_init", rc);
    libi_sess_handle_t s;
    if ((rc = LIBI_fe_createSession(&s)) != LIBI_OK) return die("fe", "LIBI_fe_createSession", rc);
    proc_dist_req_t d = {s, "/proc/self/exe", margv, parse_hosts(argv[1]), NULL};
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len > 0) {
        self[len] = 0;
        d.proc_path = self;
    }
    if ((rc = LIBI_fe_launch(&d, 1)) != LIBI_OK) return die("fe", "LIBI_fe_launch", rc);
    void *msg = NULL;
    int n = 0;
    if ((rc = LIBI_fe_recvUsrData(s, &msg, &n)) != LIBI_OK) return die("fe", "LIBI_fe_recvUsrData", rc);
    fwrite(msg, 1, (size_t)n, stdout);
    free(msg);
    if ((rc = LIBI_fe_finalize()) != LIBI_OK) return die("fe", "LIBI_fe_finalize", rc);
    return 0;
}

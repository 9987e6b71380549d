/* The LIBI paper's micro benchmark, member: barrier; broadcast 128 B then gather 128 B;
 * scatter 128 B then gather 128 B; each ITERATIONS times (argv[1]), data checked. The
 * master sends the average time of each to the front end. */
#include <libi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N 128

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int die(const char *what, int rc) {
    fprintf(stderr, "microbench_member: %s: %s: %s\n", what, LIBI_rcName(rc), LIBI_errorString());
    return 1;
}

int main(int argc, char **argv) {
    int rc = LIBI_init(LIBI_VERSION, &argc, &argv);
    if (rc != LIBI_OK) return die("LIBI_init", rc);
    int rank, size, iters = argc > 1 ? atoi(argv[1]) : 100;
    LIBI_getMyRank(&rank);
    LIBI_getSize(&size);
    int master = LIBI_amMaster() == LIBI_YES;
    unsigned char buf[N], mine[N];
    unsigned char *all = master ? malloc((size_t)size * N) : NULL;
    int bad = 0;

    double t0 = now();
    for (int i = 0; i < iters; i++)
        if ((rc = LIBI_barrier()) != LIBI_OK) return die("LIBI_barrier", rc);
    double barrier = (now() - t0) / iters;

    t0 = now();
    for (int i = 0; i < iters; i++) {
        if (master) memset(buf, 'a' + i % 26, N);
        if ((rc = LIBI_broadcast(buf, N)) != LIBI_OK) return die("LIBI_broadcast", rc);
        if (buf[0] != 'a' + i % 26 || buf[N - 1] != 'a' + i % 26) bad++;
        memset(mine, (rank + i) & 0xff, N);
        if ((rc = LIBI_gather(mine, N, all)) != LIBI_OK) return die("LIBI_gather", rc);
        for (int r = 0; master && r < size; r++)
            if (all[(size_t)r * N] != ((r + i) & 0xff)) bad++;
    }
    double bcast_gather = (now() - t0) / iters;

    t0 = now();
    for (int i = 0; i < iters; i++) {
        for (int r = 0; master && r < size; r++) memset(all + (size_t)r * N, (r * 7 + i) & 0xff, N);
        if ((rc = LIBI_scatter(all, N, buf)) != LIBI_OK) return die("LIBI_scatter", rc);
        if (buf[0] != ((rank * 7 + i) & 0xff)) bad++;
        if ((rc = LIBI_gather(buf, N, all)) != LIBI_OK) return die("LIBI_gather", rc);
        for (int r = 0; master && r < size; r++)
            if (all[(size_t)r * N + N - 1] != ((r * 7 + i) & 0xff)) bad++;
    }
    double scatter_gather = (now() - t0) / iters;

    /* Every member's error count reaches the master. */
    int counts[1];
    counts[0] = bad;
    int *allbad = master ? malloc(sizeof(int) * (size_t)size) : NULL;
    if ((rc = LIBI_gather(counts, sizeof counts, allbad)) != LIBI_OK) return die("LIBI_gather", rc);
    if (master) {
        int total = 0;
        for (int r = 0; r < size; r++) total += allbad[r];
        char line[256];
        int n = snprintf(line, sizeof line,
                         "members=%d iterations=%d barrier_us=%.1f bcast_gather_us=%.1f "
                         "scatter_gather_us=%.1f errors=%d",
                         size, iters, barrier * 1e6, bcast_gather * 1e6, scatter_gather * 1e6, total);
        if ((rc = LIBI_sendUsrData(line, n)) != LIBI_OK) return die("LIBI_sendUsrData", rc);
    }
    if ((rc = LIBI_finalize()) != LIBI_OK) return die("LIBI_finalize", rc);
    return bad ? 1 : 0;
}

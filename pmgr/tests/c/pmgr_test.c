/* Exercise the PMGR_COLLECTIVE C API (libpmgr_collective.so) with result checks.
 * Usage: pmgr_test [abort]   — with "abort", rank 1 sends an abort record after closing.
 * Exits 0 when every check passed; prints "rank R: FAIL ..." otherwise. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pmgr_collective_client.h"

static int me = -1;
static int failures = 0;

#define CHECK(cond, ...)                                   \
    do {                                                   \
        if (!(cond)) {                                     \
            fprintf(stderr, "rank %d: FAIL line %d: ", me, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                  \
            fprintf(stderr, "\n");                         \
            failures++;                                    \
        }                                                  \
    } while (0)

static unsigned char pat(int src, int dst, int k) { return (unsigned char) (src * 31 + dst * 7 + k); }

int main(int argc, char **argv)
{
    int np = 0, id = 0, i, k, rc;
    CHECK(pmgr_barrier() == PMGR_FAILURE, "barrier before init must fail");
    rc = pmgr_init(&argc, &argv, &np, &me, &id);
    CHECK(rc == PMGR_SUCCESS, "init rc %d", rc);
    CHECK(np > 0 && me >= 0 && me < np && id != 0, "np %d me %d id %d", np, me, id);
    CHECK(pmgr_barrier() == PMGR_FAILURE, "barrier before open must fail");
    CHECK(pmgr_open() == PMGR_SUCCESS, "open");
    CHECK(pmgr_barrier() == PMGR_SUCCESS, "barrier");

    /* bcast from every root */
    for (i = 0; i < np; i++) {
        char buf[16];
        memset(buf, me == i ? 'a' + i % 26 : 0, sizeof buf);
        CHECK(pmgr_bcast(buf, sizeof buf, i) == PMGR_SUCCESS, "bcast");
        for (k = 0; k < (int) sizeof buf; k++) CHECK(buf[k] == 'a' + i % 26, "bcast byte %d", k);
    }
    CHECK(pmgr_bcast(NULL, 4, 0) == PMGR_FAILURE, "bcast NULL");
    CHECK(pmgr_bcast(&k, 0, 0) == PMGR_FAILURE, "bcast count 0");

    /* gather to the last rank */
    {
        unsigned char send[3], *all = malloc(3 * np);
        for (k = 0; k < 3; k++) send[k] = pat(me, 0, k);
        CHECK(pmgr_gather(send, 3, all, np - 1) == PMGR_SUCCESS, "gather");
        if (me == np - 1)
            for (i = 0; i < np; i++)
                for (k = 0; k < 3; k++) CHECK(all[i * 3 + k] == pat(i, 0, k), "gather %d.%d", i, k);
        free(all);
    }
    /* scatter from rank 0 */
    {
        unsigned char *send = malloc(2 * np), mine[2];
        for (i = 0; i < np; i++)
            for (k = 0; k < 2; k++) send[i * 2 + k] = pat(0, i, k);
        CHECK(pmgr_scatter(send, 2, mine, 0) == PMGR_SUCCESS, "scatter");
        CHECK(mine[0] == pat(0, me, 0) && mine[1] == pat(0, me, 1), "scatter data");
        free(send);
    }
    /* allgather */
    {
        int *all = malloc(sizeof(int) * np), v = 1000 + me;
        CHECK(pmgr_allgather(&v, sizeof v, all) == PMGR_SUCCESS, "allgather");
        for (i = 0; i < np; i++) CHECK(all[i] == 1000 + i, "allgather %d: %d", i, all[i]);
        free(all);
    }
    /* alltoall */
    {
        unsigned char *send = malloc(2 * np), *recv = malloc(2 * np);
        for (i = 0; i < np; i++)
            for (k = 0; k < 2; k++) send[i * 2 + k] = pat(me, i, k);
        CHECK(pmgr_alltoall(send, 2, recv) == PMGR_SUCCESS, "alltoall");
        for (i = 0; i < np; i++)
            for (k = 0; k < 2; k++) CHECK(recv[i * 2 + k] == pat(i, me, k), "alltoall %d.%d", i, k);
        free(send);
        free(recv);
    }
    /* allreduce */
    {
        int64_t v = (int64_t) me * 10000000000LL, r = 0;
        CHECK(pmgr_allreduce_int64t(&v, &r, PMGR_SUM) == PMGR_SUCCESS, "sum");
        CHECK(r == (int64_t) np * (np - 1) / 2 * 10000000000LL, "sum %lld", (long long) r);
        v = -me;
        CHECK(pmgr_allreduce_int64t(&v, &r, PMGR_MAX) == PMGR_SUCCESS, "max");
        CHECK(r == 0, "max %lld", (long long) r);
    }
    /* allgatherstr */
    {
        char name[64], **strs = NULL, *buf = NULL;
        /* names of different lengths: "node" + (rank+1) x (rank%10 digit) */
        memset(name, 0, sizeof name);
        memcpy(name, "node", 4);
        memset(name + 4, '0' + me % 10, (size_t) (me % 50) + 1);
        CHECK(pmgr_allgatherstr(name, &strs, &buf) == PMGR_SUCCESS, "allgatherstr");
        for (i = 0; strs && i < np; i++) {
            char want[64];
            memset(want, 0, sizeof want);
            memcpy(want, "node", 4);
            memset(want + 4, '0' + i % 10, (size_t) (i % 50) + 1);
            CHECK(strcmp(strs[i], want) == 0, "allgatherstr %d: '%s' != '%s'", i, strs[i], want);
        }
        free(strs);
        free(buf);
    }
    CHECK(strcmp(pmgr_errstr(PMGR_SUCCESS), "success") == 0, "errstr");
    CHECK(pmgr_close() == PMGR_SUCCESS, "close");
    if (argc > 1 && strcmp(argv[1], "abort") == 0 && me == 1) {
        CHECK(pmgr_abort(-7, "rank %d gives up: %s", me, "testing") == PMGR_SUCCESS, "abort");
    }
    CHECK(pmgr_finalize() == PMGR_SUCCESS, "finalize");
    if (failures == 0) printf("rank %d of %d: ok\n", me, np);
    return failures ? 1 : 0;
}

/* PMI-1 client test against libi's libpmi.so: init values against the environment, maxima,
 * kvs name, put/commit/barrier/get of every rank's key, a missing key, universe size, appnum,
 * argument checks, finalize. Prints "pmi1 ok rank R size N" per rank; exits 1 on failure.
 * argv[1] == "ns": also check that looking up an unpublished service fails. The universe
 * size is at least the job's size, or -1 (unknown: the default of Hydra and of libi). */
#include <pmi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank = -1;

#define CHECK(c, ...)                                         \
    do {                                                      \
        if (!(c)) {                                           \
            fprintf(stderr, "pmi1 test rank %d: ", rank);     \
            fprintf(stderr, __VA_ARGS__);                     \
            fprintf(stderr, " [%s:%d]\n", __FILE__, __LINE__); \
            exit(1);                                          \
        }                                                     \
    } while (0)

int main(int argc, char **argv)
{
    int spawned = -1, size = -1, init = -1, appnum = -1, usize = -1;
    int singleton = getenv("PMI_FD") == NULL;
    CHECK(PMI_Initialized(&init) == PMI_SUCCESS && init == 0, "initialized before init");
    CHECK(PMI_Get_rank(&rank) == PMI_ERR_INIT, "rank before init");
    CHECK(PMI_Init(&spawned) == PMI_SUCCESS, "PMI_Init");
    CHECK(PMI_Initialized(&init) == PMI_SUCCESS && init == 1, "PMI_Initialized");
    CHECK(spawned == 0, "spawned %d", spawned);
    CHECK(PMI_Get_rank(&rank) == PMI_SUCCESS && PMI_Get_size(&size) == PMI_SUCCESS, "rank/size");
    if (singleton)
        CHECK(rank == 0 && size == 1, "singleton rank %d size %d", rank, size);
    else
        CHECK(atoi(getenv("PMI_RANK")) == rank && getenv("PMI_SIZE") && atoi(getenv("PMI_SIZE")) == size,
              "rank %d size %d vs env", rank, size);
    CHECK(PMI_Get_appnum(&appnum) == PMI_SUCCESS && appnum == 0, "appnum %d", appnum);
    CHECK(PMI_Get_universe_size(&usize) == PMI_SUCCESS, "universe size");
    CHECK(usize >= size || usize == -1, "universe %d", usize);
    CHECK(PMI_Get_rank(NULL) == PMI_ERR_INVALID_ARG, "null arg");

    int nmax, kmax, vmax;
    CHECK(PMI_KVS_Get_name_length_max(&nmax) == PMI_SUCCESS && nmax >= 16, "name max");
    CHECK(PMI_KVS_Get_key_length_max(&kmax) == PMI_SUCCESS && kmax >= 32, "key max");
    CHECK(PMI_KVS_Get_value_length_max(&vmax) == PMI_SUCCESS && vmax >= 256, "value max");
    char kvs[256];
    CHECK(PMI_KVS_Get_my_name(kvs, sizeof kvs) == PMI_SUCCESS && kvs[0], "kvs name");
    CHECK(PMI_KVS_Get_my_name(kvs, 1) == PMI_ERR_INVALID_LENGTH, "short kvs buffer");
    CHECK(PMI_KVS_Get_my_name(kvs, sizeof kvs) == PMI_SUCCESS, "kvs name again");

    char key[64], val[1024], want[1024];
    snprintf(key, sizeof key, "k-%d", rank);
    snprintf(val, sizeof val, "v=%d,%d", rank, rank * 3);
    CHECK(PMI_KVS_Put(kvs, key, val) == PMI_SUCCESS, "put");
    CHECK(PMI_KVS_Commit(kvs) == PMI_SUCCESS, "commit");
    CHECK(PMI_Barrier() == PMI_SUCCESS, "barrier");
    for (int r = 0; r < size; r++) {
        snprintf(key, sizeof key, "k-%d", r);
        snprintf(want, sizeof want, "v=%d,%d", r, r * 3);
        CHECK(PMI_KVS_Get(kvs, key, val, sizeof val) == PMI_SUCCESS, "get %s", key);
        CHECK(strcmp(val, want) == 0, "%s = '%s', want '%s'", key, val, want);
    }
    CHECK(PMI_KVS_Get(kvs, "no-such-key", val, sizeof val) != PMI_SUCCESS, "missing key found");

    char port[PMI_MAX_PORT_NAME];
    if (singleton) {
        CHECK(PMI_Publish_name("libi-svc", "port-1") == PMI_SUCCESS, "publish");
        CHECK(PMI_Lookup_name("libi-svc", port) == PMI_SUCCESS && strcmp(port, "port-1") == 0, "lookup");
        CHECK(PMI_Unpublish_name("libi-svc") == PMI_SUCCESS, "unpublish");
    }
    if (singleton || (argc > 1 && strcmp(argv[1], "ns") == 0))
        CHECK(PMI_Lookup_name("libi-no-svc", port) != PMI_SUCCESS, "lookup of unpublished");

    CHECK(PMI_Barrier() == PMI_SUCCESS, "final barrier");
    printf("pmi1 ok rank %d size %d\n", rank, size);
    fflush(stdout);
    CHECK(PMI_Finalize() == PMI_SUCCESS, "finalize");
    return 0;
}

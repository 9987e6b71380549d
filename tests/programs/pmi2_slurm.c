/* PMI-2 client test: Slurm's libpmi2 (or ours, see pmi2_ours.c) against the process manager.
 * Checks init values against the environment, the job id, PMI_process_mapping (against
 * MPI_LOCALRANKID / MPI_LOCALNRANKS), PMI_hwloc_xmlfile (hwloc XML when given), universeSize,
 * put/fence/get of every rank's key, a missing key, node attributes (put by the node's first
 * rank, waited for by the others), finalize. Prints one line
 * "pmi2 ok rank R size N node D hwloc PATH|-" per rank; exits 1 on failure.
 * argv[1] == "lenient": universeSize may be absent (Hydra 4.0); when present it is at least the
 * job's size or -1 (unknown: Hydra's and libi's default). */
#include <pmi2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank = -1;

#define CHECK(c, ...)                                         \
    do {                                                      \
        if (!(c)) {                                           \
            fprintf(stderr, "pmi2 test rank %d: ", rank);     \
            fprintf(stderr, __VA_ARGS__);                     \
            fprintf(stderr, " [%s:%d]\n", __FILE__, __LINE__); \
            exit(1);                                          \
        }                                                     \
    } while (0)

/* Node of every rank from "(vector,(start,nodes,ranks_per_node),...)"; blocks are reused
 * from the first when they cover fewer ranks than size (as MPICH does). */
static void parse_mapping(const char *m, int size, int *node_of)
{
    int blocks[64][3], nb = 0;
    const char *p = strstr(m, "(vector");
    CHECK(p != NULL, "mapping without (vector: %s", m);
    p += 7;
    while (nb < 64) {
        int s, n, k, used = 0;
        p = strchr(p, '(');
        if (!p)
            break;
        CHECK(sscanf(p, "(%d,%d,%d)%n", &s, &n, &k, &used) == 3 && used > 0, "bad block in %s", m);
        blocks[nb][0] = s, blocks[nb][1] = n, blocks[nb][2] = k, nb++;
        p += used;
    }
    CHECK(nb > 0, "no blocks in %s", m);
    int r = 0;
    while (r < size)
        for (int b = 0; b < nb && r < size; b++)
            for (int node = blocks[b][0]; node < blocks[b][0] + blocks[b][1] && r < size; node++)
                for (int i = 0; i < blocks[b][2] && r < size; i++)
                    node_of[r++] = node;
}

#ifdef EXTRA_TESTS
static void extra_tests(int argc, char **argv);
#endif

int main(int argc, char **argv)
{
    int lenient = argc > 1 && strcmp(argv[1], "lenient") == 0;
    int spawned = -1, size = -1, appnum = -1;
    CHECK(PMI2_Init(&spawned, &size, &rank, &appnum) == PMI2_SUCCESS, "PMI2_Init");
    CHECK(PMI2_Initialized(), "PMI2_Initialized");
    CHECK(spawned == 0, "spawned %d", spawned);
    CHECK(appnum == 0, "appnum %d", appnum);
    const char *es = getenv("PMI_SIZE"), *er = getenv("PMI_RANK");
    if (getenv("PMI_FD")) {
        CHECK(es && atoi(es) == size, "size %d, PMI_SIZE %s", size, es ? es : "-");
        CHECK(er && atoi(er) == rank, "rank %d, PMI_RANK %s", rank, er ? er : "-");
    } else {
        CHECK(size == 1 && rank == 0, "singleton rank %d size %d", rank, size);
    }
    CHECK(rank >= 0 && rank < size, "rank %d size %d", rank, size);

    char jobid[256];
    CHECK(PMI2_Job_GetId(jobid, sizeof jobid) == PMI2_SUCCESS && jobid[0], "job id");

    char map[PMI2_MAX_VALLEN + 1];
    int found = -1;
    CHECK(PMI2_Info_GetJobAttr("PMI_process_mapping", map, sizeof map, &found) == PMI2_SUCCESS,
          "GetJobAttr PMI_process_mapping");
    CHECK(found == 1, "PMI_process_mapping not found");
    int *node_of = calloc(size, sizeof(int));
    CHECK(node_of != NULL, "calloc");
    parse_mapping(map, size, node_of);
    int mynode = node_of[rank], local_n = 0, local_id = -1, leader = -1;
    for (int r = 0; r < size; r++)
        if (node_of[r] == mynode) {
            if (leader < 0)
                leader = r;
            if (r == rank)
                local_id = local_n;
            local_n++;
        }
    const char *lid = getenv("MPI_LOCALRANKID"), *ln = getenv("MPI_LOCALNRANKS");
    if (lid)
        CHECK(atoi(lid) == local_id, "mapping %s: local id %d, MPI_LOCALRANKID %s", map, local_id, lid);
    if (ln)
        CHECK(atoi(ln) == local_n, "mapping %s: %d local, MPI_LOCALNRANKS %s", map, local_n, ln);

    /* The node's hwloc topology file (MPICH asks on nodes of two ranks or more): reported
       as "hwloc PATH" or "hwloc -"; when given, it must be hwloc XML. */
    char xml[PMI2_MAX_VALLEN + 1] = "-";
    found = -1;
    CHECK(PMI2_Info_GetJobAttr("PMI_hwloc_xmlfile", xml, sizeof xml, &found) == PMI2_SUCCESS,
          "GetJobAttr PMI_hwloc_xmlfile");
    if (found == 1) {
        FILE *f = fopen(xml, "r");
        CHECK(f != NULL, "PMI_hwloc_xmlfile %s cannot be opened", xml);
        char head[4096];
        size_t got = fread(head, 1, sizeof head - 1, f);
        head[got] = 0;
        fclose(f);
        CHECK(strncmp(head, "<?xml", 5) == 0 && strstr(head, "<topology") != NULL,
              "PMI_hwloc_xmlfile %s is not hwloc XML", xml);
    } else {
        strcpy(xml, "-");
    }

    char us[64];
    found = -1;
    CHECK(PMI2_Info_GetJobAttr("universeSize", us, sizeof us, &found) == PMI2_SUCCESS,
          "GetJobAttr universeSize");
    if (found == 1)
        CHECK(atoi(us) >= size || atoi(us) == -1, "universeSize %s < size %d", us, size);
    else
        CHECK(lenient, "universeSize not found");

    char key[64], val[PMI2_MAX_VALLEN], want[PMI2_MAX_VALLEN];
    snprintf(key, sizeof key, "key-%d", rank);
    snprintf(val, sizeof val, "value of %d = %d*7 (%s)", rank, rank * 7, jobid);
    CHECK(PMI2_KVS_Put(key, val) == PMI2_SUCCESS, "KVS_Put");
    CHECK(PMI2_KVS_Fence() == PMI2_SUCCESS, "KVS_Fence");
    for (int r = 0; r < size; r++) {
        int vallen = -1;
        snprintf(key, sizeof key, "key-%d", r);
        snprintf(want, sizeof want, "value of %d = %d*7 (%s)", r, r * 7, jobid);
        CHECK(PMI2_KVS_Get(jobid, r, key, val, sizeof val, &vallen) == PMI2_SUCCESS, "KVS_Get %s", key);
        CHECK(strcmp(val, want) == 0, "%s = '%s', want '%s'", key, val, want);
        CHECK(vallen == (int)strlen(want), "vallen %d for %s", vallen, key);
    }
    {
        int vallen;
        CHECK(PMI2_KVS_Get(jobid, PMI2_ID_NULL, "no-such-key", val, sizeof val, &vallen) != PMI2_SUCCESS,
              "missing key found");
    }

    char attr[PMI2_MAX_VALLEN];
    snprintf(want, sizeof want, "leader is %d", leader);
    if (rank == leader) {
        CHECK(PMI2_Info_PutNodeAttr("libi-node-attr", want) == PMI2_SUCCESS, "PutNodeAttr");
        found = -1;
        CHECK(PMI2_Info_GetNodeAttr("libi-node-attr", attr, sizeof attr, &found, 0) == PMI2_SUCCESS,
              "GetNodeAttr own");
    } else {
        found = -1;
        CHECK(PMI2_Info_GetNodeAttr("libi-node-attr", attr, sizeof attr, &found, 1) == PMI2_SUCCESS,
              "GetNodeAttr wait");
    }
    CHECK(found == 1 && strcmp(attr, want) == 0, "node attr found=%d '%s', want '%s'", found,
          found == 1 ? attr : "", want);
    found = -1;
    CHECK(PMI2_Info_GetNodeAttr("libi-no-attr", attr, sizeof attr, &found, 0) == PMI2_SUCCESS,
          "GetNodeAttr missing");
    CHECK(found == 0, "missing node attr found");

#ifdef EXTRA_TESTS
    extra_tests(argc, argv);
#endif
    /* Nobody finalizes while others may still read node attributes or keys. */
    CHECK(PMI2_KVS_Fence() == PMI2_SUCCESS, "final fence");
    printf("pmi2 ok rank %d size %d node %d hwloc %s\n", rank, size, mynode, xml);
    fflush(stdout);
    CHECK(PMI2_Finalize() == PMI2_SUCCESS, "PMI2_Finalize");
#ifdef EXTRA_TESTS
    /* (Slurm's library still says "initialized" after PMI2_Finalize.) */
    CHECK(!PMI2_Initialized(), "initialized after finalize");
#endif
    free(node_of);
    return 0;
}

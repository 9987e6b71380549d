/* A PMI library taken by path, as MPI libraries that dlopen their PMI do: built against
 * MPICH's own header (-DPMI_V1 with MPICH's pmi.h, -DPMI_V2 -DUSE_PMI2_API with its pmi2.h),
 * every call goes through a pointer from dlsym with the type of MPICH's declaration.
 *
 *   pmi_dlopen LIB check NAME...   resolve every NAME; print "missing NAME" for each one
 *                                  that is not there, then "resolved N of M"; exit 1 if any
 *                                  is missing
 *   pmi_dlopen LIB run             as a rank of a job: init, put/commit/barrier (fence)/get
 *                                  of the next rank's pair, the clique, and rank 0 spawns
 *                                  2 children (this program, "LIB child") with a pre-put
 *                                  pair; prints "rank R/N ok clique=a,b kvs=K" and
 *                                  "spawn rc=0 errors=0,0" (PMI-2: "... jobid=J")
 *   pmi_dlopen LIB child           a spawned child: init says spawned, reads the parent's
 *                                  pre-put pair, fences with its sibling; prints
 *                                  "child R/N spawned=1 parent=VALUE"
 * Any failure prints "FAIL ..." and exits 1. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(PMI_V1)
#include <pmi.h>
#define OK PMI_SUCCESS
#elif defined(PMI_V2)
#include <pmi2.h>
#define OK PMI2_SUCCESS
/* MPICH's pmi2.h declares it opaque; this is MPICH 4's MPIR_Info, which its MPI library
 * passes to PMI2_Job_Spawn. */
struct MPIR_Info {
    int handle;
    int ref_count;
    struct MPIR_Info *next;
    char *key;
    char *value;
};
#else
#error "build with -DPMI_V1 or -DPMI_V2"
#endif

static void *lib;

static void *need(const char *name)
{
    void *p = dlsym(lib, name);
    if (!p) {
        printf("FAIL missing %s\n", name);
        exit(1);
    }
    return p;
}

/* A pointer typed as MPICH's header declares the function. */
#define FN(name) __typeof__(&name) p_##name = (__typeof__(&name)) need(#name)

#define CHECK(call)                                                     \
    do {                                                                \
        int rc_ = (call);                                               \
        if (rc_ != OK) {                                                \
            printf("FAIL %s = %d (line %d)\n", #call, rc_, __LINE__);   \
            exit(1);                                                    \
        }                                                               \
    } while (0)

#define EXPECT(cond)                                                    \
    do {                                                                \
        if (!(cond)) {                                                  \
            printf("FAIL %s (line %d)\n", #cond, __LINE__);             \
            exit(1);                                                    \
        }                                                               \
    } while (0)

static int check(int n, char **names)
{
    int missing = 0;
    for (int i = 0; i < n; i++) {
        if (!dlsym(lib, names[i])) {
            printf("missing %s\n", names[i]);
            missing++;
        }
    }
    printf("resolved %d of %d\n", n - missing, n);
    return missing ? 1 : 0;
}

#if defined(PMI_V1)
/* Not in MPICH's current pmi.h: the types of Slurm's (and older MPICH's) declarations. */
typedef int (*clique_size_fn)(int *);
typedef int (*clique_ranks_fn)(int[], int);
typedef int (*iter_fn)(const char[], char[], int, char[], int);

static void join(char *out, size_t cap, const int *v, int n)
{
    size_t used = 0;
    out[0] = 0;
    for (int i = 0; i < n && used < cap; i++)
        used += snprintf(out + used, cap - used, i ? ",%d" : "%d", v[i]);
}

static int run(const char *self, const char *libpath, int child)
{
    FN(PMI_Init);
    FN(PMI_Get_rank);
    FN(PMI_Get_size);
    FN(PMI_KVS_Get_my_name);
    FN(PMI_KVS_Get_name_length_max);
    FN(PMI_KVS_Put);
    FN(PMI_KVS_Commit);
    FN(PMI_Barrier);
    FN(PMI_KVS_Get);
    FN(PMI_Spawn_multiple);
    FN(PMI_Finalize);
    clique_size_fn p_clique_size = (clique_size_fn) need("PMI_Get_clique_size");
    clique_ranks_fn p_clique_ranks = (clique_ranks_fn) need("PMI_Get_clique_ranks");
    iter_fn p_iter_first = (iter_fn) need("PMI_KVS_Iter_first");
    int spawned = -1, rank = -1, size = -1, namemax = 0;
    char kvs[256], key[64], val[1024], want[1200];

    CHECK(p_PMI_Init(&spawned));
    CHECK(p_PMI_Get_rank(&rank));
    CHECK(p_PMI_Get_size(&size));
    CHECK(p_PMI_KVS_Get_name_length_max(&namemax));
    EXPECT(namemax > 0 && namemax <= (int) sizeof kvs);
    CHECK(p_PMI_KVS_Get_my_name(kvs, namemax));
    EXPECT(spawned == (child ? 1 : 0));

    snprintf(key, sizeof key, "k%d", rank);
    snprintf(val, sizeof val, "v%d-%s", rank, kvs);
    CHECK(p_PMI_KVS_Put(kvs, key, val));
    CHECK(p_PMI_KVS_Commit(kvs));
    CHECK(p_PMI_Barrier());
    snprintf(key, sizeof key, "k%d", (rank + 1) % size);
    snprintf(want, sizeof want, "v%d-%s", (rank + 1) % size, kvs);
    CHECK(p_PMI_KVS_Get(kvs, key, val, sizeof val));
    EXPECT(strcmp(val, want) == 0);
    /* The server lists no pairs to getbyidx: the iterator ends at once (empty key). */
    CHECK(p_iter_first(kvs, key, sizeof key, val, sizeof val));
    EXPECT(key[0] == 0);

    if (child) {
        char parent[1024];
        CHECK(p_PMI_KVS_Get(kvs, "PARENT_ROOT_PORT_NAME", parent, sizeof parent));
        printf("child %d/%d spawned=%d parent=%s\n", rank, size, spawned, parent);
    } else {
        int csize = 0, cranks[64];
        char list[512];
        CHECK(p_clique_size(&csize));
        EXPECT(csize >= 1 && csize <= 64);
        /* One slot short is refused. */
        EXPECT(p_clique_ranks(cranks, csize - 1) == PMI_ERR_INVALID_LENGTH);
        CHECK(p_clique_ranks(cranks, csize));
        join(list, sizeof list, cranks, csize);
        printf("rank %d/%d ok clique=%s kvs=%s\n", rank, size, list, kvs);
        if (rank == 0) {
            const char *cmds[1] = { self };
            const char *args[] = { libpath, "child", NULL };
            const char **argvs[1] = { args };
            int maxprocs[1] = { 2 }, infosizes[1] = { 0 }, errors[2] = { -1, -1 };
            char port[600];
            snprintf(port, sizeof port, "port-of-%s", kvs);
            PMI_keyval_t preput[1] = { { "PARENT_ROOT_PORT_NAME", port } };
            const PMI_keyval_t *infos[1] = { NULL };
            int rc = p_PMI_Spawn_multiple(1, cmds, argvs, maxprocs, infosizes, infos, 1, preput,
                                          errors);
            printf("spawn rc=%d errors=%d,%d\n", rc, errors[0], errors[1]);
        }
    }
    CHECK(p_PMI_Finalize());
    return 0;
}
#else
typedef int (*getsize_fn)(int *);

static int run(const char *self, const char *libpath, int child)
{
    FN(PMI2_Init);
    FN(PMI2_Job_GetId);
    FN(PMI2_KVS_Put);
    FN(PMI2_KVS_Fence);
    FN(PMI2_KVS_Get);
    FN(PMI2_Info_GetJobAttr);
    FN(PMI2_Info_GetJobAttrIntArray);
    FN(PMI2_Info_PutNodeAttr);
    FN(PMI2_Info_GetNodeAttrIntArray);
    FN(PMI2_Job_Connect);
    FN(PMI2_Job_Disconnect);
    FN(PMI2_Job_Spawn);
    FN(PMI2_Finalize);
    getsize_fn p_getsize = (getsize_fn) need("PMI2_Info_GetSize");
    int spawned = -1, size = -1, rank = -1, appnum = -1, len = 0, found = 0, n = 0;
    char jobid[256], key[64], val[1024], want[1200];
    int arr[8];

    CHECK(p_PMI2_Init(&spawned, &size, &rank, &appnum));
    EXPECT(spawned == (child ? 1 : 0));
    CHECK(p_PMI2_Job_GetId(jobid, sizeof jobid));

    snprintf(key, sizeof key, "k%d", rank);
    snprintf(val, sizeof val, "v%d-%s", rank, jobid);
    CHECK(p_PMI2_KVS_Put(key, val));
    CHECK(p_PMI2_KVS_Fence());
    snprintf(key, sizeof key, "k%d", (rank + 1) % size);
    snprintf(want, sizeof want, "v%d-%s", (rank + 1) % size, jobid);
    CHECK(p_PMI2_KVS_Get(jobid, (rank + 1) % size, key, val, sizeof val, &len));
    EXPECT(strcmp(val, want) == 0 && len == (int) strlen(want));

    if (child) {
        CHECK(p_PMI2_KVS_Get(NULL, PMI2_ID_NULL, "PARENT_ROOT_PORT_NAME", val, sizeof val, &len));
        printf("child %d/%d spawned=%d parent=%s\n", rank, size, spawned, val);
    } else {
        int local = 0;
        char mapping[1024];
        CHECK(p_PMI2_Info_GetJobAttr("PMI_process_mapping", mapping, sizeof mapping, &found));
        EXPECT(found == 1);
        CHECK(p_getsize(&local));
        /* universeSize read as an array of one integer. */
        CHECK(p_PMI2_Info_GetJobAttrIntArray("universeSize", arr, 8, &n, &found));
        /* (-1: unlimited, as Hydra says it) */
        EXPECT(found == 1 && n == 1 && (arr[0] >= size || arr[0] == -1));
        /* A node attribute of three integers, put by the node's lowest rank... */
        if (rank == 0)
            CHECK(p_PMI2_Info_PutNodeAttr("libi-ints", "3,1,2"));
        CHECK(p_PMI2_KVS_Fence());
        if (rank == 0) {
            CHECK(p_PMI2_Info_GetNodeAttrIntArray("libi-ints", arr, 2, &n, &found));
            EXPECT(found == 1 && n == 2 && arr[0] == 3 && arr[1] == 1);
        }
        CHECK(p_PMI2_Job_Connect(jobid, NULL));
        CHECK(p_PMI2_Job_Disconnect(jobid));
        printf("rank %d/%d ok local=%d mapping=%s kvs=%s\n", rank, size, local, mapping, jobid);
        if (rank == 0) {
            const char *cmds[1] = { self };
            const char *args[] = { libpath, "child" };
            const char **argvs[1] = { args };
            int argcs[1] = { 2 }, maxprocs[1] = { 2 }, infosizes[1] = { 0 }, errors[2] = { -1, -1 };
            char port[600], newjob[256] = "";
            snprintf(port, sizeof port, "port-of-%s", jobid);
            struct MPIR_Info pp = { 0, 0, NULL, "PARENT_ROOT_PORT_NAME", port };
            const struct MPIR_Info *preput[1] = { &pp };
            const struct MPIR_Info *infos[1] = { NULL };
            int rc = p_PMI2_Job_Spawn(1, cmds, argcs, argvs, maxprocs, infosizes, infos, 1,
                                      preput, newjob, sizeof newjob, errors);
            printf("spawn rc=%d errors=%d,%d jobid=%s\n", rc, errors[0], errors[1],
                   newjob[0] && strcmp(newjob, jobid) != 0 ? "new" : "same");
        }
    }
    CHECK(p_PMI2_Finalize());
    return 0;
}
#endif

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s LIB check NAME... | run | child\n", argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    lib = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
        printf("FAIL dlopen %s: %s\n", argv[1], dlerror());
        return 1;
    }
    if (strcmp(argv[2], "check") == 0)
        return check(argc - 3, argv + 3);
    return run(argv[0], argv[1], strcmp(argv[2], "child") == 0);
}

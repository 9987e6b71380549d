/* PMI-2 spawn with Slurm's libpmi2 client: the parent (one rank) spawns 2 copies of itself
 * with argument "child", pre-putting PARENT_ROOT_PORT_NAME=port-from-parent and placing
 * them with the info key "host" (argv[1]). Children see spawned=1, size 2, and read the
 * pre-put pair from their own KVS. Prints "pmi2 spawn rc=RC" (parent) and
 * "pmi2 child R/N spawned=S value=V" (children). */
#include <pmi2.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    int spawned = 0, size = 0, rank = 0, appnum = 0, len = 0;
    char jobid[256], value[256];
    PMI2_Init(&spawned, &size, &rank, &appnum);
    if (argc > 1 && strcmp(argv[1], "child") == 0) {
        int rc = PMI2_KVS_Get(NULL, PMI2_ID_NULL, "PARENT_ROOT_PORT_NAME", value,
                              sizeof value, &len);
        printf("pmi2 child %d/%d spawned=%d value=%s\n", rank, size, spawned,
               rc == PMI2_SUCCESS ? value : "(none)");
    } else {
        const char *cmds[1] = {argv[0]};
        const char *args[] = {"child"};
        const char **argvs[1] = {args};
        int argcs[1] = {1}, maxprocs[1] = {2}, infosizes[1] = {argc > 1 ? 1 : 0}, errs[2];
        MPID_Info host = {0, 0, 0, NULL, "host", argc > 1 ? argv[1] : ""};
        MPID_Info port = {0, 0, 0, NULL, "PARENT_ROOT_PORT_NAME", "port-from-parent"};
        const MPID_Info *infos[1] = {&host}, *preput[1] = {&port};
        int rc = PMI2_Job_Spawn(1, cmds, argcs, argvs, maxprocs, infosizes, infos, 1, preput,
                                jobid, sizeof jobid, errs);
        printf("pmi2 spawn rc=%d\n", rc);
    }
    PMI2_Finalize();
    return 0;
}

/* MPI_Comm_spawn and MPI_Comm_spawn_multiple (run as "spawn" by mpiexec with any number
 * of parents, or started directly: a singleton): the parents spawn 2 children of this
 * program with MPI_Comm_spawn (arguments "child s 'x y=z'"), then 3 more with
 * MPI_Comm_spawn_multiple (1 of command "a", 2 of command "b"). Over each
 * intercommunicator parent rank 0 sends every child a number; each child adds its world
 * size and sends it back, after checking its own MPI_COMM_WORLD (allreduce), its appnum,
 * its arguments and that a universe size, when set, is at least its world's size. Both
 * sides disconnect. The children of set "s" then spawn a grandchild together (nested
 * spawn, set "g") and exchange a number with it the same way. Parent rank 0 prints
 * "parent ok"; each child prints "child SET RANK/SIZE app APPNUM ok". Any wrong value: a
 * "WRONG" line and exit 1. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

static int bad;

static void check(int ok, const char *what, int got, int want)
{
    if (!ok) {
        printf("WRONG %s: got %d, want %d\n", what, got, want);
        bad = 1;
    }
}

static void check_universe(int size)
{
    int *usize, flag;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &usize, &flag);
    check(!flag || *usize >= size, "universe size", flag ? *usize : -1, size);
}

static void exchange(MPI_Comm inter, int nchildren, int rank);

static int child(int argc, char **argv, MPI_Comm parent)
{
    int rank, size, sum = 0, *appnum, flag, v = 0, remote;
    const char *set = argc > 2 ? argv[2] : "?";
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    check_universe(size);
    MPI_Comm_remote_size(parent, &remote);
    if (strcmp(set, "s") == 0) {
        check(argc == 4 && strcmp(argv[3], "x y=z") == 0, "argument 3 of set s", argc, 4);
    } else {
        check(argc == 3, "argument count", argc, 3);
    }
    if (strcmp(set, "g") == 0)
        check(remote == 2, "grandchild's parents", remote, 2);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    check(sum == size * (size - 1) / 2, "child allreduce", sum, size * (size - 1) / 2);
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &appnum, &flag);
    int want_app = strcmp(set, "b") == 0 ? 1 : 0;
    check(flag && *appnum == want_app, "appnum", flag ? *appnum : -1, want_app);
    MPI_Recv(&v, 1, MPI_INT, 0, 7, parent, MPI_STATUS_IGNORE);
    check(v == 1000 + rank, "value from parent", v, 1000 + rank);
    v += size;
    MPI_Send(&v, 1, MPI_INT, 0, 8, parent);
    MPI_Comm_disconnect(&parent);
    if (strcmp(set, "s") == 0) {
        /* nested: the children spawn a grandchild together */
        MPI_Comm inter;
        int errs[1];
        char *args_g[] = {"child", "g", NULL};
        MPI_Comm_spawn(argv[0], args_g, 1, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter, errs);
        check(errs[0] == MPI_SUCCESS, "nested spawn errcode", errs[0], MPI_SUCCESS);
        exchange(inter, 1, rank);
    }
    printf("child %s %d/%d app %d %s\n", set, rank, size, flag ? *appnum : -1,
           bad ? "WRONG" : "ok");
    MPI_Finalize();
    return bad;
}

static void exchange(MPI_Comm inter, int nchildren, int rank)
{
    int remote;
    MPI_Comm_remote_size(inter, &remote);
    check(remote == nchildren, "remote size", remote, nchildren);
    if (rank == 0) {
        for (int i = 0; i < nchildren; i++) {
            int v = 1000 + i;
            MPI_Send(&v, 1, MPI_INT, i, 7, inter);
        }
        for (int i = 0; i < nchildren; i++) {
            int v = 0;
            MPI_Recv(&v, 1, MPI_INT, i, 8, inter, MPI_STATUS_IGNORE);
            check(v == 1000 + i + nchildren, "value from child", v, 1000 + i + nchildren);
        }
    }
    MPI_Comm_disconnect(&inter);
}

int main(int argc, char **argv)
{
    MPI_Comm parent, inter;
    int rank, errs[3];
    MPI_Init(&argc, &argv);
    MPI_Comm_get_parent(&parent);
    if (parent != MPI_COMM_NULL)
        return child(argc, argv, parent);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    check_universe(size);

    char *args1[] = {"child", "s", "x y=z", NULL};
    MPI_Comm_spawn(argv[0], args1, 2, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter, errs);
    for (int i = 0; i < 2; i++)
        check(errs[i] == MPI_SUCCESS, "spawn errcode", errs[i], MPI_SUCCESS);
    exchange(inter, 2, rank);

    char *cmds[2] = {argv[0], argv[0]};
    char *args_a[] = {"child", "a", NULL}, *args_b[] = {"child", "b", NULL};
    char **argvs[2] = {args_a, args_b};
    int np[2] = {1, 2};
    MPI_Info infos[2] = {MPI_INFO_NULL, MPI_INFO_NULL};
    MPI_Comm_spawn_multiple(2, cmds, argvs, np, infos, 0, MPI_COMM_WORLD, &inter, errs);
    for (int i = 0; i < 3; i++)
        check(errs[i] == MPI_SUCCESS, "spawn_multiple errcode", errs[i], MPI_SUCCESS);
    exchange(inter, 3, rank);

    if (rank == 0)
        printf("parent %s\n", bad ? "WRONG" : "ok");
    MPI_Finalize();
    return bad;
}

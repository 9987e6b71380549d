/* Universe size as MPI programs see it (run as "universe N"): rank 0 of the job prints
 * "parent world SIZE universe U" (U is "unset" when the MPI_UNIVERSE_SIZE attribute is not
 * set), then the job spawns N children of this program, whose rank 0 prints the same with
 * "child". Both sides disconnect. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static void show(const char *who)
{
    int rank, size, *usize, flag;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &usize, &flag);
    if (rank != 0)
        return;
    if (flag)
        printf("%s world %d universe %d\n", who, size, *usize);
    else
        printf("%s world %d universe unset\n", who, size);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    MPI_Comm parent, inter;
    MPI_Init(&argc, &argv);
    MPI_Comm_get_parent(&parent);
    if (parent != MPI_COMM_NULL) {
        show("child");
        MPI_Comm_disconnect(&parent);
    } else {
        int n = argc > 1 ? atoi(argv[1]) : 0;
        show("parent");
        if (n > 0) {
            char *args[] = {NULL};
            MPI_Comm_spawn(argv[0], args, n, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter,
                           MPI_ERRCODES_IGNORE);
            MPI_Comm_disconnect(&inter);
        }
    }
    MPI_Finalize();
    return 0;
}

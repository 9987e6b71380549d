/* MPI_Comm_spawn of 2 children (this program again): the parents' rank 0 sends each child
 * its index; everyone prints a line, then disconnects. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    MPI_Comm parent, inter;
    int rank, size, i, x, rsize;
    MPI_Init(&argc, &argv);
    MPI_Comm_get_parent(&parent);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (parent == MPI_COMM_NULL) {
        int errs[2];
        MPI_Comm_spawn(argv[0], MPI_ARGV_NULL, 2, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter, errs);
        MPI_Comm_remote_size(inter, &rsize);
        if (rank == 0)
            for (i = 0; i < rsize; i++)
                MPI_Send(&i, 1, MPI_INT, i, 0, inter);
        MPI_Comm_disconnect(&inter);
        printf("parent %d of %d: %d children\n", rank, size, rsize);
    } else {
        MPI_Recv(&x, 1, MPI_INT, 0, 0, parent, MPI_STATUS_IGNORE);
        printf("child %d of %d got %d\n", rank, size, x);
        MPI_Comm_disconnect(&parent);
    }
    MPI_Finalize();
    return 0;
}

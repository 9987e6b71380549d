/* The last rank kills itself (SIGKILL) after MPI_Init; the others wait for a message from
 * it. With Open MPI's fault tolerance on, a rank told of the loss (a PMIx event) fails its
 * receive (MPI_ERRORS_RETURN) and prints "lost R rc error"; it then exits without
 * MPI_Finalize, whose fence would wait for the dead rank. */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rank, size, x, rc;
    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == size - 1)
        raise(SIGKILL);
    rc = MPI_Recv(&x, 1, MPI_INT, size - 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    printf("lost %d rc %s\n", rank, rc == MPI_SUCCESS ? "ok" : "error");
    fflush(stdout);
    return 0;
}

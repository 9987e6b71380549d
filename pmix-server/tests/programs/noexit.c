/* Rank 1 leaves with exit(0) after MPI_Init, without MPI_Finalize; the others finalize. */
#include <mpi.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1)
        exit(0);
    MPI_Finalize();
    return 0;
}

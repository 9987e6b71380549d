/* A token goes twice around the ring, each rank adding its rank; rank 0 checks the sum. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rank, size, token = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    for (int lap = 0; lap < 2; lap++) {
        if (rank == 0) {
            MPI_Send(&token, 1, MPI_INT, next, 0, MPI_COMM_WORLD);
            MPI_Recv(&token, 1, MPI_INT, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(&token, 1, MPI_INT, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            token += rank;
            MPI_Send(&token, 1, MPI_INT, next, 0, MPI_COMM_WORLD);
        }
    }
    int want = size * (size - 1);
    if (rank == 0) {
        printf("ring %d of %d token %d %s\n", rank, size, token, token == want ? "ok" : "WRONG");
    } else {
        printf("ring %d of %d\n", rank, size);
    }
    MPI_Finalize();
    return rank == 0 && token != want ? 4 : 0;
}

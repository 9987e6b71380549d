/* Prints "hello R of N", N checked against argv[1] when given. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc > 1 && size != atoi(argv[1])) {
        fprintf(stderr, "rank %d: size %d, expected %s\n", rank, size, argv[1]);
        return 3;
    }
    printf("hello %d of %d\n", rank, size);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}

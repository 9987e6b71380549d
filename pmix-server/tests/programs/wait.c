/* Prints "up R" once in MPI_Init's world, then waits (up to argv[1] seconds, default 60)
 * and finalizes: a job that stays up while a test does something to it. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    printf("up %d\n", rank);
    fflush(stdout);
    sleep(argc > 1 ? atoi(argv[1]) : 60);
    MPI_Finalize();
    return 0;
}

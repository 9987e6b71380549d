/* When MPI_Init returns, per rank: prints "RANK T0 T1" (CLOCK_REALTIME seconds before and
 * after MPI_Init). bench/mpi-init.sh compares process managers with it. */
#include <mpi.h>
#include <stdio.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    double t0 = now();
    MPI_Init(&argc, &argv);
    double t1 = now();
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Barrier(MPI_COMM_WORLD);
    printf("%d %.6f %.6f\n", rank, t0, t1);
    MPI_Finalize();
    return 0;
}

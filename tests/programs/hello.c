/* MPI_Init, MPI_Allreduce, MPI_Barrier, MPI_Finalize; checks the reduction. */
#include <mpi.h>
#include <stdio.h>
#ifdef SELF_CPU
#include <sys/resource.h>
#endif

int main(int argc, char **argv)
{
    int rank, size, sum = 0, appnum = -1, flag = 0, *attr;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &attr, &flag);
    if (flag)
        appnum = *attr;
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    int ok = sum == size * (size - 1) / 2;
    printf("%s rank %d of %d appnum %d sum %d %s\n", PROG, rank, size, appnum, sum,
           ok ? "ok" : "WRONG");
    MPI_Finalize();
#ifdef SELF_CPU
    /* ci/bench.sh targets: the CPU this rank used, to be told apart from the process
     * manager's */
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("cpu_us %ld\n", (long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 +
                               ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
#endif
    return ok ? 0 : 1;
}

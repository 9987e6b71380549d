/* Rank 1 fails as argv[1] says (abort N | exit N | segv | nofinalize); the other ranks
 * wait in MPI_Barrier and must be torn down by the process manager.
 * Everyone passes one barrier first: with several "nodes" on one machine, UCX connects
 * ranks through shared memory during MPI_Init, and a rank that vanished right after its
 * own MPI_Init makes a slower rank's MPI_Init fail ("Shared memory error"). */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1 && argc > 1) {
        int code = argc > 2 ? atoi(argv[2]) : 1;
        fprintf(stderr, "rank 1 fails: %s %d\n", argv[1], code);
        fflush(stderr);
        if (!strcmp(argv[1], "abort"))
            MPI_Abort(MPI_COMM_WORLD, code);
        else if (!strcmp(argv[1], "exit"))
            exit(code);
        else if (!strcmp(argv[1], "segv"))
            raise(SIGSEGV);
        else if (!strcmp(argv[1], "nofinalize"))
            exit(0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}

/* Spawns that must fail without hanging (run as "spawn_fail WHAT"): WHAT = "missing"
 * spawns a program that does not exist, "many" asks for 64 processes (more than the
 * universe of the test). The error must come back as a return code (MPI_ERRORS_RETURN);
 * the job then goes on: a barrier, and "spawn failed as expected" from rank 0. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    MPI_Comm inter;
    int rank, rc, errs[64];
    const char *what = argc > 1 ? argv[1] : "missing";
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    if (strcmp(what, "many") == 0)
        rc = MPI_Comm_spawn(argv[0], MPI_ARGV_NULL, 64, MPI_INFO_NULL, 0, MPI_COMM_WORLD,
                            &inter, errs);
    else
        rc = MPI_Comm_spawn("/nonexistent/libi-no-such-program", MPI_ARGV_NULL, 2,
                            MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter, errs);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        if (rc == MPI_SUCCESS) {
            printf("WRONG: spawn succeeded\n");
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
        printf("spawn failed as expected\n");
    }
    MPI_Finalize();
    return 0;
}

/* Rank 0 publishes a name, rank 1 looks it up after a barrier, rank 0 unpublishes it; a
 * lookup after that must fail. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    int rank, rc;
    char port[MPI_MAX_PORT_NAME] = "";
    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        rc = MPI_Publish_name("libi-svc", MPI_INFO_NULL, "libi-port-42");
        printf("publish rc=%d\n", rc);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
        rc = MPI_Lookup_name("libi-svc", MPI_INFO_NULL, port);
        printf("lookup rc=%d port=%s\n", rc, port);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        rc = MPI_Unpublish_name("libi-svc", MPI_INFO_NULL, "libi-port-42");
        printf("unpublish rc=%d\n", rc);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
        rc = MPI_Lookup_name("libi-svc", MPI_INFO_NULL, port);
        printf("second lookup %s\n", rc == MPI_SUCCESS ? "found" : "not found");
    }
    MPI_Finalize();
    return 0;
}

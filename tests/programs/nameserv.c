/* MPI name service inside one job (MPMD "-n 1 nameserv server : -n 1 nameserv client"):
 * the server opens a port and publishes it, the client looks it up and connects; they
 * exchange an int both ways over the intercommunicator, disconnect, and the server
 * unpublishes. Prints "server ok" / "client ok"; exits 1 on any wrong value.
 * Across two jobs (an outside name server): "nameserv client retry" looks the name up
 * until it is published (at most 60 s), then goes on as the client. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    char port[MPI_MAX_PORT_NAME];
    MPI_Comm inter;
    int v = 0, server = argc > 1 && strcmp(argv[1], "server") == 0;
    MPI_Init(&argc, &argv);
    if (server) {
        MPI_Open_port(MPI_INFO_NULL, port);
        MPI_Publish_name("libi-test-service", MPI_INFO_NULL, port);
        MPI_Barrier(MPI_COMM_WORLD); /* published: the client may look it up */
        MPI_Comm_accept(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter);
        MPI_Recv(&v, 1, MPI_INT, 0, 0, inter, MPI_STATUS_IGNORE);
        v += 1;
        MPI_Send(&v, 1, MPI_INT, 0, 0, inter);
        MPI_Comm_disconnect(&inter);
        MPI_Unpublish_name("libi-test-service", MPI_INFO_NULL, port);
        MPI_Close_port(port);
        printf("server ok %d\n", v);
    } else {
        MPI_Barrier(MPI_COMM_WORLD);
        if (argc > 2 && strcmp(argv[2], "retry") == 0) {
            int tries = 0;
            MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
            MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
            while (MPI_Lookup_name("libi-test-service", MPI_INFO_NULL, port) != MPI_SUCCESS
                   || port[0] == '\0') {
                if (++tries == 1200) {
                    printf("client: the name never appeared\n");
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
                usleep(50000);
            }
            MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
        } else {
            MPI_Lookup_name("libi-test-service", MPI_INFO_NULL, port);
        }
        MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter);
        v = 41;
        MPI_Send(&v, 1, MPI_INT, 0, 0, inter);
        MPI_Recv(&v, 1, MPI_INT, 0, 0, inter, MPI_STATUS_IGNORE);
        MPI_Comm_disconnect(&inter);
        printf("client %s %d\n", v == 42 ? "ok" : "WRONG", v);
        if (v != 42) {
            MPI_Finalize();
            return 1;
        }
    }
    MPI_Finalize();
    return 0;
}

/* A task manager (run as "taskmanager ROUNDS WIDTH"): in each round the manager spawns
 * WIDTH workers one at a time, each a single process of this program on MPI_COMM_SELF,
 * sends each a task (a number), collects the answers (the number doubled) and disconnects
 * from each. Then the next round. The manager prints "manager ok ROUNDS x WIDTH" when every
 * answer was right; a wrong answer prints "WRONG" and exits 1. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Comm parent;
    MPI_Init(&argc, &argv);
    MPI_Comm_get_parent(&parent);
    if (parent != MPI_COMM_NULL) {
        int task;
        MPI_Recv(&task, 1, MPI_INT, 0, 1, parent, MPI_STATUS_IGNORE);
        task *= 2;
        MPI_Send(&task, 1, MPI_INT, 0, 2, parent);
        MPI_Comm_disconnect(&parent);
        MPI_Finalize();
        return 0;
    }
    int rounds = argc > 1 ? atoi(argv[1]) : 3, width = argc > 2 ? atoi(argv[2]) : 2, bad = 0;
    if (width < 1 || width > 64)
        width = 2;
    MPI_Comm workers[64];
    for (int r = 0; r < rounds; r++) {
        for (int w = 0; w < width; w++) {
            int task = r * 100 + w, err;
            char *args[] = {"worker", NULL};
            MPI_Comm_spawn(argv[0], args, 1, MPI_INFO_NULL, 0, MPI_COMM_SELF, &workers[w], &err);
            if (err != MPI_SUCCESS) {
                printf("WRONG spawn error %d in round %d\n", err, r);
                bad = 1;
            }
            MPI_Send(&task, 1, MPI_INT, 0, 1, workers[w]);
        }
        for (int w = 0; w < width; w++) {
            int answer = -1;
            MPI_Recv(&answer, 1, MPI_INT, 0, 2, workers[w], MPI_STATUS_IGNORE);
            if (answer != 2 * (r * 100 + w)) {
                printf("WRONG answer %d in round %d from worker %d\n", answer, r, w);
                bad = 1;
            }
            MPI_Comm_disconnect(&workers[w]);
        }
    }
    if (!bad)
        printf("manager ok %d x %d\n", rounds, width);
    MPI_Finalize();
    return bad;
}

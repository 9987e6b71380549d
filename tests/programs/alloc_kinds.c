/* Prints the memory allocation kinds MPI_COMM_WORLD carries (MPI 4.1's
 * `mpi_memory_alloc_kinds` info key, which MPICH fills from what the startup mechanism
 * requested): "parent RANK KINDS". With an argument, rank 0 spawns one copy of this program,
 * which prints "child 0 KINDS". */
#include <mpi.h>
#include <stdio.h>

static void show(const char *who, MPI_Comm comm) {
    int rank, flag = 0;
    char kinds[MPI_MAX_INFO_VAL + 1] = "(none)";
    MPI_Info info;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_get_info(comm, &info);
    MPI_Info_get(info, "mpi_memory_alloc_kinds", MPI_MAX_INFO_VAL, kinds, &flag);
    MPI_Info_free(&info);
    printf("%s %d %s\n", who, rank, flag ? kinds : "(none)");
    fflush(stdout);
}

int main(int argc, char **argv) {
    MPI_Comm parent, child;
    MPI_Init(&argc, &argv);
    MPI_Comm_get_parent(&parent);
    if (parent != MPI_COMM_NULL) {
        show("child", MPI_COMM_WORLD);
        MPI_Comm_disconnect(&parent);
    } else {
        show("parent", MPI_COMM_WORLD);
        if (argc > 1) {
            MPI_Comm_spawn(argv[0], MPI_ARGV_NULL, 1, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &child,
                           MPI_ERRCODES_IGNORE);
            MPI_Comm_disconnect(&child);
        }
    }
    MPI_Finalize();
    return 0;
}

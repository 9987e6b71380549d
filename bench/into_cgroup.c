/* into_cgroup DIR PROGRAM ARGS...: move this process into the cgroup DIR (v1 or v2: writes
 * its pid to DIR/cgroup.procs), then exec PROGRAM (searched in PATH). ci/bench.sh starts each
 * launcher and each rank through it (built static, so its own start costs little): the
 * launcher, so that nothing of the harness before it is in the job's cgroup; a rank, so that
 * its CPU from its first instruction of PROGRAM's start-up on is accounted apart from the
 * process manager that started it. What the process manager spent creating the process (fork
 * or clone, the child's work before exec) stays the process manager's, and so does this
 * program's own exec and move, which ci/bench.sh measures and reports apart. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: into_cgroup DIR PROGRAM [ARGS...]\n");
        return 2;
    }
    char path[4096];
    if (snprintf(path, sizeof path, "%s/cgroup.procs", argv[1]) >= (int)sizeof path) {
        fprintf(stderr, "into_cgroup: %s: path too long\n", argv[1]);
        return 2;
    }
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "into_cgroup: %s: %s\n", path, strerror(errno));
        return 126;
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (write(fd, pid, (size_t)n) != n) {
        fprintf(stderr, "into_cgroup: %s: %s\n", path, strerror(errno));
        return 126;
    }
    close(fd);
    execvp(argv[2], argv + 2);
    fprintf(stderr, "into_cgroup: %s: %s\n", argv[2], strerror(errno));
    return 127;
}

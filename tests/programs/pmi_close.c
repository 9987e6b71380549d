/* A raw PMI-1 client (no MPI) that leaves PMI half-way: every rank sends `init` over
 * PMI_FD; rank 0 then sleeps SECS seconds and finalizes; the other ranks, by MODE (argv[1]):
 *   close     close PMI_FD and sleep SECS seconds (still running);
 *   finalize  finalize, close PMI_FD, sleep SECS seconds;
 *   crash     die of SIGSEGV (no core dump) with PMI_FD open.
 * SECS is argv[2], default 30. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static void say(int fd, const char *line)
{
    char buf[1024];
    size_t len = strlen(line);
    if (write(fd, line, len) != (ssize_t)len)
        exit(3);
    /* every reply is one short line */
    if (read(fd, buf, sizeof(buf)) <= 0)
        exit(4);
}

int main(int argc, char **argv)
{
    const char *fds = getenv("PMI_FD"), *ranks = getenv("PMI_RANK");
    if (!fds || !ranks || argc < 2)
        return 2;
    int fd = atoi(fds), rank = atoi(ranks);
    int secs = argc > 2 ? atoi(argv[2]) : 30;
    say(fd, "cmd=init pmi_version=1 pmi_subversion=1\n");
    if (rank == 0) {
        sleep(secs);
        say(fd, "cmd=finalize\n");
        return 0;
    }
    if (strcmp(argv[1], "crash") == 0) {
        struct rlimit none = {0, 0};
        setrlimit(RLIMIT_CORE, &none);
        raise(SIGSEGV);
        return 5;
    }
    if (strcmp(argv[1], "finalize") == 0)
        say(fd, "cmd=finalize\n");
    close(fd);
    sleep(secs);
    return 0;
}

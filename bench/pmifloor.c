/* pmifloor NPROC NREQ: the least CPU a PMI server can spend answering NPROC processes that
 * each make NREQ lock-step requests over a socketpair of their own (PMI-1's shape: write a
 * request line, block reading the reply). One epoll loop, one recv and one send per request,
 * no parsing, no key-value space: what the kernel charges for the wake-ups and copies alone.
 * The clients are forked (no exec) and start together once all exist; each client's
 * requests are PMI-1 `get` lines. Prints the server's own CPU from the first request to the
 * last reply (getrusage, user+sys): `server_cpu_ms X requests N`.
 *
 * ci/bench.sh targets runs `pmifloor 64 15` beside MPICH hello n=64 (whose ranks make ~14.5
 * PMI-1 requests each here) to show what share of a process manager's CPU the requests
 * themselves cost on this machine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static double cpu_ms(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

int main(int argc, char **argv)
{
    if (argc != 3 || atoi(argv[1]) < 1 || atoi(argv[2]) < 1) {
        fprintf(stderr, "usage: pmifloor NPROC NREQ\n");
        return 2;
    }
    int nproc = atoi(argv[1]), nreq = atoi(argv[2]);
    int *fds = calloc((size_t)nproc, sizeof *fds);
    int go[2];
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (!fds || ep < 0 || pipe(go) != 0) {
        perror("pmifloor");
        return 1;
    }
    for (int k = 0; k < nproc; k++) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
            perror("pmifloor: socketpair");
            return 1;
        }
        pid_t pid = fork();
        if (pid < 0) {
            perror("pmifloor: fork");
            return 1;
        }
        if (pid == 0) {
            char req[128], rep[256];
            int len = snprintf(req, sizeof req, "cmd=get kvsname=kvs_1 key=card-%d\n", k);
            close(go[1]);
            if (read(go[0], rep, 1) != 0) /* EOF: everyone exists */
                _exit(1);
            for (int i = 0; i < nreq; i++)
                if (write(sv[1], req, (size_t)len) != len || read(sv[1], rep, sizeof rep) <= 0)
                    _exit(1);
            _exit(0);
        }
        close(sv[1]);
        fds[k] = sv[0];
        struct epoll_event e = {.events = EPOLLIN, .data.u32 = (unsigned)k};
        epoll_ctl(ep, EPOLL_CTL_ADD, sv[0], &e);
    }
    static const char reply[] = "cmd=get_result rc=0 msg=success value=0123456789abcdef\n";
    long requests = 0;
    int open = nproc;
    double t0 = cpu_ms();
    close(go[1]);
    while (open > 0) {
        struct epoll_event ev[64];
        int n = epoll_wait(ep, ev, 64, -1);
        for (int i = 0; i < n; i++) {
            int fd = fds[ev[i].data.u32];
            char buf[512];
            ssize_t r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
            if (r > 0) {
                for (ssize_t j = 0; j < r; j++)
                    if (buf[j] == '\n') {
                        requests++;
                        send(fd, reply, sizeof reply - 1, MSG_NOSIGNAL);
                    }
            } else if (r == 0) {
                epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
                close(fd);
                open--;
            }
        }
    }
    double t1 = cpu_ms();
    int bad = 0, st;
    while (wait(&st) > 0)
        bad |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    printf("server_cpu_ms %.3f requests %ld\n", t1 - t0, requests);
    return bad || requests != (long)nproc * nreq;
}

/* pmfloor -n N PROGRAM [ARGS...]: the least a process manager can spend running an MPI job
 * of N ranks on one node over PMI-1, to set beside libi-mpiexec and mpiexec.hydra in
 * bench/cpu-ab.sh and ci/bench.sh. One process, one epoll loop, nothing a real process
 * manager needs beyond that: each rank posix_spawn'ed (vfork-style) with a socketpair
 * (PMI_FD) and its stdout and stderr on pipes of their own; the pipes copied to our stdout
 * and stderr; the PMI-1 requests MPICH makes answered from fixed text and one flat
 * key-value table (init, get_maxes, get_appnum, get_my_kvsname, get_universe_size, put,
 * get, barrier_in, finalize); every rank reaped at the end. No tree, no agents, no
 * authentication, no signal handling, no bounds a hostile rank would need, and no error
 * recovery: a rank that breaks the protocol ends the run (exit 1). Not a launcher: a
 * measuring stick.
 *
 * The node map it gives is (vector,(0,1,N)): every rank on this node. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

struct rank {
    int pmi;          /* our end of the PMI socketpair, -1 once closed */
    char buf[16384];  /* the request being read */
    size_t len;
};

struct kv {
    char *key, *val;
};

static struct rank *ranks;
static int n_ranks, in_barrier;
static struct kv *kvs;
static size_t n_kvs, cap_kvs;

static void die(const char *what)
{
    fprintf(stderr, "pmfloor: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void reply(int r, const char *text)
{
    size_t n = strlen(text);
    if (send(ranks[r].pmi, text, n, MSG_NOSIGNAL) != (ssize_t)n)
        die("send");
}

/* The value of `key=` in a request line (NUL-terminated at the next space), or NULL. */
static char *field(char *line, const char *key)
{
    size_t k = strlen(key);
    for (char *p = line; (p = strstr(p, key)) != NULL; p += k) {
        if ((p == line || p[-1] == ' ') && p[k] == '=') {
            char *v = p + k + 1, *e = strchr(v, ' ');
            if (e)
                *e = '\0';
            return v;
        }
    }
    return NULL;
}

static void request(int r, char *line)
{
    char out[2048];
    if (strncmp(line, "cmd=init ", 9) == 0) {
        reply(r, "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n");
    } else if (strcmp(line, "cmd=get_maxes") == 0) {
        reply(r, "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n");
    } else if (strcmp(line, "cmd=get_appnum") == 0) {
        reply(r, "cmd=appnum appnum=0\n");
    } else if (strcmp(line, "cmd=get_my_kvsname") == 0) {
        reply(r, "cmd=my_kvsname kvsname=kvs_floor\n");
    } else if (strcmp(line, "cmd=get_universe_size") == 0) {
        snprintf(out, sizeof out, "cmd=universe_size size=%d\n", n_ranks);
        reply(r, out);
    } else if (strncmp(line, "cmd=put ", 8) == 0) {
        char *v = field(line, "value"), *k = field(line, "key");
        if (!k || !v)
            die("put without key or value");
        if (n_kvs == cap_kvs) {
            cap_kvs = cap_kvs ? 2 * cap_kvs : 256;
            kvs = realloc(kvs, cap_kvs * sizeof *kvs);
            if (!kvs)
                die("realloc");
        }
        kvs[n_kvs].key = strdup(k);
        kvs[n_kvs].val = strdup(v);
        n_kvs++;
        reply(r, "cmd=put_result rc=0\n");
    } else if (strncmp(line, "cmd=get ", 8) == 0) {
        char *k = field(line, "key");
        if (!k)
            die("get without key");
        const char *v = NULL;
        if (strcmp(k, "PMI_process_mapping") == 0) {
            snprintf(out, sizeof out, "cmd=get_result rc=0 value=(vector,(0,1,%d))\n", n_ranks);
            reply(r, out);
            return;
        }
        for (size_t i = n_kvs; i-- > 0;)
            if (strcmp(kvs[i].key, k) == 0) {
                v = kvs[i].val;
                break;
            }
        if (v)
            snprintf(out, sizeof out, "cmd=get_result rc=0 value=%s\n", v);
        else
            snprintf(out, sizeof out, "cmd=get_result rc=-1 value=unknown\n");
        reply(r, out);
    } else if (strcmp(line, "cmd=barrier_in") == 0) {
        if (++in_barrier == n_ranks) {
            in_barrier = 0;
            for (int i = 0; i < n_ranks; i++)
                if (ranks[i].pmi >= 0)
                    reply(i, "cmd=barrier_out\n");
        }
    } else if (strcmp(line, "cmd=finalize") == 0) {
        reply(r, "cmd=finalize_ack\n");
    } else {
        fprintf(stderr, "pmfloor: rank %d: request not served: %s\n", r, line);
        exit(1);
    }
}

/* epoll data: the index into fds[], rank * 3 + (0 PMI socket, 1 stdout, 2 stderr) */
int main(int argc, char **argv)
{
    if (argc < 4 || strcmp(argv[1], "-n") != 0 || atoi(argv[2]) < 1) {
        fprintf(stderr, "usage: pmfloor -n N PROGRAM [ARGS...]\n");
        return 2;
    }
    n_ranks = atoi(argv[2]);
    ranks = calloc((size_t)n_ranks, sizeof *ranks);
    int *fds = calloc((size_t)n_ranks * 3, sizeof *fds);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (!ranks || !fds || ep < 0)
        die("start");
    size_t n_env = 0;
    while (environ[n_env])
        n_env++;
    char **env = calloc(n_env + 4, sizeof *env);
    if (!env)
        die("calloc");
    memcpy(env, environ, n_env * sizeof *env);
    int open_fds = 0;
    for (int i = 0; i < n_ranks; i++) {
        int sp[2], out[2], err[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) || pipe2(out, O_CLOEXEC) ||
            pipe2(err, O_CLOEXEC))
            die("socketpair/pipe");
        char rank_s[32], size_s[32];
        snprintf(rank_s, sizeof rank_s, "PMI_RANK=%d", i);
        snprintf(size_s, sizeof size_s, "PMI_SIZE=%d", n_ranks);
        env[n_env] = "PMI_FD=3";
        env[n_env + 1] = rank_s;
        env[n_env + 2] = size_s;
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, out[1], 1);
        posix_spawn_file_actions_adddup2(&fa, err[1], 2);
        posix_spawn_file_actions_adddup2(&fa, sp[1], 3);
        pid_t pid;
        errno = posix_spawnp(&pid, argv[3], &fa, NULL, argv + 3, env);
        if (errno)
            die(argv[3]);
        posix_spawn_file_actions_destroy(&fa);
        close(sp[1]);
        close(out[1]);
        close(err[1]);
        ranks[i].pmi = sp[0];
        fds[i * 3] = sp[0];
        fds[i * 3 + 1] = out[0];
        fds[i * 3 + 2] = err[0];
        for (int w = 0; w < 3; w++) {
            struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)i * 3 + w};
            if (epoll_ctl(ep, EPOLL_CTL_ADD, fds[i * 3 + w], &ev))
                die("epoll_ctl");
            open_fds++;
        }
    }
    char io[65536];
    struct epoll_event evs[64];
    while (open_fds > 0) {
        int k = epoll_wait(ep, evs, 64, -1);
        if (k < 0 && errno != EINTR)
            die("epoll_wait");
        for (int e = 0; e < k; e++) {
            int x = (int)evs[e].data.u64, r = x / 3, w = x % 3;
            if (w != 0) {
                /* output: copied as it comes (to the same stream) */
                ssize_t got = read(fds[x], io, sizeof io);
                if (got > 0) {
                    if (write(w, io, (size_t)got) != got)
                        die("write");
                } else {
                    close(fds[x]);
                    open_fds--;
                }
                continue;
            }
            struct rank *rk = &ranks[r];
            ssize_t got = recv(rk->pmi, rk->buf + rk->len, sizeof rk->buf - 1 - rk->len, 0);
            if (got <= 0) {
                close(rk->pmi);
                rk->pmi = -1;
                open_fds--;
                continue;
            }
            rk->len += (size_t)got;
            char *start = rk->buf, *nl;
            while ((nl = memchr(start, '\n', rk->len - (size_t)(start - rk->buf)))) {
                *nl = '\0';
                request(r, start);
                start = nl + 1;
            }
            rk->len -= (size_t)(start - rk->buf);
            memmove(rk->buf, start, rk->len);
            if (rk->len == sizeof rk->buf - 1) {
                fprintf(stderr, "pmfloor: rank %d: request too long\n", r);
                return 1;
            }
        }
    }
    int st, rc = 0;
    while (wait(&st) > 0)
        if (!WIFEXITED(st) || WEXITSTATUS(st))
            rc = 1;
    return rc;
}

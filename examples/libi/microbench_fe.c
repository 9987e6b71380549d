/* The LIBI paper's micro benchmark, front end: launch one session of members over the
 * hosts given, then print the master's timings.
 *
 *   microbench_fe MEMBER HOSTS [ITERATIONS]      HOSTS: host:n[,host:n...]
 *
 * Launch options (launcher, tree shape, ...) come from LIBI_MPIEXEC_ARGS. Prints one line:
 * launch_s=... finalize_s=... members=N ... barrier_us=... bcast_gather_us=...
 * scatter_gather_us=... (finalize_s: LIBI_fe_finalize, called once the master's timings
 * arrived, until it returned: every member, agent and libi-mpiexec of the session gone). */
#include "hostlist.h"
#include <libi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int die(const char *what, int rc) {
    fprintf(stderr, "microbench_fe: %s: %s: %s\n", what, LIBI_rcName(rc), LIBI_errorString());
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: microbench_fe MEMBER host:n[,host:n...] [ITERATIONS]\n");
        return 2;
    }
    host_dist_t *hosts = parse_hosts(argv[2]);
    const char *iters = argc > 3 ? argv[3] : "100";
    const char *margv[] = {iters, NULL};

    int rc = LIBI_fe_init(LIBI_VERSION);
    if (rc != LIBI_OK) return die("LIBI_fe_init", rc);
    libi_sess_handle_t s;
    if ((rc = LIBI_fe_createSession(&s)) != LIBI_OK) return die("LIBI_fe_createSession", rc);
    proc_dist_req_t d = {s, argv[1], margv, hosts, NULL};
    double t0 = now();
    if ((rc = LIBI_fe_launch(&d, 1)) != LIBI_OK) return die("LIBI_fe_launch", rc);
    double launch = now() - t0;
    void *msg = NULL;
    int len = 0;
    if ((rc = LIBI_fe_recvUsrData(s, &msg, &len)) != LIBI_OK) return die("LIBI_fe_recvUsrData", rc);
    t0 = now();
    if ((rc = LIBI_fe_finalize()) != LIBI_OK) return die("LIBI_fe_finalize", rc);
    double finalize = now() - t0;
    printf("launch_s=%.4f finalize_s=%.4f %.*s\n", launch, finalize, len, (char *)msg);
    free(msg);
    return 0;
}

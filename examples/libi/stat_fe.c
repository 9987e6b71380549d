/* A STAT-like stack trace tool, front end: attaches to a running libi-mpiexec job (one
 * daemon per host of the job, LIBI_fe_attachAndLaunch), lets the daemons trace every rank
 * with gdb and merge the stacks into a call-prefix tree, and prints the tree the master
 * sends: each line a function and the ranks whose stacks pass through it.
 *
 *   stat_fe [-d DAEMON] [-t SECONDS] [-j N] [-g GDB] [-r RANK,...] [-m] JOB_PID
 *     -d   the daemon (default: stat_daemon next to this program)
 *     -t   how long gdb may take for one rank before it is ended (default 20)
 *     -j   how many gdb run at once on one host (default 4)
 *     -g   the debugger the daemons run (default: gdb on their PATH)
 *     -r   trace only these ranks (daemons on their hosts only)
 *     -m   attach through MPIR (JOB_PID any MPIR starter: mpiexec.hydra, srun) rather than
 *          libi-mpiexec's control socket
 *
 * Output:
 *   stat: 4 daemons, 8 ranks [0-7], 8 traced [0-7], 0 not traced
 *   main [0-7]
 *     work [0-7]
 *       wait_here [0,2,4,6]
 *         __libc_pause [0,2,4,6]
 *       odd_path [1,3,5,7]
 *         __libc_pause [1,3,5,7]
 *   not traced [5]: why
 * and on stderr the time from the attach call to its return. */
#include <libi.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int die(const char *what, int rc) {
    fprintf(stderr, "stat_fe: %s: %s: %s\n", what, LIBI_rcName(rc), LIBI_errorString());
    LIBI_fe_finalize();
    return 1;
}

static int usage(void) {
    fprintf(stderr, "usage: stat_fe [-d DAEMON] [-t SECONDS] [-j N] [-g GDB] [-r RANK,...] [-m] JOB_PID\n");
    return 2;
}

int main(int argc, char **argv) {
    static char daemon[PATH_MAX];
    const char *timeout = "20", *jobs = "4", *gdb = "gdb", *ranks_arg = NULL;
    int how = LIBI_ATTACH_LIBI, opt;
    daemon[0] = 0;
    while ((opt = getopt(argc, argv, "d:t:j:g:r:m")) != -1) {
        if (opt == 'd') snprintf(daemon, sizeof daemon, "%s", optarg);
        else if (opt == 't') timeout = optarg;
        else if (opt == 'j') jobs = optarg;
        else if (opt == 'g') gdb = optarg;
        else if (opt == 'r') ranks_arg = optarg;
        else if (opt == 'm') how = LIBI_ATTACH_MPIR;
        else return usage();
    }
    if (optind + 1 != argc) return usage();
    int job = atoi(argv[optind]);
    if (!daemon[0]) { /* stat_daemon next to this program */
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0) return usage();
        self[n] = 0;
        snprintf(daemon, sizeof daemon, "%s/stat_daemon", dirname(self));
    }
    int *ranks = NULL, nranks = 0;
    if (ranks_arg) {
        ranks = calloc(strlen(ranks_arg) + 1, sizeof *ranks);
        char *list = strdup(ranks_arg);
        for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) ranks[nranks++] = atoi(tok);
    }
    const char *dargv[] = {"-t", timeout, "-j", jobs, "-g", gdb, NULL};

    int rc = LIBI_fe_init(LIBI_VERSION);
    if (rc != LIBI_OK) return die("LIBI_fe_init", rc);
    libi_sess_handle_t s;
    if ((rc = LIBI_fe_createSession(&s)) != LIBI_OK) return die("LIBI_fe_createSession", rc);
    libi_attach_req_t req = {s, job, how, ranks, nranks, daemon, dargv, NULL};
    double t0 = now();
    if ((rc = LIBI_fe_attachAndLaunch(&req)) != LIBI_OK) return die("LIBI_fe_attachAndLaunch", rc);
    double attach = now() - t0;
    unsigned hosts = 0;
    LIBI_fe_getHostlistSize(s, &hosts);
    fprintf(stderr, "stat_fe: attached to job %d: %u daemons in %.3f s\n", job, hosts, attach);
    void *msg = NULL;
    int len = 0;
    if ((rc = LIBI_fe_recvUsrData(s, &msg, &len)) != LIBI_OK) return die("LIBI_fe_recvUsrData", rc);
    fwrite(msg, 1, (size_t)len, stdout);
    fflush(stdout);
    free(msg);
    free(ranks);
    if ((rc = LIBI_fe_finalize()) != LIBI_OK) return die("LIBI_fe_finalize", rc);
    return 0;
}

/* Attach-and-launch time (bench/libi-attach.sh): the front end attaches to a running
 * libi-mpiexec job REPS times (LIBI_fe_attachAndLaunch: the job's table and launcher from
 * its control socket, one daemon per host of the job, each given its host's ranks in
 * LIBI_init), timing each call from its start to its return; the daemons (this program
 * again) count their host's ranks and the master reports the sum; the session is then ended
 * (LIBI_fe_endSession, timed too).
 *
 *   libi_attach JOB_PID [REPS]      prints one line per attach:
 *                                   attach_s=... end_s=... daemons=N ranks=R
 *   libi_attach --daemon            (the daemon, started by the front end) */
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
    fprintf(stderr, "libi_attach: %s: %s: %s\n", what, LIBI_rcName(rc), LIBI_errorString());
    return 1;
}

static int daemon_main(int argc, char **argv) {
    int rc = LIBI_init(LIBI_VERSION, &argc, &argv);
    if (rc != LIBI_OK) return die("LIBI_init", rc);
    libi_proc_desc_t *t = NULL;
    int n = 0, size;
    if ((rc = LIBI_getMyProctab(&t, &n)) != LIBI_OK) return die("LIBI_getMyProctab", rc);
    free(t);
    LIBI_getSize(&size);
    int master = LIBI_amMaster() == LIBI_YES;
    int *all = master ? calloc((size_t)size, sizeof(int)) : NULL;
    if ((rc = LIBI_gather(&n, sizeof n, all)) != LIBI_OK) return die("LIBI_gather", rc);
    if (master) {
        int ranks = 0;
        for (int i = 0; i < size; i++) ranks += all[i];
        char line[64];
        int k = snprintf(line, sizeof line, "daemons=%d ranks=%d", size, ranks);
        if ((rc = LIBI_sendUsrData(line, k)) != LIBI_OK) return die("LIBI_sendUsrData", rc);
    }
    free(all);
    return LIBI_finalize() == LIBI_OK ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--daemon") == 0) return daemon_main(argc, argv);
    if (argc < 2) {
        fprintf(stderr, "usage: libi_attach JOB_PID [REPS]\n");
        return 2;
    }
    int job = atoi(argv[1]), reps = argc > 2 ? atoi(argv[2]) : 5;
    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) return 2;
    self[len] = 0;
    const char *dargv[] = {"--daemon", NULL};
    int rc = LIBI_fe_init(LIBI_VERSION);
    if (rc != LIBI_OK) return die("LIBI_fe_init", rc);
    for (int r = 0; r < reps; r++) {
        libi_sess_handle_t s;
        if ((rc = LIBI_fe_createSession(&s)) != LIBI_OK) return die("LIBI_fe_createSession", rc);
        libi_attach_req_t req = {s, job, LIBI_ATTACH_LIBI, NULL, 0, self, dargv, NULL};
        double t0 = now();
        if ((rc = LIBI_fe_attachAndLaunch(&req)) != LIBI_OK) return die("LIBI_fe_attachAndLaunch", rc);
        double attach = now() - t0;
        void *m = NULL;
        int n = 0;
        if ((rc = LIBI_fe_recvUsrData(s, &m, &n)) != LIBI_OK) return die("LIBI_fe_recvUsrData", rc);
        t0 = now();
        if ((rc = LIBI_fe_endSession(s)) != LIBI_OK) return die("LIBI_fe_endSession", rc);
        double end = now() - t0;
        printf("attach_s=%.4f end_s=%.4f %.*s\n", attach, end, n, (char *)m);
        fflush(stdout);
        free(m);
    }
    return LIBI_fe_finalize() == LIBI_OK ? 0 : 1;
}

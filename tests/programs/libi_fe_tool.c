/* A LIBI front end for tests/session_fe.rs: the front end's guarantees, one scenario per
 * run. Prints one line per check: <name> <rc name> <message or data>.
 *
 *   libi_fe_tool MEMBER drain HOSTS     the master sends 100 messages and finalizes before
 *                                       we receive (2 s later): all 100, in order, then
 *                                       LIBI_ESESS
 *   libi_fe_tool MEMBER exitinit HOSTS  8 sessions in one launch whose last member exits
 *                                       right after LIBI_init: LIBI_OK, then each session's
 *                                       failure
 *   libi_fe_tool MEMBER handles HOSTS   handles of a finalized front end name no session of
 *                                       the next
 *   libi_fe_tool MEMBER fecall HOSTS    a member's front-end calls
 *   libi_fe_tool MEMBER wake HOSTS      finalize while the master waits for a message
 *   libi_fe_tool MEMBER attach PID libi|mpir [RANK...]
 *                                       one daemon per host of the running job PID (of
 *                                       those ranks), each checks its host's part of the
 *                                       table (LIBI_getMyProctab)
 *   libi_fe_tool MEMBER timed HOSTS     timed and non-blocking receives
 *   libi_fe_tool MEMBER poll HOSTS      LIBI_fe_poll over three sessions, and the event
 *                                       descriptor in poll(2)
 *   libi_fe_tool MEMBER end HOSTS       end one session, kill another, a third fails on its
 *                                       own: the status callback and each status
 *   libi_fe_tool MEMBER output HOSTS DIR   daemons' output into files (labelled) and into
 *                                       descriptors of ours
 *   libi_fe_tool MEMBER mthreads HOSTS  the master receives in one thread, sends in another
 * HOSTS: host:n[,host:n...] */
#include "../../examples/libi/hostlist.h"
#include <fcntl.h>
#include <libi.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void report(const char *name, int rc) {
    printf("%s %s %s\n", name, LIBI_rcName(rc), rc == LIBI_OK ? "" : LIBI_errorString());
    fflush(stdout);
}

static const char *echo_argv[] = {"echo", NULL};

/* The status callback's reports, printed at the end in session order. */
static pthread_mutex_t cb_lock = PTHREAD_MUTEX_INITIALIZER;
static char cb_lines[8][256];
static int cb_count;
static libi_sess_handle_t cb_base;

static void on_status(libi_sess_handle_t s, int status, const char *message, void *arg) {
    pthread_mutex_lock(&cb_lock);
    if (cb_count < 8)
        snprintf(cb_lines[cb_count++], sizeof cb_lines[0], "callback s%d %s %s %s", s - cb_base,
                 status == LIBI_STATUS_ENDED ? "ENDED" : status == LIBI_STATUS_FAILED ? "FAILED" : "OTHER",
                 message, (const char *)arg);
    pthread_mutex_unlock(&cb_lock);
}

static int fd_readable(int fd, int timeout_ms) {
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

static void print_file(const char *name, const char *path) {
    char line[256];
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f)) printf("%s %s", name, line);
    if (f) fclose(f);
}

static int launch1(libi_sess_handle_t *s, const char *member, const char **argv, host_dist_t *hd) {
    LIBI_fe_createSession(s);
    proc_dist_req_t d = {*s, member, argv, hd, NULL};
    return LIBI_fe_launch(&d, 1);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: libi_fe_tool MEMBER SCENARIO HOSTS\n");
        return 2;
    }
    const char *member = argv[1], *what = argv[2];
    host_dist_t *hd = strcmp(what, "attach") == 0 ? NULL : parse_hosts(argv[3]);
    (void)print_file;
    (void)fd_readable;
    report("init", LIBI_fe_init(LIBI_VERSION));
    libi_sess_handle_t s;

    if (strcmp(what, "drain") == 0) {
        const char *burst[] = {"burst", "100", "1024", NULL};
        report("launch", launch1(&s, member, burst, hd));
        sleep(2);
        int got = 0, inorder = 0, rc;
        for (;;) {
            void *m = NULL;
            int len = 0;
            if ((rc = LIBI_fe_recvUsrData(s, &m, &len)) != LIBI_OK) break;
            if (len == 1024 && atoi(m) == got && ((char *)m)[len - 1] == 'a' + got % 26) inorder++;
            got++;
            free(m);
        }
        printf("drain received=%d inorder=%d end=%s\n", got, inorder, LIBI_rcName(rc));
    } else if (strcmp(what, "exitinit") == 0) {
        const char *ex[] = {"exitinit", NULL};
        libi_sess_handle_t ss[8];
        proc_dist_req_t d[8];
        for (int i = 0; i < 8; i++) {
            LIBI_fe_createSession(&ss[i]);
            d[i] = (proc_dist_req_t){ss[i], member, ex, hd, NULL};
        }
        report("launch", LIBI_fe_launch(d, 8));
        for (int i = 0; i < 8; i++) {
            void *m = NULL;
            int len = 0;
            char name[16];
            snprintf(name, sizeof name, "recv-%d", i);
            report(name, LIBI_fe_recvUsrData(ss[i], &m, &len));
        }
    } else if (strcmp(what, "handles") == 0) {
        libi_sess_handle_t a, b;
        LIBI_fe_createSession(&a);
        report("finalize-1", LIBI_fe_finalize());
        report("init-2", LIBI_fe_init(LIBI_VERSION));
        LIBI_fe_createSession(&b);
        printf("handles %s\n", a == b ? "same" : "distinct");
        report("stale", LIBI_fe_sendUsrData(a, "x", 1));
        unsigned n = 0;
        report("stale-hosts", LIBI_fe_getHostlistSize(a, &n));
    } else if (strcmp(what, "fecall") == 0) {
        const char *fc[] = {"fecall", NULL};
        report("launch", launch1(&s, member, fc, hd));
        void *m = NULL;
        int len = 0;
        int rc = LIBI_fe_recvUsrData(s, &m, &len);
        if (rc == LIBI_OK) printf("member %.*s\n", len, (char *)m);
        else report("recv", rc);
        free(m);
    } else if (strcmp(what, "attach") == 0 && argc > 4) {
        int ranks[64], n = 0;
        for (int i = 5; i < argc && n < 64; i++) ranks[n++] = atoi(argv[i]);
        const char *pt[] = {"proctab", NULL};
        LIBI_fe_createSession(&s);
        libi_attach_req_t r = {s, atoi(argv[3]), strcmp(argv[4], "mpir") == 0 ? LIBI_ATTACH_MPIR : LIBI_ATTACH_LIBI,
                               n ? ranks : NULL, n, member, pt, NULL};
        report("attach", LIBI_fe_attachAndLaunch(&r));
        void *m = NULL;
        int len = 0;
        int rc = LIBI_fe_recvUsrData(s, &m, &len);
        if (rc == LIBI_OK) printf("reply %.*s\n", len, (char *)m);
        else report("recv", rc);
        free(m);
        libi_proc_desc_t *t = NULL;
        rc = LIBI_fe_getMPIRProcTable(atoi(argv[3]), &t, &n);
        if (rc == LIBI_OK) printf("mpir-size %d\n", n);
        else report("mpir", rc);
        free(t);
    } else if (strcmp(what, "timed") == 0) {
        report("launch", launch1(&s, member, echo_argv, hd));
        void *m = NULL;
        int len = 0;
        report("nonblocking", LIBI_fe_recvUsrDataTimeout(s, &m, &len, 0));
        report("timed", LIBI_fe_recvUsrDataTimeout(s, &m, &len, 300));
        LIBI_fe_sendUsrData(s, "t", 1);
        int rc = LIBI_fe_recvUsrDataTimeout(s, &m, &len, -1);
        printf("unlimited %s %.*s\n", LIBI_rcName(rc), rc == LIBI_OK ? len : 0, rc == LIBI_OK ? (char *)m : "");
        free(m);
        report("bad-session", LIBI_fe_recvUsrDataTimeout(12345, &m, &len, 0));
    } else if (strcmp(what, "poll") == 0) {
        libi_sess_handle_t ss[3];
        proc_dist_req_t d[3];
        for (int i = 0; i < 3; i++) {
            LIBI_fe_createSession(&ss[i]);
            d[i] = (proc_dist_req_t){ss[i], member, echo_argv, hd, NULL};
        }
        report("launch", LIBI_fe_launch(d, 3));
        int fd = -1, n = -1;
        report("eventfd", LIBI_fe_getEventFd(&fd));
        libi_poll_t p[3];
        for (int i = 0; i < 3; i++) p[i] = (libi_poll_t){ss[i], -1};
        LIBI_fe_poll(p, 3, 0, &n);
        printf("idle nready=%d fd=%s\n", n, fd_readable(fd, 0) ? "readable" : "quiet");
        LIBI_fe_sendUsrData(ss[1], "p1", 2);
        int woke = fd_readable(fd, -1);
        LIBI_fe_poll(p, 3, -1, &n);
        printf("one nready=%d revents=%d,%d,%d fd=%s\n", n, p[0].revents, p[1].revents, p[2].revents,
               woke ? "readable" : "quiet");
        void *m = NULL;
        int len = 0;
        LIBI_fe_recvUsrData(ss[1], &m, &len);
        free(m);
        LIBI_fe_poll(p, 3, 0, &n);
        printf("drained nready=%d fd=%s\n", n, fd_readable(fd, 0) ? "readable" : "quiet");
        report("killed", LIBI_fe_killSession(ss[2]));
        LIBI_fe_poll(p, 3, -1, &n);
        printf("ended nready=%d revents=%d,%d,%d fd=%s\n", n, p[0].revents, p[1].revents, p[2].revents,
               fd_readable(fd, 0) ? "readable" : "quiet");
    } else if (strcmp(what, "end") == 0) {
        const char *ex[] = {"exitinit", NULL};
        libi_sess_handle_t ss[4];
        proc_dist_req_t d[4];
        for (int i = 0; i < 4; i++) {
            LIBI_fe_createSession(&ss[i]);
            d[i] = (proc_dist_req_t){ss[i], member, i == 2 ? ex : echo_argv, hd, NULL};
        }
        cb_base = ss[0];
        report("callback", LIBI_fe_setStatusCallback(on_status, "arg"));
        report("launch", LIBI_fe_launch(d, 4));
        report("end-0", LIBI_fe_endSession(ss[0]));
        report("kill-1", LIBI_fe_killSession(ss[1]));
        int st = -1;
        while (LIBI_fe_getSessionStatus(ss[2], &st) == LIBI_OK && st != LIBI_STATUS_FAILED) usleep(10000);
        void *m = NULL;
        int len = 0;
        report("recv-0", LIBI_fe_recvUsrData(ss[0], &m, &len));
        report("send-1", LIBI_fe_sendUsrData(ss[1], "x", 1));
        report("end-2", LIBI_fe_endSession(ss[2]));
        LIBI_fe_sendUsrData(ss[3], "alive", 5);
        int rc = LIBI_fe_recvUsrData(ss[3], &m, &len);
        printf("survivor %s %.*s\n", LIBI_rcName(rc), rc == LIBI_OK ? len : 0, rc == LIBI_OK ? (char *)m : "");
        free(m);
        for (int i = 0; i < 4; i++) {
            LIBI_fe_getSessionStatus(ss[i], &st);
            printf("status-%d %d\n", i, st);
        }
        libi_sess_handle_t unlaunched;
        LIBI_fe_createSession(&unlaunched);
        report("end-unlaunched", LIBI_fe_endSession(unlaunched));
        proc_dist_req_t du = {unlaunched, member, echo_argv, hd, NULL};
        report("launch-ended", LIBI_fe_launch(&du, 1));
        report("finalize-early", LIBI_fe_finalize());
        pthread_mutex_lock(&cb_lock);
        for (int i = 0; i < cb_count; i++) printf("%s\n", cb_lines[i]);
        pthread_mutex_unlock(&cb_lock);
        return 0;
    } else if (strcmp(what, "output") == 0 && argc > 4) {
        const char *pr[] = {"print", NULL};
        char out0[512], err0[512], out1[512], err1[512];
        snprintf(out0, sizeof out0, "%s/out0", argv[4]);
        snprintf(err0, sizeof err0, "%s/err0", argv[4]);
        snprintf(out1, sizeof out1, "%s/out1", argv[4]);
        snprintf(err1, sizeof err1, "%s/err1", argv[4]);
        libi_sess_handle_t ss[2];
        LIBI_fe_createSession(&ss[0]);
        LIBI_fe_createSession(&ss[1]);
        report("files", LIBI_fe_setSessionOutputFiles(ss[0], out0, err0, LIBI_OUTPUT_LABEL));
        int o = open(out1, O_WRONLY | O_CREAT | O_TRUNC, 0600), e = open(err1, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        report("fds", LIBI_fe_setSessionOutput(ss[1], o, e, 0));
        close(o);
        close(e);
        proc_dist_req_t d[2] = {{ss[0], member, pr, hd, NULL}, {ss[1], member, pr, hd, NULL}};
        report("launch", LIBI_fe_launch(d, 2));
        report("after-launch", LIBI_fe_setSessionOutput(ss[0], 1, 2, 0));
        report("finalize", LIBI_fe_finalize());
        print_file("file-out0", out0);
        print_file("file-err0", err0);
        print_file("file-out1", out1);
        print_file("file-err1", err1);
        return 0;
    } else if (strcmp(what, "mthreads") == 0) {
        const char *mt[] = {"mthreads", NULL};
        report("launch", launch1(&s, member, mt, hd));
        void *m = NULL;
        int len = 0;
        int rc = LIBI_fe_recvUsrData(s, &m, &len);
        printf("asked %s %.*s\n", LIBI_rcName(rc), rc == LIBI_OK ? len : 0, rc == LIBI_OK ? (char *)m : "");
        free(m);
        LIBI_fe_sendUsrData(s, "answer", 6);
        rc = LIBI_fe_recvUsrData(s, &m, &len);
        printf("master %s %.*s\n", LIBI_rcName(rc), rc == LIBI_OK ? len : 0, rc == LIBI_OK ? (char *)m : "");
        free(m);
    } else if (strcmp(what, "wake") == 0) {
        const char *w[] = {"wait", NULL};
        report("launch", launch1(&s, member, w, hd));
    }
    report("finalize", LIBI_fe_finalize());
    return 0;
}

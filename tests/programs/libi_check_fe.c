/* A LIBI front end for the tests (tests/session.rs). Prints one line per check:
 *   <name> <rc name> <message or data>
 *
 *   libi_check_fe MEMBER sessions HOSTS      three sessions in one launch, ping each
 *   libi_check_fe MEMBER images HOSTS_A HOSTS_B   two images in one session
 *   libi_check_fe MEMBER crash HOSTS         session 0's rank 1 dies; session 1 goes on
 *   libi_check_fe MEMBER killagent HOSTS     session 0 loses an agent; session 1 goes on
 *   libi_check_fe MEMBER bad HOSTS           bad host distributions and misused calls
 *   libi_check_fe MEMBER calls HOSTS         the members check misused calls
 *   libi_check_fe MEMBER attach PID          daemons next to the running job PID
 *   libi_check_fe MEMBER flood HOSTS         the master sends 200 MiB the front end does
 *                                            not read for 2 s: our memory stays flat
 *   libi_check_fe MEMBER crashsend HOSTS     the session fails (rank 1 dies) before the
 *                                            front end's first call, a send
 *   libi_check_fe MEMBER orphan HOSTS        launch, then exit without LIBI_fe_finalize
 *                                            (the members wait for a message)
 *   libi_check_fe MEMBER killed HOSTS        launch, then die of SIGKILL
 * HOSTS: host:n[,host:n...] */
#include "../../examples/libi/hostlist.h"
#include <libi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void report(const char *name, int rc) {
    printf("%s %s %s\n", name, LIBI_rcName(rc), rc == LIBI_OK ? "" : LIBI_errorString());
    fflush(stdout);
}

static int ping(libi_sess_handle_t s, const char *text) {
    int rc = LIBI_fe_sendUsrData(s, text, (int)strlen(text));
    if (rc != LIBI_OK) {
        report("send", rc);
        return rc;
    }
    void *m = NULL;
    int len = 0;
    rc = LIBI_fe_recvUsrData(s, &m, &len);
    if (rc == LIBI_OK) {
        printf("reply %s %.*s\n", text, len, (char *)m);
        fflush(stdout);
        free(m);
    } else {
        report("recv", rc);
    }
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: libi_check_fe MEMBER SCENARIO HOSTS [HOSTS]\n");
        return 2;
    }
    const char *member = argv[1], *what = argv[2];
    libi_sess_handle_t s0 = -1;
    report("createSession-before-init", LIBI_fe_createSession(&s0));
    report("init", LIBI_fe_init(LIBI_VERSION));
    report("init-again", LIBI_fe_init(LIBI_VERSION));
    host_dist_t *hd = parse_hosts(argv[3]);
    const char *echo[] = {"echo", "A", NULL}, *echo_b[] = {"echo", "B", NULL};

    if (strcmp(what, "sessions") == 0) {
        libi_sess_handle_t s[3];
        proc_dist_req_t d[3];
        for (int i = 0; i < 3; i++) {
            LIBI_fe_createSession(&s[i]);
            d[i] = (proc_dist_req_t){s[i], member, echo, hd, NULL};
        }
        report("launch", LIBI_fe_launch(d, 3));
        report("launch-again", LIBI_fe_launch(d, 1));
        for (int i = 2; i >= 0; i--) {
            char t[32];
            snprintf(t, sizeof t, "ping-%d", i);
            ping(s[i], t);
        }
    } else if (strcmp(what, "images") == 0) {
        libi_sess_handle_t s;
        LIBI_fe_createSession(&s);
        proc_dist_req_t d[2] = {{s, member, echo, hd, NULL}, {s, member, echo_b, parse_hosts(argv[4]), NULL}};
        report("launch", LIBI_fe_launch(d, 2));
        ping(s, "ping-images");
    } else if (strcmp(what, "crash") == 0 || strcmp(what, "killagent") == 0) {
        const char *bad[] = {what, NULL};
        libi_sess_handle_t s[2];
        LIBI_fe_createSession(&s[0]);
        LIBI_fe_createSession(&s[1]);
        proc_dist_req_t d[2] = {{s[0], member, bad, hd, NULL}, {s[1], member, echo, hd, NULL}};
        report("launch", LIBI_fe_launch(d, 2));
        void *m = NULL;
        int len = 0;
        report("recv-failed", LIBI_fe_recvUsrData(s[0], &m, &len));
        report("send-failed", LIBI_fe_sendUsrData(s[0], "x", 1));
        ping(s[1], "ping-survivor");
    } else if (strcmp(what, "bad") == 0) {
        libi_sess_handle_t s;
        LIBI_fe_createSession(&s);
        proc_dist_req_t d = {s, member, echo, NULL, NULL};
        report("empty", LIBI_fe_launch(&d, 1));
        host_dist_t zero = {"localhost", 0, NULL};
        d.hd = &zero;
        report("zero", LIBI_fe_launch(&d, 1));
        d.sessionHandle = 42;
        d.hd = hd;
        report("nosession", LIBI_fe_launch(&d, 1));
        report("notlaunched", LIBI_fe_sendUsrData(s, "x", 1));
        report("null", LIBI_fe_launch(NULL, 1));
        /* A host that does not exist, launched over ssh. */
        setenv("LIBI_MPIEXEC_ARGS", "-launcher ssh", 1);
        LIBI_fe_finalize();
        LIBI_fe_init(LIBI_VERSION);
        LIBI_fe_createSession(&s);
        host_dist_t unknown = {"no-such-host.invalid", 1, NULL};
        d = (proc_dist_req_t){s, member, echo, &unknown, NULL};
        report("unknown", LIBI_fe_launch(&d, 1));
        report("member-call", LIBI_barrier());
        LIBI_fe_finalize();
        report("after-finalize", LIBI_fe_createSession(&s));
        LIBI_fe_init(LIBI_VERSION);
    } else if (strcmp(what, "attach") == 0) {
        int pid = atoi(argv[3]), n = 0;
        libi_proc_desc_t *t = NULL;
        host_dist_t *jh = NULL;
        report("table", LIBI_fe_getJobProcTable(pid, &t, &n));
        report("hosts", LIBI_fe_getJobHosts(pid, &jh));
        char text[65536];
        int len = 0;
        for (int i = 0; i < n && len < (int)sizeof text - 300; i++)
            len += snprintf(text + len, sizeof text - len, "%d %s %d\n", t[i].rank, t[i].host_name, t[i].pid);
        printf("table-size %d\n", n);
        const char *attach[] = {"attach", NULL};
        libi_sess_handle_t s;
        LIBI_fe_createSession(&s);
        proc_dist_req_t d = {s, member, attach, jh, NULL};
        report("launch", LIBI_fe_launch(&d, 1));
        report("send", LIBI_fe_sendUsrData(s, text, len));
        void *m = NULL;
        int ml = 0;
        int rc = LIBI_fe_recvUsrData(s, &m, &ml);
        if (rc == LIBI_OK) printf("reply %.*s\n", ml, (char *)m);
        else report("recv", rc);
        free(t);
        free(jh);
        report("notajob", LIBI_fe_getJobHosts(1, &jh));
    } else if (strcmp(what, "flood") == 0) {
        const char *flood[] = {"flood", NULL};
        libi_sess_handle_t s;
        LIBI_fe_createSession(&s);
        proc_dist_req_t d = {s, member, flood, hd, NULL};
        report("launch", LIBI_fe_launch(&d, 1));
        sleep(2);
        long rss = 0;
        char line[256];
        FILE *st = fopen("/proc/self/status", "r");
        while (st && fgets(line, sizeof line, st))
            if (strncmp(line, "VmRSS:", 6) == 0) rss = atol(line + 6);
        if (st) fclose(st);
        int got = 0, good = 0;
        for (int i = 0; i < 200; i++) {
            void *m = NULL;
            int len = 0;
            int rc = LIBI_fe_recvUsrData(s, &m, &len);
            if (rc != LIBI_OK) {
                report("recv", rc);
                break;
            }
            got++;
            if (len == 1 << 20 && ((char *)m)[len - 1] == 'a' + i % 26) good++;
            free(m);
        }
        printf("flood received=%d good=%d rss_kb_while_unread=%ld\n", got, good, rss);
    } else if (strcmp(what, "crashsend") == 0) {
        const char *bad[] = {"crash", NULL};
        libi_sess_handle_t s;
        LIBI_fe_createSession(&s);
        proc_dist_req_t d = {s, member, bad, hd, NULL};
        report("launch", LIBI_fe_launch(&d, 1));
        sleep(2); /* rank 1 is dead and the session torn down by now */
        report("send-after-failure", LIBI_fe_sendUsrData(s, "x", 1));
    } else if (strcmp(what, "orphan") == 0 || strcmp(what, "killed") == 0) {
        /* The session must end without us: nothing of it may be left (tests/session.rs). */
        libi_sess_handle_t s;
        LIBI_fe_createSession(&s);
        proc_dist_req_t d = {s, member, echo, hd, NULL};
        report("launch", LIBI_fe_launch(&d, 1));
        fflush(stdout);
        if (strcmp(what, "killed") == 0) raise(SIGKILL);
        exit(0);
    } else if (strcmp(what, "calls") == 0) {
        const char *calls[] = {"calls", "C", NULL};
        libi_sess_handle_t s;
        LIBI_fe_createSession(&s);
        proc_dist_req_t d = {s, member, calls, hd, NULL};
        report("launch", LIBI_fe_launch(&d, 1));
        ping(s, "ping-calls");
    }
    report("finalize", LIBI_fe_finalize());
    return 0;
}

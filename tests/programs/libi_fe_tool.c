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
 * HOSTS: host:n[,host:n...] */
#include "../../examples/libi/hostlist.h"
#include <libi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void report(const char *name, int rc) {
    printf("%s %s %s\n", name, LIBI_rcName(rc), rc == LIBI_OK ? "" : LIBI_errorString());
    fflush(stdout);
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
    host_dist_t *hd = parse_hosts(argv[3]);
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
    } else if (strcmp(what, "wake") == 0) {
        const char *w[] = {"wait", NULL};
        report("launch", launch1(&s, member, w, hd));
    }
    report("finalize", LIBI_fe_finalize());
    return 0;
}

/* A multithreaded LIBI front end for tests/session_fe.rs (the thread contract of libi.h):
 *
 *   libi_fe_threads MEMBER HOSTS
 *
 * 1. recv vs send on one session: a thread waits in LIBI_fe_recvUsrData(s) for the master's
 *    answer while the main thread sends the message the master waits for ("cross");
 * 2. three threads receive from three sessions while the main thread sends to them in the
 *    reverse order ("many");
 * 3. a thread launches a session whose members call LIBI_init 3 s late while the main
 *    thread pings a running session: the ping ends before that launch returns ("overlap").
 * Prints one line per check; a deadlock hangs (the test's watchdog kills it). */
#include "../../examples/libi/hostlist.h"
#include <libi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *member;
static host_dist_t *hd;

struct recv_arg {
    libi_sess_handle_t s;
    int rc;
    char text[128];
};

static void *receiver(void *p) {
    struct recv_arg *a = p;
    void *m = NULL;
    int len = 0;
    a->rc = LIBI_fe_recvUsrData(a->s, &m, &len);
    if (a->rc == LIBI_OK) snprintf(a->text, sizeof a->text, "%.*s", len, (char *)m);
    else snprintf(a->text, sizeof a->text, "%s", LIBI_errorString());
    free(m);
    return NULL;
}

static volatile int launch_done = 0;
static int late_rc = -1;
static libi_sess_handle_t late;

static void *late_launcher(void *p) {
    (void)p;
    const char *slow[] = {"slowinit", "3", NULL};
    proc_dist_req_t d = {late, member, slow, hd, NULL};
    late_rc = LIBI_fe_launch(&d, 1);
    __atomic_store_n(&launch_done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: libi_fe_threads MEMBER HOSTS\n");
        return 2;
    }
    member = argv[1];
    hd = parse_hosts(argv[2]);
    const char *echo[] = {"echo", NULL};
    LIBI_fe_init(LIBI_VERSION);
    libi_sess_handle_t s[3];
    proc_dist_req_t d[3];
    for (int i = 0; i < 3; i++) {
        LIBI_fe_createSession(&s[i]);
        d[i] = (proc_dist_req_t){s[i], member, echo, hd, NULL};
    }
    int rc = LIBI_fe_launch(d, 3);
    printf("launch %s\n", LIBI_rcName(rc));
    fflush(stdout);

    /* 1. A receiver waits on s[0]; the message it waits for is sent by this thread. */
    struct recv_arg a = {s[0], -1, ""};
    pthread_t t;
    pthread_create(&t, NULL, receiver, &a);
    sleep(1); /* the receiver is waiting by now (had it not, nothing would be shown) */
    rc = LIBI_fe_sendUsrData(s[0], "cross", 5);
    pthread_join(t, NULL);
    printf("cross send=%s recv=%s %s\n", LIBI_rcName(rc), LIBI_rcName(a.rc), a.text);
    fflush(stdout);

    /* 2. Three receivers, sends in the reverse order. */
    struct recv_arg m[3];
    pthread_t mt[3];
    for (int i = 0; i < 3; i++) {
        m[i] = (struct recv_arg){s[i], -1, ""};
        pthread_create(&mt[i], NULL, receiver, &m[i]);
    }
    sleep(1);
    for (int i = 2; i >= 0; i--) {
        char text[16];
        snprintf(text, sizeof text, "many-%d", i);
        LIBI_fe_sendUsrData(s[i], text, (int)strlen(text));
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(mt[i], NULL);
        printf("many-%d %s %s\n", i, LIBI_rcName(m[i].rc), m[i].text);
    }
    fflush(stdout);

    /* 3. A launch that waits 3 s for its members does not hold up a ping elsewhere. */
    LIBI_fe_createSession(&late);
    pthread_t lt;
    pthread_create(&lt, NULL, late_launcher, NULL);
    sleep(1);
    rc = LIBI_fe_sendUsrData(s[1], "overlap", 7);
    struct recv_arg o = {s[1], -1, ""};
    receiver(&o);
    int during = !__atomic_load_n(&launch_done, __ATOMIC_SEQ_CST);
    pthread_join(lt, NULL);
    printf("overlap send=%s recv=%s %s while-launching=%s late-launch=%s\n", LIBI_rcName(rc),
           LIBI_rcName(o.rc), o.text, during ? "yes" : "no", LIBI_rcName(late_rc));
    fflush(stdout);

    /* Finalize while a thread waits on a session: it returns. */
    struct recv_arg f = {s[2], -1, ""};
    pthread_create(&t, NULL, receiver, &f);
    sleep(1);
    rc = LIBI_fe_finalize();
    pthread_join(t, NULL);
    printf("finalize %s waiting-recv=%s\n", LIBI_rcName(rc), LIBI_rcName(f.rc));
    return 0;
}

/* A LIBI session member for tests/session_fe.rs, by mode (argv[1]):
 *   burst N SIZE — the master sends N messages of SIZE bytes (message i: its index as text,
 *                  then bytes 'a' + i % 26) and calls LIBI_finalize at once;
 *   exitinit     — the last rank exits 0 right after LIBI_init (no LIBI_finalize); the others
 *                  wait in a barrier;
 *   echo         — the master answers each message with "echo:" and the message, until the
 *                  front end ends the session; then every member finalizes;
 *   slowinit S   — sleeps S seconds before LIBI_init, then behaves as echo;
 *   fecall       — calls LIBI_fe_init and LIBI_fe_createSession after LIBI_init; the master
 *                  sends "fe_init=RC createSession=RC";
 *   wait         — the master waits for a message; when the call returns it prints
 *                  "master-woken RC MESSAGE" on stderr; every member finalizes;
 *   proctab      — each daemon gets its host's part of the job's table (LIBI_getMyProctab),
 *                  checks each entry is on its host and alive; the master gathers and
 *                  reports "proctab daemons=N hosts=h,... ranks=R alive=A";
 *   mthreads     — the master waits for the front end's message in a thread while its main
 *                  thread sends the message the front end waits for ("ask"); then it sends
 *                  "got MESSAGE";
 *   print        — every member writes "out RANK" on stdout and "err RANK" on stderr, then
 *                  behaves as echo. */
#include <libi.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int die(const char *what, int rc) {
    fprintf(stderr, "libi_fe_member: %s: %s: %s\n", what, LIBI_rcName(rc), LIBI_errorString());
    return 1;
}

static char got[256];
static int got_rc = -1;

static void *receiver(void *p) {
    (void)p;
    void *m = NULL;
    int len = 0;
    got_rc = LIBI_recvUsrData(&m, &len);
    if (got_rc == LIBI_OK) snprintf(got, sizeof got, "%.*s", len, (char *)m);
    free(m);
    return NULL;
}

static int echo(int master) {
    int rc;
    while (master) {
        void *m = NULL;
        int len = 0;
        if ((rc = LIBI_recvUsrData(&m, &len)) != LIBI_OK) break;
        char *reply = malloc((size_t)len + 5);
        memcpy(reply, "echo:", 5);
        memcpy(reply + 5, m, (size_t)len);
        free(m);
        rc = LIBI_sendUsrData(reply, len + 5);
        free(reply);
        if (rc != LIBI_OK) return die("LIBI_sendUsrData", rc);
    }
    return LIBI_finalize() == LIBI_OK ? 0 : 1;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "echo";
    if (strcmp(mode, "slowinit") == 0) sleep(argc > 2 ? (unsigned)atoi(argv[2]) : 3);
    int rc = LIBI_init(LIBI_VERSION, &argc, &argv);
    if (rc != LIBI_OK) return die("LIBI_init", rc);
    int rank, size;
    LIBI_getMyRank(&rank);
    LIBI_getSize(&size);
    int master = LIBI_amMaster() == LIBI_YES;
    if (strcmp(mode, "burst") == 0) {
        int n = atoi(argv[2]), bytes = atoi(argv[3]);
        char *m = malloc((size_t)bytes);
        for (int i = 0; master && i < n; i++) {
            memset(m, 'a' + i % 26, (size_t)bytes);
            snprintf(m, (size_t)bytes, "%d", i);
            if ((rc = LIBI_sendUsrData(m, bytes)) != LIBI_OK) return die("LIBI_sendUsrData", rc);
        }
        free(m);
        return LIBI_finalize() == LIBI_OK ? 0 : 1;
    }
    if (strcmp(mode, "exitinit") == 0) {
        if (rank == size - 1) _exit(0);
        LIBI_barrier();
        pause();
    }
    if (strcmp(mode, "fecall") == 0) {
        libi_sess_handle_t s;
        int a = LIBI_fe_init(LIBI_VERSION), b = LIBI_fe_createSession(&s);
        char text[128];
        int n = snprintf(text, sizeof text, "fe_init=%s createSession=%s", LIBI_rcName(a), LIBI_rcName(b));
        if (master && (rc = LIBI_sendUsrData(text, n)) != LIBI_OK) return die("LIBI_sendUsrData", rc);
        return LIBI_finalize() == LIBI_OK ? 0 : 1;
    }
    if (strcmp(mode, "wait") == 0) {
        if (master) {
            void *m = NULL;
            int len = 0;
            rc = LIBI_recvUsrData(&m, &len);
            fprintf(stderr, "master-woken %s %s\n", LIBI_rcName(rc), rc == LIBI_OK ? "" : LIBI_errorString());
            fflush(stderr);
            free(m);
        }
        return LIBI_finalize() == LIBI_OK ? 0 : 1;
    }
    if (strcmp(mode, "proctab") == 0) {
        libi_proc_desc_t *t = NULL;
        int n = 0, seen[2] = {0, 0};
        char host[64] = {0};
        if ((rc = LIBI_getMyProctab(&t, &n)) != LIBI_OK) return die("LIBI_getMyProctab", rc);
        if ((rc = LIBI_getMyHostname(host, sizeof host)) != LIBI_OK) return die("LIBI_getMyHostname", rc);
        for (int i = 0; i < n; i++) {
            if (strcmp(t[i].host_name, host) != 0) continue;
            seen[0]++;
            if (t[i].pid > 0 && kill(t[i].pid, 0) == 0) seen[1]++;
        }
        free(t);
        int *all = master ? calloc((size_t)size, sizeof seen) : NULL;
        char *names = master ? calloc((size_t)size, sizeof host) : NULL;
        if ((rc = LIBI_gather(seen, sizeof seen, all)) != LIBI_OK) return die("LIBI_gather", rc);
        if ((rc = LIBI_gather(host, sizeof host, names)) != LIBI_OK) return die("LIBI_gather", rc);
        if (master) {
            char line[4096];
            int ranks = 0, alive = 0, k = snprintf(line, sizeof line, "proctab daemons=%d hosts=", size);
            for (int i = 0; i < size; i++) {
                ranks += all[2 * i];
                alive += all[2 * i + 1];
                k += snprintf(line + k, sizeof line - k, "%s%s", i ? "," : "", names + (size_t)i * sizeof host);
            }
            k += snprintf(line + k, sizeof line - k, " ranks=%d alive=%d", ranks, alive);
            if ((rc = LIBI_sendUsrData(line, k)) != LIBI_OK) return die("LIBI_sendUsrData", rc);
        }
        return LIBI_finalize() == LIBI_OK ? 0 : 1;
    }
    if (strcmp(mode, "mthreads") == 0) {
        if (master) {
            pthread_t t;
            pthread_create(&t, NULL, receiver, NULL);
            sleep(1); /* the receiver waits by now */
            if ((rc = LIBI_sendUsrData("ask", 3)) != LIBI_OK) return die("LIBI_sendUsrData", rc);
            pthread_join(t, NULL);
            char text[300];
            int n = snprintf(text, sizeof text, "got %s %s", LIBI_rcName(got_rc), got);
            if ((rc = LIBI_sendUsrData(text, n)) != LIBI_OK) return die("LIBI_sendUsrData", rc);
        }
        return LIBI_finalize() == LIBI_OK ? 0 : 1;
    }
    if (strcmp(mode, "print") == 0) {
        printf("out %d\n", rank);
        fflush(stdout);
        fprintf(stderr, "err %d\n", rank);
        fflush(stderr);
    }
    return echo(master);
}

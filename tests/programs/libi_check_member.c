/* A LIBI session member for the tests (tests/session.rs), by mode (argv[1]):
 *   echo IMAGE   — the master waits for the front end's message, broadcasts it, every member
 *                  answers with its image letter and rank (gather), the master replies
 *                  "<msg> size=N members=A0,A1,B2,...";
 *   crash        — rank 1 kills itself with SIGKILL after LIBI_init; the others wait in a
 *                  barrier;
 *   killagent    — the last rank SIGKILLs its agent (its parent, libi-nla); the others wait
 *                  in a barrier;
 *   calls        — checks the error codes of misused calls, then behaves as "echo X";
 *   flood        — the master sends 200 messages of 1 MiB to the front end at once;
 *   attach       — a daemon next to a job: the master gets the job's process table
 *                  ("rank host pid" lines) from the front end and broadcasts it; each daemon
 *                  checks the ranks on its host (PMI_HOSTNAME) are alive processes; the
 *                  master reports "attach daemons=N hosts=h,... ranks=R alive=A". */
#include <libi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int die(const char *what, int rc) {
    fprintf(stderr, "libi_check_member: %s: %s: %s\n", what, LIBI_rcName(rc), LIBI_errorString());
    return 1;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "echo";
    const char *image = argc > 2 ? argv[2] : "X";
    if (strcmp(mode, "calls") == 0) {
        int r;
        if (LIBI_getMyRank(&r) != LIBI_EINIT) return die("getMyRank before init", 0);
        if (LIBI_fe_createSession(NULL) != LIBI_EARG) return die("createSession(NULL)", 0);
    }
    int rc = LIBI_init(LIBI_VERSION, &argc, &argv);
    if (rc != LIBI_OK) return die("LIBI_init", rc);
    int rank, size;
    LIBI_getMyRank(&rank);
    LIBI_getSize(&size);
    int master = LIBI_amMaster() == LIBI_YES;
    if (strcmp(mode, "calls") == 0) {
        if (LIBI_init(LIBI_VERSION, &argc, &argv) != LIBI_EINIT) return die("second LIBI_init", 0);
        if (!master && LIBI_sendUsrData("x", 1) != LIBI_ENOTMASTER) return die("sendUsrData by a non-master", 0);
        if (LIBI_broadcast(NULL, 8) != LIBI_EARG) return die("broadcast(NULL)", 0);
    }
    if (strcmp(mode, "crash") == 0) {
        if (rank == 1) kill(getpid(), SIGKILL);
        LIBI_barrier();
        pause();
    }
    if (strcmp(mode, "killagent") == 0) {
        if (rank == size - 1) kill(getppid(), SIGKILL);
        LIBI_barrier();
        pause();
    }
    if (strcmp(mode, "flood") == 0) {
        if (master) {
            char *big = malloc(1 << 20);
            for (int i = 0; i < 200; i++) {
                memset(big, 'a' + i % 26, 1 << 20);
                if ((rc = LIBI_sendUsrData(big, 1 << 20)) != LIBI_OK) return die("LIBI_sendUsrData", rc);
            }
            free(big);
        }
        return LIBI_finalize() == LIBI_OK ? 0 : 1;
    }
    if (strcmp(mode, "attach") == 0) {
        int len = 0;
        void *m = NULL;
        if (master && (rc = LIBI_recvUsrData(&m, &len)) != LIBI_OK) return die("LIBI_recvUsrData", rc);
        if ((rc = LIBI_broadcast(&len, sizeof len)) != LIBI_OK) return die("LIBI_broadcast", rc);
        char *table = calloc(1, (size_t)len + 1);
        if (master) memcpy(table, m, (size_t)len);
        if ((rc = LIBI_broadcast(table, len)) != LIBI_OK) return die("LIBI_broadcast", rc);
        const char *me = getenv("PMI_HOSTNAME");
        int seen[2] = {0, 0};
        for (char *l = strtok(table, "\n"); l; l = strtok(NULL, "\n")) {
            char host[256];
            int r, pid;
            if (sscanf(l, "%d %255s %d", &r, host, &pid) == 3 && me && strcmp(host, me) == 0) {
                seen[0]++;
                if (pid > 0 && kill(pid, 0) == 0) seen[1]++;
            }
        }
        char name[32] = {0};
        snprintf(name, sizeof name, "%s", me ? me : "?");
        int *all = master ? calloc((size_t)size, sizeof seen) : NULL;
        char *names = master ? calloc((size_t)size, sizeof name) : NULL;
        if ((rc = LIBI_gather(seen, sizeof seen, all)) != LIBI_OK) return die("LIBI_gather", rc);
        if ((rc = LIBI_gather(name, sizeof name, names)) != LIBI_OK) return die("LIBI_gather", rc);
        if (master) {
            char line[4096];
            int ranks = 0, alive = 0, n = snprintf(line, sizeof line, "attach daemons=%d hosts=", size);
            for (int i = 0; i < size; i++) {
                ranks += all[2 * i];
                alive += all[2 * i + 1];
                n += snprintf(line + n, sizeof line - n, "%s%s", i ? "," : "", names + (size_t)i * sizeof name);
            }
            n += snprintf(line + n, sizeof line - n, " ranks=%d alive=%d", ranks, alive);
            if ((rc = LIBI_sendUsrData(line, n)) != LIBI_OK) return die("LIBI_sendUsrData", rc);
        }
        return LIBI_finalize() == LIBI_OK ? 0 : 1;
    }
    char msg[256] = {0};
    if (master) {
        void *m = NULL;
        int len = 0;
        if ((rc = LIBI_recvUsrData(&m, &len)) != LIBI_OK) return die("LIBI_recvUsrData", rc);
        snprintf(msg, sizeof msg, "%.*s", len, (char *)m);
        free(m);
    }
    if ((rc = LIBI_broadcast(msg, sizeof msg)) != LIBI_OK) return die("LIBI_broadcast", rc);
    char me[16] = {0}, *all = master ? calloc((size_t)size, sizeof me) : NULL;
    snprintf(me, sizeof me, "%s%d", image, rank);
    if ((rc = LIBI_gather(me, sizeof me, all)) != LIBI_OK) return die("LIBI_gather", rc);
    if (master) {
        char line[8192];
        int n = snprintf(line, sizeof line, "%s size=%d members=", msg, size);
        for (int i = 0; i < size && n < (int)sizeof line - 20; i++)
            n += snprintf(line + n, sizeof line - n, "%s%s", i ? "," : "", all + (size_t)i * sizeof me);
        if ((rc = LIBI_sendUsrData(line, n)) != LIBI_OK) return die("LIBI_sendUsrData", rc);
    }
    if ((rc = LIBI_finalize()) != LIBI_OK) return die("LIBI_finalize", rc);
    return 0;
}

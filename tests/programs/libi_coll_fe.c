/* Front end of the collective checks (tests/session_coll.rs): launches one session of
 * MEMBER MODE on HOSTS, prints the master's one message as it is, then "finalize RC".
 *
 *   libi_coll_fe MEMBER MODE host:n[,host:n...]
 *
 * Launch options come from LIBI_MPIEXEC_ARGS. */
#include "../../examples/libi/hostlist.h"
#include <libi.h>
#include <stdio.h>
#include <stdlib.h>

static int die(const char *what, int rc) {
    printf("%s %s %s\n", what, LIBI_rcName(rc), LIBI_errorString());
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: libi_coll_fe MEMBER MODE host:n[,host:n...]\n");
        return 2;
    }
    const char *margv[] = {argv[2], NULL};
    int rc = LIBI_fe_init(LIBI_VERSION);
    if (rc != LIBI_OK) return die("fe_init", rc);
    libi_sess_handle_t s;
    if ((rc = LIBI_fe_createSession(&s)) != LIBI_OK) return die("createSession", rc);
    proc_dist_req_t d = {s, argv[1], margv, parse_hosts(argv[3]), NULL};
    if ((rc = LIBI_fe_launch(&d, 1)) != LIBI_OK) return die("launch", rc);
    void *msg = NULL;
    int len = 0;
    if ((rc = LIBI_fe_recvUsrData(s, &msg, &len)) != LIBI_OK) return die("recv", rc);
    fwrite(msg, 1, (size_t)len, stdout);
    free(msg);
    rc = LIBI_fe_finalize();
    printf("finalize %s %s\n", LIBI_rcName(rc), rc == LIBI_OK ? "" : LIBI_errorString());
    return 0;
}

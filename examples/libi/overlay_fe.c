/* Tree-overlay bootstrap, front end: launch the members (overlay_member) over the hosts
 * given; they build a K-ary tree overlay among themselves; print the master's report.
 *
 *   overlay_fe MEMBER host:n[,host:n...] [K]                                        */
#include "hostlist.h"
#include <libi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int die(const char *what, int rc) {
    fprintf(stderr, "overlay_fe: %s: %s: %s\n", what, LIBI_rcName(rc), LIBI_errorString());
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: overlay_fe MEMBER host:n[,host:n...] [K]\n");
        return 2;
    }
    host_dist_t *hosts = parse_hosts(argv[2]);
    const char *k = argc > 3 ? argv[3] : "2";
    const char *margv[] = {k, NULL};
    int rc = LIBI_fe_init(LIBI_VERSION);
    if (rc != LIBI_OK) return die("LIBI_fe_init", rc);
    libi_sess_handle_t s;
    if ((rc = LIBI_fe_createSession(&s)) != LIBI_OK) return die("LIBI_fe_createSession", rc);
    proc_dist_req_t d = {s, argv[1], margv, hosts, NULL};
    if ((rc = LIBI_fe_launch(&d, 1)) != LIBI_OK) return die("LIBI_fe_launch", rc);
    void *msg = NULL;
    int len = 0;
    if ((rc = LIBI_fe_recvUsrData(s, &msg, &len)) != LIBI_OK) return die("LIBI_fe_recvUsrData", rc);
    printf("%.*s\n", len, (char *)msg);
    free(msg);
    if ((rc = LIBI_fe_finalize()) != LIBI_OK) return die("LIBI_fe_finalize", rc);
    return 0;
}

/* Shared by the example front ends: "host:n,host:n,..." as a LIBI host distribution
 * (n defaults to 1). The strings and entries live until the program exits. */
#ifndef LIBI_EXAMPLE_HOSTLIST_H
#define LIBI_EXAMPLE_HOSTLIST_H
#include <libi.h>
#include <stdlib.h>
#include <string.h>

static host_dist_t *parse_hosts(const char *spec) {
    host_dist_t *head = NULL, **tail = &head;
    char *list = strdup(spec);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        host_dist_t *h = calloc(1, sizeof *h);
        char *colon = strchr(tok, ':');
        h->nproc = colon ? (unsigned)atoi(colon + 1) : 1;
        if (colon) *colon = 0;
        h->hostname = tok;
        *tail = h;
        tail = (host_dist_t **)&h->next;
    }
    return head;
}
#endif

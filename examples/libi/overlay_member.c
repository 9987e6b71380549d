/* Tree-overlay bootstrap, member: listen on a port; the master gathers every member's
 * host:port, computes a K-ary tree over the ranks (parent of i is (i-1)/K) and scatters to
 * each member its parent's address; each member connects to its parent and sends its rank,
 * and accepts its children's; the master gathers what each member saw and reports the
 * overlay to the front end. The host is the member's PMI_HOSTNAME; a name that does not
 * resolve (the fork launcher's simulated hosts) is reached on 127.0.0.1. */
#include <libi.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define ADDR 64

static int die(const char *what, int rc) {
    fprintf(stderr, "overlay_member: %s: %s: %s\n", what, LIBI_rcName(rc), LIBI_errorString());
    return 1;
}

static int connect_to(const char *hostport) {
    char host[ADDR];
    snprintf(host, sizeof host, "%s", hostport);
    char *colon = strrchr(host, ':');
    if (!colon) return -1;
    *colon = 0;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(colon + 1))};
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, NULL, &hints, &res) == 0 && res) {
        a.sin_addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
        freeaddrinfo(res);
    } else {
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) return -1;
    return fd;
}

int main(int argc, char **argv) {
    int rc = LIBI_init(LIBI_VERSION, &argc, &argv);
    if (rc != LIBI_OK) return die("LIBI_init", rc);
    int rank, size, k = argc > 1 ? atoi(argv[1]) : 2;
    if (k < 1) k = 1;
    LIBI_getMyRank(&rank);
    LIBI_getSize(&size);
    int master = LIBI_amMaster() == LIBI_YES;

    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t al = sizeof a;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) || listen(lfd, 128) ||
        getsockname(lfd, (struct sockaddr *)&a, &al)) {
        perror("overlay_member: listen");
        return 1;
    }
    const char *host = getenv("PMI_HOSTNAME");
    char me[ADDR] = {0};
    snprintf(me, sizeof me, "%s:%d", host ? host : "localhost", ntohs(a.sin_port));

    char *all = master ? calloc((size_t)size, ADDR) : NULL;
    if ((rc = LIBI_gather(me, ADDR, all)) != LIBI_OK) return die("LIBI_gather", rc);
    /* The master computes each member's parent (block i: the parent's address, or "").*/
    char *parents = master ? calloc((size_t)size, ADDR) : NULL;
    for (int i = 1; master && i < size; i++) memcpy(parents + (size_t)i * ADDR, all + (size_t)((i - 1) / k) * ADDR, ADDR);
    char parent[ADDR];
    if ((rc = LIBI_scatter(parents, ADDR, parent)) != LIBI_OK) return die("LIBI_scatter", rc);

    int pfd = -1;
    if (rank > 0) {
        pfd = connect_to(parent);
        if (pfd < 0 || write(pfd, &rank, sizeof rank) != sizeof rank) {
            fprintf(stderr, "overlay_member: rank %d cannot reach its parent %s\n", rank, parent);
            return 1;
        }
    }
    /* My children are k*rank+1 .. k*rank+k (those < size). */
    int want = 0, ok = 0;
    for (int c = k * rank + 1; c <= k * rank + k && c < size; c++) want++;
    for (int i = 0; i < want; i++) {
        int cfd = accept(lfd, NULL, NULL), who = -1;
        if (cfd >= 0 && read(cfd, &who, sizeof who) == sizeof who && who > k * rank && who <= k * rank + k) ok++;
        if (cfd >= 0) close(cfd);
    }
    int seen[2] = {want, ok}, *every = master ? calloc((size_t)size, sizeof seen) : NULL;
    if ((rc = LIBI_gather(seen, sizeof seen, every)) != LIBI_OK) return die("LIBI_gather", rc);
    if (master) {
        int edges = 0, good = 0, depth = 0;
        for (int i = 0; i < size; i++) {
            edges += every[2 * i];
            good += every[2 * i + 1];
        }
        for (long f = 1; f < size; f = f * k + 1) depth++;
        char line[256];
        int n = snprintf(line, sizeof line, "overlay members=%d k=%d depth=%d edges=%d connected=%d %s", size,
                         k, depth, edges, good, good == size - 1 && edges == size - 1 ? "ok" : "BROKEN");
        if ((rc = LIBI_sendUsrData(line, n)) != LIBI_OK) return die("LIBI_sendUsrData", rc);
    }
    if (pfd >= 0) close(pfd);
    close(lfd);
    if ((rc = LIBI_finalize()) != LIBI_OK) return die("LIBI_finalize", rc);
    return 0;
}

/* A PMGR-only program that ends the way v1.0_7 clients do: PMGR_CLOSE, close the socket and
 * exit(0) at once (pmgr_close does not wait for the server). Raw v8 bytes, no library.
 *   classic (MPIRUN_USE_TREES unset or 0): ALLGATHER of 4 bytes, then GATHER to rank 0 (no
 *     reply on the other ranks, so their CLOSE follows it at once, behind a collective still
 *     in flight), then CLOSE.
 *   MPIRUN_USE_TREES=1: the server traffic of a v1.0_7 client with trees: each rank listens
 *     on a port of its own and GATHERs its 6-byte address entry (IPv4 address, port in host
 *     order) to rank 0, which connects to every other rank (a flat "tree"); once wired,
 *     every rank sends CLOSE and exits.
 *   argv[1] == "noclose": the same without CLOSE (must fail the job).
 * Prints nothing when all is well; names the failure and exits 1 otherwise. */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int fd, me, np;

static void die(const char *what) { fprintf(stderr, "rank %d: %s\n", me, what); exit(1); }

static void put(int s, const void *p, size_t n)
{
    if (write(s, p, n) != (ssize_t) n) die("write");
}
static void get(int s, void *p, size_t n)
{
    size_t off = 0;
    while (off < n) {
        ssize_t r = read(s, (char *) p + off, n - off);
        if (r <= 0) die("short read");
        off += (size_t) r;
    }
}

static void wire_tree(void)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    socklen_t len = sizeof a;
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(l, (struct sockaddr *) &a, sizeof a) != 0 || listen(l, 2) != 0) die("listen");
    if (getsockname(l, (struct sockaddr *) &a, &len) != 0) die("getsockname");
    unsigned short port = ntohs(a.sin_port);
    unsigned char entry[6];
    memcpy(entry, &a.sin_addr, 4);
    memcpy(entry + 4, &port, 2);
    int hdr[3] = {5, 0, 6}; /* GATHER root 0, 6 bytes */
    put(fd, hdr, sizeof hdr);
    put(fd, entry, sizeof entry);
    int ok = 1;
    if (me == 0) {
        unsigned char *all = malloc(6 * (size_t) np);
        get(fd, all, 6 * (size_t) np);
        for (int i = 1; i < np; i++) {
            struct sockaddr_in c = {0};
            c.sin_family = AF_INET;
            memcpy(&c.sin_addr, all + 6 * i, 4);
            memcpy(&port, all + 6 * i + 4, 2);
            c.sin_port = htons(port);
            int s = socket(AF_INET, SOCK_STREAM, 0);
            if (connect(s, (struct sockaddr *) &c, sizeof c) != 0) die("connect to child");
            put(s, &ok, sizeof ok);
            close(s);
        }
    } else {
        int s = accept(l, NULL, NULL);
        if (s < 0) die("accept");
        get(s, &ok, sizeof ok);
        close(s);
    }
    close(l);
}

int main(int argc, char **argv)
{
    const char *h = getenv("MPIRUN_HOST"), *p = getenv("MPIRUN_PORT");
    const char *trees = getenv("MPIRUN_USE_TREES");
    int noclose = argc > 1 && strcmp(argv[1], "noclose") == 0;
    if (!h || !p || !getenv("MPIRUN_RANK") || !getenv("MPIRUN_NPROCS")) die("no MPIRUN_* env");
    me = atoi(getenv("MPIRUN_RANK"));
    np = atoi(getenv("MPIRUN_NPROCS"));
    struct addrinfo hints = {0}, *ai;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(h, p, &hints, &ai) != 0) die("resolve");
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) die("connect");
    int hello[2] = {8, me};
    put(fd, hello, sizeof hello);
    if (trees && strcmp(trees, "1") == 0) {
        wire_tree();
    } else {
        int hdr[3] = {7, 4, me * 3}; /* ALLGATHER 4 bytes */
        put(fd, hdr, sizeof hdr);
        int *all = malloc(sizeof(int) * (size_t) np);
        get(fd, all, sizeof(int) * (size_t) np);
        for (int i = 0; i < np; i++)
            if (all[i] != i * 3) die("allgather");
        int g[4] = {5, 0, 4, me + 10}; /* GATHER root 0, 4 bytes */
        put(fd, g, sizeof g);
        if (me == 0) {
            get(fd, all, sizeof(int) * (size_t) np);
            for (int i = 0; i < np; i++)
                if (all[i] != i + 10) die("gather");
        }
    }
    if (!noclose) {
        int close_op = 1; /* PMGR_CLOSE */
        put(fd, &close_op, sizeof close_op);
    }
    close(fd);
    return 0;
}

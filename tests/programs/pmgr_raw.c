/* Speaks the PMGR v8 wire protocol by hand (no client library), writing every request one
 * byte at a time: handshake, BARRIER, ALLGATHER, GATHER to root 0, BCAST from the last rank,
 * ALLTOALL, CLOSE. Checks every reply. Prints "rank R raw ok" and exits 0, or names the
 * failure and exits 1. Ints are native 4-byte C ints (the protocol has no byte order). */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int fd, me, np;

static void die(const char *what) { fprintf(stderr, "rank %d: %s\n", me, what); exit(1); }

static void put(const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (write(fd, b + i, 1) != 1) die("write");
}
static void put_int(int x) { put(&x, sizeof x); }
static void get(void *p, size_t n)
{
    size_t off = 0;
    while (off < n) {
        ssize_t r = read(fd, (char *) p + off, n - off);
        if (r <= 0) die("short read");
        off += (size_t) r;
    }
}

int main(void)
{
    const char *h = getenv("MPIRUN_HOST"), *p = getenv("MPIRUN_PORT");
    if (!h || !p || !getenv("MPIRUN_RANK") || !getenv("MPIRUN_NPROCS")) die("no MPIRUN_* env");
    me = atoi(getenv("MPIRUN_RANK"));
    np = atoi(getenv("MPIRUN_NPROCS"));
    struct addrinfo hints = {0}, *ai;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(h, p, &hints, &ai) != 0) die("resolve");
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) die("connect");
    put_int(8);  /* version */
    put_int(me); /* rank */

    int x;
    put_int(3); /* BARRIER */
    get(&x, sizeof x);

    put_int(7); put_int(4); put_int(me * 100); /* ALLGATHER sz=4 */
    int *all = malloc(sizeof(int) * (size_t) np);
    get(all, sizeof(int) * (size_t) np);
    for (int i = 0; i < np; i++) if (all[i] != i * 100) die("allgather");

    put_int(5); put_int(0); put_int(4); put_int(me + 7); /* GATHER root 0 */
    if (me == 0) {
        get(all, sizeof(int) * (size_t) np);
        for (int i = 0; i < np; i++) if (all[i] != i + 7) die("gather");
    }

    char msg[6] = "hello";
    put_int(4); put_int(np - 1); put_int(6); /* BCAST root np-1, 6 bytes */
    if (me == np - 1) put(msg, 6);
    char got[6];
    get(got, 6);
    if (memcmp(got, msg, 6) != 0) die("bcast");

    int *send = malloc(sizeof(int) * (size_t) np), *recv = malloc(sizeof(int) * (size_t) np);
    for (int j = 0; j < np; j++) send[j] = me * 1000 + j;
    put_int(8); put_int(4); put(send, sizeof(int) * (size_t) np); /* ALLTOALL sz=4 */
    get(recv, sizeof(int) * (size_t) np);
    for (int i = 0; i < np; i++) if (recv[i] != i * 1000 + me) die("alltoall");

    put_int(1); /* CLOSE */
    close(fd);
    printf("rank %d raw ok\n", me);
    return 0;
}

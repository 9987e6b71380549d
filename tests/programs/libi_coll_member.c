/* A LIBI session member for the collective checks (tests/session_coll.rs), by mode (argv[1]).
 * Every member writes "key=value" results to its report line; the lines reach the master
 * (a gather of fixed-size records) and the master sends them to the front end, one line per
 * member ("R: ..."), then its own "msg-..." lines (error messages it saw).
 *   zero    — broadcast, scatter, gather, allgather of 0 bytes (NULL buffers), then a
 *             4-byte broadcast: every result;
 *   limits  — a broadcast one byte over the limit, then a 100 MiB broadcast (every byte
 *             checked), a scatter and a gather of over INT_MAX bytes in all, then a 1 KiB
 *             scatter (checked);
 *   big     — a gather of exactly the limit (256 MiB in all, every byte checked);
 *   vary    — gatherv, scatterv and allgather with per-member sizes (checked), the same
 *             with a bad argument on one member, then again correctly. */
#include <libi.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIMIT (256u << 20)
#define RECORD 4096

static int rank, size, master;
static char line[RECORD], msgs[16384];

static void out(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    size_t used = strlen(line);
    vsnprintf(line + used, sizeof line - used, fmt, ap);
    va_end(ap);
}

/* The result of a call: its code's name; its message kept (master) as "msg-NAME ...". */
static void res(const char *name, int rc) {
    out(" %s=%s", name, LIBI_rcName(rc));
    if (rc != LIBI_OK && master) {
        size_t used = strlen(msgs);
        snprintf(msgs + used, sizeof msgs - used, "msg-%s %s\n", name, LIBI_errorString());
    }
}

static unsigned char pat(size_t who, size_t i) { return (unsigned char)(who * 31 + i * 7 + (i >> 10)); }

static void fill(unsigned char *b, size_t n, size_t who) {
    for (size_t i = 0; i < n; i++) b[i] = pat(who, i);
}

static int wrong(const unsigned char *b, size_t n, size_t who) {
    for (size_t i = 0; i < n; i++)
        if (b[i] != pat(who, i)) return 1;
    return 0;
}

static void zero(void) {
    res("bcast", LIBI_broadcast(NULL, 0));
    res("scatter", LIBI_scatter(NULL, 0, NULL));
    res("gather", LIBI_gather(NULL, 0, NULL));
#ifdef LIBI_VCOLL
    res("allgather", LIBI_allgather(NULL, 0, NULL));
#endif
    int v = master ? 4242 : 0;
    res("after", LIBI_broadcast(&v, sizeof v));
    out(" value=%d", v);
}

static void limits(void) {
    /* One byte over: refused on every member, before anything is sent. */
    unsigned char *big = malloc((size_t)LIMIT + 1);
    res("bcast-over", LIBI_broadcast(big, (int)LIMIT + 1));
    free(big);
    /* 100 MiB to every member: the limit is the payload, not payload x members. */
    size_t n = 100u << 20;
    unsigned char *b = malloc(n);
    if (master) fill(b, n, 5);
    res("bcast-100MiB", LIBI_broadcast(b, (int)n));
    out(" bad=%d", wrong(b, n, 5));
    free(b);
    /* Over INT_MAX bytes in all (never touched: refused before). */
    int per = INT_MAX / size + 1;
    size_t total = (size_t)per * (size_t)size;
    unsigned char *all = master ? malloc(total) : NULL;
    unsigned char *mine = malloc((size_t)per);
    res("scatter-over", LIBI_scatter(all, per, mine));
    res("gather-over", LIBI_gather(mine, per, all));
    free(all);
    free(mine);
    /* Still usable. */
    unsigned char *s = master ? malloc(1024u * (size_t)size) : NULL;
    for (int r = 0; master && r < size; r++) fill(s + 1024u * (size_t)r, 1024, (size_t)r);
    unsigned char got[1024];
    res("scatter", LIBI_scatter(s, 1024, got));
    out(" scatter-bad=%d", wrong(got, 1024, (size_t)rank));
    free(s);
}

static void bigcoll(void) {
    size_t per = LIMIT / (size_t)size;
    unsigned char *mine = malloc(per);
    fill(mine, per, (size_t)rank + 100);
    unsigned char *all = master ? malloc(per * (size_t)size) : NULL;
    res("gather-limit", LIBI_gather(mine, (int)per, all));
    int bad = 0;
    for (int r = 0; master && r < size; r++) bad += wrong(all + per * (size_t)r, per, (size_t)r + 100);
    out(" bad=%d bytes=%zu", bad, master ? per * (size_t)size : (size_t)0);
    free(all);
    free(mine);
}

#ifdef LIBI_VCOLL
static size_t vcount(int r) { return (size_t)r * 1000 + 7; }

static void vary(void) {
    int bad = 0;
    /* gatherv: member r sends r*1000+7 bytes. */
    unsigned char *mine = malloc(vcount(rank));
    fill(mine, vcount(rank), (size_t)rank);
    void *all = NULL;
    int *counts = master ? calloc((size_t)size, sizeof(int)) : NULL;
    res("gatherv", LIBI_gatherv(mine, (int)vcount(rank), &all, counts));
    size_t at = 0;
    for (int r = 0; master && r < size; r++) {
        bad += counts[r] != (int)vcount(r) || wrong((unsigned char *)all + at, vcount(r), (size_t)r);
        at += vcount(r);
    }
    free(all);
    all = NULL;
    /* A negative count on member 1 only: every member is told, nothing is sent. */
    res("gatherv-bad", LIBI_gatherv(mine, rank == 1 ? -1 : (int)vcount(rank), &all, counts));
    res("gatherv-after", LIBI_gatherv(mine, (int)vcount(rank), &all, counts));
    for (int r = 0, a = 0; master && r < size; a += (int)vcount(r), r++)
        bad += counts[r] != (int)vcount(r) || wrong((unsigned char *)all + a, vcount(r), (size_t)r);
    free(all);
    all = NULL;
    /* scatterv: member r gets r*1000+7 bytes. */
    size_t total = 0;
    for (int r = 0; r < size; r++) total += vcount(r);
    unsigned char *send = master ? malloc(total) : NULL;
    int *sc = master ? malloc(sizeof(int) * (size_t)size) : NULL;
    at = 0;
    for (int r = 0; master && r < size; r++) {
        fill(send + at, vcount(r), (size_t)r + 50);
        sc[r] = (int)vcount(r);
        at += vcount(r);
    }
    void *got = NULL;
    int len = -1;
    res("scatterv", LIBI_scatterv(send, sc, &got, &len));
    bad += len != (int)vcount(rank) || wrong(got, vcount(rank), (size_t)rank + 50);
    free(got);
    got = NULL;
    if (master) sc[size - 1] = -5;
    res("scatterv-bad", LIBI_scatterv(send, sc, &got, &len));
    if (master) sc[size - 1] = (int)vcount(size - 1);
    res("scatterv-after", LIBI_scatterv(send, sc, &got, &len));
    bad += len != (int)vcount(rank) || wrong(got, vcount(rank), (size_t)rank + 50);
    free(got);
    /* allgather: 100 bytes each, every member gets all. */
    unsigned char a100[100], *every = malloc(100u * (size_t)size);
    fill(a100, 100, (size_t)rank + 9);
    res("allgather", LIBI_allgather(a100, 100, every));
    for (int r = 0; r < size; r++) bad += wrong(every + 100u * (size_t)r, 100, (size_t)r + 9);
    free(every);
    out(" bad=%d", bad);
    free(mine);
    free(send);
    free(sc);
    free(counts);
}
#endif

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "zero";
    int rc = LIBI_init(LIBI_VERSION, &argc, &argv);
    if (rc != LIBI_OK) {
        fprintf(stderr, "libi_coll_member: LIBI_init: %s\n", LIBI_errorString());
        return 1;
    }
    LIBI_getMyRank(&rank);
    LIBI_getSize(&size);
    master = LIBI_amMaster() == LIBI_YES;
    snprintf(line, sizeof line, "%d: %s", rank, mode);
    if (strcmp(mode, "zero") == 0) zero();
    else if (strcmp(mode, "limits") == 0) limits();
    else if (strcmp(mode, "big") == 0) bigcoll();
#ifdef LIBI_VCOLL
    else if (strcmp(mode, "vary") == 0) vary();
#endif
    else out(" unknown-mode");
    /* Every member's line to the master, which sends them on with its messages. */
    char *lines = master ? calloc((size_t)size, RECORD) : NULL;
    if ((rc = LIBI_gather(line, RECORD, lines)) != LIBI_OK) {
        fprintf(stderr, "libi_coll_member: report gather: %s\n", LIBI_errorString());
        return 1;
    }
    if (master) {
        size_t cap = (size_t)size * (RECORD + 1) + sizeof msgs, used = 0;
        char *text = malloc(cap);
        for (int r = 0; r < size; r++)
            used += (size_t)snprintf(text + used, cap - used, "%.*s\n", RECORD, lines + (size_t)r * RECORD);
        used += (size_t)snprintf(text + used, cap - used, "%s", msgs);
        if ((rc = LIBI_sendUsrData(text, (int)used)) != LIBI_OK) {
            fprintf(stderr, "libi_coll_member: send: %s\n", LIBI_errorString());
            return 1;
        }
    }
    return LIBI_finalize() == LIBI_OK ? 0 : 1;
}

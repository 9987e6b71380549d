/* Replays a PMI-1 workload (a .pmitrace file, format in sim/workloads/README.md) over
 * PMI_FD, as one rank of the job: the same conversation the simulator's ranks have, spoken
 * to a real server (libi-mpiexec, mpiexec.hydra), so the simulated workload can be checked
 * against a real launcher and timed there.
 *
 *   pmi_replay TRACE          (or PMI_REPLAY_TRACE=TRACE pmi_replay)
 *
 * Placeholders are substituted, conditions evaluated and repeated lines expanded for this
 * rank; every answer's cmd= must be the expected one and its rc= 0 (or non-zero where the
 * trace's "<" line says so). The node map comes from the answer to the trace's own get of
 * PMI_process_mapping (what MPICH reads); a singleton job is one node; if the trace needs
 * the map before asking for it, one extra get is sent. Prints "rank R of N ok REQUESTS" and
 * exits 0, or prints one line naming the first mismatch and exits 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#define PMI_RAW_NAME "pmi_replay"
#define PMI_RAW_BUF 65536
#include "pmi_raw.h"

enum kind { ONE, PEERS, LOCAL, LEADERS, SLICE };

struct item {
    int lineno;
    char *conds;      /* comma-separated conditions, or NULL */
    enum kind kind;
    char *req;        /* request template */
    char *want_cmd;   /* from the following "<" line, or NULL */
    int want_fail;    /* that "<" line carries a non-zero rc (-1: rc=*, any rc) */
};

static int rank, size;
static char kvsname[1024], appnum[64];
static int have_kvsname, have_appnum;
static int *node_of;  /* node index of each rank, NULL until known */
static int nnodes;     /* 1 + largest node index */
static long requests;

static void fail_at(int lineno, const char *what, const char *detail)
{
    fprintf(stderr, "pmi_replay: rank %d: trace line %d: %s: %.300s\n", rank, lineno, what,
            detail ? detail : "");
    exit(1);
}

/* Node map from a PMI_process_mapping value: (vector,(first,count,per_node),...), blocks
 * of consecutive ranks, the list repeated until every rank has a node. */
static void parse_mapping(const char *v, int lineno)
{
    int first[256], count[256], per[256], n = 0;
    const char *p = strstr(v, "vector");
    if (!p)
        fail_at(lineno, "PMI_process_mapping is not a vector", v);
    p += 6;
    while ((p = strchr(p, '(')) != NULL && n < 256) {
        if (sscanf(p, "(%d,%d,%d)", &first[n], &count[n], &per[n]) != 3)
            fail_at(lineno, "bad PMI_process_mapping", v);
        if (first[n] < 0 || count[n] < 0 || per[n] < 0)
            fail_at(lineno, "bad PMI_process_mapping", v);
        n++;
        p++;
    }
    node_of = calloc((size_t)size, sizeof *node_of);
    if (!node_of)
        fail_at(lineno, "out of memory", NULL);
    int r = 0;
    while (r < size) {
        int before = r;
        for (int b = 0; b < n && r < size; b++)
            for (int j = 0; j < count[b] && r < size; j++)
                for (int k = 0; k < per[b] && r < size; k++)
                    node_of[r++] = first[b] + j;
        if (r == before)
            fail_at(lineno, "PMI_process_mapping maps no rank", v);
    }
    nnodes = 0;
    for (r = 0; r < size; r++)
        if (node_of[r] + 1 > nnodes)
            nnodes = node_of[r] + 1;
}

static void need_topology(int lineno);

/* First rank on node n, or -1. */
static int leader_of(int n)
{
    for (int r = 0; r < size; r++)
        if (node_of[r] == n)
            return r;
    return -1;
}

static int local_size(void)
{
    int c = 0;
    for (int r = 0; r < size; r++)
        c += node_of[r] == node_of[rank];
    return c;
}

static int node_count(void)
{
    int c = 0;
    for (int n = 0; n < nnodes; n++)
        c += leader_of(n) >= 0;
    return c;
}

static int cond_holds(const char *c, int lineno)
{
    int neg = 0, v;
    if (*c == '!') {
        neg = 1;
        c++;
    }
    if (strcmp(c, "size>1") == 0)
        return neg ? size <= 1 : size > 1;
    if (strcmp(c, "leader") && strcmp(c, "local>1") && strcmp(c, "nodes>1") &&
        strcmp(c, "size>nodes"))
        fail_at(lineno, "unknown condition", c);
    need_topology(lineno);
    if (strcmp(c, "leader") == 0)
        v = leader_of(node_of[rank]) == rank;
    else if (strcmp(c, "local>1") == 0)
        v = local_size() > 1;
    else if (strcmp(c, "nodes>1") == 0)
        v = node_count() > 1;
    else
        v = size > node_count();
    return neg ? !v : v;
}

static int conds_hold(const char *conds, int lineno)
{
    if (!conds)
        return 1;
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s", conds);
    for (char *save = NULL, *c = strtok_r(tmp, ",", &save); c; c = strtok_r(NULL, ",", &save))
        if (!cond_holds(c, lineno))
            return 0;
    return 1;
}

/* The answer's command for a request, by PMI-1; NULL when there is none. */
static const char *answer_cmd(const char *cmd)
{
    static const char *pairs[][2] = {
        {"init", "response_to_init"},   {"get_maxes", "maxes"},
        {"get_appnum", "appnum"},       {"get_my_kvsname", "my_kvsname"},
        {"get_universe_size", "universe_size"}, {"put", "put_result"},
        {"get", "get_result"},          {"barrier_in", "barrier_out"},
        {"finalize", "finalize_ack"},   {"publish_name", "publish_result"},
        {"unpublish_name", "unpublish_result"}, {"lookup_name", "lookup_result"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        if (strcmp(cmd, pairs[i][0]) == 0)
            return pairs[i][1];
    return NULL;
}

/* The value of "cmd=" in a line, copied into out. */
static void cmd_of(const char *line, char *out, size_t cap)
{
    const char *c = field(line, "cmd");
    if (!c) {
        out[0] = 0;
        return;
    }
    snprintf(out, cap, "%.*s", (int)strcspn(c, " "), c);
}

/* Substitute the placeholders of tmpl into out. */
static void expand(const char *tmpl, int peer, char *out, size_t cap, int lineno)
{
    size_t o = 0;
    for (const char *p = tmpl; *p;) {
        char rep[1024];
        rep[0] = 0;
        if (*p != '{') {
            if (o + 1 >= cap)
                fail_at(lineno, "request too long", tmpl);
            out[o++] = *p++;
            continue;
        }
        const char *end = strchr(p, '}');
        if (!end)
            fail_at(lineno, "unterminated placeholder", p);
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(end - p - 1), p + 1);
        if (strcmp(name, "rank") == 0) {
            snprintf(rep, sizeof rep, "%d", rank);
        } else if (strcmp(name, "size") == 0) {
            snprintf(rep, sizeof rep, "%d", size);
        } else if (strcmp(name, "kvsname") == 0) {
            if (!have_kvsname)
                fail_at(lineno, "{kvsname} before get_my_kvsname", tmpl);
            snprintf(rep, sizeof rep, "%s", kvsname);
        } else if (strcmp(name, "appnum") == 0) {
            if (!have_appnum)
                fail_at(lineno, "{appnum} before get_appnum", tmpl);
            snprintf(rep, sizeof rep, "%s", appnum);
        } else if (strcmp(name, "peer") == 0) {
            if (peer < 0)
                fail_at(lineno, "{peer} in a line that is not repeated", tmpl);
            snprintf(rep, sizeof rep, "%d", peer);
        } else if (strcmp(name, "node") == 0) {
            need_topology(lineno);
            snprintf(rep, sizeof rep, "%d", node_of[rank]);
        } else if (strcmp(name, "leader") == 0) {
            need_topology(lineno);
            snprintf(rep, sizeof rep, "%d", leader_of(node_of[rank]));
        } else if (strncmp(name, "fill:", 5) == 0) {
            long n = strtol(name + 5, NULL, 10);
            static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
            if (n < 0 || o + (size_t)n + 1 >= cap)
                fail_at(lineno, "bad fill length", name);
            for (long i = 0; i < n; i++)
                out[o++] = digits[(rank + i) % 36];
        } else {
            fail_at(lineno, "unknown placeholder", name);
        }
        size_t l = strlen(rep);
        if (o + l + 1 >= cap)
            fail_at(lineno, "request too long", tmpl);
        memcpy(out + o, rep, l);
        o += l;
        p = end + 1;
    }
    out[o] = 0;
}

/* Send one request and check its answer (if the command has one). */
static void transact(const char *req, const char *want_cmd, int want_fail, int lineno)
{
    static char line[PMI_RAW_BUF];
    char cmd[64], got[64], out[PMI_RAW_BUF + 2];
    cmd_of(req, cmd, sizeof cmd);
    if (!cmd[0])
        fail_at(lineno, "request without cmd=", req);
    snprintf(out, sizeof out, "%s\n", req);
    send_line(out);
    requests++;
    const char *expect = want_cmd ? want_cmd : answer_cmd(cmd);
    if (!expect)
        return; /* abort and the like: no answer */
    recv_line(line, sizeof line);
    cmd_of(line, got, sizeof got);
    if (strcmp(got, expect) != 0)
        fail_at(lineno, "unexpected answer", line);
    const char *rc = field(line, "rc");
    if (want_fail < 0) {
        /* rc=*: either answer */
    } else if (want_fail) {
        if (!rc || atoi(rc) == 0)
            fail_at(lineno, "answer should have failed", line);
    } else if (rc && atoi(rc) != 0) {
        fail_at(lineno, "answer with rc != 0", line);
    }
    if (strcmp(cmd, "get_my_kvsname") == 0) {
        const char *k = field(line, "kvsname");
        if (!k)
            fail_at(lineno, "no kvsname in answer", line);
        snprintf(kvsname, sizeof kvsname, "%.*s", (int)strcspn(k, " "), k);
        have_kvsname = 1;
    } else if (strcmp(cmd, "get_appnum") == 0) {
        const char *a = field(line, "appnum");
        if (!a)
            fail_at(lineno, "no appnum in answer", line);
        snprintf(appnum, sizeof appnum, "%.*s", (int)strcspn(a, " "), a);
        have_appnum = 1;
    } else if (strcmp(cmd, "get") == 0 && !node_of) {
        const char *k = field(req, "key");
        if (k && strncmp(k, "PMI_process_mapping", 19) == 0 && (k[19] == 0 || k[19] == ' ')) {
            const char *v = field(line, "value");
            if (!v)
                fail_at(lineno, "no value in answer", line);
            parse_mapping(v, lineno);
        }
    }
}

static void need_topology(int lineno)
{
    if (node_of)
        return;
    if (size == 1) {
        node_of = calloc(1, sizeof *node_of);
        if (!node_of)
            fail_at(lineno, "out of memory", NULL);
        nnodes = 1;
        return;
    }
    if (!have_kvsname)
        fail_at(lineno, "node map needed before get_my_kvsname", NULL);
    char req[1200];
    snprintf(req, sizeof req, "cmd=get kvsname=%s key=PMI_process_mapping", kvsname);
    transact(req, NULL, 0, lineno);
    if (!node_of)
        fail_at(lineno, "no node map", NULL);
}

static void play(const struct item *it)
{
    static char req[PMI_RAW_BUF];
    if (!conds_hold(it->conds, it->lineno))
        return;
    if (it->kind == ONE) {
        expand(it->req, -1, req, sizeof req, it->lineno);
        transact(req, it->want_cmd, it->want_fail, it->lineno);
        return;
    }
    if (it->kind != PEERS)
        need_topology(it->lineno);
    int me = node_of ? node_of[rank] : 0;
    if (it->kind == LEADERS) {
        for (int i = 1; i < nnodes; i++) {
            int l = leader_of((me + i) % nnodes);
            if (l < 0)
                continue;
            expand(it->req, l, req, sizeof req, it->lineno);
            transact(req, it->want_cmd, it->want_fail, it->lineno);
        }
        return;
    }
    if (it->kind == SLICE) {
        int L = local_size(), l = 0;
        for (int r = 0; r < rank; r++)
            l += node_of[r] == me;
        int c = (size + L - 1) / L, end = (l + 1) * c < size ? (l + 1) * c : size;
        for (int p = l * c; p < end; p++) {
            expand(it->req, p, req, sizeof req, it->lineno);
            transact(req, it->want_cmd, it->want_fail, it->lineno);
        }
        return;
    }
    for (int i = 1; i < size; i++) {
        int p = (rank + i) % size;
        if (it->kind == LOCAL && node_of[p] != me)
            continue;
        expand(it->req, p, req, sizeof req, it->lineno);
        transact(req, it->want_cmd, it->want_fail, it->lineno);
    }
}

/* Parse the trace into items; a "<" line belongs to the item before it. */
static struct item *load(const char *path, int *count)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "pmi_replay: cannot open %s\n", path);
        exit(1);
    }
    struct item *items = NULL;
    int n = 0, cap = 0, lineno = 0;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    while ((len = getline(&line, &lcap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = 0;
        char *p = line;
        if (!*p || *p == '#')
            continue;
        if (*p == '<') {
            if (n == 0)
                fail_at(lineno, "answer line before any request", line);
            char c[64];
            cmd_of(p + 1, c, sizeof c);
            if (!c[0])
                fail_at(lineno, "answer line without cmd=", line);
            items[n - 1].want_cmd = strdup(c);
            const char *rc = field(p + 1, "rc");
            items[n - 1].want_fail = (rc && rc[0] == '*') ? -1 : (rc && atoi(rc) != 0);
            continue;
        }
        struct item it = {lineno, NULL, ONE, NULL, NULL, 0};
        if (*p == '?') {
            size_t w = strcspn(p, " ");
            if (!p[w])
                fail_at(lineno, "condition without a line", line);
            it.conds = strndup(p + 1, w - 1);
            p += w + 1;
        }
        static const struct { const char *word; enum kind kind; } kinds[] = {
            {">peers ", PEERS}, {">local ", LOCAL}, {">leaders ", LEADERS},
            {">slice ", SLICE}, {"> ", ONE},
        };
        size_t k;
        for (k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
            if (strncmp(p, kinds[k].word, strlen(kinds[k].word)) == 0)
                break;
        if (k == sizeof kinds / sizeof kinds[0])
            fail_at(lineno, "not a trace line", line);
        it.kind = kinds[k].kind;
        it.req = strdup(p + strlen(kinds[k].word));
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            items = realloc(items, (size_t)cap * sizeof *items);
            if (!items)
                fail_at(lineno, "out of memory", NULL);
        }
        items[n++] = it;
    }
    free(line);
    fclose(f);
    *count = n;
    return items;
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : getenv("PMI_REPLAY_TRACE");
    if (!path) {
        fprintf(stderr, "usage: pmi_replay TRACE (or PMI_REPLAY_TRACE=TRACE)\n");
        return 2;
    }
    pmi_env(&rank, &size);
    int n;
    struct item *items = load(path, &n);
    for (int i = 0; i < n; i++)
        play(&items[i]);
    printf("rank %d of %d ok %ld\n", rank, size, requests);
    return 0;
}

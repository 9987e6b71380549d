/* A STAT-like stack trace tool, daemon side (one per host of the job, started by stat_fe
 * with LIBI_fe_attachAndLaunch): collects the call stack of every thread of each rank of its
 * host (LIBI_getMyProctab) with gdb, sends them to the master in one LIBI_gatherv; the
 * master merges every rank's call paths into a call-prefix tree (each node a function and
 * the set of ranks whose stacks pass through it), and sends it to the front end as text.
 *
 *   stat_daemon [-t SECONDS] [-j N] [-g GDB]
 *     -t   how long gdb may take for one rank before it is ended (default 20)
 *     -j   how many gdb run at once on this host (default 4)
 *     -g   the debugger (default: gdb on PATH)
 *
 * A rank that cannot be traced (not running, gone, already traced by another tool, gdb
 * missing or too slow) is reported with the reason; the others are traced regardless.
 *
 * What a daemon sends the master, one line each (frames outermost first, tab-separated):
 *   T RANK<TAB>main<TAB>work<TAB>wait_here<TAB>pause     one thread's call path
 *   X RANK<TAB>why                                       the rank could not be traced */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <libi.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int die(const char *what, int rc) {
    fprintf(stderr, "stat_daemon: %s: %s: %s\n", what, LIBI_rcName(rc), LIBI_errorString());
    return 1;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* ---- a growing text buffer ---- */
typedef struct {
    char *p;
    size_t len, cap;
} buf_t;

static void buf_add(buf_t *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void buf_printf(buf_t *b, const char *fmt, ...) {
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof tmp) n = sizeof tmp - 1;
    buf_add(b, tmp, (size_t)n);
}

/* ---- collecting: one gdb per rank, at most `jobs` at a time, each with a deadline ---- */
typedef struct {
    int rank, pid;
    pid_t gdb;     /* 0: not started */
    int fd;        /* gdb's stdout and stderr; -1 once closed */
    buf_t out;
    double deadline, killed_at;
    int timed_out, exit_status, done;
} trace_t;

static const char *gdb = "gdb";

static void start_gdb(trace_t *t, double timeout) {
    int p[2];
    t->deadline = now() + timeout;
    if (pipe2(p, O_CLOEXEC) != 0) {
        t->done = 1;
        t->exit_status = -1;
        return;
    }
    char pid[32];
    snprintf(pid, sizeof pid, "%d", t->pid);
    pid_t c = fork();
    if (c == 0) {
        setpgid(0, 0); /* a timeout ends gdb and anything it started */
        dup2(p[1], 1);
        dup2(p[1], 2);
        int null = open("/dev/null", O_RDONLY);
        if (null >= 0) dup2(null, 0);
        setenv("DEBUGINFOD_URLS", "", 1); /* never ask a server for symbols */
        execlp(gdb, gdb, "-batch", "-nx", "-p", pid, "-ex", "thread apply all bt", (char *)NULL);
        dprintf(1, "could not run %s: %s\n", gdb, strerror(errno));
        _exit(127);
    }
    close(p[1]);
    if (c < 0) {
        close(p[0]);
        t->done = 1;
        t->exit_status = -1;
        return;
    }
    t->gdb = c;
    t->fd = p[0];
}

static void collect(trace_t *t, int n, double timeout, int jobs) {
    int next = 0, running = 0;
    struct pollfd *pf = calloc((size_t)n + 1, sizeof *pf);
    int *which = calloc((size_t)n + 1, sizeof *which);
    for (;;) {
        while (running < jobs && next < n) {
            if (!t[next].done) {
                start_gdb(&t[next], timeout);
                if (!t[next].done) running++;
            }
            next++;
        }
        if (running == 0) break;
        int k = 0;
        double wake = now() + 60;
        for (int i = 0; i < next; i++) {
            if (t[i].gdb <= 0 || t[i].done) continue;
            if (t[i].fd >= 0) {
                pf[k] = (struct pollfd){t[i].fd, POLLIN, 0};
                which[k++] = i;
            }
            double d = t[i].killed_at > 0 ? t[i].killed_at + 2 : t[i].deadline;
            if (d < wake) wake = d;
        }
        double ms = (wake - now()) * 1000;
        poll(pf, (nfds_t)k, ms < 0 ? 0 : ms > 1000 ? 1000 : (int)ms + 1);
        for (int j = 0; j < k; j++) {
            trace_t *x = &t[which[j]];
            if (!(pf[j].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            char chunk[4096];
            ssize_t r = read(x->fd, chunk, sizeof chunk);
            if (r > 0) {
                if (x->out.len < (16u << 20)) buf_add(&x->out, chunk, (size_t)r);
            } else if (r == 0 || errno != EINTR) {
                close(x->fd);
                x->fd = -1;
            }
        }
        double t_now = now();
        for (int i = 0; i < next; i++) {
            trace_t *x = &t[i];
            if (x->gdb <= 0 || x->done) continue;
            int st;
            pid_t w = x->fd < 0 ? waitpid(x->gdb, &st, 0) : waitpid(x->gdb, &st, WNOHANG);
            if (w == x->gdb) {
                x->exit_status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
                x->done = 1;
                if (x->fd >= 0) {
                    /* whatever gdb left in the pipe: read it to its end (a child of gdb still
                     * holding the pipe is ended with gdb's process group) */
                    kill(-x->gdb, SIGKILL);
                    char chunk[4096];
                    ssize_t r;
                    while ((r = read(x->fd, chunk, sizeof chunk)) > 0)
                        if (x->out.len < (16u << 20)) buf_add(&x->out, chunk, (size_t)r);
                    close(x->fd);
                    x->fd = -1;
                }
                running--;
            } else if (x->killed_at == 0 && t_now >= x->deadline) {
                /* gdb detaches from the rank when it is told to quit (SIGTERM); SIGKILL later */
                x->timed_out = 1;
                x->killed_at = t_now;
                kill(-x->gdb, SIGTERM);
            } else if (x->killed_at > 0 && t_now >= x->killed_at + 2) {
                kill(-x->gdb, SIGKILL);
            }
        }
    }
    free(pf);
    free(which);
}

/* The function of one gdb frame line ("#3  0x... in work (r=1) at t.c:5", "#0  main () at
 * t.c:6"): the name before " (", after " in " when gdb gives the address. */
static int frame_name(const char *line, char *name, size_t cap) {
    if (line[0] != '#') return 0;
    const char *p = line + 1;
    while (*p >= '0' && *p <= '9') p++;
    while (*p == ' ') p++;
    if (strncmp(p, "0x", 2) == 0) {
        const char *in = strstr(p, " in ");
        if (!in) return 0;
        p = in + 4;
    }
    const char *end = strstr(p, " (");
    size_t n = end ? (size_t)(end - p) : strcspn(p, " \n");
    if (n == 0) return 0;
    if (n >= cap) n = cap - 1;
    memcpy(name, p, n);
    name[n] = 0;
    for (char *c = name; *c; c++)
        if (*c == '\t' || *c == '\n') *c = ' ';
    return 1;
}

/* One rank's gdb output as lines for the master: one "T" line per thread, or one "X" line
 * saying why there is no stack. */
static void describe(const trace_t *t, double timeout, buf_t *msg) {
    if (t->pid <= 0) {
        buf_printf(msg, "X %d\tnot running\n", t->rank);
        return;
    }
    int threads = 0;
    char *text = t->out.p ? t->out.p : "";
    /* frames come innermost first: collect a thread's, then emit them reversed */
    char (*frames)[256] = NULL;
    int nframes = 0, capframes = 0;
    char *save = NULL, *copy = strdup(text);
    const char *last = "";
    for (char *line = strtok_r(copy, "\n", &save);; line = strtok_r(NULL, "\n", &save)) {
        int thread_start = line && strncmp(line, "Thread ", 7) == 0;
        if ((!line || thread_start) && nframes > 0) {
            buf_printf(msg, "T %d", t->rank);
            for (int i = nframes - 1; i >= 0; i--) {
                buf_add(msg, "\t", 1);
                buf_add(msg, frames[i], strlen(frames[i]));
            }
            buf_add(msg, "\n", 1);
            threads++;
            nframes = 0;
        }
        if (!line) break;
        char name[256];
        if (frame_name(line, name, sizeof name)) {
            if (nframes == capframes) {
                capframes = capframes ? capframes * 2 : 64;
                frames = realloc(frames, (size_t)capframes * sizeof *frames);
                if (!frames) abort();
            }
            memcpy(frames[nframes++], name, sizeof name);
        } else if (*line && !thread_start && line[0] != '[') {
            last = line; /* gdb's last word, if no stack comes */
        }
    }
    if (threads == 0) {
        char why[300];
        if (t->timed_out)
            snprintf(why, sizeof why, "gdb took more than %g s (ended)", timeout);
        else if (kill(t->pid, 0) != 0 && errno == ESRCH)
            snprintf(why, sizeof why, "the process is gone");
        else if (t->exit_status == 127)
            snprintf(why, sizeof why, "%s", last);
        else if (strstr(text, "already traced"))
            snprintf(why, sizeof why, "already traced by another process (%s)", last);
        else if (*last)
            snprintf(why, sizeof why, "gdb: %s", last);
        else
            snprintf(why, sizeof why, "gdb gave no stack (exit status %d)", t->exit_status);
        for (char *c = why; *c; c++)
            if (*c == '\t') *c = ' ';
        buf_printf(msg, "X %d\t%s\n", t->rank, why);
    }
    free(frames);
    free(copy);
}

/* ---- merging (the master): the call-prefix tree ---- */
typedef struct node {
    char *name;
    unsigned char *ranks; /* a bit per rank */
    int first;            /* lowest rank in the set: children print in this order */
    struct node **kids;
    int nkids, capkids;
} node_t;

static int nbits; /* ranks 0..nbits-1 */

static node_t *new_node(const char *name) {
    node_t *n = calloc(1, sizeof *n);
    n->name = strdup(name);
    n->ranks = calloc((size_t)nbits / 8 + 1, 1);
    n->first = -1;
    return n;
}

static void add_rank(node_t *n, int rank) {
    n->ranks[rank / 8] |= (unsigned char)(1u << (rank % 8));
    if (n->first < 0 || rank < n->first) n->first = rank;
}

static node_t *child(node_t *n, const char *name) {
    for (int i = 0; i < n->nkids; i++)
        if (strcmp(n->kids[i]->name, name) == 0) return n->kids[i];
    if (n->nkids == n->capkids) {
        n->capkids = n->capkids ? n->capkids * 2 : 4;
        n->kids = realloc(n->kids, (size_t)n->capkids * sizeof *n->kids);
        if (!n->kids) abort();
    }
    return n->kids[n->nkids++] = new_node(name);
}

static int has(const unsigned char *set, int r) {
    return (set[r / 8] >> (r % 8)) & 1;
}

/* "[0-3,5]" and the count */
static int rank_list(const unsigned char *set, buf_t *b) {
    int count = 0;
    buf_add(b, "[", 1);
    for (int r = 0; r < nbits; r++) {
        if (!has(set, r)) continue;
        int e = r;
        while (e + 1 < nbits && has(set, e + 1)) e++;
        if (count) buf_add(b, ",", 1);
        if (e > r) buf_printf(b, "%d-%d", r, e);
        else buf_printf(b, "%d", r);
        count += e - r + 1;
        r = e;
    }
    buf_add(b, "]", 1);
    return count;
}

static int by_first(const void *a, const void *b) {
    const node_t *x = *(node_t *const *)a, *y = *(node_t *const *)b;
    if (x->first != y->first) return x->first < y->first ? -1 : 1;
    return strcmp(x->name, y->name);
}

static void print_tree(node_t *n, int depth, buf_t *out) {
    qsort(n->kids, (size_t)n->nkids, sizeof *n->kids, by_first);
    for (int i = 0; i < n->nkids; i++) {
        node_t *k = n->kids[i];
        for (int d = 0; d < depth; d++) buf_add(out, "  ", 2);
        buf_add(out, k->name, strlen(k->name));
        buf_add(out, " ", 1);
        rank_list(k->ranks, out);
        buf_add(out, "\n", 1);
        print_tree(k, depth + 1, out);
    }
}

/* The master's report: a summary line, the tree, then the ranks not traced by reason. */
static void merge(char *all, size_t len, int daemons, buf_t *out) {
    nbits = 0;
    for (char *p = all; p < all + len;) {
        char *eol = memchr(p, '\n', (size_t)(all + len - p));
        if (!eol) break;
        int r = atoi(p + 2);
        if (r + 1 > nbits) nbits = r + 1;
        p = eol + 1;
    }
    node_t *root = new_node("");
    unsigned char *seen = calloc((size_t)nbits / 8 + 1, 1), *traced = calloc((size_t)nbits / 8 + 1, 1);
    node_t *why = new_node(""); /* children: reasons, each with its ranks */
    for (char *p = all; p < all + len;) {
        char *eol = memchr(p, '\n', (size_t)(all + len - p));
        if (!eol) break;
        *eol = 0;
        int r = atoi(p + 2);
        char *rest = strchr(p, '\t');
        if (r >= 0 && rest) {
            seen[r / 8] |= (unsigned char)(1u << (r % 8));
            if (p[0] == 'T') {
                traced[r / 8] |= (unsigned char)(1u << (r % 8));
                node_t *n = root;
                for (char *f = rest + 1; f;) {
                    char *tab = strchr(f, '\t');
                    if (tab) *tab = 0;
                    n = child(n, f);
                    add_rank(n, r);
                    f = tab ? tab + 1 : NULL;
                }
            } else {
                add_rank(child(why, rest + 1), r);
            }
        }
        p = eol + 1;
    }
    buf_t s = {0}, t = {0};
    int nseen = rank_list(seen, &s), ntraced = rank_list(traced, &t);
    buf_printf(out, "stat: %d daemons, %d ranks %s, %d traced %s, %d not traced\n", daemons, nseen, s.p,
               ntraced, t.p, nseen - ntraced);
    free(s.p);
    free(t.p);
    print_tree(root, 0, out);
    qsort(why->kids, (size_t)why->nkids, sizeof *why->kids, by_first);
    for (int i = 0; i < why->nkids; i++) {
        buf_add(out, "not traced ", 11);
        rank_list(why->kids[i]->ranks, out);
        buf_printf(out, ": %s\n", why->kids[i]->name);
    }
}

int main(int argc, char **argv) {
    int rc = LIBI_init(LIBI_VERSION, &argc, &argv);
    if (rc != LIBI_OK) return die("LIBI_init", rc);
    double timeout = 20;
    int jobs = 4, opt;
    while ((opt = getopt(argc, argv, "t:j:g:")) != -1) {
        if (opt == 't') timeout = atof(optarg);
        else if (opt == 'j') jobs = atoi(optarg);
        else if (opt == 'g') gdb = optarg;
    }
    if (jobs < 1) jobs = 1;
    int size, master = LIBI_amMaster() == LIBI_YES;
    LIBI_getSize(&size);

    libi_proc_desc_t *tab = NULL;
    int n = 0;
    if ((rc = LIBI_getMyProctab(&tab, &n)) != LIBI_OK) return die("LIBI_getMyProctab", rc);
    trace_t *t = calloc((size_t)n + 1, sizeof *t);
    for (int i = 0; i < n; i++) {
        t[i] = (trace_t){.rank = tab[i].rank, .pid = tab[i].pid, .fd = -1};
        if (tab[i].pid <= 0) t[i].done = 1;
    }
    free(tab);
    collect(t, n, timeout, jobs);
    buf_t mine = {0};
    for (int i = 0; i < n; i++) {
        describe(&t[i], timeout, &mine);
        free(t[i].out.p);
    }
    free(t);

    /* every daemon's lines reach the master, whatever their size */
    void *all = NULL;
    int *counts = master ? calloc((size_t)size, sizeof *counts) : NULL;
    if ((rc = LIBI_gatherv(mine.p ? mine.p : "", (int)mine.len, &all, counts)) != LIBI_OK)
        return die("LIBI_gatherv", rc);
    free(mine.p);
    if (master) {
        size_t total = 0;
        for (int i = 0; i < size; i++) total += (size_t)counts[i];
        buf_t report = {0};
        merge(all, total, size, &report);
        if ((rc = LIBI_sendUsrData(report.p, (int)report.len)) != LIBI_OK) return die("LIBI_sendUsrData", rc);
        free(report.p);
    }
    free(all);
    free(counts);
    return LIBI_finalize() == LIBI_OK ? 0 : 1;
}

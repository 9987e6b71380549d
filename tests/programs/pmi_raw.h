/* A raw PMI-1 client's plumbing, shared by the test programs that speak the wire protocol
 * directly over PMI_FD (no MPI): one request line out, one reply line in.
 * Define PMI_RAW_NAME (the program's name, for messages) before including it; PMI_RAW_BUF
 * sets the reply buffer (default 8192 bytes). */
#ifndef PMI_RAW_H
#define PMI_RAW_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef PMI_RAW_BUF
#define PMI_RAW_BUF 8192
#endif

static int fd;
static char buf[PMI_RAW_BUF];
static size_t have;

/* Name the failure (and the line it concerns) and exit 1. */
static void die(const char *what, const char *line)
{
    fprintf(stderr, PMI_RAW_NAME ": %s: %.200s\n", what, line ? line : "");
    exit(1);
}

static void send_line(const char *line)
{
    size_t len = strlen(line), off = 0;
    while (off < len) {
        ssize_t w = write(fd, line + off, len - off);
        if (w <= 0)
            die("write failed", line);
        off += (size_t)w;
    }
}

/* Read one reply line (without '\n') into out. */
static void recv_line(char *out, size_t cap)
{
    for (;;) {
        char *nl = memchr(buf, '\n', have);
        if (nl) {
            size_t n = (size_t)(nl - buf);
            if (n >= cap)
                die("reply too long", NULL);
            memcpy(out, buf, n);
            out[n] = 0;
            memmove(buf, nl + 1, have - n - 1);
            have -= n + 1;
            return;
        }
        if (have == sizeof buf)
            die("reply too long", NULL);
        ssize_t r = read(fd, buf + have, sizeof(buf) - have);
        if (r <= 0)
            die("server closed the connection", NULL);
        have += (size_t)r;
    }
}

/* Value of key=... in a reply line ("value=" runs to end of line). */
static const char *field(const char *line, const char *key)
{
    size_t k = strlen(key);
    for (const char *p = line; (p = strstr(p, key)) != NULL; p++)
        if ((p == line || p[-1] == ' ') && p[k] == '=')
            return p + k + 1;
    return NULL;
}

/* Send a request; its reply must start with expect_cmd. */
static void call(const char *req, char *reply, size_t cap, const char *expect_cmd)
{
    send_line(req);
    recv_line(reply, cap);
    if (strncmp(reply, expect_cmd, strlen(expect_cmd)) != 0)
        die("unexpected reply", reply);
}

/* PMI_FD, PMI_RANK and PMI_SIZE from the environment (fd is set); exits naming what is
 * missing. */
static void pmi_env(int *rank, int *size)
{
    const char *e = getenv("PMI_FD");
    if (!e)
        die("PMI_FD not set", NULL);
    fd = atoi(e);
    *rank = atoi(getenv("PMI_RANK") ? getenv("PMI_RANK") : "-1");
    *size = atoi(getenv("PMI_SIZE") ? getenv("PMI_SIZE") : "0");
    if (*rank < 0 || *size < 1)
        die("PMI_RANK/PMI_SIZE not set", NULL);
}

/* PMI-1 init (rc must be 0), then this job's kvsname into kvs. */
static void pmi_init(char *kvs, size_t cap)
{
    char line[4096];
    call("cmd=init pmi_version=1 pmi_subversion=1\n", line, sizeof line, "cmd=response_to_init");
    const char *rc = field(line, "rc");
    if (!rc || atoi(rc) != 0)
        die("init failed", line);
    call("cmd=get_my_kvsname\n", line, sizeof line, "cmd=my_kvsname");
    const char *k = field(line, "kvsname");
    if (!k)
        die("no kvsname", line);
    snprintf(kvs, cap, "%.*s", (int)strcspn(k, " "), k);
}

#endif

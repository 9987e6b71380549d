/* into_cgroup DIR PROGRAM ARGS...: move this process into the cgroup DIR (v1 or v2: writes
 * its pid to DIR/cgroup.procs), then exec PROGRAM (searched in PATH). ci/bench.sh starts each
 * launcher and each rank through it: the launcher, so that nothing of the harness before it
 * is in the job's cgroup; a rank, so that its CPU from its first instruction of PROGRAM's
 * start-up on is accounted apart from the process manager that started it. What the process
 * manager spent creating the process (fork or clone, the child's work before exec) stays the
 * process manager's, and so does this program's own exec and move, which ci/bench.sh
 * measures and reports apart.
 *
 * That share is the harness's error, for either process manager alike, so it is kept small:
 * on x86-64 (ci/bench-lib.sh's build_into_cgroup) this is built without the C library
 * (-DINTO_CGROUP_NOLIBC -nostdlib -static: raw system calls, no start-up code), a 9 kB
 * program whose exec and move cost ~2 ms per 64 ranks here, against 4-9 ms for the same
 * program on static glibc (whose start-up alone, CPU feature detection by CPUID, traps to the
 * hypervisor). Elsewhere the C library version below is built. */

#if defined(INTO_CGROUP_NOLIBC) && defined(__x86_64__)

#include <fcntl.h>
#include <sys/syscall.h>

static long sys3(long n, long a, long b, long c)
{
    long r;
    __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
    return r;
}

static long sys4(long n, long a, long b, long c, long d)
{
    long r;
    register long r10 __asm__("r10") = d;
    __asm__ volatile("syscall"
                     : "=a"(r)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10)
                     : "rcx", "r11", "memory");
    return r;
}

static unsigned long len(const char *s)
{
    unsigned long n = 0;
    while (s[n])
        n++;
    return n;
}

/* "into_cgroup: WHAT: errno N\n" on stderr, then exit with CODE. */
static void die(const char *what, long err, int code)
{
    char num[24];
    int k = 0;
    unsigned long e = (unsigned long)(err < 0 ? -err : err);
    do {
        num[k++] = (char)('0' + e % 10);
        e /= 10;
    } while (e && k < 20);
    char msg[4200];
    unsigned long m = 0;
    const char *parts[] = {"into_cgroup: ", what, ": errno ", 0};
    for (int p = 0; parts[p]; p++)
        for (const char *s = parts[p]; *s && m < 4096; s++)
            msg[m++] = *s;
    while (k)
        msg[m++] = num[--k];
    msg[m++] = '\n';
    sys3(SYS_write, 2, (long)msg, (long)m);
    sys3(SYS_exit_group, code, 0, 0);
    __builtin_unreachable();
}

__attribute__((used)) void into_cgroup_main(long *sp)
{
    long argc = sp[0];
    char **argv = (char **)(sp + 1);
    char **envp = argv + argc + 1;
    if (argc < 3) {
        const char u[] = "usage: into_cgroup DIR PROGRAM [ARGS...]\n";
        sys3(SYS_write, 2, (long)u, sizeof u - 1);
        sys3(SYS_exit_group, 2, 0, 0);
    }
    static const char procs[] = "/cgroup.procs";
    char path[4096];
    unsigned long d = len(argv[1]);
    if (d + sizeof procs > sizeof path)
        die(argv[1], 36 /* ENAMETOOLONG */, 2);
    for (unsigned long i = 0; i < d; i++)
        path[i] = argv[1][i];
    for (unsigned long i = 0; i < sizeof procs; i++)
        path[d + i] = procs[i];
    long fd = sys4(SYS_openat, AT_FDCWD, (long)path, O_WRONLY | O_CLOEXEC, 0);
    if (fd < 0)
        die(path, fd, 126);
    char pid[24], rev[24];
    int n = 0, k = 0;
    long p = sys3(SYS_getpid, 0, 0, 0);
    do {
        rev[k++] = (char)('0' + p % 10);
        p /= 10;
    } while (p);
    while (k)
        pid[n++] = rev[--k];
    pid[n++] = '\n';
    long w = sys3(SYS_write, fd, (long)pid, n);
    if (w != n)
        die(path, w < 0 ? w : 5 /* EIO */, 126);
    sys3(SYS_close, fd, 0, 0);
    const char *prog = argv[2];
    long err = -2 /* ENOENT */;
    int slash = 0;
    for (const char *s = prog; *s; s++)
        slash |= *s == '/';
    if (slash) {
        err = sys3(SYS_execve, (long)prog, (long)(argv + 2), (long)envp);
    } else {
        /* As execvp: each directory of PATH in turn (default /bin:/usr/bin). */
        const char *dirs = "/bin:/usr/bin";
        for (char **e = envp; *e; e++)
            if ((*e)[0] == 'P' && (*e)[1] == 'A' && (*e)[2] == 'T' && (*e)[3] == 'H' && (*e)[4] == '=')
                dirs = *e + 5;
        unsigned long pl = len(prog);
        for (const char *s = dirs;;) {
            const char *end = s;
            while (*end && *end != ':')
                end++;
            unsigned long dl = (unsigned long)(end - s);
            if (dl + 1 + pl + 1 <= sizeof path) {
                unsigned long m = 0;
                for (const char *c = s; c < end; c++)
                    path[m++] = *c;
                if (dl == 0)
                    path[m++] = '.';
                path[m++] = '/';
                for (unsigned long i = 0; i <= pl; i++)
                    path[m++] = prog[i];
                long r = sys3(SYS_execve, (long)path, (long)(argv + 2), (long)envp);
                if (r == -13 /* EACCES */ || err != -13)
                    err = r;
            }
            if (!*end)
                break;
            s = end + 1;
        }
    }
    die(prog, err, 127);
}

__asm__(".globl _start\n"
        "_start:\n"
        "  mov %rsp, %rdi\n"
        "  and $-16, %rsp\n"
        "  call into_cgroup_main\n"
        "  hlt\n");

#else

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: into_cgroup DIR PROGRAM [ARGS...]\n");
        return 2;
    }
    char path[4096];
    if (snprintf(path, sizeof path, "%s/cgroup.procs", argv[1]) >= (int)sizeof path) {
        fprintf(stderr, "into_cgroup: %s: path too long\n", argv[1]);
        return 2;
    }
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "into_cgroup: %s: %s\n", path, strerror(errno));
        return 126;
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (write(fd, pid, (size_t)n) != n) {
        fprintf(stderr, "into_cgroup: %s: %s\n", path, strerror(errno));
        return 126;
    }
    close(fd);
    execvp(argv[2], argv + 2);
    fprintf(stderr, "into_cgroup: %s: %s\n", argv[2], strerror(errno));
    return 127;
}

#endif

/* A job for tests/stat_example.rs (compile with -g -O0): every rank waits in a known call
 * chain, main -> work -> wait_here -> pause() for even ranks and main -> work -> odd_path ->
 * pause() for odd ranks (its rank from PMI_RANK), until it is ended.
 *
 *   stat_target [HELD_RANK]   rank HELD_RANK first has a child of its own trace it
 *                             (PTRACE_SEIZE): no debugger can attach to it, the way a rank
 *                             already under another tool cannot be traced. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

/* The child traces its parent and passes every signal on, until the parent is gone. */
static void hold(void) {
    pid_t parent = getpid();
    int ready[2];
    if (pipe(ready) != 0) return;
    pid_t c = fork();
    if (c == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(ready[0]);
        if (getppid() != parent || ptrace(PTRACE_SEIZE, parent, NULL, NULL) != 0) _exit(1);
        (void)!write(ready[1], "x", 1);
        close(ready[1]);
        for (;;) {
            int st;
            if (waitpid(parent, &st, __WALL) < 0 || WIFEXITED(st) || WIFSIGNALED(st)) _exit(0);
            if (WIFSTOPPED(st)) ptrace(PTRACE_CONT, parent, NULL, (void *)(long)(st >> 16 ? 0 : WSTOPSIG(st)));
        }
    }
    close(ready[1]);
    char x;
    (void)!read(ready[0], &x, 1); /* traced from here on */
    close(ready[0]);
}

void wait_here(void) {
    for (;;) pause();
}

void odd_path(void) {
    for (;;) pause();
}

void work(int rank) {
    if (rank % 2) odd_path();
    else wait_here();
}

int main(int argc, char **argv) {
    const char *r = getenv("PMI_RANK");
    int rank = r ? atoi(r) : 0;
    if (argc > 1 && atoi(argv[1]) == rank) hold();
    work(rank);
    return 0;
}

/* ci/bench.sh targets: the CPU a process has used by the time its main() starts, as
 * getrusage(RUSAGE_SELF) sees it: the child's work between fork (or clone) and exec, done by
 * the code of whoever started it, then the exec of this (static) program. Prints
 * "pre_us N". Started 64 at a time by each process manager and by spawnfloor, it tells how
 * much of each process manager's own work a rank's self-report covers. */
#include <stdio.h>
#include <sys/resource.h>

int main(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 1;
    printf("pre_us %ld\n", (long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 +
                               ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
    return 0;
}

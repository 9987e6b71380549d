/* Rank 1 calls a different collective than everybody else: the job must fail naming it. */
#include <stdio.h>
#include "pmgr_collective_client.h"

int main(int argc, char **argv)
{
    int np, me, id;
    char buf[8] = "abcdefg";
    pmgr_init(&argc, &argv, &np, &me, &id);
    pmgr_open();
    if (me == 1)
        pmgr_bcast(buf, 8, 0);
    else
        pmgr_barrier();
    pmgr_close();
    pmgr_finalize();
    return 0;
}

/*
 * libi — PMGR_COLLECTIVE client library (protocol version 8).
 *
 * Call order: pmgr_init -> pmgr_open -> collectives (same order, root and size on every
 * rank) -> pmgr_close -> pmgr_finalize. Sizes are in bytes. Every collective goes through
 * the server named by MPIRUN_HOST/MPIRUN_PORT; with one rank (or without MPIRUN_RANK) no
 * connection is made and collectives copy locally. Functions return PMGR_SUCCESS or
 * PMGR_FAILURE (pmgr_abort: -1 when no server can be reached).
 */
#ifndef PMGR_COLLECTIVE_CLIENT_H
#define PMGR_COLLECTIVE_CLIENT_H

#include <stdint.h>
#include "pmgr_collective_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pmgr_ops { PMGR_SUM = 1, PMGR_MAX } pmgr_op;

/* Reads MPIRUN_RANK/NPROCS/ID/HOST/PORT; fills *np_p, *me_p, *id_p. argc/argv are untouched.
 * Invalid environment values print an error and exit(1). */
int pmgr_init(int *argc_p, char ***argv_p, int *np_p, int *me_p, int *id_p);

/* Connects to the server and hand-shakes. */
int pmgr_open(void);

/* Sends PMGR_CLOSE and closes the connection. */
int pmgr_close(void);

/* Releases the library's state. */
int pmgr_finalize(void);

/* printf-style message (at most 255 characters, '+' marks a cut) sent with code on a new
 * connection to the server. code >= 0 names a peer rank, negative is a user code.
 * Returns -1 if the server cannot be reached, else PMGR_SUCCESS. Does not exit. */
int pmgr_abort(int code, const char *fmt, ...);

/* All ranks synchronise. */
int pmgr_barrier(void);

/* root's sendcount bytes of buf are copied into buf on every rank. */
int pmgr_bcast(void *buf, int sendcount, int root);

/* root's recvbuf gets nprocs*sendcount bytes in rank order (others' recvbuf is unused). */
int pmgr_gather(void *sendbuf, int sendcount, void *recvbuf, int root);

/* root's sendbuf holds nprocs blocks of sendcount bytes; rank i gets block i in recvbuf. */
int pmgr_scatter(void *sendbuf, int sendcount, void *recvbuf, int root);

/* every rank's recvbuf gets nprocs*sendcount bytes in rank order. */
int pmgr_allgather(void *sendbuf, int sendcount, void *recvbuf);

/* block j (sendcount bytes) of sendbuf goes to rank j; block i of recvbuf came from rank i. */
int pmgr_alltoall(void *sendbuf, int sendcount, void *recvbuf);

/* Every rank's NUL-terminated string: *recvstr is an array of nprocs pointers into *recvbuf.
 * The caller frees both with free(). */
int pmgr_allgatherstr(char *sendstr, char ***recvstr, char **recvbuf);

/* *recvint = sum or maximum of every rank's *sendint. */
int pmgr_allreduce_int64t(int64_t *sendint, int64_t *recvint, pmgr_op op);

/* Concatenation of every rank's sendcount bytes into recvbuf (capacity recvcount bytes);
 * *written gets the total. Fails on every rank if the total exceeds recvcount. */
int pmgr_aggregate(const void *sendbuf, int64_t sendcount, void *recvbuf, int64_t recvcount,
                   int64_t *written);

#ifdef __cplusplus
}
#endif

#endif /* PMGR_COLLECTIVE_CLIENT_H */

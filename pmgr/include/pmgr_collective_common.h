/*
 * libi — PMGR_COLLECTIVE client library (protocol version 8): shared constants.
 * Link with -lpmgr_collective (libpmgr_collective.so, built by the pmgr-capi crate).
 */
#ifndef PMGR_COLLECTIVE_COMMON_H
#define PMGR_COLLECTIVE_COMMON_H

#ifdef __cplusplus
extern "C" {
#endif

/* Return codes. */
#define PMGR_SUCCESS 0
#define PMGR_FAILURE (!PMGR_SUCCESS)

/* Error codes of the socket helpers (kept for source compatibility; pmgr_errstr names them). */
#define PMGR_ERR_POLL                (-2)
#define PMGR_ERR_POLL_TIMEOUT        (-3)
#define PMGR_ERR_POLL_HANGUP         (-4)
#define PMGR_ERR_POLL_EVENT          (-5)
#define PMGR_ERR_POLL_INVALID_REQ    (-6)
#define PMGR_ERR_POLL_NOREAD         (-7)
#define PMGR_ERR_POLL_BAD_READ       (-8)
#define PMGR_ERR_WRITE_RETURNED_ZERO (-9)

/* Protocol version spoken to the server, and the opcodes of its packets. */
#define PMGR_COLLECTIVE 8

#define PMGR_OPEN      0
#define PMGR_CLOSE     1
#define PMGR_ABORT     2
#define PMGR_BARRIER   3
#define PMGR_BCAST     4
#define PMGR_GATHER    5
#define PMGR_SCATTER   6
#define PMGR_ALLGATHER 7
#define PMGR_ALLTOALL  8

/* A short description of a return/error code (static storage, never NULL). */
const char *pmgr_errstr(int rc);

#ifdef __cplusplus
}
#endif

#endif /* PMGR_COLLECTIVE_COMMON_H */

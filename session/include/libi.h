/* libi.h: the LIBI session API (C and C++), implemented by liblibi.so.
 *
 * A tool's front end creates sessions and launches their members on many hosts over the
 * libi agent tree; member rank 0 is the session's master. Every call returns a libi_rc_e;
 * on failure LIBI_errorString() gives a one-line message (per thread). Nothing calls exit().
 * See docs/session.md in the libi repository. */
#ifndef LIBI_H
#define LIBI_H

#ifdef __cplusplus
extern "C" {
#endif

#define LIBI_VERSION 1

typedef enum {
    LIBI_OK = 0,
    LIBI_YES,                  /* yes (LIBI_amMaster) */
    LIBI_NO,                   /* no */
    LIBI_NOTIMPL,              /* not implemented */
    LIBI_EINIT,                /* not initialized, initialized twice, not a member */
    LIBI_ELAUNCH,              /* the launch failed (the message says why) */
    LIBI_ESESS,                /* no such session, or it has ended */
    LIBI_EFRONTENDONLY,        /* a front-end-only call from a member */
    LIBI_ESESSALREADYLAUNCHED, /* the session was launched already */
    LIBI_EIO,                  /* a connection failed */
    LIBI_EHOSTDIST,            /* a host distribution is empty, or a host has 0 processes */
    LIBI_ESESSFAILED,          /* the session failed: a member died or an agent was lost */
    LIBI_EARG,                 /* a bad argument (NULL, negative, too long) */
    LIBI_ENOTMASTER            /* a master-only call from another member */
} libi_rc_e;

/* A session, from LIBI_fe_createSession. */
typedef int libi_sess_handle_t;

/* nproc processes on hostname; a list ends with next == NULL. */
typedef struct host_dist_t {
    const char *hostname;
    unsigned int nproc;
    const struct host_dist_t *next;
} host_dist_t;

/* Environment variables for the processes of one distribution (list, may be NULL). */
typedef struct libi_env_t {
    const char *name;
    const char *value;
    const struct libi_env_t *next;
} libi_env_t;

/* One process distribution. Several distributions of one session in one LIBI_fe_launch
 * are its images (MPMD); member ranks follow the order of the distributions. */
typedef struct proc_dist_req_t {
    libi_sess_handle_t sessionHandle;
    const char *proc_path;         /* the executable */
    const char *const *proc_argv;  /* its arguments after the executable, NULL-terminated
                                      (or NULL) */
    const host_dist_t *hd;         /* where */
    const libi_env_t *env;         /* extra environment (or NULL) */
} proc_dist_req_t;

/* ---- front end (the tool's own process) ---- */
libi_rc_e LIBI_fe_init(int ver);
libi_rc_e LIBI_fe_createSession(libi_sess_handle_t *sessionHandle);
/* Returns once every member of every session called LIBI_init, or with the first error
 * (sessions that did start go on). Launch options: see LIBI_MPIEXEC_ARGS in docs. */
libi_rc_e LIBI_fe_launch(const proc_dist_req_t *distributions, int nreq);
libi_rc_e LIBI_fe_getMaxMsgBufLen(int *msgbufmax);
libi_rc_e LIBI_fe_sendUsrData(libi_sess_handle_t sessionHandle, const void *msgbuf, int msgbuflen);
/* *msgbuf is malloc()ed: free() it. */
libi_rc_e LIBI_fe_recvUsrData(libi_sess_handle_t sessionHandle, void **msgbuf, int *msgbuflen);
libi_rc_e LIBI_fe_getHostlistSize(libi_sess_handle_t sessionHandle, unsigned int *size);
/* Tools next to a running libi-mpiexec job (its front end's pid, LaunchMON-style): its
 * process table in rank order, and one host distribution entry (nproc 1) per host of the
 * job, to launch one daemon per node. Each result is one malloc()ed block: free() it. */
typedef struct libi_proc_desc_t {
    int rank;
    int pid;                      /* 0: the rank is not running */
    const char *host_name;
    const char *executable_name;
} libi_proc_desc_t;
libi_rc_e LIBI_fe_getJobProcTable(int job_pid, libi_proc_desc_t **table, int *size);
libi_rc_e LIBI_fe_getJobHosts(int job_pid, host_dist_t **hd);
/* Waits (LIBI_FINALIZE_WAIT seconds, default 10) for every session to end, ends the rest. */
libi_rc_e LIBI_fe_finalize(void);

/* ---- members ---- */
libi_rc_e LIBI_init(int ver, int *argc, char ***argv);
libi_rc_e LIBI_finalize(void);
libi_rc_e LIBI_getMyRank(int *rank);
libi_rc_e LIBI_getSize(int *size);
libi_rc_e LIBI_amMaster(void);   /* LIBI_YES or LIBI_NO */
libi_rc_e LIBI_amIMaster(void);  /* the same */
libi_rc_e LIBI_barrier(void);

/* Collectives. Every member calls each one, with the same sizes (numbyte; the master's
 * counts for LIBI_scatterv). One collective moves at most LIBI_COLL_MAX bytes through a
 * member: the broadcast's numbyte; size * numbyte for scatter, gather and allgather; the sum
 * of the counts for gatherv and scatterv. A call over it, or with a bad argument (a negative
 * size, a NULL buffer for bytes), returns LIBI_EARG on every member before anything is sent
 * (LIBI_errorString() says why, the same everywhere), and the session goes on. A call of 0
 * bytes is a no-op that returns LIBI_OK and touches no buffer (NULL is fine). Sizes are
 * computed in size_t: totals over INT_MAX are refused as over the limit, never truncated. */
#define LIBI_COLL_MAX (256 * 1024 * 1024)
/* The master's numbyte bytes of buf reach every member's buf. */
libi_rc_e LIBI_broadcast(void *buf, int numbyte);
/* The master's sendbuf holds size * numbyte bytes; member i receives block i in recvbuf. */
libi_rc_e LIBI_scatter(const void *sendbuf, int numbyte, void *recvbuf);
/* Every member's numbyte bytes land in the master's recvbuf (size * numbyte, rank order). */
libi_rc_e LIBI_gather(const void *sendbuf, int numbyte, void *recvbuf);

/* Defined when the calls below exist (this libi.h and later). */
#define LIBI_VCOLL 1
/* Every member's numbyte bytes land in every member's recvbuf (size * numbyte, rank
 * order). */
libi_rc_e LIBI_allgather(const void *sendbuf, int numbyte, void *recvbuf);
/* Every member's sendcount bytes (a count of its own, 0 included) reach the master:
 * *recvbuf is malloc()ed (free() it; never NULL on success) and holds them in rank order;
 * recvcounts (the master's array of size ints) gets each member's count. Other members'
 * recvbuf and recvcounts are not used (may be NULL). A member's negative count or NULL
 * sendbuf (with a count), or the master's NULL recvbuf or recvcounts, is LIBI_EARG on
 * every member, naming the member. */
libi_rc_e LIBI_gatherv(const void *sendbuf, int sendcount, void **recvbuf, int *recvcounts);
/* The master's sendbuf holds sendcounts[i] bytes for member i (sendcounts: size ints), in
 * rank order; every member (the master too) gets its bytes in *recvbuf (malloc()ed: free()
 * it; never NULL on success) and their count in *recvcount. Other members' sendbuf and
 * sendcounts are not used (may be NULL). A negative count, or the master's NULL sendcounts
 * or sendbuf, is LIBI_EARG on every member; a member's own NULL recvbuf or recvcount is
 * LIBI_EARG on that member only (it takes part, its bytes are dropped). */
libi_rc_e LIBI_scatterv(const void *sendbuf, const int *sendcounts, void **recvbuf,
                        int *recvcount);
/* Master only: user data to and from the front end (*msgbuf malloc()ed: free() it). */
libi_rc_e LIBI_sendUsrData(const void *msgbuf, int msgbuflen);
libi_rc_e LIBI_recvUsrData(void **msgbuf, int *msgbuflen);

/* ---- both ---- */
const char *LIBI_errorString(void);
const char *LIBI_rcName(int rc);

#ifdef __cplusplus
}
#endif
#endif /* LIBI_H */

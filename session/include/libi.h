/* libi.h: the LIBI session API (C and C++), implemented by liblibi.so.
 *
 * A tool's front end creates sessions and launches their members on many hosts over the
 * libi agent tree; member rank 0 is the session's master. Every call returns a libi_rc_e;
 * on failure LIBI_errorString() gives a one-line message (per thread). Nothing calls exit().
 * See docs/session.md in the libi repository.
 *
 * Threads (front end): every LIBI_fe_* call may be made from any thread. No call holds a
 * lock of the library while it waits: calls on different sessions (launch, send, receive,
 * end) run at the same time, and on one session a send and a receive run at the same time
 * (a thread may wait in LIBI_fe_recvUsrData while another sends the message the master
 * waits for). Two sends to one session go one after the other, each message whole; two
 * receives on one session each get a different message. LIBI_fe_finalize may be called
 * while other threads wait in calls: they return (LIBI_ESESS, or the session's failure);
 * calls after it return LIBI_EINIT. Session handles are unique in the process (a handle of
 * a finalized front end names no session of a later one).
 * Threads (members): member calls are serialized by one lock of the library; a member
 * calls them from one thread at a time (a thread waiting in LIBI_recvUsrData holds up a
 * LIBI_sendUsrData of another thread).
 * A process between LIBI_init and LIBI_finalize is a member: its LIBI_fe_* calls return
 * LIBI_EFRONTENDONLY. */
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
/* Returns LIBI_OK once every member of every session called LIBI_init (the master tells
 * the front end so before any member may return from LIBI_init: a member that exits or
 * fails right after LIBI_init does not fail the launch; the session's next call returns
 * its failure). Else the first error (sessions that did start go on). Launch options: see
 * LIBI_MPIEXEC_ARGS in docs. */
libi_rc_e LIBI_fe_launch(const proc_dist_req_t *distributions, int nreq);
libi_rc_e LIBI_fe_getMaxMsgBufLen(int *msgbufmax);
libi_rc_e LIBI_fe_sendUsrData(libi_sess_handle_t sessionHandle, const void *msgbuf, int msgbuflen);
/* *msgbuf is malloc()ed: free() it. Every message the master sent before the session
 * ended is returned, in order, before the end (LIBI_ESESS, or LIBI_ESESSFAILED and why). */
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
/* Closes the front end's side of every master's connection (a master waiting in
 * LIBI_recvUsrData gets LIBI_ESESS at once), waits (LIBI_FINALIZE_WAIT seconds, default 10)
 * for every session to end, ends the rest. */
libi_rc_e LIBI_fe_finalize(void);

/* ---- members ---- */
libi_rc_e LIBI_init(int ver, int *argc, char ***argv);
libi_rc_e LIBI_finalize(void);
libi_rc_e LIBI_getMyRank(int *rank);
libi_rc_e LIBI_getSize(int *size);
libi_rc_e LIBI_amMaster(void);   /* LIBI_YES or LIBI_NO */
libi_rc_e LIBI_amIMaster(void);  /* the same */
libi_rc_e LIBI_barrier(void);
/* The master's numbyte bytes of buf reach every member's buf. */
libi_rc_e LIBI_broadcast(void *buf, int numbyte);
/* The master's sendbuf holds size * numbyte bytes; member i receives block i in recvbuf. */
libi_rc_e LIBI_scatter(const void *sendbuf, int numbyte, void *recvbuf);
/* Every member's numbyte bytes land in the master's recvbuf (size * numbyte, rank order). */
libi_rc_e LIBI_gather(const void *sendbuf, int numbyte, void *recvbuf);
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

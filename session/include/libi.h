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
 * Threads (members): the master's LIBI_sendUsrData and LIBI_recvUsrData may run in
 * different threads at the same time (and beside a collective); two sends go one after the
 * other, two receives too. The other member calls are serialized by one lock of the
 * library: a collective waits for another thread's collective to end.
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
    LIBI_ENOTMASTER,           /* a master-only call from another member */
    LIBI_ETIMEOUT              /* nothing came within the time given (timed calls) */
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
/* The MPIR process table (MPIR_proctable, rank order) of any running MPIR starter
 * (mpiexec.hydra, srun, libi-mpiexec), read as a debugger does: gdb attaches (ptrace),
 * reads it through the starter's symbols and detaches. A stripped starter, or ptrace not
 * permitted, is said in one line. One malloc()ed block: free() it. */
libi_rc_e LIBI_fe_getMPIRProcTable(int starter_pid, libi_proc_desc_t **table, int *size);

/* Attach and launch in one call: one daemon (proc_path, proc_argv, env) per host of a
 * running job, or of the hosts of `ranks` (nranks of them; NULL: every rank), into a
 * created session; each daemon gets its host's ranks with LIBI_getMyProctab. how:
 * LIBI_ATTACH_LIBI, job_pid a libi-mpiexec's: its table and how it starts its agents come
 * from its control socket, and the daemons start the same way (-launcher, -launcher-exec,
 * HYDRA_LAUNCHER_EXTRA_ARGS, -hybrid-hosts, after LIBI_MPIEXEC_ARGS); LIBI_ATTACH_MPIR,
 * job_pid any MPIR starter's: its MPIR_proctable (LIBI_fe_getMPIRProcTable), the daemons
 * start as LIBI_MPIEXEC_ARGS says. Returns as LIBI_fe_launch does. */
typedef enum { LIBI_ATTACH_LIBI = 0, LIBI_ATTACH_MPIR = 1 } libi_attach_how_e;
typedef struct libi_attach_req_t {
    libi_sess_handle_t sessionHandle;
    int job_pid;
    int how;                       /* libi_attach_how_e */
    const int *ranks;              /* a subset of the job's ranks, or NULL */
    int nranks;
    const char *proc_path;         /* the daemon */
    const char *const *proc_argv;  /* its arguments, NULL-terminated (or NULL) */
    const libi_env_t *env;         /* extra environment (or NULL) */
} libi_attach_req_t;
libi_rc_e LIBI_fe_attachAndLaunch(const libi_attach_req_t *req);
/* ---- a front end that tools can drive (event loops, several sessions) ---- */
/* As LIBI_fe_recvUsrData, waiting at most timeout_ms milliseconds (0: not at all,
 * negative: no limit): LIBI_ETIMEOUT when no message came in time. */
libi_rc_e LIBI_fe_recvUsrDataTimeout(libi_sess_handle_t sessionHandle, void **msgbuf,
                                     int *msgbuflen, int timeout_ms);
#define LIBI_POLL_DATA 1 /* a message is waiting: LIBI_fe_recvUsrData returns at once */
#define LIBI_POLL_END 2  /* the session has ended (its messages may still wait: DATA) */
typedef struct libi_poll_t {
    libi_sess_handle_t sessionHandle;
    int revents; /* set: LIBI_POLL_DATA | LIBI_POLL_END */
} libi_poll_t;
/* Waits at most timeout_ms (0: not at all, negative: no limit) until one of the n sessions
 * has a message waiting or has ended; sets each revents and *nready (0: the time ran out). */
libi_rc_e LIBI_fe_poll(libi_poll_t *sessions, int n, int timeout_ms, int *nready);
/* A descriptor for the tool's own event loop (poll/epoll/select): readable while any
 * session has a message waiting, or has ended and no call returned its end yet (it may
 * also wake with nothing to do: any LIBI_fe_poll, receive or end call brings it up to
 * date). The library's: do not read or close it. Valid until LIBI_fe_finalize. */
libi_rc_e LIBI_fe_getEventFd(int *fd);
typedef enum {
    LIBI_STATUS_CREATED = 0,
    LIBI_STATUS_LAUNCHING,
    LIBI_STATUS_RUNNING,
    LIBI_STATUS_ENDED,  /* ended on its own with status 0, or ended by the front end */
    LIBI_STATUS_FAILED  /* a member died, an agent was lost, the launch failed */
} libi_status_e;
libi_rc_e LIBI_fe_getSessionStatus(libi_sess_handle_t sessionHandle, int *status);
/* Called when a session ends (LIBI_STATUS_ENDED) or fails (LIBI_STATUS_FAILED, message
 * says why: "rank 1 on n1 was killed by signal 9 (SIGKILL)", "lost the NLA on n2: ..."),
 * as soon as its libi-mpiexec has ended, from a thread of the library: keep it short; it
 * may call LIBI functions but LIBI_fe_finalize, which waits for the callbacks under way
 * (none runs once it returned). NULL removes it. */
typedef void (*libi_status_cb_t)(libi_sess_handle_t sessionHandle, int status,
                                 const char *message, void *arg);
libi_rc_e LIBI_fe_setStatusCallback(libi_status_cb_t cb, void *arg);
/* End one session, leaving the others: its master's LIBI_recvUsrData returns LIBI_ESESS,
 * messages not received are dropped, it gets LIBI_FINALIZE_WAIT seconds to end on its own,
 * then is ended. Returns its failure if it failed on its own and that was not returned. */
libi_rc_e LIBI_fe_endSession(libi_sess_handle_t sessionHandle);
/* Kill one session now (its agents take its members down); returns once it is gone. */
libi_rc_e LIBI_fe_killSession(libi_sess_handle_t sessionHandle);
/* Daemon output, per session, before it is launched: the members' stdout to out_fd, their
 * stderr and the session's diagnostics to err_fd (duplicates are taken; -1: the front
 * end's own); with LIBI_OUTPUT_LABEL each line starts with "[rank] ". */
#define LIBI_OUTPUT_LABEL 1
libi_rc_e LIBI_fe_setSessionOutput(libi_sess_handle_t sessionHandle, int out_fd, int err_fd,
                                   int flags);
/* The same into files (created or truncated, mode 0600; NULL: the front end's own). */
libi_rc_e LIBI_fe_setSessionOutputFiles(libi_sess_handle_t sessionHandle, const char *out_path,
                                        const char *err_path, int flags);

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
/* LIBI_ESESS once the front end ended the session (LIBI_fe_finalize, LIBI_fe_endSession). */
libi_rc_e LIBI_recvUsrData(void **msgbuf, int *msgbuflen);
/* This daemon's host's part of the job's process table (a session started with
 * LIBI_fe_attachAndLaunch; none for another session: *size 0): the job's ranks on this
 * host, rank order. One malloc()ed block: free() it. LaunchMON's LMON_be_getMyProctab. */
libi_rc_e LIBI_getMyProctab(libi_proc_desc_t **table, int *size);
/* This member's host as the session's host list names it (also PMI_HOSTNAME): copied into
 * name (len bytes with the NUL; LIBI_EARG if it does not fit). */
libi_rc_e LIBI_getMyHostname(char *name, int len);

/* ---- both ---- */
const char *LIBI_errorString(void);
const char *LIBI_rcName(int rc);

#ifdef __cplusplus
}
#endif
#endif /* LIBI_H */

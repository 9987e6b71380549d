//! Starting one rank: environment, `PMI_FD`, own session/process group, parent-death signal.

use crate::proc::reaper;
use crate::sys::errno::describe;
use libi::job::{AppSpec, JobCommon, NodePlan, RankSlot};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::net::UnixStream as StdUnixStream;
use tokio::net::unix::pipe;

/// A started rank: the process and the server end of its PMI socketpair.
pub struct Started {
    pub child: RankProcess,
    pub pmi: StdUnixStream,
}

/// Variables that must never leak from an outer job into our ranks (`docs/spec/pmi-wire.md` §6,
/// §12.12).
pub fn is_scrubbed(name: &str) -> bool {
    name.starts_with("PMI_")
        || name.starts_with("PMIX_")
        || name.starts_with("PMI2_")
        || name == "PRTE_LAUNCHED"
}

/// A rank that could not be started: `errno` of the failed step, and a one-line reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartFailed {
    pub errno: i32,
    pub reason: String,
}

/// A rank process started by [`start_rank`]: a vfork-style clone and exec (no copy of the
/// NLA's pages; Rust's `Command` forks). Its exit comes through a pidfd. The stdout and
/// stderr pipes and the pidfd are plain non-blocking descriptors, for the node's rank
/// reactor ([`crate::io::rankio`]); stdin (rank 0's, when it is forwarded) is tokio's.
pub struct RankProcess {
    pub pid: i32,
    pub stdin: Option<pipe::Sender>,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    pub pidfd: OwnedFd,
}

/// Stack of a child between clone and exec.
const CHILD_STACK: usize = 64 * 1024;

/// Everything the child uses, prepared by the parent.
struct ChildArgs {
    parent: libc::pid_t,
    /// The child shares our descriptor table (`CLONE_FILES`) until it makes a table of its
    /// own of the descriptors below `keep`: ours 0 to 2, the batch's [`Slots`], which hold
    /// the four below, and what else we have that low.
    keep: u32,
    in_fd: i32,
    out_fd: i32,
    err_fd: i32,
    pmi_fd: i32,
    /// Written by the child when it cannot start the program: the stage that failed (0:
    /// none) and its errno. The child shares our memory until it execs or exits
    /// (`CLONE_VM | CLONE_VFORK`), and we resume only then, so no pipe is needed.
    failed_stage: std::sync::atomic::AtomicI32,
    failed_errno: std::sync::atomic::AtomicI32,
    /// The affinity mask (kernel format) and its length in bytes; null: not bound.
    cpus: *const u64,
    cpus_len: usize,
    /// The memory policy (`set_mempolicy`'s mode, node mask and its `maxnode`); mode -1:
    /// none set.
    mem_mode: i32,
    mem_nodes: *const u64,
    mem_maxnode: u64,
    wdir: *const libc::c_char,
    /// The signals to put back to their default disposition (see [`SpawnBatch`]).
    sigs: *const i32,
    nsigs: usize,
    /// The limit on open files to set (the job's, not the one we raised), if any.
    nofile: Option<libc::rlimit>,
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
}

/// The child between clone and exec: own session, dies with the NLA, stdio, PMI_FD kept
/// across exec, working directory, exec. Failures are reported in the shared `ChildArgs` as
/// (stage, errno). Async-signal-safe calls only; never returns.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` points to the parent's `ChildArgs`, alive until we exec or exit.
    unsafe {
        let a = &*(arg as *const ChildArgs);
        let fail = |stage: i32| -> ! {
            use std::sync::atomic::Ordering::SeqCst;
            a.failed_errno.store(*libc::__errno_location(), SeqCst);
            a.failed_stage.store(stage, SeqCst);
            libc::_exit(127)
        };
        // First a descriptor table of our own, before any change to one: the shared one
        // below `keep` (the kernel copies the first 64 entries or so and closes those of
        // them above `keep`; the parent's hundreds of pipe and socket ends are neither
        // copied at each clone nor closed one by one at each exec: with 1000 ranks a node,
        // 28% of the children's work before their exec and 10% of the agent's). A kernel
        // without CLOSE_RANGE_UNSHARE (before 5.9) copies the whole table, and the exec
        // closes what is above.
        if libc::syscall(libc::SYS_close_range, a.keep, u32::MAX, libc::CLOSE_RANGE_UNSHARE) != 0
            && libc::unshare(libc::CLONE_FILES) != 0
        {
            fail(STAGE_EXEC);
        }
        libc::setsid();
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
        if libc::getppid() != a.parent {
            libc::_exit(127);
        }
        // Signals are blocked (by the parent, around the clone). Every signal goes back to
        // its default: the NLA's handlers must not run here, and what whoever started us
        // ignored (SIGINT and SIGQUIT for a background job of a script, SIGPIPE for Rust,
        // glibc's internal signals 32 and 33, which its posix_spawn leaves ignored) must not
        // stay ignored in the program. Only the signals the parent found not at their
        // default (`SpawnBatch`): one system call each, while the parent waits. The raw
        // system call, as glibc refuses to touch its internal signals: an all-zero kernel
        // `struct sigaction` (at most 64 bytes) is SIG_DFL, no flags, an empty mask. Then
        // everything is unblocked.
        let dfl = [0u64; 8];
        let set_size = (libc::SIGRTMAX() as usize + 1) / 8;
        for i in 0..a.nsigs {
            let none: *mut libc::c_void = std::ptr::null_mut();
            libc::syscall(libc::SYS_rt_sigaction, *a.sigs.add(i), dfl.as_ptr(), none, set_size);
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        if libc::dup2(a.in_fd, 0) < 0 || libc::dup2(a.out_fd, 1) < 0 || libc::dup2(a.err_fd, 2) < 0
        {
            fail(STAGE_EXEC);
        }
        // The program gets stdin, stdout, stderr and its PMI socket, nothing else: not what
        // whoever started us left open without close-on-exec (as slurmstepd; a pipe of the
        // caller's held by a rank's daemon would keep the caller waiting for its EOF). The
        // slots are close-on-exec too; the PMI socket stays where it is (`PMI_FD`). Before
        // Linux 5.11 (no CLOSE_RANGE_CLOEXEC) what was inherited may stay.
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC);
        libc::fcntl(a.pmi_fd, libc::F_SETFD, 0);
        if let Some(lim) = &a.nofile {
            // The raw system call (prlimit64 on this process), as for the mask below.
            let none: *mut libc::rlimit = std::ptr::null_mut();
            libc::syscall(libc::SYS_prlimit64, 0, libc::RLIMIT_NOFILE, lim as *const _, none);
        }
        // The raw system call on the mask the parent built (glibc's wrapper is not on the
        // async-signal-safe list).
        if !a.cpus.is_null()
            && libc::syscall(libc::SYS_sched_setaffinity, 0, a.cpus_len, a.cpus) != 0
        {
            fail(STAGE_BIND);
        }
        // The memory policy, kept across exec (the raw system call: glibc has no wrapper).
        if a.mem_mode >= 0
            && libc::syscall(libc::SYS_set_mempolicy, a.mem_mode, a.mem_nodes, a.mem_maxnode) != 0
        {
            fail(STAGE_MEMBIND);
        }
        if !a.wdir.is_null() && libc::chdir(a.wdir) != 0 {
            fail(STAGE_CHDIR);
        }
        libc::execve(a.path, a.argv, a.envp);
        fail(STAGE_EXEC)
    }
}

/// The batch's slots ([`Slots`]).
const SLOT_IN: usize = 0;
const SLOT_OUT: usize = 1;
const SLOT_ERR: usize = 2;
const SLOT_PMI: usize = 3;

/// What the child reports when it cannot start the program.
const STAGE_CHDIR: i32 = 1;
const STAGE_EXEC: i32 = 2;
const STAGE_BIND: i32 = 3;
const STAGE_MEMBIND: i32 = 4;

/// A rank's memory policy as `set_mempolicy(2)` takes it, prepared by the parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelMemPolicy {
    /// `MPOL_LOCAL`, `MPOL_BIND` or `MPOL_INTERLEAVE`.
    mode: i32,
    /// The node mask (`unsigned long` words; empty for `MPOL_LOCAL`).
    nodes: Vec<u64>,
    /// As libnuma, and as the kernel reads it: the mask's bits plus one.
    maxnode: u64,
    /// The policy as `numa_maps` shows it, for messages.
    shown: String,
}

impl KernelMemPolicy {
    pub fn new(p: &libi_binding::MemPolicy) -> KernelMemPolicy {
        use libi_binding::MemPolicy;
        let (mode, nodes) = match p {
            MemPolicy::Local => (libc::MPOL_LOCAL, Vec::new()),
            MemPolicy::Bind(n) => (libc::MPOL_BIND, n.mask()),
            MemPolicy::Interleave(n) => (libc::MPOL_INTERLEAVE, n.mask()),
        };
        let maxnode = if nodes.is_empty() { 0 } else { nodes.len() as u64 * 64 + 1 };
        KernelMemPolicy { mode, nodes, maxnode, shown: p.to_string() }
    }
}

/// What a rank is bound to: its affinity mask (kernel format) and memory policy, if any.
#[derive(Debug, Clone, Copy, Default)]
pub struct RankBinding<'a> {
    pub cpus: Option<&'a [u64]>,
    pub mem: Option<&'a KernelMemPolicy>,
}

/// `NAME=value`, as the child's environment holds it.
fn env_entry(name: &str, value: impl AsRef<std::ffi::OsStr>) -> io::Result<CString> {
    let mut e = std::ffi::OsString::from(format!("{name}="));
    e.push(value);
    cbytes(&e)
}

/// A C string of bytes that need not be UTF-8 (an argument, an environment value, a
/// directory); a NUL byte is an error naming the text.
fn cbytes(s: &std::ffi::OsStr) -> io::Result<CString> {
    use std::os::unix::ffi::OsStrExt as _;
    CString::new(s.as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("NUL byte in '{}'", s.to_string_lossy()),
        )
    })
}

/// Our end of a pipe we made (so known to be a pipe, and which end), made non-blocking in
/// one system call and handed to `wrap` (for stdin, tokio's unchecked constructor: its
/// checked ones spend three system calls on checks we need not make).
fn nonblocking<T>(fd: OwnedFd, wrap: fn(OwnedFd) -> io::Result<T>) -> io::Result<T> {
    // SAFETY: fcntl on a descriptor we own. F_SETFL changes only the status flags (the
    // access mode is kept); a pipe end we made has none set but O_NONBLOCK now.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    wrap(fd)
}

fn pipe_cloexec() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two fds we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: freshly created, owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Why [`try_start`] failed.
enum Failure {
    /// The program cannot be executed (reported by the child), or its name cannot be.
    Exec(io::Error),
    /// The child's `chdir` (reported by the child).
    Chdir(io::Error),
    /// The child's `sched_setaffinity` (reported by the child).
    Bind(io::Error),
    /// The child's `set_mempolicy` (reported by the child).
    Membind(io::Error),
    /// A system call of ours (socketpair, pipe, clone, ...): resources, mostly.
    Start(io::Error),
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Self {
        Failure::Start(e)
    }
}

/// What the ranks a node starts at once share, found once for all of them: the signals
/// that are not at their default disposition here (each child resets exactly these before
/// its exec, instead of one system call per signal number while its parent waits), each
/// app's program as found on its `PATH` and its environment, and the children's stack.
///
/// Make it right before starting the ranks, with nothing in between that could install a
/// signal handler (the driver starts its ranks in one synchronous loop): a handler
/// installed later would stay in place in a child until its exec.
pub struct SpawnBatch {
    sigs: Vec<i32>,
    programs: std::cell::RefCell<Vec<(u32, CString)>>,
    /// Per app (and whether the PMGR variables are set): the environment every rank of
    /// the app has, `NAME=value`, without the variables set per rank (`PER_RANK`).
    envs: std::cell::RefCell<Vec<((u32, bool), SharedEnv)>>,
    /// The children's stack between clone and exec, one for the batch: each child is done
    /// with it (has exec'd or exited) before the next clone. Never initialised by us: the
    /// child touches the few pages it uses (zeroing all of it cost 16 page faults and
    /// 64 kB of resident memory for the job's whole life).
    stack: std::cell::RefCell<Vec<std::mem::MaybeUninit<u8>>>,
    /// `/dev/null` for the stdin of ranks that do not read ours, opened once per batch.
    dev_null: std::cell::OnceCell<OwnedFd>,
    /// Where each child finds its four descriptors (made on first use).
    slots: std::cell::OnceCell<Slots>,
    /// Our pid: a child whose parent is no longer this one exits before exec.
    parent: libc::pid_t,
    /// The limit on open files the ranks get ([`crate::sys::rlimit::job_fd_limit`]).
    nofile: Option<libc::rlimit>,
    /// `-gpus-per-proc`: the GPU variable each rank gets its own value of (replacing the
    /// app's), by local rank.
    gpus: Option<crate::proc::gpu::Assignment>,
    /// PMIx jobs: the variables the PMIx server gave each rank (by local rank), which name
    /// the server and the rank (`PMIX_NAMESPACE`, `PMIX_RANK`, `PMIX_SERVER_URI*`, ...).
    pmix: Option<Vec<Vec<(String, String)>>>,
}

impl SpawnBatch {
    /// The current signal dispositions (one query per signal number).
    pub fn new() -> SpawnBatch {
        let set_size = (libc::SIGRTMAX() as usize + 1) / 8;
        let sigs = (1..=libc::SIGRTMAX())
            .filter(|&sig| sig != libc::SIGKILL && sig != libc::SIGSTOP)
            .filter(|&sig| {
                // The kernel's `struct sigaction`: the handler comes first (0: SIG_DFL).
                let mut old = [0u64; 8];
                let none: *const libc::c_void = std::ptr::null();
                // SAFETY: a query only (no new action); `old` holds a kernel sigaction.
                let r = unsafe {
                    libc::syscall(libc::SYS_rt_sigaction, sig, none, old.as_mut_ptr(), set_size)
                };
                // Unknown: reset it anyway.
                r != 0 || old[0] != libc::SIG_DFL as u64
            })
            .collect();
        // SAFETY: getpid has no preconditions.
        let parent = unsafe { libc::getpid() };
        SpawnBatch {
            sigs,
            programs: Default::default(),
            envs: Default::default(),
            stack: Default::default(),
            dev_null: Default::default(),
            slots: Default::default(),
            parent,
            nofile: crate::sys::rlimit::job_fd_limit(),
            gpus: None,
            pmix: None,
        }
    }

    /// Give each rank its GPUs (`-gpus-per-proc`): its value of the assignment's variable
    /// replaces any the app's environment has.
    pub fn with_gpus(self, gpus: Option<crate::proc::gpu::Assignment>) -> SpawnBatch {
        SpawnBatch { gpus, ..self }
    }

    /// Give each rank the PMIx server's variables for it (by local rank); they replace any
    /// of the app's environment of the same name.
    pub fn set_pmix(&mut self, pmix: Vec<Vec<(String, String)>>) {
        self.pmix = Some(pmix);
        // The apps' environments leave out the server's variables: made again.
        self.envs.borrow_mut().clear();
    }

    /// The batch's `/dev/null` (opened on first use; every child dup2s it to its stdin).
    fn dev_null(&self) -> io::Result<i32> {
        if let Some(fd) = self.dev_null.get() {
            return Ok(fd.as_raw_fd());
        }
        let fd = OwnedFd::from(std::fs::File::open("/dev/null")?);
        Ok(self.dev_null.get_or_init(|| fd).as_raw_fd())
    }

    /// The batch's [`Slots`], made on first use.
    fn slots(&self) -> io::Result<&Slots> {
        if let Some(s) = self.slots.get() {
            return Ok(s);
        }
        let null = self.dev_null()?;
        let dup = || -> io::Result<OwnedFd> {
            // SAFETY: F_DUPFD_CLOEXEC of a descriptor we own; the new one is ours.
            let fd = unsafe { libc::fcntl(null, libc::F_DUPFD_CLOEXEC, 3) };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: just made, owned by nobody else.
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        };
        let fds = [dup()?, dup()?, dup()?, dup()?];
        let keep = fds.iter().map(|f| f.as_raw_fd()).max().unwrap_or(2) as u32 + 1;
        let slots = Slots { fds, keep, in_is_null: std::cell::Cell::new(true) };
        Ok(self.slots.get_or_init(|| slots))
    }

    /// App `app`'s program as [`resolve`] finds it on `env`'s `PATH` (the same for every
    /// rank of the app: their `PATH` is the app's), looked up once.
    fn program(
        &self,
        app: u32,
        exe: &str,
        env: &[(String, std::ffi::OsString)],
    ) -> Result<CString, Failure> {
        if let Some((_, p)) = self.programs.borrow().iter().find(|(a, _)| *a == app) {
            return Ok(p.clone());
        }
        let path = CString::new(resolve(exe, env).into_vec()).map_err(|_| {
            Failure::Exec(io::Error::new(io::ErrorKind::InvalidInput, "NUL byte in program"))
        })?;
        self.programs.borrow_mut().push((app, path.clone()));
        Ok(path)
    }

    /// App `app`'s environment without the per-rank variables, built once for its ranks.
    fn base_env(&self, app: u32, spec: &AppSpec, pmgr: bool) -> Result<SharedEnv, Failure> {
        if let Some((_, e)) = self.envs.borrow().iter().find(|(k, _)| *k == (app, pmgr)) {
            return Ok(e.clone());
        }
        let gpu = self.gpus.as_ref().map(|g| g.var);
        // The PMIx server's variables (the same names for every rank) are the rank's own.
        let pmix: Vec<&str> = (self.pmix.iter().flatten().next().into_iter().flatten())
            .map(|(k, _)| k.as_str())
            .collect();
        let per_rank = |k: &str| {
            PER_RANK.contains(&k)
                || (pmgr && PER_RANK_PMGR.contains(&k))
                || gpu == Some(k)
                || pmix.contains(&k)
        };
        // `-genvnone`/`-genvlist` (Hydra's rule): our own environment first, what the job
        // gives on top. Not an outer job's PMI settings, nor the agent's own variables.
        // Variables whose name is not UTF-8 go whole, after the others: the job's
        // (`AppSpec::raw_env`, from the front end's environment with `-genvall`), or ours.
        let mut raw: Vec<std::ffi::OsString> = spec.raw_env.clone();
        let agent: Vec<(String, std::ffi::OsString)> = if spec.agent_env {
            let (mut named, own_raw) = libi::job::split_environment(std::env::vars_os());
            raw.extend(own_raw);
            named.retain(|(k, _)| libi::job::inherited_ok(k) && !k.starts_with("LIBI_"));
            named.retain(|(k, _)| !spec.env.iter().any(|(sk, _)| sk == k));
            named
        } else {
            Vec::new()
        };
        let mut env: Vec<CString> = agent
            .iter()
            .chain(&spec.env)
            .filter(|(k, _)| !per_rank(k))
            .map(|(k, v)| env_entry(k, v))
            .chain(raw.iter().map(|e| cbytes(e)))
            .collect::<io::Result<_>>()
            .map_err(Failure::Exec)?;
        // As under Hydra: gfortran programs do not buffer their preconnected units (stdout,
        // stderr), so their output interleaves with C's as written. A value the rank's
        // environment already has (-genv, -env, ours) is kept.
        if !spec.env.iter().chain(&agent).any(|(k, _)| k == "GFORTRAN_UNBUFFERED_PRECONNECTED") {
            env.push(c"GFORTRAN_UNBUFFERED_PRECONNECTED=y".to_owned());
        }
        let env = std::rc::Rc::new(env);
        self.envs.borrow_mut().push(((app, pmgr), env.clone()));
        Ok(env)
    }
}

/// Four descriptors a batch holds at the lowest numbers free (from 3) while it starts its
/// ranks: before each clone, the rank's stdin, stdout, stderr and PMI socket are put in
/// them (`dup3`, close-on-exec). The child shares our table until it takes a copy of it
/// below [`Slots::keep`], which these make small whatever else we have open: the cost of
/// starting a rank does not grow with the ranks started before it (a copy of the whole
/// table at each clone, closed again descriptor by descriptor at each exec, made that
/// quadratic: 1000 ranks on a node took 512 ms of the children's CPU before their exec
/// and 113 ms of the agent's, against 370 and 102 now). Each slot holds its last
/// rank's end until the next rank's replaces it or the batch ends, which is right after the
/// ranks are started: then the last rank's pipes are the rank's only.
struct Slots {
    /// stdin, stdout, stderr, PMI socket.
    fds: [OwnedFd; 4],
    keep: u32,
    /// The stdin slot holds `/dev/null` (not rank 0's stdin pipe).
    in_is_null: std::cell::Cell<bool>,
}

impl Slots {
    /// Put `fd` in slot `i` (replacing what it held), close-on-exec.
    fn set(&self, i: usize, fd: i32) -> io::Result<()> {
        // SAFETY: dup3 of a descriptor we own onto one we own.
        if unsafe { libc::dup3(fd, self.fds[i].as_raw_fd(), libc::O_CLOEXEC) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn raw(&self, i: usize) -> i32 {
        self.fds[i].as_raw_fd()
    }
}

/// An environment as `NAME=value` strings, shared by the ranks of a batch.
type SharedEnv = std::rc::Rc<Vec<CString>>;

/// The variables [`try_start`] sets for each rank (replacing any of the app's).
const PER_RANK: [&str; 7] = [
    "PMI_FD",
    "PMI_RANK",
    "PMI_SIZE",
    "PMI_SPAWNED",
    "PMI_HOSTNAME",
    "MPI_LOCALRANKID",
    "MPI_LOCALNRANKS",
];
/// ... and, when the job serves PMGR, these.
const PER_RANK_PMGR: [&str; 9] = [
    "MPIRUN_HOST",
    "MPIRUN_PORT",
    "MPIRUN_RANK",
    "MPIRUN_NPROCS",
    "MPIRUN_ID",
    "MPIRUN_SHM_ENABLE",
    "MPIRUN_MPD",
    "NOT_USE_TOTALVIEW",
    "MPIRUN_CONNECT_ONCE",
];

impl Default for SpawnBatch {
    fn default() -> Self {
        SpawnBatch::new()
    }
}

/// Start local rank `local` (global `slot.rank`) of this node. When this returns `Ok`, the
/// rank runs its program (CLONE_VFORK resumes us only after its `execve`).
pub fn start_rank(
    job: &JobCommon,
    plan: &NodePlan,
    local: usize,
    slot: RankSlot,
    pmi_port: Option<u16>,
    bound: RankBinding,
    batch: &SpawnBatch,
) -> Result<Started, StartFailed> {
    let app = job.apps.get(slot.app as usize);
    let host = &plan.host;
    try_start(job, plan, local, slot, pmi_port, bound, batch).map_err(|f| {
        let (e, reason) = match f {
            Failure::Exec(e) => {
                let exe = app.map(|a| a.exe.as_str()).unwrap_or("?");
                let reason = format!("cannot execute '{exe}' on {host}: {}", describe(&e));
                (e, reason)
            }
            Failure::Chdir(e) => {
                let d = app
                    .and_then(|a| a.wdir.as_deref())
                    .map_or("?".into(), std::ffi::OsStr::to_string_lossy);
                let reason =
                    format!("cannot change to working directory '{d}' on {host}: {}", describe(&e));
                (e, reason)
            }
            Failure::Bind(e) => {
                let reason = format!(
                    "cannot bind rank {} on {host} to its cpus: {}",
                    slot.rank,
                    describe(&e)
                );
                (e, reason)
            }
            Failure::Membind(e) => {
                let policy = bound.mem.map(|m| m.shown.as_str()).unwrap_or("?");
                let reason = format!(
                    "cannot set the memory policy of rank {} on {host} to {policy}: {}",
                    slot.rank,
                    describe(&e)
                );
                (e, reason)
            }
            Failure::Start(e) => {
                let reason =
                    format!("cannot start rank {} on {host}: {}", slot.rank, start_error(&e));
                (e, reason)
            }
        };
        StartFailed { errno: e.raw_os_error().unwrap_or(0), reason }
    })
}

/// Why a system call of ours failed, naming the limit that was hit.
fn start_error(e: &io::Error) -> String {
    use nix::errno::Errno;
    use nix::sys::resource::{getrlimit, Resource, RLIM_INFINITY};
    let limit = |r: Resource| match getrlimit(r) {
        Ok((soft, _)) if soft == RLIM_INFINITY => "unlimited".to_string(),
        Ok((soft, _)) => soft.to_string(),
        Err(_) => "?".to_string(),
    };
    match e.raw_os_error().map(Errno::from_raw) {
        Some(Errno::EMFILE) => {
            format!("too many open files (RLIMIT_NOFILE={})", limit(Resource::RLIMIT_NOFILE))
        }
        Some(Errno::ENFILE) => "too many open files in the system (fs.file-max)".to_string(),
        Some(Errno::EAGAIN) => format!(
            "too many processes (RLIMIT_NPROC={}, or kernel.pid_max / threads-max)",
            limit(Resource::RLIMIT_NPROC)
        ),
        Some(Errno::ENOMEM) => "out of memory".to_string(),
        _ => describe(e),
    }
}

fn try_start(
    job: &JobCommon,
    plan: &NodePlan,
    local: usize,
    slot: RankSlot,
    pmi_port: Option<u16>,
    bound: RankBinding,
    batch: &SpawnBatch,
) -> Result<Started, Failure> {
    let cpus = bound.cpus;
    let app: &AppSpec = job.apps.get(slot.app as usize).ok_or_else(|| {
        Failure::Exec(io::Error::new(io::ErrorKind::InvalidInput, "rank names an unknown app"))
    })?;
    // Both socket ends close-on-exec; the child clears the flag on its own end only, so no
    // rank inherits another rank's socket.
    let (server, client) = StdUnixStream::pair()?;
    let client_fd: OwnedFd = client.into();
    let slots = batch.slots()?;
    slots.set(SLOT_PMI, client_fd.as_raw_fd())?;
    drop(client_fd);
    let raw = slots.raw(SLOT_PMI);

    let pmgr = match (job.pmgr, pmi_port) {
        (Some(id), Some(port)) => Some((id, port)),
        _ => None,
    };
    // The app's environment (built once per batch), then this rank's variables.
    let base = batch.base_env(slot.app, app, pmgr.is_some())?;
    let mut vars: Vec<(&str, String)> = vec![
        ("PMI_FD", raw.to_string()),
        ("PMI_RANK", slot.rank.to_string()),
        ("PMI_SIZE", job.size.to_string()),
        ("PMI_SPAWNED", if job.spawned_by.is_some() { "1" } else { "0" }.into()),
        ("PMI_HOSTNAME", plan.host.clone()),
        ("MPI_LOCALRANKID", local.to_string()),
        ("MPI_LOCALNRANKS", plan.ranks.len().to_string()),
    ];
    if let Some((id, port)) = pmgr {
        // What a PMGR (pmgr_collective v8 / MVAPICH-1) client reads; shared memory off, or
        // clients of >= 1024 ranks never talk to the server
        // (`docs/spec/pmgr-wire.md` §2).
        vars.extend([
            ("MPIRUN_HOST", "127.0.0.1".into()),
            ("MPIRUN_PORT", port.to_string()),
            ("MPIRUN_RANK", slot.rank.to_string()),
            ("MPIRUN_NPROCS", job.size.to_string()),
            ("MPIRUN_ID", id.to_string()),
            ("MPIRUN_SHM_ENABLE", "0".into()),
            ("MPIRUN_MPD", "0".into()),
            ("NOT_USE_TOTALVIEW", "1".into()),
            ("MPIRUN_CONNECT_ONCE", "1".into()),
        ]);
    }
    debug_assert!(vars.iter().all(|(k, _)| PER_RANK.contains(k) || PER_RANK_PMGR.contains(k)));
    if let Some(g) = &batch.gpus {
        // Filtered out of `base` (see `SpawnBatch::base_env`).
        vars.push((
            g.var,
            g.values.get(local).cloned().unwrap_or_else(|| crate::proc::gpu::NONE.into()),
        ));
    }

    if let Some(env) = batch.pmix.as_ref().and_then(|p| p.get(local)) {
        vars.extend(env.iter().map(|(k, v)| (k.as_str(), v.clone())));
    }

    // Everything the child needs, prepared before fork (the child may not allocate).
    let path = batch.program(slot.app, &app.exe, &app.env)?;
    let argv_c: Vec<CString> = std::iter::once(std::ffi::OsStr::new(&app.exe))
        .chain(app.args.iter().map(|a| a.as_os_str()))
        .map(cbytes)
        .collect::<io::Result<_>>()
        .map_err(Failure::Exec)?;
    let vars_c: Vec<CString> = vars
        .iter()
        .map(|(k, v)| env_entry(k, v))
        .collect::<io::Result<_>>()
        .map_err(Failure::Exec)?;
    let mut argv: Vec<*const libc::c_char> = argv_c.iter().map(|c| c.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> =
        base.iter().chain(&vars_c).map(|c| c.as_ptr()).collect();
    envp.push(std::ptr::null());
    let wdir_c = app.wdir.as_deref().map(cbytes).transpose().map_err(Failure::Chdir)?;

    let (out_r, out_w) = pipe_cloexec()?;
    slots.set(SLOT_OUT, out_w.as_raw_fd())?;
    drop(out_w);
    let (err_r, err_w) = pipe_cloexec()?;
    slots.set(SLOT_ERR, err_w.as_raw_fd())?;
    drop(err_w);
    // Our stdin goes to rank 0 of the job; spawned jobs read /dev/null (as under Hydra).
    let in_w = if slot.rank == 0 && job.spawned_by.is_none() {
        let (r, w) = pipe_cloexec()?;
        slots.set(SLOT_IN, r.as_raw_fd())?;
        slots.in_is_null.set(false);
        Some(w)
    } else {
        if !slots.in_is_null.get() {
            slots.set(SLOT_IN, batch.dev_null()?)?;
            slots.in_is_null.set(true);
        }
        None
    };

    let args = ChildArgs {
        parent: batch.parent,
        keep: slots.keep,
        in_fd: slots.raw(SLOT_IN),
        out_fd: slots.raw(SLOT_OUT),
        err_fd: slots.raw(SLOT_ERR),
        pmi_fd: raw,
        failed_stage: 0.into(),
        failed_errno: 0.into(),
        cpus: cpus.map(|m| m.as_ptr()).unwrap_or(std::ptr::null()),
        cpus_len: cpus.map(std::mem::size_of_val).unwrap_or(0),
        mem_mode: bound.mem.map(|m| m.mode).unwrap_or(-1),
        // No mask (MPOL_LOCAL): a null pointer, not an empty Vec's dangling one.
        mem_nodes: bound
            .mem
            .filter(|m| !m.nodes.is_empty())
            .map(|m| m.nodes.as_ptr())
            .unwrap_or(std::ptr::null()),
        mem_maxnode: bound.mem.map(|m| m.maxnode).unwrap_or(0),
        wdir: wdir_c.as_ref().map(|c| c.as_ptr()).unwrap_or(std::ptr::null()),
        sigs: batch.sigs.as_ptr(),
        nsigs: batch.sigs.len(),
        nofile: batch.nofile,
        path: path.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
    };
    // vfork-style: the child shares our memory until it execs (no page-table copy, no
    // copy-on-write faults while a node starts hundreds of ranks), on a stack of its own;
    // we are suspended only until its execve.
    let mut stack = batch.stack.borrow_mut();
    if stack.is_empty() {
        stack.reserve_exact(CHILD_STACK);
        // SAFETY: the capacity is there, and `MaybeUninit` needs no initialisation.
        unsafe { stack.set_len(CHILD_STACK) };
    }
    // The orphan reaper must not take the child for an orphan: it is claimed under the
    // registry's lock before anybody could look.
    let mut claims = reaper::claims();
    // Where CLONE_PIDFD puts the child's pidfd (close-on-exec); a kernel before 5.2 leaves
    // it as it is, and `watch` opens one.
    let mut pidfd: libc::c_int = -1;
    // SAFETY: the stack top is inside `stack`, 16-byte aligned, and `stack` and `args`
    // outlive the child's use of them (CLONE_VFORK: we resume only after its execve or
    // _exit). `child_main` calls only async-signal-safe functions. Until it takes its own
    // copy, the child uses our descriptor table (CLONE_FILES) without changing it.
    let pid = unsafe {
        let top = stack.as_mut_ptr().add(CHILD_STACK) as usize & !15;
        // No signal may reach the child before it has reset the handlers it shares with us.
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut saved: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut saved);
        // No exit signal asked for (the pidfd says when the rank ends), but the kernel gives
        // every process that execs SIGCHLD as its exit signal again (`exit_signal` 17 in
        // /proc/PID/stat of a running rank): only a child that fails before its exec ends
        // without one, and that is why its waits take __WALL. So each rank's end does
        // raise SIGCHLD here and wakes the orphan reaper; measured (session 32, A/B of
        // bench/cpu-ab.sh with the reaper off): no difference the runs can resolve.
        let pid = libc::clone(
            child_main,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_FILES | libc::CLONE_PIDFD,
            &args as *const ChildArgs as *mut libc::c_void,
            &mut pidfd as *mut libc::c_int,
        );
        libc::pthread_sigmask(libc::SIG_SETMASK, &saved, std::ptr::null_mut());
        pid
    };
    drop(stack);
    if pid < 0 {
        return Err(io::Error::last_os_error().into());
    }
    // SAFETY: CLONE_PIDFD made it for us (or it is still -1).
    let pidfd = (pidfd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(pidfd) });
    claims.claim(pid);
    drop(claims);
    // CLONE_VFORK resumed us after the child's execve or _exit: an exec failure is already
    // recorded. Report it now, so that "ranks started" means they run.
    let stage = args.failed_stage.load(std::sync::atomic::Ordering::SeqCst);
    if stage != 0 {
        let errno = args.failed_errno.load(std::sync::atomic::Ordering::SeqCst);
        // It has _exited (or is about to): reap it.
        reaper::reap(pid);
        let e = io::Error::from_raw_os_error(errno);
        return Err(match stage {
            STAGE_CHDIR => Failure::Chdir(e),
            STAGE_BIND => Failure::Bind(e),
            STAGE_MEMBIND => Failure::Membind(e),
            _ => Failure::Exec(e),
        });
    }
    watch(pid, pidfd, in_w, out_r, err_r).map(|child| Started { child, pmi: server }).map_err(|e| {
        // The program runs but cannot be watched: kill it (its group, still ours) and reap.
        reaper::reap(pid);
        Failure::Start(e)
    })
}

/// The parent's handles on a started rank: its stdio pipes and a pidfd for its exit.
fn watch(
    pid: i32,
    pidfd: Option<OwnedFd>,
    in_w: Option<OwnedFd>,
    out_r: OwnedFd,
    err_r: OwnedFd,
) -> io::Result<RankProcess> {
    let pidfd = match pidfd {
        Some(fd) => fd,
        None => {
            // SAFETY: pidfd_open of our own child, not reaped yet; the fd is ours.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: pidfd_open returned a new descriptor.
            unsafe { OwnedFd::from_raw_fd(fd as i32) }
        }
    };
    Ok(RankProcess {
        pid,
        stdin: in_w.map(|w| nonblocking(w, pipe::Sender::from_owned_fd_unchecked)).transpose()?,
        stdout: nonblocking(out_r, Ok)?,
        stderr: nonblocking(err_r, Ok)?,
        pidfd,
    })
}

/// The program a rank runs: a name without `/` is looked up in the rank's own `PATH` (the
/// first executable regular file wins, as execvp does); anything else is used as is (a
/// relative path then resolves against the rank's working directory). When nothing is found
/// the name is returned unchanged and exec reports ENOENT.
pub fn resolve(exe: &str, env: &[(String, std::ffi::OsString)]) -> std::ffi::OsString {
    use std::os::unix::fs::PermissionsExt;
    if exe.contains('/') || exe.is_empty() {
        return exe.into();
    }
    let path = env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    for dir in std::env::split_paths(&path) {
        let dir = if dir.as_os_str().is_empty() { std::path::PathBuf::from(".") } else { dir };
        let cand = dir.join(exe);
        if let Ok(m) = std::fs::metadata(&cand) {
            if m.is_file() && m.permissions().mode() & 0o111 != 0 {
                return cand.into_os_string();
            }
        }
    }
    exe.into()
}

#[cfg(test)]
mod tests {
    use super::resolve;

    #[test]
    fn path_lookup() {
        let env = vec![("PATH".to_string(), "/nonexistent:/bin:/usr/bin".into())];
        let sh = resolve("sh", &env);
        assert!(sh == *"/bin/sh" || sh == *"/usr/bin/sh", "{sh:?}");
        assert_eq!(resolve("./x", &env), *"./x");
        assert_eq!(resolve("no-such-program-here", &env), *"no-such-program-here");
    }
}

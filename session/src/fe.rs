//! The front end: sessions, their launch, user data with each session's master, and the
//! end of it all. Each session runs as one `libi-mpiexec --pmgr` job, a child of this
//! process; the front end signals nothing but those children, and only while they are
//! unreaped (so never a reused pid).

use crate::member::{ENV_FE, ENV_KEY, ENV_PROCTAB, HELLO, PROCTAB_MAGIC};
pub use crate::mpir::mpir_table;
use crate::{frame, Code, Error, Result, MAX_MSG};
use libi::preauth::PreAuth;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// A session, as `LIBI_fe_createSession` returns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionId(pub u32);

/// Processes of one image on one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostDist {
    pub host: String,
    pub procs: u32,
}

/// One process distribution: which session, what to run, where, with what environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcDist {
    pub session: SessionId,
    pub exe: String,
    /// Arguments after the executable.
    pub args: Vec<String>,
    pub hosts: Vec<HostDist>,
    /// Set for these processes (on top of the front end's environment).
    pub env: Vec<(String, String)>,
}

/// One rank of a running job (see [`FrontEnd::job_table`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcEntry {
    pub rank: u32,
    pub host: String,
    /// 0: the rank is not running.
    pub pid: i32,
    pub exe: String,
}

/// Launcher options a session inherits from the job it attaches to: words for its
/// `libi-mpiexec` after `LIBI_MPIEXEC_ARGS`, and its environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inherit {
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

/// How [`FrontEnd::attach_and_launch`] learns a running job's process table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// A `libi-mpiexec` job: its control socket (table and launcher).
    Libi,
    /// Any MPIR starter (`mpiexec.hydra`, `srun`, `libi-mpiexec`): its `MPIR_proctable`,
    /// read with gdb.
    Mpir,
}

/// Daemons next to a running job (see [`FrontEnd::attach_and_launch`]).
#[derive(Debug, Clone)]
pub struct Attach {
    pub session: SessionId,
    /// The starter's pid (a `libi-mpiexec`'s, or an MPIR starter's).
    pub job_pid: u32,
    pub via: Via,
    /// Only the hosts of these ranks (`None`: every rank's).
    pub ranks: Option<Vec<u32>>,
    pub exe: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

/// What an attach session's master gets after its hello: `LIBI-PROCTAB/1 N`, the host of
/// each of the N members (one a host, in rank order), then the job's ranks (`RANK HOST PID
/// EXE`), names escaped as `libi-mpiexec --proctable` writes them.
fn proctab_text(hosts: &[HostDist], table: &[ProcEntry]) -> String {
    let esc = |x: &str| libi::text::escape(x.as_bytes(), usize::MAX).replace(' ', "\\x20");
    let mut text = format!("{PROCTAB_MAGIC} {}\n", hosts.len());
    for h in hosts {
        text.push_str(&esc(&h.host));
        text.push('\n');
    }
    for e in table {
        let exe = libi::text::escape(e.exe.as_bytes(), usize::MAX);
        text.push_str(&format!("{} {} {} {exe}\n", e.rank, esc(&e.host), e.pid));
    }
    text
}

/// One process per host of a job's table, in the order the hosts first appear: where to
/// start one daemon per node of the job.
pub fn job_hosts(table: &[ProcEntry]) -> Vec<HostDist> {
    let mut hosts: Vec<HostDist> = Vec::new();
    for e in table {
        if !hosts.iter().any(|h| h.host == e.host) {
            hosts.push(HostDist { host: e.host.clone(), procs: 1 });
        }
    }
    hosts
}

/// How sessions are launched.
#[derive(Debug, Clone)]
pub struct Options {
    /// `libi-mpiexec` (default: `$LIBI_MPIEXEC`, else next to this program or library, else
    /// on `PATH`).
    pub mpiexec: PathBuf,
    /// Options for every session's `libi-mpiexec` (default: `$LIBI_MPIEXEC_ARGS`, split at
    /// white space): `-launcher ssh`, `--tree kary:16`, `--launch-batch 16`, ...
    pub args: Vec<String>,
    /// How long `launch` waits for every member to call `LIBI_init` (default 60 s,
    /// `$LIBI_LAUNCH_WAIT` seconds).
    pub ready_wait: Duration,
    /// How long `finalize` waits for a session's members to end before it ends them
    /// (default 10 s, `$LIBI_FINALIZE_WAIT` seconds).
    pub finalize_wait: Duration,
}

impl Options {
    /// From the environment (see each field).
    pub fn from_env(near: Option<&Path>) -> Result<Options> {
        let secs = |k: &str, d: u64| -> Result<Duration> {
            match std::env::var(k) {
                Err(_) => Ok(Duration::from_secs(d)),
                Ok(v) => v
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s >= 0.0)
                    .map(Duration::from_secs_f64)
                    .ok_or_else(|| Error::new(Code::EInit, format!("{k}='{v}' is not seconds"))),
            }
        };
        Ok(Options {
            mpiexec: find_mpiexec(near),
            args: std::env::var("LIBI_MPIEXEC_ARGS")
                .map(|a| a.split_whitespace().map(String::from).collect())
                .unwrap_or_default(),
            ready_wait: secs("LIBI_LAUNCH_WAIT", 60)?,
            finalize_wait: secs("LIBI_FINALIZE_WAIT", 10)?,
        })
    }
}

fn find_mpiexec(near: Option<&Path>) -> PathBuf {
    if let Some(p) = std::env::var_os("LIBI_MPIEXEC") {
        return p.into();
    }
    let exe = std::env::current_exe().ok();
    let exe_dir = exe.as_deref().and_then(Path::parent);
    let dirs = [near, exe_dir, exe_dir.and_then(Path::parent)];
    for d in dirs.into_iter().flatten() {
        let p = d.join("libi-mpiexec");
        if p.is_file() {
            return p;
        }
    }
    "libi-mpiexec".into()
}

/// How long a send to a master whose connection is gone waits to learn why (the session's
/// end); and how long the master's connection is read after the session's `libi-mpiexec`
/// ended, once nothing more comes on it.
const ENDING_WAIT: Duration = Duration::from_secs(5);
/// How long `finalize`, `end_session` and `kill_session` wait for a session's
/// `libi-mpiexec` to exit once they ended it (SIGHUP: it tears its tree down at once).
const KILL_WAIT: Duration = Duration::from_secs(10);
/// The frame the master sends once every member is in `LIBI_init` (after the hello, before
/// any user data).
pub(crate) const READY: &[u8] = b"LIBI-READY";

/// Session handles are unique in the process: a stale handle of a finalized front end never
/// names a session of a new one.
static NEXT_SESSION: AtomicU32 = AtomicU32::new(0);

/// Where a session is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Created, not launched.
    Created,
    /// Being launched (its members are not all in `LIBI_init` yet).
    Launching,
    /// Every member called `LIBI_init`; the session runs.
    Running,
    /// It ended on its own with status 0, or was ended by the front end.
    Ended,
    /// It failed (a member died, an agent was lost, the launch failed): why.
    Failed(Error),
}

/// What [`FrontEnd::poll`] finds for a session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PollFlags {
    /// A message is waiting: `recv_usr_data` returns it at once.
    pub data: bool,
    /// The session has ended (messages its master sent before may still be waiting:
    /// `data` says so; once none is left, the next call returns its end).
    pub ended: bool,
}

/// Where a session's daemons' output goes (set before it is launched).
#[derive(Debug, Default)]
pub struct Output {
    /// The members' stdout (default: the front end's).
    pub stdout: Option<OwnedFd>,
    /// The members' stderr and the session's `libi-mpiexec` diagnostics (default: the
    /// front end's).
    pub stderr: Option<OwnedFd>,
    /// Each line is prefixed with `[rank] ` (`libi-mpiexec -l`).
    pub label: bool,
}

/// Called when a session ends (from a thread of the library; see
/// [`FrontEnd::set_status_callback`]).
pub type StatusCallback = dyn Fn(SessionId, &Status) + Send + Sync;

/// The session's `libi-mpiexec`: its pid, signalled only while `reaped` is false (both
/// under the lock).
struct Proc {
    pid: i32,
    reaped: Mutex<bool>,
}

impl Proc {
    /// End the session's job for sure: SIGHUP, on which `libi-mpiexec` tears the job down
    /// at once (its SIGTERM only forwards the signal and waits for the daemons, which may
    /// ignore it). The child starts with SIGHUP at its default (see `start`), so that it
    /// handles it even when we run under `nohup`.
    fn terminate(&self) {
        if let Ok(r) = self.reaped.lock() {
            if !*r {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(self.pid),
                    nix::sys::signal::Signal::SIGHUP,
                );
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Created,
    Launching,
    Running,
}

/// The master's connection, as its reader thread sees it.
enum Master {
    NotYet,
    Open(TcpStream),
    Closed,
}

/// A session's state, under its lock.
struct St {
    phase: Phase,
    hosts: Vec<String>,
    proc: Option<Arc<Proc>>,
    /// Messages from the master not received yet (at most `PENDING_MAX`; beyond, the reader
    /// waits and the master's connection is not read).
    pending: VecDeque<Vec<u8>>,
    master: Master,
    /// The master said every member is in `LIBI_init`.
    ready: bool,
    /// How the session's `libi-mpiexec` ended: with status 0, and why not; and when.
    exit: Option<(bool, String, Instant)>,
    /// The front end ended it (finalize, end, kill, a launch that timed out) before it
    /// ended on its own: its exit is no failure.
    ended_by_us: bool,
    /// Messages are dropped, not queued (finalize, end, kill: nobody will receive them).
    discard: bool,
    /// The end, once known for good (the exit known and the master's connection read to its
    /// end): `None` for a clean end, else the error later calls give.
    done: Option<Option<Error>>,
    /// The failure was returned to the caller (finalize does not repeat it).
    reported: bool,
    /// The end was returned to the caller (the event descriptor stops signalling it).
    collected: bool,
    output: Option<Output>,
    /// For an attach session: what the master gets after its hello (the job's table).
    proctab: Option<Arc<Vec<u8>>>,
    /// Its watcher is done, the status callback called (finalize waits for it: no callback
    /// runs once finalize returned).
    watched: bool,
}

impl St {
    fn new() -> St {
        St {
            phase: Phase::Created,
            hosts: Vec::new(),
            proc: None,
            pending: VecDeque::new(),
            master: Master::NotYet,
            ready: false,
            exit: None,
            ended_by_us: false,
            discard: false,
            done: None,
            reported: false,
            collected: false,
            output: None,
            proctab: None,
            watched: false,
        }
    }

    /// The end is known for good once the exit is, and the master's connection has been
    /// read to its end: every message the master sent comes before it.
    fn settle(&mut self, sid: u32) {
        if self.done.is_some() || matches!(self.master, Master::Open(_)) {
            return;
        }
        if let Some((ok, why, _)) = &self.exit {
            self.done = Some(
                (!*ok && !self.ended_by_us)
                    .then(|| Error::new(Code::ESessFailed, format!("session {sid}: {why}"))),
            );
        }
    }

    /// The error a call on the ended session returns, if it has ended (marks it returned).
    fn ended(&mut self, sid: u32) -> Option<Error> {
        let e = match self.done.as_ref()? {
            None => Error::new(Code::ESess, format!("session {sid} has ended")),
            Some(e) => {
                self.reported = true;
                Error::new(Code::ESessFailed, e.message.clone())
            }
        };
        self.collected = true;
        Some(e)
    }

    /// A launched session (running, or ended: its end), else why not.
    fn launched(&mut self, sid: u32) -> Result<()> {
        if let Some(e) = self.ended(sid) {
            return Err(e);
        }
        match self.phase {
            Phase::Created => {
                Err(Error::new(Code::EInit, format!("session {sid} is not launched")))
            }
            Phase::Launching | Phase::Running => Ok(()),
        }
    }

    fn status(&self, sid: u32) -> Status {
        match (&self.done, &self.exit, self.phase) {
            (Some(Some(e)), ..) => Status::Failed(e.clone()),
            (Some(None), ..) => Status::Ended,
            (None, Some((ok, why, _)), _) => {
                if *ok || self.ended_by_us {
                    Status::Ended
                } else {
                    Status::Failed(Error::new(Code::ESessFailed, format!("session {sid}: {why}")))
                }
            }
            (None, None, Phase::Created) => Status::Created,
            (None, None, Phase::Launching) => Status::Launching,
            (None, None, Phase::Running) => Status::Running,
        }
    }

    /// The front end ends the session: SIGHUP to its `libi-mpiexec` (its exit is then no
    /// failure, unless it had ended on its own already).
    fn terminate(&mut self) {
        if self.exit.is_none() {
            self.ended_by_us = true;
        }
        if let Some(p) = &self.proc {
            p.terminate();
        }
    }

    /// Nobody will receive: drop what waits, take nothing more, and tell the master (its
    /// `LIBI_recvUsrData` returns at once).
    fn close_master(&mut self) {
        self.discard = true;
        self.pending.clear();
        if let Master::Open(c) = &self.master {
            let _ = c.shutdown(std::net::Shutdown::Write);
        }
    }
}

struct Session {
    id: u32,
    st: Mutex<St>,
    /// Signalled on every change of `st`.
    cv: Condvar,
    /// Held while a message is written to the master (two senders never mix their frames;
    /// a receiver never waits for a sender).
    send: Mutex<()>,
    events: Arc<Events>,
}

impl Session {
    fn lock(&self) -> MutexGuard<'_, St> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Something changed: wake the session's waiters, `poll` and the event descriptor.
    fn changed(&self) {
        self.cv.notify_all();
        self.events.bump();
    }

    /// Wait on the session's state until `until`: false once it passed.
    fn wait<'a>(
        &self,
        g: MutexGuard<'a, St>,
        until: Option<Instant>,
    ) -> (MutexGuard<'a, St>, bool) {
        match until {
            None => (self.cv.wait(g).unwrap_or_else(|e| e.into_inner()), true),
            Some(t) => {
                let left = t.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return (g, false);
                }
                let (g, _) = self.cv.wait_timeout(g, left).unwrap_or_else(|e| e.into_inner());
                (g, true)
            }
        }
    }
}

/// What wakes `poll` and the tool's event loop: a counter bumped on every change of any
/// session, an event descriptor made on demand, and the tool's status callback.
#[derive(Default)]
struct Events {
    gen: Mutex<u64>,
    cv: Condvar,
    fd: OnceLock<OwnedFd>,
    callback: Mutex<Option<Arc<StatusCallback>>>,
}

impl Events {
    fn bump(&self) {
        if let Ok(mut g) = self.gen.lock() {
            *g += 1;
        }
        self.cv.notify_all();
        if let Some(fd) = self.fd.get() {
            let _ = nix::unistd::write(fd, &1u64.to_ne_bytes());
        }
    }

    fn gen(&self) -> u64 {
        self.gen.lock().map(|g| *g).unwrap_or(0)
    }
}

/// Keys of sessions waiting for their master.
#[derive(Default)]
struct Shared {
    keys: Mutex<HashMap<String, Arc<Session>>>,
}

/// At most this many connections to one of the front end's listeners wait for their hello
/// (at most `HELLO_MAX` bytes, within `HELLO_WAIT` of being accepted); one more evicts the
/// one that waited longest.
const AUTH_MAX: usize = 64;
/// Messages from a master held for the tool at most (beyond, the master's connection is not
/// read: a master that floods a front end that does not receive slows down, memory stays
/// flat).
const PENDING_MAX: usize = 16;
const HELLO_MAX: usize = 256;
const HELLO_WAIT: Duration = Duration::from_secs(10);

/// The tool's front end. Every method takes `&self` and may be called from any thread:
/// sessions are locked one by one and no lock is held while a call waits (see
/// `docs/session.md`, Threads).
pub struct FrontEnd {
    opts: Options,
    /// The port of the listener on the loopback address, bound at init.
    port: u16,
    /// Our listeners, by the address each is bound to (only the addresses that sessions'
    /// members reach us at, never every address of the host): the port of each.
    listeners: Mutex<HashMap<IpAddr, u16>>,
    shared: Arc<Shared>,
    sessions: Mutex<BTreeMap<u32, Arc<Session>>>,
    events: Arc<Events>,
    finalized: AtomicBool,
}

impl FrontEnd {
    /// `LIBI_fe_init`: options from the environment.
    pub fn init() -> Result<FrontEnd> {
        FrontEnd::with_options(Options::from_env(None)?)
    }

    pub fn with_options(opts: Options) -> Result<FrontEnd> {
        let mut fe = FrontEnd {
            opts,
            port: 0,
            listeners: Mutex::new(HashMap::new()),
            shared: Arc::new(Shared::default()),
            sessions: Mutex::new(BTreeMap::new()),
            events: Arc::new(Events::default()),
            finalized: AtomicBool::new(false),
        };
        fe.port = fe
            .listener(IpAddr::V4(Ipv4Addr::LOCALHOST))
            .map_err(|e| Error::new(Code::EInit, e.message))?;
        Ok(fe)
    }

    /// The port of our listener on `ip`, bound now if there is none yet.
    fn listener(&self, ip: IpAddr) -> Result<u16> {
        let mut listeners = self.listeners.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(port) = listeners.get(&ip) {
            return Ok(*port);
        }
        let failed = |e: String| Error::new(Code::ELaunch, format!("cannot listen on {ip}: {e}"));
        let listener = bind(ip).map_err(failed)?;
        let port = listener.local_addr().map_err(|e| failed(e.to_string()))?.port();
        let shared = self.shared.clone();
        std::thread::Builder::new()
            .name("libi-fe-accept".into())
            .spawn(move || accept(listener, shared))
            .map_err(|e| failed(e.to_string()))?;
        listeners.insert(ip, port);
        Ok(port)
    }

    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// The port the masters of sessions on this host connect to (on the loopback address;
    /// the masters of sessions elsewhere get the address and port of a listener bound to
    /// the address this host reaches them from).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `LIBI_fe_createSession`. Handles are unique in the process (never reused, not even
    /// by a later front end).
    pub fn create_session(&self) -> SessionId {
        let id = NEXT_SESSION.fetch_add(1, Ordering::Relaxed);
        let s = Arc::new(Session {
            id,
            st: Mutex::new(St::new()),
            cv: Condvar::new(),
            send: Mutex::new(()),
            events: self.events.clone(),
        });
        self.sessions.lock().unwrap_or_else(|e| e.into_inner()).insert(id, s);
        SessionId(id)
    }

    fn session(&self, s: SessionId) -> Result<Arc<Session>> {
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&s.0)
            .cloned()
            .ok_or_else(|| Error::new(Code::ESess, format!("no session {}", s.0)))
    }

    fn all_sessions(&self) -> Vec<Arc<Session>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner()).values().cloned().collect()
    }

    /// The hosts of a launched session, one per member, in rank order.
    pub fn hosts(&self, s: SessionId) -> Result<Vec<String>> {
        Ok(self.session(s)?.lock().hosts.clone())
    }

    /// Where the session is in its life (does not wait).
    pub fn session_status(&self, s: SessionId) -> Result<Status> {
        Ok(self.session(s)?.lock().status(s.0))
    }

    /// The process table of a running `libi-mpiexec` job (its front end's pid), in rank
    /// order: to start daemons next to it (one per host: [`job_hosts`]) and attach to its
    /// ranks. Asked with `libi-mpiexec --proctable PID`.
    pub fn job_table(&self, job_pid: u32) -> Result<Vec<ProcEntry>> {
        self.ask_job("--proctable", job_pid)?.lines().map(parse_row).collect()
    }

    /// The checked answer of `libi-mpiexec OPTION PID` (a job's control socket), or its one
    /// line of error.
    fn ask_job(&self, option: &str, job_pid: u32) -> Result<String> {
        let out = Command::new(&self.opts.mpiexec)
            .args([option, &job_pid.to_string()])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| {
                Error::new(Code::EIo, format!("cannot run {}: {e}", self.opts.mpiexec.display()))
            })?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let err = err.trim_end().strip_prefix("libi-mpiexec: ").unwrap_or(err.trim_end());
            return Err(Error::new(Code::ESess, err.to_string()));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// How the running `libi-mpiexec` job with this front-end pid starts its agents, as
    /// options for a session's `libi-mpiexec` (`libi-mpiexec --job-launcher PID`).
    pub fn job_launcher(&self, job_pid: u32) -> Result<Inherit> {
        let text = self.ask_job("--job-launcher", job_pid)?;
        let mut inherit = Inherit::default();
        let mut extra = Vec::new();
        for l in text.lines() {
            let (word, value) = l.split_once(' ').unwrap_or((l, ""));
            let value = String::from_utf8_lossy(&libi::text::unescape(value)).into_owned();
            match word {
                "kind" => inherit.args.extend(["-launcher".into(), value]),
                "exec" => inherit.args.extend(["-launcher-exec".into(), value]),
                "extra" => extra.push(value),
                "hybrid-hosts" => inherit.args.push("-hybrid-hosts".into()),
                _ => {}
            }
        }
        if !extra.is_empty() {
            inherit.env.push(("HYDRA_LAUNCHER_EXTRA_ARGS".into(), extra.join(" ")));
        }
        Ok(inherit)
    }

    /// `LIBI_fe_attachAndLaunch`: start one daemon per host of a running job (of the
    /// ranks `a.ranks`, or all), each told its host's part of the job's process table
    /// (`Member::proctab`, `LIBI_getMyProctab`). A libi-mpiexec job's table and launcher
    /// come from its control socket (the daemons start the way its agents did); another
    /// starter's table is read through MPIR with gdb, the daemons start as
    /// `LIBI_MPIEXEC_ARGS` says. Returns as `launch` does.
    pub fn attach_and_launch(&self, a: &Attach) -> Result<()> {
        let (table, inherit) = match a.via {
            Via::Libi => (self.job_table(a.job_pid)?, self.job_launcher(a.job_pid)?),
            Via::Mpir => (mpir_table(a.job_pid)?, Inherit::default()),
        };
        let table: Vec<ProcEntry> = match &a.ranks {
            None => table,
            Some(ranks) => {
                if let Some(r) = ranks.iter().find(|r| !table.iter().any(|e| e.rank == **r)) {
                    return Err(Error::new(
                        Code::EArg,
                        format!("the job with pid {} has no rank {r}", a.job_pid),
                    ));
                }
                table.into_iter().filter(|e| ranks.contains(&e.rank)).collect()
            }
        };
        let hosts = job_hosts(&table);
        if hosts.is_empty() {
            return Err(Error::new(
                Code::ESess,
                format!("the job with pid {} has no ranks", a.job_pid),
            ));
        }
        let text = proctab_text(&hosts, &table);
        if text.len() > MAX_MSG {
            return Err(Error::new(Code::EArg, "the job's process table is over 64 MiB"));
        }
        {
            let s = self.session(a.session)?;
            let mut st = s.lock();
            if st.phase != Phase::Created || st.done.is_some() {
                return Err(Error::new(
                    Code::ESessAlreadyLaunched,
                    format!("session {} was launched already", a.session.0),
                ));
            }
            st.proctab = Some(Arc::new(text.into_bytes()));
        }
        let dist = ProcDist {
            session: a.session,
            exe: a.exe.clone(),
            args: a.args.clone(),
            hosts,
            env: a.env.clone(),
        };
        self.launch_with(&[dist], &inherit)
    }

    /// `LIBI_fe_launch`: start every distribution's processes; several distributions of one
    /// session are its images (MPMD: member ranks follow the order of the distributions).
    /// Returns once every member of every session called `LIBI_init`, or with the first
    /// error (the sessions that did start go on).
    pub fn launch(&self, dists: &[ProcDist]) -> Result<()> {
        self.launch_with(dists, &Inherit::default())
    }

    /// `launch`, with launcher options that come after `LIBI_MPIEXEC_ARGS` for these
    /// sessions (an attach's inherited launcher).
    fn launch_with(&self, dists: &[ProcDist], extra: &Inherit) -> Result<()> {
        if self.finalized.load(Ordering::Relaxed) {
            return Err(Error::new(Code::EInit, "the front end was finalized"));
        }
        let mut order: Vec<u32> = Vec::new();
        let mut by: HashMap<u32, Vec<&ProcDist>> = HashMap::new();
        if dists.is_empty() {
            return Err(Error::new(Code::EArg, "no process distribution to launch"));
        }
        let mut sessions = HashMap::new();
        for (i, d) in dists.iter().enumerate() {
            let s = self.session(d.session)?;
            if s.lock().done.is_some() {
                return Err(Error::new(Code::ESess, format!("session {} has ended", d.session.0)));
            }
            if s.lock().phase != Phase::Created {
                return Err(Error::new(
                    Code::ESessAlreadyLaunched,
                    format!("session {} was launched already", d.session.0),
                ));
            }
            check_dist(i, d)?;
            if !by.contains_key(&d.session.0) {
                order.push(d.session.0);
            }
            by.entry(d.session.0).or_default().push(d);
            sessions.insert(d.session.0, s);
        }
        for sid in &order {
            check_placement(*sid, &by[sid])?;
        }
        // Claim every session (another thread may launch the same one meanwhile).
        let mut claimed = Vec::new();
        let mut first_err = None;
        for sid in &order {
            let s = &sessions[sid];
            let mut st = s.lock();
            if st.phase != Phase::Created || st.done.is_some() {
                first_err.get_or_insert(Error::new(
                    Code::ESessAlreadyLaunched,
                    format!("session {sid} was launched already"),
                ));
                continue;
            }
            st.phase = Phase::Launching;
            claimed.push(*sid);
        }
        let mut started = Vec::new();
        for sid in claimed {
            let s = &sessions[&sid];
            match self.start(s, &by[&sid], extra) {
                Ok(()) => started.push(sid),
                Err(e) => {
                    let mut st = s.lock();
                    st.done = Some(Some(e.clone()));
                    st.reported = true;
                    st.collected = true;
                    drop(st);
                    s.changed();
                    first_err.get_or_insert(e);
                }
            }
        }
        let deadline = Instant::now() + self.opts.ready_wait;
        for sid in started {
            if let Err(e) = self.wait_ready(&sessions[&sid], deadline) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    fn start(&self, s: &Arc<Session>, dists: &[&ProcDist], extra: &Inherit) -> Result<()> {
        let sid = s.id;
        let key = format!("{:032x}", rand::random::<u128>());
        let first = dists[0].hosts[0].host.clone();
        let ip = self.fe_ip(&first);
        let port = self.listener(ip)?;
        let mut args = self.opts.args.clone();
        args.extend(extra.args.iter().cloned());
        let hosts: Vec<String> = dists
            .iter()
            .flat_map(|d| &d.hosts)
            .map(|h| format!("{}:{}", h.host, h.procs))
            .collect();
        args.extend(["--pmgr".into(), "-hosts".into(), hosts.join(",")]);
        let (output, proctab) = {
            let mut st = s.lock();
            (st.output.take().unwrap_or_default(), st.proctab.is_some())
        };
        if output.label {
            args.push("-l".into());
        }
        // The key goes in libi-mpiexec's environment (ENV_KEY, passed to every member
        // whatever the options): a command line is readable by every local user.
        let mut genv = vec![
            (ENV_FE, SocketAddr::new(ip, port).to_string()),
            ("LIBI_SESSION", sid.to_string()),
        ];
        if proctab {
            genv.push((ENV_PROCTAB, "1".into()));
        }
        for (k, v) in genv {
            args.extend(["-genv".into(), k.into(), v]);
        }
        for (i, d) in dists.iter().enumerate() {
            if i > 0 {
                args.push(":".into());
            }
            let n: u32 = d.hosts.iter().map(|h| h.procs).sum();
            args.extend(["-n".into(), n.to_string()]);
            for (k, v) in &d.env {
                args.extend(["-env".into(), k.clone(), v.clone()]);
            }
            args.push(d.exe.clone());
            args.extend(d.args.iter().cloned());
        }
        self.shared.keys.lock().unwrap_or_else(|e| e.into_inner()).insert(key.clone(), s.clone());
        let mut cmd = Command::new(&self.opts.mpiexec);
        // Its stdin is a pipe we never write to, kept open in `child` (the watch thread's)
        // for as long as it runs: when this process ends, however (no finalize, SIGKILL),
        // the pipe's end of file ends the session (--end-on-stdin-eof).
        args.insert(0, "--end-on-stdin-eof".into());
        cmd.args(&args).env(ENV_KEY, &key).stdin(Stdio::piped()).stderr(Stdio::piped());
        cmd.envs(extra.env.iter().map(|(k, v)| (k, v)));
        if let Some(out) = output.stdout {
            cmd.stdout(Stdio::from(out));
        }
        // SAFETY: between fork and exec the child only calls sigaction (through `signal`),
        // which is async-signal-safe, and allocates nothing.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                use nix::sys::signal::{signal, SigHandler, Signal};
                signal(Signal::SIGHUP, SigHandler::SigDfl).map(drop).map_err(Into::into)
            });
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                self.shared.keys.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
                return Err(Error::new(
                    Code::ELaunch,
                    format!("session {sid}: cannot run {}: {e}", self.opts.mpiexec.display()),
                ));
            }
        };
        let proc = Arc::new(Proc { pid: child.id() as i32, reaped: Mutex::new(false) });
        let stderr = child.stderr.take();
        {
            let mut st = s.lock();
            st.hosts = dists
                .iter()
                .flat_map(|d| &d.hosts)
                .flat_map(|h| std::iter::repeat_n(h.host.clone(), h.procs as usize))
                .collect();
            st.proc = Some(proc.clone());
        }
        let (s2, shared) = (s.clone(), self.shared.clone());
        let err_to = output.stderr;
        let spawned = std::thread::Builder::new()
            .name(format!("libi-fe-session-{sid}"))
            .spawn(move || watch(child, stderr, err_to, proc, s2, shared, key));
        if let Err(e) = spawned {
            // The child runs, unwatched: end it (its stdin pipe closes with it, too).
            s.lock().terminate();
            return Err(Error::new(Code::ELaunch, format!("session {sid}: {e}")));
        }
        Ok(())
    }

    /// The address the master is told to connect to: ours on the route to the session's
    /// first host (where the master runs); loopback when that host is not resolvable (the
    /// fork launcher's simulated hosts).
    fn fe_ip(&self, host: &str) -> IpAddr {
        libi::launch::route_source(host).unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
    }

    /// Launch succeeds once the master said every member is in `LIBI_init` (it says so
    /// before any member may leave `LIBI_init`, and the front end reads the master's
    /// connection to its end before it takes the session's end into account: a member that
    /// exits right after `LIBI_init` cannot fail the launch).
    fn wait_ready(&self, s: &Session, deadline: Instant) -> Result<()> {
        let sid = s.id;
        let mut st = s.lock();
        loop {
            if st.ready {
                st.phase = Phase::Running;
                return Ok(());
            }
            if let Some(done) = st.done.clone() {
                let e = Error::new(
                    Code::ELaunch,
                    match (done, &st.exit) {
                        (Some(e), _) => e.message,
                        (None, _) if st.ended_by_us => {
                            format!("session {sid} was ended while it was being launched")
                        }
                        (None, _) => {
                            format!("session {sid} ended before its members all called LIBI_init")
                        }
                    },
                );
                st.done = Some(Some(e.clone()));
                st.reported = true;
                st.collected = true;
                return Err(e);
            }
            let (g, more) = s.wait(st, Some(deadline));
            st = g;
            if !more && !st.ready && st.done.is_none() {
                st.terminate();
                st.close_master();
                let e = Error::new(
                    Code::ELaunch,
                    format!(
                        "session {sid}: its members did not all call LIBI_init within {} s",
                        self.opts.ready_wait.as_secs_f64()
                    ),
                );
                st.done = Some(Some(e.clone()));
                st.reported = true;
                st.collected = true;
                drop(st);
                s.changed();
                return Err(e);
            }
        }
    }

    /// `LIBI_fe_sendUsrData`: a message to the session's master. Several threads may send
    /// to one session (messages go whole, one after the other) while others receive.
    pub fn send_usr_data(&self, sid: SessionId, data: &[u8]) -> Result<()> {
        if data.len() > MAX_MSG {
            return Err(Error::new(Code::EArg, format!("a message is at most {MAX_MSG} bytes")));
        }
        let s = self.session(sid)?;
        let conn = {
            let mut st = s.lock();
            st.launched(sid.0)?;
            if st.phase != Phase::Running {
                return Err(Error::new(
                    Code::EInit,
                    format!("session {} is still being launched", sid.0),
                ));
            }
            match &st.master {
                Master::Open(c) => c.try_clone().ok(),
                _ => None,
            }
        };
        let Some(mut conn) = conn else {
            let e = Error::new(Code::EIo, format!("session {}: no master connection", sid.0));
            return Err(failed_meanwhile(&s).unwrap_or(e));
        };
        let _one = s.send.lock().unwrap_or_else(|e| e.into_inner());
        frame::write(&mut conn, data).map_err(|e| {
            let e = Error::new(Code::EIo, format!("session {}: sending to the master: {e}", sid.0));
            failed_meanwhile(&s).unwrap_or(e)
        })
    }

    /// `LIBI_fe_recvUsrData`: the next message from the session's master (waits for it).
    /// Every message the master sent comes before the session's end (`LIBI_ESESS`, or
    /// `LIBI_ESESSFAILED` with the reason).
    pub fn recv_usr_data(&self, sid: SessionId) -> Result<Vec<u8>> {
        match self.recv_timeout(sid, None)? {
            Some(d) => Ok(d),
            None => Err(Error::new(Code::EIo, "no message")),
        }
    }

    /// The next message from the session's master, waiting at most `timeout` (`None`: as
    /// long as it takes; zero: not at all): `Ok(None)` when none came in time.
    pub fn recv_timeout(
        &self,
        sid: SessionId,
        timeout: Option<Duration>,
    ) -> Result<Option<Vec<u8>>> {
        let s = self.session(sid)?;
        let until = timeout.map(|t| Instant::now() + t);
        let mut st = s.lock();
        if st.phase == Phase::Created && st.done.is_none() {
            return Err(Error::new(Code::EInit, format!("session {} is not launched", sid.0)));
        }
        loop {
            if let Some(d) = st.pending.pop_front() {
                drop(st);
                s.changed();
                self.rearm();
                return Ok(Some(d));
            }
            if let Some(e) = st.ended(sid.0) {
                drop(st);
                self.rearm();
                return Err(e);
            }
            let (g, more) = s.wait(st, until);
            st = g;
            if !more {
                return Ok(None);
            }
        }
    }

    /// Whether the session ended, and its error if it failed (does not wait).
    pub fn status(&self, sid: SessionId) -> Result<Option<Option<Error>>> {
        Ok(match self.session_status(sid)? {
            Status::Ended => Some(None),
            Status::Failed(e) => Some(Some(e)),
            _ => None,
        })
    }

    /// What is ready in each of `sids` (in that order), waiting at most `timeout` (`None`:
    /// until something is) for at least one to have a message or to have ended.
    pub fn poll(&self, sids: &[SessionId], timeout: Option<Duration>) -> Result<Vec<PollFlags>> {
        let sessions: Vec<Arc<Session>> =
            sids.iter().map(|s| self.session(*s)).collect::<Result<_>>()?;
        let until = timeout.map(|t| Instant::now() + t);
        loop {
            let gen = self.events.gen();
            let flags: Vec<PollFlags> = sessions.iter().map(|s| flags(&s.lock())).collect();
            if flags.iter().any(|f| f.data || f.ended) {
                self.rearm();
                return Ok(flags);
            }
            let g = self.events.gen.lock().unwrap_or_else(|e| e.into_inner());
            if *g != gen {
                continue;
            }
            match until {
                None => drop(self.events.cv.wait(g).unwrap_or_else(|e| e.into_inner())),
                Some(t) => {
                    let left = t.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        drop(g);
                        self.rearm();
                        return Ok(flags);
                    }
                    drop(self.events.cv.wait_timeout(g, left).unwrap_or_else(|e| e.into_inner()));
                }
            }
        }
    }

    /// A descriptor for the tool's own event loop (`poll`, `epoll`, `select`): readable
    /// while any session has a message waiting, or has ended and no call has returned its
    /// end yet. Owned by the front end (do not close it); the library keeps its state, the
    /// tool need not read it.
    pub fn event_fd(&self) -> Result<RawFd> {
        if self.events.fd.get().is_none() {
            use nix::sys::eventfd::{EfdFlags, EventFd};
            let fd = EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
                .map_err(|e| Error::new(Code::EIo, format!("eventfd: {e}")))?;
            let _ = self.events.fd.set(fd.into());
        }
        self.rearm();
        self.events
            .fd
            .get()
            .map(|f| f.as_raw_fd())
            .ok_or_else(|| Error::new(Code::EIo, "no event descriptor"))
    }

    /// Make the event descriptor readable exactly when something is waiting: drain it, then
    /// look (a change after the drain writes it again itself).
    fn rearm(&self) {
        let Some(fd) = self.events.fd.get() else { return };
        let mut buf = [0u8; 8];
        let _ = nix::unistd::read(fd.as_raw_fd(), &mut buf);
        let waiting = self.all_sessions().iter().any(|s| {
            let st = s.lock();
            let f = flags(&st);
            f.data || (f.ended && !st.collected)
        });
        if waiting {
            let _ = nix::unistd::write(fd, &1u64.to_ne_bytes());
        }
    }

    /// Call `cb` whenever a session ends or fails (with its status), from a thread of the
    /// library, as soon as its `libi-mpiexec` has ended (a member died, an agent was lost,
    /// or it ended on its own). `cb` must not block for long; it may call the front end,
    /// but not `finalize` (which waits for the callbacks under way: none runs after it).
    pub fn set_status_callback(&self, cb: Option<Arc<StatusCallback>>) {
        *self.events.callback.lock().unwrap_or_else(|e| e.into_inner()) = cb;
    }

    /// Where a session's daemons' output goes (before it is launched).
    pub fn set_output(&self, sid: SessionId, output: Output) -> Result<()> {
        let s = self.session(sid)?;
        let mut st = s.lock();
        if st.phase != Phase::Created || st.done.is_some() {
            return Err(Error::new(
                Code::ESessAlreadyLaunched,
                format!("session {} was launched already", sid.0),
            ));
        }
        st.output = Some(output);
        Ok(())
    }

    /// End one session, leaving the others alone: its master's `LIBI_recvUsrData` returns
    /// (the front end closed its side), messages not received are dropped; the session gets
    /// `wait` to end on its own (`None`: `finalize_wait`), then is ended. Returns once it
    /// has; its failure if it failed on its own and that was not returned before.
    pub fn end_session(&self, sid: SessionId, wait: Option<Duration>) -> Result<()> {
        let s = self.session(sid)?;
        self.end(&s, Instant::now() + wait.unwrap_or(self.opts.finalize_wait));
        let r = end_result(&s);
        self.rearm();
        r
    }

    /// Kill one session now (its `libi-mpiexec` tears its agents and members down), leaving
    /// the others alone; returns once it is gone.
    pub fn kill_session(&self, sid: SessionId) -> Result<()> {
        self.end_session(sid, Some(Duration::ZERO))
    }

    /// End `s` (see `end_session`), waiting for it to end on its own until `until`.
    fn end(&self, s: &Session, until: Instant) {
        let mut st = s.lock();
        st.close_master();
        if st.phase == Phase::Created && st.done.is_none() {
            st.done = Some(None);
            st.collected = true;
            drop(st);
            s.changed();
            return;
        }
        drop(st);
        s.changed();
        self.wait_end(s, until, true);
    }

    /// Wait until `s` has ended, or `until`; then (if `kill`) end it and wait for that.
    fn wait_end(&self, s: &Session, until: Instant, kill: bool) {
        let mut st = s.lock();
        while st.done.is_none() && st.proc.is_some() {
            let (g, more) = s.wait(st, Some(until));
            st = g;
            if !more {
                break;
            }
        }
        if !kill || st.done.is_some() || st.proc.is_none() {
            return;
        }
        st.terminate();
        let until = Instant::now() + KILL_WAIT;
        while st.done.is_none() {
            let (g, more) = s.wait(st, Some(until));
            st = g;
            if !more {
                break;
            }
        }
    }

    /// `LIBI_fe_finalize`: wake every master waiting for a message (the front end closes
    /// its side), wait up to `finalize_wait` for every session to end, end the rest (their
    /// agents take their members down), and report the first session that failed on its
    /// own and was not reported before. Threads blocked in other calls return.
    pub fn finalize(&self) -> Result<()> {
        if self.finalized.swap(true, Ordering::SeqCst) {
            return Err(Error::new(Code::EInit, "the front end was finalized already"));
        }
        let sessions = self.all_sessions();
        for s in &sessions {
            s.lock().close_master();
            s.changed();
        }
        let deadline = Instant::now() + self.opts.finalize_wait;
        for s in &sessions {
            self.wait_end(s, deadline, false);
        }
        for s in &sessions {
            self.wait_end(s, Instant::now(), true);
        }
        // The status callbacks of the sessions that ended have returned.
        let until = Instant::now() + KILL_WAIT;
        for s in &sessions {
            let mut st = s.lock();
            while st.proc.is_some() && !st.watched {
                let (g, more) = s.wait(st, Some(until));
                st = g;
                if !more {
                    break;
                }
            }
        }
        let mut first_err = None;
        for s in &sessions {
            let mut st = s.lock();
            if let (Some(Some(e)), false) = (&st.done, st.reported) {
                first_err.get_or_insert(Error::new(Code::ESessFailed, e.message.clone()));
                st.reported = true;
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

/// A process table line (`RANK HOST PID EXE`, host and executable escaped).
pub(crate) fn parse_row(l: &str) -> Result<ProcEntry> {
    let mut f = l.splitn(4, ' ');
    let bad = || Error::new(Code::EIo, format!("bad process table line '{l}'"));
    let rank = f.next().and_then(|x| x.parse().ok()).ok_or_else(bad)?;
    let host = f.next().ok_or_else(bad)?;
    let host = String::from_utf8_lossy(&libi::text::unescape(host)).into_owned();
    let pid = f.next().and_then(|x| x.parse().ok()).ok_or_else(bad)?;
    let exe = f.next().ok_or_else(bad)?;
    let exe = String::from_utf8_lossy(&libi::text::unescape(exe)).into_owned();
    Ok(ProcEntry { rank, host, pid, exe })
}

/// What `poll` reports for a session in this state.
fn flags(st: &St) -> PollFlags {
    PollFlags { data: !st.pending.is_empty(), ended: st.exit.is_some() || st.done.is_some() }
}

/// The master's connection is gone: its session is most likely ending (a member died).
/// Wait up to [`ENDING_WAIT`] for its end, and give the session's failure
/// (`LIBI_ESESSFAILED` with the reason) rather than the broken connection's.
fn failed_meanwhile(s: &Session) -> Option<Error> {
    let until = Instant::now() + ENDING_WAIT;
    let mut st = s.lock();
    loop {
        if let Some(e) = st.ended(s.id) {
            return Some(e);
        }
        let (g, more) = s.wait(st, Some(until));
        st = g;
        if !more {
            return None;
        }
    }
}

/// What ending a session returns: its own failure, if not returned before.
fn end_result(s: &Session) -> Result<()> {
    let mut st = s.lock();
    st.collected = true;
    match (&st.done, st.reported) {
        (Some(Some(e)), false) => {
            let e = Error::new(Code::ESessFailed, e.message.clone());
            st.reported = true;
            Err(e)
        }
        (Some(_), _) => Ok(()),
        (None, _) => Err(Error::new(
            Code::EIo,
            format!("session {}: its libi-mpiexec did not end when told to", s.id),
        )),
    }
}

impl Drop for FrontEnd {
    /// Nothing is left running: every session still running is ended.
    fn drop(&mut self) {
        for s in self.all_sessions() {
            let mut st = s.lock();
            if st.done.is_none() {
                st.terminate();
            }
        }
    }
}

/// A distribution's own errors: executable, host list, process counts.
fn check_dist(i: usize, d: &ProcDist) -> Result<()> {
    let bad = |m: String| Err(Error::new(Code::EHostDist, m));
    if d.exe.is_empty() {
        return Err(Error::new(Code::EArg, format!("distribution {i}: no executable")));
    }
    if d.hosts.is_empty() {
        return bad(format!("distribution {i} ({}): the host distribution is empty", d.exe));
    }
    for h in &d.hosts {
        if h.host.is_empty() || h.host.contains([',', ':', ' ', '\t', '\n']) {
            return bad(format!("distribution {i} ({}): bad host name '{}'", d.exe, h.host));
        }
        if h.procs == 0 {
            return bad(format!("distribution {i} ({}): host '{}' has 0 processes", d.exe, h.host));
        }
    }
    for (k, _) in &d.env {
        if k.is_empty() || k.contains('=') {
            return Err(Error::new(Code::EArg, format!("distribution {i}: bad variable '{k}'")));
        }
    }
    Ok(())
}

/// Members are placed in blocks over the session's host list, where a host named twice
/// counts once (its slots add up): check that this gives every image the hosts it asked
/// for.
fn check_placement(sid: u32, dists: &[&ProcDist]) -> Result<()> {
    // The session is one job: at most `MAX_JOB_SIZE` processes, checked before anything is
    // laid out per process (below, and the session's host of each member).
    let total: u64 = dists.iter().flat_map(|d| &d.hosts).map(|h| u64::from(h.procs)).sum();
    if libi::job::job_size(total).is_none() {
        return Err(Error::new(
            Code::EArg,
            format!(
                "session {sid}: {total} processes asked for; a session is one job, of at most {} \
                 processes",
                libi::job::MAX_JOB_SIZE
            ),
        ));
    }
    let mut merged: Vec<(String, u32)> = Vec::new();
    for h in dists.iter().flat_map(|d| &d.hosts) {
        match merged.iter_mut().find(|m| m.0 == h.host) {
            Some(m) => m.1 += h.procs,
            None => merged.push((h.host.clone(), h.procs)),
        }
    }
    let mut slots = merged.iter().flat_map(|(h, n)| std::iter::repeat_n(h.as_str(), *n as usize));
    for d in dists {
        let mut want: Vec<&str> = d
            .hosts
            .iter()
            .flat_map(|h| std::iter::repeat_n(h.host.as_str(), h.procs as usize))
            .collect();
        let mut got: Vec<&str> = slots.by_ref().take(want.len()).collect();
        want.sort_unstable();
        got.sort_unstable();
        if want != got {
            return Err(Error::new(
                Code::EHostDist,
                format!(
                    "session {sid}: image {} shares hosts with another image of the session in \
                     an order that cannot be kept (list each shared host's images next to each other)",
                    d.exe
                ),
            ));
        }
    }
    Ok(())
}

/// A listener on `ip` (only: members reach us there), on a port of the configured range.
fn bind(ip: IpAddr) -> std::result::Result<TcpListener, String> {
    match libi::launch::port_range(&|k| std::env::var(k).ok()).map_err(|e| e.to_string())? {
        None => TcpListener::bind(SocketAddr::new(ip, 0)).map_err(|e| e.to_string()),
        Some((var, lo, hi)) => (lo..=hi)
            .find_map(|p| TcpListener::bind(SocketAddr::new(ip, p)).ok())
            .ok_or_else(|| format!("no free port in {var} {lo}:{hi}")),
    }
}

/// Accept masters: each must say hello with a session's key first, within `HELLO_WAIT` of
/// being accepted however slowly its bytes come, at most `HELLO_MAX` bytes; anything else
/// is closed before a byte more is read. At most `AUTH_MAX` connections wait for their
/// hello; one more evicts the one that waited longest (`libi::preauth`).
fn accept(listener: TcpListener, shared: Arc<Shared>) {
    let pool: Arc<Mutex<PreAuth<TcpStream>>> = Arc::new(Mutex::new(PreAuth::new(AUTH_MAX)));
    for conn in listener.incoming() {
        let Ok(conn) = conn else {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        let until = Instant::now() + HELLO_WAIT;
        let Ok(handle) = conn.try_clone() else { continue };
        let ticket = {
            let mut p = pool.lock().unwrap_or_else(|e| e.into_inner());
            let admitted = p.admit(handle);
            if let Some(old) = admitted.evicted {
                let _ = old.shutdown(std::net::Shutdown::Both);
            }
            admitted.ticket
        };
        let (shared, pool2) = (shared.clone(), pool.clone());
        let spawned = std::thread::Builder::new().name("libi-fe-master".into()).spawn(move || {
            if let Some(s) = hello(&conn, &shared, until, &pool2, ticket) {
                serve_master(conn, &s);
            }
        });
        if spawned.is_err() {
            pool.lock().unwrap_or_else(|e| e.into_inner()).done(ticket);
        }
    }
}

/// Reads from a connection that must be done by `until`, however its bytes trickle in.
struct Until<'a> {
    conn: &'a TcpStream,
    until: Instant,
}

impl std::io::Read for Until<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        self.conn.set_read_timeout(Some(left))?;
        std::io::Read::read(&mut self.conn, buf)
    }
}

/// The master's hello on `conn` (see [`accept`]): its session, once it no longer waits in
/// the pool (a connection evicted meanwhile is not taken, even with a right key).
fn hello(
    conn: &TcpStream,
    shared: &Shared,
    until: Instant,
    pool: &Mutex<PreAuth<TcpStream>>,
    ticket: u64,
) -> Option<Arc<Session>> {
    let h = frame::read(&mut Until { conn, until }, HELLO_MAX);
    pool.lock().unwrap_or_else(|e| e.into_inner()).done(ticket)?;
    let h = String::from_utf8(h.ok()??).ok()?;
    let key = h.strip_prefix(HELLO)?.strip_prefix(' ')?;
    let s = shared.keys.lock().ok()?.remove(key)?;
    let _ = conn.set_nodelay(true);
    Some(s)
}

/// Reads the master's connection, its reads timing out now and then: once the session's
/// `libi-mpiexec` has ended, a connection on which nothing came for [`ENDING_WAIT`] is
/// taken as closed (a process that kept it open cannot hold the session's end back).
struct Patient<'a> {
    conn: &'a TcpStream,
    s: &'a Session,
}

impl std::io::Read for Patient<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            match std::io::Read::read(&mut self.conn, buf) {
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    let st = self.s.lock();
                    if st.exit.as_ref().is_some_and(|x| x.2.elapsed() >= ENDING_WAIT) {
                        return Err(e);
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                r => return r,
            }
        }
    }
}

/// The master's side of a session: its `READY` (every member is in `LIBI_init`), then its
/// messages, queued in order (at most `PENDING_MAX`; beyond, the connection waits), then
/// its end.
fn serve_master(conn: TcpStream, s: &Session) {
    let proctab = {
        let mut st = s.lock();
        match conn.try_clone() {
            Ok(c) if !st.discard => st.master = Master::Open(c),
            _ => {
                st.master = Master::Closed;
                st.settle(s.id);
                drop(st);
                s.changed();
                return;
            }
        }
        st.proctab.clone()
    };
    s.changed();
    if let Some(t) = proctab {
        let _one = s.send.lock().unwrap_or_else(|e| e.into_inner());
        let _ = frame::write(&mut &conn, &t);
    }
    let _ = conn.set_read_timeout(Some(Duration::from_secs(1)));
    let mut r = BufReader::new(Patient { conn: &conn, s });
    while let Ok(Some(d)) = frame::read(&mut r, MAX_MSG) {
        let mut st = s.lock();
        if !st.ready {
            // The master's first frame says every member is in LIBI_init; anything else is
            // not a LIBI master of this version.
            if d != READY {
                break;
            }
            st.ready = true;
            drop(st);
            s.changed();
            continue;
        }
        while st.pending.len() >= PENDING_MAX && !st.discard {
            st = s.cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        if !st.discard {
            st.pending.push_back(d);
        }
        drop(st);
        s.changed();
    }
    let mut st = s.lock();
    st.master = Master::Closed;
    st.settle(s.id);
    drop(st);
    s.changed();
}

/// The line of `libi-mpiexec` that says why a session failed, in the session API's terms
/// (a member is a rank that did not call `LIBI_finalize`, not one that skipped PMGR close).
fn in_libi_terms(why: &str) -> String {
    why.replace("without calling PMGR close", "without calling LIBI_finalize")
        .replace("its PMGR replies", "its collectives' replies")
        .replace("PMGR", "LIBI collectives")
}

/// Relay the session's `libi-mpiexec` stderr (to ours, or where the tool said), keeping
/// its last own line (why it failed), then reap it, exactly once, and report how it ended.
fn watch(
    mut child: Child,
    stderr: Option<std::process::ChildStderr>,
    err_to: Option<OwnedFd>,
    proc: Arc<Proc>,
    s: Arc<Session>,
    shared: Arc<Shared>,
    key: String,
) {
    let mut why = String::new();
    let mut to: Box<dyn Write> = match err_to {
        Some(fd) => Box::new(std::fs::File::from(fd)),
        None => Box::new(std::io::stderr()),
    };
    if let Some(e) = stderr {
        let mut r = BufReader::new(e);
        let mut line = Vec::new();
        while matches!(r.read_until(b'\n', &mut line), Ok(n) if n > 0) {
            let text = String::from_utf8_lossy(&line);
            // libi-mpiexec's own lines in the session API's terms; the members' as they are.
            if text.starts_with("libi-mpiexec: ") {
                let _ = to.write_all(in_libi_terms(&text).as_bytes());
            } else {
                let _ = to.write_all(&line);
            }
            // The reason of a failure is libi-mpiexec's last line of its own that is not a
            // warning or a trace (`libi-mpiexec: warning: ...`).
            if let Some(m) = text.strip_prefix("libi-mpiexec: ") {
                let diag = ["warning: ", "info: ", "debug: ", "trace: "];
                if !diag.iter().any(|d| m.starts_with(d)) {
                    why = m.trim_end().to_string();
                }
            }
            line.clear();
        }
    }
    let _ = to.flush();
    drop(to);
    // Learn of the exit without reaping, mark it under the lock that `terminate` takes,
    // then reap: the pid is never signalled once it may be reused.
    let pid = nix::unistd::Pid::from_raw(proc.pid);
    let flags = nix::sys::wait::WaitPidFlag::WEXITED | nix::sys::wait::WaitPidFlag::WNOWAIT;
    while let Err(nix::errno::Errno::EINTR) =
        nix::sys::wait::waitid(nix::sys::wait::Id::Pid(pid), flags)
    {}
    let status = match proc.reaped.lock() {
        Ok(mut r) => {
            *r = true;
            child.wait()
        }
        Err(_) => child.wait(),
    };
    shared.keys.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
    let (ok, why) = match status {
        Ok(s) if s.success() => (true, why),
        Ok(s) if why.is_empty() => (false, format!("libi-mpiexec ended with {s}")),
        Ok(_) => (false, in_libi_terms(&why)),
        Err(e) => (false, format!("waiting for libi-mpiexec: {e}")),
    };
    let status = {
        let mut st = s.lock();
        st.exit = Some((ok, why, Instant::now()));
        if matches!(st.master, Master::NotYet) {
            st.master = Master::Closed;
        }
        st.settle(s.id);
        st.status(s.id)
    };
    s.changed();
    let cb = s.events.callback.lock().ok().and_then(|c| c.clone());
    if let Some(cb) = cb {
        cb(SessionId(s.id), &status);
    }
    s.lock().watched = true;
    s.changed();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(hosts: &[(&str, u32)]) -> ProcDist {
        ProcDist {
            session: SessionId(0),
            exe: "x".into(),
            args: vec![],
            hosts: hosts.iter().map(|(h, n)| HostDist { host: h.to_string(), procs: *n }).collect(),
            env: vec![],
        }
    }

    /// The table an attach session's master gets, and each member's part of it: its host
    /// (as the session names it) and the job's ranks there, names with spaces and control
    /// characters intact.
    #[test]
    fn each_member_keeps_its_hosts_rows() {
        let row = |rank, host: &str, pid, exe: &str| ProcEntry {
            rank,
            host: host.into(),
            pid,
            exe: exe.into(),
        };
        let table = vec![
            row(0, "n1", 10, "/bin/a b"),
            row(1, "n 2", 11, "/bin/x\ny"),
            row(2, "n1", 12, "/bin/a b"),
        ];
        let hosts = job_hosts(&table);
        let text = proctab_text(&hosts, &table);
        let (h, rows) = crate::member::my_slice(text.as_bytes(), 0).expect("slice");
        assert_eq!(h.as_deref(), Some("n1"));
        assert_eq!(rows, vec![table[0].clone(), table[2].clone()]);
        let (h, rows) = crate::member::my_slice(text.as_bytes(), 1).expect("slice");
        assert_eq!(h.as_deref(), Some("n 2"));
        assert_eq!(rows, vec![table[1].clone()]);
        assert_eq!(crate::member::my_slice(text.as_bytes(), 2).expect("slice"), (None, vec![]));
        assert!(crate::member::my_slice(b"garbage", 0).is_err());
    }

    #[test]
    fn bad_distributions_are_named() {
        assert_eq!(check_dist(0, &d(&[])).map_err(|e| e.code), Err(Code::EHostDist));
        let e = check_dist(2, &d(&[("a", 1), ("b", 0)])).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (Code::EHostDist, "distribution 2 (x): host 'b' has 0 processes")
        );
        assert_eq!(check_dist(0, &d(&[("a:b", 1)])).map_err(|e| e.code), Err(Code::EHostDist));
        assert!(check_dist(0, &d(&[("a", 3)])).is_ok());
    }

    #[test]
    fn images_keep_their_hosts_or_the_launch_says_why() {
        // Disjoint, or a shared host used by neighbouring images: kept.
        assert!(check_placement(0, &[&d(&[("a", 2)]), &d(&[("b", 1)])]).is_ok());
        // Too many processes: refused before one string per process is made (no abort).
        let e = check_placement(0, &[&d(&[("a", u32::MAX), ("a", u32::MAX)])]).unwrap_err();
        assert_eq!(e.code, Code::EArg, "{e:?}");
        assert!(e.message.contains("8589934590 processes"), "{e:?}");
        assert!(check_placement(0, &[&d(&[("a", 1), ("b", 1)]), &d(&[("b", 2), ("c", 1)])]).is_ok());
        // The same two hosts for both images: block placement would give A both slots of a.
        let e = check_placement(0, &[&d(&[("a", 1), ("b", 1)]), &d(&[("a", 1), ("b", 1)])]);
        assert_eq!(e.map_err(|e| e.code), Err(Code::EHostDist));
    }
}

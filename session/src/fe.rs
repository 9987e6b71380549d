//! The front end: sessions, their launch, user data with each session's master, and the
//! end of it all. Each session runs as one `libi-mpiexec --pmgr` job, a child of this
//! process; the front end signals nothing but those children, and only while they are
//! unreaped (so never a reused pid).

use crate::member::{ENV_FE, ENV_KEY, HELLO};
use crate::{frame, Code, Error, Result, MAX_MSG};
use libi::preauth::PreAuth;
use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
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
/// end, [`FrontEnd::failed_meanwhile`]).
const ENDING_WAIT: Duration = Duration::from_secs(5);

/// What a session's threads report.
enum Ev {
    /// The master connected: every member is in `LIBI_init`.
    Ready,
    Data(Vec<u8>),
    /// The master's connection closed.
    Closed,
    /// The session's `libi-mpiexec` ended: whether with status 0, and why not.
    Exited {
        ok: bool,
        why: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Created,
    Launched,
    /// Ended (the error it ended with, if it failed).
    Ended(Option<Error>),
}

/// The session's `libi-mpiexec`: its pid, signalled only while `reaped` is false (both
/// under the lock).
struct Proc {
    pid: i32,
    reaped: Mutex<bool>,
}

impl Proc {
    /// End the session's job for sure: SIGHUP, on which `libi-mpiexec` tears the job down
    /// at once (its SIGTERM only forwards the signal and waits for the daemons, which may
    /// ignore it). The child starts with SIGHUP at its default (see `launch`), so that it
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

struct Session {
    state: State,
    hosts: Vec<String>,
    rx: Option<Receiver<Ev>>,
    pending: VecDeque<Vec<u8>>,
    proc: Option<Arc<Proc>>,
    master_closed: bool,
    /// The session's failure was returned to the caller already (finalize does not repeat
    /// it).
    reported: bool,
}

impl Session {
    /// Its `libi-mpiexec` ended (with status 0 or not, and why): the session is over, and
    /// this is the error its caller gets (`LIBI_ESESSFAILED` with the reason for a failure).
    fn ended(&mut self, sid: SessionId, ok: bool, why: &str) -> Error {
        self.rx = None;
        let e = if ok {
            Error::new(Code::ESess, format!("session {} has ended", sid.0))
        } else {
            Error::new(Code::ESessFailed, format!("session {}: {why}", sid.0))
        };
        self.state = State::Ended((!ok).then(|| e.clone()));
        self.reported = true;
        e
    }
}

/// Keys of sessions waiting for their master, and the masters' connections.
#[derive(Default)]
struct Shared {
    keys: Mutex<HashMap<String, (u32, SyncSender<Ev>)>>,
    masters: Mutex<HashMap<u32, TcpStream>>,
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

/// The tool's front end.
pub struct FrontEnd {
    opts: Options,
    /// The port of the listener on the loopback address, bound at init.
    port: u16,
    /// Our listeners, by the address each is bound to (only the addresses that sessions'
    /// members reach us at, never every address of the host): the port of each.
    listeners: HashMap<IpAddr, u16>,
    shared: Arc<Shared>,
    sessions: Vec<Session>,
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
            listeners: HashMap::new(),
            shared: Arc::new(Shared::default()),
            sessions: Vec::new(),
        };
        fe.port = fe
            .listener(IpAddr::V4(Ipv4Addr::LOCALHOST))
            .map_err(|e| Error::new(Code::EInit, e.message))?;
        Ok(fe)
    }

    /// The port of our listener on `ip`, bound now if there is none yet.
    fn listener(&mut self, ip: IpAddr) -> Result<u16> {
        if let Some(port) = self.listeners.get(&ip) {
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
        self.listeners.insert(ip, port);
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

    /// `LIBI_fe_createSession`.
    pub fn create_session(&mut self) -> SessionId {
        self.sessions.push(Session {
            state: State::Created,
            hosts: Vec::new(),
            rx: None,
            pending: VecDeque::new(),
            proc: None,
            master_closed: false,
            reported: false,
        });
        SessionId(self.sessions.len() as u32 - 1)
    }

    fn session(&mut self, s: SessionId) -> Result<&mut Session> {
        self.sessions
            .get_mut(s.0 as usize)
            .ok_or_else(|| Error::new(Code::ESess, format!("no session {}", s.0)))
    }

    /// The hosts of a launched session, one per member, in rank order.
    pub fn hosts(&self, s: SessionId) -> Result<&[String]> {
        self.sessions
            .get(s.0 as usize)
            .map(|x| x.hosts.as_slice())
            .ok_or_else(|| Error::new(Code::ESess, format!("no session {}", s.0)))
    }

    /// The process table of a running `libi-mpiexec` job (its front end's pid), in rank
    /// order: to start daemons next to it (one per host: [`job_hosts`]) and attach to its
    /// ranks. Asked with `libi-mpiexec --proctable PID`.
    pub fn job_table(&self, job_pid: u32) -> Result<Vec<ProcEntry>> {
        let out = Command::new(&self.opts.mpiexec)
            .args(["--proctable", &job_pid.to_string()])
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
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .map(|l| {
                let mut f = l.splitn(4, ' ');
                let bad = || Error::new(Code::EIo, format!("bad process table line '{l}'"));
                let rank = f.next().and_then(|x| x.parse().ok()).ok_or_else(bad)?;
                let host = f.next().ok_or_else(bad)?.to_string();
                let pid = f.next().and_then(|x| x.parse().ok()).ok_or_else(bad)?;
                let exe = f.next().ok_or_else(bad)?;
                let exe = String::from_utf8_lossy(&libi::text::unescape(exe)).into_owned();
                Ok(ProcEntry { rank, host, pid, exe })
            })
            .collect()
    }

    /// `LIBI_fe_launch`: start every distribution's processes; several distributions of one
    /// session are its images (MPMD: member ranks follow the order of the distributions).
    /// Returns once every member of every session called `LIBI_init`, or with the first
    /// error (the sessions that did start go on).
    pub fn launch(&mut self, dists: &[ProcDist]) -> Result<()> {
        let mut order: Vec<u32> = Vec::new();
        let mut by: HashMap<u32, Vec<&ProcDist>> = HashMap::new();
        if dists.is_empty() {
            return Err(Error::new(Code::EArg, "no process distribution to launch"));
        }
        for (i, d) in dists.iter().enumerate() {
            let s = self.session(d.session)?;
            if s.state != State::Created {
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
        }
        for sid in &order {
            check_placement(*sid, &by[sid])?;
        }
        let mut first_err = None;
        let mut started = Vec::new();
        for sid in order {
            match self.start(sid, &by[&sid]) {
                Ok(()) => started.push(sid),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        let deadline = Instant::now() + self.opts.ready_wait;
        for sid in started {
            if let Err(e) = self.wait_ready(sid, deadline) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    fn start(&mut self, sid: u32, dists: &[&ProcDist]) -> Result<()> {
        let key = format!("{:032x}", rand::random::<u128>());
        let (tx, rx) = sync_channel(PENDING_MAX);
        let first = dists[0].hosts[0].host.clone();
        let ip = self.fe_ip(&first);
        let port = match self.listener(ip) {
            Ok(port) => port,
            Err(e) => {
                self.sessions[sid as usize].state = State::Ended(Some(e.clone()));
                self.sessions[sid as usize].reported = true;
                return Err(e);
            }
        };
        let mut args = self.opts.args.clone();
        let hosts: Vec<String> = dists
            .iter()
            .flat_map(|d| &d.hosts)
            .map(|h| format!("{}:{}", h.host, h.procs))
            .collect();
        args.extend(["--pmgr".into(), "-hosts".into(), hosts.join(",")]);
        // The key goes in libi-mpiexec's environment (ENV_KEY, passed to every member
        // whatever the options): a command line is readable by every local user.
        for (k, v) in
            [(ENV_FE, SocketAddr::new(ip, port).to_string()), ("LIBI_SESSION", sid.to_string())]
        {
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
        if let Ok(mut k) = self.shared.keys.lock() {
            k.insert(key.clone(), (sid, tx.clone()));
        }
        let mut cmd = Command::new(&self.opts.mpiexec);
        // Its stdin is a pipe we never write to, kept open in `child` (the watch thread's)
        // for as long as it runs: when this process ends, however (no finalize, SIGKILL),
        // the pipe's end of file ends the session (--end-on-stdin-eof).
        args.insert(0, "--end-on-stdin-eof".into());
        cmd.args(&args).env(ENV_KEY, &key).stdin(Stdio::piped()).stderr(Stdio::piped());
        // SAFETY: between fork and exec the child only calls sigaction (through `signal`),
        // which is async-signal-safe, and allocates nothing.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                use nix::sys::signal::{signal, SigHandler, Signal};
                signal(Signal::SIGHUP, SigHandler::SigDfl).map(drop).map_err(Into::into)
            });
        }
        let child = cmd.spawn();
        let mut child = match child {
            Ok(c) => c,
            Err(e) => {
                if let Ok(mut k) = self.shared.keys.lock() {
                    k.remove(&key);
                }
                let e = Error::new(
                    Code::ELaunch,
                    format!("session {sid}: cannot run {}: {e}", self.opts.mpiexec.display()),
                );
                self.sessions[sid as usize].state = State::Ended(Some(e.clone()));
                self.sessions[sid as usize].reported = true;
                return Err(e);
            }
        };
        let proc = Arc::new(Proc { pid: child.id() as i32, reaped: Mutex::new(false) });
        let stderr = child.stderr.take();
        let p = proc.clone();
        let shared = self.shared.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("libi-fe-session-{sid}"))
            .spawn(move || watch(child, stderr, p, tx, shared, key, sid));
        let s = &mut self.sessions[sid as usize];
        s.hosts = dists
            .iter()
            .flat_map(|d| &d.hosts)
            .flat_map(|h| std::iter::repeat_n(h.host.clone(), h.procs as usize))
            .collect();
        s.rx = Some(rx);
        s.proc = Some(proc);
        s.state = State::Launched;
        spawned.map(|_| ()).map_err(|e| Error::new(Code::ELaunch, e.to_string()))
    }

    /// The address the master is told to connect to: ours on the route to the session's
    /// first host (where the master runs); loopback when that host is not resolvable (the
    /// fork launcher's simulated hosts).
    fn fe_ip(&self, host: &str) -> IpAddr {
        libi::launch::route_source(host).unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
    }

    fn wait_ready(&mut self, sid: u32, deadline: Instant) -> Result<()> {
        loop {
            let now = Instant::now();
            let s = &mut self.sessions[sid as usize];
            let Some(rx) = s.rx.as_ref() else { return Ok(()) };
            let ev = rx.recv_timeout(deadline.saturating_duration_since(now));
            match ev {
                Ok(Ev::Ready) => return Ok(()),
                Ok(Ev::Data(d)) => s.pending.push_back(d),
                Ok(Ev::Closed) => s.master_closed = true,
                Ok(Ev::Exited { ok, why }) => {
                    let e = Error::new(
                        Code::ELaunch,
                        if ok {
                            format!("session {sid} ended before its master called LIBI_init")
                        } else {
                            format!("session {sid}: {why}")
                        },
                    );
                    s.state = State::Ended(Some(e.clone()));
                    s.reported = true;
                    s.rx = None;
                    return Err(e);
                }
                Err(RecvTimeoutError::Timeout) => {
                    if let Some(p) = &s.proc {
                        p.terminate();
                    }
                    let e = Error::new(
                        Code::ELaunch,
                        format!(
                            "session {sid}: its members did not all call LIBI_init within {} s",
                            self.opts.ready_wait.as_secs_f64()
                        ),
                    );
                    s.state = State::Ended(Some(e.clone()));
                    s.reported = true;
                    return Err(e);
                }
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            }
        }
    }

    fn launched(&mut self, sid: SessionId) -> Result<&mut Session> {
        let s = self.session(sid)?;
        match &s.state {
            State::Launched => Ok(s),
            State::Created => {
                Err(Error::new(Code::EInit, format!("session {} is not launched", sid.0)))
            }
            State::Ended(Some(e)) => {
                s.reported = true;
                Err(Error::new(Code::ESessFailed, e.message.clone()))
            }
            State::Ended(None) => {
                Err(Error::new(Code::ESess, format!("session {} has ended", sid.0)))
            }
        }
    }

    /// `LIBI_fe_sendUsrData`: a message to the session's master.
    pub fn send_usr_data(&mut self, sid: SessionId, data: &[u8]) -> Result<()> {
        if data.len() > MAX_MSG {
            return Err(Error::new(Code::EArg, format!("a message is at most {MAX_MSG} bytes")));
        }
        self.launched(sid)?;
        let conn = self.shared.masters.lock().ok().and_then(|m| m.get(&sid.0)?.try_clone().ok());
        let Some(mut conn) = conn else {
            let e = Error::new(Code::EIo, format!("session {}: no master connection", sid.0));
            return Err(self.failed_meanwhile(sid).unwrap_or(e));
        };
        frame::write(&mut conn, data).map_err(|e| {
            let e = Error::new(Code::EIo, format!("session {}: sending to the master: {e}", sid.0));
            self.failed_meanwhile(sid).unwrap_or(e)
        })
    }

    /// The master's connection is gone: its session is most likely ending (a member died).
    /// Wait up to [`ENDING_WAIT`] for its `libi-mpiexec` to end, and give the session's
    /// failure (`LIBI_ESESSFAILED` with the reason) rather than the broken connection's.
    fn failed_meanwhile(&mut self, sid: SessionId) -> Option<Error> {
        let s = self.sessions.get_mut(sid.0 as usize)?;
        let deadline = Instant::now() + ENDING_WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match s.rx.as_ref()?.recv_timeout(left).ok()? {
                Ev::Data(d) => s.pending.push_back(d),
                Ev::Ready => {}
                Ev::Closed => s.master_closed = true,
                Ev::Exited { ok, why } => return Some(s.ended(sid, ok, &why)),
            }
        }
    }

    /// `LIBI_fe_recvUsrData`: the next message from the session's master (waits for it). A
    /// session that failed meanwhile gives its error.
    pub fn recv_usr_data(&mut self, sid: SessionId) -> Result<Vec<u8>> {
        let s = self.launched(sid)?;
        if let Some(d) = s.pending.pop_front() {
            return Ok(d);
        }
        loop {
            let ev = match s.rx.as_ref() {
                Some(rx) => rx.recv().ok(),
                None => None,
            };
            match ev {
                Some(Ev::Data(d)) => return Ok(d),
                Some(Ev::Ready) => {}
                Some(Ev::Closed) => s.master_closed = true,
                Some(Ev::Exited { ok, why }) => return Err(s.ended(sid, ok, &why)),
                None => {
                    return Err(Error::new(Code::ESess, format!("session {} has ended", sid.0)))
                }
            }
        }
    }

    /// Whether the session ended, and its error if it failed (does not wait).
    pub fn status(&mut self, sid: SessionId) -> Result<Option<Option<Error>>> {
        let s = self.session(sid)?;
        // Bounded: messages not received yet stay in the channel (and in the master's
        // connection) beyond PENDING_MAX.
        while s.pending.len() < PENDING_MAX {
            let Some(ev) = s.rx.as_ref().and_then(|rx| rx.try_recv().ok()) else { break };
            match ev {
                Ev::Data(d) => s.pending.push_back(d),
                Ev::Closed => s.master_closed = true,
                Ev::Ready => {}
                Ev::Exited { ok, why } => {
                    s.rx = None;
                    s.state = State::Ended((!ok).then(|| {
                        Error::new(Code::ESessFailed, format!("session {}: {why}", sid.0))
                    }));
                }
            }
        }
        Ok(match &s.state {
            State::Ended(e) => Some(e.clone()),
            _ => None,
        })
    }

    /// `LIBI_fe_finalize`: wait up to `finalize_wait` for every session to end, end the
    /// rest (their agents take their members down), and report the first session that
    /// failed on its own.
    pub fn finalize(mut self) -> Result<()> {
        let deadline = Instant::now() + self.opts.finalize_wait;
        let mut first_err = None;
        for i in 0..self.sessions.len() {
            let s = &mut self.sessions[i];
            let mut ours = false;
            while let Some(rx) = s.rx.as_ref() {
                let wait = deadline.saturating_duration_since(Instant::now());
                let ev = match rx.recv_timeout(wait) {
                    Ok(ev) => ev,
                    Err(RecvTimeoutError::Timeout) if !ours => {
                        if let Some(p) = &s.proc {
                            p.terminate();
                        }
                        ours = true;
                        continue;
                    }
                    Err(_) => break,
                };
                if let Ev::Exited { ok, why } = ev {
                    s.rx = None;
                    if !ok && !ours {
                        s.state = State::Ended(Some(Error::new(
                            Code::ESessFailed,
                            format!("session {i}: {why}"),
                        )));
                    } else {
                        s.state = State::Ended(None);
                    }
                }
            }
            if let (State::Ended(Some(e)), false) = (&s.state, s.reported) {
                first_err.get_or_insert(Error::new(Code::ESessFailed, e.message.clone()));
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for FrontEnd {
    /// Nothing is left running: every session still running is ended.
    fn drop(&mut self) {
        for s in &self.sessions {
            if s.rx.is_some() {
                if let Some(p) = &s.proc {
                    p.terminate();
                }
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
    match libi::launch::port_range(&|k| std::env::var(k).ok())? {
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
            if let Some((sid, tx)) = hello(&conn, &shared, until, &pool2, ticket) {
                serve_master(conn, sid, tx, &shared);
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
) -> Option<(u32, SyncSender<Ev>)> {
    let h = frame::read(&mut Until { conn, until }, HELLO_MAX);
    pool.lock().unwrap_or_else(|e| e.into_inner()).done(ticket)?;
    let h = String::from_utf8(h.ok()??).ok()?;
    let key = h.strip_prefix(HELLO)?.strip_prefix(' ')?;
    let (sid, tx) = shared.keys.lock().ok()?.remove(key)?;
    conn.set_read_timeout(None).ok()?;
    let _ = conn.set_nodelay(true);
    Some((sid, tx))
}

fn serve_master(conn: TcpStream, sid: u32, tx: SyncSender<Ev>, shared: &Shared) {
    if let (Ok(c), Ok(mut m)) = (conn.try_clone(), shared.masters.lock()) {
        m.insert(sid, c);
    }
    let _ = tx.send(Ev::Ready);
    let mut r = BufReader::new(&conn);
    while let Ok(Some(d)) = frame::read(&mut r, MAX_MSG) {
        if tx.send(Ev::Data(d)).is_err() {
            break;
        }
    }
    let _ = tx.send(Ev::Closed);
    if let Ok(mut m) = shared.masters.lock() {
        m.remove(&sid);
    }
}

/// Relay the session's `libi-mpiexec` stderr to ours (keeping its last own line: why it
/// failed), then reap it, exactly once, and report how it ended.
fn watch(
    mut child: Child,
    stderr: Option<std::process::ChildStderr>,
    proc: Arc<Proc>,
    tx: SyncSender<Ev>,
    shared: Arc<Shared>,
    key: String,
    sid: u32,
) {
    let mut why = String::new();
    if let Some(e) = stderr {
        let mut r = BufReader::new(e);
        let mut line = Vec::new();
        while matches!(r.read_until(b'\n', &mut line), Ok(n) if n > 0) {
            let _ = std::io::stderr().write_all(&line);
            let text = String::from_utf8_lossy(&line);
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
    if let Ok(mut k) = shared.keys.lock() {
        k.remove(&key);
    }
    let (ok, why) = match status {
        Ok(s) if s.success() => (true, why),
        Ok(s) if why.is_empty() => (false, format!("libi-mpiexec ended with {s}")),
        Ok(_) => (false, why),
        Err(e) => (false, format!("waiting for libi-mpiexec: {e}")),
    };
    let _ = sid;
    let _ = tx.send(Ev::Exited { ok, why });
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

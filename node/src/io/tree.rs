//! The tree side of a node, shared by `libi-nla` and the front end: listen for children,
//! launch them with the job's launcher, authenticate their connections, send them their
//! setup, route messages to them (queued until they connect), connect to the parent. What
//! is decided about those connections (when to try one again, what a first message is
//! worth) is [`crate::proto::tree`]'s; the launches' lifecycle is
//! [`crate::proto::launch`]'s.

use crate::io::guard::{AcceptBackoff, CLOSED_EARLY, MAX_PENDING, TREE_REJECTS};
use crate::proto::launch::{GiveUp, Launches};
use crate::proto::node::limits::{CHILD_STALL, SETUP_WAIT};
use crate::proto::node::{Effect, NodeCore};
use crate::proto::tree::{first_msg, FirstMsg, HelloDeadlines, Retry};
use crate::sys::errno::describe;
use bytes::{Buf, Bytes, BytesMut};
use futures::{SinkExt, StreamExt};
use libi::job::{LauncherKind, LauncherSpec, NodePlan};
use libi::launch::nla_command;
use libi::msg::{codec, codec_with_max, Msg, MsgCodec, MAX_FRAME};
use libi::preauth::PreAuth;
use libi::report::{now, LaunchRecord};
use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::process::CommandExt as _;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::codec::{FramedRead, FramedWrite};
use tracing::{debug, warn};

/// The two halves of a tree connection: TCP between hosts, a Unix socket between the
/// processes of one host (the fork launcher: no TCP stack in the way of every byte).
pub type Writer = Box<dyn AsyncWrite + Send + Unpin>;
pub type Reader = Box<dyn AsyncRead + Send + Unpin>;
pub type Sink = FramedWrite<Writer, MsgCodec>;
pub type Source = FramedRead<Reader, MsgCodec>;

/// Where children connect back to.
pub enum Listener {
    Tcp(TcpListener),
    /// An abstract Unix socket (`unix:@NAME`): the fork launcher's children run here.
    Unix(UnixListener),
}

/// The prefix of an abstract Unix socket address.
const UNIX_PREFIX: &str = "unix:@";

impl Listener {
    /// The next connection: its halves and who it came from. A Unix connection from
    /// another user is refused here.
    async fn accept(&self) -> io::Result<Result<(Reader, Writer, String), String>> {
        match self {
            Listener::Tcp(l) => {
                let (stream, peer) = l.accept().await?;
                tune(&stream);
                let (rd, wr) = stream.into_split();
                Ok(Ok((Box::new(rd), Box::new(wr), peer.to_string())))
            }
            Listener::Unix(l) => {
                let (stream, _) = l.accept().await?;
                let cred = stream.peer_cred()?;
                let me = nix::unistd::geteuid().as_raw();
                let who = format!("local pid {}", cred.pid().unwrap_or(0));
                if cred.uid() != me {
                    return Ok(Err(format!("{who}: uid {} is not ours", cred.uid())));
                }
                let (rd, wr) = stream.into_split();
                Ok(Ok((Box::new(rd), Box::new(wr), who)))
            }
        }
    }
}

/// An authenticated connection whose role is not decided yet (a `Join`).
pub struct PendingConn {
    pub rd: Source,
    pub wr: Sink,
}

/// Index used in `TreeEv::LauncherExited` for the one launcher that started every child
/// (the srun step).
pub const STEP: usize = usize::MAX;

/// Largest first frame (`Hello`, `Join`: a secret, a host name, an address) read from a
/// connection before it is authenticated: what an unauthenticated peer can make us buffer.
pub const HELLO_MAX_FRAME: usize = 4 << 10;
/// Lines of a launcher's stderr kept for the failure message.
const STDERR_TAIL: usize = 4;

/// Events from the tree side.
pub enum TreeEv {
    /// A connection authenticated as child `idx` (its messages are read only once the
    /// driver takes it: a second connection for a child is dropped unread).
    Hello { idx: usize, host: String, conn: Box<PendingConn>, at: f64 },
    /// A message from child `idx`.
    Msg(usize, Msg),
    /// Child `idx`'s connection ended.
    Gone(usize, String),
    /// There is room again on child `idx`'s full link (see [`Link`]).
    Room(usize),
    /// The launcher process of child `idx` exited.
    LauncherExited { idx: usize, status: Option<ExitStatus>, stderr_tail: String },
    /// An NLA started by a resource manager's step joined (see `Msg::Join`).
    Join { host: String, listen: String, conn: Box<PendingConn> },
}

/// Where events go (each driver wraps them into its own event type).
pub type EvSink = Arc<dyn Fn(TreeEv) -> bool + Send + Sync>;

/// Bind the listener children connect back to, and the address to give them.
/// `advertise`: an explicit address (`-localhost`/`-iface`); otherwise the local address of
/// the route toward the first child host that resolves here (found without sending
/// anything), else the first non-loopback IPv4 address of this machine. A child host that
/// does not resolve here is its launcher's to report (ssh says so), not ours.
pub async fn listen(
    kind: LauncherKind,
    advertise: Option<IpAddr>,
    children: &[&str],
) -> io::Result<(Listener, String)> {
    if kind == LauncherKind::Fork {
        use std::os::linux::net::SocketAddrExt;
        let name = format!(
            "libi-{}-{:016x}",
            std::process::id(),
            rand::RngCore::next_u64(&mut rand::rngs::OsRng)
        );
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
        let l = std::os::unix::net::UnixListener::bind_addr(&addr)?;
        l.set_nonblocking(true)?;
        return Ok((Listener::Unix(UnixListener::from_std(l)?), format!("{UNIX_PREFIX}{name}")));
    }
    let ip = match advertise {
        Some(ip) => ip,
        None => children
            .iter()
            .find_map(|h| route_source(h).ok())
            .or_else(first_interface_address)
            .unwrap_or(IpAddr::from([127, 0, 0, 1])),
    };
    let any = if ip.is_ipv6() { IpAddr::from([0u16; 8]) } else { IpAddr::from([0u8; 4]) };
    let l = bind_in_range(any).await?;
    let port = l.local_addr()?.port();
    Ok((Listener::Tcp(l), SocketAddr::new(ip, port).to_string()))
}

/// A listener on `ip`: on any port, or on the first free one of the port range
/// (`MPIR_CVAR_CH3_PORT_RANGE`, its aliases, `MPIEXEC_PORT_RANGE`: `MIN:MAX`) when
/// one is set (see `libi::launch::port_range`).
pub async fn bind_in_range(ip: IpAddr) -> io::Result<TcpListener> {
    let range = libi::launch::port_range(&|k| std::env::var(k).ok())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let Some((var, lo, hi)) = range else {
        return TcpListener::bind(SocketAddr::new(ip, 0)).await;
    };
    for port in lo..=hi {
        if let Ok(l) = TcpListener::bind(SocketAddr::new(ip, port)).await {
            return Ok(l);
        }
    }
    Err(io::Error::new(io::ErrorKind::AddrInUse, format!("no free port in {var} {lo}:{hi}")))
}

/// Tree connections carry no traffic while ranks compute: TCP keepalive (idle 5 s, a probe
/// every 2 s, 3 probes) turns a host that died silently into a closed connection within
/// about 11 s.
pub fn tune(stream: &TcpStream) {
    use nix::sys::socket::{setsockopt, sockopt};
    let _ = stream.set_nodelay(true);
    let _ = setsockopt(stream, sockopt::KeepAlive, &true);
    let _ = setsockopt(stream, sockopt::TcpKeepIdle, &5);
    let _ = setsockopt(stream, sockopt::TcpKeepInterval, &2);
    let _ = setsockopt(stream, sockopt::TcpKeepCount, &3);
}

/// The first non-loopback IPv4 address of this machine.
fn first_interface_address() -> Option<IpAddr> {
    nix::ifaddrs::getifaddrs().ok()?.find_map(|a| {
        let sin = a.address.as_ref()?.as_sockaddr_in()?;
        let ip = sin.ip();
        (!ip.is_loopback()).then_some(IpAddr::V4(ip))
    })
}

pub use libi::launch::route_source;

/// Is `host` this machine? Its name (`localhost`, our hostname, or its first label, in any
/// case), or a name or address that resolves to a loopback address or one of our
/// interfaces' addresses. A name that does not resolve is not local. Hydra starts the proxy
/// of such a host directly rather than through ssh or rsh; so do we ([`autofork`]).
pub fn is_local_host(host: &str) -> bool {
    let host = host.trim_end_matches('.');
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    if let Ok(me) = nix::unistd::gethostname() {
        let me = me.to_string_lossy();
        let short = me.split('.').next().unwrap_or(&me);
        if host.eq_ignore_ascii_case(&me) || host.eq_ignore_ascii_case(short) {
            return true;
        }
    }
    use std::net::ToSocketAddrs;
    let Ok(addrs) = (host, 0).to_socket_addrs() else { return false };
    let addrs: Vec<IpAddr> = addrs.map(|a| a.ip()).collect();
    if addrs.iter().any(|ip| ip.is_loopback()) {
        return true;
    }
    let Ok(ifs) = nix::ifaddrs::getifaddrs() else { return false };
    let mine: Vec<IpAddr> = ifs
        .filter_map(|a| {
            let a = a.address?;
            a.as_sockaddr_in()
                .map(|s| IpAddr::V4(s.ip()))
                .or_else(|| a.as_sockaddr_in6().map(|s| IpAddr::V6(s.ip())))
        })
        .collect();
    addrs.iter().any(|ip| mine.contains(ip))
}

/// Whether a host that is this machine is started directly (as the fork launcher does)
/// rather than through ssh or rsh: yes, unless `HYDRA_LAUNCHER_AUTOFORK` says no (`0`, `no`,
/// `false`, `off`), as in Hydra.
pub fn autofork() -> bool {
    match std::env::var("HYDRA_LAUNCHER_AUTOFORK") {
        Ok(v) => !matches!(v.trim().to_ascii_lowercase().as_str(), "0" | "no" | "false" | "off"),
        Err(_) => true,
    }
}

/// Accept children's connections: each must open with a hello carrying the job secret and
/// the node id of one of `children` (or a join); anything else is closed and counted in
/// [`TREE_REJECTS`]. Before it is authenticated a connection may send one frame of at most
/// [`HELLO_MAX_FRAME`] bytes within [`HELLO_TIMEOUT`] of being accepted (the deadlines are
/// [`HelloDeadlines`]'s; this loop wakes for them and closes the overdue); at most
/// [`MAX_PENDING`] connections wait for theirs, and one more evicts the one that waited
/// longest (`libi::preauth`: holding slots keeps no child out). A failed `accept` is
/// retried after a backoff.
///
/// [`HELLO_TIMEOUT`]: crate::proto::node::limits::HELLO_TIMEOUT
pub fn accept_loop(listener: Listener, secret: String, children: Vec<u32>, ev: EvSink) {
    tokio::spawn(async move {
        let children = Arc::new(children);
        let pool: Arc<Pool> = Arc::new(std::sync::Mutex::new(Pending::new(MAX_PENDING)));
        let mut backoff = AcceptBackoff::default();
        loop {
            let accepted = tokio::select! {
                r = listener.accept() => r,
                never = close_overdue(&pool) => match never {},
            };
            let (rd, wr, peer) = match accepted {
                Ok(Ok(x)) => x,
                Ok(Err(why)) => {
                    TREE_REJECTS.note("a local process", &why);
                    continue;
                }
                Err(e) => {
                    tokio::select! {
                        () = backoff.failed("tree port", &e) => {}
                        never = close_overdue(&pool) => match never {},
                    }
                    continue;
                }
            };
            let now = libi::clock::mono();
            backoff.succeeded();
            let (ev, secret, children, pool2) =
                (ev.clone(), secret.clone(), children.clone(), pool.clone());
            let (ticket_tx, ticket_rx) = tokio::sync::oneshot::channel::<u64>();
            let who = peer.clone();
            let task = tokio::spawn(async move {
                let Ok(ticket) = ticket_rx.await else { return };
                if let Err(why) = handshake(rd, wr, &secret, &children, ev, &pool2, ticket).await {
                    TREE_REJECTS.note(&who, &why);
                }
            });
            let admitted = lock(&pool).admit((task.abort_handle(), peer), now);
            if let Some((old, old_peer)) = admitted.evicted {
                old.abort();
                TREE_REJECTS.note(&old_peer, EVICTED);
            }
            let _ = ticket_tx.send(admitted.ticket);
        }
    });
}

/// A connection not authenticated yet: the task reading its hello, and its peer.
type Waiting = (tokio::task::AbortHandle, String);

/// The connections not authenticated yet: the pool that bounds them, and their hello
/// deadlines (the same tickets: whatever leaves the one leaves the other).
struct Pending {
    pool: PreAuth<Waiting>,
    hello: HelloDeadlines,
}

impl Pending {
    fn new(cap: usize) -> Pending {
        Pending { pool: PreAuth::new(cap), hello: HelloDeadlines::new() }
    }

    /// A connection accepted at `now` waits (see [`PreAuth::admit`]).
    fn admit(&mut self, waiting: Waiting, now: f64) -> libi::preauth::Admitted<Waiting> {
        if let Some(oldest) = self.pool.next_evicted() {
            self.hello.done(oldest);
        }
        let admitted = self.pool.admit(waiting);
        self.hello.accepted(admitted.ticket, now);
        admitted
    }

    /// The connection with this ticket waits no longer; None if it was closed meanwhile
    /// (evicted, or its hello overdue).
    fn done(&mut self, ticket: u64) -> Option<Waiting> {
        self.hello.done(ticket);
        self.pool.done(ticket)
    }

    /// The connections whose hello is overdue at `now`, taken out, to be closed.
    fn overdue(&mut self, now: f64) -> Vec<Waiting> {
        let tickets = self.hello.handle_timeout(now);
        tickets.into_iter().filter_map(|t| self.pool.done(t)).collect()
    }
}

type Pool = std::sync::Mutex<Pending>;

/// Why an evicted connection was closed.
const EVICTED: &str = "evicted, the oldest of the connections not authenticated yet";

fn lock(pool: &Pool) -> std::sync::MutexGuard<'_, Pending> {
    pool.lock().unwrap_or_else(|p| p.into_inner())
}

/// Close the connections whose hello is overdue, as they become so; never ends (the accept
/// loop races it against what it waits for, and starts it again after each connection).
async fn close_overdue(pool: &Pool) -> std::convert::Infallible {
    loop {
        let now = libi::clock::mono();
        let (overdue, due) = {
            let mut p = lock(pool);
            (p.overdue(now), p.hello.poll_timeout())
        };
        for (task, peer) in overdue {
            task.abort();
            TREE_REJECTS.note(&peer, &HelloDeadlines::why());
        }
        match due {
            Some(at) => tokio::time::sleep(Duration::from_secs_f64((at - now).max(0.0))).await,
            None => std::future::pending().await,
        }
    }
}

/// Read the first frame of a connection admitted with `ticket` and hand it on as a child's
/// or a join's; an error is why it is refused. Its hello deadline is [`close_overdue`]'s,
/// which aborts this task then.
async fn handshake(
    rd: Reader,
    wr: Writer,
    secret: &str,
    children: &[u32],
    ev: EvSink,
    pool: &Pool,
    ticket: u64,
) -> Result<(), String> {
    let mut rd = FramedRead::new(rd, codec_with_max(HELLO_MAX_FRAME));
    let first = rd.next().await;
    // Authenticated or not, it waits no longer; once out of the pool it cannot be evicted.
    // Out already: evicted or overdue meanwhile, and refused by whoever took it out.
    if lock(pool).done(ticket).is_none() {
        return Ok(());
    }
    let msg = match first {
        Some(Ok(msg)) => msg,
        Some(Err(e)) => return Err(first_frame_error(e)),
        None => return Err(CLOSED_EARLY.into()),
    };
    let first = first_msg(msg, secret, children)?;
    rd.decoder_mut().set_max_frame(MAX_FRAME);
    let conn = Box::new(PendingConn { rd, wr: FramedWrite::new(wr, codec()) });
    ev(match first {
        FirstMsg::Join { host, listen } => TreeEv::Join { host, listen, conn },
        FirstMsg::Child { idx, host } => TreeEv::Hello { idx, host, conn, at: now() },
    });
    Ok(())
}

/// Why a first frame could not be read, in a few fixed words (they are summed up by reason).
fn first_frame_error(e: libi::msg::CodecError) -> String {
    match e {
        libi::msg::CodecError::Io(e) if e.kind() == io::ErrorKind::InvalidData => {
            format!("first frame over {HELLO_MAX_FRAME} bytes or malformed")
        }
        libi::msg::CodecError::Io(e) => format!("read error ({})", describe(&e)),
        libi::msg::CodecError::TooLarge { .. } => {
            format!("first frame over {HELLO_MAX_FRAME} bytes or malformed")
        }
        libi::msg::CodecError::Decode(_) | libi::msg::CodecError::Kind(_) => {
            "malformed first message".into()
        }
    }
}

/// Forward child `idx`'s messages as events until its connection ends.
fn spawn_reader(
    idx: usize,
    mut rd: Source,
    mut paused: tokio::sync::watch::Receiver<bool>,
    ev: EvSink,
) {
    tokio::spawn(async move {
        loop {
            // Not read while what is sent to it waits for it to read (the core's choice).
            while *paused.borrow_and_update() {
                if paused.changed().await.is_err() {
                    break;
                }
            }
            let Some(m) = rd.next().await else { break };
            match m {
                Ok(msg) => {
                    if !ev(TreeEv::Msg(idx, msg)) {
                        return;
                    }
                }
                Err(e) => {
                    ev(TreeEv::Gone(idx, e.to_string()));
                    return;
                }
            }
        }
        ev(TreeEv::Gone(idx, "connection closed".into()));
    });
}

/// Start the launcher for child `idx`: its stdin gets the secret and then stays open until
/// the launcher exits (the NLA takes EOF as "my parent is gone"); its stderr is relayed to
/// ours (and its last lines kept for the failure message). Returns the launcher's pid.
///
/// With the fork launcher the NLA itself is the launcher: it is started with
/// `--parent-pid OUR_PID` and asks for its parent-death signal itself, so nothing runs
/// between fork and exec and std can start it with posix_spawn (a vfork-style clone)
/// rather than a full fork (~0.3 ms on every job).
pub async fn launch_child(
    spec: &LauncherSpec,
    child: &NodePlan,
    idx: usize,
    parent_addr: &str,
    verbose: bool,
    secret: &str,
    ev: EvSink,
) -> io::Result<Option<u32>> {
    // A child on this very machine is started directly, not through ssh or rsh (Hydra's
    // autofork): the same NLA, the same connection back over TCP.
    let direct;
    let spec = if matches!(spec.kind, LauncherKind::Ssh | LauncherKind::Rsh)
        && autofork()
        && is_local_host(&child.host)
    {
        direct = LauncherSpec { kind: LauncherKind::Fork, ..spec.clone() };
        &direct
    } else {
        spec
    };
    let (prog, mut args) = nla_command(spec, &child.host, parent_addr, child.node, verbose);
    debug!(node = child.node, host = %child.host, %prog, "launching NLA");
    let how = if spec.kind == LauncherKind::Fork {
        args.push(PARENT_PID_ARG.to_string());
        args.push(std::process::id().to_string());
        Spawn::Nla
    } else {
        Spawn::Launcher
    };
    spawn_launcher(&prog, &args, idx, secret, how, ev).await
}

/// The NLA's argument that names its parent's pid: it dies with that parent
/// ([`die_with_parent`]).
pub const PARENT_PID_ARG: &str = "--parent-pid";

/// What [`spawn_launcher`] starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spawn {
    /// Some launcher (ssh, rsh, srun): its parent-death signal is set between fork and
    /// exec (a `pre_exec` hook, hence a full fork).
    Launcher,
    /// `libi-nla` itself, given `--parent-pid`: it sets its parent-death signal on its own
    /// ([`die_with_parent`]), and is started with posix_spawn.
    Nla,
}

/// Called by an NLA started with `--parent-pid PID` (the fork launcher), first thing, on
/// the main thread: be killed when the parent dies, as a launcher is. Returns false if the
/// parent is already gone (we were re-parented before we could ask).
pub fn die_with_parent(parent: u32) -> bool {
    // SIGTERM, not SIGKILL: the NLA's driver takes it as the loss of its parent and tears
    // its ranks down, their children and daemons included (a SIGKILL would leave those to
    // init); before the driver runs, SIGTERM's default action ends it as SIGKILL would.
    // SAFETY: prctl and getppid only set and read attributes of this process.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong, 0, 0, 0);
        libc::getppid() as u32 == parent
    }
}

/// Start a launcher process (ssh, rsh, an NLA itself, srun): the secret on its stdin, which
/// then stays open until it exits; its stderr relayed to ours and its tail kept; its exit
/// reported as `LauncherExited { idx }`. Returns its pid.
pub async fn spawn_launcher(
    prog: &str,
    args: &[String],
    idx: usize,
    secret: &str,
    how: Spawn,
    ev: EvSink,
) -> io::Result<Option<u32>> {
    let mut cmd = tokio::process::Command::new(prog);
    cmd.args(args).stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::piped());
    // The limit on open files the job was started with, not ours: set in a launcher before
    // exec; an NLA (or srun's) raises its own limit again and gives its ranks this one.
    let nofile = crate::sys::rlimit::job_fd_limit();
    if let Some(lim) = &nofile {
        cmd.env(crate::sys::rlimit::NOFILE_ENV, lim.rlim_cur.to_string());
    }
    // Own process group: a terminal's Ctrl-C reaches only the front end, which forwards it;
    // and the launcher dies with its parent.
    if how == Spawn::Launcher {
        // A session of its own too (so a process group, the same as `process_group(0)`): with
        // the kernel's autogroup scheduling (sched_autogroup_enabled) CPU is shared between
        // sessions, so launchers in the parent's session would share one slice, with the
        // parent, against every other session — on a machine that also runs the remote
        // ends (namespace hosts, VMs on one box) every sshd session. Measured on 32 ssh
        // namespace hosts sharing 2 cores: the parent's launches then went out 40 ms apart
        // instead of 3 ms, and wide trees (greedy, flat) lost to 4- and 8-ary ones.
        // SAFETY: setsid, prctl and setrlimit are async-signal-safe system calls.
        unsafe {
            cmd.as_std_mut().pre_exec(move || {
                libc::setsid();
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
                if let Some(lim) = &nofile {
                    libc::setrlimit(libc::RLIMIT_NOFILE, lim);
                }
                Ok(())
            });
        }
    } else {
        // posix_spawn's POSIX_SPAWN_SETPGROUP.
        cmd.as_std_mut().process_group(0);
    }
    // Claimed until reaped below: an NLA's orphan sweep leaves it alone, and `give_up`
    // signals its group only while its pid is still ours.
    let mut child_proc = crate::proc::reaper::spawn_claimed(&mut cmd).map_err(|e| {
        io::Error::new(e.kind(), format!("cannot execute '{prog}': {}", describe(&e)))
    })?;
    let mut stdin = child_proc.stdin.take();
    if let Some(s) = stdin.as_mut() {
        let _ = s.write_all(format!("{secret}\n").as_bytes()).await;
        let _ = s.flush().await;
    }
    let pid = child_proc.id();
    let stderr = child_proc.stderr.take();
    tokio::spawn(async move {
        let mut tail: VecDeque<String> = VecDeque::new();
        if let Some(e) = stderr {
            let mut lines = BufReader::new(e).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                crate::write_stderr(format!("{line}\n").as_bytes());
                if tail.len() == STDERR_TAIL {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
        }
        let status = child_proc.wait().await.ok();
        if let Some(pid) = pid {
            crate::proc::reaper::release(pid as i32);
        }
        drop(stdin);
        let stderr_tail = tail.into_iter().collect::<Vec<_>>().join(" / ");
        ev(TreeEv::LauncherExited { idx, status, stderr_tail });
    });
    Ok(pid)
}

/// The NLA side of a resource-manager launch: join the front end at `front_end`, announcing
/// `host` and the address of our own listener; follow a redirect to the parent if there is
/// one. Returns the connection to the parent, already past its first message, with the
/// setup it sent. Each connection is tried up to `retries` more times ([`connect`]).
pub async fn join(
    front_end: &str,
    secret: &str,
    host: &str,
    listen_addr: &str,
    retries: u32,
) -> io::Result<(Source, Sink, libi::job::NodeSetup)> {
    let (mut rd, mut wr) = connect(front_end, retries).await?;
    let join = Msg::Join {
        host: host.to_string(),
        secret: secret.to_string(),
        listen: listen_addr.to_string(),
        pid: std::process::id(),
    };
    wr.send(join).await.map_err(|e| io::Error::other(e.to_string()))?;
    match first_setup(&mut rd).await? {
        Ok(setup) => Ok((rd, wr, setup)),
        Err((node, parent)) => {
            drop((rd, wr));
            let (mut rd, mut wr) = connect(&parent, retries).await?;
            let hello = Msg::Hello {
                node,
                secret: secret.to_string(),
                host: host.to_string(),
                pid: std::process::id(),
            };
            wr.send(hello).await.map_err(|e| io::Error::other(e.to_string()))?;
            match first_setup(&mut rd).await? {
                Ok(setup) => Ok((rd, wr, setup)),
                Err(_) => Err(io::Error::other("redirected twice")),
            }
        }
    }
}

/// [`connect_once`], tried again up to `retries` times when it fails (a parent that has
/// not listened yet, a refused or reset connection, an unreachable network, no local port
/// left), waiting a little longer each time ([`Retry`]). The error names the address and,
/// after retries, how many tries were made. An address that cannot be one is not retried.
pub async fn connect(addr: &str, retries: u32) -> io::Result<(Source, Sink)> {
    let mut retry = Retry::new(retries);
    loop {
        let e = match connect_once(addr).await {
            Ok(c) => return Ok(c),
            Err(e) => e,
        };
        let tries = retry.tries();
        let next = match e.kind() {
            io::ErrorKind::InvalidInput => None,
            _ => retry.failed(libi::clock::mono()),
        };
        let Some(at) = next else {
            return Err(match tries {
                1 => e,
                n => io::Error::new(e.kind(), format!("{e} ({n} tries)")),
            });
        };
        tracing::debug!(tries, error = %e, "retrying the connection");
        sleep_until(at).await;
    }
}

/// Sleep until `at` on the monotonic clock (`libi::clock::mono`).
async fn sleep_until(at: f64) {
    let wait = (at - libi::clock::mono()).max(0.0);
    tokio::time::sleep(Duration::from_secs_f64(wait)).await;
}

/// Connect to a tree peer: `HOST:PORT`, or `unix:@NAME` (an abstract Unix socket).
pub async fn connect_once(addr: &str) -> io::Result<(Source, Sink)> {
    let failed = |e: io::Error| io::Error::new(e.kind(), format!("cannot connect to {addr}: {e}"));
    let (rd, wr): (Reader, Writer) = match addr.strip_prefix(UNIX_PREFIX) {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            let sa = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
            let s = std::os::unix::net::UnixStream::connect_addr(&sa).map_err(failed)?;
            s.set_nonblocking(true)?;
            let (rd, wr) = UnixStream::from_std(s)?.into_split();
            (Box::new(rd), Box::new(wr))
        }
        None => {
            let stream = TcpStream::connect(addr).await.map_err(failed)?;
            tune(&stream);
            let (rd, wr) = stream.into_split();
            (Box::new(rd), Box::new(wr))
        }
    };
    Ok((FramedRead::new(rd, codec()), FramedWrite::new(wr, codec())))
}

/// Connect to the parent at `addr` as a child, say `hello`, and receive our setup, within
/// `wait` in all. A connection the parent closes (or resets) before our setup is made again,
/// up to `retries` times: a parent whose pre-authentication pool is flooded by somebody
/// else's connections evicts the oldest, which may be ours (`libi::preauth`).
pub async fn connect_for_setup(
    addr: &str,
    hello: impl Fn() -> Msg,
    retries: u32,
    wait: Duration,
) -> io::Result<(Source, Sink, libi::job::NodeSetup)> {
    let proto = |m: String| io::Error::new(io::ErrorKind::InvalidData, m);
    let deadline = libi::clock::mono() + wait.as_secs_f64();
    let mut retry = Retry::new(retries).until(deadline);
    loop {
        let (mut rd, mut wr) = connect(addr, retries).await?;
        let closed = match wr.send(hello()).await {
            Err(e) => e.to_string(),
            Ok(()) => {
                let left = Duration::from_secs_f64((deadline - libi::clock::mono()).max(0.0));
                match tokio::time::timeout(left, rd.next()).await {
                    Ok(Some(Ok(Msg::Setup(s)))) => return Ok((rd, wr, *s)),
                    Ok(Some(Ok(other))) => {
                        return Err(proto(format!("expected setup, got {other:?}")))
                    }
                    Ok(Some(Err(libi::msg::CodecError::Io(e)))) => e.to_string(),
                    Ok(Some(Err(e))) => return Err(proto(e.to_string())),
                    Ok(None) => "closed".into(),
                    Err(_) => {
                        let secs = wait.as_secs();
                        return Err(proto(format!("no setup from parent within {secs} s")));
                    }
                }
            }
        };
        let tries = retry.tries();
        let Some(at) = retry.failed(libi::clock::mono()) else {
            return Err(proto(format!(
                "parent closed the connection before setup ({closed}; {tries} tries)"
            )));
        };
        debug!(again = tries - 1, why = %closed, "the parent closed the connection before setup: again");
        sleep_until(at).await;
    }
}

/// The parent's first message: our setup, or a redirect `(node, parent address)`.
async fn first_setup(rd: &mut Source) -> io::Result<Result<libi::job::NodeSetup, (u32, String)>> {
    let proto = |m: String| io::Error::new(io::ErrorKind::InvalidData, m);
    match tokio::time::timeout(SETUP_WAIT, rd.next()).await {
        Ok(Some(Ok(Msg::Setup(s)))) => Ok(Ok(*s)),
        Ok(Some(Ok(Msg::Redirect { node, parent }))) => Ok(Err((node, parent))),
        Ok(Some(Ok(other))) => Err(proto(format!("expected setup, got {other:?}"))),
        Ok(Some(Err(e))) => Err(proto(e.to_string())),
        Ok(None) => Err(proto("parent closed the connection before setup".into())),
        Err(_) => Err(proto(format!("no setup from parent within {} s", SETUP_WAIT.as_secs()))),
    }
}

/// Most bytes queued for one child and not yet written to its connection: the bound on
/// what a child that reads slowly (or not at all) makes its parent hold. A broadcast frame
/// is one allocation shared by every child's queue, so a slow child keeps alive at most this
/// much of it. Two fence chunks: a pushed release streams through without waiting as long as
/// the child reads.
pub const CHILD_QUEUE: usize = 2 * libi::msg::FENCE_CHUNK;
/// What a queued frame costs at least against [`CHILD_QUEUE`] (its allocation and the
/// queue's entry: many tiny messages are bounded too).
const FRAME_MIN_COST: usize = 256;
/// Frames written to a child in one `writev`.
const WRITE_BATCH: usize = 64;
/// Frames waiting for a child beyond its full queue, over which the child is "far behind"
/// ([`Children::report`]): the core then stops taking in what could flow down to it (its
/// own parent's messages) until it catches up, so that a stream down the tree (a pushed
/// fence release, a broadcast's parts) waits upstream rather than piling up here.
/// Below it, a full queue delays nothing but that child's own input.
pub const CHILD_BACKLOG: usize = 4 * CHILD_QUEUE;

/// What became of a frame given to a [`Link`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// Queued for the writer.
    Queued,
    /// The queue is full: the frame waits behind it (in order), and the link says when
    /// there is room again (its `on_room`).
    Full,
    /// The connection broke (its writer ended): nothing more is written to it.
    Broken,
}

/// After room came back ([`Link::flush`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flushed {
    /// Everything that waited is queued: the link is no longer full.
    Drained,
    /// Some still waits (for more room: it is watched again).
    StillFull,
    /// The connection broke.
    Broken,
}

/// The write side of one tree connection: a queue of encoded frames, at most `cap` bytes,
/// written out by a task of its own. Queueing never waits: a frame that does not fit waits
/// behind the full queue, and the link calls its `on_room` once there is room for the
/// first of them ([`Link::flush`] moves them on). One child's slow reading holds up neither
/// the node's loop nor the other children.
pub struct Link {
    tx: tokio::sync::mpsc::UnboundedSender<(Bytes, OwnedSemaphorePermit)>,
    room: Arc<Semaphore>,
    task: tokio::task::JoinHandle<()>,
    cap: usize,
    /// Frames that did not fit, in order, and their bytes.
    waiting: VecDeque<Bytes>,
    waiting_bytes: usize,
    /// A task waits for room for the first waiting frame.
    watching: bool,
    on_room: Arc<dyn Fn() + Send + Sync>,
}

impl Link {
    /// Start the writer of `wr`, with a queue of at most `cap` bytes; `on_room` is called
    /// (from a task) when frames wait and there is room for the first.
    pub fn new(wr: Writer, cap: usize, on_room: Arc<dyn Fn() + Send + Sync>) -> Link {
        let cap = cap.clamp(FRAME_MIN_COST, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
        let room = Arc::new(Semaphore::new(cap));
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(write_frames(wr, rx, room.clone()));
        Link {
            tx,
            room,
            task,
            cap,
            waiting: VecDeque::new(),
            waiting_bytes: 0,
            watching: false,
            on_room,
        }
    }

    /// Bytes queued and not written yet (each frame counted as at least 256 bytes), not
    /// counting frames waiting behind a full queue.
    pub fn queued(&self) -> usize {
        self.cap - self.room.available_permits().min(self.cap)
    }

    fn cost(&self, frame: &Bytes) -> u32 {
        frame.len().clamp(FRAME_MIN_COST, self.cap) as u32
    }

    /// Queue `frame` now if it fits: `Ok(None)`; `Ok(Some(frame))` if it does not; `Err` if
    /// the connection broke.
    fn try_queue(&self, frame: Bytes) -> Result<Option<Bytes>, ()> {
        match self.room.clone().try_acquire_many_owned(self.cost(&frame)) {
            Ok(p) => self.tx.send((frame, p)).map(|_| None).map_err(|_| ()),
            Err(tokio::sync::TryAcquireError::Closed) => Err(()),
            Err(tokio::sync::TryAcquireError::NoPermits) => Ok(Some(frame)),
        }
    }

    /// Queue an encoded frame, without waiting (see [`Pushed`]).
    pub fn push(&mut self, frame: Bytes) -> Pushed {
        let frame = if self.waiting.is_empty() {
            match self.try_queue(frame) {
                Ok(None) => return Pushed::Queued,
                Ok(Some(f)) => f,
                Err(()) => return Pushed::Broken,
            }
        } else {
            frame
        };
        self.waiting_bytes += frame.len();
        self.waiting.push_back(frame);
        self.watch();
        Pushed::Full
    }

    /// Wait (in a task) for room for the first waiting frame, then call `on_room`.
    fn watch(&mut self) {
        let Some(cost) = self.waiting.front().map(|f| self.cost(f)) else { return };
        if std::mem::replace(&mut self.watching, true) {
            return;
        }
        let (room, on_room) = (self.room.clone(), self.on_room.clone());
        tokio::spawn(async move {
            // Closed: the writer ended; `flush` then finds the link broken.
            drop(room.acquire_many_owned(cost).await);
            on_room();
        });
    }

    /// Room came (`on_room` was called): queue what waits, in order, as far as it fits.
    pub fn flush(&mut self) -> Flushed {
        self.watching = false;
        while let Some(frame) = self.waiting.pop_front() {
            let len = frame.len();
            match self.try_queue(frame) {
                Ok(None) => self.waiting_bytes -= len,
                Ok(Some(f)) => {
                    self.waiting.push_front(f);
                    self.watch();
                    return Flushed::StillFull;
                }
                Err(()) => return Flushed::Broken,
            }
        }
        Flushed::Drained
    }

    /// Bytes of the frames waiting behind the full queue.
    pub fn waiting(&self) -> usize {
        self.waiting_bytes
    }

    /// Drop the connection now, whatever is queued.
    pub fn abort(self) {
        self.task.abort();
    }

    /// Write what is queued and what waits, then close the connection; `None` if that took
    /// over `limit` (the connection is dropped then).
    pub async fn close(self, limit: Duration) -> Option<()> {
        let Link { tx, task, room, waiting, cap, .. } = self;
        let abort = task.abort_handle();
        let written = tokio::time::timeout(limit, async move {
            for frame in waiting {
                let cost = frame.len().clamp(FRAME_MIN_COST, cap) as u32;
                let Ok(p) = room.clone().acquire_many_owned(cost).await else { break };
                if tx.send((frame, p)).is_err() {
                    break;
                }
            }
            drop(tx);
            let _ = task.await;
        })
        .await;
        match written {
            Ok(()) => Some(()),
            Err(_) => {
                abort.abort();
                None
            }
        }
    }
}

/// A link's writer: frames as they are queued, several in one `writev` when they are
/// there; each frame's room is given back once it is written. Ends when the link is closed
/// (the connection is shut down after the last frame) or on a write error (the link's room
/// is closed: senders see [`Pushed::Broken`]).
async fn write_frames(
    mut wr: Writer,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<(Bytes, OwnedSemaphorePermit)>,
    room: Arc<Semaphore>,
) {
    let mut batch = Vec::with_capacity(WRITE_BATCH);
    while let Some(first) = rx.recv().await {
        batch.push(first);
        while batch.len() < WRITE_BATCH {
            match rx.try_recv() {
                Ok(f) => batch.push(f),
                Err(_) => break,
            }
        }
        if let Err(e) = write_batch(&mut wr, &batch).await {
            debug!("cannot write to a child: {e}");
            room.close();
            return;
        }
        batch.clear();
    }
    let _ = wr.shutdown().await;
    room.close();
}

/// Write every frame of `batch`, in order, with as few `writev`s as the socket allows.
async fn write_batch(wr: &mut Writer, batch: &[(Bytes, OwnedSemaphorePermit)]) -> io::Result<()> {
    let mut bufs: Vec<Bytes> = batch.iter().map(|(b, _)| b.clone()).collect();
    let mut i = 0;
    while i < bufs.len() {
        let slices: Vec<io::IoSlice<'_>> = bufs[i..].iter().map(|b| io::IoSlice::new(b)).collect();
        let mut n = wr.write_vectored(&slices).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        while n > 0 && i < bufs.len() {
            let len = bufs[i].len();
            if n >= len {
                n -= len;
                i += 1;
            } else {
                bufs[i].advance(n);
                n = 0;
            }
        }
        while i < bufs.len() && bufs[i].is_empty() {
            i += 1;
        }
    }
    wr.flush().await
}

/// One message as a tree frame (length, kind, body), encoded once to be queued on any
/// number of links.
pub fn encode_frame(msg: &Msg) -> Result<Bytes, libi::msg::CodecError> {
    let mut buf = BytesMut::with_capacity(libi::msg::wire_size(msg));
    codec().encode_ref(msg, &mut buf)?;
    Ok(buf.freeze())
}

/// The driver's view of a node's children.
pub struct Children {
    links: Vec<Option<Link>>,
    /// Frames for children not connected yet, and what they cost against [`CHILD_QUEUE`]
    /// (`usize::MAX`: more came than it takes, and the child was given up).
    queued: Vec<Vec<Bytes>>,
    queued_cost: Vec<usize>,
    /// Children whose link is full, and those that became so since [`Children::report`].
    blocked: Vec<bool>,
    full: Vec<usize>,
    /// Children more than [`CHILD_BACKLOG`] behind, and the changes since
    /// [`Children::report`].
    behind: Vec<bool>,
    behind_changed: Vec<(usize, bool)>,
    /// Each connected child's reader's switch (true: do not read).
    pause: Vec<Option<tokio::sync::watch::Sender<bool>>>,
    pids: Vec<Option<u32>>,
    ev: Option<EvSink>,
    ctx: Option<LaunchCtx>,
    /// Every decision of the launch lifecycle (order, batches, deadlines, give-ups).
    life: Launches,
    /// See [`Children::set_now`].
    now: f64,
    /// Launch records (for the report).
    pub launches: Vec<LaunchRecord>,
}

/// Where children connect back to, and the secret they present.
#[derive(Clone)]
struct LaunchCtx {
    addr: String,
    secret: String,
}

impl Children {
    /// The children of `core`'s node, launched by its job's rules (`launch_batch`,
    /// `launch_timeout_ms`).
    pub fn new(core: &NodeCore) -> Self {
        let plan = core.plan();
        let batch = core.job().launch_batch;
        let launch_timeout = Duration::from_millis(core.job().launch_timeout_ms);
        let n = plan.children.len();
        Children {
            links: (0..n).map(|_| None).collect(),
            queued: vec![Vec::new(); n],
            queued_cost: vec![0; n],
            blocked: vec![false; n],
            full: Vec::new(),
            behind: vec![false; n],
            behind_changed: Vec::new(),
            pause: (0..n).map(|_| None).collect(),
            pids: vec![None; n],
            ev: None,
            ctx: None,
            life: Launches::new(n, batch, launch_timeout),
            now: 0.0,
            launches: plan
                .children
                .iter()
                .enumerate()
                .map(|(i, c)| LaunchRecord {
                    node: c.node,
                    host: c.host.clone(),
                    parent: plan.node,
                    order: i as u32 + 1,
                    start: 0.0,
                    connected: 0.0,
                })
                .collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.links.len()
    }

    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    /// Number of children that connected so far.
    /// Some launcher we started (an NLA, ssh, rsh) has not exited yet.
    pub fn launchers_running(&self) -> bool {
        self.pids.iter().any(Option::is_some)
    }

    /// Child `idx`'s launcher exited.
    pub fn launcher_exited(&mut self, idx: usize) {
        if let Some(p) = self.pids.get_mut(idx) {
            *p = None;
        }
    }

    pub fn up(&self) -> usize {
        (0..self.len()).filter(|&i| self.life.is_connected(i)).count()
    }

    /// When the earliest launch deadline is due: the driver calls
    /// [`Children::handle_timeout`] then.
    pub fn poll_timeout(&self) -> Option<f64> {
        self.life.poll_timeout()
    }

    /// The time now, on the driver's monotonic clock (`libi::clock`): what the launch
    /// lifecycle's deadlines are set from. The driver tells it once per turn of its loop.
    pub fn set_now(&mut self, now: f64) {
        self.now = now;
    }

    /// Give up the children whose deadline passed at `now`.
    pub async fn handle_timeout(&mut self, now: f64, core: &mut NodeCore, fx: &mut Vec<Effect>) {
        self.now = now;
        for g in self.life.handle_timeout(now, |i| core.child_ranks_left(i)) {
            self.gave_up(g, core, fx);
        }
        self.launch_more(core, fx).await;
    }

    /// Launch the children in launch order (the tree's order); each must connect back within
    /// the job's launch timeout. With `launch_batch` B, B at a time: the next batch starts
    /// once every child of the previous one connected or failed (Charm++ multi-level
    /// startup: bounded connect-back bursts).
    pub async fn launch_all(
        &mut self,
        core: &mut NodeCore,
        addr: &str,
        secret: &str,
        ev: &EvSink,
        fx: &mut Vec<Effect>,
    ) {
        self.ev = Some(ev.clone());
        self.ctx = Some(LaunchCtx { addr: addr.to_string(), secret: secret.to_string() });
        self.launch_more(core, fx).await;
    }

    /// Launch the next children: all that are left, or the next batch.
    async fn launch_more(&mut self, core: &mut NodeCore, fx: &mut Vec<Effect>) {
        let (Some(ev), Some(ctx)) = (self.ev.clone(), self.ctx.clone()) else { return };
        let spec = core.job().launcher.clone();
        let verbose = core.job().verbose;
        while let Some(idx) = self.life.next_launch(self.now) {
            // (The report's stamp is wall time: reports of several hosts are compared.)
            self.launches[idx].start = now();
            if spec.kind.joins() {
                // Slurm's step (or the job's NLAs) starts every NLA; we only hold them to
                // the deadline.
                continue;
            }
            let plan = &core.plan().children[idx];
            match launch_child(&spec, plan, idx, &ctx.addr, verbose, &ctx.secret, ev.clone()).await
            {
                Ok(pid) => self.pids[idx] = pid,
                Err(e) => {
                    if let Some(g) = self.life.launch_failed(idx, e.to_string()) {
                        self.gave_up(g, core, fx);
                    }
                }
            }
        }
    }

    /// Take a joined connection as child `idx` (its first message was a `Join`).
    pub async fn adopt(
        &mut self,
        idx: usize,
        host: String,
        conn: Box<PendingConn>,
        core: &mut NodeCore,
        fx: &mut Vec<Effect>,
    ) {
        self.on_event(TreeEv::Hello { idx, host, conn, at: now() }, core, fx).await;
    }

    /// Has child `idx` connected, or been given up?
    pub fn taken(&self, idx: usize) -> bool {
        self.life.taken(idx)
    }

    /// Carry out a give-up decided by the lifecycle: stop its launcher if it must be, count
    /// its subtree as lost.
    fn gave_up(&mut self, g: GiveUp, core: &mut NodeCore, fx: &mut Vec<Effect>) {
        let GiveUp { idx, why, kill_launcher } = g;
        if let Some(link) = self.links[idx].take() {
            link.abort();
        }
        // The pid stays until the launcher is reaped (`LauncherExited`): the close phase
        // waits for it. A child NLA under the fork launcher closes its connection (its
        // descriptors go early in its exit) before its own children — ranks, and whatever
        // they started — are re-parented to us, and the final sweep must come after that.
        if let Some(pid) = self.pids[idx].filter(|_| kill_launcher).map(|p| p as i32) {
            // Only while the launcher is not reaped: then its group is still the one it made.
            if crate::proc::reaper::is_claimed(pid) {
                // SAFETY: kill(2) of the launcher's own process group (setpgid in the child).
                unsafe {
                    libc::kill(-pid, libc::SIGKILL);
                }
            }
        }
        core.child_gone(idx, &why, fx);
    }

    /// Handle a tree event; messages for the node state machine go to `core`.
    pub async fn on_event(&mut self, e: TreeEv, core: &mut NodeCore, fx: &mut Vec<Effect>) {
        self.on_event_inner(e, core, fx).await;
        self.launch_more(core, fx).await;
    }

    async fn on_event_inner(&mut self, e: TreeEv, core: &mut NodeCore, fx: &mut Vec<Effect>) {
        match e {
            TreeEv::Hello { idx, host, conn, at } => {
                if !self.life.connected(idx) {
                    // Dropped unread: whatever it sends is never taken for the child's. While
                    // the node is torn down, a child given up that was already connecting is
                    // expected (its launcher is killed): no warning then.
                    if self.life.aborted() {
                        debug!(idx, %host, "a child given up at the teardown connected; dropped");
                    } else {
                        warn!("child {idx} of this node ({host}) connected twice or too late; dropped");
                    }
                    return;
                }
                let PendingConn { rd, wr: sink } = *conn;
                self.launches[idx].connected = at;
                debug!(idx, %host, "child NLA connected");
                let Some(setup) = core.child_setup(idx) else { return };
                let on_room: Arc<dyn Fn() + Send + Sync> = match self.ev.clone() {
                    Some(ev) => Arc::new(move || {
                        ev(TreeEv::Room(idx));
                    }),
                    None => Arc::new(|| {}),
                };
                self.links[idx] = Some(Link::new(sink.into_inner(), CHILD_QUEUE, on_room));
                self.send(idx, Msg::Setup(Box::new(setup)));
                self.queued_cost[idx] = 0;
                for frame in std::mem::take(&mut self.queued[idx]) {
                    self.push(idx, frame);
                }
                if let Some(ev) = self.ev.clone() {
                    let (pause, paused) = tokio::sync::watch::channel(false);
                    self.pause[idx] = Some(pause);
                    spawn_reader(idx, rd, paused, ev);
                }
            }
            TreeEv::Msg(idx, m) => {
                if !self.life.is_gone(idx) {
                    core.child_msg(idx, m, fx);
                }
            }
            TreeEv::Gone(idx, why) => {
                if let Some(g) = self.life.closed(idx, &why, core.child_ranks_left(idx)) {
                    self.gave_up(g, core, fx);
                }
            }
            TreeEv::LauncherExited { idx: STEP, status, stderr_tail } => {
                for idx in 0..self.len() {
                    let ev =
                        TreeEv::LauncherExited { idx, status, stderr_tail: stderr_tail.clone() };
                    Box::pin(self.on_event_inner(ev, core, fx)).await;
                }
            }
            TreeEv::LauncherExited { idx, status, stderr_tail } => {
                if idx >= self.len() {
                    return;
                }
                self.pids[idx] = None;
                let st = match status {
                    Some(s) => s.to_string(),
                    None => "unknown status".into(),
                };
                let mut what = format!("its launcher exited ({st})");
                if !stderr_tail.is_empty() {
                    what.push_str(&format!(": {stderr_tail}"));
                }
                if let Some(g) = self.life.launcher_exited(idx, what, self.now) {
                    self.gave_up(g, core, fx);
                }
            }
            TreeEv::Join { host, .. } => {
                warn!("dropped a join from {host}: this node does not take joins")
            }
            TreeEv::Room(idx) => self.room(idx, core, fx),
        }
    }

    /// Send to child `idx` (queued until it connects). A message that cannot be encoded
    /// loses the child: its connection is dropped and `Gone` (with the error) fails its
    /// subtree. Returns once the frame is queued on the child's link: at once while the link
    /// has room (see [`Link`]).
    pub fn send(&mut self, idx: usize, msg: Msg) {
        if !self.writable(idx) {
            return;
        }
        match encode_frame(&msg) {
            Ok(frame) => self.push(idx, frame),
            Err(e) => self.unsendable(idx, &e),
        }
    }

    /// Send one message to every child: encoded once, the same bytes queued on every link.
    pub fn broadcast(&mut self, msg: &Msg) {
        if !(0..self.len()).any(|i| self.writable(i)) {
            return;
        }
        match encode_frame(msg) {
            Ok(frame) => {
                for idx in 0..self.len() {
                    if self.writable(idx) {
                        self.push(idx, frame.clone());
                    }
                }
            }
            Err(e) => {
                for idx in 0..self.len() {
                    if self.writable(idx) {
                        self.unsendable(idx, &e);
                    }
                }
            }
        }
    }

    /// The node is torn down (the core's [`Effect::AbortLaunches`]): the children that have
    /// not connected are given up at the next [`Children::handle_timeout`] (their launchers
    /// killed), not at the end of their launch timeout, and none is launched any more; the
    /// connections their launches leave half-made are expected from now on.
    pub fn abort_launches(&mut self) {
        self.life.abort(self.now);
        TREE_REJECTS.tearing_down();
    }

    /// Child `idx` is connected, or will be (what is sent to it is queued).
    fn writable(&self, idx: usize) -> bool {
        match self.links.get(idx) {
            Some(Some(_)) => true,
            Some(None) => !self.life.taken(idx),
            None => false,
        }
    }

    /// A message for child `idx` could not be encoded: the child is lost.
    fn unsendable(&mut self, idx: usize, e: &libi::msg::CodecError) {
        if let Some(link) = self.links[idx].take() {
            link.abort();
        }
        self.lost(idx, format!("cannot send to it: {e}"));
    }

    /// Report child `idx` as gone (through the event queue, like its reader would).
    fn lost(&self, idx: usize, why: String) {
        match &self.ev {
            Some(ev) => {
                ev(TreeEv::Gone(idx, why));
            }
            None => warn!("child {idx}: {why}"),
        }
    }

    /// Queue an encoded frame for child `idx`, without waiting. A connection that broke is
    /// only no longer written: its reader reports the end after the last message the child
    /// sent (a child that ended cleanly closes its connection right after its last report,
    /// and our writes may fail before we read it). A queue that fills is reported once
    /// ([`Children::report`]: the core decides), and frames wait behind it; a child more
    /// than [`CHILD_BACKLOG`] behind is reported too.
    fn push(&mut self, idx: usize, frame: Bytes) {
        match self.links.get_mut(idx) {
            Some(Some(link)) => match link.push(frame) {
                Pushed::Queued => {}
                Pushed::Full => {
                    if !std::mem::replace(&mut self.blocked[idx], true) {
                        self.full.push(idx);
                    }
                    self.note_behind(idx);
                }
                Pushed::Broken => {
                    debug!("child {idx}: its connection broke; not written any more");
                    self.links[idx] = None;
                }
            },
            Some(None) if !self.life.taken(idx) => self.queue_early(idx, frame),
            _ => {}
        }
    }

    /// Tell the core which children's queues filled ([`NodeCore::child_full`], each once
    /// until it drains) and which fell far behind or caught up ([`NodeCore::child_behind`])
    /// since the last call: after applying effects, the core decides what to do about them.
    pub fn report(&mut self, core: &mut NodeCore, fx: &mut Vec<Effect>) {
        for idx in std::mem::take(&mut self.full) {
            core.child_full(idx, fx);
        }
        for (idx, behind) in std::mem::take(&mut self.behind_changed) {
            core.child_behind(idx, behind, fx);
        }
    }

    /// Whether child `idx` is more than [`CHILD_BACKLOG`] behind: a change is recorded for
    /// [`Children::report`].
    fn note_behind(&mut self, idx: usize) {
        let waiting = match self.links.get(idx) {
            Some(Some(link)) => link.waiting(),
            _ => 0,
        };
        let now = waiting > CHILD_BACKLOG;
        if std::mem::replace(&mut self.behind[idx], now) != now {
            self.behind_changed.push((idx, now));
        }
    }

    /// Stop (`true`) or resume (`false`) reading child `idx`'s connection.
    pub fn pause(&mut self, idx: usize, pause: bool) {
        if let Some(Some(p)) = self.pause.get(idx) {
            let _ = p.send(pause);
        }
    }

    /// Drop child `idx`'s connection now, whatever is queued; it is reported gone (`why`).
    pub fn drop_child(&mut self, idx: usize, why: &str) {
        if let Some(link) = self.links.get_mut(idx).and_then(Option::take) {
            link.abort();
        }
        self.note_behind(idx);
        self.lost(idx, why.to_string());
    }

    /// There is room on child `idx`'s link again: what waited is queued; once all of it is,
    /// the core hears that the child reads again.
    fn room(&mut self, idx: usize, core: &mut NodeCore, fx: &mut Vec<Effect>) {
        let Some(Some(link)) = self.links.get_mut(idx) else { return };
        let flushed = link.flush();
        self.note_behind(idx);
        match flushed {
            Flushed::StillFull => {}
            Flushed::Drained => {
                if std::mem::replace(&mut self.blocked[idx], false) {
                    core.child_room(idx, fx);
                }
            }
            Flushed::Broken => {
                debug!("child {idx}: its connection broke; not written any more");
                self.links[idx] = None;
            }
        }
    }

    /// Hold a frame for child `idx` until it connects: at most [`CHILD_QUEUE`] (by
    /// [`FRAME_MIN_COST`] a frame at least), as for a connected child that does not read.
    /// Beyond, the child is given up (its launch killed, its subtree lost) and nothing more
    /// is held for it.
    fn queue_early(&mut self, idx: usize, frame: Bytes) {
        let cost = frame.len().max(FRAME_MIN_COST);
        match self.queued_cost[idx].checked_add(cost) {
            Some(total) if total <= CHILD_QUEUE => {
                self.queued_cost[idx] = total;
                self.queued[idx].push(frame);
            }
            _ if self.queued_cost[idx] == usize::MAX => {}
            _ => {
                self.queued_cost[idx] = usize::MAX;
                self.queued[idx] = Vec::new();
                let kib = CHILD_QUEUE >> 10;
                self.lost(idx, format!("over {kib} KiB waited for it before it connected"));
            }
        }
    }

    /// Close every child connection (children exit once their parent is gone), after what
    /// is queued for them: all within [`CHILD_STALL`], then the rest are dropped.
    /// (The one wait of this module: the node's loop is over by then.)
    pub async fn close_all(&mut self) {
        let links: Vec<Link> = self.links.iter_mut().filter_map(Option::take).collect();
        let closing = futures::future::join_all(links.into_iter().map(|l| l.close(CHILD_STALL)));
        let closed = closing.await;
        let dropped = closed.iter().filter(|c| c.is_none()).count();
        if dropped > 0 {
            debug!("{dropped} child connections dropped at close: they did not read");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
    }

    /// A node whose one child has not connected: what is sent to it is held up to
    /// CHILD_QUEUE; the frame beyond gives the child up once (reported gone), and nothing
    /// more is held for it.
    #[test]
    fn frames_for_a_child_not_connected_are_bounded() {
        use libi::job::{AppSpec, JobCommon, LauncherKind, LauncherSpec, NodeSetup, RankSlot};
        let plan = |node: u32, rank: u32| NodePlan {
            node,
            host: format!("h{node}"),
            ranks: vec![RankSlot { rank, app: 0 }],
            children: vec![],
        };
        let mut me = plan(1, 0);
        me.children = vec![plan(2, 1)];
        let job = JobCommon {
            size: 2,
            universe_size: 2,
            kvsname: "kvs".into(),
            preput: vec![],
            apps: vec![AppSpec {
                exe: "x".into(),
                args: vec![],
                nprocs: 2,
                env: vec![],
                wdir: None,
                agent_env: false,
                raw_env: Vec::new(),
            }],
            launcher: LauncherSpec::new(LauncherKind::Fork, "/x"),
            kill_grace_ms: 10,
            launch_timeout_ms: 10,
            launch_batch: None,
            kvs_push_max: 0,
            kvs_max: 1 << 30,
            report: false,
            pmgr: None,
            verbose: false,
            binding: Default::default(),
            spawned_by: None,
            singleton: None,
            each_end: false,
            staged: Vec::new(),
            gpus: Default::default(),
            pmix: None,
        };
        let core = NodeCore::new(NodeSetup { job, plan: me }, false, false);
        let mut children = Children::new(&core);
        let gone = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = gone.clone();
        children.ev = Some(Arc::new(move |e| {
            if let TreeEv::Gone(idx, why) = e {
                seen.lock().expect("lock").push((idx, why));
            }
            true
        }));
        let n = CHILD_QUEUE / FRAME_MIN_COST;
        for _ in 0..n {
            children.queue_early(0, Bytes::from_static(b"small"));
        }
        assert!(gone.lock().expect("lock").is_empty(), "within the bound");
        assert_eq!(children.queued[0].len(), n);
        for _ in 0..3 {
            children.queue_early(0, Bytes::from_static(b"one more"));
        }
        let gone = gone.lock().expect("lock").clone();
        assert_eq!(gone.len(), 1, "{gone:?}");
        assert_eq!(
            gone[0].1,
            format!("over {} KiB waited for it before it connected", CHILD_QUEUE >> 10)
        );
        assert!(children.queued[0].is_empty(), "nothing more is held");
    }

    fn frame(epoch: u64, bytes: usize) -> Bytes {
        let pairs = vec![(format!("k{epoch}").into(), "v".repeat(bytes).into())];
        encode_frame(&Msg::FenceOutPart { epoch, pairs, stale: vec![] }).expect("encode")
    }

    /// A child that reads nothing: what fits in its queue is queued, the rest waits behind
    /// it, and nothing ever waits for it (every push returns at once); the queue never holds
    /// more than its bound, and what waits behind it is counted (for the core's decisions).
    /// Room is announced once the child reads, and a reader that comes back gets every
    /// frame, whole and in order.
    #[test]
    fn a_child_that_does_not_read_holds_a_bounded_queue() {
        rt().block_on(async {
            let (ours, theirs) = UnixStream::pair().expect("socketpair");
            let (_, wr) = ours.into_split();
            let cap = 1 << 20;
            let room = Arc::new(tokio::sync::Notify::new());
            let r = room.clone();
            let mut link = Link::new(Box::new(wr), cap, Arc::new(move || r.notify_one()));
            // Far more than the socket buffers and the queue: 64 frames of 64 KiB.
            let mut queued = 0u64;
            let mut waiting = 0u64;
            for epoch in 0..64 {
                match link.push(frame(epoch, 64 << 10)) {
                    Pushed::Queued if waiting == 0 => queued += 1,
                    Pushed::Full => waiting += 1,
                    other => panic!("push {epoch}: {other:?} ({queued} queued, {waiting} waiting)"),
                }
                assert!(link.queued() <= cap, "{} queued", link.queued());
                tokio::task::yield_now().await;
            }
            assert!(waiting > 0 && queued >= 8, "{queued} queued, then {waiting} waiting");
            assert!(link.waiting() >= waiting as usize * (64 << 10), "{}", link.waiting());
            let more = 64;
            // The reader comes back: room is announced, and every frame arrives in order.
            let (rd, _keep) = theirs.into_split();
            let mut rd = FramedRead::new(rd, codec());
            let reader = tokio::spawn(async move {
                let mut epochs = Vec::new();
                while let Some(Ok(Msg::FenceOutPart { epoch, pairs, .. })) = rd.next().await {
                    assert_eq!(pairs[0].1.len(), 64 << 10);
                    epochs.push(epoch);
                }
                epochs
            });
            loop {
                room.notified().await;
                if link.flush() == Flushed::Drained {
                    break;
                }
            }
            assert_eq!(link.close(Duration::from_secs(10)).await, Some(()));
            let epochs = reader.await.expect("reader");
            assert_eq!(epochs, (0..more).collect::<Vec<u64>>(), "every frame, in order");
        });
    }

    /// A broken connection is reported as such (the link is not full, nothing waits).
    #[test]
    fn a_broken_connection_is_not_waited_for() {
        rt().block_on(async {
            let (ours, theirs) = UnixStream::pair().expect("socketpair");
            drop(theirs);
            let (_, wr) = ours.into_split();
            let mut link = Link::new(Box::new(wr), 1 << 20, Arc::new(|| {}));
            let mut got = Pushed::Queued;
            for epoch in 0..100 {
                got = link.push(frame(epoch, 1000));
                if got != Pushed::Queued {
                    break;
                }
                tokio::task::yield_now().await;
            }
            assert_eq!(got, Pushed::Broken);
        });
    }
}

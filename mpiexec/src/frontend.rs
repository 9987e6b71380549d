//! The front end's run loop: start the NLAs, authenticate their connections, be the root of
//! the fence, print the ranks' output, forward stdin and signals, decide the exit status.

use crate::plan::Plan;
use futures::{SinkExt, StreamExt};
use libi::job::{NodeSetup, RankEnd};
use libi::msg::{codec, secret_eq, Msg, MsgCodec, Stream};
use std::collections::HashMap;
use std::io::Write;
use std::os::unix::process::CommandExt as _;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};
use tokio_util::codec::{FramedRead, FramedWrite};
use tracing::{debug, warn};

/// Exit status when the job hit `MPIEXEC_TIMEOUT` (as `timeout(1)`).
pub const STATUS_TIMEOUT: i32 = 124;
/// Exit status when the launcher or an NLA failed (the job could not run to completion).
pub const STATUS_LAUNCH: i32 = 255;

pub struct Options {
    pub label: bool,
    pub verbose: bool,
    pub nla_path: String,
    pub timeout: Option<Duration>,
    pub grace: Duration,
}

enum Fe {
    Connected { node: u32, host: String, sink: FramedWrite<OwnedWriteHalf, MsgCodec> },
    Rejected(String),
    FromNode(u32, Msg),
    NodeGone(u32, String),
    LauncherExited(u32, std::process::ExitStatus),
    Stdin(Vec<u8>),
    Signal(i32),
    Timeout,
    GraceOver,
}

struct NodeState {
    setup: Option<NodeSetup>,
    sink: Option<FramedWrite<OwnedWriteHalf, MsgCodec>>,
    host: String,
    ranks_left: usize,
    launcher_done: bool,
}

/// Run the job; returns the exit status for `libi-mpiexec`.
pub async fn run(plan: Plan, opts: Options) -> i32 {
    let secret = new_secret();
    let listener = match TcpListener::bind("127.0.0.1:0").await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("libi-mpiexec: cannot listen for NLA connections: {e}");
            return STATUS_LAUNCH;
        }
    };
    let addr = match listener.local_addr() {
        Ok(a) => a.to_string(),
        Err(e) => {
            eprintln!("libi-mpiexec: {e}");
            return STATUS_LAUNCH;
        }
    };
    let (tx, mut rx) = unbounded_channel::<Fe>();

    let mut nodes: HashMap<u32, NodeState> = HashMap::new();
    let rank0_node = plan
        .nodes
        .iter()
        .find(|n| n.ranks.iter().any(|r| r.rank == 0))
        .map(|n| n.node);
    for setup in &plan.nodes {
        nodes.insert(
            setup.node,
            NodeState {
                setup: Some(setup.clone()),
                sink: None,
                host: setup.host.clone(),
                ranks_left: setup.ranks.len(),
                launcher_done: false,
            },
        );
    }

    // Accept loop: authenticate each connection before it is trusted.
    {
        let tx = tx.clone();
        let secret = secret.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, peer)) = listener.accept().await else { return };
                let tx = tx.clone();
                let secret = secret.clone();
                tokio::spawn(async move {
                    match handshake(stream, &secret, tx.clone()).await {
                        Ok(()) => {}
                        Err(why) => {
                            let _ = tx.send(Fe::Rejected(format!("{peer}: {why}")));
                        }
                    }
                });
            }
        });
    }

    // Start the NLAs (the fork launcher: every NLA on this machine).
    let mut children = Vec::new();
    for setup in &plan.nodes {
        let mut cmd = tokio::process::Command::new(&opts.nla_path);
        cmd.arg("--parent").arg(&addr).arg("--node").arg(setup.node.to_string());
        if opts.verbose {
            cmd.arg("-v");
        }
        cmd.stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::inherit());
        // Own process group: a terminal's Ctrl-C reaches only the front end, which forwards
        // it; and the NLA dies with the front end.
        // SAFETY: setpgid and prctl are async-signal-safe.
        unsafe {
            cmd.as_std_mut().pre_exec(|| {
                libc::setpgid(0, 0);
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
                Ok(())
            });
        }
        match cmd.spawn() {
            Ok(mut child) => {
                if let Some(mut stdin) = child.stdin.take() {
                    use tokio::io::AsyncWriteExt;
                    let line = format!("{secret}\n");
                    let _ = stdin.write_all(line.as_bytes()).await;
                }
                let node = setup.node;
                let tx = tx.clone();
                children.push(child.id());
                tokio::spawn(async move {
                    if let Ok(st) = child.wait().await {
                        let _ = tx.send(Fe::LauncherExited(node, st));
                    }
                });
            }
            Err(e) => {
                eprintln!(
                    "libi-mpiexec: cannot execute '{}': {}",
                    opts.nla_path,
                    describe(&e)
                );
                return STATUS_LAUNCH;
            }
        }
    }

    spawn_stdin_reader(tx.clone());
    spawn_signal_watch(tx.clone());
    if let Some(t) = opts.timeout {
        let tx = tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(t).await;
            let _ = tx.send(Fe::Timeout);
        });
    }

    let total: usize = plan.nodes.iter().map(|n| n.ranks.len()).sum();
    let mut ended = 0usize;
    let mut status: Option<i32> = None;
    let mut killing = false;
    let mut pending_stdin: Vec<Vec<u8>> = Vec::new();
    let mut fence_epoch = 1u64;
    let mut fence_in: usize = 0;
    let mut fence_pairs: Vec<(String, String)> = Vec::new();
    let mut last_sigint: Option<Instant> = None;
    let mut out = Output::new(opts.label);

    while ended < total {
        let Some(ev) = rx.recv().await else { break };
        let mut fail: Option<(i32, String)> = None;
        match ev {
            Fe::Connected { node, host, mut sink } => {
                let Some(st) = nodes.get_mut(&node) else { continue };
                let Some(setup) = st.setup.take() else {
                    warn!("node {node} connected twice; dropped");
                    continue;
                };
                debug!(node, %host, "NLA connected");
                st.host = host;
                let _ = sink.send(Msg::Setup(Box::new(setup))).await;
                if Some(node) == rank0_node {
                    for d in pending_stdin.drain(..) {
                        let _ = sink.send(Msg::Stdin { data: d }).await;
                    }
                }
                if killing {
                    let _ = sink.send(Msg::Kill).await;
                }
                st.sink = Some(sink);
            }
            Fe::Rejected(why) => warn!("dropped a tree connection: {why}"),
            Fe::FromNode(node, msg) => match msg {
                Msg::Output { rank, stream, data } => out.write(rank, stream, &data),
                Msg::RankEnded { rank, host, end } => {
                    ended += 1;
                    if let Some(st) = nodes.get_mut(&node) {
                        st.ranks_left = st.ranks_left.saturating_sub(1);
                    }
                    if end.is_failure() && !killing {
                        fail = Some((end.status(), describe_end(rank, &host, &end)));
                    }
                }
                Msg::Abort { rank, host, code, message } => {
                    if !killing {
                        let m = match message.as_deref() {
                            Some(m) if !m.is_empty() && m != "abort" => format!(": {m}"),
                            _ => String::new(),
                        };
                        fail = Some((
                            code,
                            format!("rank {rank} on {host} called MPI_Abort with exit code {code}{m}"),
                        ));
                    }
                }
                Msg::Fatal { host, message, status } => {
                    if !killing {
                        fail = Some((status, message));
                    }
                }
                Msg::FenceIn { epoch, pairs } => {
                    if epoch != fence_epoch {
                        warn!("node {node} entered fence {epoch} during fence {fence_epoch}");
                    } else {
                        fence_in += 1;
                        fence_pairs.extend(pairs);
                        if fence_in == nodes.len() {
                            let release =
                                Msg::FenceOut { epoch, pairs: std::mem::take(&mut fence_pairs) };
                            broadcast(&mut nodes, &release).await;
                            fence_epoch += 1;
                            fence_in = 0;
                        }
                    }
                }
                other => warn!("unexpected message from node {node}: {other:?}"),
            },
            Fe::NodeGone(node, why) => {
                if let Some(st) = nodes.get_mut(&node) {
                    st.sink = None;
                    if st.ranks_left > 0 {
                        ended += st.ranks_left;
                        st.ranks_left = 0;
                        if !killing {
                            fail = Some((
                                STATUS_LAUNCH,
                                format!("lost the connection to the NLA on {} ({why})", st.host),
                            ));
                        }
                    }
                }
            }
            Fe::LauncherExited(node, st_) => {
                if let Some(st) = nodes.get_mut(&node) {
                    st.launcher_done = true;
                    if st.setup.is_some() {
                        // never connected
                        ended += st.ranks_left;
                        st.ranks_left = 0;
                        if !killing {
                            fail = Some((
                                STATUS_LAUNCH,
                                format!("the NLA on {} exited before connecting ({st_})", st.host),
                            ));
                        }
                    }
                }
            }
            Fe::Stdin(data) => match rank0_node.and_then(|n| nodes.get_mut(&n)) {
                Some(NodeState { sink: Some(s), .. }) => {
                    let _ = s.send(Msg::Stdin { data }).await;
                }
                _ => pending_stdin.push(data),
            },
            Fe::Signal(sig) => {
                let now = Instant::now();
                let second_int = sig == libc::SIGINT
                    && last_sigint.is_some_and(|t| now.duration_since(t) < Duration::from_secs(2));
                if sig == libc::SIGINT {
                    last_sigint = Some(now);
                }
                if second_int {
                    if !killing {
                        fail = Some((130, "second SIGINT: killing the job".into()));
                    }
                } else {
                    broadcast(&mut nodes, &Msg::Signal { signal: sig }).await;
                }
            }
            Fe::Timeout => {
                if !killing {
                    let secs = opts.timeout.map(|t| t.as_secs()).unwrap_or(0);
                    fail = Some((
                        STATUS_TIMEOUT,
                        format!("job timed out after {secs} s (MPIEXEC_TIMEOUT); killing it"),
                    ));
                }
            }
            Fe::GraceOver => {
                // The NLAs did not report every rank in time: stop waiting.
                warn!("NLAs did not finish tearing down in time");
                break;
            }
        }
        if let Some((code, message)) = fail {
            out.flush();
            eprintln!("libi-mpiexec: {message}");
            status = Some(code);
            killing = true;
            broadcast(&mut nodes, &Msg::Kill).await;
            let tx = tx.clone();
            let wait = opts.grace + Duration::from_secs(5);
            tokio::spawn(async move {
                tokio::time::sleep(wait).await;
                let _ = tx.send(Fe::GraceOver);
            });
        }
    }
    out.flush();
    // Close the tree: NLAs exit once their parent is gone.
    for st in nodes.values_mut() {
        if let Some(mut s) = st.sink.take() {
            let _ = s.close().await;
        }
    }
    status.unwrap_or(0)
}

async fn broadcast(nodes: &mut HashMap<u32, NodeState>, msg: &Msg) {
    for st in nodes.values_mut() {
        if let Some(s) = st.sink.as_mut() {
            let _ = s.send(msg.clone()).await;
        }
    }
}

/// Read the child's Hello, check the secret, then hand the connection to the loop.
async fn handshake(stream: TcpStream, secret: &str, tx: UnboundedSender<Fe>) -> Result<(), String> {
    let _ = stream.set_nodelay(true);
    let (rd, wr) = stream.into_split();
    let mut rd = FramedRead::new(rd, codec());
    let first = tokio::time::timeout(Duration::from_secs(30), rd.next())
        .await
        .map_err(|_| "no hello within 30 s".to_string())?;
    let (node, host) = match first {
        Some(Ok(Msg::Hello { node, secret: s, host, .. })) => {
            if !secret_eq(&s, secret) {
                return Err("wrong job secret".into());
            }
            (node, host)
        }
        Some(Ok(_)) => return Err("first message is not a hello".into()),
        Some(Err(e)) => return Err(e.to_string()),
        None => return Err("closed before hello".into()),
    };
    let sink = FramedWrite::new(wr, codec());
    tx.send(Fe::Connected { node, host, sink }).map_err(|_| "front end is gone".to_string())?;
    tokio::spawn(async move {
        while let Some(m) = rd.next().await {
            match m {
                Ok(msg) => {
                    if tx.send(Fe::FromNode(node, msg)).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    let _ = tx.send(Fe::NodeGone(node, e.to_string()));
                    return;
                }
            }
        }
        let _ = tx.send(Fe::NodeGone(node, "connection closed".into()));
    });
    Ok(())
}

/// Stdin is read on a plain thread (a blocking read must not hold up the runtime's exit).
fn spawn_stdin_reader(tx: UnboundedSender<Fe>) {
    let _ = std::thread::Builder::new().name("stdin".into()).spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        let stdin = std::io::stdin();
        loop {
            let n = match std::io::Read::read(&mut stdin.lock(), &mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => 0,
            };
            if tx.send(Fe::Stdin(buf[..n].to_vec())).is_err() || n == 0 {
                return;
            }
        }
    });
}

fn spawn_signal_watch(tx: UnboundedSender<Fe>) {
    use tokio::signal::unix::{signal, SignalKind};
    for (kind, num) in [
        (SignalKind::interrupt(), libc::SIGINT),
        (SignalKind::terminate(), libc::SIGTERM),
        (SignalKind::user_defined1(), libc::SIGUSR1),
        (SignalKind::user_defined2(), libc::SIGUSR2),
    ] {
        let Ok(mut s) = signal(kind) else { continue };
        let tx = tx.clone();
        tokio::spawn(async move {
            while s.recv().await.is_some() {
                if tx.send(Fe::Signal(num)).is_err() {
                    return;
                }
            }
        });
    }
}

/// One line naming a failed rank.
pub fn describe_end(rank: u32, host: &str, end: &RankEnd) -> String {
    match end {
        RankEnd::Exited { code, clean_pmi: true } => {
            format!("rank {rank} on {host} exited with code {code}")
        }
        RankEnd::Exited { code, clean_pmi: false } => format!(
            "rank {rank} on {host} exited with code {code} without calling PMI finalize"
        ),
        RankEnd::Signaled { signal } => format!(
            "rank {rank} on {host} was killed by signal {signal} ({})",
            signal_name(*signal)
        ),
        RankEnd::SpawnFailed { reason, .. } => reason.clone(),
    }
}

pub fn signal_name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("signal {sig}"))
}

fn describe(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => nix::errno::Errno::from_raw(n).desc().to_string(),
        None => e.to_string(),
    }
}

fn new_secret() -> String {
    use rand::RngCore;
    let mut b = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The ranks' output on our stdout/stderr, whole lines, optionally labelled.
struct Output {
    label: bool,
    out: std::io::Stdout,
    err: std::io::Stderr,
}

impl Output {
    fn new(label: bool) -> Self {
        Output { label, out: std::io::stdout(), err: std::io::stderr() }
    }

    fn write(&mut self, rank: u32, stream: Stream, data: &[u8]) {
        let buf: std::borrow::Cow<[u8]> = if self.label {
            let prefix = format!("[{rank}] ");
            let mut b = Vec::with_capacity(data.len() + 16);
            for line in data.split_inclusive(|&c| c == b'\n') {
                b.extend_from_slice(prefix.as_bytes());
                b.extend_from_slice(line);
            }
            b.into()
        } else {
            data.into()
        };
        let _ = match stream {
            Stream::Stdout => self.out.lock().write_all(&buf),
            Stream::Stderr => self.err.lock().write_all(&buf),
        };
    }

    fn flush(&mut self) {
        let _ = self.out.flush();
        let _ = self.err.flush();
    }
}

//! The front end's run loop. The front end is the root of the NLA tree: it runs the same node
//! state machine as every NLA ([`NodeCore`], with no local ranks and no parent), launches its
//! children with the job's launcher, and turns what reaches the root into the job's visible
//! behaviour: output on our stdout/stderr, one line naming what failed, the exit status.

use crate::plan::Plan;
use futures::SinkExt;
use libi::job::{LauncherKind, NodePlan};
use libi::job::{NodeSetup, RankEnd};
use libi::msg::{Msg, Stream};
use libi::report::{now, NodeReport, Report};
use nla::core::{Effect, NodeCore};
use nla::tree::{accept_loop, listen, spawn_launcher, Children, EvSink, PendingConn, TreeEv, STEP};
use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};
use tracing::warn;

/// Exit status when the job hit `MPIEXEC_TIMEOUT` (as `timeout(1)`).
pub const STATUS_TIMEOUT: i32 = 124;
/// Exit status when the launcher or an NLA failed (the job could not run to completion).
pub const STATUS_LAUNCH: i32 = 255;

pub struct Options {
    pub label: bool,
    pub timeout: Option<Duration>,
    pub grace: Duration,
    /// Address the NLAs connect back to (`-localhost`/`-iface`).
    pub advertise: Option<IpAddr>,
    /// Where to write the launch report.
    pub report: Option<String>,
}

enum Fe {
    Tree(TreeEv),
    Stdin(Vec<u8>),
    Signal(i32),
    Timeout,
    GraceOver,
    Tick,
    ChildrenTimeout,
    /// The grace of an `Effect::FailSoon` is over.
    FailNow(String),
}

/// What the front end makes of the job so far.
struct Job {
    status: Option<i32>,
    killing: bool,
    out: Output,
    nodes_up: usize,
    ranks_up: usize,
    all_up_at: Option<f64>,
    reports: Vec<NodeReport>,
}

/// Run the job; returns the exit status for `libi-mpiexec`.
pub async fn run(plan: Plan, opts: Options) -> i32 {
    let t0 = now();
    let started = Instant::now();
    let secret = new_secret();
    let (tx, mut rx) = unbounded_channel::<Fe>();
    let tree_ev: EvSink = {
        let tx = tx.clone();
        Arc::new(move |e| tx.send(Fe::Tree(e)).is_ok())
    };
    let setup = NodeSetup { job: plan.job.clone(), plan: plan.root.clone() };
    let mut core = NodeCore::new(setup, true, plan.job.report);
    let mut children = Children::new(core.plan());
    let mut fx = Vec::new();
    let hosts: Vec<String> = core.plan().children.iter().map(|c| c.host.clone()).collect();
    let hosts: Vec<&str> = hosts.iter().map(String::as_str).collect();
    let (listener, addr) = match listen(plan.job.launcher.kind, opts.advertise, &hosts).await {
        Ok(x) => x,
        Err(e) => {
            eprintln!("libi-mpiexec: cannot listen for NLA connections: {e}");
            return STATUS_LAUNCH;
        }
    };
    let ids = core.plan().children.iter().map(|c| c.node).collect();
    accept_loop(listener, secret.clone(), ids, tree_ev.clone());
    // The srun step under Slurm: its pid and whether it exited.
    let mut step: Option<(Option<u32>, bool)> = None;
    if plan.job.launcher.kind == LauncherKind::Slurm {
        // One srun step starts every NLA; they join here (see `Rendezvous`).
        let mut hosts = Vec::new();
        all_hosts(&plan.root, &mut hosts);
        let (prog, args) =
            libi::launch::srun_command(&plan.job.launcher, &hosts, &addr, plan.job.verbose);
        match spawn_launcher(&prog, &args, STEP, &secret, tree_ev.clone()).await {
            Ok(pid) => step = Some((pid, false)),
            Err(e) => {
                eprintln!("libi-mpiexec: {e}");
                return STATUS_LAUNCH;
            }
        }
    }
    children.launch_all(&mut core, &addr, &secret, &tree_ev, &mut fx).await;
    let mut rendezvous = Rendezvous::new(&plan.root);

    spawn_stdin_reader(tx.clone());
    spawn_signal_watch(tx.clone());
    if let Some(t) = opts.timeout {
        let tx = tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(t).await;
            let _ = tx.send(Fe::Timeout);
        });
    }
    let progress = std::io::stderr().is_terminal();
    if progress {
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut iv = tokio::time::interval(Duration::from_millis(250));
            loop {
                iv.tick().await;
                if tx.send(Fe::Tick).is_err() {
                    return;
                }
            }
        });
    }

    let mut job = Job {
        status: None,
        killing: false,
        out: Output::new(opts.label),
        nodes_up: 0,
        ranks_up: 0,
        all_up_at: None,
        reports: Vec::new(),
    };
    let total_ranks = plan.job.size as usize;
    let mut last_sigint: Option<Instant> = None;
    let mut progress_shown = false;
    let mut waiting_children = false;
    loop {
        while !fx.is_empty() {
            let batch: Vec<Effect> = std::mem::take(&mut fx);
            for e in batch {
                match e {
                    Effect::ToParent(msg) => {
                        if let Some((code, message)) = job.event(msg, plan.nodes) {
                            job.fail(code, &message, &mut core, &mut fx, &tx, opts.grace);
                        }
                    }
                    Effect::ToChild(idx, msg) => children.send(idx, msg).await,
                    Effect::ToChildren(msg) => children.broadcast(&msg).await,
                    Effect::Warn(w) => warn!("{w}"),
                    Effect::FailSoon(m) => {
                        let tx = tx.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(nla::driver::PMGR_ABORT_GRACE).await;
                            let _ = tx.send(Fe::FailNow(m));
                        });
                    }
                    Effect::ToRank(..)
                    | Effect::CloseRank(_)
                    | Effect::KillRanks
                    | Effect::SignalRanks(_)
                    | Effect::Stdin(_)
                    | Effect::ToPmgr(..)
                    | Effect::ClosePmgr(_) => {}
                }
            }
        }
        if core.finished() {
            break;
        }
        if core.ranks_left() == 0 && !waiting_children {
            // Every rank ended: give the NLAs a moment to close (and send their reports).
            waiting_children = true;
            let tx = tx.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(5)).await;
                let _ = tx.send(Fe::ChildrenTimeout);
            });
        }
        let Some(ev) = rx.recv().await else { break };
        match ev {
            Fe::Tree(TreeEv::Join { host, listen, conn }) => {
                rendezvous.join(host, listen, conn, &mut children, &mut core, &mut fx).await
            }
            Fe::Tree(t) => {
                if let (TreeEv::LauncherExited { idx: STEP, .. }, Some((_, done))) =
                    (&t, step.as_mut())
                {
                    *done = true;
                }
                children.on_event(t, &mut core, &mut fx).await
            }
            Fe::Stdin(data) => core.stdin(Msg::Stdin { data }, &mut fx),
            Fe::Signal(sig) => {
                let now_i = Instant::now();
                let second = sig == libc::SIGINT
                    && last_sigint
                        .is_some_and(|t| now_i.duration_since(t) < Duration::from_secs(2));
                if sig == libc::SIGINT {
                    last_sigint = Some(now_i);
                }
                if second {
                    job.fail(
                        130,
                        "second SIGINT: killing the job",
                        &mut core,
                        &mut fx,
                        &tx,
                        opts.grace,
                    );
                } else if sig == libc::SIGTERM {
                    // Forwarded as part of the teardown; the job ends whatever the ranks do.
                    let m = "received SIGTERM: terminating the job";
                    job.fail(128 + libc::SIGTERM, m, &mut core, &mut fx, &tx, opts.grace);
                } else {
                    fx.push(Effect::ToChildren(Msg::Signal { signal: sig }));
                }
            }
            Fe::Timeout => {
                let secs = opts.timeout.map(|t| t.as_secs()).unwrap_or(0);
                let m = format!("job timed out after {secs} s (MPIEXEC_TIMEOUT); killing it");
                job.fail(STATUS_TIMEOUT, &m, &mut core, &mut fx, &tx, opts.grace);
            }
            Fe::GraceOver => {
                warn!("the NLAs did not finish tearing the job down in time");
                break;
            }
            Fe::ChildrenTimeout => break,
            Fe::FailNow(m) => core.fail_now(m, &mut fx),
            Fe::Tick => {
                if job.nodes_up < plan.nodes && started.elapsed() > Duration::from_secs(1) {
                    eprint!(
                        "\rlibi-mpiexec: {}/{} NLAs up, {}/{} ranks started ",
                        job.nodes_up, plan.nodes, job.ranks_up, total_ranks
                    );
                    progress_shown = true;
                } else if progress_shown {
                    eprintln!(
                        "\rlibi-mpiexec: {}/{} NLAs up, {}/{} ranks started ",
                        job.nodes_up, plan.nodes, job.ranks_up, total_ranks
                    );
                    progress_shown = false;
                }
            }
        }
    }
    job.out.flush();
    children.close_all().await;
    // Under Slurm, let srun see its step end (its NLAs are gone or going) before we exit:
    // killing it early would leave the step behind in Slurm. Bounded; then SIGTERM.
    if let Some((pid, false)) = step {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let mut done = false;
        while !done {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(Fe::Tree(TreeEv::LauncherExited { idx: STEP, .. }))) => done = true,
                Ok(Some(_)) => {}
                _ => break,
            }
        }
        if !done {
            if let Some(pid) = pid {
                // SAFETY: kill(2) of srun's own process group.
                unsafe {
                    libc::kill(-(pid as i32), libc::SIGTERM);
                }
            }
        }
    }
    if let Some(path) = &opts.report {
        let mut fe = core.report();
        fe.ready = t0;
        fe.launches = children.launches.clone();
        let mut reports = vec![fe];
        reports.append(&mut job.reports);
        let mut report = Report {
            nodes: plan.nodes as u32,
            ranks: total_ranks as u32,
            tree: plan.shape.to_string(),
            launcher: format!("{:?}", plan.job.launcher.kind).to_lowercase(),
            seq: plan.model.seq,
            rem: plan.model.rem,
            launch_time: job.all_up_at.map(|t| t - t0).unwrap_or(f64::NAN),
            total_time: now() - t0,
            reports,
        };
        report.rebase(t0);
        let text = serde_json::to_string_pretty(&report).unwrap_or_default();
        if let Err(e) = std::fs::write(path, text + "\n") {
            eprintln!("libi-mpiexec: cannot write report {path}: {e}");
        }
    }
    job.status.unwrap_or(0)
}

impl Job {
    /// A message that reached the root. Returns a failure to act on.
    fn event(&mut self, msg: Msg, nodes: usize) -> Option<(i32, String)> {
        match msg {
            Msg::Output { rank, stream, data } => self.out.write(rank, stream, &data),
            Msg::RankEnded { rank, host, end } => {
                if end.is_failure() && !self.killing {
                    return Some((end.status(), describe_end(rank, &host, &end)));
                }
            }
            Msg::Abort { rank, host, code, message } => {
                if !self.killing {
                    let m = match message.as_deref() {
                        Some(m) if !m.is_empty() && m != "abort" => format!(": {m}"),
                        _ => String::new(),
                    };
                    return Some((
                        code,
                        format!("rank {rank} on {host} called MPI_Abort with exit code {code}{m}"),
                    ));
                }
            }
            Msg::Fatal { message, status, .. } => {
                if !self.killing {
                    return Some((status, message));
                }
            }
            Msg::SubtreeLost { message, .. } => {
                if !self.killing {
                    return Some((STATUS_LAUNCH, message));
                }
            }
            Msg::NodeUp { ranks, .. } => {
                self.nodes_up += 1;
                self.ranks_up += ranks as usize;
                if self.nodes_up == nodes {
                    self.all_up_at = Some(now());
                }
            }
            Msg::Report(r) => self.reports.push(*r),
            other => warn!("unexpected message at the root: {other:?}"),
        }
        None
    }

    /// The job fails: say why (once), tear it down, and stop waiting after the grace period.
    fn fail(
        &mut self,
        code: i32,
        message: &str,
        core: &mut NodeCore,
        fx: &mut Vec<Effect>,
        tx: &UnboundedSender<Fe>,
        grace: Duration,
    ) {
        if self.killing {
            return;
        }
        self.out.flush();
        eprintln!("libi-mpiexec: {message}");
        self.status = Some(code);
        self.killing = true;
        core.kill(fx);
        let tx = tx.clone();
        let wait = grace + Duration::from_secs(5);
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let _ = tx.send(Fe::GraceOver);
        });
    }
}

/// Every NLA host in node order (node ids 1..).
fn all_hosts(root: &NodePlan, out: &mut Vec<String>) {
    let mut all: Vec<(u32, String)> = Vec::new();
    fn walk(p: &NodePlan, all: &mut Vec<(u32, String)>) {
        if p.node != 0 {
            all.push((p.node, p.host.clone()));
        }
        for c in &p.children {
            walk(c, all);
        }
    }
    walk(root, &mut all);
    all.sort();
    out.extend(all.into_iter().map(|(_, h)| h));
}

/// NLAs started by one srun step join the front end: each says which host it runs on and
/// where it listens. The front end adopts its own children in the NLA tree and redirects
/// every other NLA to its parent's listen address (as soon as that parent has joined).
struct Rendezvous {
    node_of_host: HashMap<String, u32>,
    parent_of: HashMap<u32, u32>,
    listen: HashMap<u32, String>,
    pending: HashMap<u32, Vec<(u32, Box<PendingConn>)>>,
}

impl Rendezvous {
    fn new(root: &NodePlan) -> Self {
        let mut r = Rendezvous {
            node_of_host: HashMap::new(),
            parent_of: HashMap::new(),
            listen: HashMap::new(),
            pending: HashMap::new(),
        };
        fn walk(p: &NodePlan, r: &mut Rendezvous) {
            for c in &p.children {
                r.node_of_host.insert(c.host.clone(), c.node);
                r.parent_of.insert(c.node, p.node);
                walk(c, r);
            }
        }
        walk(root, &mut r);
        r
    }

    async fn join(
        &mut self,
        host: String,
        listen: String,
        conn: Box<PendingConn>,
        children: &mut Children,
        core: &mut NodeCore,
        fx: &mut Vec<Effect>,
    ) {
        let Some(&node) = self.node_of_host.get(&host) else {
            warn!("dropped a join from {host}: not a host of this job");
            return;
        };
        if self.listen.contains_key(&node) {
            warn!("dropped a second join from {host}");
            return;
        }
        self.listen.insert(node, listen.clone());
        let parent = self.parent_of.get(&node).copied().unwrap_or(0);
        if parent == 0 {
            if let Some(idx) = core.child_index(node) {
                children.adopt(idx, host, conn, core, fx).await;
            }
        } else if let Some(addr) = self.listen.get(&parent).cloned() {
            redirect(conn, node, addr).await;
        } else {
            self.pending.entry(parent).or_default().push((node, conn));
        }
        for (child, conn) in self.pending.remove(&node).unwrap_or_default() {
            redirect(conn, child, listen.clone()).await;
        }
    }
}

async fn redirect(mut conn: Box<PendingConn>, node: u32, parent: String) {
    let _ = conn.wr.send(Msg::Redirect { node, parent }).await;
    let _ = conn.wr.close().await;
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
        RankEnd::Exited { code, clean_pmi: false } => {
            format!("rank {rank} on {host} exited with code {code} without calling PMI finalize")
        }
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

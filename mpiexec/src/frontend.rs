//! The front end's driver. The front end is the root of the NLA tree: it runs the same node
//! state machine as every NLA ([`NodeCore`], with no local ranks and no parent) for each
//! process group, launches its children with the job's launcher, and hands what reaches the
//! root to the root core ([`RootCore`]), which decides the job's visible behaviour: output
//! on our stdout/stderr, one line naming what failed, the exit status, teardown and its
//! timers, spawn groups, the name table.
//!
//! This file reads sockets, signals and stdin, writes output, starts processes, turns the
//! cores' next deadline into a sleep, and applies the effects of the root core
//! ([`root::Effect`]) and of each group's root node ([`Effect`]). What it does is decided in
//! `libi_node::proto`: every timeout's value and effect in `root.rs` (and `node.rs`'s
//! `limits`), and the choices this driver acts on are pure functions there: which signals
//! are watched (`signals::front_end_signals`), where rank 0's stdin comes from
//! ([`root::stdin_source`]), what a failed write to our stdout or stderr means
//! ([`RootCore::our_output_failed`]), which launcher a spawned group gets
//! ([`root::spawn_launcher`]) and which host file a spawn's info names
//! ([`root::spawn_hostfile`]). Two choices stay with the tools they serve: whether the
//! process table is built at launch (MPIR's rule, `mpir.rs`) and how many control-socket
//! requests may wait (`control.rs`).

use crate::plan::Plan;
use crate::stdio::{spawn_stdin_reader, Ack, Output, StdinCredit, WriterEvent, Wrote};
use futures::SinkExt;
use libi::job::{LauncherKind, NodePlan};
use libi::job::{NodeSetup, SpawnRequest};
use libi::msg::{Msg, Stream};
use libi::report::{now, NodeReport, Report};
use libi::spawn::Spawner;
use libi_node::io::tree::{
    accept_loop, listen, spawn_launcher, Children, EvSink, PendingConn, Spawn, TreeEv, STEP,
};
use libi_node::proto::effect::NodeIo;
use libi_node::proto::node::{Effect, NodeCore};
use libi_node::proto::root::{
    self, Join, Phase, RootConfig, RootCore, SpawnLauncher, StdinSource, Streams,
};
use std::io::IsTerminal;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tracing::{debug, warn};

pub struct Options {
    /// `-l`, `-prepend-pattern`, `-outfile-pattern`, `-errfile-pattern`.
    pub label: crate::stdio::RankFormat,
    pub timeout: Option<Duration>,
    pub grace: Duration,
    /// Address the NLAs connect back to (`-localhost`/`-iface`).
    pub advertise: Option<IpAddr>,
    /// Where to write the launch report.
    pub report: Option<String>,
    /// `-disable-auto-cleanup`: a failed rank does not end the others.
    pub no_cleanup: bool,
    /// `-print-all-exitcodes`: every rank's wait status at the end, one line per host.
    pub print_all_exitcodes: bool,
    /// `-nameserver`: the outside name server ranks publish on.
    pub nameserver: Option<libi::nameserver::Address>,
    /// `--end-on-stdin-eof`: our stdin is the life line of whoever started us.
    pub end_on_stdin_eof: bool,
    /// The launcher of spawned groups on hosts that are not this machine
    /// ([`root::Launchers::remote`], decided in `main`).
    pub remote_launcher: Option<LauncherKind>,
}

/// What the event loop waits for (the root core's timers are a deadline, not events).
enum Fe {
    /// An event of process group `g`'s NLA tree.
    Tree(usize, TreeEv),
    Stdin(Vec<u8>),
    /// From the writers of our stdout/stderr.
    Writer(WriterEvent),
    Signal(i32),
    /// `--end-on-stdin-eof`: our stdin ended.
    LifeLineLost,
    /// A tool's request on our control socket.
    Control(crate::control::Request),
    /// The outside name server's answer to request `req` of group `g`.
    Name(usize, u64, Result<(bool, Option<String>), String>),
}

/// One process group: the job itself (group 0) or the ranks of one `MPI_Comm_spawn`. Each
/// has its own NLA tree rooted here (as Hydra starts new proxies for a spawn): its own root
/// node state, children, listener and (under Slurm) srun step. Its job-level state (NLAs
/// up, the spawn it answers, abandoned) is the root core's.
struct Group {
    core: NodeCore,
    children: Children,
    /// Under Slurm, where the NLAs that join go (see [`root::Rendezvous`]).
    rendezvous: root::Rendezvous<Box<PendingConn>>,
    /// The srun step under Slurm: its pid and whether it exited.
    step: Option<(Option<u32>, bool)>,
    fx: Vec<Effect>,
}

/// The I/O of a group's root node ([`libi_node::proto::effect`]): its parent is the root core, its
/// children are the group's top NLAs; it has no ranks, no PMGR clients and no parent to
/// start NLAs for, so those effects have nothing to act on.
struct RootIo<'a> {
    root: &'a mut RootCore,
    children: &'a mut Children,
    g: usize,
    now: f64,
}

impl NodeIo for RootIo<'_> {
    fn to_rank(&mut self, _: usize, _: Vec<u8>) {}
    fn close_rank(&mut self, _: usize) {}
    fn to_parent(&mut self, msg: Msg) {
        self.root.root_msg(self.now, self.g, msg)
    }
    fn to_child(&mut self, idx: usize, msg: Msg) {
        self.children.send(idx, msg)
    }
    fn to_children(&mut self, msg: Msg) {
        self.children.broadcast(&msg)
    }
    fn pause_child(&mut self, idx: usize, pause: bool) {
        self.children.pause(idx, pause)
    }
    fn drop_child(&mut self, idx: usize, why: &str) {
        self.children.drop_child(idx, why)
    }
    fn signal_ranks(&mut self, _: i32) {}
    fn stdin(&mut self, _: Vec<u8>) {}
    fn to_pmgr(&mut self, _: u64, _: bytes::Bytes) {}
    fn close_pmgr(&mut self, _: u64) {}
    fn start_nla(&mut self, _: &str, _: &str) {}
    fn abort_launches(&mut self) {
        self.children.abort_launches()
    }
}

/// Everything the front end's driver holds while the job runs.
struct FrontEnd {
    plan: Plan,
    groups: Vec<Group>,
    spawner: Spawner,
    /// What the job's spawns are planned from.
    spawn_base: libi::spawn::SpawnBase,
    root: RootCore,
    out: Output,
    stdin_credit: Arc<StdinCredit>,
    secret: String,
    advertise: Option<IpAddr>,
    tx: UnboundedSender<Fe>,
    /// The origin of the root core's clock.
    start: Instant,
    /// Wall time at the start (the launch report's times).
    t0: f64,
    /// `-report`: where to write the launch report.
    report: Option<String>,
    /// `-nameserver`.
    nameserver: Option<libi::nameserver::Address>,
    /// See [`Options::remote_launcher`].
    remote_launcher: Option<LauncherKind>,
    /// Control-socket requests waiting for the process table they asked for.
    proc_waiters: Vec<(u64, tokio::sync::oneshot::Sender<String>)>,
}

/// Run the job; returns the exit status for `libi-mpiexec`.
pub async fn run(plan: Plan, opts: Options) -> i32 {
    // Descriptors for the child connections and launchers, before any other thread exists.
    libi_node::reserve_fd_table(8 * plan.nodes + 64);
    let t0 = now();
    let start = Instant::now();
    let (tx, mut rx) = unbounded_channel::<Fe>();
    let cfg = RootConfig {
        timeout: opts.timeout.map(|t| t.as_secs_f64()),
        grace: opts.grace.as_secs_f64(),
        no_cleanup: opts.no_cleanup,
        print_all_exitcodes: opts.print_all_exitcodes,
        progress: std::io::stderr().is_terminal(),
        singleton: plan.job.singleton.is_some(),
        launcher_joins: plan.job.launcher.kind.joins(),
        pmgr: plan.job.pmgr.is_some(),
        name_server: opts.nameserver.is_some(),
    };
    let root = RootCore::new(cfg, &plan.root, plan.job.size as usize, 0.0);
    let mut fe = FrontEnd {
        spawn_base: plan.spawn_base(),
        spawner: Spawner::new(&plan.spawn_base()),
        plan,
        groups: Vec::new(),
        root,
        out: {
            let tx = tx.clone();
            Output::new(opts.label, move |e| {
                let _ = tx.send(Fe::Writer(e));
            })
        },
        stdin_credit: StdinCredit::new(),
        secret: new_secret(),
        advertise: opts.advertise,
        tx: tx.clone(),
        start,
        t0,
        report: opts.report,
        nameserver: opts.nameserver,
        remote_launcher: opts.remote_launcher,
        proc_waiters: Vec::new(),
    };
    // The process table for debuggers (MPIR) and for tools that attach next to the job.
    let size = fe.plan.job.size;
    fe.root.set_proc_table_at_launch(
        crate::mpir::being_debugged() || size <= crate::mpir::ATTACH_TABLE_MAX,
    );
    {
        let tx = tx.clone();
        crate::control::listen(move |r| tx.send(Fe::Control(r)).is_ok());
    }
    // Our own diagnostics queue behind the ranks' output on the stderr writer.
    libi_node::set_stderr_sink(fe.out.stderr_sink());
    let setup = NodeSetup { job: fe.plan.job.clone(), plan: fe.plan.root.clone() };
    fe.out.place(0, &setup.plan);
    match fe.start_group(setup).await {
        Ok((g, _)) => {
            let nodes = g.core.plan().subtree_nodes() - 1;
            let kvsname = g.core.job().kvsname.clone();
            let peer = pmix_peer(g.core.job());
            fe.groups.push(g);
            let gi = fe.root.job_started(fe.clock(), nodes, kvsname);
            if let Some(p) = peer {
                fe.root.set_pmix(gi, p);
            }
            match root::stdin_source(opts.end_on_stdin_eof, fe.plan.job.singleton.is_some()) {
                StdinSource::LifeLine => {
                    let _ = tx.send(Fe::Stdin(Vec::new()));
                    spawn_life_line(tx.clone());
                }
                StdinSource::Ours => {
                    let tx = tx.clone();
                    let credit = fe.stdin_credit.clone();
                    spawn_stdin_reader(credit, move |d| tx.send(Fe::Stdin(d)).is_ok());
                }
                StdinSource::Nothing => {}
            }
            spawn_signal_watch(tx.clone());
        }
        Err(e) => fe.root.start_failed(e),
    }
    fe.run_phase(&mut rx).await;
    fe.close_phase(&mut rx).await;
    fe.flush_phase(&mut rx).await;
    fe.root.status()
}

impl FrontEnd {
    /// The root core's clock: seconds since the start.
    fn clock(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// What the root core needs to know of our output streams.
    fn streams(&self) -> Streams {
        Streams { stdout: self.out.state(Stream::Stdout), stderr: self.out.state(Stream::Stderr) }
    }

    /// The next event; `None` when a deadline comes first — the root core's, or a group's
    /// node core or launch lifecycle's (then call `handle_timeout`). A deadline already past
    /// wins over waiting events, so that a flood of events never delays a timer.
    async fn next(&self, rx: &mut UnboundedReceiver<Fe>) -> Option<Fe> {
        // Every core and launch lifecycle is on our one clock (seconds since our start).
        let now = self.clock();
        let wait = std::iter::once(self.root.poll_timeout())
            .chain(
                self.groups.iter().flat_map(|g| [g.core.poll_timeout(), g.children.poll_timeout()]),
            )
            .flatten()
            .reduce(f64::min)
            .map(|t| t - now);
        let Some(wait) = wait else {
            return rx.recv().await;
        };
        tokio::select! {
            biased;
            _ = tokio::time::sleep(Duration::from_secs_f64(wait.max(0.0))) => None,
            ev = rx.recv() => ev,
        }
    }

    async fn handle_timeout(&mut self) {
        let (now, streams) = (self.tick(), self.streams());
        self.root.handle_timeout(now, &streams);
        for g in &mut self.groups {
            g.core.handle_timeout(now, &mut g.fx);
            g.children.handle_timeout(now, &mut g.core, &mut g.fx).await;
        }
    }

    /// Read our clock for the turn about to serve an event, and tell it to every group's
    /// core and launch lifecycle (they read none): the turn's deadlines are set from it.
    fn tick(&mut self) -> f64 {
        let now = self.clock();
        for g in &mut self.groups {
            g.core.set_now(now);
            g.children.set_now(now);
        }
        now
    }

    /// While the job runs (and is torn down): until the root core leaves [`Phase::Run`].
    async fn run_phase(&mut self, rx: &mut UnboundedReceiver<Fe>) {
        loop {
            self.apply().await;
            let finished = self.groups.iter().all(|g| g.core.finished());
            let left = self.groups.iter().map(|g| g.core.ranks_left()).sum();
            self.root.tree_state(self.clock(), finished, left);
            self.apply().await;
            if self.root.phase() != Phase::Run {
                return;
            }
            if rx.is_empty() {
                self.out.commit();
            }
            let Some(ev) = self.next(rx).await else {
                self.handle_timeout().await;
                continue;
            };
            self.tick();
            match ev {
                Fe::Tree(g, TreeEv::Join { host, listen, conn }) => {
                    let Some(gr) = self.groups.get_mut(g) else { continue };
                    let Group { rendezvous, children, core, fx, .. } = gr;
                    let connected =
                        |node| core.child_index(node).is_some_and(|i| children.taken(i));
                    for join in rendezvous.join(host, listen, conn, connected) {
                        match join {
                            Join::Adopt { node, host, conn } => {
                                if let Some(idx) = core.child_index(node) {
                                    children.adopt(idx, host, conn, core, fx).await;
                                }
                            }
                            Join::Redirect { conn, node, parent } => {
                                redirect(conn, node, parent).await
                            }
                            Join::Drop(why) => warn!("{why}"),
                        }
                    }
                }
                Fe::Tree(g, TreeEv::Msg(idx, Msg::Output { rank, stream, data })) => {
                    // Flow-controlled output of a child: the root core decides whether it
                    // is written or dropped.
                    let streams = self.streams();
                    self.root.rank_output(g, idx, rank, stream, data, &streams)
                }
                Fe::Tree(g, t) => {
                    let Some(gr) = self.groups.get_mut(g) else { continue };
                    if let (TreeEv::LauncherExited { idx: STEP, .. }, Some((_, done))) =
                        (&t, gr.step.as_mut())
                    {
                        *done = true;
                    }
                    gr.children.on_event(t, &mut gr.core, &mut gr.fx).await
                }
                Fe::Writer(ev) => self.writer_event(ev),
                Fe::Stdin(data) => {
                    let g = &mut self.groups[0];
                    g.core.stdin(Msg::Stdin { data }, &mut g.fx)
                }
                Fe::Signal(sig) => self.root.signal(self.clock(), sig),
                Fe::LifeLineLost => self.root.life_line_lost(self.clock()),
                Fe::Control(r) => self.control(r),
                Fe::Name(g, req, answer) => self.root.name_server_answered(g, req, answer),
            }
        }
    }

    /// The links are closed: wait for every launcher we started to exit — the NLAs
    /// themselves under the fork launcher, ssh/rsh, and under Slurm srun, which must see its
    /// step end (killing it early would leave the step behind in Slurm) — until the root
    /// core stops waiting.
    async fn close_phase(&mut self, rx: &mut UnboundedReceiver<Fe>) {
        while self.root.phase() == Phase::Close {
            let running = self
                .groups
                .iter()
                .any(|g| g.children.launchers_running() || matches!(g.step, Some((_, false))));
            if !running {
                self.root.launchers_done(self.clock());
                break;
            }
            let ev = self.next(rx).await;
            self.tick();
            match ev {
                None => self.handle_timeout().await,
                Some(Fe::Tree(g, TreeEv::LauncherExited { idx, .. })) => {
                    let Some(gr) = self.groups.get_mut(g) else { continue };
                    if idx == STEP {
                        if let Some((_, done)) = gr.step.as_mut() {
                            *done = true;
                        }
                    } else {
                        gr.children.launcher_exited(idx);
                    }
                }
                Some(Fe::Signal(sig)) => self.root.signal(self.clock(), sig),
                // A write of ours that failed meanwhile still counts.
                Some(Fe::Writer(ev)) => self.writer_event(ev),
                Some(_) => {}
            }
        }
    }

    /// Wait until our writers have written everything queued (rank output and our own
    /// lines), or the root core stops waiting.
    async fn flush_phase(&mut self, rx: &mut UnboundedReceiver<Fe>) {
        loop {
            self.apply_root().await;
            if self.root.phase() != Phase::Flush {
                return;
            }
            match self.next(rx).await {
                None => self.handle_timeout().await,
                Some(Fe::Writer(ev)) => self.writer_event(ev),
                Some(Fe::Signal(sig)) => self.root.signal(self.clock(), sig),
                Some(_) => {}
            }
        }
    }

    /// Writing our stdout or stderr failed: the root core decides what that means
    /// ([`RootCore::our_output_failed`]).
    fn our_output_failed(&mut self, stream: Stream, e: std::io::Error) {
        debug!(?stream, "cannot write our output: {e}");
        let now = self.clock();
        self.root.our_output_failed(now, stream, e.raw_os_error(), &e.to_string());
    }

    fn writer_event(&mut self, ev: WriterEvent) {
        match ev {
            WriterEvent::Written(acks) => {
                for Ack { g, idx, bytes } in acks {
                    self.root.output_written(g, idx, bytes)
                }
            }
            WriterEvent::Broken(stream, e) => self.our_output_failed(stream, e),
            WriterEvent::Finished => self.root.output_finished(),
            WriterEvent::FileFailed(message) => self.root.output_file_failed(self.clock(), message),
        }
    }

    /// Start a process group's NLA tree: listen for its NLAs, start them with the job's
    /// launcher (one srun step under Slurm; nothing for a group the job's NLAs start). Its
    /// first effects are in its `fx`. Returns the group and the address its NLAs join.
    async fn start_group(&self, setup: NodeSetup) -> Result<(Group, String), String> {
        let g = self.groups.len();
        let tree_ev: EvSink = {
            let tx = self.tx.clone();
            Arc::new(move |e| tx.send(Fe::Tree(g, e)).is_ok())
        };
        let report = setup.job.report;
        let mut core = NodeCore::new(setup, true, report);
        core.set_now(self.clock());
        let mut children = Children::new(&core);
        children.set_now(self.clock());
        let rendezvous = root::Rendezvous::new(core.plan());
        let (job, root) = (core.job(), core.plan());
        let mut fx = Vec::new();
        let hosts: Vec<&str> = root.children.iter().map(|c| c.host.as_str()).collect();
        // The group's own launcher (a spawn may reach hosts the job's fork did not, see
        // `spawn`); a group the job's NLAs start listens as the job's first group does.
        let kind = match job.launcher.kind {
            LauncherKind::Joined => self.plan.job.launcher.kind,
            k => k,
        };
        let (listener, addr) = listen(kind, self.advertise, &hosts)
            .await
            .map_err(|e| format!("cannot listen for NLA connections: {e}"))?;
        let ids = root.children.iter().map(|c| c.node).collect();
        accept_loop(listener, self.secret.clone(), ids, tree_ev.clone());
        let mut step = None;
        if job.launcher.kind == LauncherKind::Slurm {
            // One srun step starts every NLA; they join here (see `Rendezvous`).
            let hosts = all_hosts(root);
            let (prog, args) =
                libi::launch::srun_command(&job.launcher, &hosts, &addr, job.verbose);
            let pid =
                spawn_launcher(&prog, &args, STEP, &self.secret, Spawn::Launcher, tree_ev.clone())
                    .await
                    .map_err(|e| e.to_string())?;
            step = Some((pid, false));
        }
        children.launch_all(&mut core, &addr, &self.secret, &tree_ev, &mut fx).await;
        Ok((Group { core, children, rendezvous, step, fx }, addr))
    }

    /// Apply every effect of the root core and of every group's root node until none are
    /// left (applying one may give another work: a spawn answer, a teardown). The root
    /// core's effects of a node effect are applied right after it, in order.
    async fn apply(&mut self) {
        loop {
            self.apply_root().await;
            let Some(g) = self.groups.iter().position(|g| !g.fx.is_empty()) else { return };
            let batch = std::mem::take(&mut self.groups[g].fx);
            for e in batch {
                self.node_effect(g, e);
                self.apply_root().await;
            }
        }
    }

    /// Apply an effect of group `g`'s root node. A child whose queue it fills is the
    /// group's core's to decide about (nothing waits for it).
    fn node_effect(&mut self, g: usize, e: Effect) {
        let now = self.clock();
        let Some(group) = self.groups.get_mut(g) else { return };
        let mut io = RootIo { root: &mut self.root, children: &mut group.children, g, now };
        libi_node::proto::effect::apply_one(&mut io, e);
        group.children.report(&mut group.core, &mut group.fx);
    }

    /// Apply the root core's effects until it has none left.
    async fn apply_root(&mut self) {
        loop {
            let fx = self.root.take_effects();
            if fx.is_empty() {
                return;
            }
            for e in fx {
                self.root_effect(e).await;
            }
        }
    }

    async fn root_effect(&mut self, e: root::Effect) {
        use root::Effect as R;
        match e {
            R::Print(m) => self.out.line(&m),
            R::Warn(m) => self.out.line(&format!("warning: {m}")),
            R::Debug(m) => debug!("{m}"),
            R::Terminal(text) => eprint!("{text}"),
            R::Stdout(text) => {
                use std::io::Write;
                // A reader that is gone (EPIPE) has had everything it will get.
                let _ = std::io::stdout().lock().write_all(text.as_bytes());
            }
            R::KillGroup(g) => {
                if let Some(gr) = self.groups.get_mut(g) {
                    gr.core.kill(&mut gr.fx)
                }
            }
            R::ToGroup(g, msg) => {
                if let Some(gr) = self.groups.get_mut(g) {
                    gr.core.parent_msg(msg, &mut gr.fx)
                }
            }
            R::GroupEffect(g, e) => {
                if let Some(gr) = self.groups.get_mut(g) {
                    gr.fx.push(e)
                }
            }
            R::Output { g, rank, stream, data, from } => {
                let bytes = data.len() as u64;
                let ack = from.map(|idx| Ack { g, idx, bytes });
                match self.out.rank_output(g, rank, stream, data, ack) {
                    Wrote::Now => {
                        if let Some(idx) = from {
                            self.root.output_written(g, idx, bytes)
                        }
                    }
                    Wrote::Queued => {}
                    Wrote::Broken(e) => {
                        self.our_output_failed(stream, e);
                        if let Some(idx) = from {
                            self.root.output_written(g, idx, bytes)
                        }
                    }
                }
            }
            R::Ack { g, idx, bytes } => {
                if let Some(gr) = self.groups.get_mut(g) {
                    gr.children.send(idx, Msg::OutputAck { bytes });
                    gr.children.report(&mut gr.core, &mut gr.fx);
                }
            }
            R::StdinCredit(bytes) => self.stdin_credit.add(bytes),
            R::Spawn { g, req, request, who } => self.spawn(g, req, *request, who).await,
            R::AskNameServer { g, req, op } => {
                // The root core asks only when we have a name server.
                if let Some(addr) = self.nameserver.clone() {
                    let tx = self.tx.clone();
                    tokio::spawn(async move {
                        let answer = crate::nameserver::ask(&addr, &op).await;
                        let _ = tx.send(Fe::Name(g, req, answer));
                    });
                }
            }
            R::CloseTree => {
                for g in &mut self.groups {
                    g.children.close_all().await;
                }
            }
            R::StopLaunchers => {
                for g in &self.groups {
                    if let Some((Some(pid), false)) = g.step {
                        // SAFETY: kill(2) takes no pointer and touches none of our memory.
                        // -pid is srun's process group: `spawn_launcher` starts it in a
                        // session of its own, and `false` says it is not reaped yet, so the
                        // group is still its.
                        unsafe {
                            libc::kill(-(pid as i32), libc::SIGTERM);
                        }
                    }
                }
            }
            R::WriteReport => {
                self.write_report();
                libi_node::io::guard::flush_rejections();
            }
            R::CloseOutput => self.out.close(),
            R::ProcTable { req, nodes, at_launch } => {
                let exes: Vec<String> = self.plan.job.apps.iter().map(|a| a.exe.clone()).collect();
                let size = self.plan.job.size;
                if at_launch {
                    crate::mpir::spawned(&nodes, size, &exes);
                }
                let (answer, keep): (Vec<_>, Vec<_>) =
                    std::mem::take(&mut self.proc_waiters).into_iter().partition(|w| w.0 == req);
                self.proc_waiters = keep;
                if !answer.is_empty() {
                    let text = crate::control::proc_table_text(&nodes, size, &exes);
                    for (_, tx) in answer {
                        let _ = tx.send(text.clone());
                    }
                }
            }
        }
    }

    /// A tool's request on the control socket.
    fn control(&mut self, r: crate::control::Request) {
        let answer = match r.what.as_str() {
            "proctable" if self.proc_waiters.len() >= crate::control::PENDING_MAX => {
                "error: too many requests waiting; try again\n".to_string()
            }
            "proctable" => {
                let req = self.root.request_proc_table();
                self.proc_waiters.push((req, r.answer));
                return;
            }
            "launcher" => crate::control::launcher_text(&self.plan.job.launcher),
            other => format!(
                "error: unknown request '{}' (known: proctable, launcher)\n",
                other.escape_debug()
            ),
        };
        let _ = r.answer.send(answer);
    }

    /// `-report`: the launch report (the front end's own node report first).
    fn write_report(&mut self) {
        let (Some(path), Some(g0)) = (self.report.clone(), self.groups.first()) else { return };
        let mut me = g0.core.report(libi::clock::wall);
        me.ready = self.t0;
        me.peak_rss_kib = libi::report::peak_rss_kib();
        (me.cpu_user, me.cpu_sys) = libi_node::sys::report_cpu::own_cpu();
        me.launches = g0.children.launches.clone();
        let mut reports: Vec<NodeReport> = vec![me];
        reports.append(&mut self.root.take_reports());
        let mut report = Report {
            nodes: self.plan.nodes as u32,
            ranks: self.plan.job.size,
            tree: self.plan.shape.to_string(),
            launcher: format!("{:?}", self.plan.job.launcher.kind).to_lowercase(),
            seq: self.plan.model.seq,
            rem: self.plan.model.rem,
            launch_time: self.root.launch_time().unwrap_or(f64::NAN),
            total_time: now() - self.t0,
            reports,
        };
        report.rebase(self.t0);
        let text = serde_json::to_string_pretty(&report).unwrap_or_default();
        if let Err(e) = std::fs::write(&path, text + "\n") {
            self.out.line(&format!("cannot write report {path}: {e}"));
        }
    }

    /// A rank of group `g` asked to spawn (the root core decided it may): plan the new
    /// group and start it; the root core answers it when its ranks run, or now with an
    /// error.
    async fn spawn(&mut self, g: usize, req: u64, mut spawn: SpawnRequest, who: String) {
        // The info key `hostfile` (as Hydra reads it, at the front end): the file's hosts
        // as a `hosts` list, unless `host` or `hosts` says where. Read off the event loop.
        for c in &mut spawn.cmds {
            let Some(path) = root::spawn_hostfile(&c.info).map(str::to_string) else { continue };
            let read = tokio::task::spawn_blocking(move || libi::hosts::read_hostfile(&path));
            match read.await.map_err(|e| e.to_string()).and_then(|r| r.map_err(|e| e.to_string())) {
                Ok(list) => c.info.push(("hosts".into(), root::hosts_info(&list))),
                Err(e) => {
                    let m = format!("info key hostfile: {e}");
                    return self.root.spawn_refused(g, req, &who, &m);
                }
            }
        }
        let running: u64 = (self.groups.iter().enumerate())
            .filter(|(i, _)| !self.root.abandoned(*i))
            .map(|(_, g)| g.core.ranks_left() as u64)
            .sum();
        let number = self.groups.len();
        let Some(parent) = self.groups.get(g).map(|gr| gr.core.job()) else { return };
        let planned = self.spawner.plan(&self.spawn_base, parent, &spawn, running, number);
        let group = match planned {
            Ok(group) => group,
            Err(e) => return self.root.spawn_refused(g, req, &who, &e.to_string()),
        };
        debug!(kvsname = %group.job.kvsname, size = group.job.size, "spawn");
        let hosts = all_hosts(&group.root);
        let agents = self.root.spawn_agents(&hosts);
        let mut job = group.job;
        match root::spawn_launcher(job.launcher.kind, self.remote_launcher, agents.is_some()) {
            SpawnLauncher::Joined => job.launcher.kind = LauncherKind::Joined,
            SpawnLauncher::Remote(remote) => {
                // (The host check resolves names: off the event loop.)
                let local = tokio::task::spawn_blocking(move || {
                    hosts.iter().all(|h| libi_node::io::tree::is_local_host(h))
                });
                if !local.await.unwrap_or(false) {
                    job.launcher.kind = remote;
                }
            }
            SpawnLauncher::Job => {}
        }
        let setup = NodeSetup { job, plan: group.root };
        self.out.place(self.groups.len(), &setup.plan);
        match self.start_group(setup).await {
            Ok((new, addr)) => {
                let nodes = new.core.plan().subtree_nodes() - 1;
                let kvsname = new.core.job().kvsname.clone();
                let peer = pmix_peer(new.core.job());
                self.groups.push(new);
                let now = self.clock();
                let gi = self.root.spawn_started(now, g, req, who, nodes, kvsname, agents, &addr);
                if let Some(p) = peer {
                    self.root.set_pmix(gi, p);
                }
            }
            Err(m) => self.root.spawn_refused(g, req, &who, &m),
        }
    }
}

/// Every NLA host in node order (node ids 1..).
fn all_hosts(root: &NodePlan) -> Vec<String> {
    let mut all: Vec<&NodePlan> = root.nodes().into_iter().filter(|p| p.node != 0).collect();
    all.sort_by_key(|p| p.node);
    all.into_iter().map(|p| p.host.clone()).collect()
}

async fn redirect(mut conn: Box<PendingConn>, node: u32, parent: String) {
    // A joining NLA that misses its redirect fails its launch (deadline, or its own error).
    if let Err(e) = conn.wr.send(Msg::Redirect { node, parent }).await {
        warn!("cannot redirect NLA {node} to its parent: {e}");
    }
    if let Err(e) = conn.wr.close().await {
        debug!("closing NLA {node}'s join connection: {e}");
    }
}

/// `--end-on-stdin-eof` ([`StdinSource::LifeLine`]): tell the loop when our stdin ends
/// ([`RootCore::life_line_lost`] decides what that means). Whatever is written to it is read
/// and dropped. (A thread: our stdin may be a terminal, not to be made non-blocking under its
/// shell.)
fn spawn_life_line(tx: UnboundedSender<Fe>) {
    libi_node::io::agent::stdin_eof_thread("life-line", move || {
        let _ = tx.send(Fe::LifeLineLost);
    });
}

/// Pass the signals the front end watches
/// ([`front_end_signals`](libi_node::proto::signals::front_end_signals): which, decided with
/// what is ignored in this process) to the event loop as they come; the root core decides
/// what each means.
fn spawn_signal_watch(tx: UnboundedSender<Fe>) {
    use tokio::signal::unix::{signal, SignalKind};
    for num in libi_node::proto::signals::front_end_signals(ignored) {
        let Ok(mut s) = signal(SignalKind::from_raw(num)) else { continue };
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

/// Is `sig` ignored (`SIG_IGN`) in this process?
fn ignored(sig: i32) -> bool {
    // SAFETY: sigaction with no new action only reads the current one into `old`.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

fn new_secret() -> String {
    use rand::RngCore;
    let mut b = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// What other groups' PMIx servers register of a PMIx group after a connect.
fn pmix_peer(job: &libi::job::JobCommon) -> Option<libi::job::PmixPeer> {
    job.pmix.as_ref().map(|map| libi::job::PmixPeer {
        nspace: job.kvsname.clone(),
        size: job.size,
        apps: job.apps.iter().map(|a| a.nprocs).collect(),
        map: map.clone(),
    })
}

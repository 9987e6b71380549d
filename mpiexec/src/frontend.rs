//! The front end's run loop. The front end is the root of the NLA tree: it runs the same node
//! state machine as every NLA ([`NodeCore`], with no local ranks and no parent), launches its
//! children with the job's launcher, and turns what reaches the root into the job's visible
//! behaviour: output on our stdout/stderr, one line naming what failed, the exit status.

use crate::plan::Plan;
use crate::spawn::Spawner;
use crate::stdio::{spawn_stdin_reader, Ack, Output, StdinCredit, WriterEvent, Wrote};
use futures::SinkExt;
use libi::job::{LauncherKind, NodePlan};
use libi::job::{NodeSetup, RankEnd, SpawnRequest};
use libi::msg::{Msg, NameOp, Stream};
use libi::report::{now, NodeReport, Report};
use libi_node::core::{Effect, NodeCore};
use libi_node::tree::{
    accept_loop, listen, spawn_launcher, Children, EvSink, PendingConn, TreeEv, STEP,
};
use std::collections::HashMap;
use std::io::IsTerminal;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};
use tracing::{debug, warn};

/// Exit status when the job hit `MPIEXEC_TIMEOUT` (as `timeout(1)`).
pub const STATUS_TIMEOUT: i32 = 124;
/// Exit status when the launcher or an NLA failed (the job could not run to completion).
pub const STATUS_LAUNCH: i32 = 255;
/// Exit status when our stdout or stderr was closed by its reader (128 + SIGPIPE).
pub const STATUS_BROKEN_OUTPUT: i32 = 128 + libc::SIGPIPE;
/// Our stdout/stderr counts as not being read when it wrote nothing for this long.
const STALLED_OUTPUT: Duration = Duration::from_millis(500);
/// Longest abort message of a rank printed (escaped).
pub const ABORT_MESSAGE_MAX: usize = 1024;

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
}

enum Fe {
    /// An event of process group `g`'s NLA tree.
    Tree(usize, TreeEv),
    Stdin(Vec<u8>),
    /// From the writers of our stdout/stderr.
    Writer(WriterEvent),
    Signal(i32),
    Timeout,
    GraceOver,
    /// While the job is torn down: is our output still being read?
    StalledCheck,
    Tick,
}

/// One process group: the job itself (group 0) or the ranks of one `MPI_Comm_spawn`. Each
/// has its own NLA tree rooted here (as Hydra starts new proxies for a spawn): its own root
/// node state, children, listener and (under Slurm) srun step.
struct Group {
    core: NodeCore,
    children: Children,
    rendezvous: Rendezvous,
    /// The srun step under Slurm: its pid and whether it exited.
    step: Option<(Option<u32>, bool)>,
    fx: Vec<Effect>,
    nodes: usize,
    nodes_up: usize,
    ranks_up: usize,
    /// A spawn not answered yet: (group of the spawner, request id, who asked). Answered
    /// with rc 0 once every NLA of this group started its ranks.
    spawn: Option<(usize, u64, String)>,
    /// A spawn that failed: this group is torn down on its own and its ranks' ends do not
    /// fail the job.
    abandoned: bool,
    /// When the group was planned (for the spawn's latency in the verbose log).
    started: Instant,
}

/// Everything the front end tracks while the job runs.
struct FrontEnd {
    plan: Plan,
    groups: Vec<Group>,
    spawner: Spawner,
    /// The job-wide name table (`publish_name` …): service → port.
    names: HashMap<String, String>,
    /// The job's NLAs (group 0): node of each host, node of each rank, and ranks still
    /// running per node (an NLA with running ranks can start a spawned group's NLA).
    node_of_host: HashMap<String, u32>,
    node_of_rank: HashMap<u32, u32>,
    live: HashMap<u32, usize>,
    status: Option<i32>,
    /// When the job failed because ranks failed: the first one's wait status, all their wait
    /// statuses OR'ed (Hydra's rule, see [`libi::job::combined_status`]), how many they are.
    rank_word: Option<(i32, i32, usize)>,
    /// The wait status of each rank of the job (group 0), for `-print-all-exitcodes`.
    exit_words: HashMap<u32, i32>,
    killing: bool,
    out: Output,
    /// Bytes of rank output dropped because our stdout/stderr was not being read while the
    /// job was being torn down.
    dropped: u64,
    /// Rank output queued for our writers and not acknowledged yet, per (group, child).
    owed: HashMap<(usize, usize), u64>,
    /// Of that, written and not acknowledged yet (acknowledgements are sent in batches).
    written: HashMap<(usize, usize), u64>,
    stdin_credit: Arc<StdinCredit>,
    all_up_at: Option<f64>,
    reports: Vec<NodeReport>,
    secret: String,
    advertise: Option<IpAddr>,
    tx: UnboundedSender<Fe>,
    grace: Duration,
    /// `-disable-auto-cleanup`.
    no_cleanup: bool,
}

/// Run the job; returns the exit status for `libi-mpiexec`.
pub async fn run(plan: Plan, opts: Options) -> i32 {
    // Descriptors for the child connections and launchers, before any other thread exists.
    libi_node::reserve_fd_table(8 * plan.nodes + 64);
    let t0 = now();
    let started = Instant::now();
    let (tx, mut rx) = unbounded_channel::<Fe>();
    let (mut node_of_host, mut node_of_rank, mut live) =
        (HashMap::new(), HashMap::new(), HashMap::new());
    for p in plan.root.nodes().into_iter().filter(|p| p.node != 0) {
        node_of_host.insert(p.host.clone(), p.node);
        live.insert(p.node, p.ranks.len());
        node_of_rank.extend(p.ranks.iter().map(|s| (s.rank, p.node)));
    }
    let mut fe = FrontEnd {
        node_of_host,
        node_of_rank,
        live,
        spawner: Spawner::new(&plan),
        plan,
        groups: Vec::new(),
        names: HashMap::new(),
        status: None,
        rank_word: None,
        exit_words: HashMap::new(),
        killing: false,
        out: {
            let tx = tx.clone();
            Output::new(opts.label, move |e| {
                let _ = tx.send(Fe::Writer(e));
            })
        },
        dropped: 0,
        owed: HashMap::new(),
        written: HashMap::new(),
        stdin_credit: StdinCredit::new(),
        all_up_at: None,
        reports: Vec::new(),
        secret: new_secret(),
        advertise: opts.advertise,
        tx: tx.clone(),
        grace: opts.grace,
        no_cleanup: opts.no_cleanup,
    };
    // Our own diagnostics queue behind the ranks' output on the stderr writer.
    libi_node::set_stderr_sink(fe.out.stderr_sink());
    let setup = NodeSetup { job: fe.plan.job.clone(), plan: fe.plan.root.clone() };
    fe.out.place(0, &setup.plan);
    match fe.start_group(setup).await {
        Ok((g, _)) => fe.groups.push(g),
        Err(e) => {
            fe.out.line(&e);
            fe.finish_output(&mut rx).await;
            return STATUS_LAUNCH;
        }
    }

    if fe.plan.job.singleton.is_none() {
        // (A singleton keeps its own stdin; ours is not the user's.)
        let tx = tx.clone();
        spawn_stdin_reader(fe.stdin_credit.clone(), move |d| tx.send(Fe::Stdin(d)).is_ok());
    }
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

    let total_ranks = fe.plan.job.size as usize;
    let mut last_sigint: Option<Instant> = None;
    let mut progress_shown = false;
    loop {
        fe.drain().await;
        if fe.groups.iter().all(|g| g.core.finished()) {
            break;
        }
        if rx.is_empty() {
            fe.out.commit();
        }
        // The root cores' timers (a failure's grace, the wait for the NLAs to close once
        // every rank ended) and the launch deadlines: wait for the next event or the
        // earliest deadline.
        let due = fe
            .groups
            .iter()
            .flat_map(|g| [g.core.poll_timeout(), g.children.poll_timeout()])
            .flatten()
            .reduce(f64::min);
        let ev = match due {
            Some(at) => {
                let wait = Duration::from_secs_f64((at - now()).max(0.0));
                match tokio::time::timeout(wait, rx.recv()).await {
                    Ok(ev) => ev,
                    Err(_) => {
                        let t = now();
                        for g in &mut fe.groups {
                            g.core.handle_timeout(t, &mut g.fx);
                            g.children.handle_timeout(t, &mut g.core, &mut g.fx).await;
                        }
                        continue;
                    }
                }
            }
            None => rx.recv().await,
        };
        let Some(ev) = ev else { break };
        match ev {
            Fe::Tree(g, TreeEv::Join { host, listen, conn }) => {
                let Some(gr) = fe.groups.get_mut(g) else { continue };
                let Group { rendezvous, children, core, fx, .. } = gr;
                rendezvous.join(host, listen, conn, children, core, fx).await
            }
            Fe::Tree(g, TreeEv::Msg(idx, Msg::Output { rank, stream, data })) => {
                fe.rank_output(g, idx, rank, stream, data).await
            }
            Fe::Tree(g, t) => {
                let Some(gr) = fe.groups.get_mut(g) else { continue };
                if let (TreeEv::LauncherExited { idx: STEP, .. }, Some((_, done))) =
                    (&t, gr.step.as_mut())
                {
                    *done = true;
                }
                gr.children.on_event(t, &mut gr.core, &mut gr.fx).await
            }
            Fe::Writer(WriterEvent::Written(acks)) => {
                for Ack { g, idx, bytes } in acks {
                    fe.acknowledge(g, idx, bytes).await
                }
            }
            Fe::StalledCheck => fe.drop_stalled_output().await,
            Fe::Writer(WriterEvent::Broken(stream, e)) => fe.stream_broken(stream, &e),
            Fe::Writer(WriterEvent::Finished) => {}
            Fe::Stdin(data) => {
                let g = &mut fe.groups[0];
                g.core.stdin(Msg::Stdin { data }, &mut g.fx)
            }
            Fe::Signal(sig) => {
                let now_i = Instant::now();
                let second = sig == libc::SIGINT
                    && last_sigint
                        .is_some_and(|t| now_i.duration_since(t) < Duration::from_secs(2));
                if sig == libc::SIGINT {
                    last_sigint = Some(now_i);
                }
                if second {
                    fe.fail(130, "second SIGINT: killing the job");
                } else if sig == libc::SIGTERM {
                    // Forwarded as part of the teardown; the job ends whatever the ranks do.
                    fe.fail(128 + libc::SIGTERM, "received SIGTERM: terminating the job");
                } else {
                    for g in &mut fe.groups {
                        g.fx.push(Effect::ToChildren(Msg::Signal { signal: sig }));
                    }
                }
            }
            Fe::Timeout => {
                let secs = opts.timeout.map(|t| t.as_secs()).unwrap_or(0);
                let m = format!("job timed out after {secs} s (MPIEXEC_TIMEOUT); killing it");
                fe.fail(STATUS_TIMEOUT, &m);
            }
            Fe::GraceOver => {
                warn!("the NLAs did not finish tearing the job down in time");
                break;
            }
            Fe::Tick => {
                let g0 = &fe.groups[0];
                let (up, ranks) = (g0.nodes_up, g0.ranks_up);
                let starting = up < fe.plan.nodes;
                let line = format!(
                    "\rlibi-mpiexec: started {ranks}/{total_ranks} ranks on {up}/{} nodes ",
                    fe.plan.nodes
                );
                if starting && started.elapsed() > Duration::from_secs(1) {
                    eprint!("{line}");
                    progress_shown = true;
                } else if progress_shown {
                    eprintln!("{line}");
                    progress_shown = false;
                }
            }
        }
    }
    if progress_shown {
        // The job ended before the next tick: end the progress line where it got to.
        let g0 = &fe.groups[0];
        eprintln!(
            "\rlibi-mpiexec: started {}/{total_ranks} ranks on {}/{} nodes ",
            g0.ranks_up, g0.nodes_up, fe.plan.nodes
        );
    }
    for g in &mut fe.groups {
        g.children.close_all().await;
    }
    // Nothing of the job outlives us: wait for every launcher we started to exit — the NLAs
    // themselves under the fork launcher, ssh/rsh, and under Slurm srun, which must see its
    // step end (killing it early would leave the step behind in Slurm). Bounded; then
    // SIGTERM to srun (the others die with us: parent-death signal).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let running = |fe: &FrontEnd| {
        fe.groups
            .iter()
            .any(|g| g.children.launchers_running() || matches!(g.step, Some((_, false))))
    };
    while running(&fe) {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(Fe::Tree(g, TreeEv::LauncherExited { idx, .. }))) => {
                let Some(gr) = fe.groups.get_mut(g) else { continue };
                if idx == STEP {
                    if let Some((_, done)) = gr.step.as_mut() {
                        *done = true;
                    }
                } else {
                    gr.children.launcher_exited(idx);
                }
            }
            Ok(Some(_)) => {}
            _ => break,
        }
    }
    for g in &fe.groups {
        if let Some((Some(pid), false)) = g.step {
            // SAFETY: kill(2) of srun's own process group.
            unsafe {
                libc::kill(-(pid as i32), libc::SIGTERM);
            }
        }
    }
    if let Some(path) = &opts.report {
        let g0 = &fe.groups[0];
        let mut me = g0.core.report();
        me.ready = t0;
        me.peak_rss_kib = libi::report::peak_rss_kib();
        me.launches = g0.children.launches.clone();
        let mut reports = vec![me];
        reports.append(&mut fe.reports);
        let mut report = Report {
            nodes: fe.plan.nodes as u32,
            ranks: total_ranks as u32,
            tree: fe.plan.shape.to_string(),
            launcher: format!("{:?}", fe.plan.job.launcher.kind).to_lowercase(),
            seq: fe.plan.model.seq,
            rem: fe.plan.model.rem,
            launch_time: fe.all_up_at.map(|t| t - t0).unwrap_or(f64::NAN),
            total_time: now() - t0,
            reports,
        };
        report.rebase(t0);
        let text = serde_json::to_string_pretty(&report).unwrap_or_default();
        if let Err(e) = std::fs::write(path, text + "\n") {
            fe.out.line(&format!("cannot write report {path}: {e}"));
        }
    }
    if fe.dropped > 0 {
        let m = format!(
            "{} bytes of the ranks' output were dropped: our output was not being read while \
             the job was torn down",
            fe.dropped
        );
        fe.out.line(&m);
    }
    libi_node::guard::flush_rejections();
    if let Some((first, word, n)) = fe.rank_word {
        let status = libi::job::combined_status(word);
        if status != libi::job::combined_status(first) {
            fe.out.line(&format!(
                "exit status {status}: the statuses of the {n} ranks that failed, combined \
                 (-print-all-exitcodes lists every rank's)"
            ));
        }
    }
    fe.finish_output(&mut rx).await;
    if opts.print_all_exitcodes {
        fe.print_exit_codes();
    }
    fe.status.unwrap_or(0)
}

impl FrontEnd {
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
        let mut children = Children::new(&core);
        let rendezvous = Rendezvous::new(core.plan());
        let (job, root) = (core.job(), core.plan());
        let nodes = root.subtree_nodes() - 1;
        let mut fx = Vec::new();
        let hosts: Vec<&str> = root.children.iter().map(|c| c.host.as_str()).collect();
        let (listener, addr) = listen(self.plan.job.launcher.kind, self.advertise, &hosts)
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
            let pid = spawn_launcher(&prog, &args, STEP, &self.secret, tree_ev.clone())
                .await
                .map_err(|e| e.to_string())?;
            step = Some((pid, false));
        }
        children.launch_all(&mut core, &addr, &self.secret, &tree_ev, &mut fx).await;
        let group = Group {
            core,
            children,
            rendezvous,
            step,
            fx,
            nodes,
            nodes_up: 0,
            ranks_up: 0,
            spawn: None,
            abandoned: false,
            started: Instant::now(),
        };
        Ok((group, addr))
    }

    /// Carry out every group's effects until none are left (handling one may give another
    /// group work: a spawn answer, a teardown).
    async fn drain(&mut self) {
        loop {
            let Some(g) = self.groups.iter().position(|g| !g.fx.is_empty()) else { return };
            let batch = std::mem::take(&mut self.groups[g].fx);
            for e in batch {
                match e {
                    Effect::ToParent(msg) => self.root_msg(g, msg).await,
                    Effect::ToChild(idx, msg) => self.groups[g].children.send(idx, msg).await,
                    Effect::ToChildren(msg) => self.groups[g].children.broadcast(&msg).await,
                    Effect::Warn(w) => warn!("{w}"),
                    Effect::ToRank(..)
                    | Effect::CloseRank(_)
                    | Effect::KillRanks
                    | Effect::SignalRanks(_)
                    | Effect::Stdin(_)
                    | Effect::ToPmgr(..)
                    | Effect::ClosePmgr(_)
                    | Effect::StartNla { .. } => {}
                }
            }
        }
    }

    /// A message that reached the root of group `g`'s tree.
    async fn root_msg(&mut self, g: usize, msg: Msg) {
        match msg {
            Msg::Output { rank, stream, data } => {
                if let Wrote::Broken(e) = self.out.rank_output(g, rank, stream, data, None) {
                    self.stream_broken(stream, &e);
                }
            }
            Msg::StdinAck { bytes } => self.stdin_credit.add(bytes),
            Msg::RankEnded { rank, host, end } => {
                if g == 0 {
                    if let Some(n) = self.node_of_rank.get(&rank).and_then(|n| self.live.get_mut(n))
                    {
                        *n = n.saturating_sub(1);
                    }
                    self.exit_words.insert(rank, end.wait_status());
                }
                if end.is_failure() && self.no_cleanup && !self.killing {
                    // -disable-auto-cleanup: say so, keep the first failure's status, let
                    // the other ranks run on.
                    self.out.line(&describe_end(rank, &host, &end));
                    self.status.get_or_insert(end.status());
                } else if end.is_failure() {
                    let launch = matches!(end, RankEnd::SpawnFailed { .. });
                    let message = match end {
                        RankEnd::Exited { clean_pmi: false, .. }
                            if g == 0 && self.plan.job.singleton.is_some() =>
                        {
                            format!(
                                "the singleton (rank {rank} on {host}) closed its PMI \
                                 connection without finalize"
                            )
                        }
                        _ => describe_end(rank, &host, &end),
                    };
                    // Ranks that end by our teardown's SIGTERM or SIGKILL (or exit with
                    // 128 + those, as shells do) do not count among the failures.
                    let ours = self.killing
                        && matches!(
                            end,
                            RankEnd::Signaled { signal: libc::SIGTERM | libc::SIGKILL }
                                | RankEnd::Exited { code: 143 | 137, .. }
                        );
                    let word = (!ours).then(|| end.status_word());
                    self.group_failed(g, end.status(), message, launch, word);
                }
            }
            Msg::RanksDone { ends } => {
                // Clean ends (and the teardown's kills), counted per node.
                if g == 0 {
                    for (node, clean, killed) in ends {
                        if let Some(n) = self.live.get_mut(&node) {
                            *n = n.saturating_sub((clean + killed) as usize);
                        }
                    }
                }
            }
            Msg::Abort { rank, host, code, message } => {
                // The rank's own words: any bytes, so escaped and capped.
                let m = match message.as_deref() {
                    Some(m) if !m.is_empty() && m != "abort" => {
                        format!(": {}", libi::text::escape(m.as_bytes(), ABORT_MESSAGE_MAX))
                    }
                    _ => String::new(),
                };
                let who = self.rank_name(g, rank);
                let m = format!("{who} on {host} called MPI_Abort with exit code {code}{m}");
                if !self.groups[g].abandoned {
                    self.fail(code, &m);
                }
            }
            Msg::Fatal { message, status, .. } => {
                self.group_failed(g, status, message, false, None)
            }
            Msg::SubtreeLost { message, .. } => {
                self.group_failed(g, STATUS_LAUNCH, message, true, None)
            }
            Msg::SubtreeUp { nodes, ranks } => {
                let gr = &mut self.groups[g];
                gr.nodes_up += nodes as usize;
                gr.ranks_up += ranks as usize;
                if gr.nodes_up == gr.nodes {
                    if g == 0 {
                        self.all_up_at = Some(now());
                    }
                    if let Some((parent, req, _)) = gr.spawn.take() {
                        let jobid = Some(gr.core.job().kvsname.clone());
                        let ms = gr.started.elapsed().as_secs_f64() * 1e3;
                        debug!(group = g, ms, "spawned ranks running; answering the spawn");
                        self.answer_spawn(parent, req, 0, jobid);
                    }
                }
            }
            Msg::Report(r) if g == 0 => self.reports.push(*r),
            Msg::Report(_) => {}
            Msg::Name { req, op } => {
                let (ok, port) = self.name_op(&op);
                let gr = &mut self.groups[g];
                gr.core.parent_msg(Msg::NameResult { req, ok, port }, &mut gr.fx);
            }
            Msg::Spawn { req, spawn } => self.spawn(g, req, *spawn).await,
            other => warn!("unexpected message at the root: {other:?}"),
        }
    }

    /// `rank N` in the job, `rank N of spawn G` in a spawned group.
    fn rank_name(&self, g: usize, rank: u32) -> String {
        if g == 0 {
            format!("rank {rank}")
        } else {
            format!("rank {rank} of spawn {g}")
        }
    }

    /// Something failed in group `g`. A launch failure (a program that cannot be executed,
    /// an NLA that could not be started or was lost) before the spawn was answered fails
    /// the spawn: the spawner gets an error and the job goes on. Anything else — a spawned
    /// rank that ran and failed, even before every NLA of its group reported — fails the
    /// job, as for the job's own ranks. `word`: the wait status of a rank that failed (see
    /// [`FrontEnd::rank_failed`]).
    fn group_failed(
        &mut self,
        g: usize,
        status: i32,
        message: String,
        launch: bool,
        word: Option<i32>,
    ) {
        let gr = &mut self.groups[g];
        if gr.abandoned {
            return;
        }
        let message = match (g, message.strip_prefix("rank ")) {
            (0, _) | (_, None) => message,
            (_, Some(rest)) => match rest.split_once(' ') {
                Some((r, tail)) => format!("rank {r} of spawn {g} {tail}"),
                None => message,
            },
        };
        if let (true, Some((parent, req, who))) = (launch, gr.spawn.clone()) {
            gr.spawn = None;
            gr.abandoned = true;
            gr.core.kill(&mut gr.fx);
            if !self.killing {
                self.refuse_spawn(parent, req, &who, &message);
            }
        } else if let Some(word) = word {
            self.rank_failed(word, &message);
        } else {
            self.fail(status, &message);
        }
    }

    /// A rank failed with wait status `word`. The first failure of the job fails it; while
    /// the job is torn down for a rank failure, every further rank failure is combined into
    /// the status by Hydra's rule (the wait statuses OR'ed: ranks exiting 3 and 5 make 7).
    fn rank_failed(&mut self, word: i32, message: &str) {
        if !self.killing {
            self.rank_word = Some((word, word, 1));
            self.fail(libi::job::combined_status(word), message);
        } else if let Some((_, w, n)) = self.rank_word.as_mut() {
            *w |= word;
            *n += 1;
            self.status = Some(libi::job::combined_status(*w));
        }
    }

    /// `-print-all-exitcodes`, as Hydra prints it on stdout: `[mpiexec@HOST] Exit codes: `,
    /// then one line per host of the job, `[host] S,S,...`: the wait status of each of its
    /// ranks in local order (exit code × 256, or the signal number).
    fn print_exit_codes(&self) {
        use std::io::Write;
        let mut nodes: Vec<&NodePlan> =
            self.plan.root.nodes().into_iter().filter(|p| p.node != 0).collect();
        nodes.sort_by_key(|p| p.node);
        let mut text = format!("[mpiexec@{}] Exit codes: ", self.plan.root.host);
        let mut first = true;
        for p in nodes {
            let codes: Vec<String> = p
                .ranks
                .iter()
                .filter_map(|r| self.exit_words.get(&r.rank))
                .map(i32::to_string)
                .collect();
            if codes.is_empty() {
                continue;
            }
            if !first {
                text.push('\n');
            }
            first = false;
            text.push_str(&format!("[{}] {}", p.host, codes.join(",")));
        }
        text.push('\n');
        // A reader that is gone (EPIPE) has had everything it will get.
        let _ = std::io::stdout().lock().write_all(text.as_bytes());
    }

    /// The job-wide name table: a second publish of a name and unknown names fail.
    fn name_op(&mut self, op: &NameOp) -> (bool, Option<String>) {
        match op {
            NameOp::Publish { service, port } => {
                if self.names.contains_key(service) {
                    (false, None)
                } else {
                    self.names.insert(service.clone(), port.clone());
                    (true, None)
                }
            }
            NameOp::Unpublish { service } => (self.names.remove(service).is_some(), None),
            NameOp::Lookup { service } => {
                let port = self.names.get(service).cloned();
                (port.is_some(), port)
            }
        }
    }

    /// A rank of group `g` asked to spawn: plan the new group and start it; it is answered
    /// when its ranks run (or right now, with an error).
    async fn spawn(&mut self, g: usize, req: u64, spawn: SpawnRequest) {
        if self.killing {
            return;
        }
        let who = format!("{} on {}", self.rank_name(g, spawn.rank), spawn.host);
        let running: u64 =
            self.groups.iter().filter(|g| !g.abandoned).map(|g| g.core.ranks_left() as u64).sum();
        let number = self.groups.len();
        let parent = self.groups[g].core.job();
        let planned = self.spawner.plan(&self.plan, parent, &spawn, running, number);
        let group = match planned {
            Ok(group) => group,
            Err(m) => return self.refuse_spawn(g, req, &who, &m),
        };
        debug!(kvsname = %group.job.kvsname, size = group.job.size, "spawn");
        // Where every host of the group already runs an NLA of the job with ranks (so it
        // stays up), those NLAs start the group's NLAs: no remote launch. Not under Slurm,
        // which ends every process of a step when the step's task (that NLA) exits: there a
        // spawn is a step of its own.
        let hosts = all_hosts(&group.root);
        let agents: Option<Vec<(u32, String)>> = if self.plan.job.launcher.kind.joins() {
            None
        } else {
            hosts
                .into_iter()
                .map(|h| {
                    let node = *self.node_of_host.get(&h)?;
                    (self.live.get(&node).copied().unwrap_or(0) > 0).then_some((node, h))
                })
                .collect()
        };
        let mut job = group.job;
        if agents.is_some() {
            job.launcher.kind = LauncherKind::Joined;
        }
        let setup = NodeSetup { job, plan: group.root };
        self.out.place(self.groups.len(), &setup.plan);
        match self.start_group(setup).await {
            Ok((mut new, addr)) => {
                new.spawn = Some((g, req, who));
                self.groups.push(new);
                if let Some(agents) = agents {
                    debug!("spawn: the job's NLAs start the group's NLAs");
                    let g0 = &mut self.groups[0];
                    for (target, host) in agents {
                        let m = Msg::StartNla { target, host, front_end: addr.clone() };
                        g0.core.parent_msg(m, &mut g0.fx);
                    }
                }
            }
            Err(m) => self.refuse_spawn(g, req, &who, &m),
        }
    }

    /// The spawn `req` of group `g` by `who` failed: say why, answer it with an error.
    fn refuse_spawn(&mut self, g: usize, req: u64, who: &str, why: &str) {
        self.out.line(&format!("spawn by {who} failed: {why}"));
        self.answer_spawn(g, req, -1, None);
    }

    fn answer_spawn(&mut self, g: usize, req: u64, rc: i32, jobid: Option<String>) {
        if let Some(gr) = self.groups.get_mut(g) {
            gr.core.parent_msg(Msg::SpawnResult { req, rc, jobid }, &mut gr.fx);
        }
    }

    /// Output of `rank` of group `g`, from that group's child `idx`: written by our writers
    /// and acknowledged once written. While the job is torn down and our stdout/stderr is
    /// broken or not being read, it is dropped (and acknowledged at once) so that the NLAs
    /// can finish.
    async fn rank_output(
        &mut self,
        g: usize,
        idx: usize,
        rank: u32,
        stream: Stream,
        data: bytes::Bytes,
    ) {
        let bytes = data.len() as u64;
        if self.killing && self.out.stuck(stream, STALLED_OUTPUT) {
            if !self.out.broken(stream) {
                self.dropped += bytes;
            }
            if let Some(gr) = self.groups.get_mut(g) {
                gr.children.send(idx, Msg::OutputAck { bytes }).await;
            }
        } else {
            *self.owed.entry((g, idx)).or_default() += bytes;
            match self.out.rank_output(g, rank, stream, data, Some(Ack { g, idx, bytes })) {
                Wrote::Now => self.acknowledge(g, idx, bytes).await,
                Wrote::Queued => {}
                Wrote::Broken(e) => {
                    self.stream_broken(stream, &e);
                    self.acknowledge(g, idx, bytes).await
                }
            }
        }
    }

    /// Our writers wrote `bytes` of group `g`'s child `idx`'s output: acknowledge what is
    /// still owed of it, in batches of a quarter window (the child always has the rest of
    /// its window to go on with).
    async fn acknowledge(&mut self, g: usize, idx: usize, bytes: u64) {
        let Some(owed) = self.owed.get_mut(&(g, idx)) else { return };
        let written = self.written.entry((g, idx)).or_default();
        *written += bytes;
        if *written < libi::msg::OUTPUT_WINDOW / 4 {
            return;
        }
        let bytes = std::mem::take(written).min(*owed);
        *owed -= bytes;
        if bytes > 0 {
            if let Some(gr) = self.groups.get_mut(g) {
                gr.children.send(idx, Msg::OutputAck { bytes }).await;
            }
        }
    }

    /// While the job is torn down and our output is not being read: acknowledge everything
    /// queued, so that no NLA waits for a reader that is gone (what is queued is still
    /// written if the reader comes back before we exit).
    async fn drop_stalled_output(&mut self) {
        if !(self.out.stuck(Stream::Stdout, STALLED_OUTPUT)
            || self.out.stuck(Stream::Stderr, STALLED_OUTPUT))
        {
            return;
        }
        self.written.clear();
        for ((g, idx), owed) in std::mem::take(&mut self.owed) {
            if owed > 0 {
                if let Some(gr) = self.groups.get_mut(g) {
                    gr.children.send(idx, Msg::OutputAck { bytes: owed }).await;
                }
            }
        }
    }

    /// Writing to our stdout or stderr failed: nobody reads it any more (EPIPE). The job
    /// ends as Hydra's does when its output pipe closes: torn down, status 141 (128 +
    /// SIGPIPE), nothing more said.
    fn stream_broken(&mut self, stream: Stream, e: &std::io::Error) {
        debug!(?stream, "cannot write our output: {e}");
        if !self.killing {
            self.teardown(STATUS_BROKEN_OUTPUT);
        }
    }

    /// Wait until our writers have written everything queued (rank output and our own
    /// lines). A job that failed does not wait for a reader that stopped reading; a signal
    /// or `MPIEXEC_TIMEOUT` while waiting ends the wait.
    async fn finish_output(&mut self, rx: &mut tokio::sync::mpsc::UnboundedReceiver<Fe>) {
        self.out.close();
        let mut open = 2;
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        while open > 0 {
            tokio::select! {
                ev = rx.recv() => match ev {
                    Some(Fe::Writer(WriterEvent::Finished)) => open -= 1,
                    Some(Fe::Signal(sig)) if sig == libc::SIGINT || sig == libc::SIGTERM => {
                        self.status.get_or_insert(128 + sig);
                        return;
                    }
                    Some(Fe::Timeout) => {
                        self.status.get_or_insert(STATUS_TIMEOUT);
                        return;
                    }
                    None => return,
                    Some(_) => {}
                },
                _ = tick.tick() => {
                    let stalled = self.out.stuck(Stream::Stdout, STALLED_OUTPUT)
                        || self.out.stuck(Stream::Stderr, STALLED_OUTPUT);
                    if self.killing && stalled {
                        return;
                    }
                }
            }
        }
    }

    /// The job fails: say why (once), tear every group down, and stop waiting after the
    /// grace period.
    fn fail(&mut self, code: i32, message: &str) {
        if self.killing {
            return;
        }
        self.out.line(message);
        self.teardown(code);
    }

    /// Tear every group down; the job's status is `code`.
    fn teardown(&mut self, code: i32) {
        if self.killing {
            return;
        }
        self.status = Some(code);
        self.killing = true;
        for g in &mut self.groups {
            g.core.kill(&mut g.fx);
        }
        let tx = self.tx.clone();
        let wait = self.grace + Duration::from_secs(5);
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let _ = tx.send(Fe::GraceOver);
        });
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let mut iv = tokio::time::interval(STALLED_OUTPUT / 2);
            while tx.send(Fe::StalledCheck).is_ok() {
                iv.tick().await;
            }
        });
    }
}

/// Every NLA host in node order (node ids 1..).
fn all_hosts(root: &NodePlan) -> Vec<String> {
    let mut all: Vec<&NodePlan> = root.nodes().into_iter().filter(|p| p.node != 0).collect();
    all.sort_by_key(|p| p.node);
    all.into_iter().map(|p| p.host.clone()).collect()
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
        for p in root.nodes() {
            for c in &p.children {
                r.node_of_host.insert(c.host.clone(), c.node);
                r.parent_of.insert(c.node, p.node);
            }
        }
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
        // A host whose NLA already joined or connected: the connection is dropped unread (it
        // carries the job's secret, but it is not that NLA's).
        let connected = core.child_index(node).is_some_and(|idx| children.taken(idx));
        if self.listen.contains_key(&node) || connected {
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
    // A joining NLA that misses its redirect fails its launch (deadline, or its own error).
    if let Err(e) = conn.wr.send(Msg::Redirect { node, parent }).await {
        warn!("cannot redirect NLA {node} to its parent: {e}");
    }
    if let Err(e) = conn.wr.close().await {
        debug!("closing NLA {node}'s join connection: {e}");
    }
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

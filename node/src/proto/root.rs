//! The root core: the front end's job policy as a pure state machine.
//!
//! The front end (`libi-mpiexec`) is the root of every process group's NLA tree. Each group
//! has a root [`NodeCore`](crate::proto::node::NodeCore) of its own (the same node state machine as
//! every NLA, run by the front end); what reaches the top of those trees — a rank that
//! ended, an `MPI_Abort`, a lost NLA, a spawn or name request, output — is handed to this
//! core, which decides what the job does about it: the exit status, what is said (one line
//! each), when and in which order the job is torn down, which spawn is answered how, when
//! the front end stops waiting. The driver (`mpiexec/src/frontend.rs`) only reads sockets,
//! signals and stdin, writes output, starts processes, and applies this core's [`Effect`]s;
//! a simulator drives the same core in virtual time. The choices the driver makes before
//! and around the job's events are pure functions here too: where rank 0's stdin comes from
//! ([`stdin_source`]), the job's launchers ([`job_launcher`]), a spawned group's
//! ([`spawn_launcher`]) and the host file a spawn names ([`spawn_hostfile`]).
//!
//! # Time
//!
//! Time is an argument, never read here: every event that needs it takes `now`, in seconds
//! (`f64`) since an origin the driver chooses (the front end: when it started; a simulator:
//! its virtual clock). [`RootCore::poll_timeout`] says when the core next wants
//! [`RootCore::handle_timeout`] called. Seconds as `f64` rather than `Instant` because a
//! simulator cannot make an `Instant` of its virtual clock, and because the launch reports
//! ([`NodeReport`]) already count time in `f64` seconds. Every timeout is a named constant
//! below, with what happens when it runs out.
//!
//! # Phases
//!
//! [`Phase::Run`] while the job runs (and while it is torn down); [`Phase::Close`] once every
//! tree finished (or the front end stops waiting for them): the child links are closed and
//! the launchers are given [`LAUNCHER_WAIT`] to exit; [`Phase::Flush`] while our writers
//! write what is queued; [`Phase::Done`]: [`RootCore::status`] is the exit status.
//!
//! # Our output
//!
//! Whether our stdout/stderr is being read is known only to the driver's writers; the
//! events that need it take a [`Streams`] snapshot (broken, anything queued, how long since
//! the last write), and the policy about it (what counts as stalled, what is dropped then)
//! is here.

use crate::proto::node::Effect as NodeEffect;
use bytes::Bytes;
use libi::hosts::Host;
use libi::job::{combined_status, LauncherKind, NodePlan, RankEnd, SpawnRequest};
use libi::msg::{Msg, NameOp, ProcNode, Stream, OUTPUT_WINDOW};
use libi::report::NodeReport;
use std::collections::{HashMap, HashSet};

/// Exit status when the job hit `MPIEXEC_TIMEOUT` (as `timeout(1)`).
pub const STATUS_TIMEOUT: i32 = 124;
/// Exit status when the launcher or an NLA failed (the job could not run to completion).
pub const STATUS_LAUNCH: i32 = 255;
/// Exit status when our stdout or stderr was closed by its reader (128 + SIGPIPE).
pub const STATUS_BROKEN_OUTPUT: i32 = 128 + libc::SIGPIPE;
/// Longest abort message of a rank printed (escaped).
pub const ABORT_MESSAGE_MAX: usize = 1024;

/// While the job is torn down, our stdout/stderr counts as not being read when it has
/// output queued and wrote nothing for this long (seconds): rank output is then dropped
/// (and acknowledged at once) so that no NLA waits for a reader that is gone, and the
/// front end stops waiting for its writers at the end.
pub const STALLED_OUTPUT: f64 = 0.5;
/// How often (seconds) a teardown checks whether our output stalled (see
/// [`STALLED_OUTPUT`]); the first check is when the teardown starts.
pub const STALLED_CHECK: f64 = STALLED_OUTPUT / 2.0;
/// Once a teardown started, the front end waits for the trees to finish for the kill grace
/// (ranks get SIGTERM, then SIGKILL after the grace) plus this long (seconds), then gives
/// up on them with a warning and closes every link.
pub const TEARDOWN_SLACK: f64 = 5.0;
/// Once every rank of every group ended, the NLAs get this long (seconds) to close their
/// links (and send their reports) before the front end closes them itself.
pub const CHILDREN_WAIT: f64 = 5.0;
/// Once the links are closed, the launchers the front end started (the NLAs under the fork
/// launcher, ssh/rsh, srun) get this long (seconds) to exit; then srun steps still
/// running get SIGTERM ([`Effect::StopLaunchers`]) and the others die with us.
pub const LAUNCHER_WAIT: f64 = 5.0;
/// A second SIGINT within this long (seconds) of the previous one kills the job (status
/// 130); a first one is forwarded to every rank.
pub const SIGINT_WINDOW: f64 = 2.0;
/// On a terminal, a launch not done after this long (seconds) shows a progress line.
pub const PROGRESS_AFTER: f64 = 1.0;
/// How often (seconds) the progress line is redrawn.
pub const PROGRESS_EVERY: f64 = 0.25;
/// How often (seconds), while waiting for our writers at the end of a job that was torn
/// down, the front end checks whether our output stalled (and so stops waiting).
pub const FLUSH_CHECK: f64 = 0.2;

/// Where the front end is in the job's life (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Run,
    Close,
    Flush,
    Done,
}

/// What the driver does for the root core, in order.
#[derive(Debug)]
pub enum Effect {
    /// One line of ours on stderr (the driver prefixes `libi-mpiexec: `), queued behind the
    /// ranks' output.
    Print(String),
    /// A warning for the log.
    Warn(String),
    /// A debug note for the log (`-v`).
    Debug(String),
    /// Text straight to the terminal (the progress line: `\r…`, a newline when it ends).
    Terminal(String),
    /// Text for our stdout (`-print-all-exitcodes`).
    Stdout(String),
    /// Tear group `g`'s tree down ([`NodeCore::kill`](crate::proto::node::NodeCore::kill)).
    KillGroup(usize),
    /// Give group `g`'s root node this message as from its parent (a spawn or name answer,
    /// a [`Msg::StartNla`]).
    ToGroup(usize, Msg),
    /// Apply this effect to group `g`'s root node (a signal forwarded to its NLAs).
    GroupEffect(usize, NodeEffect),
    /// Write a rank's output. `from`: the child link of group `g` it came from; the driver
    /// reports it written with [`RootCore::output_written`].
    Output { g: usize, rank: u32, stream: Stream, data: Bytes, from: Option<usize> },
    /// Send `OutputAck { bytes }` to group `g`'s child `idx`.
    Ack { g: usize, idx: usize, bytes: u64 },
    /// Rank 0 consumed this much of our stdin: the stdin reader may read as much more.
    StdinCredit(u64),
    /// A rank of group `g` asked to spawn (`who`, for messages): plan and start the new
    /// group, then call [`RootCore::spawn_started`] or [`RootCore::spawn_refused`].
    Spawn { g: usize, req: u64, request: Box<SpawnRequest>, who: String },
    /// The run is over: close every child link of every group, and report when no launcher
    /// runs any more ([`RootCore::launchers_done`]).
    CloseTree,
    /// SIGTERM to the launchers still running (srun steps).
    StopLaunchers,
    /// Write the launch report (`-report`), if asked for.
    WriteReport,
    /// Nothing more will be written: close our writers, report each stream finished
    /// ([`RootCore::output_finished`]).
    CloseOutput,
    /// The job's process table came back for request `req` ([`RootCore::request_proc_table`];
    /// `at_launch`: the one asked for when every rank started, with
    /// [`RootCore::set_proc_table_at_launch`]).
    ProcTable { req: u64, nodes: Vec<ProcNode>, at_launch: bool },
    /// Put a rank's name-service request `req` of group `g` to the outside name server, then
    /// call [`RootCore::name_server_answered`].
    AskNameServer { g: usize, req: u64, op: NameOp },
}

/// What the driver knows of one of our output streams.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StreamState {
    /// Writing failed (EPIPE: nobody reads it any more).
    pub broken: bool,
    /// Something is waiting to be written.
    pub queued: bool,
    /// Seconds since the stream last wrote.
    pub idle: f64,
}

impl StreamState {
    /// Broken, or not being read: output waits and nothing was written for
    /// [`STALLED_OUTPUT`].
    pub fn stuck(&self) -> bool {
        self.broken || (self.queued && self.idle >= STALLED_OUTPUT)
    }

    /// Nothing more will come of it: stuck, or everything given to it written.
    fn settled(&self) -> bool {
        self.stuck() || !self.queued
    }
}

/// Our stdout and stderr.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Streams {
    pub stdout: StreamState,
    pub stderr: StreamState,
}

impl Streams {
    fn get(&self, s: Stream) -> &StreamState {
        match s {
            Stream::Stdout => &self.stdout,
            Stream::Stderr => &self.stderr,
        }
    }

    fn stuck(&self) -> bool {
        self.stdout.stuck() || self.stderr.stuck()
    }

    /// One stream is stuck, and the other is stuck too or has written all it was given: a
    /// stuck stdout does not cost stderr its last lines (why the job failed).
    fn given_up(&self) -> bool {
        self.stuck() && self.stdout.settled() && self.stderr.settled()
    }
}

/// The job-level options the root core decides with.
#[derive(Debug, Clone, Default)]
pub struct RootConfig {
    /// `MPIEXEC_TIMEOUT`, seconds.
    pub timeout: Option<f64>,
    /// How long (seconds) a teardown's ranks get between SIGTERM and SIGKILL.
    pub grace: f64,
    /// `-disable-auto-cleanup`: a failed rank does not end the others.
    pub no_cleanup: bool,
    /// `-print-all-exitcodes`.
    pub print_all_exitcodes: bool,
    /// Our stderr is a terminal (a progress line may be shown).
    pub progress: bool,
    /// The job is a singleton (an MPI process that started `mpiexec` itself).
    pub singleton: bool,
    /// The launcher starts every NLA of a group itself (Slurm: one step per group), so a
    /// spawned group's NLAs are never started by the job's NLAs.
    pub launcher_joins: bool,
    /// The ranks speak PMGR (`--pmgr`): a rank that ends without PMGR's CLOSE is named so,
    /// not as missing a PMI finalize.
    pub pmgr: bool,
    /// `-nameserver`: names are published on an outside name server (the driver asks it,
    /// [`Effect::AskNameServer`]), not in the job's own table.
    pub name_server: bool,
}

/// A PMIx connect the front end counts (see [`Msg::PmixConnect`]).
#[derive(Debug, Default)]
struct PmixConnect {
    procs: Vec<(String, u32)>,
    entered: u64,
    sizes: HashMap<String, u32>,
    /// A group construct whose members asked for a context id.
    ctxid: bool,
    /// A fence's contributions so far, concatenated.
    blob: Vec<u8>,
}

/// Who asked for a spawned group, until it is answered.
#[derive(Debug, Clone)]
struct SpawnOrigin {
    parent: usize,
    req: u64,
    who: String,
}

/// One process group's job-level state (its tree's node state is the driver's `NodeCore`).
#[derive(Debug)]
struct Group {
    kvsname: String,
    nodes: usize,
    nodes_up: usize,
    ranks_up: usize,
    /// A spawn not answered yet: answered with rc 0 once every NLA of this group started
    /// its ranks.
    spawn: Option<SpawnOrigin>,
    /// A spawn that failed: this group is torn down on its own and its ranks' ends do not
    /// fail the job.
    abandoned: bool,
    /// When the group was started (for the spawn's latency in the log).
    started: f64,
    /// A PMIx group: what other groups' servers register of it after a connect.
    pmix: Option<libi::job::PmixPeer>,
}

/// The front end's decisions about the job (see the module doc).
pub struct RootCore {
    cfg: RootConfig,
    /// Ask for the process table when every rank of the job started; the request then.
    proc_table_at_launch: bool,
    launch_proc_req: Option<u64>,
    proc_reqs: u64,
    phase: Phase,
    /// Set by [`RootCore::start_failed`]: the job never ran.
    never_ran: bool,
    started: f64,
    total_ranks: usize,
    total_nodes: usize,
    /// The root's host, and each NLA host of the job (group 0) in node order with its
    /// ranks in local order (for `-print-all-exitcodes`).
    root_host: String,
    hosts: Vec<(String, Vec<u32>)>,
    groups: Vec<Group>,
    /// The job-wide name table (`publish_name` …): service → port.
    names: HashMap<String, String>,
    /// Lookups waiting for a name to be published (`Msg::NameWait`): group, request.
    name_waiters: HashMap<String, Vec<(usize, u64)>>,
    /// PMIx direct modex requests between groups: (asking group's kvsname, request) → the
    /// asking group.
    pmix_routes: HashMap<(String, u64), usize>,
    /// PMIx connects in progress: key → participants, how many entered, the sizes of the
    /// namespaces heard from, the groups heard from.
    pmix_connects: HashMap<String, PmixConnect>,
    /// The last PMIx group context id assigned (they count up from 1).
    pmix_ctxid: u64,
    /// The outside name server could not be asked (said once).
    name_server_failed: bool,
    /// The job's NLAs (group 0): node of each host, node of each rank, and ranks still
    /// running per node (an NLA with running ranks can start a spawned group's NLA).
    node_of_host: HashMap<String, u32>,
    /// Runs of consecutive ranks on one node, (first rank, count, node), sorted: O(nodes)
    /// entries for block placement, never one per rank.
    rank_runs: Vec<(u32, u32, u32)>,
    live: HashMap<u32, usize>,
    status: Option<i32>,
    /// When the job failed because ranks failed: the first one's wait status, all their
    /// wait statuses OR'ed (Hydra's rule, see [`combined_status`]), how many they are.
    rank_word: Option<(i32, i32, usize)>,
    /// The wait status of each rank of the job (group 0), kept for `-print-all-exitcodes`
    /// only.
    exit_words: HashMap<u32, i32>,
    /// The job is being torn down.
    killing: bool,
    /// A SIGTERM reached us and was forwarded to every rank: the job ends when they do,
    /// with status 143, and no rank's end tears the others down meanwhile (they are all
    /// stopping). A second SIGTERM tears the job down.
    terminating: bool,
    /// Bytes of rank output dropped because our output was not being read while the job
    /// was torn down.
    dropped: u64,
    /// Rank output handed to the writers and not acknowledged yet, per (group, child).
    owed: HashMap<(usize, usize), u64>,
    /// Of that, written and not acknowledged yet (acknowledgements go in batches).
    written: HashMap<(usize, usize), u64>,
    all_up_at: Option<f64>,
    reports: Vec<NodeReport>,
    last_sigint: Option<f64>,
    progress_shown: bool,
    /// Writers still open while flushing.
    open_streams: u8,
    // Deadlines (see the constants).
    timeout_at: Option<f64>,
    teardown_over_at: Option<f64>,
    stall_check_at: Option<f64>,
    children_wait_at: Option<f64>,
    /// Every rank ended once (the [`CHILDREN_WAIT`] is armed only once).
    ranks_done: bool,
    progress_at: Option<f64>,
    launchers_at: Option<f64>,
    flush_check_at: Option<f64>,
    /// `MPIEXEC_TIMEOUT` came while the output was being flushed: the job ends once its
    /// line saying so is written (or at this time).
    last_words_until: Option<f64>,
    fx: Vec<Effect>,
}

impl RootCore {
    /// The root core of the job planned as `plan` (the front end's node and its tree),
    /// `total_ranks` ranks, starting at `now`.
    pub fn new(cfg: RootConfig, plan: &NodePlan, total_ranks: usize, now: f64) -> Self {
        let mut nodes: Vec<&NodePlan> = plan.nodes().into_iter().filter(|p| p.node != 0).collect();
        nodes.sort_by_key(|p| p.node);
        let (mut node_of_host, mut rank_runs, mut live) =
            (HashMap::new(), Vec::<(u32, u32, u32)>::new(), HashMap::new());
        for p in &nodes {
            node_of_host.insert(p.host.clone(), p.node);
            live.insert(p.node, p.ranks.len());
            for s in &p.ranks {
                match rank_runs.last_mut() {
                    Some(r) if r.2 == p.node && r.0 + r.1 == s.rank => r.1 += 1,
                    _ => rank_runs.push((s.rank, 1, p.node)),
                }
            }
        }
        rank_runs.sort_unstable();
        let hosts = if cfg.print_all_exitcodes {
            nodes
                .iter()
                .map(|p| (p.host.clone(), p.ranks.iter().map(|s| s.rank).collect()))
                .collect()
        } else {
            Vec::new()
        };
        RootCore {
            proc_table_at_launch: false,
            launch_proc_req: None,
            proc_reqs: 0,
            timeout_at: cfg.timeout.map(|t| now + t),
            progress_at: cfg.progress.then_some(now + PROGRESS_EVERY),
            cfg,
            phase: Phase::Run,
            never_ran: false,
            started: now,
            total_ranks,
            total_nodes: nodes.len(),
            root_host: plan.host.clone(),
            hosts,
            groups: Vec::new(),
            names: HashMap::new(),
            name_waiters: HashMap::new(),
            pmix_routes: HashMap::new(),
            pmix_connects: HashMap::new(),
            pmix_ctxid: 0,
            name_server_failed: false,
            node_of_host,
            rank_runs,
            live,
            status: None,
            rank_word: None,
            exit_words: HashMap::new(),
            killing: false,
            terminating: false,
            dropped: 0,
            owed: HashMap::new(),
            written: HashMap::new(),
            all_up_at: None,
            reports: Vec::new(),
            last_sigint: None,
            progress_shown: false,
            open_streams: 2,
            teardown_over_at: None,
            stall_check_at: None,
            children_wait_at: None,
            ranks_done: false,
            launchers_at: None,
            flush_check_at: None,
            last_words_until: None,
            fx: Vec::new(),
        }
    }

    // ----- what the driver asks -----

    /// The effects to apply, in order (applying one may call back into the core, which
    /// queues more: call until empty).
    pub fn take_effects(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.fx)
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The job's exit status (final once the phase is [`Phase::Done`]).
    pub fn status(&self) -> i32 {
        self.status.unwrap_or(0)
    }

    /// The job is being torn down.
    pub fn killing(&self) -> bool {
        self.killing
    }

    /// Group `g` is a failed spawn, torn down on its own.
    pub fn abandoned(&self, g: usize) -> bool {
        self.groups.get(g).is_some_and(|gr| gr.abandoned)
    }

    /// Seconds from the start until every NLA of the job had its ranks running.
    pub fn launch_time(&self) -> Option<f64> {
        self.all_up_at.map(|t| t - self.started)
    }

    /// The reports of the job's NLAs received so far.
    pub fn take_reports(&mut self) -> Vec<NodeReport> {
        std::mem::take(&mut self.reports)
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due, if ever.
    pub fn poll_timeout(&self) -> Option<f64> {
        let run = [
            self.timeout_at,
            self.teardown_over_at,
            self.stall_check_at,
            self.children_wait_at,
            self.progress_at,
        ];
        let due: &[Option<f64>] = match self.phase {
            Phase::Run => &run,
            Phase::Close => std::slice::from_ref(&self.launchers_at),
            Phase::Flush => &[self.timeout_at, self.flush_check_at],
            Phase::Done => &[],
        };
        due.iter().flatten().copied().reduce(f64::min)
    }

    // ----- events -----

    /// Group 0 (the job itself) could not be started: say why; the job ends with
    /// [`STATUS_LAUNCH`] once our output is written.
    pub fn start_failed(&mut self, message: String) {
        self.fx.push(Effect::Print(message));
        self.status = Some(STATUS_LAUNCH);
        self.never_ran = true;
        self.phase = Phase::Flush;
        self.fx.push(Effect::CloseOutput);
    }

    /// Group 0 (the job) was started: `nodes` NLAs, kvsname `kvsname`.
    pub fn job_started(&mut self, now: f64, nodes: usize, kvsname: String) -> usize {
        self.add_group(now, nodes, kvsname, None)
    }

    fn add_group(
        &mut self,
        now: f64,
        nodes: usize,
        kvsname: String,
        spawn: Option<SpawnOrigin>,
    ) -> usize {
        self.groups.push(Group {
            kvsname,
            nodes,
            nodes_up: 0,
            ranks_up: 0,
            spawn,
            abandoned: false,
            started: now,
            pmix: None,
        });
        self.groups.len() - 1
    }

    /// Group `g` serves PMIx: what its peers' servers register of it after a connect.
    pub fn set_pmix(&mut self, g: usize, peer: libi::job::PmixPeer) {
        if let Some(gr) = self.groups.get_mut(g) {
            gr.pmix = Some(peer);
        }
    }

    /// Where every host of a spawned group already runs an NLA of the job with ranks (so it
    /// stays up), those NLAs start the group's NLAs (no remote launch): their (node, host),
    /// else `None`. Never when the launcher starts every NLA itself (Slurm ends every
    /// process of a step when the step's task — that NLA — exits: there a spawn is a step
    /// of its own).
    pub fn spawn_agents(&self, hosts: &[String]) -> Option<Vec<(u32, String)>> {
        if self.cfg.launcher_joins {
            return None;
        }
        hosts
            .iter()
            .map(|h| {
                let node = *self.node_of_host.get(h)?;
                (self.live.get(&node).copied().unwrap_or(0) > 0).then(|| (node, h.clone()))
            })
            .collect()
    }

    /// The spawn `req` of group `parent` by `who` was planned and its group started:
    /// `nodes` NLAs, kvsname `kvsname`, joining at `addr`; `agents`: the job's NLAs that
    /// start them (see [`spawn_agents`](Self::spawn_agents)). It is answered once its
    /// ranks run. Returns the new group's index.
    #[allow(clippy::too_many_arguments)]
    pub fn spawn_started(
        &mut self,
        now: f64,
        parent: usize,
        req: u64,
        who: String,
        nodes: usize,
        kvsname: String,
        agents: Option<Vec<(u32, String)>>,
        addr: &str,
    ) -> usize {
        let g = self.add_group(now, nodes, kvsname, Some(SpawnOrigin { parent, req, who }));
        if let Some(agents) = agents {
            self.fx.push(Effect::Debug("spawn: the job's NLAs start the group's NLAs".into()));
            for (target, host) in agents {
                let m = Msg::StartNla { target, host, front_end: addr.to_string() };
                self.fx.push(Effect::ToGroup(0, m));
            }
        }
        g
    }

    /// The spawn `req` of group `g` by `who` failed: say why, answer it with an error.
    pub fn spawn_refused(&mut self, g: usize, req: u64, who: &str, why: &str) {
        self.fx.push(Effect::Print(format!("spawn by {who} failed: {why}")));
        self.fx.push(Effect::ToGroup(g, Msg::SpawnResult { req, rc: -1, jobid: None }));
    }

    /// Ask for the process table of the job (group 0) once every rank started: for a
    /// debugger that launched us (MPIR), or for a job small enough to keep it.
    pub fn set_proc_table_at_launch(&mut self, on: bool) {
        self.proc_table_at_launch = on;
    }

    /// Ask every NLA of the job (group 0) for its ranks' pids; answered with
    /// [`Effect::ProcTable`] and this request number.
    pub fn request_proc_table(&mut self) -> u64 {
        self.proc_reqs += 1;
        let req = self.proc_reqs;
        self.fx.push(Effect::ToGroup(0, Msg::ProcTableReq { req }));
        req
    }

    /// A message reached the root of group `g`'s tree.
    pub fn root_msg(&mut self, now: f64, g: usize, msg: Msg) {
        if g >= self.groups.len() {
            self.fx.push(Effect::Warn(format!("message for unknown process group {g}")));
            return;
        }
        match msg {
            Msg::Output { rank, stream, data } => {
                self.fx.push(Effect::Output { g, rank, stream, data, from: None })
            }
            Msg::StdinAck { bytes } => self.fx.push(Effect::StdinCredit(bytes)),
            Msg::ProcTable { req, nodes } if g == 0 => {
                let at_launch = self.launch_proc_req == Some(req);
                self.fx.push(Effect::ProcTable { req, nodes, at_launch })
            }
            Msg::RankEnded { rank, host, end } => self.rank_ended(now, g, rank, &host, end),
            Msg::Abort { rank, host, code, message } => {
                // The rank's own words: any bytes, so escaped and capped.
                let m = match message.as_deref() {
                    Some(m) if !m.is_empty() && m != "abort" => {
                        format!(": {}", libi::text::escape(m.as_bytes(), ABORT_MESSAGE_MAX))
                    }
                    _ => String::new(),
                };
                let who = rank_name(g, rank);
                let m = format!("{who} on {host} called MPI_Abort with exit code {code}{m}");
                if !self.groups[g].abandoned {
                    self.fail(now, code, m);
                }
            }
            Msg::Fatal { message, status, .. } => {
                self.group_failed(now, g, status, message, false, None)
            }
            Msg::SubtreeLost { message, .. } => {
                self.group_failed(now, g, STATUS_LAUNCH, message, true, None)
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
            Msg::SubtreeUp { nodes, ranks } => {
                let gr = &mut self.groups[g];
                gr.nodes_up += nodes as usize;
                gr.ranks_up += ranks as usize;
                if gr.nodes_up == gr.nodes {
                    if g == 0 {
                        self.all_up_at = Some(now);
                    }
                    if let Some(SpawnOrigin { parent, req, .. }) = gr.spawn.take() {
                        let jobid = Some(gr.kvsname.clone());
                        let ms = (now - gr.started) * 1e3;
                        self.fx.push(Effect::Debug(format!(
                            "spawned ranks of group {g} running after {ms:.1} ms; answering \
                             the spawn"
                        )));
                        let m = Msg::SpawnResult { req, rc: 0, jobid };
                        self.fx.push(Effect::ToGroup(parent, m));
                    }
                    if g == 0 && self.proc_table_at_launch && self.launch_proc_req.is_none() {
                        self.launch_proc_req = Some(self.request_proc_table());
                    }
                    if self.terminating && !self.killing {
                        // A spawned group that came up after the SIGTERM was passed on.
                        self.signal_group(g, libc::SIGTERM);
                    }
                }
            }
            Msg::Report(r) if g == 0 => self.reports.push(*r),
            Msg::Report(_) => {}
            Msg::Name { req, op } if self.cfg.name_server => {
                self.fx.push(Effect::AskNameServer { g, req, op });
            }
            Msg::Name { req, op } => {
                let (ok, port) = self.name_op(&op);
                self.fx.push(Effect::ToGroup(g, Msg::NameResult { req, ok, port }));
                if let (true, NameOp::Publish { service, port }) = (ok, &op) {
                    for (wg, wreq) in self.name_waiters.remove(service).unwrap_or_default() {
                        let m = Msg::NameResult { req: wreq, ok: true, port: Some(port.clone()) };
                        self.fx.push(Effect::ToGroup(wg, m));
                    }
                }
            }
            Msg::NameWait { req, service } if self.cfg.name_server => {
                let op = NameOp::Lookup { service };
                self.fx.push(Effect::AskNameServer { g, req, op });
            }
            Msg::NameWait { req, service } => match self.names.get(&service) {
                Some(port) => {
                    let m = Msg::NameResult { req, ok: true, port: Some(port.clone()) };
                    self.fx.push(Effect::ToGroup(g, m));
                }
                None => self.name_waiters.entry(service).or_default().push((g, req)),
            },
            Msg::PmixDmodex { from, req, nspace, rank } => {
                match self.groups.iter().position(|gr| gr.kvsname == nspace) {
                    Some(to) if to != g => {
                        self.pmix_routes.insert((from.clone(), req), g);
                        self.fx
                            .push(Effect::ToGroup(to, Msg::PmixDmodex { from, req, nspace, rank }));
                    }
                    _ => {
                        let status = libi_pmix::proto::status::ERR_NOT_FOUND;
                        let m = Msg::PmixDmodexData { from, req, status, blob: Vec::new() };
                        self.fx.push(Effect::ToGroup(g, m));
                    }
                }
            }
            Msg::PmixDmodexData { from, req, status, blob } => {
                if let Some(to) = self.pmix_routes.remove(&(from.clone(), req)) {
                    let m = Msg::PmixDmodexData { from, req, status, blob };
                    self.fx.push(Effect::ToGroup(to, m));
                }
            }
            Msg::PmixConnect { key, procs, count, sizes, ctxid, blob } => {
                let c = self.pmix_connects.entry(key.clone()).or_default();
                c.procs = procs;
                c.ctxid |= ctxid;
                c.blob.extend_from_slice(&blob);
                c.entered += count as u64;
                c.sizes.extend(sizes);
                let needed: Option<u64> = (c.procs.iter())
                    .map(|(ns, r)| match *r == libi_pmix::proto::RANK_WILDCARD {
                        true => c.sizes.get(ns).map(|&s| u64::from(s)),
                        false => Some(1),
                    })
                    .sum();
                if needed.is_some_and(|n| c.entered >= n) {
                    let done = self.pmix_connects.remove(&key).unwrap_or_default();
                    let ctxid = done.ctxid.then(|| {
                        self.pmix_ctxid += 1;
                        self.pmix_ctxid
                    });
                    let nspaces: HashSet<&String> = done.procs.iter().map(|(ns, _)| ns).collect();
                    let jobs: Vec<libi::job::PmixPeer> = (self.groups.iter())
                        .filter(|gr| nspaces.contains(&gr.kvsname))
                        .filter_map(|gr| gr.pmix.clone())
                        .collect();
                    for (to, gr) in self.groups.iter().enumerate() {
                        if nspaces.contains(&gr.kvsname) {
                            let m = Msg::PmixConnectDone {
                                key: key.clone(),
                                status: 0,
                                ctxid,
                                jobs: jobs.clone(),
                                blob: done.blob.clone(),
                            };
                            self.fx.push(Effect::ToGroup(to, m));
                        }
                    }
                }
            }
            Msg::Spawn { req, spawn } => {
                if self.killing {
                    return;
                }
                let who = format!("{} on {}", rank_name(g, spawn.rank), spawn.host);
                if self.terminating {
                    // Its ranks would not have been asked to stop: refused, so that the
                    // spawner goes on stopping.
                    self.spawn_refused(g, req, &who, "the job is stopping (SIGTERM)");
                    return;
                }
                self.fx.push(Effect::Spawn { g, req, request: spawn, who });
            }
            other => {
                self.fx.push(Effect::Warn(format!("unexpected message at the root: {other:?}")))
            }
        }
    }

    /// The node of the job (group 0) that runs `rank`.
    fn node_of_rank(&self, rank: u32) -> Option<u32> {
        let i = self.rank_runs.partition_point(|r| r.0 <= rank).checked_sub(1)?;
        let (first, count, node) = self.rank_runs[i];
        (rank < first + count).then_some(node)
    }

    fn rank_ended(&mut self, now: f64, g: usize, rank: u32, host: &str, end: RankEnd) {
        if g == 0 {
            if let Some(n) = self.node_of_rank(rank).and_then(|n| self.live.get_mut(&n)) {
                *n = n.saturating_sub(1);
            }
            if self.cfg.print_all_exitcodes {
                self.exit_words.insert(rank, end.wait_status());
            }
        }
        if !end.is_failure() {
            return;
        }
        if self.terminating && !self.killing {
            // Every rank was asked to stop: one that stops by the SIGTERM (or a shell's
            // 143) is doing as asked; any other end is said, and ends no other rank. The
            // status stays 143.
            if !end.by_signal(libc::SIGTERM) {
                let message = describe_end(rank, host, &end, self.cfg.pmgr && g == 0);
                self.fx.push(Effect::Print(in_group(g, message)));
            }
            return;
        }
        // As Hydra: a rank that exits non-zero without having broken off PMI (it never spoke
        // PMI, or it finalized) ends no other rank; nor, with -disable-auto-cleanup, does any
        // failure. Say so, and fold its status into the job's; the others run on.
        let quiet = self.cfg.no_cleanup || matches!(end, RankEnd::Exited { clean_pmi: true, .. });
        if quiet && !self.killing {
            if self.groups[g].abandoned {
                return;
            }
            let message = describe_end(rank, host, &end, self.cfg.pmgr && g == 0);
            self.fx.push(Effect::Print(in_group(g, message)));
            self.status = Some(self.count_failed_rank(end.status_word()));
            return;
        }
        let launch = matches!(end, RankEnd::SpawnFailed { .. });
        let message = match end {
            RankEnd::Exited { clean_pmi: false, .. } if g == 0 && self.cfg.singleton => format!(
                "the singleton (rank {rank} on {host}) closed its PMI connection without finalize"
            ),
            _ => describe_end(rank, host, &end, self.cfg.pmgr && g == 0),
        };
        // Ranks that end by our teardown's SIGTERM or SIGKILL (or exit with 128 + those, as
        // shells do) do not count among the failures.
        let ours = self.killing && (end.by_signal(libc::SIGTERM) || end.by_signal(libc::SIGKILL));
        let word = (!ours).then(|| end.status_word());
        self.group_failed(now, g, end.status(), message, launch, word);
    }

    /// Something failed in group `g`. A launch failure (a program that cannot be executed,
    /// an NLA that could not be started or was lost) before the spawn was answered fails
    /// the spawn: the spawner gets an error and the job goes on. Anything else — a spawned
    /// rank that ran and failed, even before every NLA of its group reported — fails the
    /// job, as for the job's own ranks. `word`: the wait status of a rank that failed (see
    /// [`RootCore::rank_failed`]); `None` for a rank ended by our own teardown, and for
    /// failures that are not a rank's.
    fn group_failed(
        &mut self,
        now: f64,
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
        let message = in_group(g, message);
        if let (true, Some(origin)) = (launch, gr.spawn.clone()) {
            gr.spawn = None;
            gr.abandoned = true;
            self.fx.push(Effect::KillGroup(g));
            if !self.killing {
                self.spawn_refused(origin.parent, origin.req, &origin.who, &message);
            }
        } else if let Some(word) = word {
            self.rank_failed(now, word, message);
        } else {
            self.fail(now, status, message);
        }
    }

    /// Count a failed rank's wait status `word` into [`RootCore::rank_word`]; the job's
    /// status that makes.
    fn count_failed_rank(&mut self, word: i32) -> i32 {
        let (first, w, n) = match self.rank_word {
            Some((first, w, n)) => (first, w | word, n + 1),
            None => (word, word, 1),
        };
        self.rank_word = Some((first, w, n));
        combined_status(w)
    }

    /// A rank failed with wait status `word`. The first failure of the job fails it; while
    /// the job is torn down for a rank failure, every further rank failure is combined into
    /// the status by Hydra's rule (the wait statuses OR'ed: ranks exiting 3 and 5 make 7).
    fn rank_failed(&mut self, now: f64, word: i32, message: String) {
        if !self.killing {
            // Ranks that failed before without ending the job count too.
            let status = self.count_failed_rank(word);
            self.fail(now, status, message);
        } else if let Some((_, w, n)) = self.rank_word.as_mut() {
            *w |= word;
            *n += 1;
            self.status = Some(combined_status(*w));
        }
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

    /// The outside name server answered request `req` of group `g` ([`Effect::AskNameServer`]):
    /// whether it succeeded and the value looked up, or why it could not be asked. A name
    /// server that cannot be asked fails the request (the rank's MPI call returns an error);
    /// the first time it is said in a line, later times in the log.
    pub fn name_server_answered(
        &mut self,
        g: usize,
        req: u64,
        answer: Result<(bool, Option<String>), String>,
    ) {
        let (ok, port) = answer.unwrap_or_else(|e| {
            if self.name_server_failed {
                self.fx.push(Effect::Debug(e));
            } else {
                self.name_server_failed = true;
                self.fx.push(Effect::Print(e));
            }
            (false, None)
        });
        if g < self.groups.len() {
            self.fx.push(Effect::ToGroup(g, Msg::NameResult { req, ok, port }));
        }
    }

    /// A signal reached the front end. While the job runs: SIGHUP ends it (129), a second
    /// SIGINT within [`SIGINT_WINDOW`] kills it (130), a second SIGTERM too (143); anything
    /// else (a first SIGINT or SIGTERM, SIGUSR1/2, SIGQUIT, SIGALRM) is forwarded to every
    /// rank, as Hydra does. After a first SIGTERM the job ends when the ranks do, however
    /// long they take (a batch system's SIGTERM before its SIGKILL gives them time to save
    /// their state), with status 143. While the links close a signal is ignored (that wait
    /// is bounded); while our output is flushed, SIGINT, SIGTERM and SIGHUP stop the wait
    /// (the status becomes 128 + the signal unless one is set).
    pub fn signal(&mut self, now: f64, sig: i32) {
        match self.phase {
            Phase::Run => {
                let second = sig == libc::SIGINT
                    && self.last_sigint.is_some_and(|t| now - t < SIGINT_WINDOW);
                if sig == libc::SIGINT {
                    self.last_sigint = Some(now);
                }
                if second {
                    self.fail(now, 128 + libc::SIGINT, "second SIGINT: killing the job".into());
                } else if sig == libc::SIGTERM && self.terminating {
                    self.fail(now, 128 + libc::SIGTERM, "second SIGTERM: killing the job".into());
                } else if matches!(sig, libc::SIGTERM | libc::SIGINT)
                    && !self.killing
                    && !self.job_up()
                {
                    // Ranks still being started would miss a passed-on signal, and none has
                    // state to save yet: ended at once (Ctrl-C on a launch that hangs).
                    let name = if sig == libc::SIGINT { "SIGINT" } else { "SIGTERM" };
                    let m = format!("received {name} while the job was starting: terminating it");
                    self.fail(now, 128 + sig, m);
                } else if sig == libc::SIGTERM && !self.killing {
                    self.terminating = true;
                    self.status = Some(128 + libc::SIGTERM);
                    // As in a teardown: output nobody reads no longer holds the ranks back.
                    self.stall_check_at = Some(now);
                    self.fx.push(Effect::Print(
                        "received SIGTERM: forwarded to every rank; the job ends when they do \
                         (a second SIGTERM kills it)"
                            .into(),
                    ));
                    self.forward_signal(sig);
                } else if sig == libc::SIGHUP {
                    let m = "received SIGHUP: terminating the job".into();
                    self.fail(now, 128 + libc::SIGHUP, m);
                } else {
                    self.forward_signal(sig);
                }
            }
            Phase::Close | Phase::Done => {}
            Phase::Flush => {
                if matches!(sig, libc::SIGINT | libc::SIGTERM | libc::SIGHUP) {
                    self.status.get_or_insert(128 + sig);
                    self.done();
                }
            }
        }
    }

    /// Output of `rank` of group `g` from that group's child `idx`: written by our writers
    /// and acknowledged once written ([`output_written`](Self::output_written)). While the
    /// job is torn down and that stream is broken or not being read, it is dropped (and
    /// acknowledged at once) so that the NLAs can finish.
    #[allow(clippy::too_many_arguments)]
    pub fn rank_output(
        &mut self,
        g: usize,
        idx: usize,
        rank: u32,
        stream: Stream,
        data: Bytes,
        streams: &Streams,
    ) {
        let bytes = data.len() as u64;
        let st = streams.get(stream);
        if self.stopping() && st.stuck() {
            if !st.broken {
                self.dropped += bytes;
            }
            self.fx.push(Effect::Ack { g, idx, bytes });
        } else {
            *self.owed.entry((g, idx)).or_default() += bytes;
            self.fx.push(Effect::Output { g, rank, stream, data, from: Some(idx) });
        }
    }

    /// Our writers wrote (or dropped, the stream being broken) `bytes` of group `g`'s child
    /// `idx`'s output: acknowledge what is still owed of it, in batches of a quarter window
    /// (the child always has the rest of its window to go on with).
    pub fn output_written(&mut self, g: usize, idx: usize, bytes: u64) {
        if self.phase != Phase::Run {
            // The links are closed: nobody to acknowledge to.
            return;
        }
        let Some(owed) = self.owed.get_mut(&(g, idx)) else { return };
        let written = self.written.entry((g, idx)).or_default();
        *written += bytes;
        if *written < OUTPUT_WINDOW / 4 {
            return;
        }
        let bytes = std::mem::take(written).min(*owed);
        *owed -= bytes;
        if bytes > 0 {
            self.fx.push(Effect::Ack { g, idx, bytes });
        }
    }

    /// Writing to our stdout or stderr failed: nobody reads it any more (EPIPE). The job
    /// ends as Hydra's does when its output pipe closes: torn down, status 141 (128 +
    /// SIGPIPE), nothing more said.
    pub fn output_broken(&mut self, now: f64) {
        if self.phase == Phase::Run && !self.killing {
            self.teardown(now, STATUS_BROKEN_OUTPUT);
        }
    }

    /// Writing our `stream` failed at `now` with `error` (`errno`, if the system gave one).
    /// EPIPE: nobody reads it any more, the job ends silently with
    /// [`STATUS_BROKEN_OUTPUT`] ([`output_broken`](Self::output_broken)). Anything else (a
    /// full disk, an I/O error) loses rank output: said, and the job fails with
    /// [`STATUS_LAUNCH`], as Hydra's does ([`output_file_failed`](Self::output_file_failed)).
    pub fn our_output_failed(&mut self, now: f64, stream: Stream, errno: Option<i32>, error: &str) {
        if errno == Some(libc::EPIPE) {
            self.output_broken(now);
        } else {
            let name = stream.name();
            self.output_file_failed(now, format!("cannot write our {name}: {error}"));
        }
    }

    /// `--end-on-stdin-eof` ([`StdinSource::LifeLine`]): our stdin ended at `now`, so
    /// whoever started us and held its other end is gone (however it ended: a LIBI front
    /// end that exited without finalizing, or was killed). Said, and the job is ended as
    /// SIGTERM ends it. Only while the job runs.
    pub fn life_line_lost(&mut self, now: f64) {
        if self.phase != Phase::Run {
            return;
        }
        self.fx.push(Effect::Print(
            "the program that started this job is gone (end of file on stdin, \
             --end-on-stdin-eof): ending the job"
                .into(),
        ));
        self.signal(now, libc::SIGTERM);
    }

    /// An output file (`-outfile-pattern`, `-errfile-pattern`) could not be opened or
    /// written: rank output is being lost. Said (`message`); during the run the job is torn
    /// down as Hydra's is then, with [`STATUS_LAUNCH`]; after it, a job that succeeded ends
    /// with that status all the same.
    pub fn output_file_failed(&mut self, now: f64, message: String) {
        if self.phase == Phase::Run && !self.killing {
            self.fail(now, STATUS_LAUNCH, message);
        } else {
            self.fx.push(Effect::Print(message));
            if self.status.unwrap_or(0) == 0 {
                self.status = Some(STATUS_LAUNCH);
            }
        }
    }

    /// After the driver applied the effects: `finished`, every group's tree finished (every
    /// NLA gone); `ranks_left`, ranks of every group not ended yet.
    pub fn tree_state(&mut self, now: f64, finished: bool, ranks_left: usize) {
        if self.phase != Phase::Run {
            return;
        }
        if finished {
            self.leave_run(now);
        } else if ranks_left == 0 && !self.ranks_done {
            // Every rank ended: give the NLAs a moment to close (and send their reports).
            self.ranks_done = true;
            self.children_wait_at = Some(now + CHILDREN_WAIT);
        }
    }

    /// In [`Phase::Close`]: no launcher runs any more.
    pub fn launchers_done(&mut self, now: f64) {
        if self.phase == Phase::Close {
            self.flush(now);
        }
    }

    /// In [`Phase::Flush`]: one of our two writers wrote everything and ended.
    pub fn output_finished(&mut self) {
        if self.phase == Phase::Flush {
            self.open_streams = self.open_streams.saturating_sub(1);
            if self.open_streams == 0 {
                self.done();
            }
        }
    }

    /// Time passed: run what is due at `now` (see [`poll_timeout`](Self::poll_timeout)).
    pub fn handle_timeout(&mut self, now: f64, streams: &Streams) {
        let due = |t: Option<f64>| t.is_some_and(|t| t <= now);
        match self.phase {
            Phase::Run => {
                if due(self.timeout_at) {
                    self.timeout_at = None;
                    self.timed_out(now);
                }
                if due(self.stall_check_at) {
                    self.stall_check_at = Some(now + STALLED_CHECK);
                    if streams.stuck() {
                        self.drop_stalled_output();
                    }
                }
                if due(self.progress_at) {
                    self.progress_at = Some(now + PROGRESS_EVERY);
                    self.progress(now);
                }
                if due(self.teardown_over_at) {
                    let m = format!(
                        "the NLAs did not finish tearing the job down in time{}",
                        self.hosts_with_ranks_left()
                    );
                    self.fx.push(Effect::Warn(m));
                    self.leave_run(now);
                } else if due(self.children_wait_at) {
                    self.leave_run(now);
                }
            }
            Phase::Close => {
                if due(self.launchers_at) {
                    self.flush(now);
                }
            }
            Phase::Flush => {
                if due(self.timeout_at) {
                    // The ranks are gone; their output is not all written (a reader that
                    // stopped, a FIFO nobody opened): say so, then end once the line is
                    // written or cannot be.
                    self.timeout_at = None;
                    self.status.get_or_insert(STATUS_TIMEOUT);
                    let secs = self.cfg.timeout.unwrap_or(0.0);
                    self.fx.push(Effect::Print(format!(
                        "job timed out after {secs} s (MPIEXEC_TIMEOUT) while its output was \
                         still being written; the rest of it is dropped"
                    )));
                    self.last_words_until = Some(now + STALLED_OUTPUT);
                    self.flush_check_at = Some(now);
                } else if due(self.flush_check_at) {
                    self.flush_check_at = Some(now + FLUSH_CHECK);
                    if let Some(until) = self.last_words_until {
                        if now >= until || streams.stderr.settled() {
                            self.done();
                        }
                    } else if self.stopping() && streams.given_up() {
                        // A job that failed, or was told to stop, does not wait for a reader
                        // that stopped reading.
                        self.done();
                    }
                }
            }
            Phase::Done => {}
        }
    }

    // ----- policy -----

    fn timed_out(&mut self, now: f64) {
        let secs = self.cfg.timeout.unwrap_or(0.0);
        let m = format!("job timed out after {secs} s (MPIEXEC_TIMEOUT); killing it");
        self.fail(now, STATUS_TIMEOUT, m);
    }

    /// Pass `sig` on to every rank of group `g`.
    fn signal_group(&mut self, g: usize, sig: i32) {
        let e = NodeEffect::ToChildren(Msg::Signal { signal: sig });
        self.fx.push(Effect::GroupEffect(g, e));
    }

    /// Pass `sig` on to every rank of every group.
    fn forward_signal(&mut self, sig: i32) {
        for g in 0..self.groups.len() {
            self.signal_group(g, sig);
        }
    }

    /// " (ranks not ended on HOST, ...)": the job's hosts whose ranks have not all reported
    /// their end (at most 5 named), or nothing when none is known to be left.
    fn hosts_with_ranks_left(&self) -> String {
        let mut late: Vec<&str> = (self.node_of_host.iter())
            .filter(|(_, n)| self.live.get(n).is_some_and(|&c| c > 0))
            .map(|(h, _)| h.as_str())
            .collect();
        if late.is_empty() {
            return String::new();
        }
        late.sort_unstable();
        let more = match late.len() {
            n if n > 5 => format!(" and {} more", n - 5),
            _ => String::new(),
        };
        late.truncate(5);
        format!(" (ranks not ended on {}{more})", late.join(", "))
    }

    /// Every NLA of the job (group 0) has started its ranks.
    fn job_up(&self) -> bool {
        self.groups.first().is_some_and(|g| g.nodes_up >= g.nodes)
    }

    /// The job is ending on its own account: torn down, or told to stop by a SIGTERM.
    fn stopping(&self) -> bool {
        self.killing || self.terminating
    }

    /// The job fails: say why (once), tear every group down.
    fn fail(&mut self, now: f64, code: i32, message: String) {
        if self.killing {
            return;
        }
        self.fx.push(Effect::Print(message));
        self.teardown(now, code);
    }

    /// Tear every group down; the job's status is `code`. The trees get the kill grace plus
    /// [`TEARDOWN_SLACK`]; our output is checked for a stall from now on.
    fn teardown(&mut self, now: f64, code: i32) {
        if self.killing {
            return;
        }
        self.status = Some(code);
        self.killing = true;
        for g in 0..self.groups.len() {
            self.fx.push(Effect::KillGroup(g));
        }
        self.teardown_over_at = Some(now + self.cfg.grace + TEARDOWN_SLACK);
        self.stall_check_at = Some(now);
    }

    /// While the job is torn down and our output is not being read: acknowledge everything
    /// queued, so that no NLA waits for a reader that is gone (what is queued is still
    /// written if the reader comes back before we exit).
    fn drop_stalled_output(&mut self) {
        self.written.clear();
        let mut owed: Vec<_> = std::mem::take(&mut self.owed).into_iter().collect();
        owed.sort_unstable();
        for ((g, idx), bytes) in owed {
            if bytes > 0 {
                self.fx.push(Effect::Ack { g, idx, bytes });
            }
        }
    }

    fn progress_line(&self) -> String {
        let (up, ranks) = self.groups.first().map(|g| (g.nodes_up, g.ranks_up)).unwrap_or((0, 0));
        format!(
            "\rlibi-mpiexec: started {ranks}/{} ranks on {up}/{} nodes ",
            self.total_ranks, self.total_nodes
        )
    }

    /// The progress line: drawn while the launch of the job's NLAs is not done after
    /// [`PROGRESS_AFTER`]; ended with a newline once it is.
    fn progress(&mut self, now: f64) {
        let starting = self.groups.first().is_none_or(|g| g.nodes_up < self.total_nodes);
        if starting && now - self.started > PROGRESS_AFTER {
            self.fx.push(Effect::Terminal(self.progress_line()));
            self.progress_shown = true;
        } else if self.progress_shown {
            self.fx.push(Effect::Terminal(self.progress_line() + "\n"));
            self.progress_shown = false;
        }
    }

    /// The run is over: close the links, give the launchers [`LAUNCHER_WAIT`].
    fn leave_run(&mut self, now: f64) {
        if self.progress_shown {
            // The job ended before the next redraw: end the line where it got to.
            self.fx.push(Effect::Terminal(self.progress_line() + "\n"));
            self.progress_shown = false;
        }
        self.phase = Phase::Close;
        self.launchers_at = Some(now + LAUNCHER_WAIT);
        self.fx.push(Effect::CloseTree);
    }

    /// Stop the launchers still running, write the report, say what is left to say, and
    /// wait for our writers.
    fn flush(&mut self, now: f64) {
        self.phase = Phase::Flush;
        self.fx.push(Effect::StopLaunchers);
        self.fx.push(Effect::WriteReport);
        if self.dropped > 0 {
            self.fx.push(Effect::Print(format!(
                "{} bytes of the ranks' output were dropped: our output was not being read \
                 while the job was torn down",
                self.dropped
            )));
        }
        if let Some((first, word, n)) = self.rank_word {
            let status = combined_status(word);
            if status != combined_status(first) {
                self.fx.push(Effect::Print(format!(
                    "exit status {status}: the statuses of the {n} ranks that failed, combined \
                     (-print-all-exitcodes lists every rank's)"
                )));
            }
        }
        self.fx.push(Effect::CloseOutput);
        self.flush_check_at = Some(now);
    }

    fn done(&mut self) {
        self.phase = Phase::Done;
        if self.cfg.print_all_exitcodes && !self.never_ran {
            self.fx.push(Effect::Stdout(self.exit_codes()));
        }
    }

    /// `-print-all-exitcodes`, as Hydra prints it on stdout: `[mpiexec@HOST] Exit codes: `,
    /// then one line per host of the job, `[host] S,S,...`: the wait status of each of its
    /// ranks in local order (exit code × 256, or the signal number).
    fn exit_codes(&self) -> String {
        let mut text = format!("[mpiexec@{}] Exit codes: ", self.root_host);
        let mut first = true;
        for (host, ranks) in &self.hosts {
            let codes: Vec<String> =
                ranks.iter().filter_map(|r| self.exit_words.get(r)).map(i32::to_string).collect();
            if codes.is_empty() {
                continue;
            }
            if !first {
                text.push('\n');
            }
            first = false;
            text.push_str(&format!("[{host}] {}", codes.join(",")));
        }
        text.push('\n');
        text
    }
}

/// What to do with an NLA's join (see [`Rendezvous`]).
#[derive(Debug)]
pub enum Join<C> {
    /// The NLA of `node` is a child of the root: adopt its connection as that child's link.
    Adopt { node: u32, host: String, conn: C },
    /// Tell the NLA of `node` to connect to its parent at `parent` instead, and close.
    Redirect { conn: C, node: u32, parent: String },
    /// Not a join to act on (a stranger, a second join): drop the connection unread, and
    /// log why.
    Drop(String),
}

/// NLAs started by one launcher step (srun) join the front end: each says which host it
/// runs on and where it listens. The front end adopts its own children in the NLA tree and
/// redirects every other NLA to its parent's listen address, as soon as that parent has
/// joined (until then the join waits here). `C` is the driver's connection.
pub struct Rendezvous<C> {
    node_of_host: HashMap<String, u32>,
    parent_of: HashMap<u32, u32>,
    listen: HashMap<u32, String>,
    pending: HashMap<u32, Vec<(u32, C)>>,
}

impl<C> Rendezvous<C> {
    /// The joins of the tree below `root` (a group's root node plan).
    pub fn new(root: &NodePlan) -> Self {
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

    /// The NLA on `host`, listening at `listen`, joined over `conn`; `connected(node)`:
    /// that node's NLA already has a link to the root. Returns what to do, in order (this
    /// join, then the joins that waited for this NLA to be their parent).
    pub fn join(
        &mut self,
        host: String,
        listen: String,
        conn: C,
        connected: impl Fn(u32) -> bool,
    ) -> Vec<Join<C>> {
        let Some(&node) = self.node_of_host.get(&host) else {
            return vec![Join::Drop(format!("dropped a join from {host}: not a host of this job"))];
        };
        // A host whose NLA already joined or connected: the connection is dropped unread
        // (it carries the job's secret, but it is not that NLA's).
        if self.listen.contains_key(&node) || connected(node) {
            return vec![Join::Drop(format!("dropped a second join from {host}"))];
        }
        self.listen.insert(node, listen.clone());
        let mut out = Vec::new();
        let parent = self.parent_of.get(&node).copied().unwrap_or(0);
        if parent == 0 {
            out.push(Join::Adopt { node, host, conn });
        } else if let Some(addr) = self.listen.get(&parent).cloned() {
            out.push(Join::Redirect { conn, node, parent: addr });
        } else {
            self.pending.entry(parent).or_default().push((node, conn));
        }
        for (child, conn) in self.pending.remove(&node).unwrap_or_default() {
            out.push(Join::Redirect { conn, node: child, parent: listen.clone() });
        }
        out
    }
}

/// Where rank 0's stdin comes from ([`stdin_source`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StdinSource {
    /// Our stdin, read within rank 0's credit ([`Effect::StdinCredit`]); its end is rank 0's.
    Ours,
    /// `--end-on-stdin-eof`: rank 0's stdin is at its end at once, as under `< /dev/null`;
    /// ours is the life line of whoever started us, and its end ends the job
    /// ([`RootCore::life_line_lost`]).
    LifeLine,
    /// Nowhere: a singleton keeps its own stdin (ours is not the user's).
    Nothing,
}

/// Where rank 0's stdin comes from, by `--end-on-stdin-eof` and whether the job is a
/// singleton (`--end-on-stdin-eof` decides first).
pub fn stdin_source(end_on_stdin_eof: bool, singleton: bool) -> StdinSource {
    if end_on_stdin_eof {
        StdinSource::LifeLine
    } else if singleton {
        StdinSource::Nothing
    } else {
        StdinSource::Ours
    }
}

/// The launchers of a job ([`job_launcher`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launchers {
    /// What starts the job's NLAs.
    pub job: LauncherKind,
    /// What starts a spawned group's NLAs on hosts that are not this machine, when the job's
    /// launcher is fork for want of other hosts ([`spawn_launcher`]); `None`: the job's.
    pub remote: Option<LauncherKind>,
}

/// The launchers of a job planned for `planned` (the `-launcher` asked for, or its default),
/// `asked`: whether the command line named one. When every host of the job is this machine
/// (`all_local`, asked only then: it resolves names) ssh or rsh is not used: the fork
/// launcher starts the NLAs, as Hydra's autofork does (`autofork`: not turned off by
/// `HYDRA_LAUNCHER_AUTOFORK`), and a spawn onto another host uses the launcher planned. The
/// default fork launcher (no host named) spawns onto other hosts with ssh, as Hydra; an
/// explicit `-launcher fork` keeps fork for every spawn (host names are labels then:
/// simulated nodes).
pub fn job_launcher(
    planned: LauncherKind,
    asked: bool,
    autofork: bool,
    all_local: impl FnOnce() -> bool,
) -> Launchers {
    let remote = matches!(planned, LauncherKind::Ssh | LauncherKind::Rsh);
    if remote && autofork && all_local() {
        Launchers { job: LauncherKind::Fork, remote: Some(planned) }
    } else if planned == LauncherKind::Fork && !asked {
        Launchers { job: LauncherKind::Fork, remote: Some(LauncherKind::Ssh) }
    } else {
        Launchers { job: planned, remote: None }
    }
}

/// What starts a spawned group's NLAs ([`spawn_launcher`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpawnLauncher {
    /// The job's NLAs start them, and they join the front end (`LauncherKind::Joined`).
    Joined,
    /// The job's own launcher.
    Job,
    /// The job's launcher (fork) if every host of the group is this machine, else this one:
    /// the driver checks the hosts (which resolves names).
    Remote(LauncherKind),
}

/// What starts a spawned group's NLAs, for a job whose NLAs are started by `job`, with
/// `remote` for other hosts ([`Launchers::remote`]); `agents`: the job's NLAs start them
/// ([`RootCore::spawn_agents`] said so). A job that runs under fork only because its hosts
/// are all this machine reaches another host as Hydra would, never runs there under its name.
pub fn spawn_launcher(
    job: LauncherKind,
    remote: Option<LauncherKind>,
    agents: bool,
) -> SpawnLauncher {
    match (agents, job, remote) {
        (true, _, _) => SpawnLauncher::Joined,
        (false, LauncherKind::Fork, Some(remote)) => SpawnLauncher::Remote(remote),
        _ => SpawnLauncher::Job,
    }
}

/// The host file to read for a spawn command whose `MPI_Info` is `info`: the key `hostfile`
/// (read at the front end, as Hydra does), unless it is empty or `host` or `hosts` (not
/// empty) says where the ranks go. Its hosts are then given as `hosts`
/// ([`hosts_info`]).
pub fn spawn_hostfile(info: &[(String, String)]) -> Option<&str> {
    let has = |k: &str| info.iter().any(|(ik, v)| ik == k && !v.is_empty());
    let path = info.iter().find(|(k, _)| k == "hostfile").map(|(_, v)| v.as_str())?;
    if path.is_empty() || has("host") || has("hosts") {
        return None;
    }
    Some(path)
}

/// The value of the info key `hosts` for the hosts of a host file: `NAME:SLOTS`,
/// comma-separated.
pub fn hosts_info(hosts: &[Host]) -> String {
    let hosts: Vec<String> = hosts.iter().map(|h| format!("{}:{}", h.name, h.slots)).collect();
    hosts.join(",")
}

/// `rank N` in the job, `rank N of spawn G` in a spawned group.
pub fn rank_name(g: usize, rank: u32) -> String {
    if g == 0 {
        format!("rank {rank}")
    } else {
        format!("rank {rank} of spawn {g}")
    }
}

/// A rank's message (`rank R ...`) for a rank of group `g`: `rank R of spawn G ...` for a
/// spawned group's.
fn in_group(g: usize, message: String) -> String {
    match (g, message.strip_prefix("rank ")) {
        (0, _) | (_, None) => message,
        (_, Some(rest)) => match rest.split_once(' ') {
            Some((r, tail)) => format!("rank {r} of spawn {g} {tail}"),
            None => message,
        },
    }
}

/// One line naming a failed rank (`pmgr`: its process manager interface is PMGR).
pub fn describe_end(rank: u32, host: &str, end: &RankEnd, pmgr: bool) -> String {
    match end {
        RankEnd::Exited { code, clean_pmi: true } => {
            format!("rank {rank} on {host} exited with code {code}")
        }
        RankEnd::Exited { code, clean_pmi: false } => {
            let call = if pmgr { "PMGR close" } else { "PMI finalize" };
            format!("rank {rank} on {host} exited with code {code} without calling {call}")
        }
        RankEnd::Signaled { signal } => format!(
            "rank {rank} on {host} was killed by signal {signal} ({})",
            signal_name(*signal)
        ),
        RankEnd::SpawnFailed { reason, .. } => reason.clone(),
    }
}

/// `SIGSEGV` for 11, …
pub fn signal_name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("signal {sig}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use libi::job::RankSlot;

    /// The front end (node 0 on `root`) over n1 (ranks 0, 1) and n2 (ranks 2, 3).
    fn plan() -> NodePlan {
        let node = |node: u32, host: &str, ranks: Vec<u32>| NodePlan {
            node,
            host: host.into(),
            ranks: ranks.into_iter().map(|rank| RankSlot { rank, app: 0 }).collect(),
            children: Vec::new(),
        };
        NodePlan {
            children: vec![node(1, "n1", vec![0, 1]), node(2, "n2", vec![2, 3])],
            ..node(0, "root", vec![])
        }
    }

    fn cfg() -> RootConfig {
        RootConfig { grace: 3.0, ..RootConfig::default() }
    }

    /// A root core whose job (group 0) started at time 0.
    fn started(cfg: RootConfig) -> RootCore {
        let mut c = RootCore::new(cfg, &plan(), 4, 0.0);
        assert_eq!(c.job_started(0.0, 2, "kvs0".into()), 0);
        c
    }

    fn host_of(rank: u32) -> &'static str {
        if rank < 2 {
            "n1"
        } else {
            "n2"
        }
    }

    fn end(c: &mut RootCore, now: f64, g: usize, rank: u32, end: RankEnd) {
        c.root_msg(now, g, Msg::RankEnded { rank, host: host_of(rank).into(), end });
    }

    fn exited(code: i32) -> RankEnd {
        RankEnd::Exited { code, clean_pmi: true }
    }

    /// Exited between PMI init and finalize.
    fn unfinalized(code: i32) -> RankEnd {
        RankEnd::Exited { code, clean_pmi: false }
    }

    fn signaled(signal: i32) -> RankEnd {
        RankEnd::Signaled { signal }
    }

    fn prints(fx: &[Effect]) -> Vec<String> {
        fx.iter()
            .filter_map(|e| match e {
                Effect::Print(m) => Some(m.clone()),
                _ => None,
            })
            .collect()
    }

    fn kills(fx: &[Effect]) -> Vec<usize> {
        fx.iter()
            .filter_map(|e| match e {
                Effect::KillGroup(g) => Some(*g),
                _ => None,
            })
            .collect()
    }

    /// (group, signal) of every signal passed on to a group's ranks.
    fn forwarded(fx: &[Effect]) -> Vec<(usize, i32)> {
        fx.iter()
            .filter_map(|e| match e {
                Effect::GroupEffect(g, NodeEffect::ToChildren(Msg::Signal { signal })) => {
                    Some((*g, *signal))
                }
                _ => None,
            })
            .collect()
    }

    /// (group, message) of every `ToGroup`.
    fn to_groups(fx: &[Effect]) -> Vec<(usize, Msg)> {
        fx.iter()
            .filter_map(|e| match e {
                Effect::ToGroup(g, m) => Some((*g, m.clone())),
                _ => None,
            })
            .collect()
    }

    /// The trees finished at `now`, the launchers exited: returns the effects from there
    /// to the end of the run (the core is in [`Phase::Flush`]).
    fn finish(c: &mut RootCore, now: f64) -> Vec<Effect> {
        c.take_effects();
        c.tree_state(now, true, 0);
        assert_eq!(c.phase(), Phase::Close);
        c.launchers_done(now);
        assert_eq!(c.phase(), Phase::Flush);
        c.take_effects()
    }

    fn quiet() -> Streams {
        Streams::default()
    }

    /// A stream with output queued that wrote nothing for `idle` seconds.
    fn waiting(idle: f64) -> StreamState {
        StreamState { broken: false, queued: true, idle }
    }

    #[test]
    fn first_rank_failure_tears_down_and_later_ones_are_ored() {
        let mut c = started(cfg());
        end(&mut c, 1.0, 0, 0, unfinalized(3));
        let fx = c.take_effects();
        assert_eq!(prints(&fx), ["rank 0 on n1 exited with code 3 without calling PMI finalize"]);
        assert_eq!(kills(&fx), [0]);
        assert_eq!(c.status(), 3);
        end(&mut c, 1.1, 0, 2, exited(5));
        assert_eq!(c.status(), 7);
        assert!(prints(&c.take_effects()).is_empty(), "one line for the job's failure");
        let fx = finish(&mut c, 2.0);
        assert_eq!(
            prints(&fx),
            ["exit status 7: the statuses of the 2 ranks that failed, combined \
              (-print-all-exitcodes lists every rank's)"]
        );
    }

    /// As Hydra: a rank that exits non-zero having finalized (or never spoken PMI) is said
    /// and counted, and the others run on; a later failure that ends the job combines.
    #[test]
    fn a_plain_non_zero_exit_ends_no_other_rank() {
        let mut c = started(cfg());
        end(&mut c, 1.0, 0, 0, exited(3));
        let fx = c.take_effects();
        assert_eq!(
            (prints(&fx), kills(&fx)),
            (vec!["rank 0 on n1 exited with code 3".into()], vec![])
        );
        assert_eq!(c.status(), 3);
        end(&mut c, 1.1, 0, 2, exited(5));
        assert!(!c.killing());
        assert_eq!(c.status(), 7);
        end(&mut c, 1.2, 0, 1, unfinalized(0));
        let fx = c.take_effects();
        assert_eq!(kills(&fx), [0]);
        assert_eq!(c.status(), 7);
        end(&mut c, 1.3, 0, 3, signaled(libc::SIGTERM));
        let fx = finish(&mut c, 2.0);
        assert_eq!(
            prints(&fx),
            ["exit status 7: the statuses of the 3 ranks that failed, combined \
              (-print-all-exitcodes lists every rank's)"]
        );
    }

    #[test]
    fn segfault_and_exit_2_make_139() {
        let mut c = started(cfg());
        end(&mut c, 1.0, 0, 1, signaled(libc::SIGSEGV));
        assert_eq!(prints(&c.take_effects()), ["rank 1 on n1 was killed by signal 11 (SIGSEGV)"]);
        assert_eq!(c.status(), 139);
        end(&mut c, 1.0, 0, 3, exited(2));
        assert_eq!(c.status(), 139);
        // One combined status that equals the first's: no second line.
        assert!(prints(&finish(&mut c, 2.0)).is_empty());
    }

    #[test]
    fn ranks_ended_by_our_teardown_do_not_count() {
        let mut c = started(cfg());
        end(&mut c, 1.0, 0, 0, unfinalized(3));
        for (rank, e) in [
            (1, signaled(libc::SIGTERM)),
            (2, signaled(libc::SIGKILL)),
            (3, exited(143)),
            (3, exited(137)),
        ] {
            end(&mut c, 1.5, 0, rank, e);
            assert_eq!(c.status(), 3);
        }
        assert!(prints(&finish(&mut c, 2.0)).is_empty());
    }

    #[test]
    fn a_sigterm_we_did_not_send_fails_the_job() {
        let mut c = started(cfg());
        end(&mut c, 1.0, 0, 2, signaled(libc::SIGTERM));
        assert_eq!(c.status(), 143);
        assert_eq!(kills(&c.take_effects()), [0]);
    }

    #[test]
    fn timeout_is_124_with_its_message() {
        let mut c = started(RootConfig { timeout: Some(5.0), ..cfg() });
        assert_eq!(c.poll_timeout(), Some(5.0));
        c.handle_timeout(4.9, &quiet());
        assert!(c.take_effects().is_empty());
        c.handle_timeout(5.0, &quiet());
        let fx = c.take_effects();
        assert_eq!(prints(&fx), ["job timed out after 5 s (MPIEXEC_TIMEOUT); killing it"]);
        assert_eq!(kills(&fx), [0]);
        assert_eq!(c.status(), STATUS_TIMEOUT);
        // What the teardown does to the ranks does not change it.
        end(&mut c, 5.1, 0, 0, signaled(libc::SIGTERM));
        end(&mut c, 5.1, 0, 1, exited(2));
        assert_eq!(c.status(), STATUS_TIMEOUT);
        // The deadline is gone; the teardown's own timers are armed instead (its first
        // output check ran with it).
        assert_eq!(c.poll_timeout(), Some(5.0 + STALLED_CHECK));
    }

    #[test]
    fn a_second_sigint_within_2_s_kills_the_job() {
        let mut c = started(cfg());
        c.root_msg(0.0, 0, Msg::SubtreeUp { nodes: 2, ranks: 4 });
        c.take_effects();
        c.signal(1.0, libc::SIGINT);
        let fx = c.take_effects();
        assert_eq!((forwarded(&fx), kills(&fx).len()), (vec![(0, libc::SIGINT)], 0));
        // 2.5 s later: a first SIGINT again.
        c.signal(3.5, libc::SIGINT);
        let fx = c.take_effects();
        assert_eq!((forwarded(&fx), kills(&fx).len()), (vec![(0, libc::SIGINT)], 0));
        assert_eq!(c.status(), 0);
        c.signal(4.0, libc::SIGINT);
        let fx = c.take_effects();
        assert_eq!(prints(&fx), ["second SIGINT: killing the job"]);
        assert_eq!((forwarded(&fx), kills(&fx)), (vec![], vec![0]));
        assert_eq!(c.status(), 130);
    }

    #[test]
    fn sighup_ends_the_job_other_signals_are_forwarded() {
        let mut c = started(cfg());
        c.signal(1.0, libc::SIGHUP);
        let fx = c.take_effects();
        assert_eq!(
            (prints(&fx), kills(&fx)),
            (vec!["received SIGHUP: terminating the job".to_string()], vec![0])
        );
        assert_eq!(c.status(), 129);
        for sig in [libc::SIGUSR1, libc::SIGUSR2, libc::SIGQUIT, libc::SIGALRM] {
            let mut c = started(cfg());
            c.signal(1.0, sig);
            let fx = c.take_effects();
            assert_eq!((fx.len(), forwarded(&fx)), (1, vec![(0, sig)]), "{sig}: {fx:?}");
            assert_eq!(c.status(), 0);
        }
    }

    /// SIGTERM, as Hydra: forwarded to every rank, and the job ends when the ranks do
    /// (a batch system's SIGTERM gives them time to save their state before its SIGKILL):
    /// no teardown, no SIGKILL after a grace; status 143. Ranks that stop by the SIGTERM
    /// are not failures; another end is said and ends no other rank; a spawn is refused.
    /// A second SIGTERM tears the job down.
    #[test]
    fn sigterm_is_forwarded_and_the_job_ends_with_its_ranks() {
        let mut c = started(cfg());
        c.root_msg(0.5, 0, Msg::SubtreeUp { nodes: 2, ranks: 4 });
        c.take_effects();
        c.signal(1.0, libc::SIGTERM);
        let fx = c.take_effects();
        assert_eq!(
            prints(&fx),
            ["received SIGTERM: forwarded to every rank; the job ends when they do (a second \
              SIGTERM kills it)"]
        );
        assert!(kills(&fx).is_empty());
        assert_eq!(forwarded(&fx), [(0, libc::SIGTERM)]);
        assert_eq!(c.status(), 143);
        assert!(!c.killing());
        end(&mut c, 2.0, 0, 0, signaled(libc::SIGTERM));
        let fx = c.take_effects();
        assert!(prints(&fx).is_empty() && kills(&fx).is_empty(), "{fx:?}");
        end(&mut c, 2.5, 0, 1, RankEnd::Exited { code: 1, clean_pmi: false });
        let fx = c.take_effects();
        assert_eq!(prints(&fx).len(), 1, "{fx:?}");
        assert!(kills(&fx).is_empty());
        assert_eq!(c.status(), 143);
        c.root_msg(2.6, 0, Msg::Spawn { req: 4, spawn: request(0) });
        let fx = c.take_effects();
        assert_eq!(to_groups(&fx), [(0, Msg::SpawnResult { req: 4, rc: -1, jobid: None })]);
        c.signal(3.0, libc::SIGTERM);
        let fx = c.take_effects();
        assert_eq!(prints(&fx), ["second SIGTERM: killing the job"]);
        assert_eq!(kills(&fx), [0]);
        assert_eq!(c.status(), 143);
    }

    /// While the job's ranks are still being started, a SIGTERM ends the job at once (a
    /// passed-on signal would miss the ranks not started yet); a group that comes up after
    /// a passed-on SIGTERM gets it too.
    #[test]
    fn sigterm_while_starting_tears_down() {
        let mut c = started(cfg());
        c.root_msg(0.5, 0, Msg::SubtreeUp { nodes: 1, ranks: 2 });
        c.take_effects();
        c.signal(1.0, libc::SIGTERM);
        let fx = c.take_effects();
        assert_eq!(prints(&fx), ["received SIGTERM while the job was starting: terminating it"]);
        assert_eq!(kills(&fx), [0]);
        assert_eq!(c.status(), 143);
        // So does a SIGINT (Ctrl-C on a launch that hangs).
        let mut c = started(cfg());
        c.signal(1.0, libc::SIGINT);
        let fx = c.take_effects();
        assert_eq!(prints(&fx), ["received SIGINT while the job was starting: terminating it"]);
        assert_eq!((kills(&fx), c.status()), (vec![0], 130));
        // A spawned group still starting when the SIGTERM is passed on gets it once up.
        let mut c = started(cfg());
        c.root_msg(0.5, 0, Msg::SubtreeUp { nodes: 2, ranks: 4 });
        let g = spawned(&mut c);
        c.signal(1.1, libc::SIGTERM);
        c.take_effects();
        c.root_msg(1.2, g, Msg::SubtreeUp { nodes: 1, ranks: 2 });
        let fx = c.take_effects();
        assert_eq!(forwarded(&fx), [(g, libc::SIGTERM)], "{fx:?}");
        assert!(kills(&fx).is_empty());
    }

    #[test]
    fn output_is_acknowledged_in_quarter_windows() {
        let mut c = started(cfg());
        let piece = Bytes::from(vec![b'x'; (OUTPUT_WINDOW / 8) as usize]);
        c.rank_output(0, 1, 2, Stream::Stdout, piece.clone(), &quiet());
        c.rank_output(0, 1, 2, Stream::Stdout, piece, &quiet());
        assert!(matches!(
            c.take_effects().as_slice(),
            [Effect::Output { from: Some(1), .. }, Effect::Output { from: Some(1), .. }]
        ));
        c.output_written(0, 1, OUTPUT_WINDOW / 8);
        assert!(c.take_effects().is_empty());
        c.output_written(0, 1, OUTPUT_WINDOW / 8);
        let fx = c.take_effects();
        assert!(
            matches!(fx.as_slice(), [Effect::Ack { g: 0, idx: 1, bytes }] if *bytes == OUTPUT_WINDOW / 4)
        );
    }

    #[test]
    fn stalled_output_is_dropped_only_while_tearing_down() {
        let mut c = started(cfg());
        let data = Bytes::from_static(b"0123456789");
        let stalled = Streams { stdout: waiting(10.0), ..quiet() };
        // While the job runs, a stopped reader holds the ranks back (nothing dropped).
        c.rank_output(0, 0, 0, Stream::Stdout, data.clone(), &stalled);
        assert!(matches!(c.take_effects().as_slice(), [Effect::Output { .. }]));
        c.signal(10.0, libc::SIGHUP);
        c.take_effects();
        // The first check is when the teardown starts.
        assert_eq!(c.poll_timeout(), Some(10.0));
        c.handle_timeout(10.0, &Streams { stdout: waiting(0.4), ..quiet() });
        assert!(c.take_effects().is_empty(), "0.4 s without a write is not a stall");
        assert_eq!(c.poll_timeout(), Some(10.0 + STALLED_CHECK));
        // Not written for 0.4 s: still written; for 0.5 s: dropped and acknowledged.
        c.rank_output(
            0,
            0,
            0,
            Stream::Stdout,
            data.clone(),
            &Streams { stdout: waiting(0.4), ..quiet() },
        );
        assert!(matches!(c.take_effects().as_slice(), [Effect::Output { .. }]));
        c.rank_output(
            0,
            1,
            0,
            Stream::Stdout,
            data.clone(),
            &Streams { stdout: waiting(0.5), ..quiet() },
        );
        assert!(matches!(c.take_effects().as_slice(), [Effect::Ack { g: 0, idx: 1, bytes: 10 }]));
        // A stall of stdout does not drop stderr output.
        c.rank_output(0, 1, 0, Stream::Stderr, data.clone(), &stalled);
        assert!(matches!(c.take_effects().as_slice(), [Effect::Output { .. }]));
        // A broken stream drops too, but that is not counted as dropped (nobody to tell).
        let broken = StreamState { broken: true, ..StreamState::default() };
        c.rank_output(0, 1, 0, Stream::Stdout, data, &Streams { stdout: broken, ..quiet() });
        assert!(matches!(c.take_effects().as_slice(), [Effect::Ack { bytes: 10, .. }]));
        // The next check finds stdout stalled: everything still owed is acknowledged.
        c.handle_timeout(10.25, &Streams { stdout: waiting(0.6), ..quiet() });
        let mut acks: Vec<_> = c
            .take_effects()
            .into_iter()
            .map(|e| match e {
                Effect::Ack { g, idx, bytes } => (g, idx, bytes),
                other => panic!("{other:?}"),
            })
            .collect();
        acks.sort();
        assert_eq!(acks, [(0, 0, 20), (0, 1, 10)]);
        let fx = finish(&mut c, 11.0);
        assert_eq!(
            prints(&fx),
            ["10 bytes of the ranks' output were dropped: our output was not being read while \
              the job was torn down"]
        );
    }

    #[test]
    fn broken_output_tears_down_with_141_silently() {
        let mut c = started(cfg());
        c.output_broken(1.0);
        let fx = c.take_effects();
        assert_eq!((prints(&fx).len(), kills(&fx)), (0, vec![0]));
        assert_eq!(c.status(), STATUS_BROKEN_OUTPUT);
        assert_eq!(STATUS_BROKEN_OUTPUT, 141);
    }

    #[test]
    fn failed_output_file_fails_the_job_with_255() {
        // During the run: said, and the job is torn down.
        let mut c = started(cfg());
        c.output_file_failed(1.0, "cannot open output file 'x': denied".into());
        let fx = c.take_effects();
        assert_eq!(prints(&fx), ["cannot open output file 'x': denied"]);
        assert_eq!(kills(&fx), vec![0]);
        assert_eq!(c.status(), STATUS_LAUNCH);
        // A failed rank's status is not overwritten by a later file failure.
        let mut c = started(cfg());
        end(&mut c, 1.0, 0, 0, unfinalized(3));
        c.take_effects();
        c.output_file_failed(1.5, "cannot write output file 'x': full".into());
        assert_eq!(prints(&c.take_effects()), ["cannot write output file 'x': full"]);
        assert_eq!(c.status(), 3);
        // After a run that succeeded (output still being written): said, and the job fails.
        let mut c = started(cfg());
        let fx = finish(&mut c, 2.0);
        assert!(prints(&fx).is_empty());
        assert_eq!(c.status(), 0);
        c.output_file_failed(2.5, "cannot write output file 'x': full".into());
        assert_eq!(prints(&c.take_effects()), ["cannot write output file 'x': full"]);
        assert_eq!(c.status(), STATUS_LAUNCH);
    }

    #[test]
    fn outside_name_server() {
        let mut c = started(RootConfig { name_server: true, ..cfg() });
        let op = NameOp::Lookup { service: "svc".into() };
        c.root_msg(0.0, 0, Msg::Name { req: 4, op: op.clone() });
        // Not answered from the job's table: put to the name server.
        let fx = c.take_effects();
        assert!(to_groups(&fx).is_empty(), "{fx:?}");
        assert!(
            matches!(fx.as_slice(), [Effect::AskNameServer { g: 0, req: 4, op: o }] if *o == op),
            "{fx:?}"
        );
        c.name_server_answered(0, 4, Ok((true, Some("tcp://x:1".into()))));
        let fx = c.take_effects();
        let want = Msg::NameResult { req: 4, ok: true, port: Some("tcp://x:1".into()) };
        assert_eq!(to_groups(&fx), [(0, want)]);
        // Unreachable: the request fails; said once, then only logged.
        for req in [5, 6] {
            c.name_server_answered(0, req, Err("cannot reach the name server n1:6392".into()));
            let fx = c.take_effects();
            let want = Msg::NameResult { req, ok: false, port: None };
            assert_eq!(to_groups(&fx), [(0, want)]);
            let said = if req == 5 { vec!["cannot reach the name server n1:6392"] } else { vec![] };
            assert_eq!(prints(&fx), said);
        }
        // The job keeps running.
        assert_eq!(c.phase(), Phase::Run);
    }

    #[test]
    fn name_table() {
        let mut c = started(cfg());
        let mut op = |op: NameOp| {
            c.root_msg(0.0, 0, Msg::Name { req: 9, op });
            match to_groups(&c.take_effects()).as_slice() {
                [(0, Msg::NameResult { req: 9, ok, port })] => (*ok, port.clone()),
                other => panic!("{other:?}"),
            }
        };
        let publish = |port: &str| NameOp::Publish { service: "svc".into(), port: port.into() };
        let lookup = || NameOp::Lookup { service: "svc".into() };
        let unpublish = || NameOp::Unpublish { service: "svc".into() };
        assert_eq!(op(lookup()), (false, None));
        assert_eq!(op(publish("p1")), (true, None));
        assert_eq!(op(publish("p2")), (false, None), "a name is published once");
        assert_eq!(op(lookup()), (true, Some("p1".into())));
        assert_eq!(op(unpublish()), (true, None));
        assert_eq!(op(unpublish()), (false, None));
        assert_eq!(op(lookup()), (false, None));
        assert_eq!(op(publish("p3")), (true, None));
    }

    fn request(rank: u32) -> Box<SpawnRequest> {
        Box::new(SpawnRequest { rank, app: 0, host: "n1".into(), cmds: Vec::new() })
    }

    /// Rank 1 of the job asks to spawn (request 7); the new group (1 NLA) starts.
    fn spawned(c: &mut RootCore) -> usize {
        c.root_msg(1.0, 0, Msg::Spawn { req: 7, spawn: request(1) });
        let who = match c.take_effects().as_slice() {
            [Effect::Spawn { g: 0, req: 7, who, .. }] => who.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(who, "rank 1 on n1");
        c.spawn_started(1.0, 0, 7, who, 1, "kvs1".into(), None, "addr")
    }

    #[test]
    fn a_waiting_lookup_is_answered_when_the_name_is_published() {
        let mut c = started(cfg());
        let g = spawned(&mut c);
        c.take_effects();
        c.root_msg(1.0, g, Msg::NameWait { req: 3, service: "port:accept".into() });
        assert!(to_groups(&c.take_effects()).is_empty(), "held until published");
        let op = NameOp::Publish { service: "port:accept".into(), port: "p".into() };
        c.root_msg(1.1, 0, Msg::Name { req: 4, op });
        let got = to_groups(&c.take_effects());
        assert!(got.contains(&(0, Msg::NameResult { req: 4, ok: true, port: None })), "{got:?}");
        let held = Msg::NameResult { req: 3, ok: true, port: Some("p".into()) };
        assert!(got.contains(&(g, held)), "{got:?}");
        // Published already: answered at once.
        c.root_msg(1.2, g, Msg::NameWait { req: 5, service: "port:accept".into() });
        let now = Msg::NameResult { req: 5, ok: true, port: Some("p".into()) };
        assert_eq!(to_groups(&c.take_effects()), [(g, now)]);
    }

    fn pmix_peer(nspace: &str, size: u32) -> libi::job::PmixPeer {
        libi::job::PmixPeer {
            nspace: nspace.into(),
            size,
            apps: vec![size],
            map: libi::job::PmixJob {
                nodes: vec![("n1".into(), (0..size).collect())],
                parent: None,
            },
        }
    }

    /// A connect of the job (4 ranks, wildcard) and its spawned group (2 ranks): complete
    /// once all 6 entered, wherever they are; both groups are answered, with both maps.
    #[test]
    fn a_connect_across_groups_completes_when_every_participant_entered() {
        let mut c = started(cfg());
        let g = spawned(&mut c);
        c.take_effects();
        c.set_pmix(0, pmix_peer("kvs0", 4));
        c.set_pmix(g, pmix_peer("kvs1", 2));
        let wild = crate::proto::pmix::WILDCARD;
        let procs = vec![("kvs0".to_string(), wild), ("kvs1".to_string(), wild)];
        let enter = |c: &mut RootCore, grp: usize, count: u32, ns: &str, size: u32| {
            let m = Msg::PmixConnect {
                key: "k".into(),
                procs: procs.clone(),
                count,
                sizes: vec![(ns.into(), size)],
                ctxid: grp == g,
                blob: vec![grp as u8],
            };
            c.root_msg(1.0, grp, m);
            to_groups(&c.take_effects())
        };
        assert!(enter(&mut c, 0, 2, "kvs0", 4).is_empty());
        assert!(enter(&mut c, g, 2, "kvs1", 2).is_empty(), "2 of the job's 4 are missing");
        let done = enter(&mut c, 0, 2, "kvs0", 4);
        assert_eq!(done.len(), 2, "{done:?}");
        for (to, m) in &done {
            match m {
                Msg::PmixConnectDone { key, status: 0, ctxid: Some(1), jobs, blob } => {
                    assert_eq!(key, "k");
                    assert_eq!(jobs.len(), 2, "both groups' maps");
                    assert_eq!(blob.len(), 3, "every contribution once");
                }
                other => panic!("to {to}: {other:?}"),
            }
        }
        let mut to: Vec<usize> = done.iter().map(|(t, _)| *t).collect();
        to.sort();
        assert_eq!(to, [0, g]);
    }

    /// A direct modex for another group's rank goes to that group, and its answer back.
    #[test]
    fn a_direct_modex_crosses_groups_and_comes_back() {
        let mut c = started(cfg());
        let g = spawned(&mut c);
        c.take_effects();
        let ask = Msg::PmixDmodex { from: "kvs0".into(), req: 11, nspace: "kvs1".into(), rank: 1 };
        c.root_msg(1.0, 0, ask.clone());
        assert_eq!(to_groups(&c.take_effects()), [(g, ask)]);
        let data =
            Msg::PmixDmodexData { from: "kvs0".into(), req: 11, status: 0, blob: vec![7, 7] };
        c.root_msg(1.1, g, data.clone());
        assert_eq!(to_groups(&c.take_effects()), [(0, data)]);
        // No such namespace: answered "not found" at once.
        let ask = Msg::PmixDmodex { from: "kvs0".into(), req: 12, nspace: "nope".into(), rank: 0 };
        c.root_msg(1.2, 0, ask);
        match to_groups(&c.take_effects()).as_slice() {
            [(0, Msg::PmixDmodexData { req: 12, status, .. })] => {
                assert_eq!(*status, libi_pmix::proto::status::ERR_NOT_FOUND)
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_spawn_is_answered_when_its_ranks_run() {
        let mut c = started(cfg());
        let g = spawned(&mut c);
        assert_eq!(g, 1);
        assert!(to_groups(&c.take_effects()).is_empty());
        c.root_msg(1.2, g, Msg::SubtreeUp { nodes: 1, ranks: 2 });
        let answer = Msg::SpawnResult { req: 7, rc: 0, jobid: Some("kvs1".into()) };
        assert_eq!(to_groups(&c.take_effects()), [(0, answer)]);
    }

    #[test]
    fn a_failed_spawn_launch_fails_the_spawn_not_the_job() {
        let mut c = started(cfg());
        let g = spawned(&mut c);
        let lost = Msg::SubtreeLost { host: "n1".into(), ranks: 2, message: "lost n1".into() };
        c.root_msg(1.5, g, lost);
        let fx = c.take_effects();
        assert_eq!(prints(&fx), ["spawn by rank 1 on n1 failed: lost n1"]);
        assert_eq!(kills(&fx), [g]);
        assert_eq!(to_groups(&fx), [(0, Msg::SpawnResult { req: 7, rc: -1, jobid: None })]);
        assert!(c.abandoned(g) && !c.killing() && c.status() == 0);
        // Its ranks' ends and aborts do not fail the job either.
        end(&mut c, 1.6, g, 0, exited(9));
        c.root_msg(1.6, g, Msg::Abort { rank: 0, host: "n1".into(), code: 4, message: None });
        assert!(c.take_effects().is_empty());
        assert_eq!(c.status(), 0);
    }

    #[test]
    fn a_spawned_rank_that_fails_fails_the_job() {
        let mut c = started(cfg());
        let g = spawned(&mut c);
        end(&mut c, 1.5, g, 1, exited(2));
        let fx = c.take_effects();
        assert_eq!(prints(&fx), ["rank 1 of spawn 1 on n1 exited with code 2"]);
        assert!(kills(&fx).is_empty(), "a plain non-zero exit ends no other rank");
        end(&mut c, 1.5, g, 0, unfinalized(4));
        let fx = c.take_effects();
        assert_eq!(
            prints(&fx),
            ["rank 0 of spawn 1 on n1 exited with code 4 without calling PMI finalize"]
        );
        assert_eq!(kills(&fx), [0, 1]);
        assert_eq!(c.status(), 6);
    }

    #[test]
    fn refused_spawns_and_none_while_tearing_down() {
        let mut c = started(cfg());
        c.spawn_refused(0, 3, "rank 1 on n1", "nothing to spawn");
        let fx = c.take_effects();
        assert_eq!(prints(&fx), ["spawn by rank 1 on n1 failed: nothing to spawn"]);
        assert_eq!(to_groups(&fx), [(0, Msg::SpawnResult { req: 3, rc: -1, jobid: None })]);
        c.signal(2.0, libc::SIGHUP);
        c.take_effects();
        c.root_msg(2.1, 0, Msg::Spawn { req: 4, spawn: request(0) });
        assert!(c.take_effects().is_empty());
    }

    #[test]
    fn the_jobs_nlas_start_a_spawn_where_they_still_run_ranks() {
        let mut c = started(cfg());
        let hosts = ["n2".to_string(), "n1".to_string()];
        assert_eq!(c.spawn_agents(&hosts), Some(vec![(2, "n2".into()), (1, "n1".into())]));
        assert_eq!(c.spawn_agents(&["elsewhere".into()]), None);
        let g = c.spawn_started(1.0, 0, 1, "w".into(), 2, "k".into(), c.spawn_agents(&hosts), "a");
        let starts = to_groups(&c.take_effects());
        assert_eq!(starts.len(), 2);
        assert!(
            matches!(&starts[0], (0, Msg::StartNla { target: 2, front_end, .. }) if front_end == "a")
        );
        assert_eq!(g, 1);
        // n2's ranks ended (cleanly): its NLA may go away, so it cannot start one.
        end(&mut c, 2.0, 0, 2, exited(0));
        assert!(c.spawn_agents(&hosts).is_some());
        end(&mut c, 2.0, 0, 3, exited(0));
        assert_eq!(c.spawn_agents(&hosts), None);
        assert!(c.spawn_agents(&["n1".into()]).is_some());
        let joins = started(RootConfig { launcher_joins: true, ..cfg() });
        assert_eq!(joins.spawn_agents(&["n1".into()]), None);
    }

    /// Ranks placed round-robin (n1: 0, 1, 4; n2: 2, 3, 5) are found on their node from runs,
    /// not from a table of every rank.
    #[test]
    fn ranks_are_found_on_their_node_by_runs() {
        let node = |node: u32, host: &str, ranks: Vec<u32>| NodePlan {
            node,
            host: host.into(),
            ranks: ranks.into_iter().map(|rank| RankSlot { rank, app: 0 }).collect(),
            children: Vec::new(),
        };
        let p = NodePlan {
            children: vec![node(1, "n1", vec![0, 1, 4]), node(2, "n2", vec![2, 3, 5])],
            ..node(0, "root", vec![])
        };
        let c = RootCore::new(cfg(), &p, 6, 0.0);
        assert_eq!(c.rank_runs.len(), 4);
        let nodes: Vec<Option<u32>> = (0..7).map(|r| c.node_of_rank(r)).collect();
        assert_eq!(nodes, [Some(1), Some(1), Some(2), Some(2), Some(1), Some(2), None]);
    }

    #[test]
    fn disable_auto_cleanup_keeps_the_job_and_ors_the_statuses() {
        let mut c = started(RootConfig { no_cleanup: true, ..cfg() });
        end(&mut c, 1.0, 0, 0, unfinalized(3));
        let fx = c.take_effects();
        assert_eq!(
            (prints(&fx), kills(&fx)),
            (vec!["rank 0 on n1 exited with code 3 without calling PMI finalize".into()], vec![])
        );
        assert_eq!(c.status(), 3);
        end(&mut c, 2.0, 0, 2, signaled(libc::SIGSEGV));
        assert_eq!(prints(&c.take_effects()), ["rank 2 on n2 was killed by signal 11 (SIGSEGV)"]);
        assert_eq!(c.status(), 139);
        assert!(!c.killing());
        // An abort still ends the job, with its code.
        c.root_msg(2.5, 0, Msg::Abort { rank: 1, host: "n1".into(), code: 6, message: None });
        let fx = c.take_effects();
        assert_eq!(prints(&fx), ["rank 1 on n1 called MPI_Abort with exit code 6"]);
        assert_eq!(kills(&fx), [0]);
        assert_eq!(c.status(), 6);
    }

    #[test]
    fn abort_messages_are_escaped_and_named() {
        let mut c = started(cfg());
        let message = Some("bad\nthing".to_string());
        c.root_msg(1.0, 0, Msg::Abort { rank: 2, host: "n2".into(), code: 17, message });
        assert_eq!(
            prints(&c.take_effects()),
            ["rank 2 on n2 called MPI_Abort with exit code 17: bad\\x0athing"]
        );
        assert_eq!(c.status(), 17);
    }

    #[test]
    fn teardown_gives_up_after_grace_plus_slack() {
        let mut c = started(cfg());
        end(&mut c, 1.0, 0, 0, unfinalized(1));
        c.take_effects();
        let limit = 1.0 + 3.0 + TEARDOWN_SLACK;
        let mut t = 1.0;
        while let Some(next) = c.poll_timeout().filter(|&n| n < limit) {
            t = next;
            c.handle_timeout(t, &quiet());
            assert_eq!(c.phase(), Phase::Run);
        }
        assert!(t < limit);
        assert_eq!(c.poll_timeout(), Some(limit));
        c.handle_timeout(limit, &quiet());
        let fx = c.take_effects();
        assert!(matches!(fx.as_slice(), [Effect::Warn(_), Effect::CloseTree]));
        // The hosts whose ranks did not report their end are named.
        let Effect::Warn(m) = &fx[0] else { unreachable!() };
        assert_eq!(
            m,
            "the NLAs did not finish tearing the job down in time (ranks not ended on n1, n2)"
        );
        assert_eq!(c.phase(), Phase::Close);
    }

    #[test]
    fn the_nlas_get_5_s_to_close_once_every_rank_ended() {
        let mut c = started(cfg());
        c.tree_state(1.0, false, 2);
        assert_eq!(c.poll_timeout(), None);
        c.tree_state(2.0, false, 0);
        assert_eq!(c.poll_timeout(), Some(2.0 + CHILDREN_WAIT));
        // Not re-armed later.
        c.tree_state(3.0, false, 0);
        assert_eq!(c.poll_timeout(), Some(2.0 + CHILDREN_WAIT));
        c.handle_timeout(6.9, &quiet());
        assert_eq!(c.phase(), Phase::Run);
        c.handle_timeout(7.0, &quiet());
        assert_eq!(c.phase(), Phase::Close);
        assert!(matches!(c.take_effects().as_slice(), [Effect::CloseTree]));
        // The launchers get LAUNCHER_WAIT, then the end is written.
        assert_eq!(c.poll_timeout(), Some(7.0 + LAUNCHER_WAIT));
        c.signal(8.0, libc::SIGINT);
        assert!(c.take_effects().is_empty(), "signals wait while the links close");
        c.handle_timeout(12.0, &quiet());
        assert_eq!(c.phase(), Phase::Flush);
        assert!(matches!(
            c.take_effects().as_slice(),
            [Effect::StopLaunchers, Effect::WriteReport, Effect::CloseOutput]
        ));
        c.output_finished();
        assert_eq!(c.phase(), Phase::Flush);
        c.output_finished();
        assert_eq!(c.phase(), Phase::Done);
        assert_eq!(c.status(), 0);
    }

    #[test]
    fn flushing_stops_for_a_stalled_reader_only_after_a_failure() {
        let stalled = Streams { stderr: waiting(1.0), ..quiet() };
        let mut ok = started(cfg());
        finish(&mut ok, 1.0);
        ok.handle_timeout(1.0, &stalled);
        ok.handle_timeout(5.0, &stalled);
        assert_eq!(ok.phase(), Phase::Flush, "a job that succeeded waits for its reader");
        let mut failed = started(cfg());
        end(&mut failed, 1.0, 0, 0, unfinalized(2));
        finish(&mut failed, 1.5);
        failed.handle_timeout(1.5, &quiet());
        assert_eq!(failed.phase(), Phase::Flush);
        failed.handle_timeout(1.5 + FLUSH_CHECK, &stalled);
        assert_eq!((failed.phase(), failed.status()), (Phase::Done, 2));
        // A signal ends the wait; it sets the status only when none is set.
        ok.signal(6.0, libc::SIGINT);
        assert_eq!((ok.phase(), ok.status()), (Phase::Done, 130));
    }

    /// `MPIEXEC_TIMEOUT` while the output is being flushed (the ranks are gone, a reader is
    /// not reading): a line says so, and the job ends once it is written (or cannot be),
    /// with status 124; a stuck stdout does not cost stderr that line.
    #[test]
    fn timeout_while_flushing_says_so_then_ends() {
        let mut c = started(RootConfig { timeout: Some(5.0), ..cfg() });
        finish(&mut c, 1.0);
        let stdout_stuck = Streams { stdout: waiting(4.0), ..quiet() };
        c.handle_timeout(2.0, &stdout_stuck);
        assert_eq!(c.phase(), Phase::Flush, "a job that succeeded waits for its reader");
        c.handle_timeout(5.0, &stdout_stuck);
        let fx = c.take_effects();
        assert!(
            matches!(fx.as_slice(), [Effect::Print(m)] if m.starts_with("job timed out after 5 s")),
            "{fx:?}"
        );
        assert_eq!(c.phase(), Phase::Flush, "the line is not written yet");
        let line_queued = Streams { stdout: waiting(4.0), stderr: waiting(0.0) };
        c.handle_timeout(5.0 + FLUSH_CHECK, &line_queued);
        assert_eq!(c.phase(), Phase::Flush);
        c.handle_timeout(5.0 + 2.0 * FLUSH_CHECK, &stdout_stuck);
        assert_eq!((c.phase(), c.status()), (Phase::Done, STATUS_TIMEOUT));
        // A stderr that is not read either: the wait for the line is bounded.
        let mut c = started(RootConfig { timeout: Some(5.0), ..cfg() });
        finish(&mut c, 1.0);
        let both = Streams { stdout: waiting(4.0), stderr: waiting(0.1) };
        c.handle_timeout(5.0, &both);
        c.handle_timeout(5.0 + FLUSH_CHECK, &both);
        assert_eq!(c.phase(), Phase::Flush);
        c.handle_timeout(5.0 + STALLED_OUTPUT, &both);
        assert_eq!((c.phase(), c.status()), (Phase::Done, STATUS_TIMEOUT));
    }

    /// A failed job flushing its output does not wait for a stuck stdout, but does wait for
    /// stderr to write what it holds (why the job failed).
    #[test]
    fn stuck_stdout_does_not_cost_stderr_its_lines() {
        let mut failed = started(cfg());
        end(&mut failed, 1.0, 0, 0, unfinalized(2));
        finish(&mut failed, 1.5);
        let stderr_busy = Streams { stdout: waiting(2.0), stderr: waiting(0.0) };
        failed.handle_timeout(1.5 + FLUSH_CHECK, &stderr_busy);
        assert_eq!(failed.phase(), Phase::Flush);
        let stderr_done = Streams { stdout: waiting(2.0), ..quiet() };
        failed.handle_timeout(1.5 + 2.0 * FLUSH_CHECK, &stderr_done);
        assert_eq!(failed.phase(), Phase::Done);
    }

    #[test]
    fn progress_line_only_on_a_terminal_and_after_a_second() {
        assert_eq!(started(cfg()).poll_timeout(), None, "no terminal: no redraws");
        let mut c = started(RootConfig { progress: true, ..cfg() });
        let terminal = |c: &mut RootCore, t: f64| {
            assert_eq!(c.poll_timeout(), Some(t));
            c.handle_timeout(t, &quiet());
            c.take_effects()
                .into_iter()
                .map(|e| match e {
                    Effect::Terminal(s) => s,
                    other => panic!("{other:?}"),
                })
                .collect::<Vec<_>>()
        };
        for t in [0.25, 0.5, 0.75, 1.0] {
            assert!(terminal(&mut c, t).is_empty());
        }
        assert_eq!(terminal(&mut c, 1.25), ["\rlibi-mpiexec: started 0/4 ranks on 0/2 nodes "]);
        c.root_msg(1.3, 0, Msg::SubtreeUp { nodes: 1, ranks: 2 });
        c.root_msg(1.4, 0, Msg::SubtreeUp { nodes: 1, ranks: 2 });
        assert_eq!(c.launch_time(), Some(1.4));
        assert_eq!(terminal(&mut c, 1.5), ["\rlibi-mpiexec: started 4/4 ranks on 2/2 nodes \n"]);
        assert!(terminal(&mut c, 1.75).is_empty());
    }

    #[test]
    fn a_progress_line_is_ended_when_the_run_ends() {
        let mut c = started(RootConfig { progress: true, ..cfg() });
        for t in [0.25, 0.5, 0.75, 1.0, 1.25] {
            c.handle_timeout(t, &quiet());
        }
        c.take_effects();
        c.tree_state(1.3, true, 0);
        assert!(matches!(
            c.take_effects().as_slice(),
            [Effect::Terminal(s), Effect::CloseTree] if s.ends_with('\n')
        ));
    }

    #[test]
    fn print_all_exitcodes_lists_wait_statuses_per_host() {
        let mut c = started(RootConfig { print_all_exitcodes: true, no_cleanup: true, ..cfg() });
        end(&mut c, 1.0, 0, 0, exited(0));
        end(&mut c, 1.0, 0, 1, exited(3));
        end(&mut c, 1.0, 0, 2, signaled(libc::SIGSEGV));
        end(&mut c, 1.0, 0, 3, exited(0));
        finish(&mut c, 2.0);
        c.output_finished();
        c.output_finished();
        let fx = c.take_effects();
        assert!(matches!(
            fx.as_slice(),
            [Effect::Stdout(s)] if s == "[mpiexec@root] Exit codes: [n1] 0,768\n[n2] 11,0\n"
        ));
        assert_eq!(c.status(), 139, "3 and SIGSEGV combined");
    }

    #[test]
    fn a_job_that_could_not_start_is_255() {
        let mut c =
            RootCore::new(RootConfig { print_all_exitcodes: true, ..cfg() }, &plan(), 4, 0.0);
        c.start_failed("cannot listen".into());
        assert!(matches!(
            c.take_effects().as_slice(),
            [Effect::Print(m), Effect::CloseOutput] if m == "cannot listen"
        ));
        c.signal(0.5, libc::SIGINT);
        assert_eq!((c.phase(), c.status()), (Phase::Done, STATUS_LAUNCH));
        assert!(c.take_effects().is_empty(), "no exit codes for a job that never ran");
    }

    #[test]
    fn singleton_without_finalize_is_named_as_such() {
        let mut c = started(RootConfig { singleton: true, ..cfg() });
        end(&mut c, 1.0, 0, 0, RankEnd::Exited { code: 0, clean_pmi: false });
        assert_eq!(
            prints(&c.take_effects()),
            ["the singleton (rank 0 on n1) closed its PMI connection without finalize"]
        );
        assert_eq!(c.status(), 1);
    }

    #[test]
    fn rendezvous_adopts_root_children_and_redirects_the_others_to_their_parent() {
        // root -> n1 -> (n3, n4); root -> n2.
        let leaf = |node: u32, host: &str| NodePlan {
            node,
            host: host.into(),
            ranks: Vec::new(),
            children: Vec::new(),
        };
        let n1 = NodePlan { children: vec![leaf(3, "n3"), leaf(4, "n4")], ..leaf(1, "n1") };
        let root = NodePlan { children: vec![n1, leaf(2, "n2")], ..leaf(0, "root") };
        let mut r: Rendezvous<&str> = Rendezvous::new(&root);
        let none = |_: u32| false;
        // n3 joins before its parent: it waits.
        assert!(r.join("n3".into(), "n3:1".into(), "c3", none).is_empty());
        let out = r.join("n1".into(), "n1:1".into(), "c1", none);
        assert!(matches!(
            out.as_slice(),
            [Join::Adopt { node: 1, conn: "c1", .. }, Join::Redirect { conn: "c3", node: 3, parent }]
                if parent == "n1:1"
        ));
        let out = r.join("n4".into(), "n4:1".into(), "c4", none);
        assert!(matches!(
            out.as_slice(),
            [Join::Redirect { conn: "c4", node: 4, parent }] if parent == "n1:1"
        ));
        assert!(matches!(
            r.join("n1".into(), "x".into(), "again", none).as_slice(),
            [Join::Drop(_)]
        ));
        assert!(matches!(r.join("zz".into(), "x".into(), "who", none).as_slice(), [Join::Drop(_)]));
        // n2 already has a link (it connected directly): a join is dropped.
        let out = r.join("n2".into(), "n2:1".into(), "c2", |n| n == 2);
        assert!(matches!(out.as_slice(), [Join::Drop(_)]));
    }

    /// EPIPE on our stdout or stderr: nobody reads it, the job is torn down silently with
    /// 141. Any other write error is said, naming the stream, and fails the job with 255.
    #[test]
    fn a_failed_write_of_ours_is_judged_by_its_errno() {
        let mut c = started(cfg());
        c.our_output_failed(1.0, Stream::Stdout, Some(libc::EPIPE), "Broken pipe (os error 32)");
        let fx = c.take_effects();
        assert_eq!((prints(&fx).len(), kills(&fx)), (0, vec![0]));
        assert_eq!(c.status(), 141);
        for (errno, stream) in [(Some(libc::ENOSPC), Stream::Stderr), (None, Stream::Stdout)] {
            let mut c = started(cfg());
            c.our_output_failed(1.0, stream, errno, "it failed");
            let fx = c.take_effects();
            let want = format!("cannot write our {}: it failed", stream.name());
            assert_eq!((prints(&fx), kills(&fx)), (vec![want], vec![0]));
            assert_eq!(c.status(), STATUS_LAUNCH);
        }
    }

    /// `--end-on-stdin-eof`: the end of our stdin is said, then ends the job as SIGTERM
    /// does (passed on to the ranks, status 143); a second one kills the job. Outside the
    /// run it changes nothing.
    #[test]
    fn the_life_line_ends_the_job_as_sigterm() {
        let mut c = started(cfg());
        c.root_msg(0.5, 0, Msg::SubtreeUp { nodes: 2, ranks: 4 });
        c.take_effects();
        c.life_line_lost(3.0);
        let fx = c.take_effects();
        assert_eq!(
            prints(&fx),
            [
                "the program that started this job is gone (end of file on stdin, \
                 --end-on-stdin-eof): ending the job",
                "received SIGTERM: forwarded to every rank; the job ends when they do (a second \
                 SIGTERM kills it)"
            ]
        );
        assert_eq!(forwarded(&fx), [(0, libc::SIGTERM)]);
        assert_eq!(c.status(), 143);
        let mut c = started(cfg());
        finish(&mut c, 2.0);
        c.life_line_lost(3.0);
        assert!(c.take_effects().is_empty());
        assert_eq!(c.status(), 0);
    }

    /// Rank 0's acknowledgements of its stdin become credit for our stdin's reader.
    #[test]
    fn stdin_acknowledged_by_rank_0_is_credit_for_more() {
        let mut c = started(cfg());
        c.root_msg(1.0, 0, Msg::StdinAck { bytes: 4096 });
        let fx = c.take_effects();
        assert!(matches!(fx.as_slice(), [Effect::StdinCredit(4096)]), "{fx:?}");
    }

    #[test]
    fn stdin_comes_from_ours_the_life_line_or_nowhere() {
        assert_eq!(stdin_source(false, false), StdinSource::Ours);
        assert_eq!(stdin_source(true, false), StdinSource::LifeLine);
        assert_eq!(stdin_source(true, true), StdinSource::LifeLine);
        assert_eq!(stdin_source(false, true), StdinSource::Nothing);
    }

    /// ssh or rsh to hosts that are all this machine: fork (unless autofork is off), with
    /// the planned launcher for a spawn's other hosts. The default fork (no host named)
    /// spawns onto other hosts with ssh; an explicit fork keeps fork. The hosts are looked
    /// at only for ssh and rsh under autofork.
    #[test]
    fn the_job_launcher_and_the_remote_one() {
        use LauncherKind::{Fork, Rsh, Slurm, Ssh};
        let never = || -> bool { panic!("the hosts are not looked at") };
        let l = |job, remote| Launchers { job, remote };
        assert_eq!(job_launcher(Ssh, false, true, || true), l(Fork, Some(Ssh)));
        assert_eq!(job_launcher(Rsh, true, true, || true), l(Fork, Some(Rsh)));
        assert_eq!(job_launcher(Ssh, false, true, || false), l(Ssh, None));
        assert_eq!(job_launcher(Ssh, false, false, never), l(Ssh, None));
        assert_eq!(job_launcher(Fork, false, true, never), l(Fork, Some(Ssh)));
        assert_eq!(job_launcher(Fork, true, true, never), l(Fork, None));
        assert_eq!(job_launcher(Slurm, true, true, never), l(Slurm, None));
    }

    #[test]
    fn a_spawned_group_is_started_by_the_agents_the_job_launcher_or_the_remote_one() {
        use LauncherKind::{Fork, Rsh, Slurm, Ssh};
        assert_eq!(spawn_launcher(Fork, Some(Ssh), true), SpawnLauncher::Joined);
        assert_eq!(spawn_launcher(Slurm, None, true), SpawnLauncher::Joined);
        assert_eq!(spawn_launcher(Fork, Some(Rsh), false), SpawnLauncher::Remote(Rsh));
        assert_eq!(spawn_launcher(Fork, None, false), SpawnLauncher::Job);
        assert_eq!(spawn_launcher(Ssh, None, false), SpawnLauncher::Job);
    }

    #[test]
    fn a_spawn_reads_its_hostfile_unless_told_where() {
        let info = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        assert_eq!(spawn_hostfile(&info(&[("hostfile", "/h")])), Some("/h"));
        assert_eq!(spawn_hostfile(&info(&[("wdir", "/w"), ("hostfile", "/h")])), Some("/h"));
        assert_eq!(spawn_hostfile(&info(&[("hostfile", "/h"), ("hosts", "")])), Some("/h"));
        assert_eq!(spawn_hostfile(&info(&[("hostfile", "")])), None);
        assert_eq!(spawn_hostfile(&info(&[("hostfile", "/h"), ("host", "n1")])), None);
        assert_eq!(spawn_hostfile(&info(&[("hosts", "n1:2"), ("hostfile", "/h")])), None);
        assert_eq!(spawn_hostfile(&info(&[])), None);
        let host = |name: &str, slots| Host { name: name.into(), slots, user: None, binding: None };
        assert_eq!(hosts_info(&[host("n1", 2), host("n2", 1)]), "n1:2,n2:1");
        assert_eq!(hosts_info(&[]), "");
    }
}

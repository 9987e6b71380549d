//! The simulated cluster: one real [`NodeCore`] per agent and one for the front end (the
//! root, node 0), driven by a discrete-event queue in virtual time. There are no sockets and
//! no processes: a tree message is moved from one core to another after the link's latency
//! and transfer time, a rank is a replay of a PMI-1 conversation, a node is an event loop
//! (each event it handles costs `cpu_msg + cpu_byte × bytes` of CPU, one after the other;
//! what it sends costs `cpu_send` of that). With shared cores (`Costs::cores`) every
//! process's CPU work — event loops, launches, forks, starting ranks, ranks' steps — shares
//! them by processor sharing, as the kernel's fair scheduler does.
//!
//! What is the real code here: every PMI answer, KVS and fence decision, every tree message
//! and its size, failure classification (the node cores), and the front end's job policy
//! (the root core, [`RootCore`]: the exit status, the job's failure messages, teardown and
//! its timers, spawn answers): the simulation is N agent cores plus the root core.
//! What is modeled: the costs of [`Costs`], the child launch (SEQ/REM with `c` lanes and
//! batches), rank processes, the front end's own I/O (it has no output to write and no
//! launcher processes to wait for), and in a PMIx job each node's PMIx server (`libi-pmix`
//! with libpmix, `Companion`): it turns its local ranks' calls into the messages the real
//! companion sends its agent's core (`NodeCore::pmix_msg`), as libpmix calls its host, and
//! releases them on the core's answers (`Effect::ToPmix`); the fences themselves are the
//! core's.

use crate::model::{ns, secs, Costs, Time};
use crate::workload::{
    answer_cmd, answer_rc, answer_value, pmgr_expected, pmgr_request, BlobLaw, PmgrOp, PmixOp,
    Trace, Who,
};
use libi::job::{
    AppSpec, JobCommon, KvsNames, LauncherKind, LauncherSpec, NodePlan, NodeSetup, RankSlot,
    SpawnRequest,
};
use libi::msg::Msg;
use libi::spawn::{SpawnBase, Spawner};
use libi::tree::Shape;
use libi_node::proto::launch::{GiveUp, Launches};
use libi_node::proto::node::{Effect, NodeCore, ProcEnd};
use libi_node::proto::root::{Effect as RootEffect, Phase, RootConfig, RootCore, Streams};
use libi_pmix::proto::{FromCompanion, Proc as PmixProc, ToCompanion, RANK_WILDCARD};
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::rc::Rc;

/// A fault to inject.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// The agent of node `node` dies at `at` (its process and its ranks are gone).
    Kill { node: u32, at: f64 },
    /// The link between `node` and its parent breaks at `at`.
    Drop { node: u32, at: f64 },
    /// The link between `node` and its parent is `factor` times slower (latency and
    /// transfer time).
    Slow { node: u32, factor: f64 },
    /// The agent of `node` never starts (its launch never connects back).
    Never { node: u32 },
}

impl std::str::FromStr for Fault {
    type Err = String;

    /// `kill:NODE@T`, `drop:NODE@T`, `slow:NODE:FACTOR`, `never:NODE`.
    fn from_str(s: &str) -> Result<Fault, String> {
        let bad =
            || format!("bad fault '{s}' (kill:NODE@T, drop:NODE@T, slow:NODE:FACTOR, never:NODE)");
        let (kind, rest) = s.split_once(':').ok_or_else(bad)?;
        let num = |v: &str| v.parse::<f64>().ok().filter(|x| x.is_finite() && *x >= 0.0);
        let node = |v: &str| v.parse::<u32>().ok().filter(|n| *n > 0);
        match kind {
            "kill" | "drop" => {
                let (n, t) = rest.split_once('@').ok_or_else(bad)?;
                let (node, at) = (node(n).ok_or_else(bad)?, num(t).ok_or_else(bad)?);
                Ok(if kind == "kill" { Fault::Kill { node, at } } else { Fault::Drop { node, at } })
            }
            "slow" => {
                let (n, f) = rest.split_once(':').ok_or_else(bad)?;
                let factor = num(f).filter(|f| *f >= 1.0).ok_or_else(bad)?;
                Ok(Fault::Slow { node: node(n).ok_or_else(bad)?, factor })
            }
            "never" => Ok(Fault::Never { node: node(rest).ok_or_else(bad)? }),
            _ => Err(bad()),
        }
    }
}

/// A simulation to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Agents (nodes with ranks); the front end comes on top.
    pub nodes: usize,
    pub ppn: u32,
    pub shape: Shape,
    pub costs: Costs,
    pub batch: Option<u32>,
    /// `--kvs-push-max`: fences up to this many bytes of pairs push them to every agent.
    pub push_max: u64,
    pub launch_timeout: f64,
    pub max_conn: usize,
    pub faults: Vec<Fault>,
    pub seed: u64,
    pub workload: Trace,
    /// Virtual seconds after which the run is stopped as hung.
    pub limit: f64,
    /// The launch model the tree is planned for (`libi-mpiexec --launch-model`); `None`:
    /// the one the costs imply (greedy is then optimal for the simulated costs).
    pub plan_model: Option<libi::tree::LaunchModel>,
    /// PMIx jobs: a fence whose participants all run on one server is completed by libpmix
    /// itself, without asking the host (libpmix's default,
    /// `PMIX_MCA_pmix_server_fence_localonly_opt=1`): a one-node job's fences never reach
    /// its agent. `false`: every fence is asked of the agent.
    pub pmix_localonly: bool,
}

impl Config {
    pub fn new(nodes: usize, ppn: u32, workload: Trace) -> Config {
        Config {
            nodes,
            ppn,
            shape: Shape::Greedy,
            costs: Costs::default(),
            batch: None,
            push_max: 16 << 20,
            launch_timeout: 60.0,
            max_conn: libi::tree::DEFAULT_MAX_CONN,
            faults: Vec::new(),
            seed: 1,
            workload,
            limit: 3600.0,
            plan_model: None,
            pmix_localonly: true,
        }
    }
}

impl Config {
    /// The job's plan (the tree launched: its shape, with fan-outs above `max_conn`
    /// re-parented) with `ppn` ranks on each agent.
    pub fn plan(&self, ppn: u32) -> Result<NodePlan, libi::job::TooDeep> {
        let model = self.costs.launch_model(self.batch);
        let per_node: Vec<(String, Vec<RankSlot>)> = (0..self.nodes as u32)
            .map(|i| {
                let ranks = (0..ppn).map(|r| RankSlot { rank: i * ppn + r, app: 0 }).collect();
                (format!("n{}", i + 1), ranks)
            })
            .collect();
        let plan_model = self.plan_model.unwrap_or(model);
        NodePlan::tree(per_node, &self.shape, &plan_model, self.max_conn, "fe")
    }
}

/// Tree traffic of one node.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Traffic {
    pub msgs_in: u64,
    pub bytes_in: u64,
    pub msgs_out: u64,
    pub bytes_out: u64,
}

/// Totals of one tree level.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Level {
    pub level: u32,
    pub nodes: u64,
    pub msgs_in: u64,
    pub bytes_in: u64,
    pub max_msgs_in: u64,
    pub max_bytes_in: u64,
}

/// What a run measured.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Outcome {
    pub nodes: usize,
    pub ppn: u32,
    pub ranks: u64,
    pub shape: String,
    pub workload: String,
    /// Every agent connected and every rank started (the last `SubtreeUp` at the front end).
    pub launch: Option<f64>,
    /// When the fence root (the front end, or its only child) released each fence.
    pub fences: Vec<f64>,
    /// When the last rank was released from each fence (PMI-1 `barrier_out`): the fence
    /// records of the launch report (the last rank's leave), what `bench/sim-validate.sh`
    /// measures. A pushed fence's data travels down the tree before this.
    pub fences_done: Vec<f64>,
    /// When the last rank of the job (group 0) had the answer of each PMGR collective (by
    /// the collective's number, open not counted).
    pub colls_done: Vec<f64>,
    /// When the front end's root core ([`RootCore`]) decided the run is over: it leaves its
    /// run phase and closes every link (`Effect::CloseTree`) once every group's tree
    /// finished (every rank ended and every top agent closed its link, normally right after
    /// its last message), or when it stops waiting for them (5 s after every rank ended, or
    /// the kill grace + 5 s after a teardown started). Before the root core ran here it was
    /// when the front end had been told of every rank's end: a top agent closes its link as
    /// it sends its last end, so the run now ends later by the root's handling of that close
    /// (`Costs::cpu_msg`, 4 µs by default).
    pub end: Option<f64>,
    /// The root core's exit status (`RootCore::status`); -1 when the job did not end.
    pub status: i32,
    /// The root core's line for a failed job: the first it printed as it tore the job down.
    pub message: Option<String>,
    /// Every line the root core printed (`Effect::Print`: a failure, a refused spawn, a
    /// combined exit status), the first 100.
    pub prints: Vec<String>,
    /// Ranks whose replay ended normally.
    pub ranks_done: u64,
    /// When the last rank process ended (after the front end, under faults).
    pub last_exit: f64,
    /// Ranks still waiting for an answer when the run ended (a hang, unless killed).
    pub ranks_waiting: u64,
    /// PMI answers that did not match the workload.
    pub mismatches: u64,
    pub first_mismatch: Option<String>,
    pub fan_in_msgs: u64,
    pub fan_in_bytes: u64,
    pub levels: Vec<Level>,
    pub tree_msgs: u64,
    pub tree_bytes: u64,
    /// Tree messages of the fences (`FenceIn[Part]` up, `FenceOut[Part]` down), and of gets
    /// climbing the tree (`Get`, `GetResult`).
    pub fence_msgs: u64,
    pub get_msgs: u64,
    pub pmi_requests: u64,
    /// PMIx jobs: messages the nodes' PMIx servers sent their agents (`FromCompanion`), the
    /// fences among them (one per node and fence), the bytes of the blobs those carried, and
    /// of the blobs the agents' answers (`FenceDone`) brought back.
    pub pmix_msgs: u64,
    pub pmix_fences: u64,
    pub pmix_blob_up: u64,
    pub pmix_blob_down: u64,
    /// Per node (index: node id, 0 = the front end): what its PMIx server saw; empty for a
    /// job without PMIx (not in the JSON: one per node).
    #[serde(skip)]
    pub pmix_nodes: Vec<PmixSeen>,
    pub depth: u32,
    /// Largest state held by one agent's core (KVS bytes + per-rank connection state), and
    /// the mean over agents, in bytes.
    pub peak_agent_bytes: u64,
    pub mean_agent_bytes: u64,
    pub warnings: Vec<String>,
    pub events: u64,
    /// The launch model's prediction for this tree and these costs.
    pub model_launch: f64,
    /// When the last agent's hello reached its parent (every agent connected: the launch
    /// report's `launch_time`).
    pub agents_connected: f64,
    /// When the last agent had its setup (could launch its own children): what the launch
    /// model predicts.
    pub agents_up: f64,
    /// Each node's core counters (index: node id, 0 = the front end), as `--report` gives
    /// them (not in the JSON: one per node).
    #[serde(skip)]
    pub counters: Vec<libi::report::Counters>,
    /// Each agent's launch: (node, parent, started, connected); NaN where it never was.
    #[serde(skip)]
    pub launches: Vec<(u32, u32, f64, f64)>,
    /// Each process group: the job (first), then one per spawn, in order.
    pub groups: Vec<GroupOutcome>,
}

/// What one node's PMIx server saw of its ranks and its agent.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct PmixSeen {
    /// Ranks that connected (`PMIx_Init`) and finalized (answered by the agent).
    pub connected: u32,
    pub finalized: u32,
    /// The blob of each fence asked of the agent (bytes), in order.
    pub asked: Vec<u64>,
    /// The blob of each `FenceDone` the agent answered with (bytes), in order.
    pub done: Vec<u64>,
    /// Fences libpmix completed without the agent (every participant on this server).
    pub local: u32,
}

/// What became of one process group (the job, or the ranks of one spawn).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct GroupOutcome {
    pub kvsname: String,
    pub workload: String,
    pub agents: usize,
    pub ranks: u64,
    /// Ranks whose replay ended normally.
    pub ranks_done: u64,
    /// When it was started (a spawn: when the front end planned it), and when every one of
    /// its agents had its ranks running (a spawn is answered then).
    pub started: f64,
    pub up: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RState {
    /// Running, not waiting for an answer.
    Idle,
    Waiting,
    /// Replay finished; its exit is on the way.
    Done,
    /// Killed or failed; its exit is on the way.
    Exiting,
    /// Its exit was seen (or its node died).
    Gone,
}

struct Rank {
    /// Fences it left.
    fenced: u32,
    step: u32,
    peer_i: u32,
    state: RState,
    /// Its PMGR connection: [`PMGR_NONE`], [`PMGR_OPEN`] or [`PMGR_CLOSED`].
    pmgr: u8,
    /// Step of the request in flight and the peer it names (for its expected answer; for a
    /// PMGR step, the number of the collective).
    asked: u32,
    peer: u32,
    /// PMGR collectives this rank started.
    colls: u32,
}

const PMGR_NONE: u8 = 0;
const PMGR_OPEN: u8 = 1;
const PMGR_CLOSED: u8 = 2;

impl Rank {
    fn new() -> Rank {
        Rank {
            fenced: 0,
            step: 0,
            peer_i: 0,
            state: RState::Idle,
            pmgr: PMGR_NONE,
            asked: 0,
            peer: 0,
            colls: 0,
        }
    }
}

/// What a simulated rank does on its PMGR connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PmgrIo {
    /// Connect (the connection is authenticated as its own), then send.
    Connect,
    Send,
    /// Send, then close the connection.
    SendClose,
}

/// Each agent's fence blob for one law (by agent index), and their sum.
type BlobSizes = Rc<(Vec<u64>, u64)>;

/// One process group: the job itself (group 0) or the ranks of one spawn. Its nodes are
/// `root ..= root + agents` in the node table (plan node `p` is node `root + p`), its ranks
/// `first_rank .. first_rank + size` in the rank table.
struct Group {
    root: u32,
    agents: usize,
    first_rank: u32,
    size: u32,
    /// Ranks per node for `>leaders` (the first agent's).
    ppn: u32,
    kvsname: String,
    spawned: bool,
    /// The workload as loaded, and rendered for this group's kvsname.
    src: Rc<Trace>,
    trace: Rc<Trace>,
    /// Agents whose ranks run (measured: the root core answers the spawn).
    nodes_up: usize,
    started: f64,
    up: Option<f64>,
    /// PMIx fences with data: each agent's blob (by agent index) and their sum, per law.
    blob_sizes: Vec<(BlobLaw, BlobSizes)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum From {
    Parent,
    Child(u32),
}

enum Ev {
    /// Child `idx` of `parent` connected back.
    Hello {
        parent: u32,
        idx: u32,
    },
    /// A process's CPU work of `left` starts now, then `then` (shared cores only).
    Work {
        left: Time,
        then: Box<Ev>,
    },
    /// The shared cores' next CPU work may be done (stale unless `gen` is the current one).
    CpuDone {
        gen: u64,
    },
    /// `node`'s event loop has done the CPU work of handling `ev`: handle it now.
    Loop {
        node: u32,
        ev: Box<Ev>,
    },
    /// `node`'s event loop is done sending what its last handling sent.
    LoopFree {
        node: u32,
    },
    /// The launch lane of `node`: the `i`-th launch of the current batch.
    Launch {
        node: u32,
        i: u32,
    },
    /// The launch lane of `node`: start local rank `local`.
    Fork {
        node: u32,
        local: u32,
    },
    /// Shared cores: the launch lane's CPU work for child `idx` (`i`-th of the batch) is done.
    Launched {
        node: u32,
        i: u32,
        idx: u32,
    },
    /// Shared cores: the fork of local rank `local` of `node` is done.
    Forked {
        node: u32,
        local: u32,
    },
    Link {
        to: u32,
        from: From,
        msg: Box<Msg>,
    },
    Closed {
        to: u32,
        from: From,
        why: &'static str,
    },
    RankStart {
        node: u32,
        local: u32,
    },
    /// A PMI request of a rank: step `step` of its trace, naming `peer`. It is rendered
    /// when it arrives (the queue holds millions of them at 100k agents).
    FromRank {
        node: u32,
        local: u32,
        step: u32,
        peer: u32,
    },
    /// Bytes on a rank's PMGR connection.
    Pmgr {
        node: u32,
        local: u32,
        io: PmgrIo,
        bytes: Vec<u8>,
    },
    RankExit {
        node: u32,
        local: u32,
        end: ProcEnd,
    },
    RanksStarted {
        node: u32,
    },
    /// The launcher of child `idx` of `parent` exited (`what`: how).
    LauncherExited {
        parent: u32,
        idx: u32,
        what: &'static str,
    },
    /// A timer of `node`'s core is due (the core's `poll_timeout`).
    Timer {
        node: u32,
    },
    /// A timer of the root core is due (its `poll_timeout`).
    RootTimer,
    /// PMIx: `node`'s companion started and registered the job: its ranks may start.
    PmixUp {
        node: u32,
    },
    /// PMIx: a rank's call (step `step` of its trace) reached its node's server.
    PmixCall {
        node: u32,
        local: u32,
        step: u32,
    },
    /// PMIx: a companion's message reached its agent (handled by its event loop).
    FromCompanion {
        node: u32,
        msg: Box<FromCompanion>,
    },
    /// PMIx: the agent's message reached its companion.
    ToCompanion {
        node: u32,
        msg: Box<ToCompanion>,
    },
    Fault(usize),
}

impl Ev {
    /// The node whose event loop (or launch lane) the event is for.
    fn node(&self) -> Option<u32> {
        match self {
            Ev::Hello { parent, .. } | Ev::LauncherExited { parent, .. } => Some(*parent),
            Ev::Loop { node, .. }
            | Ev::LoopFree { node }
            | Ev::Launch { node, .. }
            | Ev::Fork { node, .. }
            | Ev::Launched { node, .. }
            | Ev::Forked { node, .. }
            | Ev::RankStart { node, .. }
            | Ev::FromRank { node, .. }
            | Ev::Pmgr { node, .. }
            | Ev::RankExit { node, .. }
            | Ev::RanksStarted { node }
            | Ev::PmixUp { node }
            | Ev::PmixCall { node, .. }
            | Ev::FromCompanion { node, .. }
            | Ev::ToCompanion { node, .. }
            | Ev::Timer { node } => Some(*node),
            Ev::Link { to, .. } | Ev::Closed { to, .. } => Some(*to),
            Ev::Work { .. } | Ev::CpuDone { .. } | Ev::RootTimer | Ev::Fault(_) => None,
        }
    }
}

/// One agent (or the front end, node 0) and its simulated surroundings.
struct Node {
    core: Option<NodeCore>,
    /// Its process group, and whether it is that group's root (the front end's node).
    group: u32,
    root: bool,
    parent: u32,
    /// Index among the parent's children.
    idx: u32,
    level: u32,
    children: Vec<u32>,
    child_up: Vec<bool>,
    child_lost: Vec<bool>,
    queued: HashMap<u32, Vec<Msg>>,
    /// Launch bookkeeping: next child to launch, launches of the batch not settled.
    /// When the launch lane is free; whether the ranks were started.
    lane_free: Time,
    forked: bool,
    /// The event loop: handling an event (its CPU work, then the core), or blocked by the
    /// launches and rank starts (`Costs::loop_launch`); events wait in `inbox` meanwhile.
    loop_busy: bool,
    blocked: bool,
    /// With a CPU of its own (no shared cores) an event is handled when it arrives and its
    /// effects leave when its CPU work is done: the loop is busy until then.
    busy_until: Time,
    inbox: std::collections::VecDeque<Ev>,
    /// CPU time of the sends of the handling in progress (`Costs::cpu_send`).
    send_acc: Time,
    up_free: Time,
    down_free: Time,
    slow: f64,
    dead: bool,
    never: bool,
    /// When the core's (or the launch lifecycle's) next timer is queued.
    timer_at: Option<Time>,
    /// The real launch lifecycle (`libi_node::proto::launch`): order, batches, deadlines, give-ups.
    life: Option<Launches>,
    /// A `drop` fault came before the connection: it breaks as soon as it is made.
    drop_on_connect: bool,
    /// Connection to the parent broken.
    cut: bool,
    closed: bool,
    /// Its ranks in the rank table: `first_rank ..` (`nranks` of them), or `slots` when they
    /// are not consecutive (a spawn's placement that wrapped round the hosts).
    first_rank: u32,
    nranks: u32,
    slots: Option<Box<[u32]>>,
    traffic: Traffic,
    peak_bytes: u64,
    /// When its parent started launching it, and when its hello reached the parent (s).
    launched: f64,
    connected: f64,
    /// PMIx jobs: its PMIx server, once started.
    pmix: Option<Box<Companion>>,
}

/// A node's PMIx server as the simulator models it: `libi-pmix` with libpmix, between the
/// node's ranks and its agent. It does what libpmix does with its host — one request per
/// fence once every local participant entered it, a `ClientConnected` per rank, a
/// `ClientFinalized` per rank waiting for its answer — and nothing of the host's part:
/// the fences across nodes are the agents' cores' (`NodeCore::pmix_msg`, `PmixFences`).
#[derive(Default)]
struct Companion {
    /// The last request id (the companion numbers its requests from 1).
    last_id: u64,
    /// Local ranks in the fence in progress, and its data law (the first rank's).
    entered: Vec<u32>,
    law: Option<BlobLaw>,
    /// The fence the agent was asked: its id and law.
    asked: Option<(u64, Option<BlobLaw>)>,
    /// `ClientFinalized` requests waiting for the agent: (id, local rank).
    finalizing: Vec<(u64, u32)>,
    /// When the last message to the agent and to the companion arrives (the socketpair
    /// keeps them in order).
    up_at: Time,
    down_at: Time,
    seen: PmixSeen,
}

impl Companion {
    fn next_id(&mut self) -> u64 {
        self.last_id += 1;
        self.last_id
    }
}

/// A simulation in progress.
pub struct Cluster {
    cfg: Config,
    queue: crate::queue::RadixQueue<Ev>,
    /// The shared cores (`None`: every node has its own CPU).
    cpu: Option<Ps>,
    seq: u64,
    now: Time,
    nodes: Vec<Node>,
    ranks: Vec<Rank>,
    groups: Vec<Group>,
    /// The front end's spawn planner (`libi::spawn`, as `libi-mpiexec`'s).
    spawner: Spawner,
    spawn_base: SpawnBase,
    rng: rand::rngs::StdRng,
    fx: Vec<Effect>,
    /// The PMI request being delivered (one buffer for all).
    request: Vec<u8>,
    out: Outcome,
    /// The front end's job policy: what reaches a group root's parent side goes to it.
    root: RootCore,
    /// When its next timer is queued.
    root_timer_at: Option<Time>,
    /// Its effects are being applied (effects of nested events wait for that loop).
    applying_root: bool,
    /// The last root effect applied was this `Print` (the failure's line comes right before
    /// the teardown's `KillGroup(0)`).
    last_print: Option<String>,
    /// The root core closed every link (`CloseTree`): nothing more reaches it.
    tree_closed: bool,
}

/// About how many bytes a companion's message takes on the socketpair (its blob, and a
/// little for the rest).
fn companion_bytes(msg: &FromCompanion) -> usize {
    match msg {
        FromCompanion::Fence { blob, .. } | FromCompanion::DmodexData { blob, .. } => {
            blob.len() + 32
        }
        _ => 32,
    }
}

/// The PMGR connection id of local rank `local` (one connection per rank).
fn pmgr_conn(local: u32) -> u64 {
    u64::from(local)
}

/// Processor sharing of the shared cores (`Costs::cores`): every job (a process's CPU work)
/// runs at `min(1, cores / jobs)`. Kept as the service each job has had since the start
/// (`v`): a job of `d` that starts at `v0` ends when `v` reaches `v0 + d`, so only the
/// earliest end needs an event.
struct Ps {
    cores: f64,
    /// Service per job so far (ns), at `last`.
    v: f64,
    last: Time,
    /// (end tag as f64 bits, order, slot): tags are >= 0, so their bits order as they do.
    heap: std::collections::BinaryHeap<std::cmp::Reverse<(u64, u64, u32)>>,
    jobs: Vec<Option<Ev>>,
    free: Vec<u32>,
    gen: u64,
}

impl Ps {
    fn rate(&self) -> f64 {
        (self.cores / self.heap.len().max(1) as f64).min(1.0)
    }

    fn advance(&mut self, now: Time) {
        if !self.heap.is_empty() && now > self.last {
            self.v += (now - self.last) as f64 * self.rate();
        }
        self.last = self.last.max(now);
    }
}

/// What a parent sees of a child NLA killed before it connected (fork launcher).
const KILLED_EARLY: &str = "its launcher exited (signal: 9 (SIGKILL))";

/// The front end's exit status for a launch failure (an NLA lost or never started).
pub use libi_node::proto::root::STATUS_LAUNCH;

/// Most root core lines kept in [`Outcome::prints`].
const PRINTS_MAX: usize = 100;

impl Node {
    fn new(group: u32, root: bool) -> Node {
        Node {
            core: None,
            group,
            root,
            parent: 0,
            idx: 0,
            level: 0,
            children: Vec::new(),
            child_up: Vec::new(),
            child_lost: Vec::new(),
            queued: HashMap::new(),
            lane_free: 0,
            forked: false,
            loop_busy: false,
            blocked: false,
            busy_until: 0,
            inbox: Default::default(),
            send_acc: 0,
            up_free: 0,
            down_free: 0,
            slow: 1.0,
            dead: false,
            never: false,
            drop_on_connect: false,
            timer_at: None,
            life: None,
            cut: false,
            closed: false,
            first_rank: 0,
            nranks: 0,
            slots: None,
            traffic: Traffic::default(),
            peak_bytes: 0,
            launched: f64::NAN,
            connected: f64::NAN,
            pmix: None,
        }
    }
}

/// The nodes of a process group's tree `root` (node ids 0 = its root, 1.. its agents), for
/// the node table from index `base` on, its ranks from index `first_rank` of the rank table
/// on. Returns them and the tree's depth.
fn plan_nodes(root: &NodePlan, base: u32, group: u32, first_rank: u32) -> (Vec<Node>, u32) {
    let count = root.subtree_nodes();
    let mut nodes: Vec<Node> = (0..count).map(|i| Node::new(group, i == 0)).collect();
    nodes[0].parent = base;
    let mut stack = vec![(root, 0u32)];
    let mut depth = 0;
    while let Some((p, level)) = stack.pop() {
        depth = depth.max(level);
        let Some(n) = nodes.get_mut(p.node as usize) else { continue };
        n.level = level;
        n.children = p.children.iter().map(|c| base + c.node).collect();
        n.child_up = vec![false; p.children.len()];
        n.child_lost = vec![false; p.children.len()];
        let gids: Vec<u32> = p.ranks.iter().map(|r| first_rank + r.rank).collect();
        n.nranks = gids.len() as u32;
        n.first_rank = gids.first().copied().unwrap_or(0);
        if gids.windows(2).any(|w| w[1] != w[0] + 1) {
            n.slots = Some(gids.into_boxed_slice());
        }
        for (i, c) in p.children.iter().enumerate() {
            if let Some(child) = nodes.get_mut(c.node as usize) {
                child.parent = base + p.node;
                child.idx = i as u32;
            }
            stack.push((c, level + 1));
        }
    }
    (nodes, depth)
}

/// A configuration the simulator cannot run (one line).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("need at least one node and one rank per node")]
    Empty,
    /// More ranks than a job has: their number.
    #[error("{0} ranks is too many")]
    TooManyRanks(u64),
    /// The launch model of the costs is not meaningful.
    #[error(transparent)]
    Model(#[from] libi::tree::ModelError),
    /// The tree would be too deep.
    #[error(transparent)]
    Tree(#[from] libi::job::TooDeep),
    /// A fault on a node the job does not have (`nodes`: how many it has).
    #[error("fault {fault:?}: there is no node {node} (1..={nodes})")]
    NoSuchNode { fault: Fault, node: u32, nodes: usize },
}

impl Cluster {
    pub fn new(cfg: Config) -> Result<Cluster, ConfigError> {
        if cfg.nodes == 0 || cfg.ppn == 0 {
            return Err(ConfigError::Empty);
        }
        let size = cfg.nodes as u64 * cfg.ppn as u64;
        let size32 = u32::try_from(size).map_err(|_| ConfigError::TooManyRanks(size))?;
        let model = cfg.costs.launch_model(cfg.batch);
        model.validate()?;
        let plan_model = cfg.plan_model.unwrap_or(model);
        let root = cfg.plan(cfg.ppn)?;
        let kvs = KvsNames::new(1, 1, "fe");
        let kvsname = kvs.name(0);
        let job = JobCommon {
            size: size32,
            universe_size: -1,
            kvsname: kvsname.clone(),
            preput: vec![(
                "PMI_process_mapping".into(),
                format!("(vector,(0,{},{}))", cfg.nodes, cfg.ppn),
            )],
            apps: vec![AppSpec {
                exe: "app".into(),
                args: Vec::new(),
                nprocs: size32,
                env: Vec::new(),
                wdir: None,
                agent_env: false,
                raw_env: Vec::new(),
            }],
            launcher: LauncherSpec::new(LauncherKind::Fork, "libi-nla"),
            kill_grace_ms: 1000,
            launch_timeout_ms: (cfg.launch_timeout * 1000.0) as u64,
            launch_batch: cfg.batch,
            kvs_push_max: cfg.push_max,
            kvs_max: 1 << 40,
            report: false,
            pmgr: cfg.workload.uses_pmgr().then_some(1),
            verbose: false,
            binding: Default::default(),
            spawned_by: None,
            singleton: None,
            each_end: false,
            staged: Vec::new(),
            gpus: Default::default(),
            // Every node's host and ranks, as `libi-mpiexec` gives them (its plan).
            pmix: cfg.workload.uses_pmix().then(|| libi::job::PmixJob {
                nodes: (0..cfg.nodes as u32)
                    .map(|i| {
                        (format!("n{}", i + 1), (0..cfg.ppn).map(|r| i * cfg.ppn + r).collect())
                    })
                    .collect(),
                parent: None,
            }),
        };
        // Node table from the plan (node ids are the plan's: 0 = front end, 1.. agents).
        let (nodes, depth) = plan_nodes(&root, 0, 0, 0);
        let n = nodes.len();
        // The launch model's prediction for the tree actually launched (the plan's: the
        // shape, with fan-outs above `max_conn` re-parented), children in launch order.
        let model_launch = {
            let mut at = vec![0.0f64; n];
            let mut total = 0.0f64;
            let mut stack = vec![0usize];
            while let Some(p) = stack.pop() {
                let mut t = at[p] + model.rem;
                for (i, &c) in nodes[p].children.iter().enumerate() {
                    if i > 0 {
                        t += model.sibling_gap(i as u64 - 1);
                    }
                    at[c as usize] = t;
                    total = total.max(t);
                    stack.push(c as usize);
                }
            }
            total
        };
        for f in &cfg.faults {
            let node = match f {
                Fault::Kill { node, .. }
                | Fault::Drop { node, .. }
                | Fault::Slow { node, .. }
                | Fault::Never { node } => *node,
            };
            if node as usize >= n {
                let (fault, nodes) = (f.clone(), cfg.nodes);
                return Err(ConfigError::NoSuchNode { fault, node, nodes });
            }
        }
        let out = Outcome {
            nodes: cfg.nodes,
            ppn: cfg.ppn,
            ranks: size,
            shape: cfg.shape.to_string(),
            workload: cfg.workload.name.clone(),
            depth,
            model_launch,
            ..Outcome::default()
        };
        let ranks = (0..size).map(|_| Rank::new()).collect();
        let src = Rc::new(cfg.workload.clone());
        let group = Group {
            root: 0,
            agents: cfg.nodes,
            first_rank: 0,
            size: size32,
            ppn: cfg.ppn,
            trace: Rc::new(cfg.workload.clone().fix_for(&kvsname)),
            src,
            kvsname,
            spawned: false,
            nodes_up: 0,
            started: 0.0,
            up: None,
            blob_sizes: Vec::new(),
        };
        let spawn_base = SpawnBase {
            hosts: (0..cfg.nodes)
                .map(|i| libi::hosts::Host::new(format!("n{}", i + 1), cfg.ppn))
                .collect(),
            universe_limit: None,
            universe_size: -1,
            kvs,
            shape: cfg.shape.clone(),
            model: plan_model,
            max_conn: cfg.max_conn,
            root_host: "fe".into(),
            job_size: size32,
            launcher: job.launcher.clone(),
        };
        // As `libi-mpiexec` configures it for this job: no MPIEXEC_TIMEOUT, the job's kill
        // grace, no terminal (no progress line), the fork launcher (the front end starts a
        // spawned group's agents itself, see `spawn`).
        let root_cfg = RootConfig {
            timeout: None,
            grace: job.kill_grace_ms as f64 / 1e3,
            no_cleanup: false,
            print_all_exitcodes: false,
            progress: false,
            singleton: false,
            launcher_joins: job.launcher.kind.joins(),
            pmgr: job.pmgr.is_some(),
            name_server: false,
        };
        let root_core = RootCore::new(root_cfg, &root, size as usize, 0.0);
        let cores = cfg.costs.cores as usize;
        let mut c = Cluster {
            rng: rand::rngs::StdRng::seed_from_u64(cfg.seed),
            cfg,
            queue: crate::queue::RadixQueue::default(),
            cpu: (cores > 0).then(|| Ps {
                cores: cores as f64,
                v: 0.0,
                last: 0,
                heap: Default::default(),
                jobs: Vec::new(),
                free: Vec::new(),
                gen: 0,
            }),
            seq: 0,
            now: 0,
            nodes,
            ranks,
            groups: vec![group],
            spawner: Spawner::new(&spawn_base),
            spawn_base,
            fx: Vec::new(),
            request: Vec::new(),
            out,
            root: root_core,
            root_timer_at: None,
            applying_root: false,
            last_print: None,
            tree_closed: false,
        };
        for (i, f) in c.cfg.faults.clone().iter().enumerate() {
            match *f {
                Fault::Kill { at, .. } | Fault::Drop { at, .. } => c.push(ns(at), Ev::Fault(i)),
                Fault::Slow { node, factor } => c.nodes[node as usize].slow = factor,
                Fault::Never { node } => c.nodes[node as usize].never = true,
            }
        }
        let core = c.new_core(NodeSetup { job, plan: root }, true);
        c.nodes[0].life = Some(c.new_life(&core));
        c.nodes[0].core = Some(core);
        let t0 = ns(c.cfg.costs.fe_start);
        let kvsname = c.groups[0].kvsname.clone();
        c.root.job_started(secs(t0), c.cfg.nodes, kvsname);
        c.start_launches(0, t0);
        Ok(c)
    }

    fn push(&mut self, t: Time, ev: Ev) {
        self.queue.push(t, ev);
    }

    fn jitter(&mut self, x: f64) -> f64 {
        let j = self.cfg.costs.jitter;
        if j > 0.0 {
            x * (1.0 + self.rng.gen_range(-j..=j))
        } else {
            x
        }
    }

    /// Run to the end (or the virtual time limit).
    pub fn run(mut self) -> Outcome {
        self.run_to_end()
    }

    /// [`Self::run`] for the last run of a process that exits next: the cluster's memory
    /// is left to the exit instead of being freed one allocation at a time (at 100k agents
    /// and 1.6M ranks that took 8 % of the run).
    pub fn run_then_exit(mut self) -> Outcome {
        let out = self.run_to_end();
        std::mem::forget(self);
        out
    }

    fn run_to_end(&mut self) -> Outcome {
        let limit = ns(self.cfg.limit);
        while let Some((t, ev)) = self.queue.pop() {
            if t > limit {
                self.out.warnings.push(format!("stopped at the time limit ({} s)", self.cfg.limit));
                break;
            }
            self.now = t;
            self.out.events += 1;
            self.prefetch_next();
            self.handle(t, ev);
        }
        self.finish()
    }

    /// Start loading what the next event touches into the cache while this one is
    /// handled: at 100k agents the node records alone are 200 MB, and the misses on them and
    /// on the ranks' connections were a quarter of the run. Its node's record; for a rank's
    /// request, the rank's connection in the core and its entry in the rank table.
    fn prefetch_next(&self) {
        let Some(next) = self.queue.peek() else {
            return;
        };
        if let Some(n) = next.node() {
            self.prefetch_node(n);
        }
        if let Ev::FromRank { node, local, .. } = next {
            if let Some(core) = self.nodes.get(*node as usize).and_then(|n| n.core.as_ref()) {
                core.prefetch_rank(*local as usize);
            }
            let gid = self.gid(*node, *local);
            if let Some(r) = self.ranks.get(gid) {
                libi::prefetch((r as *const Rank).cast());
            }
        }
    }

    /// The lines of `node`'s record an event handling reads first (a dozen prefetches at
    /// most are in flight at once: the whole 2 KB record would stall the loop).
    fn prefetch_node(&self, node: u32) {
        if let Some(n) = self.nodes.get(node as usize) {
            libi::prefetch((n as *const Node).cast());
            libi::prefetch(std::ptr::addr_of!(n.loop_busy).cast());
            libi::prefetch(std::ptr::addr_of!(n.first_rank).cast());
            libi::prefetch(std::ptr::addr_of!(n.timer_at).cast());
        }
    }

    fn finish(&mut self) -> Outcome {
        let mut levels: Vec<Level> = Vec::new();
        let mut sum = 0u64;
        for n in &self.nodes {
            let l = n.level as usize;
            if levels.len() <= l {
                levels.resize_with(l + 1, Level::default);
            }
            let lv = &mut levels[l];
            lv.level = l as u32;
            lv.nodes += 1;
            lv.msgs_in += n.traffic.msgs_in;
            lv.bytes_in += n.traffic.bytes_in;
            lv.max_msgs_in = lv.max_msgs_in.max(n.traffic.msgs_in);
            lv.max_bytes_in = lv.max_bytes_in.max(n.traffic.bytes_in);
            self.out.tree_msgs += n.traffic.msgs_out;
            self.out.tree_bytes += n.traffic.bytes_out;
            sum += n.peak_bytes;
        }
        let agents: Vec<&Node> = self.nodes.iter().filter(|n| !n.root).collect();
        let roots: u64 = self.nodes.iter().filter(|n| n.root).map(|n| n.peak_bytes).sum();
        self.out.peak_agent_bytes = agents.iter().map(|n| n.peak_bytes).max().unwrap_or(0);
        self.out.mean_agent_bytes = (sum - roots) / agents.len().max(1) as u64;
        self.out.fan_in_msgs = self.nodes[0].traffic.msgs_in;
        self.out.fan_in_bytes = self.nodes[0].traffic.bytes_in;
        self.out.levels = levels;
        self.out.counters = (self.nodes.iter())
            .map(|n| n.core.as_ref().map(|c| c.counters().clone()).unwrap_or_default())
            .collect();
        self.out.launches = (self.nodes.iter().enumerate().skip(1))
            .map(|(i, n)| (i as u32, n.parent, n.launched, n.connected))
            .collect();
        if self.groups[0].src.uses_pmix() {
            self.out.pmix_nodes = (self.nodes.iter())
                .map(|n| n.pmix.as_ref().map(|c| c.seen.clone()).unwrap_or_default())
                .collect();
        }
        let mut done = vec![0u64; self.groups.len()];
        for node in 0..self.nodes.len() as u32 {
            // Ranks of an agent that never started or died have no process to wait.
            let n = &self.nodes[node as usize];
            if n.core.is_none() || n.dead {
                continue;
            }
            for local in 0..n.nranks {
                match self.ranks[self.gid(node, local)].state {
                    RState::Done => done[n.group as usize] += 1,
                    RState::Waiting | RState::Idle => self.out.ranks_waiting += 1,
                    RState::Gone | RState::Exiting => {}
                }
            }
        }
        self.out.ranks_done = done.iter().sum();
        self.out.groups = (self.groups.iter().zip(done))
            .map(|(g, ranks_done)| GroupOutcome {
                kvsname: g.kvsname.clone(),
                workload: g.src.name.clone(),
                agents: g.agents,
                ranks: u64::from(g.size),
                ranks_done,
                started: g.started,
                up: g.up,
            })
            .collect();
        if std::env::var_os("LIBI_SIM_DEBUG").is_some() {
            eprintln!("root core: phase {:?}, status {}", self.root.phase(), self.root.status());
            for (i, n) in self.nodes.iter().enumerate() {
                if let Some(c) = &n.core {
                    if c.ranks_left() > 0 {
                        eprintln!(
                            "node {i}: {} ranks left, dead {} cut {} closed {}",
                            c.ranks_left(),
                            n.dead,
                            n.cut,
                            n.closed
                        );
                    }
                }
            }
        }
        self.out.status = self.root.status();
        if self.out.message.is_none() && self.out.status != 0 {
            self.out.message = self.out.prints.first().cloned();
        }
        if self.out.end.is_none() && self.out.message.is_none() {
            self.out.message = Some("the job did not end".into());
            self.out.status = -1;
        }
        std::mem::take(&mut self.out)
    }

    /// CPU time of handling `bytes` (a message, a PMI request).
    fn msg_cost(&self, bytes: usize) -> Time {
        let c = &self.cfg.costs;
        ns(c.cpu_msg + c.cpu_byte * bytes as f64)
    }

    /// A process's own CPU work of `d` from `t`, then `then`. With shared cores the work
    /// shares them with every other process's (processor sharing, see [`Ps`]); otherwise it
    /// runs at once on a CPU of its own.
    fn work_then(&mut self, t: Time, d: Time, then: Ev) {
        if self.cpu.is_none() || d == 0 {
            self.push(t + d, then);
        } else if t > self.now {
            self.push(t, Ev::Work { left: d, then: Box::new(then) });
        } else {
            self.ps_submit(d, then);
        }
    }

    /// Start a job of `d` on the shared cores now; `then` when it is done.
    fn ps_submit(&mut self, d: Time, then: Ev) {
        let now = self.now;
        let Some(ps) = self.cpu.as_mut() else { return self.push(now + d, then) };
        ps.advance(now);
        let tag = ps.v + d as f64;
        let slot = match ps.free.pop() {
            Some(i) => {
                ps.jobs[i as usize] = Some(then);
                i
            }
            None => {
                ps.jobs.push(Some(then));
                (ps.jobs.len() - 1) as u32
            }
        };
        self.seq += 1;
        ps.heap.push(std::cmp::Reverse((tag.to_bits(), self.seq, slot)));
        self.ps_next();
    }

    /// Queue the event of the shared cores' earliest end (earlier ones go stale).
    fn ps_next(&mut self) {
        let now = self.now;
        let Some(ps) = self.cpu.as_mut() else { return };
        ps.gen += 1;
        let gen = ps.gen;
        if let Some(std::cmp::Reverse((tag, _, _))) = ps.heap.peek() {
            let left = (f64::from_bits(*tag) - ps.v).max(0.0);
            let at = now + (left / ps.rate()).ceil() as Time;
            self.push(at, Ev::CpuDone { gen });
        }
    }

    /// The shared cores at `now`: end the jobs that are done.
    fn ps_done(&mut self, gen: u64) {
        let now = self.now;
        let Some(ps) = self.cpu.as_mut() else { return };
        if gen != ps.gen {
            return;
        }
        ps.advance(now);
        let mut done = Vec::new();
        while let Some(std::cmp::Reverse((tag, _, slot))) = ps.heap.peek().copied() {
            if f64::from_bits(tag) > ps.v + 0.5 {
                break;
            }
            ps.heap.pop();
            ps.free.push(slot);
            done.extend(ps.jobs[slot as usize].take());
        }
        for ev in done {
            self.push(now, ev);
        }
        self.ps_next();
    }

    // ------------------------------------------------------------------ event loops

    /// `ev` reached `node`'s event loop: handled in turn, after its CPU work.
    fn enqueue(&mut self, node: u32, ev: Ev) {
        let n = &mut self.nodes[node as usize];
        if n.loop_busy || n.blocked {
            n.inbox.push_back(ev);
        } else {
            self.loop_start(node, ev);
        }
    }

    fn loop_cost(&self, ev: &Ev) -> Time {
        match ev {
            Ev::Link { msg, .. } => self.msg_cost(libi::msg::wire_size(msg)),
            // A PMI line is read and parsed, not decoded and stored byte by byte.
            Ev::FromRank { .. } => ns(self.cfg.costs.cpu_pmi),
            // A companion's frame is decoded like a tree message.
            Ev::FromCompanion { msg, .. } => self.msg_cost(companion_bytes(msg)),
            Ev::Closed { .. } => 0,
            _ => self.msg_cost(0),
        }
    }

    fn loop_start(&mut self, node: u32, ev: Ev) {
        let now = self.now;
        if self.cpu.is_none() {
            // A CPU of its own: events are handled in arrival order, each after the one
            // before (`busy_until`), in one event instead of two: the core sees the event
            // now, what it sends leaves when its handling is done. (While the loop is
            // blocked by launches, events wait in the inbox as with shared cores.)
            let mut next = Some(ev);
            while let Some(ev) = next.take() {
                let cost = self.loop_cost(&ev);
                self.nodes[node as usize].loop_busy = true;
                let start = now.max(self.nodes[node as usize].busy_until);
                self.handle_loop(start + cost, ev);
                let n = &mut self.nodes[node as usize];
                n.busy_until = start + cost + std::mem::take(&mut n.send_acc);
                n.loop_busy = false;
                if !n.blocked {
                    next = n.inbox.pop_front();
                }
            }
            return;
        }
        let cost = self.loop_cost(&ev);
        self.nodes[node as usize].loop_busy = true;
        self.work_then(now, cost, Ev::Loop { node, ev: Box::new(ev) });
    }

    /// `node`'s loop handled an event: what it sent costs it CPU, then the next event.
    fn loop_done(&mut self, node: u32) {
        let sent = std::mem::take(&mut self.nodes[node as usize].send_acc);
        if sent > 0 {
            let now = self.now;
            self.work_then(now, sent, Ev::LoopFree { node });
        } else {
            self.loop_free(node);
        }
    }

    fn loop_free(&mut self, node: u32) {
        let n = &mut self.nodes[node as usize];
        n.loop_busy = false;
        if n.blocked {
            return;
        }
        if let Some(ev) = n.inbox.pop_front() {
            self.loop_start(node, ev);
        }
    }

    /// A send from `node`'s loop of `bytes` at `t`: when it leaves (the loop's sends go one
    /// after the other, each costing `cpu_send` of what handling it costs).
    fn send_at(&mut self, node: u32, t: Time, bytes: usize) -> Time {
        let f = self.cfg.costs.cpu_send;
        if f <= 0.0 {
            return t;
        }
        let c = &self.cfg.costs;
        let cost = ns(f * (c.cpu_msg + c.cpu_byte * bytes as f64));
        let n = &mut self.nodes[node as usize];
        n.send_acc += cost;
        t + n.send_acc
    }

    /// A PMI answer from `node`'s loop at `t`: when it leaves (as [`Self::send_at`]).
    fn send_pmi(&mut self, node: u32, t: Time) -> Time {
        let c = &self.cfg.costs;
        let cost = ns(c.cpu_send * c.cpu_pmi);
        let n = &mut self.nodes[node as usize];
        n.send_acc += cost;
        t + n.send_acc
    }

    /// A loop event, handled after its CPU work (`t`: now, the handling's end).
    fn handle_loop(&mut self, t: Time, ev: Ev) {
        match ev {
            Ev::Hello { parent, idx } => self.hello(t, parent, idx),
            Ev::Link { to, from, msg } => self.link(t, to, from, *msg),
            Ev::FromRank { node, local, step, peer } => {
                let gid = self.gid(node, local);
                if self.nodes[node as usize].dead
                    || matches!(self.ranks[gid].state, RState::Gone | RState::Exiting)
                {
                    return;
                }
                self.out.pmi_requests += 1;
                let mut bytes = std::mem::take(&mut self.request);
                let trace = self.trace_of(node);
                trace.request_into(step as usize, &self.who(node, local), peer, &mut bytes);
                self.with_core(node, t, |c, fx| c.rank_data(local as usize, &bytes, fx));
                self.request = bytes;
            }
            Ev::Pmgr { node, local, io, bytes } => {
                let gid = self.gid(node, local);
                if self.nodes[node as usize].dead
                    || matches!(self.ranks[gid].state, RState::Gone | RState::Exiting)
                {
                    return;
                }
                self.out.pmi_requests += 1;
                let (conn, owner) = (pmgr_conn(local), self.who(node, local).rank);
                self.with_core(node, t, |c, fx| {
                    if io == PmgrIo::Connect {
                        c.pmgr_connected(conn, owner);
                    }
                    c.pmgr_data(conn, &bytes, fx);
                    if io == PmgrIo::SendClose {
                        c.pmgr_eof(conn, fx);
                    }
                });
            }
            Ev::RankExit { node, local, end } => {
                if self.nodes[node as usize].dead {
                    return;
                }
                self.out.last_exit = self.out.last_exit.max(secs(t));
                let gid = self.gid(node, local);
                let r = &mut self.ranks[gid];
                match r.state {
                    RState::Gone => return,
                    RState::Done => {}
                    _ => r.state = RState::Gone,
                }
                // The process is gone: so is its end of its PMGR connection.
                let pmgr_open = std::mem::replace(&mut r.pmgr, PMGR_CLOSED) == PMGR_OPEN;
                self.with_core(node, t, |c, fx| {
                    if pmgr_open {
                        c.pmgr_eof(pmgr_conn(local), fx);
                    }
                    c.rank_eof(local as usize, fx);
                    c.rank_ended(local as usize, end, fx);
                });
                self.maybe_close(node, t);
            }
            Ev::RanksStarted { node } => {
                self.with_core(node, t, |c, fx| c.ranks_started(fx));
            }
            Ev::FromCompanion { node, msg } => {
                if self.nodes[node as usize].dead {
                    return;
                }
                self.with_core(node, t, |c, fx| c.pmix_msg(*msg, fx));
            }
            Ev::Closed { to, from, why } => {
                let n = &self.nodes[to as usize];
                if n.dead || (n.root && n.closed) {
                    return;
                }
                match from {
                    From::Child(idx) => self.child_lost(t, to, idx, why),
                    From::Parent => self.parent_lost(t, to, why),
                }
            }
            _ => {}
        }
    }

    fn handle(&mut self, t: Time, ev: Ev) {
        match ev {
            ev @ Ev::Hello { parent, .. } => self.enqueue(parent, ev),
            Ev::Launch { node, i } => self.launch_step(node, i, t),
            Ev::LauncherExited { parent, idx, what } => {
                let p = &mut self.nodes[parent as usize];
                if p.dead {
                    return;
                }
                let g = p
                    .life
                    .as_mut()
                    .and_then(|l| l.launcher_exited(idx as usize, what.into(), secs(t)));
                if let Some(g) = g {
                    self.gave_up(t, parent, g);
                }
            }
            Ev::Work { left, then } => self.ps_submit(left, *then),
            Ev::CpuDone { gen } => self.ps_done(gen),
            Ev::Loop { node, ev } => {
                self.handle_loop(t, *ev);
                self.loop_done(node);
            }
            Ev::LoopFree { node } => self.loop_free(node),
            Ev::Fork { node, local } => self.fork_step(node, local, t),
            Ev::Launched { node, i, idx } => self.launched(node, i, idx, t),
            Ev::Forked { node, local } => self.forked(node, local, t),
            ev @ Ev::Link { to, .. } => self.enqueue(to, ev),
            // After what came before on the connection.
            ev @ Ev::Closed { to, .. } => self.enqueue(to, ev),
            Ev::RankStart { node, local } => {
                if self.nodes[node as usize].dead {
                    return;
                }
                self.rank_next(node, local, t);
            }
            ev @ Ev::FromRank { node, .. }
            | ev @ Ev::Pmgr { node, .. }
            | ev @ Ev::RankExit { node, .. }
            | ev @ Ev::FromCompanion { node, .. }
            | ev @ Ev::RanksStarted { node } => self.enqueue(node, ev),
            Ev::PmixUp { node } => {
                if self.nodes[node as usize].dead {
                    return;
                }
                self.nodes[node as usize].pmix = Some(Box::default());
                if !self.cfg.costs.loop_launch {
                    // Its ranks start from the loop, which runs meanwhile.
                    self.unblock(node);
                }
                self.fork_step(node, 0, t);
            }
            Ev::PmixCall { node, local, step } => self.pmix_call(t, node, local, step),
            Ev::ToCompanion { node, msg } => self.pmix_answer(t, node, *msg),
            Ev::Timer { node } => {
                let n = &mut self.nodes[node as usize];
                if n.dead || n.timer_at != Some(t) || (n.root && n.closed) {
                    return;
                }
                n.timer_at = None;
                // The deadline was rounded to whole ns: fire what is due within that.
                let now = secs(t + 1);
                let gave_up = match (&mut n.life, &n.core) {
                    (Some(life), Some(core)) => {
                        life.handle_timeout(now, |i| core.child_ranks_left(i))
                    }
                    _ => Vec::new(),
                };
                for g in gave_up {
                    self.gave_up(t, node, g);
                }
                self.with_core(node, t, |c, fx| c.handle_timeout(now, fx));
            }
            Ev::RootTimer => {
                if self.root_timer_at != Some(t) {
                    return;
                }
                self.root_timer_at = None;
                // The deadline was rounded to whole ns: run what is due within that. Our
                // output: nothing queued, nothing broken (simulated ranks write none).
                self.root.handle_timeout(secs(t + 1), &Streams::default());
                self.root_effects(t);
            }
            Ev::Fault(i) => self.fault(t, i),
        }
    }

    /// Run `f` on `node`'s core at time `t` and carry out its effects.
    /// The core sees the virtual time `t`; its next timer is queued if it is new.
    fn with_core(&mut self, node: u32, t: Time, f: impl FnOnce(&mut NodeCore, &mut Vec<Effect>)) {
        let mut fx = std::mem::take(&mut self.fx);
        let group0 = self.nodes[node as usize].group == 0;
        if let Some(core) = self.nodes[node as usize].core.as_mut() {
            core.set_now(secs(t));
            let before = core.counters().fences + core.pmix_fences();
            f(core, &mut fx);
            // The job's fences (PMI and PMIx) are released where its fence root is: the
            // front end, or its only child (see `NodeCore`).
            if core.is_fence_root() && group0 {
                for _ in before..core.counters().fences + core.pmix_fences() {
                    self.out.fences.push(secs(t));
                }
            }
        }
        self.arm(node, t);
        self.apply(node, t, &mut fx);
        self.fx = fx;
        if self.nodes[node as usize].root {
            // A group root changed: the root core may be done waiting for the trees.
            self.root_effects(t);
        }
    }

    /// Queue `node`'s next timer (its core's or its launch lifecycle's) if it is earlier
    /// than the one queued.
    fn arm(&mut self, node: u32, t: Time) {
        let n = &mut self.nodes[node as usize];
        let due = [
            n.core.as_ref().and_then(NodeCore::poll_timeout),
            n.life.as_ref().and_then(Launches::poll_timeout),
        ]
        .into_iter()
        .flatten()
        .reduce(f64::min)
        .map(|at| ns(at).max(t));
        if let Some(at) = due {
            if n.timer_at.is_none_or(|cur| at < cur) {
                n.timer_at = Some(at);
                self.push(at, Ev::Timer { node });
            }
        }
    }

    /// A core on the simulation's virtual clock.
    fn new_life(&self, core: &NodeCore) -> Launches {
        let timeout = std::time::Duration::from_millis(core.job().launch_timeout_ms);
        Launches::new(core.plan().children.len(), core.job().launch_batch, timeout)
    }

    fn new_core(&self, setup: NodeSetup, is_root: bool) -> NodeCore {
        NodeCore::new(setup, is_root, false)
    }

    // ------------------------------------------------------------------ launch

    /// `node` has its setup at `t`: launch its children (all, or the first batch), then
    /// start its ranks. Launches and forks run one after the other on the node's launch
    /// lane (a thread of its own in the driver), not on its event loop: hellos, tree
    /// messages and PMI are handled meanwhile. Each step is an event, so that with shared
    /// cores the lane takes its CPU when it runs, interleaved with everything else.
    fn start_launches(&mut self, node: u32, t: Time) {
        self.nodes[node as usize].blocked = self.cfg.costs.loop_launch;
        self.push(t, Ev::Launch { node, i: 0 });
    }

    /// The lane of `node` at `t`, `i` launches into the current batch: launch the next
    /// child, or start the ranks once the batch is out.
    fn launch_step(&mut self, node: u32, i: u32, t: Time) {
        let (seq, slots) = (ns(self.cfg.costs.seq), self.cfg.costs.slots.max(1));
        let n = &mut self.nodes[node as usize];
        if n.dead {
            return;
        }
        let Some(idx) = n.life.as_mut().and_then(|l| l.next_launch(secs(t))) else {
            n.lane_free = n.lane_free.max(t);
            let pmix = n.nranks > 0 && n.core.as_ref().is_some_and(|c| c.job().pmix.is_some());
            if !std::mem::replace(&mut n.forked, true) {
                if pmix {
                    // The driver starts the PMIx companion and registers the job and every
                    // local rank with it before the first rank, its loop waiting.
                    n.blocked = true;
                    let d = ns(self.cfg.costs.pmix_start);
                    self.work_then(t, d, Ev::PmixUp { node });
                } else {
                    self.push(t, Ev::Fork { node, local: 0 });
                }
            } else {
                // A later batch is out.
                self.unblock(node);
            }
            return;
        };
        self.arm(node, t);
        let idx = idx as u32;
        let child = self.nodes[node as usize].children[idx as usize];
        self.nodes[child as usize].launched = secs(t);
        if self.cpu.is_some() {
            // The launch takes SEQ of the CPU, shared with everything else.
            return self.work_then(t, seq, Ev::Launched { node, i, idx });
        }
        // The launch takes SEQ of its lane (c lanes: launches go out in groups of c, as the
        // launch model says).
        let (done, next) = (t + seq, if (i + 1).is_multiple_of(slots) { t + seq } else { t });
        let rem = ns(self.jitter(self.cfg.costs.rem));
        if self.nodes[child as usize].dead {
            self.push(done, Ev::LauncherExited { parent: node, idx, what: KILLED_EARLY });
        } else if !self.nodes[child as usize].never {
            self.push(t + rem, Ev::Hello { parent: node, idx });
        }
        self.nodes[node as usize].lane_free = done;
        self.push(next, Ev::Launch { node, i: i + 1 });
    }

    /// Shared cores: the launch of child `idx` of `node` took its CPU (at `t`); the child
    /// starts (REM of CPU work of its own, then its hello), the lane goes on.
    fn launched(&mut self, node: u32, i: u32, idx: u32, t: Time) {
        if self.nodes[node as usize].dead {
            return;
        }
        let child = self.nodes[node as usize].children[idx as usize];
        let rem = ns(self.jitter(self.cfg.costs.rem));
        if self.nodes[child as usize].dead {
            self.push(t, Ev::LauncherExited { parent: node, idx, what: KILLED_EARLY });
        } else if !self.nodes[child as usize].never {
            self.work_then(t, rem, Ev::Hello { parent: node, idx });
        }
        self.nodes[node as usize].lane_free = t;
        self.push(t, Ev::Launch { node, i: i + 1 });
    }

    /// Start local rank `local` of `node` at `t` (its fork on the lane, then its own start).
    fn fork_step(&mut self, node: u32, local: u32, t: Time) {
        let n = &mut self.nodes[node as usize];
        if n.dead {
            return;
        }
        if local >= n.nranks {
            n.lane_free = t;
            if !n.root {
                if n.blocked {
                    // The driver tells the core right after the ranks' start, before its loop.
                    n.inbox.push_front(Ev::RanksStarted { node });
                } else {
                    self.push(t, Ev::RanksStarted { node });
                }
            }
            self.unblock(node);
            return;
        }
        let fork = ns(self.cfg.costs.fork);
        if self.cpu.is_some() {
            return self.work_then(t, fork, Ev::Forked { node, local });
        }
        let forked = t + fork;
        let rank_start = ns(self.jitter(self.cfg.costs.rank_start));
        // The rank's first request, sent when it has started (one event, not two).
        self.rank_next(node, local, forked + rank_start);
        self.nodes[node as usize].lane_free = forked;
        self.push(forked, Ev::Fork { node, local: local + 1 });
    }

    /// Shared cores: rank `local` of `node` was forked (at `t`): it starts (its own CPU
    /// work), the lane goes on.
    fn forked(&mut self, node: u32, local: u32, t: Time) {
        if self.nodes[node as usize].dead {
            return;
        }
        let rank_start = ns(self.jitter(self.cfg.costs.rank_start));
        self.work_then(t, rank_start, Ev::RankStart { node, local });
        self.nodes[node as usize].lane_free = t;
        self.push(t, Ev::Fork { node, local: local + 1 });
    }

    /// The launches and rank starts of `node` are out: its loop goes on (`loop_launch`).
    fn unblock(&mut self, node: u32) {
        let n = &mut self.nodes[node as usize];
        if !std::mem::take(&mut n.blocked) || n.loop_busy {
            return;
        }
        if let Some(ev) = n.inbox.pop_front() {
            self.loop_start(node, ev);
        }
    }

    /// A launch of `node` settled (connected or given up): maybe the next batch.
    fn settled(&mut self, node: u32, t: Time) {
        if self.cfg.batch.is_some() {
            // The next batch goes out from the loop (`loop_launch`: blocking it).
            let n = &mut self.nodes[node as usize];
            n.blocked |= self.cfg.costs.loop_launch && n.forked;
            let at = t.max(n.lane_free);
            self.push(at, Ev::Launch { node, i: 0 });
        }
    }

    fn hello(&mut self, t: Time, parent: u32, idx: u32) {
        let p = &mut self.nodes[parent as usize];
        // The lifecycle drops a second hello, or one after the child was given up.
        if p.dead || !p.life.as_mut().is_some_and(|l| l.connected(idx as usize)) {
            return;
        }
        self.nodes[parent as usize].child_up[idx as usize] = true;
        self.out.agents_connected = self.out.agents_connected.max(secs(t));
        self.settled(parent, t);
        let child = self.nodes[parent as usize].children[idx as usize];
        self.nodes[child as usize].connected = secs(t);
        if self.nodes[child as usize].dead {
            // Killed after it sent its hello: the connection closes right behind it.
            let lat = ns(self.cfg.costs.latency);
            let why = "connection closed";
            self.push(t + lat, Ev::Closed { to: parent, from: From::Child(idx), why });
            return;
        }
        if std::mem::take(&mut self.nodes[child as usize].drop_on_connect) {
            let lat = ns(self.cfg.costs.latency);
            let why = || "connection reset";
            self.push(t + lat, Ev::Closed { to: parent, from: From::Child(idx), why: why() });
            self.push(t + lat, Ev::Closed { to: child, from: From::Parent, why: why() });
        }
        let done = t;
        let setup =
            self.nodes[parent as usize].core.as_ref().and_then(|c| c.child_setup(idx as usize));
        if let Some(s) = setup {
            self.send_down(parent, idx, done, Msg::Setup(Box::new(s)));
        }
        for m in self.nodes[parent as usize].queued.remove(&idx).unwrap_or_default() {
            self.send_down(parent, idx, done, m);
        }
    }

    // ------------------------------------------------------------------ links

    fn count_kind(&mut self, msg: &Msg) {
        match msg {
            Msg::FenceIn { .. }
            | Msg::FenceInPart { .. }
            | Msg::FenceOut { .. }
            | Msg::FenceOutPart { .. }
            | Msg::PmixFenceIn { .. }
            | Msg::PmixFenceOut { .. } => self.out.fence_msgs += 1,
            Msg::Get { .. } | Msg::GetResult { .. } => self.out.get_msgs += 1,
            _ => {}
        }
    }

    fn send_up(&mut self, node: u32, t: Time, msg: Msg) {
        let n = &self.nodes[node as usize];
        if n.dead || n.cut || n.closed {
            return;
        }
        let (parent, idx) = (n.parent, n.idx);
        self.transmit(node, parent, node, true, t, msg, From::Child(idx));
    }

    fn send_down(&mut self, node: u32, idx: u32, t: Time, msg: Msg) {
        let n = &self.nodes[node as usize];
        let i = idx as usize;
        if n.dead || i >= n.children.len() || n.child_lost[i] || (n.root && n.closed) {
            return;
        }
        if !n.child_up[i] {
            self.nodes[node as usize].queued.entry(idx).or_default().push(msg);
            return;
        }
        let child = n.children[i];
        if self.nodes[child as usize].cut {
            return;
        }
        self.transmit(node, child, child, false, t, msg, From::Parent);
    }

    /// `msg` from `sender` to `receiver` over the link between `child` and its parent
    /// (`up`: toward the parent), sent at `t`: it waits for what that direction still
    /// carries, takes size / bandwidth, then the latency (both times the link's slowness).
    #[allow(clippy::too_many_arguments)]
    fn transmit(
        &mut self,
        sender: u32,
        receiver: u32,
        child: u32,
        up: bool,
        t: Time,
        msg: Msg,
        from: From,
    ) {
        let size = libi::msg::wire_size(&msg);
        let t = self.send_at(sender, t, size);
        let c = &self.cfg.costs;
        let slow = self.nodes[child as usize].slow;
        let (xfer, lat) = (ns(size as f64 / c.bandwidth * slow), ns(c.latency * slow));
        let ch = &mut self.nodes[child as usize];
        let free = if up { &mut ch.up_free } else { &mut ch.down_free };
        *free = t.max(*free) + xfer;
        let at = *free + lat;
        let s = &mut self.nodes[sender as usize].traffic;
        s.msgs_out += 1;
        s.bytes_out += size as u64;
        let r = &mut self.nodes[receiver as usize].traffic;
        r.msgs_in += 1;
        r.bytes_in += size as u64;
        self.count_kind(&msg);
        self.push(at, Ev::Link { to: receiver, from, msg: Box::new(msg) });
    }

    fn link(&mut self, t: Time, to: u32, from: From, msg: Msg) {
        let n = &self.nodes[to as usize];
        // A connection that broke delivers nothing more (nor one the front end closed).
        if n.dead || (from == From::Parent && n.cut) || (n.root && n.closed) {
            return;
        }
        let done = t;
        match (from, msg) {
            (From::Parent, Msg::Setup(setup)) => {
                self.out.agents_up = self.out.agents_up.max(secs(done));
                if std::env::var_os("LIBI_SIM_DEBUG").is_some() {
                    let n = &self.nodes[to as usize];
                    eprintln!(
                        "setup node {to} parent {} idx {} at {:.6}",
                        n.parent,
                        n.idx,
                        secs(done)
                    );
                }
                let core = self.new_core(*setup, false);
                self.nodes[to as usize].life = Some(self.new_life(&core));
                self.nodes[to as usize].core = Some(core);
                self.start_launches(to, done);
            }
            (From::Parent, msg) => self.with_core(to, done, |c, fx| c.parent_msg(msg, fx)),
            (From::Child(idx), msg) => {
                if !self.nodes[to as usize].child_lost[idx as usize] {
                    self.with_core(to, done, |c, fx| c.child_msg(idx as usize, msg, fx));
                }
            }
        }
        self.note_memory(to);
        self.maybe_close(to, done);
    }

    /// Child `idx`'s connection ended (`why`).
    fn child_lost(&mut self, t: Time, node: u32, idx: u32, why: &str) {
        let n = &mut self.nodes[node as usize];
        let left = n.core.as_ref().map_or(0, |c| c.child_ranks_left(idx as usize));
        if let Some(g) = n.life.as_mut().and_then(|l| l.closed(idx as usize, why, left)) {
            self.gave_up(t, node, g);
        }
    }

    /// The lifecycle gave child `g.idx` up: its subtree is lost to the core.
    fn gave_up(&mut self, t: Time, node: u32, g: GiveUp) {
        let idx = g.idx as u32;
        let n = &mut self.nodes[node as usize];
        if n.child_lost[idx as usize] {
            return;
        }
        n.child_lost[idx as usize] = true;
        n.queued.remove(&idx);
        self.settled(node, t);
        let done = t + self.msg_cost(0);
        self.with_core(node, done, |c, fx| c.child_gone(idx as usize, &g.why, fx));
        self.maybe_close(node, done);
    }

    fn parent_lost(&mut self, t: Time, node: u32, _why: &str) {
        let n = &mut self.nodes[node as usize];
        if n.cut {
            return;
        }
        n.cut = true;
        let done = t + self.msg_cost(0);
        self.with_core(node, done, |c, fx| c.kill(fx));
        self.maybe_close(node, done);
    }

    /// A finished agent exits: its connections close.
    fn maybe_close(&mut self, node: u32, t: Time) {
        if self.nodes[node as usize].root {
            return;
        }
        let n = &self.nodes[node as usize];
        if n.closed || n.dead || n.core.as_ref().is_none_or(|c| c.ranks_left() != 0) {
            return;
        }
        self.close_links(node, t, "connection closed");
        self.nodes[node as usize].closed = true;
    }

    fn close_links(&mut self, node: u32, t: Time, why: &'static str) {
        let n = &self.nodes[node as usize];
        let lat = ns(self.cfg.costs.latency * n.slow);
        let (parent, idx, cut) = (n.parent, n.idx, n.cut);
        let kids: Vec<(u32, bool)> = n
            .children
            .iter()
            .enumerate()
            .map(|(i, c)| (*c, n.child_up[i] && !n.child_lost[i]))
            .collect();
        if !cut && !self.nodes[node as usize].root {
            let at = t.max(self.nodes[node as usize].up_free) + lat;
            self.push(at, Ev::Closed { to: parent, from: From::Child(idx), why });
        }
        for (c, up) in kids {
            if up {
                self.push(t + lat, Ev::Closed { to: c, from: From::Parent, why });
            }
        }
    }

    // ------------------------------------------------------------------ ranks

    /// The rank-table index of local rank `local` of `node`.
    fn gid(&self, node: u32, local: u32) -> usize {
        let n = &self.nodes[node as usize];
        match &n.slots {
            Some(s) => s.get(local as usize).copied().unwrap_or(u32::MAX) as usize,
            None => (n.first_rank + local) as usize,
        }
    }

    fn who(&self, node: u32, local: u32) -> Who<'_> {
        let n = &self.nodes[node as usize];
        let g = &self.groups[n.group as usize];
        let first = self.gid(node, 0) as u32;
        Who {
            rank: self.gid(node, local) as u32 - g.first_rank,
            size: g.size,
            node: node - g.root - 1,
            kvsname: &g.kvsname,
            local_first: first.saturating_sub(g.first_rank),
            local_count: n.nranks,
            ppn: g.ppn,
            nodes: g.agents as u32,
            spawned: g.spawned,
        }
    }

    fn trace_of(&self, node: u32) -> Rc<Trace> {
        self.groups[self.nodes[node as usize].group as usize].trace.clone()
    }

    /// Rank `local` of `node` sends its next request at `t` (or exits when done).
    fn rank_next(&mut self, node: u32, local: u32, t: Time) {
        let gid = self.gid(node, local);
        let trace = self.trace_of(node);
        loop {
            let r = &self.ranks[gid];
            if matches!(r.state, RState::Done | RState::Gone | RState::Exiting) {
                return;
            }
            let step = r.step as usize;
            if step >= trace.steps.len() {
                self.ranks[gid].state = RState::Done;
                let at = t + ns(self.jitter(self.cfg.costs.rank_exit));
                self.push(at, Ev::RankExit { node, local, end: ProcEnd::Exited(0) });
                return;
            }
            let who = self.who(node, local);
            let count = trace.peer_count(step, &who);
            if r.peer_i >= count {
                let r = &mut self.ranks[gid];
                r.step += 1;
                r.peer_i = 0;
                continue;
            }
            let c = &self.cfg.costs;
            let (cost, lat) = (ns(c.rank_step), ns(c.pmi_latency));
            if trace.steps[step].pmix.is_some() {
                // A PMIx call to the node's server; every call waits for its answer.
                let r = &mut self.ranks[gid];
                r.peer_i += 1;
                r.asked = step as u32;
                r.state = RState::Waiting;
                let step = step as u32;
                self.work_then(t + lat, cost, Ev::PmixCall { node, local, step });
                return;
            }
            if let Some(p) = trace.steps[step].pmgr {
                // A PMGR operation on the rank's own connection.
                let coll = r.colls;
                let (bytes, answered) = pmgr_request(p.op, who.rank, who.size, coll, p.seed);
                let io = match p.op {
                    PmgrOp::Open => PmgrIo::Connect,
                    PmgrOp::Close => PmgrIo::SendClose,
                    _ => PmgrIo::Send,
                };
                let r = &mut self.ranks[gid];
                r.peer_i += 1;
                r.asked = step as u32;
                r.peer = coll;
                if p.op != PmgrOp::Open {
                    r.colls += 1;
                }
                r.pmgr = match io {
                    PmgrIo::Connect => PMGR_OPEN,
                    PmgrIo::SendClose => PMGR_CLOSED,
                    PmgrIo::Send => r.pmgr,
                };
                r.state = if answered { RState::Waiting } else { RState::Idle };
                self.work_then(t + lat, cost, Ev::Pmgr { node, local, io, bytes });
                if answered {
                    return;
                }
                continue;
            }
            let peer = trace.peer(step, r.peer_i, &who);
            let one_way = trace.steps[step].one_way;
            let r = &mut self.ranks[gid];
            r.peer_i += 1;
            r.asked = step as u32;
            r.peer = peer;
            r.state = if one_way { RState::Idle } else { RState::Waiting };
            let step = step as u32;
            self.work_then(t + lat, cost, Ev::FromRank { node, local, step, peer });
            if !one_way {
                return;
            }
        }
    }

    /// A wrong answer: as the replay client, the rank says so in one line and exits 1.
    fn rank_fails(&mut self, t: Time, node: u32, local: u32, what: String) {
        let gid = self.gid(node, local);
        self.out.mismatches += 1;
        if self.out.first_mismatch.is_none() {
            self.out.first_mismatch = Some(what);
        }
        self.ranks[gid].state = RState::Exiting;
        let at = t + ns(self.cfg.costs.rank_exit);
        self.push(at, Ev::RankExit { node, local, end: ProcEnd::Exited(1) });
    }

    fn answer_rank(&mut self, t: Time, node: u32, local: u32, bytes: &[u8]) {
        let gid = self.gid(node, local);
        let r = &self.ranks[gid];
        if r.state != RState::Waiting || self.nodes[node as usize].dead {
            return;
        }
        let (step, peer) = (r.asked as usize, r.peer);
        let trace = self.trace_of(node);
        let expect = trace.steps[step].expect.as_deref();
        let got = answer_cmd(bytes);
        let st = &trace.steps[step];
        let rc_ok = st.any_rc || (answer_rc(bytes) != 0) == st.expect_fail;
        let value_ok = || {
            let who = self.who(node, local);
            match trace.expected_value(step, &who, peer) {
                Some(v) => answer_value(bytes) == Some(v.as_str()),
                None => true,
            }
        };
        let pmi = trace.steps[step].pmgr.is_none();
        if !pmi || expect.is_some_and(|e| Some(e) != got) || !rc_ok || !value_ok() {
            let what = format!(
                "rank {gid}: expected cmd={} rc=0 (and the peer's value), got '{}'",
                expect.unwrap_or("?"),
                String::from_utf8_lossy(bytes).trim_end()
            );
            return self.rank_fails(t, node, local, what);
        }
        self.ranks[gid].state = RState::Idle;
        self.rank_next(node, local, t);
    }

    /// Bytes on local rank `local`'s PMGR connection: the answer to its collective, checked
    /// against PMGR's semantics.
    fn answer_pmgr(&mut self, t: Time, node: u32, local: u32, bytes: &[u8]) {
        let gid = self.gid(node, local);
        let r = &self.ranks[gid];
        if r.state != RState::Waiting || self.nodes[node as usize].dead {
            return;
        }
        let (step, coll) = (r.asked as usize, r.peer);
        let trace = self.trace_of(node);
        let who = self.who(node, local);
        let ok = match trace.steps[step].pmgr {
            None => false,
            Some(p) => match pmgr_expected(p.op, who.rank, who.size, coll, p.seed) {
                Some(want) => want == bytes,
                // A barrier's answer is one int (its value is not specified).
                None => bytes.len() == 4,
            },
        };
        if ok && self.nodes[node as usize].group == 0 {
            let done = &mut self.out.colls_done;
            if done.len() <= coll as usize {
                done.resize(coll as usize + 1, 0.0);
            }
            done[coll as usize] = done[coll as usize].max(secs(t));
        }
        if !ok {
            let op = trace.steps[step].pmgr.map(|p| format!("{:?}", p.op));
            let what = format!(
                "rank {gid}: PMGR {} (collective {coll}): wrong answer ({} bytes)",
                op.unwrap_or_else(|| "answer to a PMI request".into()),
                bytes.len()
            );
            return self.rank_fails(t, node, local, what);
        }
        self.ranks[gid].state = RState::Idle;
        self.rank_next(node, local, t);
    }

    // ------------------------------------------------------------------ PMIx

    /// Time a message of `bytes` takes between an agent and its companion (each way).
    fn pmix_hop(&self, bytes: usize) -> Time {
        let c = &self.cfg.costs;
        ns(c.pmix_hop + c.cpu_byte * bytes as f64)
    }

    /// `node`'s companion sends its agent `msg` at `t`.
    fn send_to_agent(&mut self, node: u32, t: Time, msg: FromCompanion) {
        let hop = self.pmix_hop(companion_bytes(&msg));
        let Some(comp) = self.nodes[node as usize].pmix.as_mut() else { return };
        let at = (t + hop).max(comp.up_at);
        comp.up_at = at;
        self.out.pmix_msgs += 1;
        self.push(at, Ev::FromCompanion { node, msg: Box::new(msg) });
    }

    /// `node`'s core answers its companion at `t` (`Effect::ToPmix`).
    fn send_to_companion(&mut self, node: u32, t: Time, msg: ToCompanion) {
        let bytes = match &msg {
            ToCompanion::FenceDone { blob, .. } | ToCompanion::ModexData { blob, .. } => blob.len(),
            _ => 0,
        } + 16;
        if self.nodes[node as usize].pmix.is_none() {
            let line = format!("no PMIx server on this node for {msg:?}");
            return libi_node::proto::effect::NodeIo::warn(&mut SimIo { c: self, node, t }, &line);
        }
        let sent = self.send_at(node, t, bytes);
        let hop = self.pmix_hop(bytes);
        let Some(comp) = self.nodes[node as usize].pmix.as_mut() else { return };
        let at = (sent + hop).max(comp.down_at);
        comp.down_at = at;
        self.push(at, Ev::ToCompanion { node, msg: Box::new(msg) });
    }

    /// Rank `local` of `node` called step `step` (a `>pmix` line): what its server does.
    fn pmix_call(&mut self, t: Time, node: u32, local: u32, step: u32) {
        let gid = self.gid(node, local);
        let n = &self.nodes[node as usize];
        if n.dead || n.pmix.is_none() || self.ranks[gid].state != RState::Waiting {
            return;
        }
        let g = n.group as usize;
        let nranks = n.nranks as usize;
        let trace = self.trace_of(node);
        let proc =
            PmixProc { nspace: self.groups[g].kvsname.clone(), rank: self.who(node, local).rank };
        let Some(op) = trace.steps[step as usize].pmix else { return };
        match op {
            PmixOp::Init => {
                if let Some(comp) = self.nodes[node as usize].pmix.as_mut() {
                    comp.seen.connected += 1;
                }
                self.send_to_agent(node, t, FromCompanion::ClientConnected { proc });
                self.pmix_release(t, node, local, Ok(()));
            }
            PmixOp::Finalize => {
                let Some(comp) = self.nodes[node as usize].pmix.as_mut() else { return };
                let id = comp.next_id();
                comp.finalizing.push((id, local));
                self.send_to_agent(node, t, FromCompanion::ClientFinalized { id, proc });
            }
            PmixOp::Fence(law) => {
                let Some(comp) = self.nodes[node as usize].pmix.as_mut() else { return };
                if comp.entered.is_empty() {
                    comp.law = law;
                }
                comp.entered.push(local);
                if comp.entered.len() < nranks {
                    return;
                }
                let law = comp.law;
                if self.groups[g].agents == 1 && self.cfg.pmix_localonly {
                    // Every participant is here: libpmix completes the fence itself.
                    comp.seen.local += 1;
                    for local in std::mem::take(&mut comp.entered) {
                        self.pmix_release(t, node, local, Ok(()));
                    }
                    return;
                }
                let id = comp.next_id();
                comp.asked = Some((id, law));
                let blob = self.pmix_blob(node, law);
                self.out.pmix_fences += 1;
                self.out.pmix_blob_up += blob.len() as u64;
                if let Some(comp) = self.nodes[node as usize].pmix.as_mut() {
                    comp.seen.asked.push(blob.len() as u64);
                }
                let procs = vec![PmixProc { nspace: proc.nspace, rank: RANK_WILDCARD }];
                let collect = law.is_some();
                let fence = FromCompanion::Fence { id, procs, collect, timeout: None, blob };
                self.send_to_agent(node, t, fence);
            }
        }
    }

    /// The agent's answer `msg` reached `node`'s companion at `t`: the ranks it releases.
    fn pmix_answer(&mut self, t: Time, node: u32, msg: ToCompanion) {
        let n = &self.nodes[node as usize];
        if n.dead || n.pmix.is_none() {
            return;
        }
        let g = n.group as usize;
        match msg {
            ToCompanion::FenceDone { id, status, blob } => {
                let Some(comp) = self.nodes[node as usize].pmix.as_mut() else { return };
                let law = match comp.asked {
                    Some((asked, law)) if asked == id => law,
                    _ => {
                        return self.pmix_warn(
                            t,
                            node,
                            format!("a FenceDone {id} nobody asked for"),
                        )
                    }
                };
                comp.asked = None;
                comp.seen.done.push(blob.len() as u64);
                let ranks = std::mem::take(&mut comp.entered);
                self.out.pmix_blob_down += blob.len() as u64;
                // libpmix unpacks every server's blob (and fails the fence if it cannot).
                let verdict = if status != 0 {
                    Err(format!("PMIx fence failed on node {node}: status {status}"))
                } else {
                    self.check_blob(g, law, &blob).map_err(|e| format!("node {node}: {e}"))
                };
                for local in ranks {
                    self.pmix_release(t, node, local, verdict.clone());
                }
            }
            ToCompanion::Done { id, status } => {
                let Some(comp) = self.nodes[node as usize].pmix.as_mut() else { return };
                let Some(i) = comp.finalizing.iter().position(|(f, _)| *f == id) else {
                    return self.pmix_warn(t, node, format!("a Done {id} nobody asked for"));
                };
                let (_, local) = comp.finalizing.swap_remove(i);
                comp.seen.finalized += 1;
                let verdict = if status == 0 {
                    Ok(())
                } else {
                    Err(format!("PMIx_Finalize failed on node {node}: status {status}"))
                };
                self.pmix_release(t, node, local, verdict);
            }
            // Events for the ranks (a lost rank or node): Open MPI's default handler does
            // nothing with them; the teardown ends the ranks.
            ToCompanion::Notify { .. } => {}
            other => {
                let what = format!("{other:?}");
                let what: String = what.chars().take(80).collect();
                self.pmix_warn(t, node, format!("an answer the workload never asks for: {what}"))
            }
        }
    }

    fn pmix_warn(&mut self, t: Time, node: u32, line: String) {
        let line = format!("PMIx server: {line}");
        libi_node::proto::effect::NodeIo::warn(&mut SimIo { c: self, node, t }, &line);
    }

    /// The server answers rank `local` of `node` at `t` (`Err`: the call failed, and the
    /// rank exits 1, as Open MPI does when a fence of `MPI_Init` fails).
    fn pmix_release(&mut self, t: Time, node: u32, local: u32, verdict: Result<(), String>) {
        let at = t + ns(self.cfg.costs.pmi_latency);
        let gid = self.gid(node, local);
        let r = &self.ranks[gid];
        if r.state != RState::Waiting || self.nodes[node as usize].dead {
            return;
        }
        if let Err(what) = verdict {
            return self.rank_fails(at, node, local, format!("rank {gid}: {what}"));
        }
        let trace = self.trace_of(node);
        if matches!(trace.steps[r.asked as usize].pmix, Some(PmixOp::Fence(_))) {
            let i = r.fenced as usize;
            self.ranks[gid].fenced += 1;
            if self.nodes[node as usize].group == 0 {
                let done = &mut self.out.fences_done;
                if done.len() <= i {
                    done.resize(i + 1, 0.0);
                }
                done[i] = done[i].max(secs(at));
            }
        }
        self.ranks[gid].state = RState::Idle;
        self.rank_next(node, local, at);
    }

    /// `node`'s blob for a fence with data of `law` (empty without data): as large as the
    /// law says for the node's ranks, starting with the node's index in its group and the
    /// blob's length (4 bytes each, little-endian) when it has room for them, so that
    /// [`Self::check_blob`] can find every node's blob in the concatenation.
    fn pmix_blob(&self, node: u32, law: Option<BlobLaw>) -> Vec<u8> {
        let Some(law) = law else { return Vec::new() };
        let n = &self.nodes[node as usize];
        let g = &self.groups[n.group as usize];
        let size = self.node_blob(node, law) as usize;
        let idx = node - g.root - 1;
        let mut b = vec![idx as u8; size];
        if size >= 8 {
            b[..4].copy_from_slice(&idx.to_le_bytes());
            b[4..8].copy_from_slice(&(size as u32).to_le_bytes());
        }
        b
    }

    /// The blob law's size for `node`'s ranks.
    fn node_blob(&self, node: u32, law: BlobLaw) -> u64 {
        let n = &self.nodes[node as usize];
        let base = self.groups[n.group as usize].first_rank;
        match &n.slots {
            Some(s) => law.size_of_ranks(&s.iter().map(|r| r - base).collect::<Vec<_>>()),
            None => law.size(n.first_rank.saturating_sub(base), n.nranks),
        }
    }

    /// Each agent's blob of group `g` for `law` (by agent index), and their sum.
    fn blob_sizes(&mut self, g: usize, law: BlobLaw) -> BlobSizes {
        if let Some((_, s)) = self.groups[g].blob_sizes.iter().find(|(l, _)| *l == law) {
            return s.clone();
        }
        let (root, agents) = (self.groups[g].root, self.groups[g].agents as u32);
        let sizes: Vec<u64> = (1..=agents).map(|p| self.node_blob(root + p, law)).collect();
        let total = sizes.iter().sum();
        let s = Rc::new((sizes, total));
        self.groups[g].blob_sizes.push((law, s.clone()));
        s
    }

    /// What libpmix finds in a fence's result: without data, nothing; with data, every
    /// node's blob exactly once (the concatenation, in any order), each as long as its law
    /// says.
    fn check_blob(&mut self, g: usize, law: Option<BlobLaw>, blob: &[u8]) -> Result<(), String> {
        let Some(law) = law else {
            return match blob.len() {
                0 => Ok(()),
                n => Err(format!("a fence without data came back with {n} bytes")),
            };
        };
        let sizes = self.blob_sizes(g, law);
        let (sizes, total) = (&sizes.0, sizes.1);
        if blob.len() as u64 != total {
            return Err(format!(
                "the fence's data is {} bytes, not the {total} of every node's blob",
                blob.len()
            ));
        }
        if sizes.iter().any(|&s| s > 0 && s < 8) {
            // Blobs too small to say whose they are: their sum is all there is to check.
            return Ok(());
        }
        let mut seen = vec![false; sizes.len()];
        let mut at = 0usize;
        while at < blob.len() {
            let word =
                |i: usize| blob.get(i..i + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
            let (Some(idx), Some(len)) = (word(at), word(at + 4)) else {
                return Err(format!("a blob cut short at byte {at}"));
            };
            let i = idx as usize;
            if i >= sizes.len() || seen[i] || u64::from(len) != sizes[i] || len < 8 {
                return Err(format!(
                    "at byte {at}: a blob of node {idx} ({len} bytes) that is not expected there"
                ));
            }
            seen[i] = true;
            at += len as usize;
        }
        Ok(())
    }

    // ------------------------------------------------------------------ effects

    /// Apply node `node`'s effects at time `t`: the agents' own interpreter
    /// (`libi_node::proto::effect::apply`), over this cluster's [`SimIo`].
    fn apply(&mut self, node: u32, t: Time, fx: &mut Vec<Effect>) {
        libi_node::proto::effect::apply(&mut SimIo { c: self, node, t }, fx);
    }

    fn note_memory(&mut self, node: u32) {
        let n = &mut self.nodes[node as usize];
        if let Some(c) = &n.core {
            let conn = std::mem::size_of::<pmi_wire::server::Connection>() as u64;
            let b = c.kvs().bytes() + c.local_count() as u64 * conn;
            n.peak_bytes = n.peak_bytes.max(b);
        }
    }

    // ------------------------------------------------------------------ front end

    /// What the root node of group `g` sends "up": to the root core, whose effects are
    /// applied at once (those of an event nested in that application after it).
    fn root_msg(&mut self, t: Time, g: usize, m: Msg) {
        if self.tree_closed {
            return;
        }
        if let Msg::SubtreeUp { nodes, .. } = &m {
            // Measured here: when every agent of the group had its ranks running.
            let gr = &mut self.groups[g];
            gr.nodes_up += *nodes as usize;
            if gr.nodes_up == gr.agents {
                gr.up = Some(secs(t));
            }
        }
        self.root.root_msg(secs(t), g, m);
        if self.out.launch.is_none() {
            self.out.launch = self.root.launch_time();
        }
        self.root_effects(t);
    }

    /// Apply the root core's effects until it has none, telling it the trees' state after
    /// them (as the front end's driver does after each event), then queue its next timer.
    fn root_effects(&mut self, t: Time) {
        if self.applying_root {
            return;
        }
        self.applying_root = true;
        loop {
            let mut fx = self.root.take_effects();
            if fx.is_empty() && self.root.phase() == Phase::Run {
                let cores =
                    self.groups.iter().filter_map(|g| self.nodes[g.root as usize].core.as_ref());
                let (mut finished, mut left) = (true, 0);
                for c in cores {
                    finished &= c.finished();
                    left += c.ranks_left();
                }
                self.root.tree_state(secs(t), finished, left);
                fx = self.root.take_effects();
            }
            if fx.is_empty() {
                break;
            }
            for e in fx {
                self.root_effect(t, e);
            }
        }
        self.applying_root = false;
        if let Some(at) = self.root.poll_timeout() {
            let at = ns(at).max(t);
            if self.root_timer_at.is_none_or(|cur| at < cur) {
                self.root_timer_at = Some(at);
                self.push(at, Ev::RootTimer);
            }
        }
    }

    /// One effect of the root core.
    fn root_effect(&mut self, t: Time, e: RootEffect) {
        let last_print = self.last_print.take();
        match e {
            RootEffect::Print(line) => {
                if self.out.prints.len() < PRINTS_MAX {
                    self.out.prints.push(line.clone());
                }
                self.last_print = Some(line);
            }
            RootEffect::Warn(w) => {
                if self.out.warnings.len() < 100 {
                    self.out.warnings.push(format!("front end: {w}"));
                }
            }
            RootEffect::KillGroup(g) => {
                if g == 0 && self.out.message.is_none() && self.root.killing() {
                    // The job fails: its line was printed right before.
                    self.out.message = last_print;
                }
                if let Some(gr) = self.groups.get(g) {
                    self.with_core(gr.root, t, |c, fx| c.kill(fx));
                }
            }
            RootEffect::ToGroup(g, m) => {
                if let Some(gr) = self.groups.get(g) {
                    self.with_core(gr.root, t, |c, fx| c.parent_msg(m, fx));
                }
            }
            RootEffect::GroupEffect(g, e) => {
                if let Some(gr) = self.groups.get(g) {
                    let (root, mut fx) = (gr.root, vec![e]);
                    self.apply(root, t, &mut fx);
                }
            }
            RootEffect::Ack { g, idx, bytes } => {
                if let Some(gr) = self.groups.get(g) {
                    self.send_down(gr.root, idx as u32, t, Msg::OutputAck { bytes });
                }
            }
            RootEffect::Spawn { g, req, request, who } => self.spawn(t, g, req, *request, who),
            RootEffect::CloseTree => {
                // The front end leaves its run: every link closes, and whatever still runs
                // below is torn down by the agents (the run goes on until every process is
                // gone). It started no launcher process to wait for.
                self.out.end = Some(secs(t));
                self.tree_closed = true;
                for g in 0..self.groups.len() {
                    let root = self.groups[g].root;
                    self.close_links(root, t, "connection closed");
                    self.nodes[root as usize].closed = true;
                }
                self.root.launchers_done(secs(t));
            }
            // Nothing is written: both writers are done at once.
            RootEffect::CloseOutput => {
                self.root.output_finished();
                self.root.output_finished();
            }
            // No output, stdin, terminal, launcher processes, report, debugger or outside
            // name server here.
            RootEffect::Debug(_)
            | RootEffect::AskNameServer { .. }
            | RootEffect::Terminal(_)
            | RootEffect::Stdout(_)
            | RootEffect::Output { .. }
            | RootEffect::StdinCredit(_)
            | RootEffect::StopLaunchers
            | RootEffect::WriteReport
            | RootEffect::ProcTable { .. } => {}
        }
    }

    /// The root core let a rank of group `g` (`who`) spawn: plan the new group as the real
    /// front end does (`libi::spawn`) and start its tree — the front end launches its agents
    /// itself (`RootCore::spawn_agents` is not asked: the job's agents starting them, the
    /// joined launcher, is not simulated) — then tell the root core, which answers it once
    /// its ranks run; or refuse it. The command's executable names the new ranks'
    /// workload: `self` (the spawner's), a built-in workload or a `.pmitrace` file.
    fn spawn(&mut self, t: Time, g: usize, req: u64, spawn: SpawnRequest, who: String) {
        let parent_root = self.groups[g].root;
        // Ranks still running, as the front end counts them (failed spawns not counted).
        let running: u64 = (self.groups.iter().enumerate())
            .filter(|(i, _)| !self.root.abandoned(*i))
            .filter_map(|(_, gr)| self.nodes[gr.root as usize].core.as_ref())
            .map(|c| c.ranks_left() as u64)
            .sum();
        let planned = match self.nodes[parent_root as usize].core.as_ref() {
            Some(core) => {
                let parent = core.job().clone();
                let number = self.groups.len();
                let planned = self.spawner.plan(&self.spawn_base, &parent, &spawn, running, number);
                planned.map_err(|e| e.to_string())
            }
            None => Err("the spawner's group has no root".into()),
        };
        let exe = spawn.cmds.first().map(|c| c.exe.as_str()).unwrap_or("");
        let src = match exe {
            "self" => Ok(self.groups[g].src.clone()),
            name => Trace::load(name).map(Rc::new).map_err(|e| e.to_string()),
        };
        let src = src.and_then(|s| {
            if s.uses_pmgr() {
                Err(format!("workload '{}' speaks PMGR, which only the job is served", s.name))
            } else if s.uses_pmix() {
                // The simulator has no PMIx connect between groups (the agents do).
                Err(format!(
                    "workload '{}' speaks PMIx: the simulator does not spawn PMIx groups",
                    s.name
                ))
            } else {
                Ok(s)
            }
        });
        let (group, src) = match planned.and_then(|p| src.map(|s| (p, s))) {
            Ok(x) => x,
            Err(why) => return self.root.spawn_refused(g, req, &who, &why),
        };
        let base = self.nodes.len() as u32;
        let first_rank = self.ranks.len() as u32;
        let number = self.groups.len() as u32;
        let (nodes, _) = plan_nodes(&group.root, base, number, first_rank);
        let agents = nodes.len() - 1;
        let ppn = nodes.get(1).map_or(1, |n| n.nranks.max(1));
        let size = group.job.size;
        let kvsname = group.job.kvsname.clone();
        self.nodes.extend(nodes);
        self.ranks.extend((0..size).map(|_| Rank::new()));
        self.out.ranks += u64::from(size);
        self.groups.push(Group {
            root: base,
            agents,
            first_rank,
            size,
            ppn,
            trace: Rc::new((*src).clone().fix_for(&kvsname)),
            src,
            kvsname: kvsname.clone(),
            spawned: true,
            nodes_up: 0,
            started: secs(t),
            up: None,
            blob_sizes: Vec::new(),
        });
        let setup = NodeSetup { job: group.job, plan: group.root };
        let core = self.new_core(setup, true);
        self.nodes[base as usize].life = Some(self.new_life(&core));
        self.nodes[base as usize].core = Some(core);
        let new = self.root.spawn_started(secs(t), g, req, who, agents, kvsname, None, "");
        debug_assert_eq!(new, number as usize);
        self.start_launches(base, t);
    }

    // ------------------------------------------------------------------ faults

    fn fault(&mut self, t: Time, i: usize) {
        match self.cfg.faults[i] {
            Fault::Kill { node, .. } => {
                if self.nodes[node as usize].dead {
                    return;
                }
                if self.nodes[node as usize].core.is_none() {
                    // Killed before it had its setup: under the fork launcher the NLA is its
                    // own launcher, and its parent sees that process die — now, if it was
                    // launched, else as soon as it is. If its hello was in already, the
                    // parent sees the connection close too (a hello still on its way is
                    // followed by the close: see `hello`).
                    let n = &mut self.nodes[node as usize];
                    n.never = true;
                    n.dead = true;
                    let (parent, idx) = (n.parent, n.idx);
                    let launched = self.nodes[parent as usize]
                        .life
                        .as_ref()
                        .is_some_and(|l| l.launched(idx as usize));
                    if launched {
                        self.push(t, Ev::LauncherExited { parent, idx, what: KILLED_EARLY });
                    }
                    if self.nodes[parent as usize].child_up[idx as usize] {
                        let lat = ns(self.cfg.costs.latency);
                        let why = "connection closed";
                        self.push(t + lat, Ev::Closed { to: parent, from: From::Child(idx), why });
                    }
                    return;
                }
                self.close_links(node, t, "connection closed");
                let n = &mut self.nodes[node as usize];
                n.dead = true;
                for local in 0..n.nranks {
                    let gid = self.gid(node, local);
                    self.ranks[gid].state = RState::Gone;
                }
            }
            Fault::Drop { node, .. } => {
                let n = &self.nodes[node as usize];
                if n.dead || n.cut {
                    return;
                }
                let (parent, idx) = (n.parent, n.idx);
                if !self.nodes[parent as usize].child_up[idx as usize] {
                    // Not connected yet: the connection breaks as soon as it is made.
                    self.nodes[node as usize].drop_on_connect = true;
                    return;
                }
                let lat = ns(self.cfg.costs.latency);
                self.push(
                    t + lat,
                    Ev::Closed { to: parent, from: From::Child(idx), why: "connection reset" },
                );
                self.push(
                    t + lat,
                    Ev::Closed { to: node, from: From::Parent, why: "connection reset" },
                );
            }
            Fault::Slow { .. } | Fault::Never { .. } => {}
        }
    }
}

/// A simulated node's I/O primitives: what the agents' effect interpreter
/// (`libi_node::proto::effect::apply`) calls, here moving messages in virtual time instead of
/// writing to sockets. Links have no write queues to fill here, so no child is ever full:
/// pausing and dropping a child have nothing to act on.
struct SimIo<'a> {
    c: &'a mut Cluster,
    node: u32,
    t: Time,
}

impl libi_node::proto::effect::NodeIo for SimIo<'_> {
    fn to_rank(&mut self, local: usize, bytes: Vec<u8>) {
        let (c, node, t) = (&mut *self.c, self.node, self.t);
        if bytes.starts_with(b"cmd=barrier_out") {
            let gid = c.gid(node, local as u32);
            let i = c.ranks[gid].fenced as usize;
            c.ranks[gid].fenced += 1;
            let done = &mut c.out.fences_done;
            if done.len() <= i {
                done.resize(i + 1, 0.0);
            }
            done[i] = done[i].max(secs(t));
        }
        // The rank reads its answer and sends its next request at once: one event (the
        // next request's arrival) instead of two.
        let at = c.send_pmi(node, t) + ns(c.cfg.costs.pmi_latency);
        c.answer_rank(at, node, local as u32, &bytes);
    }

    fn close_rank(&mut self, _: usize) {}

    fn to_parent(&mut self, m: Msg) {
        let (c, node, t) = (&mut *self.c, self.node, self.t);
        if c.nodes[node as usize].root {
            let g = c.nodes[node as usize].group as usize;
            c.root_msg(t, g, m)
        } else {
            c.send_up(node, t, m)
        }
    }

    fn to_child(&mut self, idx: usize, m: Msg) {
        self.c.send_down(self.node, idx as u32, self.t, m)
    }

    fn to_children(&mut self, m: Msg) {
        let n = self.c.nodes[self.node as usize].children.len() as u32;
        for idx in 0..n {
            self.c.send_down(self.node, idx, self.t, m.clone());
        }
    }

    /// The teardown's SIGTERM and SIGKILL end the ranks still running after the model's
    /// kill delay; other signals change nothing here.
    fn signal_ranks(&mut self, signal: i32) {
        if signal != libc::SIGTERM && signal != libc::SIGKILL {
            return;
        }
        let (c, node) = (&mut *self.c, self.node);
        let count = c.nodes[node as usize].nranks;
        let at = self.t + ns(c.cfg.costs.kill_delay);
        for local in 0..count {
            let gid = c.gid(node, local);
            let r = &mut c.ranks[gid];
            if matches!(r.state, RState::Idle | RState::Waiting) {
                r.state = RState::Exiting;
                c.push(at, Ev::RankExit { node, local, end: ProcEnd::Signaled(signal) });
            }
        }
    }

    fn stdin(&mut self, _: Vec<u8>) {}

    /// To the node's simulated PMIx server ([`Companion`]).
    fn to_pmix(&mut self, msg: ToCompanion) {
        self.c.send_to_companion(self.node, self.t, msg)
    }

    fn to_pmgr(&mut self, conn: u64, bytes: bytes::Bytes) {
        let at = self.t + ns(self.c.cfg.costs.pmi_latency);
        self.c.answer_pmgr(at, self.node, conn as u32, &bytes);
    }

    fn close_pmgr(&mut self, _: u64) {}

    fn start_nla(&mut self, host: &str, _: &str) {
        self.c.out.warnings.push(format!("spawn on {host}: not simulated"));
    }

    fn pause_child(&mut self, _: usize, _: bool) {}

    fn drop_child(&mut self, _: usize, _: &str) {}

    fn warn(&mut self, line: &str) {
        if self.c.out.warnings.len() < 100 {
            self.c.out.warnings.push(format!("node {}: {line}", self.node));
        }
    }
}

#[cfg(test)]
mod size {
    /// Events wait in the queue's buckets by value: keep them small.
    #[test]
    fn events_are_small() {
        assert!(std::mem::size_of::<super::Ev>() <= 48, "{}", std::mem::size_of::<super::Ev>());
    }
}

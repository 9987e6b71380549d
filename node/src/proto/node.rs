//! The node state machine shared by every NLA and by the front end (the root of the tree:
//! no local ranks, no parent). It owns the PMI connections of the local ranks, the node's KVS
//! and cache, the fence of its subtree and the bookkeeping of its children. Pure: it takes
//! events and returns [`Effect`]s; sockets, processes and timers live in the drivers.
//!
//! How a PMI-1 request is answered:
//! * requests that need no node knowledge (`init`, `get_maxes`, …): by the rank's
//!   [`pmi_wire::Connection`];
//! * `put`: stored in this node's KVS (a key once: a repeated put replaces the value, as
//!   Hydra's) and its key queued as pending for the current fence epoch;
//! * `barrier_in`: when every local rank and every child subtree entered, one `FenceIn` with
//!   the subtree's new pairs goes to the parent (one message per node per fence). The root
//!   (or the NLA highest in the tree whose subtree holds every rank of the job, a lone NLA
//!   say: the *fence root*, which then has every pair) then releases the fence down the tree: when the epoch's pairs total at most
//!   `kvs_push_max` bytes they travel down with the release (`pushed`) and every `get` is
//!   answered locally;
//! * big fences: no tree message carries more than the chunk size (`FENCE_CHUNK`) of pairs.
//!   Pending pairs beyond it go up at once as `FenceInPart`s (so a fence streams up while its
//!   pairs are put; the `FenceIn` carries the rest), a child's parts are merged and passed on
//!   as they arrive, and the root sends a big release as `FenceOutPart`s before its
//!   `FenceOut`. A node never holds a pair twice (the pending list holds keys only);
//! * KVS limit (`kvs_max`): a rank that put more, or a node that holds more (a lower bound
//!   of the job's total), fails the job naming the rank (the biggest contributor travels up
//!   with the fence data, [`KvsTop`]);
//! * `get`: from this node's KVS. A miss is final while every fence so far was pushed. After
//!   an unpushed fence a miss climbs the tree (`Get`) until some node has the key — every
//!   node holds its subtree's pairs, the root holds all — and the answer is cached at each
//!   node on the way down (the hierarchical cache). Concurrent misses for one key share one
//!   upward request.
//! * `publish_name`/`unpublish_name`/`lookup_name` and `spawn`: passed up the tree with a
//!   job-unique request id to the front end (which holds the name table and starts spawned
//!   process groups, see `libi::spawn`); the answer comes back down the same
//!   path. A malformed spawn block is answered `rc=-1` by the connection and the job goes on.

use crate::proto::kvs::{Kvs, Written};
use crate::proto::pmgr::{PmgrEffect, PmgrNode};
use crate::proto::pmix::{NameBatch, NameKind, PmixFences};
use libi::job::{human_bytes, JobCommon, NodePlan, NodeSetup, RankEnd, SpawnCmd, SpawnRequest};
use libi::msg::{pair_cost, Key, KvsTop, Msg, NameOp, ProcNode, Value, FENCE_CHUNK, PAIR_OVERHEAD};
use libi::report::{Counters, FenceRecord, NodeReport};
use libi_hwloc_xml::PMI_KEY as HWLOC_KEY;
use libi_pmix::proto::{status as pmix_status, FromCompanion, Proc as PmixProc, ToCompanion};
use pmi_wire::server::{Action, ConnConfig, Connection, Eof, Phase};
use pmi_wire::v1::ParseError;
use std::collections::{HashMap, HashSet};

/// What the driver must do.
#[derive(Debug, PartialEq)]
pub enum Effect {
    /// Write bytes to local rank `local`'s PMI socket.
    ToRank(usize, Vec<u8>),
    /// Close local rank `local`'s PMI socket.
    CloseRank(usize),
    /// Send a message to the parent (at the root: a job event for the front end).
    ToParent(Msg),
    /// Send a message to child `idx` (index into the plan's children).
    ToChild(usize, Msg),
    /// Send a message to every child.
    ToChildren(Msg),
    /// Tear down every local rank: SIGTERM now (the core sends [`Effect::SignalRanks`] with
    /// SIGKILL when the job's kill grace is over, see [`Timer::KillHard`]).
    KillRanks,
    /// Deliver a signal to every local rank.
    SignalRanks(i32),
    /// Bytes (empty = EOF) for the stdin of the local rank that is global rank 0.
    Stdin(Vec<u8>),
    /// A diagnostic line for stderr.
    Warn(String),
    /// Write bytes on PMGR connection `conn`.
    ToPmgr(u64, bytes::Bytes),
    /// Close PMGR connection `conn`.
    ClosePmgr(u64),
    /// Start an NLA of a spawned process group on this host (`libi-nla --rendezvous
    /// front_end --host host`).
    StartNla { host: String, front_end: String },
    /// Stop (`true`) or go back to (`false`) reading child `idx`'s connection: while what
    /// is sent to it waits for it to read, nothing more of its own is taken in.
    PauseChild(usize, bool),
    /// Drop child `idx`'s connection now, whatever is queued for it; its subtree is lost
    /// (`why`), as when the connection closes.
    DropChild(usize, String),
    /// Stop (`true`) or go back to (`false`) reading the parent's connection: a child is far
    /// behind ([`NodeCore::child_behind`]), and what comes from above would pile up here.
    PauseParent(bool),
    /// The node is torn down: launch no more children, and give up every child that has not
    /// connected now (its launcher killed) rather than at the end of its launch timeout
    /// ([`crate::proto::launch::Launches::abort`]). Connections that close before their
    /// hello are expected from now on (those children's).
    AbortLaunches,
    /// A message for this node's PMIx companion (`docs/spec/pmix-companion.md`).
    ToPmix(ToCompanion),
}

/// Every timeout of an NLA and of the front end's root core, with what it bounds. The
/// core's own timers ([`Timer`]) are set and fired here ([`NodeCore::poll_timeout`],
/// [`NodeCore::handle_timeout`]); the rest bound I/O in the drivers, which take their
/// values from here.
pub mod limits {
    use std::time::Duration;

    /// A PMGR failure waits this long for an abort record that may explain it, then fails
    /// the job ([`super::Timer::FailNow`]).
    pub const PMGR_ABORT_GRACE: Duration = Duration::from_millis(1500);
    /// A rank that closed its PMI connection half-way has this long to exit before the close
    /// itself fails the job: a crashing rank's socket closes just before its exit is seen
    /// ([`super::Timer::PmiClose`]).
    pub const PMI_CLOSE_GRACE: Duration = Duration::from_millis(250);
    /// A rank's exit waits this long for its PMGR connections to say their last: their EOF
    /// comes as the process is gone, unless something it left behind holds them
    /// ([`super::Timer::PmgrDrain`]).
    pub const PMGR_EXIT_DRAIN: Duration = Duration::from_secs(2);
    /// Once every rank of the subtree ended, the children get this long to close their
    /// connections before the NLA stops waiting for them ([`super::Timer::ChildrenWait`]).
    pub const CHILDREN_EXIT: Duration = Duration::from_secs(5);
    /// An NLA serving PMGR waits this long, once every local rank ended, for PMGR input
    /// still queued in its reader tasks ([`crate::proto::ending::FinalSweep`]).
    pub const PMGR_FINAL_SWEEP: Duration = Duration::from_millis(30);
    /// A rank that ended stays unreaped (a zombie, its pid and group still ours) until every
    /// local rank has ended, or at most this long ([`crate::proto::ending::HeldRanks`]): the
    /// kernel drops a process's `/proc` entries when it is reaped, which costs more while the
    /// rank's peers still run (MPICH ranks look one another up there).
    pub const ZOMBIE_HOLD: Duration = Duration::from_millis(250);
    /// An NLA waits this long for its setup after saying hello, or after its join (driver).
    pub const SETUP_WAIT: Duration = Duration::from_secs(120);
    /// How often a new NLA tries its connection to its parent again when it fails, unless
    /// its command line says otherwise (`--retries`, from `HYDRA_PROXY_RETRY_COUNT`): Hydra's
    /// default for its proxies.
    pub const CONNECT_RETRIES: u32 = 10;
    /// The wait before the first retry of a connection to the parent; it doubles at each
    /// one, up to [`RETRY_WAIT_MAX`] ([`crate::proto::tree::Retry`]). The default's ten retries
    /// span 1.3 s: a brief fault is ridden out, a lasting one (a wrong address, a firewall) is
    /// still reported at once, as a human sees it.
    pub const RETRY_WAIT: Duration = Duration::from_millis(10);
    /// The longest wait between two tries of a connection to the parent.
    pub const RETRY_WAIT_MAX: Duration = Duration::from_millis(200);
    /// How long a connection accepted on a tree port may take to say hello (driver: an NLA
    /// sends it as it connects).
    pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
    /// Most time the PMIx companion may take to start, register the job and hand out the
    /// ranks' environments (before the node's first rank starts), and to end after
    /// `Finalize`.
    pub const PMIX_START: Duration = Duration::from_secs(30);
    /// An NLA's last messages up (reports) get this long to be written (driver).
    pub const FINAL_SEND: Duration = Duration::from_secs(60);
    /// An NLA (or the front end) waits this long at exit for the launchers it started.
    pub const LAUNCHERS_EXIT: Duration = Duration::from_secs(5);
    /// A rank that reads neither its PMI replies nor its stdin for this long is stalled
    /// (driver: the write gives up and the core is told, [`super::NodeCore::rank_stalled`]).
    pub const STALL_LIMIT: Duration = Duration::from_secs(5);
    /// Rank output written to the parent link waits at most this long for more to travel
    /// with it (in the same socket write): a node whose ranks print a line each sends a few
    /// frames, not one per line, and the parent wakes once per batch. Anything else sent (a
    /// rank's end, a fence, an abort) goes at once, with the output before it
    /// ([`crate::proto::upqueue`]).
    pub const OUTPUT_LINGER: Duration = Duration::from_millis(1);
    /// A line a rank has begun but not ended (a prompt) is sent up as it is once the rank has
    /// written nothing more for this long, and none of its processes is running (a prompt's
    /// writer waits for input; one still at work, or waiting for a CPU on a loaded machine, is
    /// not silent: its line waits up to [`PARTIAL_MAX_WAIT`]): short enough that nobody waits
    /// for a prompt, long enough that a line written in several pieces goes up whole.
    pub const PARTIAL_FLUSH: Duration = Duration::from_millis(50);
    /// ... or once the line has waited this long for its newline, however steadily the rank
    /// goes on writing it (progress dots still show; a long line written piece by piece on a
    /// loaded machine still goes up whole).
    pub const PARTIAL_MAX_WAIT: Duration = Duration::from_secs(1);
    /// After a rank exits, how long its stdout/stderr may stay open and silent (held by its own
    /// children) before the node stops waiting for their EOF.
    pub const OUTPUT_DRAIN: Duration = Duration::from_millis(500);
    /// A child whose link stays full this long (it reads nothing of what it is sent) is
    /// dropped and its subtree lost ([`super::Timer::ChildStall`]); meanwhile its own input
    /// is not read, and nothing else waits for it.
    pub const CHILD_STALL: Duration = Duration::from_secs(30);
    /// Ranks an NLA starts in one turn of its event loop (driver): between two batches it
    /// serves what came (its parent's end, a teardown, the first ranks' PMI), whatever the
    /// number of ranks still to start. About 5 ms of clones here.
    pub const START_BATCH: usize = 64;
}

/// A timer of the core: what happens when it fires.
#[derive(Debug, Clone, PartialEq)]
pub enum Timer {
    /// Fail the job with this message unless it is failing already (a PMGR failure after its
    /// [`limits::PMGR_ABORT_GRACE`]).
    FailNow(String),
    /// Local rank `local` closed PMI half-way [`limits::PMI_CLOSE_GRACE`] ago: if it still
    /// runs, the job fails naming it.
    PmiClose(usize),
    /// Local rank `local` exited [`limits::PMGR_EXIT_DRAIN`] ago with a PMGR connection
    /// still undecided: judge its exit with what came.
    PmgrDrain(usize),
    /// The kill grace after the teardown's SIGTERM is over: SIGKILL what still runs.
    KillHard,
    /// Every rank ended [`limits::CHILDREN_EXIT`] ago and some child connection is still
    /// open: stop waiting for it (the node is finished).
    ChildrenWait,
    /// Child `idx`'s link has been full for [`limits::CHILD_STALL`]: it is dropped.
    ChildStall(usize),
}

/// How a rank process ended, before PMI state is taken into account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcEnd {
    Exited(i32),
    Signaled(i32),
    SpawnFailed { errno: i32, reason: String },
}

/// A request in flight up the tree (to the front end), and what the answer is for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pending {
    Name(NameOp),
    Spawn,
}

/// Who waits for a `Get` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waiter {
    Rank(usize),
    Child(usize),
    /// The PMIx companion's request of this id.
    Pmix(u64),
}

pub struct NodeCore {
    job: JobCommon,
    plan: NodePlan,
    is_root: bool,
    /// This node's subtree holds every rank of the job (the root's always does; so does a
    /// lone NLA's, or the top NLA's of a tree the front end reaches through one child): its
    /// fences are released here, without a round trip to the parent, every pair of the job
    /// is in its KVS, and a key missing here is missing.
    fence_root: bool,
    conns: Vec<Connection>,
    kvs: Kvs,
    /// Keys put in this subtree in the current epoch and not sent up yet (their values are
    /// in `kvs`), and roughly what they weigh in a chunk.
    pending: Vec<Key>,
    pending_cost: usize,
    /// Most bytes of pairs in one tree message ([`FENCE_CHUNK`]; smaller in tests).
    chunk: usize,
    /// KVS bytes each local rank put; the biggest contributor each child reported.
    rank_kvs: Vec<u64>,
    child_top: Vec<KvsTop>,
    /// At the root: bytes of the current epoch's pairs, and their keys while the epoch is
    /// small enough to be pushed down (`None` once it is not).
    epoch_bytes: u64,
    push_keys: Option<Vec<Key>>,
    epoch: u64,
    entered: Vec<bool>,
    n_entered: usize,
    child_fenced: Vec<bool>,
    n_child_fenced: usize,
    /// Some completed fence left its pairs up the tree: misses must climb.
    lazy: bool,
    waiting: HashMap<String, Vec<Waiter>, foldhash::fast::RandomState>,
    /// Ranks of each child's subtree that have not reported their end, and their sum.
    child_left: Vec<usize>,
    children_left: usize,
    /// Ends not reported one by one (see `JobCommon::each_end`): this node's clean and
    /// killed ranks, and what the children's subtrees reported, until the subtree is done.
    own_clean: u32,
    own_killed: u32,
    done: Vec<(u32, u32, u32)>,
    /// The parent ordered the teardown: ranks ending by SIGTERM/SIGKILL are its doing.
    killed_by_parent: bool,
    /// The connection to the parent is gone (see [`NodeCore::parent_lost`]).
    parent_lost: bool,
    /// Bytes of each child's output passed up and not acknowledged to it yet.
    child_unacked: Vec<u64>,
    /// Each local rank's pid once started (0: not started, or not ours).
    pids: Vec<i32>,
    /// Process-table requests waiting for children: (request, what came so far, children
    /// still to answer).
    proc_tables: Vec<(u64, Vec<ProcNode>, Vec<bool>)>,
    /// Launch progress not reported yet: (nodes, ranks) up in this subtree; whether this
    /// node started its ranks and which children reported theirs.
    up: (u32, u32),
    self_up: bool,
    child_up_seen: Vec<bool>,
    child_closed: Vec<bool>,
    /// Children whose link is full ([`NodeCore::child_full`]): their input is not read.
    child_blocked: Vec<bool>,
    /// Children far behind ([`NodeCore::child_behind`]): the parent is not read.
    child_far_behind: Vec<bool>,
    ended: Vec<bool>,
    n_ended: usize,
    stdin_child: Option<usize>,
    tearing_down: bool,
    counters: Counters,
    fence_enter: Vec<f64>,
    fences: Vec<FenceRecord>,
    report: bool,
    /// The time the driver last told (seconds on its monotonic clock, virtual time in the
    /// simulator): the core reads no clock; deadlines are set from this.
    now: f64,
    /// Pending timers, earliest last (a handful at a time: never one per rank at the root).
    timers: Vec<(f64, Timer)>,
    /// The SIGKILL of the teardown was sent; the children were given up on.
    killed_hard: bool,
    children_given_up: bool,
    /// At the root: keys of the current epoch that replaced an existing value.
    overwritten: HashSet<Key>,
    /// PMI-2 node attributes (node-local, never leave the node).
    node_attrs: HashMap<String, String>,
    /// This node's hwloc topology file (`PMI_hwloc_xmlfile`).
    hwloc: Hwloc,
    /// Local ranks waiting for a node attribute (`info-getnodeattr` with `wait=TRUE`).
    attr_waiters: HashMap<String, Vec<usize>>,
    /// The PMGR collective server (`--pmgr`).
    pmgr: Option<PmgrNode>,
    /// Exits of local ranks waiting for their PMGR connections (see `rank_ended`).
    pmgr_exits: HashMap<usize, ProcEnd>,
    /// Name-service and spawn requests in flight to the front end: who asked, and what.
    requests: HashMap<u64, (Waiter, Pending)>,
    next_req: u64,
    /// What a rank's bytes asked for, kept between calls (not reallocated per request).
    actions: Vec<Action>,
    /// PMIx jobs: the fences, and the companion's name-service requests in flight.
    pmix: Option<PmixFences>,
    pmix_names: HashMap<u64, NameBatch>,
    /// PMIx connects, group operations and fences of other participant sets this node's
    /// server waits for: key → its request, and what it is.
    pmix_connects: HashMap<String, (u64, PmixOp)>,
    /// Direct modex requests passing through: (asking group, request) → where the answer
    /// goes; and those this node's server is asked (our id → the request and where to).
    pmix_routes: HashMap<(String, u64), Back>,
    pmix_serving: HashMap<u64, (String, u64, Back)>,
    pmix_next: u64,
    /// Other groups' namespaces registered with this node's server.
    pmix_known: HashSet<String>,
    /// Ranks of this node that called `PMIx_Init` and not `PMIx_Finalize` yet: one that
    /// exits so left the job half-way (as a PMI-1 rank that did not finalize).
    pmix_open: HashSet<u32>,
}

/// A collective the front end counts (see `NodeCore::pmix_connect`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PmixOp {
    Connect,
    /// A group construct or destruct; whether its members asked for a context id.
    Group {
        ctxid: bool,
    },
    /// A fence over another set of participants than the job's ranks.
    Fence,
}

/// Where the answer to a request passing through a node goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Back {
    Parent,
    Child(usize),
    /// This node's PMIx companion, its request of this id.
    Pmix(u64),
}

/// This node's hwloc topology file, for `PMI_hwloc_xmlfile`.
#[derive(Debug)]
enum Hwloc {
    /// None: a rank that asks is told so.
    None,
    /// Being written: the ranks that asked (local rank, PMI-2 `info-getjobattr`?) wait.
    Writing(Vec<(usize, bool)>),
    /// Written: its path.
    Ready(String),
}

impl NodeCore {
    /// `report`: keep fence timings for the launch report.
    pub fn new(setup: NodeSetup, is_root: bool, report: bool) -> Self {
        let NodeSetup { job, plan } = setup;
        let mut kvs = Kvs::default();
        for (k, v) in &job.preput {
            kvs.store(k.as_str().into(), v.as_str().into());
        }
        let conns: Vec<Connection> = plan
            .ranks
            .iter()
            .map(|slot| {
                Connection::new(ConnConfig {
                    rank: slot.rank,
                    size: job.size,
                    appnum: slot.app as i32,
                    kvsname: job.kvsname.clone(),
                    universe_size: job.universe_size,
                    spawner: job.spawned_by.clone(),
                })
            })
            .collect();
        let n = conns.len();
        let nc = plan.children.len();
        let local_rank0 = plan.ranks.iter().any(|r| r.rank == 0);
        let stdin_child =
            if local_rank0 { None } else { plan.children.iter().position(|c| c.has_rank(0)) };
        let fence_root = is_root || plan.subtree_ranks() >= job.size as usize;
        NodeCore {
            child_left: plan.children.iter().map(NodePlan::subtree_ranks).collect(),
            children_left: plan.children.iter().map(NodePlan::subtree_ranks).sum(),
            own_clean: 0,
            own_killed: 0,
            done: Vec::new(),
            killed_by_parent: false,
            parent_lost: false,
            child_unacked: vec![0; nc],
            pids: vec![0; n],
            proc_tables: Vec::new(),
            up: (0, 0),
            self_up: false,
            child_up_seen: vec![false; nc],
            child_closed: vec![false; nc],
            child_blocked: vec![false; nc],
            child_far_behind: vec![false; nc],
            child_fenced: vec![false; nc],
            n_child_fenced: 0,
            job,
            plan,
            is_root,
            fence_root,
            conns,
            kvs,
            pending: Vec::new(),
            pending_cost: 0,
            chunk: FENCE_CHUNK,
            rank_kvs: vec![0; n],
            child_top: vec![KvsTop::default(); nc],
            epoch_bytes: 0,
            push_keys: Some(Vec::new()),
            epoch: 1,
            entered: vec![false; n],
            n_entered: 0,
            lazy: false,
            waiting: HashMap::default(),
            ended: vec![false; n],
            n_ended: 0,
            stdin_child,
            tearing_down: false,
            counters: Counters::default(),
            fence_enter: vec![0.0; n],
            fences: Vec::new(),
            report,
            now: 0.0,
            timers: Vec::new(),
            killed_hard: false,
            children_given_up: false,
            overwritten: HashSet::new(),
            node_attrs: HashMap::new(),
            hwloc: Hwloc::None,
            attr_waiters: HashMap::new(),
            pmgr: None,
            pmgr_exits: HashMap::new(),
            requests: HashMap::new(),
            next_req: 0,
            actions: Vec::new(),
            pmix: None,
            pmix_names: HashMap::new(),
            pmix_connects: HashMap::new(),
            pmix_routes: HashMap::new(),
            pmix_serving: HashMap::new(),
            pmix_next: 0,
            pmix_known: HashSet::new(),
            pmix_open: HashSet::new(),
        }
        .with_pmgr()
        .with_pmix()
    }

    fn with_pmix(mut self) -> Self {
        if self.job.pmix.is_some() {
            let has_server = !self.plan.ranks.is_empty();
            let children = self.plan.children.len();
            self.pmix = Some(PmixFences::new(has_server, children, self.fence_root));
        }
        self
    }

    fn with_pmgr(mut self) -> Self {
        if self.job.pmgr.is_some() {
            let local = self.plan.ranks.iter().map(|r| r.rank).collect();
            let child_ranks = self
                .plan
                .children
                .iter()
                .map(|c| c.nodes().iter().flat_map(|p| p.ranks.iter().map(|r| r.rank)).collect())
                .collect();
            self.pmgr = Some(PmgrNode::new(self.job.size, self.is_root, local, child_ranks));
        }
        self
    }

    // ---------------------------------------------------------------- PMGR

    /// A PMGR connection was accepted, held by (a process of) local rank `owner`.
    pub fn pmgr_connected(&mut self, conn: u64, owner: u32) {
        if let Some(p) = self.pmgr.as_mut() {
            p.connected(conn, owner);
        }
    }

    /// Bytes on a PMGR connection.
    pub fn pmgr_data(&mut self, conn: u64, bytes: &[u8], fx: &mut Vec<Effect>) {
        let mut pfx = Vec::new();
        if let Some(p) = self.pmgr.as_mut() {
            p.data(conn, bytes, &mut pfx);
        }
        self.pmgr_effects(pfx, fx);
    }

    /// A PMGR connection reached EOF.
    pub fn pmgr_eof(&mut self, conn: u64, fx: &mut Vec<Effect>) {
        let mut pfx = Vec::new();
        if let Some(p) = self.pmgr.as_mut() {
            p.eof(conn, &mut pfx);
        }
        self.pmgr_effects(pfx, fx);
    }

    fn pmgr_effects(&mut self, pfx: Vec<PmgrEffect>, fx: &mut Vec<Effect>) {
        for e in pfx {
            match e {
                PmgrEffect::Write(c, b) => fx.push(Effect::ToPmgr(c, b)),
                PmgrEffect::Close(c) => fx.push(Effect::ClosePmgr(c)),
                PmgrEffect::Up(m) => fx.push(Effect::ToParent(m)),
                PmgrEffect::ToChild(i, m) => fx.push(Effect::ToChild(i, m)),
                PmgrEffect::ToChildren(m) => fx.push(Effect::ToChildren(m)),
                PmgrEffect::Abort(rank, status, what) => {
                    if !self.tearing_down {
                        self.tearing_down = true;
                        let host = self.plan.host.clone();
                        let message = if rank == u32::MAX {
                            format!("a rank on {host} {what}")
                        } else {
                            format!("rank {rank} on {host} {what}")
                        };
                        fx.push(Effect::ToParent(Msg::Fatal { host, message, status }));
                    }
                }
                PmgrEffect::FailSoon(m) => {
                    self.set_timer(limits::PMGR_ABORT_GRACE, Timer::FailNow(m))
                }
            }
        }
        // Exits that waited for what their PMGR connections still had to say.
        let ready: Vec<usize> = self
            .pmgr_exits
            .keys()
            .copied()
            .filter(|&local| !self.pmgr.as_ref().is_some_and(|p| p.undecided(self.rank_of(local))))
            .collect();
        for local in ready {
            if let Some(end) = self.pmgr_exits.remove(&local) {
                self.judge_end(local, end, fx);
            }
        }
    }

    /// The wait of an [`Timer::PmgrDrain`] is over: judge the exit with what came.
    /// Returns whether the exit was still waiting (something the rank left behind holds its
    /// PMGR connection open).
    pub fn pmgr_drain_over(&mut self, local: usize, fx: &mut Vec<Effect>) -> bool {
        let Some(end) = self.pmgr_exits.remove(&local) else { return false };
        self.judge_end(local, end, fx);
        true
    }

    /// A [`Timer::FailNow`] is due: fail unless the job is already failing.
    pub fn fail_now(&mut self, message: String, fx: &mut Vec<Effect>) {
        if !self.tearing_down {
            self.fail(message, fx);
        }
    }

    /// The connection to the parent is gone (closed, failed, or our launcher's connection
    /// ended): the job is over for this subtree, and it is torn down here.
    pub fn parent_lost(&mut self, why: &str, fx: &mut Vec<Effect>) {
        if std::mem::replace(&mut self.parent_lost, true) {
            return;
        }
        if self.ranks_left() > 0 {
            let node = self.plan.node;
            let w = format!(
                "node {node}: lost the parent connection ({why}); terminating the job here"
            );
            fx.push(Effect::Warn(w));
        }
        self.kill(fx);
    }

    /// Whether [`NodeCore::parent_lost`] happened.
    pub fn parent_is_lost(&self) -> bool {
        self.parent_lost
    }

    /// The parent's messages cannot be decoded: tell it why (our writes may still reach
    /// it), then stop as if it left.
    pub fn parent_unreadable(&mut self, why: &str, fx: &mut Vec<Effect>) {
        if !self.parent_lost {
            let host = self.plan.host.clone();
            let message = format!("the NLA on {host} cannot read its parent's messages: {why}");
            fx.push(Effect::Warn(format!("node {}: {message}", self.plan.node)));
            fx.push(Effect::ToParent(Msg::Fatal { host, message, status: 255 }));
        }
        self.parent_lost(why, fx);
    }

    /// A message for the parent could not be encoded (it was dropped): the job fails.
    pub fn unsendable(&mut self, why: &str, fx: &mut Vec<Effect>) {
        let m = format!("node {}: cannot send a message to its parent: {why}", self.plan.node);
        self.fail_now(m, fx)
    }

    /// `bytes` of child `idx`'s output were written up: acknowledged to the child in
    /// batches of a quarter of the output window.
    pub fn child_output_passed(&mut self, idx: usize, bytes: u64, fx: &mut Vec<Effect>) {
        if let Some(n) = self.child_unacked.get_mut(idx) {
            *n += bytes;
            if *n >= libi::msg::OUTPUT_WINDOW / 4 {
                let bytes = std::mem::take(n);
                fx.push(Effect::ToChild(idx, Msg::OutputAck { bytes }));
            }
        }
    }

    // ---------------------------------------------------------------- time

    /// The time now (seconds on the driver's monotonic clock, or the simulator's virtual
    /// clock): the driver tells it once per turn of its loop, before the turn's events.
    pub fn set_now(&mut self, now: f64) {
        self.now = now;
    }

    fn now(&self) -> f64 {
        self.now
    }

    fn set_timer(&mut self, after: std::time::Duration, timer: Timer) {
        let at = self.now() + after.as_secs_f64();
        let pos = self.timers.partition_point(|(t, _)| *t > at);
        self.timers.insert(pos, (at, timer));
    }

    /// The timers pending, earliest first (deadline on the core's clock, and what fires).
    pub fn timers(&self) -> impl Iterator<Item = (f64, &Timer)> {
        self.timers.iter().rev().map(|(t, timer)| (*t, timer))
    }

    /// When the earliest timer is due (on the core's clock), if any: the driver calls
    /// [`NodeCore::handle_timeout`] then.
    pub fn poll_timeout(&self) -> Option<f64> {
        self.timers.last().map(|(t, _)| *t)
    }

    /// Fire every timer due at `now`, in order.
    pub fn handle_timeout(&mut self, now: f64, fx: &mut Vec<Effect>) {
        self.now = now;
        while self.timers.last().is_some_and(|(t, _)| *t <= now) {
            let Some((_, timer)) = self.timers.pop() else { break };
            self.fire(timer, fx);
        }
    }

    fn fire(&mut self, timer: Timer, fx: &mut Vec<Effect>) {
        match timer {
            Timer::FailNow(m) => {
                self.fail_now(m, fx);
                // The ends held back meanwhile, if every rank ended.
                self.flush_done(fx);
            }
            Timer::PmiClose(local) => {
                let running = !self.ended.get(local).copied().unwrap_or(true)
                    && !self.pmgr_exits.contains_key(&local);
                self.pmi_close_grace_over(local, running, fx)
            }
            Timer::PmgrDrain(local) => {
                self.pmgr_drain_over(local, fx);
            }
            Timer::KillHard => {
                if !std::mem::replace(&mut self.killed_hard, true)
                    && self.n_ended < self.conns.len()
                {
                    fx.push(Effect::SignalRanks(libc::SIGKILL));
                }
            }
            Timer::ChildrenWait => self.children_given_up = true,
            Timer::ChildStall(idx) => {
                if self.child_blocked.get(idx).copied().unwrap_or(false) {
                    let why = format!(
                        "it read nothing of what it was sent for {} s",
                        limits::CHILD_STALL.as_secs()
                    );
                    fx.push(Effect::DropChild(idx, why));
                }
            }
        }
    }

    /// What was sent to child `idx` fills its link (the driver queues it all the same):
    /// its own input is not read from now on, and it is dropped unless it reads within
    /// [`limits::CHILD_STALL`]. Nothing else waits for it.
    pub fn child_full(&mut self, idx: usize, fx: &mut Vec<Effect>) {
        let Some(b) = self.child_blocked.get_mut(idx) else { return };
        if std::mem::replace(b, true) || self.child_closed[idx] {
            return;
        }
        fx.push(Effect::PauseChild(idx, true));
        self.set_timer(limits::CHILD_STALL, Timer::ChildStall(idx));
    }

    /// Child `idx` fell more than the backlog limit behind (`true`), or caught up: while any
    /// child is that far behind, the parent's connection is not read (a stream down the
    /// tree then waits above this node instead of piling up in it). The root has no parent
    /// to pause: its own releases are bounded by the job's limits.
    pub fn child_behind(&mut self, idx: usize, behind: bool, fx: &mut Vec<Effect>) {
        let Some(b) = self.child_far_behind.get_mut(idx) else { return };
        if std::mem::replace(b, behind) == behind {
            return;
        }
        let n = self.child_far_behind.iter().filter(|b| **b).count();
        match (behind, n) {
            (true, 1) => fx.push(Effect::PauseParent(true)),
            (false, 0) => fx.push(Effect::PauseParent(false)),
            _ => {}
        }
    }

    /// Child `idx` read what filled its link: its input is read again.
    pub fn child_room(&mut self, idx: usize, fx: &mut Vec<Effect>) {
        let Some(b) = self.child_blocked.get_mut(idx) else { return };
        if !std::mem::replace(b, false) {
            return;
        }
        self.timers.retain(|(_, t)| *t != Timer::ChildStall(idx));
        if !self.child_closed[idx] {
            fx.push(Effect::PauseChild(idx, false));
        }
    }

    /// Every rank ended: give the children [`limits::CHILDREN_EXIT`] to close.
    fn watch_children(&mut self) {
        if self.ranks_left() == 0
            && !self.child_closed.iter().all(|c| *c)
            && !self.timers.iter().any(|(_, t)| *t == Timer::ChildrenWait)
        {
            self.set_timer(limits::CHILDREN_EXIT, Timer::ChildrenWait);
        }
    }

    /// Most payload bytes per PMGR part (default `libi::msg::PMGR_CHUNK`; tests make it
    /// small, see `PmgrNode::set_chunk`).
    pub fn set_pmgr_chunk(&mut self, bytes: usize) {
        if let Some(p) = self.pmgr.as_mut() {
            p.set_chunk(bytes);
        }
    }

    /// Most bytes of pairs per tree message (default [`FENCE_CHUNK`]; tests make it small).
    pub fn set_fence_chunk(&mut self, bytes: usize) {
        self.chunk = bytes.max(1);
    }

    /// The node's KVS.
    pub fn kvs(&self) -> &Kvs {
        &self.kvs
    }

    pub fn job(&self) -> &JobCommon {
        &self.job
    }

    /// `--bcast`: app `app` runs the staged copy at `path` on this node.
    pub fn set_exe(&mut self, app: usize, path: String) {
        if let Some(a) = self.job.apps.get_mut(app) {
            a.exe = path;
        }
    }

    pub fn plan(&self) -> &NodePlan {
        &self.plan
    }

    pub fn local_count(&self) -> usize {
        self.conns.len()
    }

    /// The driver is writing this node's hwloc topology file: a local rank that asks for
    /// `PMI_hwloc_xmlfile` (PMI-1 `get`, PMI-2 `info-getjobattr`) waits for
    /// [`NodeCore::set_hwloc_xmlfile`]. (Without either call it is told there is none, and
    /// discovers the topology itself.) Never asked of the front end: the file is this node's.
    pub fn hwloc_xmlfile_pending(&mut self) {
        if matches!(self.hwloc, Hwloc::None) {
            self.hwloc = Hwloc::Writing(Vec::new());
        }
    }

    /// This node's hwloc topology file (`None`: there is none after all): the ranks waiting
    /// for it are answered, and so is every later request.
    /// This node's hwloc topology file, once written (`None` before, or when there is none).
    pub fn hwloc_xmlfile(&self) -> Option<&str> {
        match &self.hwloc {
            Hwloc::Ready(p) => Some(p.as_str()),
            _ => None,
        }
    }

    pub fn set_hwloc_xmlfile(&mut self, path: Option<String>, fx: &mut Vec<Effect>) {
        let waiting = match std::mem::replace(&mut self.hwloc, Hwloc::None) {
            Hwloc::Writing(w) => w,
            _ => Vec::new(),
        };
        if let Some(p) = path {
            self.hwloc = Hwloc::Ready(p);
        }
        for (local, job_attr) in waiting {
            self.answer_hwloc(local, job_attr, fx);
        }
    }

    /// Answer local rank `local`'s request for the topology file (PMI-2's `info-getjobattr`
    /// if `job_attr`, else PMI-1's `get`), or hold it while the file is being written.
    fn answer_hwloc(&mut self, local: usize, job_attr: bool, fx: &mut Vec<Effect>) {
        let path = match &mut self.hwloc {
            Hwloc::Writing(w) => return w.push((local, job_attr)),
            Hwloc::Ready(p) => Some(p.as_str()),
            Hwloc::None => None,
        };
        let Some(conn) = self.conns.get_mut(local) else { return };
        let reply = if job_attr {
            conn.answer_job_attr(HWLOC_KEY, path)
        } else {
            // A `get` answered here, as the counters count the others (job attributes are
            // not counted).
            self.counters.gets_local += 1;
            conn.answer_get(HWLOC_KEY, path.map(str::as_bytes))
        };
        fx.push(Effect::ToRank(local, reply));
    }

    /// The setup to send to child `idx` once it authenticated.
    pub fn child_setup(&self, idx: usize) -> Option<NodeSetup> {
        let plan = self.plan.children.get(idx)?.clone();
        Some(NodeSetup { job: self.job.for_subtree(&plan), plan })
    }

    /// Index of the child with node id `node`.
    pub fn child_index(&self, node: u32) -> Option<usize> {
        self.plan.children.iter().position(|c| c.node == node)
    }

    /// Ranks of child `idx`'s subtree that have not reported their end.
    pub fn child_ranks_left(&self, idx: usize) -> usize {
        self.child_left.get(idx).copied().unwrap_or(0)
    }

    /// Every local rank has ended (and been judged: a PMGR exit still in its drain is not).
    pub fn local_ranks_ended(&self) -> bool {
        self.n_ended >= self.conns.len()
    }

    /// Ranks of this subtree that have not ended yet.
    pub fn ranks_left(&self) -> usize {
        (self.conns.len() - self.n_ended) + self.children_left
    }

    /// Whether this node releases the job's fences (see the `fence_root` field).
    pub fn is_fence_root(&self) -> bool {
        self.fence_root
    }

    /// PMIx jobs: the job's PMIx fences this node completed (0 without PMIx).
    pub fn pmix_fences(&self) -> u64 {
        self.pmix.as_ref().map_or(0, PmixFences::seq)
    }

    /// Every rank of the subtree ended, every child connection closed, and no failure is
    /// in its grace.
    pub fn finished(&self) -> bool {
        self.ranks_left() == 0
            && (self.children_given_up || self.child_closed.iter().all(|c| *c))
            && !self.failure_pending()
    }

    /// A PMGR failure waits out its grace ([`Timer::FailNow`]).
    fn failure_pending(&self) -> bool {
        self.timers.iter().any(|(_, t)| matches!(t, Timer::FailNow(_)))
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// This node's part of the launch report (launch records are the driver's).
    /// This node's part of the launch report. Its fence records are stamped with the times
    /// the driver told the core (`set_now`); `stamp` turns one into the report's time (the
    /// agents and the front end: [`libi::clock::wall`]; the simulator: its virtual time as
    /// it is).
    pub fn report(&self, stamp: impl Fn(f64) -> f64) -> NodeReport {
        let fences = self
            .fences
            .iter()
            .map(|f| FenceRecord { enter: stamp(f.enter), leave: stamp(f.leave), ..f.clone() })
            .collect();
        NodeReport {
            node: self.plan.node,
            host: self.plan.host.clone(),
            fences,
            counters: Counters { kvs_bytes: self.kvs.bytes(), ..self.counters.clone() },
            ..NodeReport::default()
        }
    }

    fn rank_of(&self, local: usize) -> u32 {
        self.plan.ranks.get(local).map(|s| s.rank).unwrap_or(u32::MAX)
    }

    fn fail(&mut self, message: String, fx: &mut Vec<Effect>) {
        // No fence completes here any more: no rank proceeds past a broken one.
        self.tearing_down = true;
        fx.push(Effect::ToParent(Msg::Fatal { host: self.plan.host.clone(), message, status: 1 }));
    }

    // ---------------------------------------------------------------- local ranks

    /// A hint that local rank `local`'s bytes come next: its connection's state is loaded
    /// into the CPU's cache meanwhile. No effect on behaviour; the simulator, which knows its
    /// next event, calls it (at 100k agents that state is gigabytes, and the miss on it was a
    /// tenth of a run).
    pub fn prefetch_rank(&self, local: usize) {
        if let Some(c) = self.conns.get(local) {
            let p = (c as *const Connection).cast::<u8>();
            for off in (0..std::mem::size_of::<Connection>()).step_by(64) {
                libi::prefetch(p.wrapping_add(off));
            }
        }
    }

    /// Bytes read from local rank `local`'s PMI socket.
    pub fn rank_data(&mut self, local: usize, data: &[u8], fx: &mut Vec<Effect>) {
        let Some(conn) = self.conns.get_mut(local) else {
            return;
        };
        let mut actions = std::mem::take(&mut self.actions);
        conn.receive(data, &mut actions);
        for a in actions.drain(..) {
            self.action(local, a, fx);
        }
        self.actions = actions;
    }

    fn action(&mut self, local: usize, a: Action, fx: &mut Vec<Effect>) {
        match a {
            Action::Send(b) => fx.push(Effect::ToRank(local, b)),
            Action::Put { key, value } => self.put(local, key, value, fx),
            Action::Get { key } => self.local_get(local, key, fx),
            Action::BarrierIn => {
                if !self.entered[local] {
                    self.entered[local] = true;
                    self.n_entered += 1;
                    self.fence_enter[local] = self.now();
                }
                self.maybe_fence_in(fx);
            }
            Action::Finalized => {}
            Action::Abort { exitcode, message } => fx.push(Effect::ToParent(Msg::Abort {
                rank: self.rank_of(local),
                host: self.plan.host.clone(),
                code: exitcode,
                message,
            })),
            Action::Spawn { cmds } => {
                let cmds = cmds
                    .into_iter()
                    .map(|c| SpawnCmd {
                        exe: c.execname,
                        args: c.args,
                        nprocs: c.nprocs,
                        preput: c.preput,
                        info: c.info,
                        env: Vec::new(),
                    })
                    .collect();
                let app = self.plan.ranks.get(local).map(|s| s.app).unwrap_or(0);
                let host = self.plan.host.clone();
                let rank = self.rank_of(local);
                let spawn = Box::new(SpawnRequest { rank, app, host, cmds });
                let req = self.request(Waiter::Rank(local), Pending::Spawn);
                fx.push(Effect::ToParent(Msg::Spawn { req, spawn }));
            }
            Action::Publish { service, port } => {
                self.name_request(local, NameOp::Publish { service, port }, fx)
            }
            Action::Unpublish { service } => {
                self.name_request(local, NameOp::Unpublish { service }, fx)
            }
            Action::Lookup { service } => self.name_request(local, NameOp::Lookup { service }, fx),
            Action::PutNodeAttr { key, value } => {
                for w in self.attr_waiters.remove(&key).unwrap_or_default() {
                    let reply = self.conns[w].answer_node_attr(&key, Some(&value));
                    fx.push(Effect::ToRank(w, reply));
                }
                self.node_attrs.insert(key, value);
            }
            Action::GetNodeAttr { key, wait } => match self.node_attrs.get(&key).cloned() {
                Some(v) => {
                    let reply = self.conns[local].answer_node_attr(&key, Some(&v));
                    fx.push(Effect::ToRank(local, reply));
                }
                None if wait => self.attr_waiters.entry(key).or_default().push(local),
                None => {
                    let reply = self.conns[local].answer_node_attr(&key, None);
                    fx.push(Effect::ToRank(local, reply));
                }
            },
            Action::GetJobAttr { key } if key == HWLOC_KEY => self.answer_hwloc(local, true, fx),
            Action::GetJobAttr { key } => {
                // Job attributes are the server-owned pairs pre-loaded into every NLA.
                let value = self.job.preput.iter().find(|(k, _)| *k == key).map(|(_, v)| v.clone());
                let reply = self.conns[local].answer_job_attr(&key, value.as_deref());
                fx.push(Effect::ToRank(local, reply));
            }
            Action::ProtocolError { error, excerpt, fatal } => {
                let rank = self.rank_of(local);
                let what = format!(
                    "rank {rank} on {}: malformed PMI request ({error}): \"{excerpt}\"",
                    self.plan.host
                );
                if fatal {
                    fx.push(Effect::CloseRank(local));
                }
                if !fatal && matches!(error, ParseError::Spawn(_)) {
                    // The rank got an error spawn_result and goes on (MPI returns an error).
                    fx.push(Effect::Warn(format!("{what}; the spawn failed")));
                } else if fatal || !matches!(error, ParseError::UnknownCommand(_)) {
                    // A client that sends garbage is broken: fail the job now rather than let
                    // the other ranks wait for it in the next fence.
                    self.fail(what, fx);
                } else {
                    // A well-formed command we do not implement got an error reply.
                    fx.push(Effect::Warn(what));
                }
            }
        }
    }

    /// Local rank `local` put a pair: stored once (a repeated put replaces the value), its
    /// key pending for the fence; pending pairs beyond a chunk go up now.
    fn put(&mut self, local: usize, key: String, value: Vec<u8>, fx: &mut Vec<Effect>) {
        if self.tearing_down {
            return;
        }
        let key = Key::from(key);
        let w = if self.fence_root {
            self.root_merge(key, value.into())
        } else {
            self.pending_cost += pair_cost(&key, &value);
            let w = self.kvs.write(key.clone(), value.into(), self.epoch, true);
            if w.queued {
                self.pending.push(key);
            }
            w
        };
        let put = self.rank_kvs.get_mut(local).map(|b| {
            *b += w.grew;
            *b
        });
        if let Some(put) = put.filter(|&b| b > self.job.kvs_max) {
            let what = format!(
                "rank {} on {} put {} of KVS data; the job's limit is {} (--kvs-max)",
                self.rank_of(local),
                self.plan.host,
                human_bytes(put),
                human_bytes(self.job.kvs_max)
            );
            return self.fail(what, fx);
        }
        if !self.check_kvs(fx) && self.pending_cost >= self.chunk {
            self.send_pending(false, fx);
        }
    }

    /// The biggest KVS contributor of this subtree.
    fn top(&self) -> KvsTop {
        let local = self
            .rank_kvs
            .iter()
            .enumerate()
            .map(|(l, &bytes)| KvsTop { rank: self.rank_of(l), bytes });
        local.chain(self.child_top.iter().copied()).fold(KvsTop::default(), KvsTop::max)
    }

    /// Fail the job if this node holds more KVS data than the job may put (what one node
    /// holds is part of the job's total). Returns whether it failed.
    fn check_kvs(&mut self, fx: &mut Vec<Effect>) -> bool {
        let held = self.kvs.bytes();
        if held <= self.job.kvs_max || self.tearing_down {
            return false;
        }
        let top = self.top();
        let most = if top.bytes > 0 {
            let host = self
                .plan
                .nodes()
                .into_iter()
                .find(|p| p.ranks.iter().any(|r| r.rank == top.rank))
                .map(|p| p.host.clone())
                .unwrap_or_else(|| "?".into());
            format!(" (rank {} on {host} put the most: {})", top.rank, human_bytes(top.bytes))
        } else {
            String::new()
        };
        let what = format!(
            "the job's KVS data reached {}{most}; the job's limit is {} (--kvs-max)",
            human_bytes(held),
            human_bytes(self.job.kvs_max)
        );
        self.fail(what, fx);
        true
    }

    /// Send the pending pairs up: as `FenceInPart`s of at most a chunk each, the last one
    /// as the `FenceIn` when `close`.
    fn send_pending(&mut self, close: bool, fx: &mut Vec<Effect>) {
        let keys = std::mem::take(&mut self.pending);
        self.pending_cost = 0;
        let (epoch, top) = (self.epoch, self.top());
        let mut chunks = Chunks::new(self.chunk);
        for key in keys {
            if let Some(value) = self.kvs.unpend(&key) {
                if let Some((pairs, _)) = chunks.pair(key, value) {
                    self.counters.fence_parts_up += 1;
                    fx.push(Effect::ToParent(Msg::FenceInPart { epoch, pairs, top }));
                }
            }
        }
        let (pairs, _) = chunks.finish();
        if close {
            fx.push(Effect::ToParent(Msg::FenceIn { epoch, pairs, top }));
        } else if !pairs.is_empty() {
            self.counters.fence_parts_up += 1;
            fx.push(Effect::ToParent(Msg::FenceInPart { epoch, pairs, top }));
        }
    }

    fn local_get(&mut self, local: usize, key: String, fx: &mut Vec<Effect>) {
        if key == HWLOC_KEY {
            // Node-local: answered here, never asked of the front end.
            self.answer_hwloc(local, false, fx);
        } else if let Some(v) = self.kvs.get(&key) {
            self.counters.gets_local += 1;
            if self.kvs.is_cached(&key) {
                self.counters.cache_hits += 1;
            }
            let reply = self.conns[local].answer_get(&key, Some(v));
            fx.push(Effect::ToRank(local, reply));
        } else if self.lazy && !self.fence_root {
            self.wait_for(key, Waiter::Rank(local), fx);
        } else {
            self.counters.gets_local += 1;
            let reply = self.conns[local].answer_get(&key, None);
            fx.push(Effect::ToRank(local, reply));
        }
    }

    /// A name-service request from local rank `local`: it goes up to the front end, which
    /// holds the job-wide table.
    fn name_request(&mut self, local: usize, op: NameOp, fx: &mut Vec<Effect>) {
        let req = self.request(Waiter::Rank(local), Pending::Name(op.clone()));
        fx.push(Effect::ToParent(Msg::Name { req, op }));
    }

    // ---------------------------------------------------------------- PMIx

    /// A message from this node's PMIx companion (`docs/spec/pmix-companion.md` §6). The
    /// driver handles the start-up answers (`Ready`, `Registered`, `ForkEnv`) and the end
    /// (`Deregistered`, `Bye`); everything the ranks ask for comes here.
    pub fn pmix_msg(&mut self, msg: FromCompanion, fx: &mut Vec<Effect>) {
        let host = self.plan.host.clone();
        match msg {
            FromCompanion::Fence { id, procs, blob, .. } => {
                let kvsname = &self.job.kvsname;
                let wildcard = procs
                    .iter()
                    .any(|p| &p.nspace == kvsname && p.rank == libi_pmix::proto::RANK_WILDCARD);
                let ranks: HashSet<u32> =
                    procs.iter().filter(|p| &p.nspace == kvsname).map(|p| p.rank).collect();
                let whole = wildcard || ranks.len() as u64 == u64::from(self.job.size);
                match self.pmix.as_mut() {
                    // The job's own fences (MPI_Init's, MPI_Finalize's) go up the tree.
                    Some(f) if whole && procs.iter().all(|p| &p.nspace == kvsname) => {
                        f.server_entered(id, &blob, fx)
                    }
                    // Others (over part of the job, or over several groups: a disconnect's)
                    // are counted by the front end, as a connect is.
                    _ => self.pmix_connect(id, procs, "fence ", PmixOp::Fence, blob, fx),
                }
            }
            FromCompanion::ClientConnected { proc } => {
                if proc.nspace == self.job.kvsname {
                    self.pmix_open.insert(proc.rank);
                }
            }
            // Recorded before the answer: the rank cannot exit before it, so an exit after it
            // is a clean one.
            FromCompanion::ClientFinalized { id, proc } => {
                if proc.nspace == self.job.kvsname {
                    self.pmix_open.remove(&proc.rank);
                }
                fx.push(Effect::ToPmix(ToCompanion::Done { id, status: pmix_status::SUCCESS }))
            }
            FromCompanion::Abort { id, proc, status, message, .. } => {
                let message = (!message.is_empty()).then_some(message);
                fx.push(Effect::ToParent(Msg::Abort {
                    rank: proc.rank,
                    host,
                    code: status,
                    message,
                }));
                fx.push(Effect::ToPmix(ToCompanion::Done { id, status: pmix_status::SUCCESS }));
            }
            FromCompanion::Publish { id, pairs, .. } => {
                let ops =
                    pairs.into_iter().map(|(service, port)| NameOp::Publish { service, port });
                self.pmix_names(id, NameKind::Publish, ops.collect(), fx);
            }
            FromCompanion::Unpublish { id, keys, .. } => {
                let ops = keys.into_iter().map(|service| NameOp::Unpublish { service });
                self.pmix_names(id, NameKind::Unpublish, ops.collect(), fx);
            }
            FromCompanion::Lookup { id, keys, wait, .. } => {
                let ops = keys.into_iter().map(|service| NameOp::Lookup { service });
                let kind = if wait { NameKind::LookupWait } else { NameKind::Lookup };
                self.pmix_names(id, kind, ops.collect(), fx);
            }
            FromCompanion::DirectModex { id, proc } => {
                let from = self.job.kvsname.clone();
                let req = (u64::from(self.plan.node) << 32) | self.pmix_next;
                self.pmix_next += 1;
                self.pmix_route(from, req, proc.nspace, proc.rank, Back::Pmix(id), fx);
            }
            FromCompanion::DmodexData { id, status, blob } => match self.pmix_serving.remove(&id) {
                Some((from, req, back)) => {
                    self.pmix_deliver(back, Msg::PmixDmodexData { from, req, status, blob }, fx)
                }
                None => fx.push(Effect::Warn(format!(
                    "PMIx server on {host}: an answer {id} nobody asked for"
                ))),
            },
            FromCompanion::Connect { id, procs } => {
                self.pmix_connect(id, procs, "", PmixOp::Connect, Vec::new(), fx)
            }
            FromCompanion::Disconnect { id, procs } => {
                self.pmix_connect(id, procs, "disconnect ", PmixOp::Connect, Vec::new(), fx)
            }
            FromCompanion::Group { id, construct, grp, procs, assign_ctxid } => {
                let op = if construct { "construct" } else { "destruct" };
                let kind = format!("group {op} {grp} ");
                let op = PmixOp::Group { ctxid: assign_ctxid };
                self.pmix_connect(id, procs, &kind, op, Vec::new(), fx)
            }
            FromCompanion::Spawn { id, proc, apps, .. } => {
                let cmds: Vec<SpawnCmd> = apps
                    .into_iter()
                    .map(|a| {
                        let env = (a.env.iter())
                            .filter_map(|e| e.split_once('='))
                            .map(|(k, v)| (k.to_string(), v.to_string()))
                            .collect();
                        let mut info = a.info;
                        if let Some(cwd) = a.cwd {
                            info.push(("wdir".into(), cwd));
                        }
                        // PMIx's argv starts with the command (as a C main sees it).
                        let args = a.argv.into_iter().skip(1).collect();
                        let nprocs = u32::try_from(a.maxprocs).unwrap_or(0);
                        SpawnCmd { exe: a.cmd, args, nprocs, preput: Vec::new(), info, env }
                    })
                    .collect();
                let app = self.plan.ranks.iter().find(|s| s.rank == proc.rank).map_or(0, |s| s.app);
                let spawn = Box::new(SpawnRequest { rank: proc.rank, app, host, cmds });
                let req = self.request(Waiter::Pmix(id), Pending::Spawn);
                fx.push(Effect::ToParent(Msg::Spawn { req, spawn }));
            }
            FromCompanion::Warning { message } => {
                fx.push(Effect::Warn(format!("PMIx server on {host}: {message}")))
            }
            FromCompanion::Ready { .. }
            | FromCompanion::Registered { .. }
            | FromCompanion::ForkEnv { .. }
            | FromCompanion::Deregistered { .. }
            | FromCompanion::Bye => {}
        }
    }

    /// This node's server connects (or disconnects) `procs`: every local participant
    /// entered. Sent up to the front end, which answers every node of every group taking
    /// part once all participants entered ([`Msg::PmixConnectDone`]).
    /// `op`: what it is (and so how it is answered); `blob`: a fence's contribution.
    fn pmix_connect(
        &mut self,
        id: u64,
        procs: Vec<PmixProc>,
        kind: &str,
        op: PmixOp,
        blob: Vec<u8>,
        fx: &mut Vec<Effect>,
    ) {
        let mut list: Vec<(String, u32)> = procs.into_iter().map(|p| (p.nspace, p.rank)).collect();
        list.sort();
        list.dedup();
        let names: Vec<String> = list.iter().map(|(n, r)| format!("{n}:{r}")).collect();
        let key = format!("{kind}{}", names.join(","));
        let mine = &self.job.kvsname;
        let wildcard = libi_pmix::proto::RANK_WILDCARD;
        let count = (self.plan.ranks.iter())
            .filter(|s| list.iter().any(|(n, r)| n == mine && (*r == s.rank || *r == wildcard)))
            .count() as u32;
        self.pmix_connects.insert(key.clone(), (id, op));
        let sizes = vec![(mine.clone(), self.job.size)];
        let ctxid = op == PmixOp::Group { ctxid: true };
        let m = Msg::PmixConnect { key, procs: list, count, sizes, ctxid, blob };
        fx.push(Effect::ToParent(m));
    }

    /// A lost rank (`Msg::PmixLost`): up to the node whose subtree holds the job, then (or
    /// when it came from the parent, `down`) to this node's server and every child.
    fn pmix_lost(&mut self, msg: Msg, down: bool, fx: &mut Vec<Effect>) {
        if !down && !self.fence_root {
            return fx.push(Effect::ToParent(msg));
        }
        let Msg::PmixLost { rank, host, code, exit_code } = &msg else { return };
        if self.pmix.is_some() && !self.plan.ranks.is_empty() {
            let nspace = self.job.kvsname.clone();
            fx.push(Effect::ToPmix(ToCompanion::Notify {
                code: *code,
                nspace: nspace.clone(),
                affected: vec![PmixProc { nspace, rank: *rank }],
                host: Some(host.clone()),
                exit_code: *exit_code,
            }));
        }
        if !self.plan.children.is_empty() {
            fx.push(Effect::ToChildren(msg));
        }
    }

    /// A direct modex request on its way: to this node's server if it runs the rank (any
    /// node of the namespace for its job-level data, the wildcard), down to the child whose
    /// subtree runs it, else up (another group's namespace goes through the front end).
    /// `back`: where the answer goes.
    fn pmix_route(
        &mut self,
        from: String,
        req: u64,
        nspace: String,
        rank: u32,
        back: Back,
        fx: &mut Vec<Effect>,
    ) {
        let wildcard = rank == libi_pmix::proto::RANK_WILDCARD;
        let ours = nspace == self.job.kvsname;
        let here = ours
            && self.pmix.is_some()
            && !self.plan.ranks.is_empty()
            && (wildcard || self.plan.ranks.iter().any(|s| s.rank == rank));
        if here {
            let id = self.pmix_next;
            self.pmix_next += 1;
            self.pmix_serving.insert(id, (from, req, back));
            let proc = PmixProc { nspace, rank };
            fx.push(Effect::ToPmix(ToCompanion::DmodexRequest { id, proc }));
            return;
        }
        let target = if wildcard { 0 } else { rank };
        let child =
            if ours { self.plan.children.iter().position(|c| c.has_rank(target)) } else { None };
        let msg = Msg::PmixDmodex { from: from.clone(), req, nspace, rank };
        match child {
            Some(c) => fx.push(Effect::ToChild(c, msg)),
            None if self.is_root && ours => {
                // In no node of this group: nobody has it.
                let status = pmix_status::ERR_NOT_FOUND;
                let m = Msg::PmixDmodexData { from, req, status, blob: Vec::new() };
                return self.pmix_deliver(back, m, fx);
            }
            None => fx.push(Effect::ToParent(msg)),
        }
        self.pmix_routes.insert((from, req), back);
    }

    /// The answer to a direct modex passing through: on the way it came.
    fn pmix_answer(
        &mut self,
        from: String,
        req: u64,
        status: i32,
        blob: Vec<u8>,
        fx: &mut Vec<Effect>,
    ) {
        match self.pmix_routes.remove(&(from.clone(), req)) {
            Some(back) => {
                self.pmix_deliver(back, Msg::PmixDmodexData { from, req, status, blob }, fx)
            }
            None => fx.push(Effect::Warn(format!("a PMIx modex answer {req} nobody asked for"))),
        }
    }

    fn pmix_deliver(&mut self, back: Back, msg: Msg, fx: &mut Vec<Effect>) {
        match (back, msg) {
            (Back::Pmix(id), Msg::PmixDmodexData { status, blob, .. }) => {
                fx.push(Effect::ToPmix(ToCompanion::ModexData { id, status, blob }))
            }
            (Back::Pmix(_), _) => {}
            (Back::Child(c), m) => fx.push(Effect::ToChild(c, m)),
            (Back::Parent, m) => fx.push(Effect::ToParent(m)),
        }
    }

    /// A name-service request of the companion: one request of the job's name service per
    /// key, one answer to the companion once all came back.
    fn pmix_names(&mut self, id: u64, kind: NameKind, ops: Vec<NameOp>, fx: &mut Vec<Effect>) {
        if ops.is_empty() {
            let me = PmixProc { nspace: self.job.kvsname.clone(), rank: 0 };
            let mut b = NameBatch::new(kind, 0);
            if let Some(a) = b.answered(id, "", true, None, &me) {
                fx.push(Effect::ToPmix(a));
            }
            return;
        }
        let wait = kind == NameKind::LookupWait;
        self.pmix_names.insert(id, NameBatch::new(kind, ops.len()));
        for op in ops {
            let req = self.request(Waiter::Pmix(id), Pending::Name(op.clone()));
            match op {
                NameOp::Lookup { service } if wait => {
                    fx.push(Effect::ToParent(Msg::NameWait { req, service }))
                }
                op => fx.push(Effect::ToParent(Msg::Name { req, op })),
            }
        }
    }

    fn pmix_name_answer(
        &mut self,
        id: u64,
        op: &NameOp,
        ok: bool,
        port: Option<String>,
        fx: &mut Vec<Effect>,
    ) {
        let key = match op {
            NameOp::Publish { service, .. }
            | NameOp::Unpublish { service }
            | NameOp::Lookup { service } => service.clone(),
        };
        let publisher = PmixProc { nspace: self.job.kvsname.clone(), rank: 0 };
        let Some(batch) = self.pmix_names.get_mut(&id) else { return };
        let value = port.filter(|_| matches!(batch.kind, NameKind::Lookup | NameKind::LookupWait));
        if let Some(answer) = batch.answered(id, &key, ok, value, &publisher) {
            self.pmix_names.remove(&id);
            fx.push(Effect::ToPmix(answer));
        }
    }

    /// Record a request for the front end; its id is unique in the job (this node's id in
    /// the high bits).
    fn request(&mut self, who: Waiter, what: Pending) -> u64 {
        let req = (u64::from(self.plan.node) << 32) | self.next_req;
        self.next_req += 1;
        self.requests.insert(req, (who, what));
        req
    }

    /// The answer to local rank `local`'s name-service request, in its protocol.
    fn name_answer(
        &mut self,
        local: usize,
        op: &NameOp,
        ok: bool,
        port: Option<String>,
        fx: &mut Vec<Effect>,
    ) {
        let Some(conn) = self.conns.get_mut(local) else { return };
        let reply = match op {
            NameOp::Publish { .. } => conn.answer_publish(ok),
            NameOp::Unpublish { .. } => conn.answer_unpublish(ok),
            NameOp::Lookup { .. } => conn.answer_lookup(port.as_deref()),
        };
        fx.push(Effect::ToRank(local, reply));
    }

    fn wait_for(&mut self, key: String, who: Waiter, fx: &mut Vec<Effect>) {
        let waiters = self.waiting.entry(key.clone()).or_default();
        waiters.push(who);
        if waiters.len() == 1 {
            self.counters.gets_up += 1;
            fx.push(Effect::ToParent(Msg::Get { key }));
        }
    }

    fn maybe_fence_in(&mut self, fx: &mut Vec<Effect>) {
        if self.tearing_down
            || self.n_entered < self.conns.len()
            || self.n_child_fenced < self.child_fenced.len()
            || (self.conns.is_empty() && self.child_fenced.is_empty())
        {
            return;
        }
        if self.fence_root {
            self.release(fx);
        } else {
            self.send_pending(true, fx);
        }
    }

    /// At the fence root (see `fence_root`): every rank entered the fence (its pairs are
    /// merged here already). Release it down the tree: the epoch's pairs when they total at most `kvs_push_max`
    /// bytes (`pushed`), else the keys overwritten in this epoch, which caches must drop;
    /// as `FenceOutPart`s of at most a chunk each, the last one as the `FenceOut`.
    fn release(&mut self, fx: &mut Vec<Effect>) {
        let epoch = self.epoch;
        let pushed = self.epoch_bytes <= self.job.kvs_push_max;
        let push_keys = self.push_keys.replace(Vec::new());
        let overwritten = std::mem::take(&mut self.overwritten);
        self.epoch_bytes = 0;
        let mut chunks = Chunks::new(self.chunk);
        let mut parts = Vec::new();
        if self.child_fenced.is_empty() {
            // No child to tell: the ranks here hold every pair already.
        } else if pushed {
            let mut seen = HashSet::new();
            for key in push_keys.unwrap_or_default() {
                if let Some(value) = self.kvs.value(&key).filter(|_| !seen.contains(&key)) {
                    seen.insert(key.clone());
                    parts.extend(chunks.pair(key, value));
                }
            }
        } else {
            for key in overwritten {
                parts.extend(chunks.stale(String::from(&*key)));
            }
        }
        let (last_pairs, last_stale) = chunks.finish();
        for (pairs, stale) in parts {
            self.fence_out_part(Msg::FenceOutPart { epoch, pairs, stale }, fx);
        }
        let msg = Msg::FenceOut { epoch, pushed, pairs: last_pairs, stale: last_stale };
        self.fence_out(msg, fx);
    }

    /// Apply what a release carries: pushed pairs, stale keys (the root holds both already).
    /// The pairs are stored shared (one more count on each key and value): a node with
    /// children passes the message on.
    fn apply_release(&mut self, pairs: &[(Key, Value)], stale: &[String]) {
        if self.fence_root {
            return;
        }
        self.kvs.reserve(pairs.len());
        for (k, v) in pairs {
            self.kvs.store(k.clone(), v.clone());
        }
        self.drop_stale(stale);
    }

    fn drop_stale(&mut self, stale: &[String]) {
        for k in stale {
            // Overwritten elsewhere in this epoch: our copy is old unless this subtree
            // wrote it too.
            self.kvs.drop_stale(k, self.epoch);
        }
    }

    /// Part of a fence release: apply it, pass it on to the children.
    fn fence_out_part(&mut self, msg: Msg, fx: &mut Vec<Effect>) {
        let Msg::FenceOutPart { epoch, pairs, stale } = msg else {
            return;
        };
        if epoch != self.epoch {
            fx.push(Effect::Warn(format!("fence release {epoch} during fence {}", self.epoch)));
            return;
        }
        self.counters.fence_parts_down += 1;
        self.apply_release(&pairs, &stale);
        if !self.child_fenced.is_empty() {
            fx.push(Effect::ToChildren(Msg::FenceOutPart { epoch, pairs, stale }));
        }
    }

    /// A fence release (from the parent, or made here at the root): store what it carries,
    /// release the local ranks, pass it on to the children.
    fn fence_out(&mut self, msg: Msg, fx: &mut Vec<Effect>) {
        let Msg::FenceOut { epoch, pushed, pairs, stale } = msg else {
            return;
        };
        if epoch != self.epoch {
            fx.push(Effect::Warn(format!("fence release {epoch} during fence {}", self.epoch)));
            return;
        }
        self.apply_release(&pairs, &stale);
        let onward =
            (!self.child_fenced.is_empty()).then(|| Msg::FenceOut { epoch, pushed, pairs, stale });
        if !pushed {
            self.lazy = true;
        }
        self.counters.fences += 1;
        self.epoch += 1;
        self.n_entered = 0;
        self.n_child_fenced = 0;
        self.child_fenced.iter_mut().for_each(|f| *f = false);
        let now = self.now();
        for local in 0..self.conns.len() {
            if std::mem::replace(&mut self.entered[local], false) {
                if self.report {
                    self.fences.push(FenceRecord {
                        rank: self.rank_of(local),
                        epoch,
                        enter: self.fence_enter[local],
                        leave: now,
                    });
                }
                let out = self.conns[local].barrier_out();
                fx.push(Effect::ToRank(local, out));
            }
        }
        if let Some(msg) = onward {
            fx.push(Effect::ToChildren(msg));
        }
    }

    /// Local rank `local` stopped reading its PMI replies (a flood of requests, or a broken
    /// client): it has been disconnected; the job fails.
    pub fn rank_stalled(&mut self, local: usize, fx: &mut Vec<Effect>) {
        let rank = self.rank_of(local);
        fx.push(Effect::CloseRank(local));
        let what = format!(
            "rank {rank} on {} stopped reading its PMI replies (flooding requests?); disconnected",
            self.plan.host
        );
        self.fail(what, fx);
    }

    /// The client of PMGR connection `conn` (global rank `owner`) read none of its
    /// replies for the stall limit: the connection is closed and the job fails, as for a
    /// rank that stops reading its PMI replies.
    pub fn pmgr_stalled(&mut self, conn: u64, owner: u32, fx: &mut Vec<Effect>) {
        fx.push(Effect::ClosePmgr(conn));
        let what = format!(
            "rank {owner} on {} stopped reading its PMGR replies (flooding requests?); \
             disconnected",
            self.plan.host
        );
        self.fail(what, fx);
    }

    /// The rank's PMI socket reached EOF (the process may still be running).
    pub fn rank_eof(&mut self, local: usize, _fx: &mut Vec<Effect>) {
        let Some(conn) = self.conns.get_mut(local) else { return };
        if conn.eof() == Eof::BeforeFinalize && !self.ended[local] && !self.tearing_down {
            self.set_timer(limits::PMI_CLOSE_GRACE, Timer::PmiClose(local));
        }
    }

    /// A [`Timer::PmiClose`] is due; `running`: the rank's process
    /// has not ended (as far as the driver can see). A rank that left PMI half-way and runs
    /// on fails the job (as under Hydra); one whose exit came is judged by that exit.
    pub fn pmi_close_grace_over(&mut self, local: usize, running: bool, fx: &mut Vec<Effect>) {
        if !running || self.tearing_down || self.ended.get(local).copied().unwrap_or(true) {
            return;
        }
        let what = format!(
            "rank {} on {} closed its PMI connection without finalize",
            self.rank_of(local),
            self.plan.host
        );
        self.fail(what, fx);
    }

    /// The rank's process ended (its remaining PMI bytes have already been fed).
    ///
    /// PMGR ordering rule: `pmgr_close` does not wait for the server, so a rank's `CLOSE`
    /// (or abort record) and its exit reach us in no particular order: the exit may be seen
    /// while the `CLOSE` still sits in the socket or in our event queue. So a rank that exits
    /// (with any code) while a PMGR connection of its own is undecided — not at EOF, not
    /// closed, aborted or failed, see [`PmgrNode::undecided`] — is judged only once each such
    /// connection reached EOF (which comes: the process is gone), or after
    /// [`Timer::PmgrDrain`]'s wait if a process it left behind still holds it. Then a
    /// rank that sent `CLOSE` is a clean exit whatever the order was, and one that did not
    /// exited without finalizing.
    pub fn rank_ended(&mut self, local: usize, end: ProcEnd, fx: &mut Vec<Effect>) {
        if local >= self.conns.len() || self.ended[local] || self.pmgr_exits.contains_key(&local) {
            return;
        }
        let rank = self.rank_of(local);
        if matches!(end, ProcEnd::Exited(_))
            && self.pmgr.as_ref().is_some_and(|p| p.undecided(rank))
        {
            self.pmgr_exits.insert(local, end);
            self.set_timer(limits::PMGR_EXIT_DRAIN, Timer::PmgrDrain(local));
            return;
        }
        self.judge_end(local, end, fx);
    }

    fn judge_end(&mut self, local: usize, end: ProcEnd, fx: &mut Vec<Effect>) {
        if self.ended[local] {
            return;
        }
        self.ended[local] = true;
        self.n_ended += 1;
        // A rank that left PMI (or PMGR) half-way failed, whatever its exit code.
        let rank = self.rank_of(local);
        let clean_pmi = !matches!(self.conns[local].phase(), Phase::Initialized)
            && !self.pmgr.as_ref().is_some_and(|p| p.open_rank(rank))
            && !self.pmix_open.contains(&rank);
        let end = match end {
            ProcEnd::Exited(code) => RankEnd::Exited { code, clean_pmi },
            ProcEnd::Signaled(signal) => RankEnd::Signaled { signal },
            ProcEnd::SpawnFailed { errno, reason } => RankEnd::SpawnFailed { errno, reason },
        };
        // A PMIx rank lost before its finalize: the job's other ranks are told (not for the
        // teardown's own kills).
        if self.pmix.is_some() && !self.tearing_down {
            let exit_code = match &end {
                RankEnd::Exited { code, clean_pmi: false } => Some(Some(*code)),
                RankEnd::Signaled { .. } => Some(None),
                _ => None,
            };
            if let Some(exit_code) = exit_code {
                let code = pmix_status::ERR_PROC_TERM_WO_SYNC;
                let host = self.plan.host.clone();
                self.pmix_lost(Msg::PmixLost { rank, host, code, exit_code }, false, fx);
            }
        }
        if self.job.each_end && self.n_ended == self.conns.len() && !end.is_failure() {
            // Every end reported one by one (-print-all-exitcodes), and every local rank
            // ended, the last one cleanly: a PMGR failure still in its grace fails the job
            // now, before that last end could make the job look clean. (Otherwise the ends
            // are held back until the grace is over: `flush_done`.)
            let mut pending = Vec::new();
            self.timers.retain(|(_, t)| match t {
                Timer::FailNow(m) => {
                    pending.push(m.clone());
                    false
                }
                _ => true,
            });
            for m in pending.into_iter().rev() {
                self.fail_now(m, fx);
            }
        }
        let ours = self.killed_by_parent
            && matches!(
                end,
                RankEnd::Signaled { signal: libc::SIGTERM | libc::SIGKILL }
                    | RankEnd::Exited { code: 143 | 137, .. }
            );
        if self.job.each_end || (end.is_failure() && !ours) {
            fx.push(Effect::ToParent(Msg::RankEnded {
                rank: self.rank_of(local),
                host: self.plan.host.clone(),
                end,
            }));
        } else if ours {
            self.own_killed += 1;
        } else {
            self.own_clean += 1;
        }
        self.flush_done(fx);
    }

    /// Report the counted ends once the subtree has no rank left (at the root: at once, to
    /// the front end's bookkeeping). One message per node per job instead of one per rank.
    fn flush_done(&mut self, fx: &mut Vec<Effect>) {
        self.watch_children();
        if !self.is_root && self.ranks_left() > 0 {
            return;
        }
        if self.failure_pending() {
            // A PMGR failure in its grace (an abort record or a better-placed report from
            // another node may still explain it): the ends wait for it, so that the job
            // does not finish clean under it (`Timer::FailNow` flushes them).
            return;
        }
        if self.own_clean + self.own_killed > 0 {
            self.done.push((self.plan.node, self.own_clean, self.own_killed));
            (self.own_clean, self.own_killed) = (0, 0);
        }
        if !self.done.is_empty() {
            fx.push(Effect::ToParent(Msg::RanksDone { ends: std::mem::take(&mut self.done) }));
        }
    }

    /// Report the subtree up once this node started its ranks and every child reported
    /// (or was lost); at the root, pass every report on at once.
    fn flush_up(&mut self, fx: &mut Vec<Effect>) {
        let ready = self.is_root
            || (self.self_up
                && self.child_up_seen.iter().zip(&self.child_closed).all(|(u, c)| *u || *c));
        if ready && self.up != (0, 0) {
            let (nodes, ranks) = std::mem::take(&mut self.up);
            fx.push(Effect::ToParent(Msg::SubtreeUp { nodes, ranks }));
        }
    }

    /// Child `idx` accounted for `n` more ranks of its subtree.
    fn child_ranks_ended(&mut self, idx: usize, n: usize) {
        let n = n.min(self.child_left[idx]);
        self.child_left[idx] -= n;
        self.children_left -= n;
    }

    /// Local ranks `from..` will not be started: the node is being torn down, or it ran out
    /// of processes or descriptors starting an earlier one (whose failure, reported, fails
    /// the job). They count as ended, as ranks the teardown killed, without a report each.
    pub fn ranks_not_started(&mut self, from: usize, fx: &mut Vec<Effect>) {
        for local in from..self.conns.len() {
            if !std::mem::replace(&mut self.ended[local], true) {
                self.n_ended += 1;
                self.own_killed += 1;
            }
        }
        self.flush_done(fx);
    }

    /// The node is being torn down (its parent asked, or is lost): no rank starts any more.
    pub fn tearing_down(&self) -> bool {
        self.tearing_down
    }

    /// Local rank `local` runs as process `pid` (for the process table).
    pub fn rank_pid(&mut self, local: usize, pid: i32) {
        if let Some(p) = self.pids.get_mut(local) {
            *p = pid;
        }
    }

    /// A process-table request from the parent: this node's ranks, and its children's once
    /// they answered (a child that is gone counts as answered).
    fn proc_table_req(&mut self, req: u64, fx: &mut Vec<Effect>) {
        let mut nodes = Vec::new();
        if !self.plan.ranks.is_empty() {
            let ranks = (self.plan.ranks.iter().zip(&self.pids))
                .map(|(slot, pid)| (slot.rank, slot.app, *pid))
                .collect();
            nodes.push(ProcNode { host: self.plan.host.clone(), ranks });
        }
        let waiting: Vec<bool> = self.child_closed.iter().map(|closed| !closed).collect();
        if waiting.iter().any(|w| *w) {
            fx.push(Effect::ToChildren(Msg::ProcTableReq { req }));
        }
        self.proc_tables.push((req, nodes, waiting));
        self.flush_proc_tables(fx);
    }

    /// Send up every process table whose children all answered.
    fn flush_proc_tables(&mut self, fx: &mut Vec<Effect>) {
        let (done, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.proc_tables)
            .into_iter()
            .partition(|(_, _, w)| !w.iter().any(|w| *w));
        self.proc_tables = waiting;
        for (req, nodes, _) in done {
            fx.push(Effect::ToParent(Msg::ProcTable { req, nodes }));
        }
    }

    /// The driver started the local ranks.
    pub fn ranks_started(&mut self, fx: &mut Vec<Effect>) {
        self.up = (self.up.0 + 1, self.up.1 + self.conns.len() as u32);
        self.self_up = true;
        self.flush_up(fx);
    }

    // ---------------------------------------------------------------- parent

    /// A message from the parent.
    pub fn parent_msg(&mut self, msg: Msg, fx: &mut Vec<Effect>) {
        match msg {
            Msg::FenceOut { .. } | Msg::FenceOutPart { .. } if self.tearing_down => {}
            m @ Msg::FenceOut { .. } => self.fence_out(m, fx),
            m @ Msg::FenceOutPart { .. } => self.fence_out_part(m, fx),
            Msg::PmixDmodex { from, req, nspace, rank } => {
                self.pmix_route(from, req, nspace, rank, Back::Parent, fx)
            }
            Msg::PmixDmodexData { from, req, status, blob } => {
                self.pmix_answer(from, req, status, blob, fx)
            }
            m @ Msg::PmixLost { .. } => self.pmix_lost(m, true, fx),
            Msg::PmixConnectDone { key, status, ctxid, jobs, blob } => {
                // The other groups' namespaces first (libpmix registers them before it
                // completes the connect: the ranks then find the other group's ranks).
                if self.pmix.is_some() && !self.plan.ranks.is_empty() {
                    for j in &jobs {
                        if j.nspace != self.job.kvsname && self.pmix_known.insert(j.nspace.clone())
                        {
                            fx.push(Effect::ToPmix(ToCompanion::RegisterNspace(Box::new(
                                crate::proto::pmix::remote_nspace(j),
                            ))));
                        }
                    }
                }
                let answer = match self.pmix_connects.remove(&key) {
                    Some((id, PmixOp::Connect)) => Some(ToCompanion::Done { id, status }),
                    Some((id, PmixOp::Group { .. })) => {
                        Some(ToCompanion::GroupDone { id, status, ctxid })
                    }
                    Some((id, PmixOp::Fence)) => {
                        Some(ToCompanion::FenceDone { id, status, blob: blob.clone() })
                    }
                    None => None,
                };
                if !self.plan.children.is_empty() {
                    let m = Msg::PmixConnectDone { key, status, ctxid, jobs, blob };
                    fx.push(Effect::ToChildren(m));
                }
                fx.extend(answer.map(Effect::ToPmix));
            }
            Msg::PmixFenceOut { .. } if self.tearing_down => {}
            Msg::PmixFenceOut { seq, blob } => match self.pmix.as_mut() {
                Some(f) => f.released(seq, blob, fx),
                None => fx.push(Effect::Warn("a PMIx fence release in a job without PMIx".into())),
            },
            Msg::GetResult { key, value } => {
                self.answer_waiters(&key, value.as_ref(), fx);
                if let Some(v) = value {
                    self.kvs.cache(key, v);
                    self.check_kvs(fx);
                }
            }
            Msg::Kill => {
                self.tearing_down = true;
                // Once: the ranks got their SIGTERM and the children their `Kill`.
                if std::mem::replace(&mut self.killed_by_parent, true) {
                    return;
                }
                fx.push(Effect::KillRanks);
                if !self.conns.is_empty() {
                    let grace = std::time::Duration::from_millis(self.job.kill_grace_ms);
                    self.set_timer(grace, Timer::KillHard);
                }
                fx.push(Effect::AbortLaunches);
                fx.push(Effect::ToChildren(Msg::Kill));
            }
            Msg::ProcTableReq { req } => self.proc_table_req(req, fx),
            Msg::Signal { signal } => {
                fx.push(Effect::SignalRanks(signal));
                fx.push(Effect::ToChildren(Msg::Signal { signal }));
            }
            m @ Msg::Stdin { .. } => self.stdin(m, fx),
            Msg::StartNla { target, host, front_end } => {
                if self.tearing_down {
                } else if target == self.plan.node {
                    fx.push(Effect::StartNla { host, front_end });
                } else if let Some(c) = self.plan.children.iter().position(|c| c.has_node(target)) {
                    fx.push(Effect::ToChild(c, Msg::StartNla { target, host, front_end }));
                } else {
                    fx.push(Effect::Warn(format!("no NLA {target} below node {}", self.plan.node)));
                }
            }
            Msg::NameResult { req, ok, port } => match self.requests.remove(&req) {
                Some((Waiter::Child(c), _)) => {
                    fx.push(Effect::ToChild(c, Msg::NameResult { req, ok, port }))
                }
                Some((Waiter::Rank(local), Pending::Name(op))) => {
                    self.name_answer(local, &op, ok, port, fx)
                }
                Some((Waiter::Pmix(id), Pending::Name(op))) => {
                    self.pmix_name_answer(id, &op, ok, port, fx)
                }
                _ => fx.push(Effect::Warn(format!("name-service answer {req} nobody asked for"))),
            },
            Msg::SpawnResult { req, rc, jobid } => match self.requests.remove(&req) {
                Some((Waiter::Child(c), _)) => {
                    fx.push(Effect::ToChild(c, Msg::SpawnResult { req, rc, jobid }))
                }
                Some((Waiter::Pmix(id), Pending::Spawn)) => {
                    let status = if rc == 0 { pmix_status::SUCCESS } else { pmix_status::ERROR };
                    let nspace = jobid.filter(|_| rc == 0);
                    fx.push(Effect::ToPmix(ToCompanion::SpawnResult { id, status, nspace }));
                }
                Some((Waiter::Rank(local), Pending::Spawn)) => {
                    if let Some(conn) = self.conns.get_mut(local) {
                        fx.push(Effect::ToRank(
                            local,
                            conn.answer_spawn(rc, None, jobid.as_deref()),
                        ));
                    }
                }
                _ => fx.push(Effect::Warn(format!("spawn answer {req} nobody asked for"))),
            },
            Msg::PmgrDown(outcome) => {
                let mut pfx = Vec::new();
                if let Some(p) = self.pmgr.as_mut() {
                    p.down(*outcome, &mut pfx);
                }
                self.pmgr_effects(pfx, fx);
            }
            Msg::PmgrDownPart { to, data } => {
                let mut pfx = Vec::new();
                if let Some(p) = self.pmgr.as_mut() {
                    p.down_part(to, data, &mut pfx);
                }
                self.pmgr_effects(pfx, fx);
            }
            other => fx.push(Effect::Warn(format!("unexpected message from parent: {other:?}"))),
        }
    }

    /// Stdin for rank 0: deliver it here or pass it to the child whose subtree runs rank 0.
    pub fn stdin(&mut self, msg: Msg, fx: &mut Vec<Effect>) {
        let Msg::Stdin { data } = msg else { return };
        if self.plan.ranks.iter().any(|r| r.rank == 0) {
            fx.push(Effect::Stdin(data));
        } else if let Some(c) = self.stdin_child {
            fx.push(Effect::ToChild(c, Msg::Stdin { data }));
        }
    }

    fn answer_waiters(&mut self, key: &Key, value: Option<&Value>, fx: &mut Vec<Effect>) {
        for w in self.waiting.remove(&**key).unwrap_or_default() {
            match w {
                Waiter::Rank(local) => {
                    let reply = self.conns[local].answer_get(key, value.map(|v| &**v));
                    fx.push(Effect::ToRank(local, reply));
                }
                Waiter::Child(c) => fx.push(Effect::ToChild(
                    c,
                    Msg::GetResult { key: key.clone(), value: value.cloned() },
                )),
                // Never waits for a key.
                Waiter::Pmix(_) => {}
            }
        }
    }

    /// Start a teardown from this node (the root, when the front end decided the job fails).
    pub fn kill(&mut self, fx: &mut Vec<Effect>) {
        self.parent_msg(Msg::Kill, fx);
    }

    // ---------------------------------------------------------------- children

    /// A message from child `idx`.
    pub fn child_msg(&mut self, idx: usize, msg: Msg, fx: &mut Vec<Effect>) {
        if idx >= self.child_left.len() {
            return;
        }
        match msg {
            Msg::FenceIn { epoch, pairs, top } => {
                self.child_fence(idx, epoch, pairs, top, true, fx)
            }
            Msg::PmixDmodex { from, req, nspace, rank } => {
                self.pmix_route(from, req, nspace, rank, Back::Child(idx), fx)
            }
            Msg::PmixDmodexData { from, req, status, blob } => {
                self.pmix_answer(from, req, status, blob, fx)
            }
            m @ Msg::PmixConnect { .. } => fx.push(Effect::ToParent(m)),
            m @ Msg::PmixLost { .. } => self.pmix_lost(m, false, fx),
            Msg::PmixFenceIn { .. } if self.tearing_down => {}
            Msg::PmixFenceIn { seq, blob } => match self.pmix.as_mut() {
                Some(f) => f.child_entered(idx, seq, &blob, fx),
                None => fx.push(Effect::Warn("a PMIx fence in a job without PMIx".into())),
            },
            Msg::FenceInPart { epoch, pairs, top } => {
                self.child_fence(idx, epoch, pairs, top, false, fx)
            }
            Msg::Get { key } => {
                self.counters.gets_for_children += 1;
                if let Some((key, v)) = self.kvs.pair(&key) {
                    fx.push(Effect::ToChild(idx, Msg::GetResult { key, value: Some(v) }));
                } else if self.fence_root {
                    let key = key.into();
                    fx.push(Effect::ToChild(idx, Msg::GetResult { key, value: None }));
                } else {
                    self.wait_for(key, Waiter::Child(idx), fx);
                }
            }
            Msg::RankEnded { .. } => {
                self.child_ranks_ended(idx, 1);
                fx.push(Effect::ToParent(msg));
                self.flush_done(fx);
            }
            Msg::SubtreeUp { nodes, ranks } => {
                self.up = (self.up.0 + nodes, self.up.1 + ranks);
                self.child_up_seen[idx] = true;
                self.flush_up(fx);
            }
            Msg::RanksDone { mut ends } => {
                let n: usize = ends.iter().map(|(_, c, k)| (*c + *k) as usize).sum();
                self.child_ranks_ended(idx, n);
                self.done.append(&mut ends);
                self.flush_done(fx);
            }
            Msg::SubtreeLost { ranks, .. } => {
                self.child_ranks_ended(idx, ranks as usize);
                fx.push(Effect::ToParent(msg));
                self.flush_done(fx);
            }
            Msg::Name { req, op } => {
                self.requests.insert(req, (Waiter::Child(idx), Pending::Name(op.clone())));
                fx.push(Effect::ToParent(Msg::Name { req, op }));
            }
            Msg::NameWait { req, service } => {
                let op = NameOp::Lookup { service: service.clone() };
                self.requests.insert(req, (Waiter::Child(idx), Pending::Name(op)));
                fx.push(Effect::ToParent(Msg::NameWait { req, service }));
            }
            Msg::Spawn { req, spawn } => {
                self.requests.insert(req, (Waiter::Child(idx), Pending::Spawn));
                fx.push(Effect::ToParent(Msg::Spawn { req, spawn }));
            }
            Msg::ProcTable { req, mut nodes } => {
                if let Some((_, have, w)) = self.proc_tables.iter_mut().find(|p| p.0 == req) {
                    if std::mem::take(&mut w[idx]) {
                        have.append(&mut nodes);
                    }
                }
                self.flush_proc_tables(fx);
            }
            Msg::PmgrUp(partial) => {
                let mut pfx = Vec::new();
                if let Some(p) = self.pmgr.as_mut() {
                    p.child_up(idx, *partial, &mut pfx);
                }
                self.pmgr_effects(pfx, fx);
            }
            Msg::PmgrUpPart { rank, data } => {
                let mut pfx = Vec::new();
                if let Some(p) = self.pmgr.as_mut() {
                    p.up_part(idx, rank, data, &mut pfx);
                }
                self.pmgr_effects(pfx, fx);
            }
            Msg::Output { .. }
            | Msg::StdinAck { .. }
            | Msg::Abort { .. }
            | Msg::Fatal { .. }
            | Msg::Report(_) => fx.push(Effect::ToParent(msg)),
            other => {
                fx.push(Effect::Warn(format!("unexpected message from child {idx}: {other:?}")))
            }
        }
    }

    /// Child `idx`'s fence data: a part, or its `FenceIn` (`close`: its subtree entered).
    fn child_fence(
        &mut self,
        idx: usize,
        epoch: u64,
        pairs: Vec<(Key, Value)>,
        top: KvsTop,
        close: bool,
        fx: &mut Vec<Effect>,
    ) {
        if epoch != self.epoch || self.child_fenced[idx] {
            fx.push(Effect::Warn(format!(
                "child {idx} sent data of fence {epoch} during fence {}",
                self.epoch
            )));
            return;
        }
        if close {
            self.child_fenced[idx] = true;
            self.n_child_fenced += 1;
        }
        self.child_top[idx] = top;
        if !self.tearing_down {
            self.child_pairs(pairs, close, fx);
        }
        if close {
            self.maybe_fence_in(fx);
        }
    }

    /// Merge a child's fence pairs. At the root they are all here now (the epoch's size and,
    /// while it may be pushed, its keys are noted). Elsewhere they go on up: a part at once,
    /// as it came; the pairs of a `FenceIn` join this node's pending ones.
    fn child_pairs(&mut self, pairs: Vec<(Key, Value)>, close: bool, fx: &mut Vec<Effect>) {
        let epoch = self.epoch;
        if self.fence_root {
            for (k, v) in pairs {
                self.root_merge(k, v);
            }
            self.check_kvs(fx);
        } else if close {
            for (k, v) in pairs {
                self.pending_cost += pair_cost(&k, &v);
                if self.kvs.write(k.clone(), v, epoch, true).queued {
                    self.pending.push(k);
                }
            }
            if !self.check_kvs(fx) && self.pending_cost >= self.chunk {
                self.send_pending(false, fx);
            }
        } else {
            for (k, v) in &pairs {
                self.kvs.write(k.clone(), v.clone(), epoch, false);
            }
            if !self.check_kvs(fx) {
                let top = self.top();
                self.counters.fence_parts_up += 1;
                fx.push(Effect::ToParent(Msg::FenceInPart { epoch, pairs, top }));
            }
        }
    }

    /// At the root, where every pair of the epoch arrives: store it, note its size and
    /// (while the epoch may still be pushed down) its key, and whether it replaced a value.
    fn root_merge(&mut self, k: Key, v: Value) -> Written {
        self.epoch_bytes += (k.len() + v.len()) as u64;
        if self.epoch_bytes > self.job.kvs_push_max {
            self.push_keys = None;
        }
        // What a release tells the children (none: nothing to note).
        if !self.child_fenced.is_empty() {
            if self.kvs.contains(&k) {
                self.overwritten.insert(k.clone());
            }
            if let Some(keys) = self.push_keys.as_mut() {
                keys.push(k.clone());
            }
        }
        self.kvs.write(k, v, self.epoch, false)
    }

    /// Child `idx`'s connection closed, or it could never be started (`why` says which).
    pub fn child_gone(&mut self, idx: usize, why: &str, fx: &mut Vec<Effect>) {
        if idx >= self.child_closed.len() || self.child_closed[idx] {
            return;
        }
        self.child_closed[idx] = true;
        self.child_blocked[idx] = false;
        self.child_behind(idx, false, fx);
        self.timers.retain(|(_, t)| *t != Timer::ChildStall(idx));
        let left = self.child_left[idx];
        self.child_ranks_ended(idx, left);
        if left > 0 {
            let host = self.plan.children[idx].host.clone();
            self.tearing_down = true;
            fx.push(Effect::ToParent(Msg::SubtreeLost {
                host: host.clone(),
                ranks: left as u32,
                message: format!("lost the NLA on {host}: {why}"),
            }));
        }
        // Gets it was waiting for are answered as misses by nobody: drop its waits.
        for waiters in self.waiting.values_mut() {
            waiters.retain(|w| *w != Waiter::Child(idx));
        }
        for (_, _, w) in &mut self.proc_tables {
            w[idx] = false;
        }
        self.flush_proc_tables(fx);
        self.flush_done(fx);
        self.flush_up(fx);
    }
}

/// A chunk of fence data: pairs and stale keys.
type Chunk = (Vec<(Key, Value)>, Vec<String>);

/// Splits fence data into chunks of at most `max` bytes (each pair or key counted with
/// [`PAIR_OVERHEAD`]; an item bigger than `max` gets a chunk of its own).
struct Chunks {
    max: usize,
    cost: usize,
    pairs: Vec<(Key, Value)>,
    stale: Vec<String>,
}

impl Chunks {
    fn new(max: usize) -> Self {
        Chunks { max, cost: 0, pairs: Vec::new(), stale: Vec::new() }
    }

    /// Add a pair; returns the full chunk it did not fit in, if any.
    fn pair(&mut self, key: Key, value: Value) -> Option<Chunk> {
        let full = self.make_room(pair_cost(&key, &value));
        self.pairs.push((key, value));
        full
    }

    /// Add a stale key; returns the full chunk it did not fit in, if any.
    fn stale(&mut self, key: String) -> Option<Chunk> {
        let full = self.make_room(key.len() + PAIR_OVERHEAD);
        self.stale.push(key);
        full
    }

    fn make_room(&mut self, cost: usize) -> Option<Chunk> {
        let full = (self.cost > 0 && self.cost + cost > self.max).then(|| {
            self.cost = 0;
            (std::mem::take(&mut self.pairs), std::mem::take(&mut self.stale))
        });
        self.cost += cost;
        full
    }

    /// What is left (possibly nothing).
    fn finish(self) -> Chunk {
        (self.pairs, self.stale)
    }
}

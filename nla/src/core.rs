//! The node state machine shared by every NLA and by the front end (the root of the tree:
//! no local ranks, no parent). It owns the PMI connections of the local ranks, the node's KVS
//! and cache, the fence of its subtree and the bookkeeping of its children. Pure: it takes
//! events and returns [`Effect`]s; sockets, processes and timers live in the drivers.
//!
//! How a PMI-1 request is answered:
//! * requests that need no node knowledge (`init`, `get_maxes`, …): by the rank's
//!   [`pmi_wire::Connection`];
//! * `put`: stored in this node's KVS and in the pending pairs of the current fence epoch;
//! * `barrier_in`: when every local rank and every child subtree entered, one `FenceIn` with
//!   the subtree's new pairs goes to the parent (one message per node per fence). The root
//!   then releases the fence down the tree: when the epoch's pairs total at most
//!   `kvs_push_max` bytes they travel down with the release (`pushed`) and every `get` is
//!   answered locally;
//! * `get`: from this node's KVS. A miss is final while every fence so far was pushed. After
//!   an unpushed fence a miss climbs the tree (`Get`) until some node has the key — every
//!   node holds its subtree's pairs, the root holds all — and the answer is cached at each
//!   node on the way down (the hierarchical cache). Concurrent misses for one key share one
//!   upward request.
//! * `publish_name`/`unpublish_name`/`lookup_name` and `spawn`: passed up the tree with a
//!   job-unique request id to the front end (which holds the name table and starts spawned
//!   process groups, see `libi-mpiexec`'s `spawn.rs`); the answer comes back down the same
//!   path. A malformed spawn block is answered `rc=-1` by the connection and the job goes on.

use crate::pmgr_node::{PmgrEffect, PmgrNode};
use dashmap::DashMap;
use libi::job::{JobCommon, NodePlan, NodeSetup, RankEnd, SpawnCmd, SpawnRequest};
use libi::msg::{Msg, NameOp};
use libi::report::{Counters, FenceRecord, NodeReport};
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
    /// Tear down every local rank (TERM, then KILL after the grace period).
    KillRanks,
    /// Deliver a signal to every local rank.
    SignalRanks(i32),
    /// Bytes (empty = EOF) for the stdin of the local rank that is global rank 0.
    Stdin(Vec<u8>),
    /// A diagnostic line for stderr.
    Warn(String),
    /// Write bytes on PMGR connection `conn`.
    ToPmgr(u64, Vec<u8>),
    /// Close PMGR connection `conn`.
    ClosePmgr(u64),
    /// Fail the job with this message after a short grace (an abort record may still come):
    /// call [`NodeCore::fail_now`] then.
    FailSoon(String),
    /// Start an NLA of a spawned process group on this host (`libi-nla --rendezvous
    /// front_end --host host`).
    StartNla { host: String, front_end: String },
    /// Local rank `local` closed its PMI connection between `init` and `finalize`. A rank
    /// that crashes closes it a moment before its exit is seen, so the exit gets a short
    /// grace: then call [`NodeCore::pmi_close_grace_over`].
    WatchPmiClose(usize),
    /// Local rank `local` exited while a PMGR connection of its own may still hold bytes
    /// not read yet (its `CLOSE`, an abort record): its exit is judged once they are in, or
    /// after a short wait: then call [`NodeCore::pmgr_drain_over`].
    WatchPmgrDrain(usize),
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
}

pub struct NodeCore {
    job: JobCommon,
    plan: NodePlan,
    is_root: bool,
    conns: Vec<Connection>,
    kvs: DashMap<String, String>,
    /// Keys whose value was fetched from up the tree.
    cached: HashSet<String>,
    /// Pairs put in this subtree since the last `FenceIn`.
    pending: Vec<(String, String)>,
    epoch: u64,
    entered: Vec<bool>,
    n_entered: usize,
    child_fenced: Vec<bool>,
    n_child_fenced: usize,
    /// Some completed fence left its pairs up the tree: misses must climb.
    lazy: bool,
    waiting: HashMap<String, Vec<Waiter>>,
    /// Ranks of each child's subtree that have not reported their end.
    child_left: Vec<usize>,
    child_closed: Vec<bool>,
    ended: Vec<bool>,
    n_ended: usize,
    stdin_child: Option<usize>,
    tearing_down: bool,
    counters: Counters,
    fence_enter: Vec<f64>,
    fences: Vec<FenceRecord>,
    report: bool,
    clock: fn() -> f64,
    /// At the root: keys of the current epoch that replaced an existing value.
    overwritten: HashSet<String>,
    /// Keys this subtree wrote in the current epoch (they are the newest values).
    epoch_keys: HashSet<String>,
    /// PMI-2 node attributes (node-local, never leave the node).
    node_attrs: HashMap<String, String>,
    /// Local ranks waiting for a node attribute (`info-getnodeattr` with `wait=TRUE`).
    attr_waiters: HashMap<String, Vec<usize>>,
    /// The PMGR collective server (`--pmgr`).
    pmgr: Option<PmgrNode>,
    /// Exits of local ranks waiting for their PMGR connections (see `rank_ended`).
    pmgr_exits: HashMap<usize, ProcEnd>,
    /// Name-service and spawn requests in flight to the front end: who asked, and what.
    requests: HashMap<u64, (Waiter, Pending)>,
    next_req: u64,
}

impl NodeCore {
    /// `report`: keep fence timings for the launch report.
    pub fn new(setup: NodeSetup, is_root: bool, report: bool) -> Self {
        let NodeSetup { job, plan } = setup;
        let kvs = DashMap::new();
        for (k, v) in &job.preput {
            kvs.insert(k.clone(), v.clone());
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
        NodeCore {
            child_left: plan.children.iter().map(NodePlan::subtree_ranks).collect(),
            child_closed: vec![false; nc],
            child_fenced: vec![false; nc],
            n_child_fenced: 0,
            job,
            plan,
            is_root,
            conns,
            kvs,
            cached: HashSet::new(),
            pending: Vec::new(),
            epoch: 1,
            entered: vec![false; n],
            n_entered: 0,
            lazy: false,
            waiting: HashMap::new(),
            ended: vec![false; n],
            n_ended: 0,
            stdin_child,
            tearing_down: false,
            counters: Counters::default(),
            fence_enter: vec![0.0; n],
            fences: Vec::new(),
            report,
            clock: libi::report::now,
            overwritten: HashSet::new(),
            epoch_keys: HashSet::new(),
            node_attrs: HashMap::new(),
            attr_waiters: HashMap::new(),
            pmgr: None,
            pmgr_exits: HashMap::new(),
            requests: HashMap::new(),
            next_req: 0,
        }
        .with_pmgr()
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
                PmgrEffect::FailSoon(m) => fx.push(Effect::FailSoon(m)),
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

    /// The wait of an [`Effect::WatchPmgrDrain`] is over: judge the exit with what came.
    /// Returns whether the exit was still waiting (something the rank left behind holds its
    /// PMGR connection open).
    pub fn pmgr_drain_over(&mut self, local: usize, fx: &mut Vec<Effect>) -> bool {
        let Some(end) = self.pmgr_exits.remove(&local) else { return false };
        self.judge_end(local, end, fx);
        true
    }

    /// The grace after a [`Effect::FailSoon`] ended: fail unless the job is already failing.
    pub fn fail_now(&mut self, message: String, fx: &mut Vec<Effect>) {
        if !self.tearing_down {
            self.fail(message, fx);
        }
    }

    pub fn job(&self) -> &JobCommon {
        &self.job
    }

    pub fn plan(&self) -> &NodePlan {
        &self.plan
    }

    pub fn local_count(&self) -> usize {
        self.conns.len()
    }

    /// The setup to send to child `idx` once it authenticated.
    pub fn child_setup(&self, idx: usize) -> Option<NodeSetup> {
        let plan = self.plan.children.get(idx)?.clone();
        Some(NodeSetup { job: self.job.clone(), plan })
    }

    /// Index of the child with node id `node`.
    pub fn child_index(&self, node: u32) -> Option<usize> {
        self.plan.children.iter().position(|c| c.node == node)
    }

    /// Ranks of this subtree that have not ended yet.
    pub fn ranks_left(&self) -> usize {
        (self.conns.len() - self.n_ended) + self.child_left.iter().sum::<usize>()
    }

    /// Every rank of the subtree ended and every child connection closed.
    pub fn finished(&self) -> bool {
        self.ranks_left() == 0 && self.child_closed.iter().all(|c| *c)
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// This node's part of the launch report (launch records are the driver's).
    pub fn report(&self) -> NodeReport {
        NodeReport {
            node: self.plan.node,
            host: self.plan.host.clone(),
            fences: self.fences.clone(),
            counters: self.counters.clone(),
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

    /// Bytes read from local rank `local`'s PMI socket.
    pub fn rank_data(&mut self, local: usize, data: &[u8], fx: &mut Vec<Effect>) {
        let Some(conn) = self.conns.get_mut(local) else {
            return;
        };
        let mut actions = Vec::new();
        conn.receive(data, &mut actions);
        for a in actions {
            self.action(local, a, fx);
        }
    }

    fn action(&mut self, local: usize, a: Action, fx: &mut Vec<Effect>) {
        let rank = self.rank_of(local);
        match a {
            Action::Send(b) => fx.push(Effect::ToRank(local, b)),
            Action::Put { key, value } => {
                self.cached.remove(&key);
                self.epoch_keys.insert(key.clone());
                self.kvs.insert(key.clone(), value.clone());
                self.pending.push((key, value));
            }
            Action::Get { key } => self.local_get(local, key, fx),
            Action::BarrierIn => {
                if !self.entered[local] {
                    self.entered[local] = true;
                    self.n_entered += 1;
                    self.fence_enter[local] = (self.clock)();
                }
                self.maybe_fence_in(fx);
            }
            Action::Finalized => {}
            Action::Abort { exitcode, message } => fx.push(Effect::ToParent(Msg::Abort {
                rank,
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
                    })
                    .collect();
                let app = self.plan.ranks.get(local).map(|s| s.app).unwrap_or(0);
                let host = self.plan.host.clone();
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
            Action::GetJobAttr { key } => {
                // Job attributes are the server-owned pairs pre-loaded into every NLA.
                let value = self.job.preput.iter().find(|(k, _)| *k == key).map(|(_, v)| v.clone());
                let reply = self.conns[local].answer_job_attr(&key, value.as_deref());
                fx.push(Effect::ToRank(local, reply));
            }
            Action::ProtocolError { error, excerpt, fatal } => {
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

    fn local_get(&mut self, local: usize, key: String, fx: &mut Vec<Effect>) {
        if let Some(v) = self.kvs.get(&key).map(|v| v.value().clone()) {
            self.counters.gets_local += 1;
            if self.cached.contains(&key) {
                self.counters.cache_hits += 1;
            }
            let reply = self.conns[local].answer_get(&key, Some(&v));
            fx.push(Effect::ToRank(local, reply));
        } else if self.lazy && !self.is_root {
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
        let pairs = std::mem::take(&mut self.pending);
        if self.is_root {
            self.release(self.epoch, pairs, fx);
        } else {
            fx.push(Effect::ToParent(Msg::FenceIn { epoch: self.epoch, pairs }));
        }
    }

    /// At the root: every rank entered fence `epoch`; `pairs` are the epoch's new pairs.
    fn release(&mut self, epoch: u64, pairs: Vec<(String, String)>, fx: &mut Vec<Effect>) {
        let bytes: u64 = pairs.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum();
        let pushed = bytes <= self.job.kvs_push_max;
        // The root already holds the pairs (merged as they came up); keys that existed
        // before this epoch were overwritten and must leave the caches below.
        let stale: Vec<String> = if pushed {
            Vec::new()
        } else {
            let mut seen = HashSet::new();
            pairs
                .iter()
                .filter(|(k, _)| self.overwritten.contains(k) && seen.insert(k.clone()))
                .map(|(k, _)| k.clone())
                .collect()
        };
        self.overwritten.clear();
        let msg =
            Msg::FenceOut { epoch, pushed, pairs: if pushed { pairs } else { Vec::new() }, stale };
        self.fence_out(msg, fx);
    }

    /// A fence release (from the parent, or made here at the root): store what it carries,
    /// release the local ranks, pass it on to the children.
    fn fence_out(&mut self, msg: Msg, fx: &mut Vec<Effect>) {
        let Msg::FenceOut { epoch, pushed, pairs, stale } = &msg else {
            return;
        };
        if *epoch != self.epoch {
            fx.push(Effect::Warn(format!("fence release {epoch} during fence {}", self.epoch)));
            return;
        }
        if *pushed {
            for (k, v) in pairs {
                self.cached.remove(k);
                self.kvs.insert(k.clone(), v.clone());
            }
        } else {
            self.lazy = true;
            for k in stale {
                // Overwritten elsewhere in this epoch: our copy is old unless this subtree
                // wrote it too.
                if !self.epoch_keys.contains(k) {
                    self.cached.remove(k);
                    self.kvs.remove(k);
                }
            }
        }
        self.epoch_keys.clear();
        self.counters.fences += 1;
        self.epoch += 1;
        self.n_entered = 0;
        self.n_child_fenced = 0;
        self.child_fenced.iter_mut().for_each(|f| *f = false);
        let now = (self.clock)();
        for local in 0..self.conns.len() {
            if std::mem::replace(&mut self.entered[local], false) {
                if self.report {
                    self.fences.push(FenceRecord {
                        rank: self.rank_of(local),
                        epoch: *epoch,
                        enter: self.fence_enter[local],
                        leave: now,
                    });
                }
                let out = self.conns[local].barrier_out();
                fx.push(Effect::ToRank(local, out));
            }
        }
        if !self.child_fenced.is_empty() {
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

    /// The rank's PMI socket reached EOF (the process may still be running).
    pub fn rank_eof(&mut self, local: usize, fx: &mut Vec<Effect>) {
        let Some(conn) = self.conns.get_mut(local) else { return };
        if conn.eof() == Eof::BeforeFinalize && !self.ended[local] && !self.tearing_down {
            fx.push(Effect::WatchPmiClose(local));
        }
    }

    /// The grace after an [`Effect::WatchPmiClose`] is over; `running`: the rank's process
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
    /// [`Effect::WatchPmgrDrain`]'s wait if a process it left behind still holds it. Then a
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
            fx.push(Effect::WatchPmgrDrain(local));
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
            && !self.pmgr.as_ref().is_some_and(|p| p.open_rank(rank));
        let end = match end {
            ProcEnd::Exited(code) => RankEnd::Exited { code, clean_pmi },
            ProcEnd::Signaled(signal) => RankEnd::Signaled { signal },
            ProcEnd::SpawnFailed { errno, reason } => RankEnd::SpawnFailed { errno, reason },
        };
        fx.push(Effect::ToParent(Msg::RankEnded {
            rank: self.rank_of(local),
            host: self.plan.host.clone(),
            end,
        }));
    }

    /// The driver started the local ranks.
    pub fn ranks_started(&mut self, fx: &mut Vec<Effect>) {
        fx.push(Effect::ToParent(Msg::NodeUp {
            node: self.plan.node,
            host: self.plan.host.clone(),
            ranks: self.conns.len() as u32,
        }));
    }

    // ---------------------------------------------------------------- parent

    /// A message from the parent.
    pub fn parent_msg(&mut self, msg: Msg, fx: &mut Vec<Effect>) {
        match msg {
            Msg::FenceOut { .. } if self.tearing_down => {}
            m @ Msg::FenceOut { .. } => self.fence_out(m, fx),
            Msg::GetResult { key, value } => {
                if let Some(v) = &value {
                    self.kvs.insert(key.clone(), v.clone());
                    self.cached.insert(key.clone());
                }
                self.answer_waiters(&key, value.as_deref(), fx);
            }
            Msg::Kill => {
                self.tearing_down = true;
                fx.push(Effect::KillRanks);
                fx.push(Effect::ToChildren(Msg::Kill));
            }
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
                _ => fx.push(Effect::Warn(format!("name-service answer {req} nobody asked for"))),
            },
            Msg::SpawnResult { req, rc, jobid } => match self.requests.remove(&req) {
                Some((Waiter::Child(c), _)) => {
                    fx.push(Effect::ToChild(c, Msg::SpawnResult { req, rc, jobid }))
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

    fn answer_waiters(&mut self, key: &str, value: Option<&str>, fx: &mut Vec<Effect>) {
        for w in self.waiting.remove(key).unwrap_or_default() {
            match w {
                Waiter::Rank(local) => {
                    let reply = self.conns[local].answer_get(key, value);
                    fx.push(Effect::ToRank(local, reply));
                }
                Waiter::Child(c) => fx.push(Effect::ToChild(
                    c,
                    Msg::GetResult { key: key.to_string(), value: value.map(str::to_string) },
                )),
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
            Msg::FenceIn { epoch, pairs } => {
                if epoch != self.epoch || self.child_fenced[idx] {
                    fx.push(Effect::Warn(format!(
                        "child {idx} entered fence {epoch} during fence {}",
                        self.epoch
                    )));
                    return;
                }
                self.child_fenced[idx] = true;
                self.n_child_fenced += 1;
                for (k, v) in &pairs {
                    self.cached.remove(k);
                    self.epoch_keys.insert(k.clone());
                    if self.kvs.insert(k.clone(), v.clone()).is_some() && self.is_root {
                        self.overwritten.insert(k.clone());
                    }
                }
                self.pending.extend(pairs);
                self.maybe_fence_in(fx);
            }
            Msg::Get { key } => {
                self.counters.gets_for_children += 1;
                if let Some(v) = self.kvs.get(&key).map(|v| v.value().clone()) {
                    fx.push(Effect::ToChild(idx, Msg::GetResult { key, value: Some(v) }));
                } else if self.is_root {
                    fx.push(Effect::ToChild(idx, Msg::GetResult { key, value: None }));
                } else {
                    self.wait_for(key, Waiter::Child(idx), fx);
                }
            }
            Msg::RankEnded { .. } => {
                self.child_left[idx] = self.child_left[idx].saturating_sub(1);
                fx.push(Effect::ToParent(msg));
            }
            Msg::SubtreeLost { ranks, .. } => {
                self.child_left[idx] = self.child_left[idx].saturating_sub(ranks as usize);
                fx.push(Effect::ToParent(msg));
            }
            Msg::Name { req, op } => {
                self.requests.insert(req, (Waiter::Child(idx), Pending::Name(op.clone())));
                fx.push(Effect::ToParent(Msg::Name { req, op }));
            }
            Msg::Spawn { req, spawn } => {
                self.requests.insert(req, (Waiter::Child(idx), Pending::Spawn));
                fx.push(Effect::ToParent(Msg::Spawn { req, spawn }));
            }
            Msg::PmgrUp(partial) => {
                let mut pfx = Vec::new();
                if let Some(p) = self.pmgr.as_mut() {
                    p.child_up(idx, *partial, &mut pfx);
                }
                self.pmgr_effects(pfx, fx);
            }
            Msg::Output { .. }
            | Msg::StdinAck { .. }
            | Msg::Abort { .. }
            | Msg::Fatal { .. }
            | Msg::NodeUp { .. }
            | Msg::Report(_) => fx.push(Effect::ToParent(msg)),
            other => {
                fx.push(Effect::Warn(format!("unexpected message from child {idx}: {other:?}")))
            }
        }
    }

    /// Child `idx`'s connection closed, or it could never be started (`why` says which).
    pub fn child_gone(&mut self, idx: usize, why: &str, fx: &mut Vec<Effect>) {
        if idx >= self.child_closed.len() || self.child_closed[idx] {
            return;
        }
        self.child_closed[idx] = true;
        let left = std::mem::take(&mut self.child_left[idx]);
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
    }
}

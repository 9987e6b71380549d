//! The NLA's node-level state machine: PMI connections of the local ranks, the node's KVS,
//! fences across local ranks (and, later, child NLAs), exit classification. Pure: it takes
//! events and returns [`Effect`]s; `driver.rs` owns sockets, processes and timers.
//!
//! How requests are answered:
//! * per-rank requests that need no node knowledge (`init`, `get_maxes`, …) are answered by
//!   the rank's [`pmi_wire::Connection`];
//! * `put` stores into the node KVS and into the pending set of the current fence epoch;
//! * `get` is answered from the node KVS; every pair of a completed fence is pushed down with
//!   the release, so a local miss is a miss (PMI-1 gets never block, spec §12.8);
//! * `barrier_in`: when every local rank entered, one `FenceIn` with the pairs put since the
//!   previous fence goes to the parent; `FenceOut` from the parent stores the epoch's pairs
//!   and releases every local rank with `barrier_out`.

use dashmap::DashMap;
use libi::job::{NodeSetup, RankEnd};
use libi::msg::Msg;
use pmi_wire::server::{Action, ConnConfig, Connection, Eof, Phase};
use pmi_wire::v1::ParseError;

/// What the driver must do.
#[derive(Debug, PartialEq)]
pub enum Effect {
    /// Write bytes to local rank `local`'s PMI socket.
    ToRank(usize, Vec<u8>),
    /// Close local rank `local`'s PMI socket.
    CloseRank(usize),
    /// Send a message to the parent.
    ToParent(Msg),
    /// Tear down every local rank (TERM, then KILL after the grace period).
    KillRanks,
    /// Deliver a signal to every local rank.
    SignalRanks(i32),
    /// Bytes (empty = EOF) for the stdin of the local rank that is global rank 0.
    Stdin(Vec<u8>),
    /// A diagnostic line for the NLA's stderr.
    Warn(String),
}

/// How a rank process ended, before PMI state is taken into account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcEnd {
    Exited(i32),
    Signaled(i32),
    SpawnFailed { errno: i32, reason: String },
}

pub struct NodeCore {
    setup: NodeSetup,
    conns: Vec<Connection>,
    kvs: DashMap<String, String>,
    /// Pairs put since the last `FenceIn` was sent.
    pending: Vec<(String, String)>,
    epoch: u64,
    entered: Vec<bool>,
    n_entered: usize,
    /// Local ranks whose end has been reported.
    ended: Vec<bool>,
    n_ended: usize,
    /// Set when the job is being torn down: further failures are consequences.
    tearing_down: bool,
}

impl NodeCore {
    pub fn new(setup: NodeSetup) -> Self {
        let kvs = DashMap::new();
        for (k, v) in &setup.preput {
            kvs.insert(k.clone(), v.clone());
        }
        let conns = setup
            .ranks
            .iter()
            .map(|slot| {
                Connection::new(ConnConfig {
                    rank: slot.rank,
                    size: setup.size,
                    appnum: slot.app as i32,
                    kvsname: setup.kvsname.clone(),
                    universe_size: setup.universe_size,
                })
            })
            .collect();
        let n = setup.ranks.len();
        NodeCore {
            setup,
            conns,
            kvs,
            pending: Vec::new(),
            epoch: 1,
            entered: vec![false; n],
            n_entered: 0,
            ended: vec![false; n],
            n_ended: 0,
            tearing_down: false,
        }
    }

    pub fn setup(&self) -> &NodeSetup {
        &self.setup
    }

    pub fn local_count(&self) -> usize {
        self.conns.len()
    }

    /// Every local rank has ended.
    pub fn all_ended(&self) -> bool {
        self.n_ended == self.conns.len()
    }

    /// Number of pairs in the node's KVS (for tests and reports).
    pub fn kvs_len(&self) -> usize {
        self.kvs.len()
    }

    fn rank_of(&self, local: usize) -> u32 {
        self.setup.ranks.get(local).map(|s| s.rank).unwrap_or(u32::MAX)
    }

    /// Bytes read from local rank `local`'s PMI socket.
    pub fn rank_data(&mut self, local: usize, data: &[u8], fx: &mut Vec<Effect>) {
        let Some(conn) = self.conns.get_mut(local) else { return };
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
                self.kvs.insert(key.clone(), value.clone());
                self.pending.push((key, value));
            }
            Action::Get { key } => {
                let value = self.kvs.get(&key).map(|v| v.value().clone());
                let reply = self.conns[local].answer_get(&key, value.as_deref());
                fx.push(Effect::ToRank(local, reply));
            }
            Action::BarrierIn => {
                if !self.entered[local] {
                    self.entered[local] = true;
                    self.n_entered += 1;
                }
                self.maybe_fence_in(fx);
            }
            Action::Finalized => {}
            Action::Abort { exitcode, message } => fx.push(Effect::ToParent(Msg::Abort {
                rank,
                host: self.setup.host.clone(),
                code: exitcode,
                message,
            })),
            Action::Spawn { .. } => {
                // Dynamic processes come with their own issue; refuse cleanly meanwhile.
                let reply = self.conns[local].answer_spawn(-1, None);
                fx.push(Effect::ToRank(local, reply));
                fx.push(Effect::Warn(format!("rank {rank}: spawn is not supported yet")));
            }
            Action::Publish { .. } => {
                let reply = self.conns[local].answer_publish(false);
                fx.push(Effect::ToRank(local, reply));
            }
            Action::Unpublish { .. } => {
                let reply = self.conns[local].answer_unpublish(false);
                fx.push(Effect::ToRank(local, reply));
            }
            Action::Lookup { .. } => {
                let reply = self.conns[local].answer_lookup(None);
                fx.push(Effect::ToRank(local, reply));
            }
            Action::ProtocolError { error, excerpt, fatal } => {
                let what = format!(
                    "rank {rank} on {}: malformed PMI request ({error}): \"{excerpt}\"",
                    self.setup.host
                );
                if fatal {
                    fx.push(Effect::CloseRank(local));
                }
                if fatal || !matches!(error, ParseError::UnknownCommand(_)) {
                    // A client that sends garbage is broken: fail the job now rather than let
                    // the other ranks wait for it in the next fence; no fence completes here
                    // any more.
                    self.tearing_down = true;
                    fx.push(Effect::ToParent(Msg::Fatal {
                        host: self.setup.host.clone(),
                        message: what,
                        status: 1,
                    }));
                } else {
                    // A well-formed command we do not implement got an error reply.
                    fx.push(Effect::Warn(what));
                }
            }
        }
    }

    fn maybe_fence_in(&mut self, fx: &mut Vec<Effect>) {
        if self.n_entered == self.conns.len() && !self.conns.is_empty() && !self.tearing_down {
            let pairs = std::mem::take(&mut self.pending);
            fx.push(Effect::ToParent(Msg::FenceIn { epoch: self.epoch, pairs }));
        }
    }

    /// A message from the parent.
    pub fn parent_msg(&mut self, msg: Msg, fx: &mut Vec<Effect>) {
        match msg {
            Msg::FenceOut { .. } if self.tearing_down => {}
            Msg::FenceOut { epoch, pairs } => {
                if epoch != self.epoch {
                    fx.push(Effect::Warn(format!(
                        "fence release for epoch {epoch} while in epoch {}",
                        self.epoch
                    )));
                    return;
                }
                for (k, v) in pairs {
                    self.kvs.insert(k, v);
                }
                self.epoch += 1;
                self.n_entered = 0;
                for local in 0..self.conns.len() {
                    if std::mem::replace(&mut self.entered[local], false) {
                        let out = self.conns[local].barrier_out();
                        fx.push(Effect::ToRank(local, out));
                    }
                }
            }
            Msg::Kill => {
                self.tearing_down = true;
                fx.push(Effect::KillRanks);
            }
            Msg::Signal { signal } => fx.push(Effect::SignalRanks(signal)),
            Msg::Stdin { data } => {
                if self.setup.stdin_rank0 {
                    fx.push(Effect::Stdin(data));
                }
            }
            other => fx.push(Effect::Warn(format!("unexpected message from parent: {other:?}"))),
        }
    }

    /// The rank's PMI socket reached EOF (the process may still be running).
    pub fn rank_eof(&mut self, local: usize) {
        if let Some(conn) = self.conns.get_mut(local) {
            let _ = conn.eof();
        }
    }

    /// The rank's process ended (its remaining PMI bytes have already been fed).
    pub fn rank_ended(&mut self, local: usize, end: ProcEnd, fx: &mut Vec<Effect>) {
        if local >= self.conns.len() || self.ended[local] {
            return;
        }
        self.ended[local] = true;
        self.n_ended += 1;
        let phase = self.conns[local].phase();
        let clean_pmi = !matches!(phase, Phase::Initialized);
        let end = match end {
            ProcEnd::Exited(code) => RankEnd::Exited { code, clean_pmi },
            ProcEnd::Signaled(signal) => RankEnd::Signaled { signal },
            ProcEnd::SpawnFailed { errno, reason } => RankEnd::SpawnFailed { errno, reason },
        };
        if matches!(phase, Phase::Initialized) {
            // Make sure a rank that vanished mid-job is seen as such.
            let _ = self.conns[local].eof() == Eof::BeforeFinalize;
        }
        fx.push(Effect::ToParent(Msg::RankEnded {
            rank: self.rank_of(local),
            host: self.setup.host.clone(),
            end,
        }));
    }
}

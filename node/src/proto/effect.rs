//! The one interpreter of the node core's effects.
//!
//! Every place that runs a [`NodeCore`](crate::proto::node::NodeCore) — the NLA driver, the front
//! end (each process group's root node), the simulator — turns its effects into I/O the same
//! way: [`apply`] decides what each effect means, a [`NodeIo`] supplies the primitives (a
//! write queued for a rank, a signal, a message on a tree link). A driver that has no ranks
//! (the front end) says so once, in its `NodeIo`, instead of in a match of its own.
//!
//! No primitive waits: a write is queued and the call returns. A queue that fills (a child
//! that does not read) is told to the core afterwards ([`crate::proto::node::NodeCore::child_full`]),
//! which decides what to do about it; nothing else waits for that child.

use crate::proto::node::Effect;
use libi::msg::Msg;
use tracing::warn;

/// The I/O primitives a node's driver offers to [`apply`]. None decides anything: each does
/// what it says, or nothing if the thing it would act on is gone.
pub trait NodeIo {
    /// Queue bytes for local rank `local`'s PMI socket.
    fn to_rank(&mut self, local: usize, bytes: Vec<u8>);
    /// Close local rank `local`'s PMI socket (after what is queued).
    fn close_rank(&mut self, local: usize);
    /// Queue a message for the parent (the front end: hand it to the root core).
    fn to_parent(&mut self, msg: Msg);
    /// Send a message to child `idx`: queued on its link at once, full or not (a full link
    /// is reported to the core by the driver after the effects are applied).
    fn to_child(&mut self, idx: usize, msg: Msg);
    /// Send a message to every child (encoded once by the NLA's and the front end's links).
    fn to_children(&mut self, msg: Msg);
    /// Stop (`true`) or resume (`false`) reading child `idx`'s connection.
    fn pause_child(&mut self, idx: usize, pause: bool);
    /// Drop child `idx`'s connection now; it is then reported gone with `why`.
    fn drop_child(&mut self, idx: usize, why: &str);
    /// Stop (`true`) or resume (`false`) reading the parent's connection (nothing to do
    /// where the parent is in the same process).
    fn pause_parent(&mut self, _pause: bool) {}
    /// Deliver `signal` to every local rank not reaped yet.
    fn signal_ranks(&mut self, signal: i32);
    /// Bytes (empty: end of file) for the stdin of the local rank that is global rank 0.
    fn stdin(&mut self, data: Vec<u8>);
    /// Queue bytes for PMGR connection `conn`.
    fn to_pmgr(&mut self, conn: u64, bytes: bytes::Bytes);
    /// Close PMGR connection `conn` (after what is queued).
    fn close_pmgr(&mut self, conn: u64);
    /// Start the NLA of a spawned process group on `host`, joining `front_end`.
    fn start_nla(&mut self, host: &str, front_end: &str);
    /// Launch no more children, and give up those not connected yet now, their launchers
    /// killed (nothing to do where children are not launched).
    fn abort_launches(&mut self) {}
    /// Queue a message for this node's PMIx companion (the default: there is none here,
    /// which is said once per message).
    fn to_pmix(&mut self, msg: libi_pmix::proto::ToCompanion) {
        warn!("no PMIx server on this node for {msg:?}");
    }
    /// A diagnostic line (the default: the log's warning).
    fn warn(&mut self, line: &str) {
        warn!("{line}");
    }
}

/// Apply one effect.
pub fn apply_one(io: &mut impl NodeIo, e: Effect) {
    match e {
        Effect::ToRank(local, bytes) => io.to_rank(local, bytes),
        Effect::CloseRank(local) => io.close_rank(local),
        Effect::ToParent(msg) => io.to_parent(msg),
        Effect::ToChild(idx, msg) => io.to_child(idx, msg),
        Effect::ToChildren(msg) => io.to_children(msg),
        Effect::KillRanks => io.signal_ranks(libc::SIGTERM),
        Effect::SignalRanks(signal) => io.signal_ranks(signal),
        Effect::Stdin(data) => io.stdin(data),
        Effect::Warn(line) => io.warn(&line),
        Effect::ToPmgr(conn, bytes) => io.to_pmgr(conn, bytes),
        Effect::ClosePmgr(conn) => io.close_pmgr(conn),
        Effect::StartNla { host, front_end } => io.start_nla(&host, &front_end),
        Effect::PauseChild(idx, pause) => io.pause_child(idx, pause),
        Effect::DropChild(idx, why) => io.drop_child(idx, &why),
        Effect::PauseParent(pause) => io.pause_parent(pause),
        Effect::AbortLaunches => io.abort_launches(),
        Effect::ToPmix(msg) => io.to_pmix(msg),
    }
}

/// Apply effects in order, emptying `fx`.
pub fn apply(io: &mut impl NodeIo, fx: &mut Vec<Effect>) {
    for e in fx.drain(..) {
        apply_one(io, e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records every primitive called, as text.
    #[derive(Default)]
    struct Rec(Vec<String>);

    impl NodeIo for Rec {
        fn to_rank(&mut self, local: usize, bytes: Vec<u8>) {
            self.0.push(format!("rank {local} {}", String::from_utf8_lossy(&bytes)))
        }
        fn close_rank(&mut self, local: usize) {
            self.0.push(format!("close {local}"))
        }
        fn to_parent(&mut self, msg: Msg) {
            self.0.push(format!("up {msg:?}"))
        }
        fn to_child(&mut self, idx: usize, msg: Msg) {
            self.0.push(format!("child {idx} {msg:?}"))
        }
        fn to_children(&mut self, msg: Msg) {
            self.0.push(format!("children {msg:?}"))
        }
        fn pause_child(&mut self, idx: usize, pause: bool) {
            self.0.push(format!("pause {idx} {pause}"))
        }
        fn drop_child(&mut self, idx: usize, why: &str) {
            self.0.push(format!("drop {idx} {why}"))
        }
        fn pause_parent(&mut self, pause: bool) {
            self.0.push(format!("pause parent {pause}"))
        }
        fn signal_ranks(&mut self, signal: i32) {
            self.0.push(format!("signal {signal}"))
        }
        fn stdin(&mut self, data: Vec<u8>) {
            self.0.push(format!("stdin {}", data.len()))
        }
        fn to_pmgr(&mut self, conn: u64, bytes: bytes::Bytes) {
            self.0.push(format!("pmgr {conn} {}", bytes.len()))
        }
        fn close_pmgr(&mut self, conn: u64) {
            self.0.push(format!("pmgr close {conn}"))
        }
        fn start_nla(&mut self, host: &str, front_end: &str) {
            self.0.push(format!("nla {host} {front_end}"))
        }
        fn warn(&mut self, line: &str) {
            self.0.push(format!("warn {line}"))
        }
        fn abort_launches(&mut self) {
            self.0.push("abort launches".into())
        }
    }

    fn run(fx: Vec<Effect>) -> Vec<String> {
        let mut rec = Rec::default();
        let mut fx = fx;
        apply(&mut rec, &mut fx);
        assert!(fx.is_empty());
        rec.0
    }

    #[test]
    fn each_effect_becomes_its_primitive_in_order() {
        let got = run(vec![
            Effect::ToRank(1, b"cmd=barrier_out\n".to_vec()),
            Effect::KillRanks,
            Effect::SignalRanks(libc::SIGUSR1),
            Effect::ToChildren(Msg::Kill),
            Effect::ToChild(2, Msg::Kill),
            Effect::ToParent(Msg::Kill),
            Effect::CloseRank(1),
            Effect::Stdin(Vec::new()),
            Effect::Warn("w".into()),
            Effect::ToPmgr(7, vec![0; 4].into()),
            Effect::ClosePmgr(7),
            Effect::StartNla { host: "n1".into(), front_end: "fe:1".into() },
            Effect::PauseChild(3, true),
            Effect::DropChild(3, "gone".into()),
            Effect::PauseParent(true),
            Effect::AbortLaunches,
        ]);
        let want = [
            "rank 1 cmd=barrier_out\n".to_string(),
            format!("signal {}", libc::SIGTERM),
            format!("signal {}", libc::SIGUSR1),
            "children Kill".into(),
            "child 2 Kill".into(),
            "up Kill".into(),
            "close 1".into(),
            "stdin 0".into(),
            "warn w".into(),
            "pmgr 7 4".into(),
            "pmgr close 7".into(),
            "nla n1 fe:1".into(),
            "pause 3 true".into(),
            "drop 3 gone".into(),
            "pause parent true".into(),
            "abort launches".into(),
        ];
        assert_eq!(got, want);
    }
}

//! How the node judges the exit of a PMGR rank, whatever the order in which it sees the
//! rank's last bytes (its CLOSE), their EOF and the process's exit (issue 17.1), and what an
//! authenticated connection may claim. The node state machine on its own: no sockets.

use libi::job::{
    AppSpec, JobCommon, LauncherKind, LauncherSpec, NodePlan, NodeSetup, RankEnd, RankSlot,
};
use libi::msg::Msg;
use libi_node::proto::node::{Effect, NodeCore, ProcEnd, Timer};

/// Whether `c` holds a timer matching `f`.
fn timer(c: &NodeCore, f: impl Fn(&Timer) -> bool) -> bool {
    c.timers().any(|(_, t)| f(t))
}

/// The root node of a PMGR job of `n` ranks, all local, every end reported on its own.
fn core(n: u32) -> NodeCore {
    core_with(n, true)
}

/// The same, ends reported one by one (`each_end`) or counted (the default).
fn core_with(n: u32, each_end: bool) -> NodeCore {
    let plan = NodePlan {
        node: 1,
        host: "h1".into(),
        ranks: (0..n).map(|r| RankSlot { rank: r, app: 0 }).collect(),
        children: vec![],
    };
    let job = JobCommon {
        size: n,
        universe_size: n as i32,
        kvsname: "kvs".into(),
        preput: vec![],
        apps: vec![AppSpec {
            exe: "x".into(),
            args: vec![],
            nprocs: n,
            env: vec![],
            wdir: None,
            agent_env: false,
            raw_env: Vec::new(),
        }],
        launcher: LauncherSpec::new(LauncherKind::Fork, "/x"),
        kill_grace_ms: 10,
        launch_timeout_ms: 10,
        launch_batch: None,
        kvs_push_max: 1 << 20,
        kvs_max: 1 << 30,
        report: false,
        pmgr: Some(7),
        verbose: false,
        spawned_by: None,
        binding: Default::default(),
        singleton: None,
        each_end,
        staged: Vec::new(),
        gpus: Default::default(),
        pmix: None,
    };
    NodeCore::new(NodeSetup { job, plan }, true, false)
}

fn ints(xs: &[i32]) -> Vec<u8> {
    xs.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

const BARRIER: i32 = 3;
const CLOSE: i32 = 1;
const GATHER: i32 = 5;

/// Local rank `r` connects as itself (connection id `r`) and passes `bytes`.
fn say(c: &mut NodeCore, r: u32, bytes: &[u8]) -> Vec<Effect> {
    let mut fx = Vec::new();
    c.pmgr_data(r as u64, bytes, &mut fx);
    fx
}

fn ended(fx: &[Effect]) -> Vec<(u32, RankEnd)> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::ToParent(Msg::RankEnded { rank, end, .. }) => Some((*rank, end.clone())),
            _ => None,
        })
        .collect()
}

fn clean(code: i32) -> RankEnd {
    RankEnd::Exited { code, clean_pmi: true }
}

fn unclean(code: i32) -> RankEnd {
    RankEnd::Exited { code, clean_pmi: false }
}

/// Two ranks through a barrier; both connections open.
fn after_barrier() -> NodeCore {
    let mut c = core(2);
    for r in 0..2 {
        c.pmgr_connected(r as u64, r);
        say(&mut c, r, &ints(&[8, r as i32, BARRIER]));
    }
    c
}

#[test]
fn close_then_exit_is_clean_at_once() {
    let mut c = after_barrier();
    say(&mut c, 1, &ints(&[CLOSE]));
    let mut fx = Vec::new();
    c.rank_ended(1, ProcEnd::Exited(0), &mut fx);
    assert_eq!(ended(&fx), vec![(1, clean(0))]);
}

#[test]
fn exit_seen_before_the_close_waits_for_it() {
    let mut c = after_barrier();
    let mut fx = Vec::new();
    c.rank_ended(1, ProcEnd::Exited(0), &mut fx);
    assert!(fx.is_empty(), "judged before its bytes were read: {fx:?}");
    assert!(timer(&c, |t| *t == Timer::PmgrDrain(1)));
    let fx = say(&mut c, 1, &ints(&[CLOSE]));
    assert_eq!(ended(&fx), vec![(1, clean(0))]);
    // Its EOF and the end of the wait change nothing.
    let mut fx = Vec::new();
    c.pmgr_eof(1, &mut fx);
    assert!(!c.pmgr_drain_over(1, &mut fx));
    assert!(ended(&fx).is_empty());
}

#[test]
fn exit_without_close_is_judged_at_eof() {
    let mut c = after_barrier();
    let mut fx = Vec::new();
    c.rank_ended(0, ProcEnd::Exited(0), &mut fx);
    assert!(ended(&fx).is_empty());
    let mut fx = Vec::new();
    c.pmgr_eof(0, &mut fx);
    assert_eq!(ended(&fx), vec![(0, unclean(0))]);
}

#[test]
fn a_connection_held_open_is_judged_after_the_wait() {
    let mut c = after_barrier();
    let mut fx = Vec::new();
    c.rank_ended(0, ProcEnd::Exited(0), &mut fx);
    let mut fx = Vec::new();
    assert!(c.pmgr_drain_over(0, &mut fx));
    assert_eq!(ended(&fx), vec![(0, unclean(0))]);
}

#[test]
fn a_signal_is_not_kept_waiting() {
    let mut c = after_barrier();
    let mut fx = Vec::new();
    c.rank_ended(0, ProcEnd::Signaled(9), &mut fx);
    assert_eq!(ended(&fx), vec![(0, RankEnd::Signaled { signal: 9 })]);
}

/// A non-root GATHER gets no reply: the client sends CLOSE right behind it and exits while
/// the gather still waits for rank 0. The CLOSE is parsed only once the gather completes,
/// but it was sent (it is the last of complete packets): a clean exit, and its EOF no
/// failure.
#[test]
fn close_behind_a_collective_in_flight_counts() {
    let mut c = after_barrier();
    let mut fx = Vec::new();
    c.rank_ended(1, ProcEnd::Exited(0), &mut fx);
    let mut bytes = ints(&[GATHER, 0, 2]);
    bytes.extend([1, 2]);
    bytes.extend(ints(&[CLOSE]));
    let fx = say(&mut c, 1, &bytes);
    assert_eq!(ended(&fx), vec![(1, clean(0))]);
    let mut fx = Vec::new();
    c.pmgr_eof(1, &mut fx);
    assert!(ended(&fx).is_empty() && !timer(&c, |t| matches!(t, Timer::FailNow(_))), "{fx:?}");
    // Rank 0 completes the gather (gets both blocks), closes, exits.
    let mut g = ints(&[GATHER, 0, 2]);
    g.extend([3, 4]);
    let fx = say(&mut c, 0, &g);
    assert!(
        fx.iter().any(|e| matches!(e, Effect::ToPmgr(0, b) if b[..] == [3, 4, 1, 2])),
        "{fx:?}"
    );
    say(&mut c, 0, &ints(&[CLOSE]));
    let mut fx = Vec::new();
    c.rank_ended(0, ProcEnd::Exited(0), &mut fx);
    assert_eq!(ended(&fx), vec![(0, clean(0))]);
}

/// The same without the CLOSE: once the gather completes, the EOF is a failure.
#[test]
fn eof_behind_a_collective_in_flight_fails() {
    let mut c = after_barrier();
    let mut bytes = ints(&[GATHER, 0, 2]);
    bytes.extend([1, 2]);
    say(&mut c, 1, &bytes);
    let mut fx = Vec::new();
    c.rank_ended(1, ProcEnd::Exited(0), &mut fx);
    c.pmgr_eof(1, &mut fx);
    assert_eq!(ended(&fx), vec![(1, unclean(0))]);
    let mut g = ints(&[GATHER, 0, 2]);
    g.extend([3, 4]);
    let fx = say(&mut c, 0, &g);
    assert!(timer(&c, |t| matches!(t, Timer::FailNow(m) if m.contains("rank 1"))), "{fx:?}");
}

/// An abort record on a connection of its own, still unread when the exit is seen: it is
/// read before the exit is judged (and the job fails with it).
#[test]
fn abort_record_read_before_the_exit_is_judged() {
    let mut c = after_barrier();
    say(&mut c, 1, &ints(&[CLOSE]));
    c.pmgr_connected(9, 1);
    let mut fx = Vec::new();
    c.rank_ended(1, ProcEnd::Exited(0), &mut fx);
    assert!(fx.is_empty() && timer(&c, |t| *t == Timer::PmgrDrain(1)), "{fx:?}");
    let mut rec = ints(&[-4, 1, 4]);
    rec.extend(b"no\x1b\0");
    let fx = say(&mut c, 9, &rec);
    let fatal = fx.iter().find_map(|e| match e {
        Effect::ToParent(Msg::Fatal { message, status, .. }) => Some((message.clone(), *status)),
        _ => None,
    });
    assert_eq!(fatal, Some(("rank 1 on h1 called pmgr_abort (code -4): no\\x1b".into(), 4)));
    assert_eq!(ended(&fx), vec![(1, clean(0))]);
}

/// A connection held by rank 1's process that says it is rank 0 fails the job, naming both;
/// the record's rank field is not believed either.
#[test]
fn a_rank_claiming_another_rank_fails_the_job() {
    let mut c = core(2);
    c.pmgr_connected(0, 1);
    let fx = say(&mut c, 0, &ints(&[8, 0]));
    assert!(
        timer(&c, |t| matches!(t, Timer::FailNow(m) if m == "PMGR: rank 1 connected as rank 0")),
        "{fx:?}"
    );
    assert!(fx.iter().any(|e| matches!(e, Effect::ClosePmgr(0))));
}

/// A PMGR failure still in its grace when every rank has ended fails the job then: it is
/// not dropped with the node's end (the ranks exited 0 at once: the job ended 0, silently).
#[test]
fn a_failure_in_its_grace_is_not_lost_when_the_ranks_end() {
    let mut c = core(2);
    c.pmgr_connected(0, 1);
    say(&mut c, 0, &ints(&[8, 0]));
    assert!(timer(&c, |t| matches!(t, Timer::FailNow(_))));
    let mut fx = Vec::new();
    c.rank_ended(0, ProcEnd::Exited(0), &mut fx);
    assert!(!fx.iter().any(|e| matches!(e, Effect::ToParent(Msg::Fatal { .. }))), "{fx:?}");
    fx.clear();
    c.rank_ended(1, ProcEnd::Exited(0), &mut fx);
    let fatal = fx.iter().position(|e| {
        matches!(e, Effect::ToParent(Msg::Fatal { message, .. })
            if message == "PMGR: rank 1 connected as rank 0")
    });
    let done = fx.iter().position(|e| matches!(e, Effect::ToParent(Msg::RankEnded { .. })));
    assert!(fatal.is_some(), "{fx:?}");
    assert!(!timer(&c, |t| matches!(t, Timer::FailNow(_))), "the timer is spent");
    // The failure goes up before the last end, so the front end never sees a clean finish.
    assert!(fatal < done, "{fx:?}");
}

/// A client of another protocol version (MVAPICH-1's v5 handshake: version 5, rank, host id
/// length and bytes) is not reported as a pmgr_abort naming "peer rank 5" in a 2-rank job.
#[test]
fn another_protocol_version_is_said_to_be_one() {
    let mut c = core(2);
    c.pmgr_connected(0, 0);
    let mut hello = ints(&[5, 0, 4]);
    hello.extend(b"\x7f\0\0\x01");
    let mut fx = say(&mut c, 0, &hello);
    c.pmgr_eof(0, &mut fx);
    let fatal = fx.iter().find_map(|e| match e {
        Effect::ToParent(Msg::Fatal { message, .. }) => Some(message.clone()),
        _ => None,
    });
    let m = fatal.unwrap_or_default();
    assert!(
        m.starts_with("rank 0 on h1 sent neither a PMGR handshake nor an abort record"),
        "{fx:?}"
    );
    assert!(
        m.contains("first int 5") && m.contains("version 8") && !m.contains("peer rank"),
        "{m}"
    );
}

/// The same with the ends counted (no -print-all-exitcodes): the ends wait for the grace,
/// the node does not finish meanwhile, then the failure goes up before them.
#[test]
fn counted_ends_wait_for_a_failure_in_its_grace() {
    let mut c = core_with(2, false);
    c.pmgr_connected(0, 1);
    say(&mut c, 0, &ints(&[8, 0]));
    let mut fx = Vec::new();
    c.rank_ended(0, ProcEnd::Exited(0), &mut fx);
    c.rank_ended(1, ProcEnd::Exited(0), &mut fx);
    let is_done = |e: &Effect| matches!(e, Effect::ToParent(Msg::RanksDone { .. }));
    let is_fatal = |e: &Effect| matches!(e, Effect::ToParent(Msg::Fatal { .. }));
    assert!(!fx.iter().any(|e| is_done(e) || is_fatal(e)), "held back: {fx:?}");
    assert!(!c.finished(), "a failure in its grace keeps the node");
    let at = c.poll_timeout().expect("the grace's timer");
    fx.clear();
    c.handle_timeout(at, &mut fx);
    let fatal = fx.iter().position(is_fatal);
    let done = fx.iter().position(is_done);
    assert!(fatal.is_some() && done.is_some() && fatal < done, "{fx:?}");
    assert!(c.finished());
}

//! The node state machine on its own (no sockets, no processes): fences across local ranks
//! and children, the KVS and its cache, exit classification — and random event sequences
//! that must never panic.

use libi::job::{
    AppSpec, JobCommon, LauncherKind, LauncherSpec, NodePlan, NodeSetup, RankEnd, RankSlot,
};
use libi::msg::{codec_with_max, KvsTop, Msg, ProcNode};
use libi_node::proto::node::{Effect, NodeCore, ProcEnd, Timer};
use proptest::prelude::*;
use std::collections::HashMap;

/// A node holding `local` ranks, with children holding theirs, in a job with one more rank
/// elsewhere in the tree (so the node is not the fence root; see [`whole_job`]).
fn setup(local: &[u32], children: &[&[u32]], push_max: u64) -> NodeSetup {
    let mut s = whole_job(local, children, push_max);
    s.job.size += 1;
    s
}

/// A node whose subtree holds every rank of the job: the root, or a lone NLA.
fn whole_job(local: &[u32], children: &[&[u32]], push_max: u64) -> NodeSetup {
    let plan = |node: u32, ranks: &[u32]| NodePlan {
        node,
        host: format!("h{node}"),
        ranks: ranks.iter().map(|&r| RankSlot { rank: r, app: 0 }).collect(),
        children: vec![],
    };
    let mut me = plan(1, local);
    me.children = children.iter().enumerate().map(|(i, r)| plan(2 + i as u32, r)).collect();
    let size = (local.len() + children.iter().map(|c| c.len()).sum::<usize>()) as u32;
    NodeSetup {
        job: JobCommon {
            size,
            universe_size: size as i32,
            kvsname: "kvs".into(),
            preput: vec![("PMI_process_mapping".into(), "(vector,(0,1,2))".into())],
            apps: vec![AppSpec {
                exe: "x".into(),
                args: vec![],
                nprocs: size,
                env: vec![],
                wdir: None,
                agent_env: false,
                raw_env: Vec::new(),
            }],
            launcher: LauncherSpec::new(LauncherKind::Fork, "/x"),
            kill_grace_ms: 10,
            launch_timeout_ms: 10,
            launch_batch: None,
            kvs_push_max: push_max,
            kvs_max: 1 << 30,
            report: true,
            pmgr: None,
            verbose: false,
            binding: Default::default(),
            spawned_by: None,
            singleton: None,
            each_end: false,
            staged: Vec::new(),
            gpus: Default::default(),
            pmix: None,
        },
        plan: me,
    }
}

fn rank_lines(core: &mut NodeCore, local: usize, lines: &str) -> Vec<Effect> {
    let mut fx = Vec::new();
    core.rank_data(local, lines.as_bytes(), &mut fx);
    fx
}

fn replies(fx: &[Effect], local: usize) -> Vec<String> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::ToRank(l, b) if *l == local => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        })
        .collect()
}

fn to_parent(fx: &[Effect]) -> Vec<&Msg> {
    fx.iter().filter_map(|e| if let Effect::ToParent(m) = e { Some(m) } else { None }).collect()
}

const INIT: &str = "cmd=init pmi_version=1 pmi_subversion=1\n";

#[test]
fn fence_waits_for_every_local_rank_and_child() {
    let mut core = NodeCore::new(setup(&[0, 1], &[&[2]], 1 << 20), false, false);
    rank_lines(&mut core, 0, INIT);
    rank_lines(&mut core, 1, INIT);
    let fx = rank_lines(&mut core, 0, "cmd=put kvsname=kvs key=a value=1\ncmd=barrier_in\n");
    assert!(to_parent(&fx).is_empty(), "one rank in: no FenceIn yet");
    let fx = rank_lines(&mut core, 1, "cmd=barrier_in\n");
    assert!(to_parent(&fx).is_empty(), "child not in yet");
    let mut fx = Vec::new();
    let top = KvsTop { rank: 2, bytes: 2 };
    core.child_msg(
        0,
        Msg::FenceIn { epoch: 1, pairs: vec![("c".into(), "3".into())], top },
        &mut fx,
    );
    let up = to_parent(&fx);
    assert_eq!(up.len(), 1, "exactly one aggregated message: {fx:?}");
    match up[0] {
        Msg::FenceIn { epoch: 1, pairs, top } => {
            assert_eq!(*top, KvsTop { rank: 0, bytes: 2 }, "the biggest contributor, lowest rank");
            let mut keys: Vec<&str> = pairs.iter().map(|(k, _)| &**k).collect();
            keys.sort();
            assert_eq!(keys, vec!["a", "c"]);
        }
        other => panic!("{other:?}"),
    }
    // release: both local ranks get barrier_out, the child gets the release
    let mut fx = Vec::new();
    let out = Msg::FenceOut {
        epoch: 1,
        pushed: true,
        pairs: vec![("z".into(), "9".into())],
        stale: vec![],
    };
    core.parent_msg(out, &mut fx);
    assert_eq!(replies(&fx, 0), vec!["cmd=barrier_out rc=0\n"]);
    assert_eq!(replies(&fx, 1), vec!["cmd=barrier_out rc=0\n"]);
    assert!(fx.iter().any(|e| matches!(e, Effect::ToChildren(Msg::FenceOut { epoch: 1, .. }))));
    let fx = rank_lines(&mut core, 1, "cmd=get kvsname=kvs key=z\n");
    assert_eq!(replies(&fx, 1), vec!["cmd=get_result rc=0 msg=success value=9\n"]);
    let fx = rank_lines(&mut core, 1, "cmd=get kvsname=kvs key=nope\n");
    assert!(
        replies(&fx, 1)[0].starts_with("cmd=get_result rc=-1"),
        "pushed fence: a miss is final"
    );
}

#[test]
fn lazy_get_climbs_once_and_is_cached() {
    let mut core = NodeCore::new(setup(&[0, 1], &[], 0), false, true);
    for l in 0..2 {
        rank_lines(&mut core, l, INIT);
        rank_lines(&mut core, l, "cmd=barrier_in\n");
    }
    let mut fx = Vec::new();
    core.parent_msg(
        Msg::FenceOut { epoch: 1, pushed: false, pairs: vec![], stale: vec![] },
        &mut fx,
    );
    // two ranks miss the same key: one Get goes up
    let mut fx = rank_lines(&mut core, 0, "cmd=get kvsname=kvs key=far\n");
    fx.extend(rank_lines(&mut core, 1, "cmd=get kvsname=kvs key=far\n"));
    let ups: Vec<&Msg> = to_parent(&fx);
    assert_eq!(ups, vec![&Msg::Get { key: "far".into() }]);
    let mut fx = Vec::new();
    core.parent_msg(Msg::GetResult { key: "far".into(), value: Some("v".into()) }, &mut fx);
    assert_eq!(replies(&fx, 0), vec!["cmd=get_result rc=0 msg=success value=v\n"]);
    assert_eq!(replies(&fx, 1), vec!["cmd=get_result rc=0 msg=success value=v\n"]);
    // now cached: no message up
    let fx = rank_lines(&mut core, 0, "cmd=get kvsname=kvs key=far\n");
    assert!(to_parent(&fx).is_empty());
    assert_eq!(core.counters().cache_hits, 1);
    assert_eq!(core.counters().gets_up, 1);
    // an overwrite elsewhere makes the cached copy stale at the next fence
    for l in 0..2 {
        rank_lines(&mut core, l, "cmd=barrier_in\n");
    }
    let mut fx = Vec::new();
    let out = Msg::FenceOut { epoch: 2, pushed: false, pairs: vec![], stale: vec!["far".into()] };
    core.parent_msg(out, &mut fx);
    let fx = rank_lines(&mut core, 0, "cmd=get kvsname=kvs key=far\n");
    assert_eq!(to_parent(&fx), vec![&Msg::Get { key: "far".into() }]);
}

/// An NLA whose subtree holds every rank of the job (a one-node job) is the fence root: its
/// fences are released there, with nothing sent up, whether they may be pushed or not; its
/// own ranks' gets are answered from its KVS, a miss at once; a child gets the release with
/// the pairs put here.
#[test]
fn a_node_holding_every_rank_releases_its_own_fences() {
    for push_max in [1 << 20, 0] {
        let mut core = NodeCore::new(whole_job(&[0, 1], &[], push_max), false, false);
        for l in 0..2 {
            rank_lines(&mut core, l, INIT);
        }
        let mut fx =
            rank_lines(&mut core, 0, "cmd=put kvsname=kvs key=a value=1\ncmd=barrier_in\n");
        fx.extend(rank_lines(&mut core, 1, "cmd=put kvsname=kvs key=b value=2\ncmd=barrier_in\n"));
        assert!(to_parent(&fx).is_empty(), "nothing goes up: {fx:?}");
        for l in 0..2 {
            assert_eq!(replies(&fx, l).last().map(String::as_str), Some("cmd=barrier_out rc=0\n"));
        }
        let mut fx = rank_lines(&mut core, 0, "cmd=get kvsname=kvs key=b\n");
        fx.extend(rank_lines(&mut core, 1, "cmd=get kvsname=kvs key=nope\n"));
        assert!(to_parent(&fx).is_empty(), "no get climbs: {fx:?}");
        assert_eq!(replies(&fx, 0), vec!["cmd=get_result rc=0 msg=success value=2\n"]);
        assert!(replies(&fx, 1)[0].starts_with("cmd=get_result rc=-1"), "{fx:?}");
        // A second epoch works the same; a repeated put replaces the value.
        let mut fx =
            rank_lines(&mut core, 1, "cmd=put kvsname=kvs key=a value=3\ncmd=barrier_in\n");
        fx.extend(rank_lines(&mut core, 0, "cmd=barrier_in\n"));
        assert!(to_parent(&fx).is_empty(), "{fx:?}");
        let fx = rank_lines(&mut core, 0, "cmd=get kvsname=kvs key=a\n");
        assert_eq!(replies(&fx, 0), vec!["cmd=get_result rc=0 msg=success value=3\n"]);
        assert_eq!(core.counters().fences, 2);
    }
    // With a child: its fence joins, and the release it gets carries the pairs put here.
    let mut core = NodeCore::new(whole_job(&[0], &[&[1]], 1 << 20), false, false);
    rank_lines(&mut core, 0, INIT);
    let mut fx = rank_lines(&mut core, 0, "cmd=put kvsname=kvs key=a value=1\ncmd=barrier_in\n");
    let top = KvsTop { rank: 1, bytes: 2 };
    let pairs = vec![("c".into(), "3".into())];
    core.child_msg(0, Msg::FenceIn { epoch: 1, pairs, top }, &mut fx);
    assert!(to_parent(&fx).is_empty(), "nothing goes up: {fx:?}");
    assert_eq!(replies(&fx, 0).last().map(String::as_str), Some("cmd=barrier_out rc=0\n"));
    let down: Vec<&Msg> = fx
        .iter()
        .filter_map(|e| if let Effect::ToChildren(m) = e { Some(m) } else { None })
        .collect();
    match down.as_slice() {
        [Msg::FenceOut { epoch: 1, pushed: true, pairs, .. }] => {
            let mut keys: Vec<&str> = pairs.iter().map(|(k, _)| &**k).collect();
            keys.sort();
            assert_eq!(keys, vec!["a", "c"]);
        }
        other => panic!("{other:?}"),
    }
    let mut fx = Vec::new();
    core.child_msg(0, Msg::Get { key: "nope".into() }, &mut fx);
    assert!(to_parent(&fx).is_empty(), "{fx:?}");
    assert!(fx.iter().any(|e| matches!(e, Effect::ToChild(0, Msg::GetResult { value: None, .. }))));
}

#[test]
fn exits_are_classified() {
    let mut core = NodeCore::new(setup(&[0, 1, 2], &[], 1 << 20), false, false);
    rank_lines(&mut core, 0, INIT);
    rank_lines(&mut core, 1, INIT);
    rank_lines(&mut core, 1, "cmd=finalize\n");
    let mut fx = Vec::new();
    core.rank_ended(0, ProcEnd::Exited(0), &mut fx);
    core.rank_ended(1, ProcEnd::Exited(0), &mut fx);
    core.rank_ended(2, ProcEnd::Signaled(11), &mut fx);
    let ends: Vec<RankEnd> = to_parent(&fx)
        .into_iter()
        .filter_map(|m| if let Msg::RankEnded { end, .. } = m { Some(end.clone()) } else { None })
        .collect();
    // Failures one by one, at once; the clean end counted and reported when the node is done.
    assert_eq!(
        ends,
        vec![RankEnd::Exited { code: 0, clean_pmi: false }, RankEnd::Signaled { signal: 11 }]
    );
    assert_eq!(to_parent(&fx).last(), Some(&&Msg::RanksDone { ends: vec![(1, 1, 0)] }));
    assert!(core.finished());
}

/// Clean ends, and ends by the teardown's signals, travel up as counts: one message per
/// subtree when it is done, whatever its number of ranks; a child's counts are merged.
/// With `each_end` (`-print-all-exitcodes`) every end goes up on its own.
#[test]
fn rank_ends_are_counted_per_subtree() {
    let mut core = NodeCore::new(setup(&[0, 1, 2], &[&[3, 4]], 1 << 20), false, false);
    let mut fx = Vec::new();
    for l in 0..3 {
        rank_lines(&mut core, l, INIT);
        rank_lines(&mut core, l, "cmd=finalize\n");
    }
    core.rank_ended(0, ProcEnd::Exited(0), &mut fx);
    core.rank_ended(1, ProcEnd::Exited(0), &mut fx);
    assert!(to_parent(&fx).is_empty(), "nothing while ranks are left: {fx:?}");
    core.parent_msg(Msg::Kill, &mut fx);
    fx.clear();
    core.rank_ended(2, ProcEnd::Signaled(15), &mut fx);
    assert!(to_parent(&fx).is_empty(), "the child's ranks are left: {fx:?}");
    core.child_msg(0, Msg::RanksDone { ends: vec![(2, 0, 2)] }, &mut fx);
    assert_eq!(to_parent(&fx), vec![&Msg::RanksDone { ends: vec![(2, 0, 2), (1, 2, 1)] }]);
    assert_eq!(core.ranks_left(), 0);

    let mut s = setup(&[0, 1], &[], 1 << 20);
    s.job.each_end = true;
    let mut core = NodeCore::new(s, false, false);
    let mut fx = Vec::new();
    for l in 0..2 {
        rank_lines(&mut core, l, INIT);
        rank_lines(&mut core, l, "cmd=finalize\n");
        core.rank_ended(l, ProcEnd::Exited(0), &mut fx);
    }
    let ended = to_parent(&fx).iter().filter(|m| matches!(m, Msg::RankEnded { .. })).count();
    assert_eq!(ended, 2);
}

/// The core's time, in milliseconds (as the driver tells it).
fn at_ms(core: &mut NodeCore, ms: u64) {
    core.set_now(ms as f64 / 1000.0);
}

/// A rank that closes its PMI connection between init and finalize gets the PMI-close grace
/// (a timer of the core); if it still runs when the grace is over, the job fails naming it.
/// Closing before init or after finalize, or exiting within the grace, is judged by the exit
/// alone.
#[test]
fn pmi_closed_half_way() {
    let mut core = NodeCore::new(setup(&[0, 1, 2, 3], &[], 1 << 20), false, false);
    at_ms(&mut core, 0);
    for local in 0..3 {
        rank_lines(&mut core, local, INIT);
    }
    rank_lines(&mut core, 1, "cmd=finalize\n");
    let mut fx = Vec::new();
    core.rank_eof(1, &mut fx); // after finalize
    core.rank_eof(3, &mut fx); // never initialized
    assert!(fx.is_empty() && core.poll_timeout().is_none(), "{fx:?}");
    // rank 2 crashes: EOF, then its exit within the grace
    core.rank_eof(2, &mut fx);
    assert!(fx.is_empty(), "{fx:?}");
    assert_eq!(core.timers().collect::<Vec<_>>(), vec![(0.25, &Timer::PmiClose(2))]);
    at_ms(&mut core, 100);
    core.rank_ended(2, ProcEnd::Signaled(11), &mut fx);
    fx.clear();
    // rank 0 closes and runs on
    core.rank_eof(0, &mut fx);
    assert_eq!(core.poll_timeout(), Some(0.25));
    at_ms(&mut core, 300);
    core.handle_timeout(0.3, &mut fx);
    assert!(fx.is_empty(), "an exit came for rank 2: judged by it: {fx:?}");
    assert_eq!(core.poll_timeout(), Some(0.35));
    core.handle_timeout(0.34, &mut fx);
    assert!(fx.is_empty(), "not due yet: {fx:?}");
    core.handle_timeout(0.35, &mut fx);
    match to_parent(&fx).as_slice() {
        [Msg::Fatal { host, message, status: 1 }] => {
            assert_eq!(host, "h1");
            assert_eq!(message, "rank 0 on h1 closed its PMI connection without finalize");
        }
        other => panic!("{other:?}"),
    }
    // once the job fails, no more closes are reported
    fx.clear();
    let mut core2 = NodeCore::new(setup(&[0], &[], 1 << 20), false, false);
    rank_lines(&mut core2, 0, INIT);
    core2.kill(&mut fx);
    fx.clear();
    core2.rank_eof(0, &mut fx);
    assert!(!core2.timers().any(|(_, t)| *t == Timer::PmiClose(0)));
    assert!(fx.is_empty(), "{fx:?}");
}

/// The teardown: SIGTERM at once (`KillRanks`), SIGKILL when the job's kill grace is over,
/// only if a rank is left.
#[test]
fn kill_escalates_after_the_grace() {
    let mut s = setup(&[0, 1], &[], 1 << 20);
    s.job.kill_grace_ms = 1000;
    let mut core = NodeCore::new(s, false, false);
    at_ms(&mut core, 0);
    let mut fx = Vec::new();
    core.parent_msg(Msg::Kill, &mut fx);
    assert!(fx.contains(&Effect::KillRanks), "{fx:?}");
    assert_eq!(core.poll_timeout(), Some(1.0));
    core.parent_msg(Msg::Kill, &mut fx);
    assert_eq!(core.timers().count(), 1, "a second Kill sets no second timer");
    fx.clear();
    at_ms(&mut core, 500);
    core.rank_ended(0, ProcEnd::Signaled(15), &mut fx);
    fx.clear();
    core.handle_timeout(1.0, &mut fx);
    assert_eq!(fx, vec![Effect::SignalRanks(libc::SIGKILL)]);
    // every rank gone by then: no SIGKILL
    let mut core = NodeCore::new(setup(&[0], &[], 1 << 20), false, false);
    at_ms(&mut core, 0);
    let mut fx = Vec::new();
    core.parent_msg(Msg::Kill, &mut fx);
    core.rank_ended(0, ProcEnd::Signaled(15), &mut fx);
    fx.clear();
    core.handle_timeout(10.0, &mut fx);
    assert!(fx.is_empty(), "{fx:?}");
}

/// A lost parent connection tears the subtree down once, saying why while ranks run; an
/// unreadable parent is told why first.
#[test]
fn lost_or_unreadable_parent_tears_down_once() {
    let mut core = NodeCore::new(setup(&[0, 1], &[&[2]], 1 << 20), false, false);
    at_ms(&mut core, 0);
    let mut fx = Vec::new();
    core.parent_unreadable("bad frame", &mut fx);
    assert!(core.parent_is_lost());
    match to_parent(&fx).first() {
        Some(Msg::Fatal { message, status: 255, .. }) => {
            assert_eq!(message, "the NLA on h1 cannot read its parent's messages: bad frame")
        }
        other => panic!("no Fatal first: {other:?} in {fx:?}"),
    }
    let kills = fx.iter().filter(|e| **e == Effect::KillRanks).count();
    assert_eq!(kills, 1, "{fx:?}");
    assert!(fx.contains(&Effect::ToChildren(Msg::Kill)), "{fx:?}");
    assert!(fx.iter().any(
        |e| matches!(e, Effect::Warn(w) if w.contains("lost the parent connection (bad frame)"))
    ));
    fx.clear();
    core.parent_lost("connection closed", &mut fx);
    core.parent_unreadable("again", &mut fx);
    assert!(fx.is_empty(), "once: {fx:?}");
}

/// A child's output is acknowledged in batches of a quarter of the output window.
#[test]
fn child_output_acknowledged_in_quarter_windows() {
    let mut core = NodeCore::new(setup(&[0], &[&[1], &[2]], 1 << 20), false, false);
    let q = libi::msg::OUTPUT_WINDOW / 4;
    let mut fx = Vec::new();
    core.child_output_passed(1, q - 1, &mut fx);
    assert!(fx.is_empty(), "{fx:?}");
    core.child_output_passed(0, q, &mut fx);
    core.child_output_passed(1, 2, &mut fx);
    core.child_output_passed(9, q, &mut fx);
    let acks = vec![
        Effect::ToChild(0, Msg::OutputAck { bytes: q }),
        Effect::ToChild(1, Msg::OutputAck { bytes: q + 1 }),
    ];
    assert_eq!(fx, acks);
}

/// Once every rank of the subtree ended, an open child connection is waited for
/// `limits::CHILDREN_EXIT`, then given up on: the node is finished.
#[test]
fn every_rank_ended_children_get_a_bounded_wait() {
    let mut core = NodeCore::new(setup(&[0], &[&[1]], 1 << 20), false, false);
    at_ms(&mut core, 0);
    let mut fx = Vec::new();
    rank_lines(&mut core, 0, INIT);
    rank_lines(&mut core, 0, "cmd=finalize\n");
    core.child_msg(0, Msg::RanksDone { ends: vec![(2, 1, 0)] }, &mut fx);
    at_ms(&mut core, 2000);
    core.rank_ended(0, ProcEnd::Exited(0), &mut fx);
    assert_eq!(core.ranks_left(), 0);
    assert!(!core.finished(), "the child's connection is open");
    assert_eq!(core.poll_timeout(), Some(7.0));
    core.handle_timeout(7.0, &mut fx);
    assert!(core.finished(), "given up on after the wait");
}

#[test]
fn lost_child_is_reported_with_its_ranks() {
    let mut core = NodeCore::new(setup(&[0], &[&[1, 2], &[3]], 1 << 20), false, false);
    let mut fx = Vec::new();
    core.child_msg(
        0,
        Msg::RankEnded {
            rank: 1,
            host: "h2".into(),
            end: RankEnd::Exited { code: 0, clean_pmi: true },
        },
        &mut fx,
    );
    core.child_gone(0, "connection closed", &mut fx);
    assert!(
        fx.iter().any(|e| matches!(e, Effect::ToParent(Msg::SubtreeLost { ranks: 1, .. }))),
        "{fx:?}"
    );
    assert_eq!(core.ranks_left(), 2);
}

/// A spawn (and a name-service request) goes up to the front end with an id; the answer
/// comes back to the rank in its protocol. A child's request is relayed the same way.
#[test]
fn spawn_and_names_go_up_and_answers_come_back() {
    let mut core = NodeCore::new(setup(&[0], &[&[1]], 1 << 20), false, false);
    rank_lines(&mut core, 0, INIT);
    let block = "mcmd=spawn\nnprocs=2\nexecname=child\ntotspawns=1\nspawnssofar=1\nargcnt=1\n\
                 arg1=x\npreput_num=1\npreput_key_0=PARENT_ROOT_PORT_NAME\npreput_val_0=p\n\
                 info_num=1\ninfo_key_0=host\ninfo_val_0=h9\nendcmd\n";
    let fx = rank_lines(&mut core, 0, block);
    let up = to_parent(&fx);
    let Some(Msg::Spawn { req, spawn }) = up.first() else { panic!("no spawn up: {fx:?}") };
    let req = *req;
    assert_eq!((spawn.rank, spawn.host.as_str()), (0, "h1"));
    assert_eq!(spawn.cmds.len(), 1);
    let c = &spawn.cmds[0];
    assert_eq!((c.exe.as_str(), c.nprocs, c.args.clone()), ("child", 2, vec!["x".to_string()]));
    assert_eq!(c.preput, vec![("PARENT_ROOT_PORT_NAME".to_string(), "p".to_string())]);
    assert_eq!(c.info, vec![("host".to_string(), "h9".to_string())]);
    assert!(replies(&fx, 0).is_empty(), "answered before the front end did");
    let mut fx = Vec::new();
    core.parent_msg(Msg::SpawnResult { req, rc: 0, jobid: Some("kvs_1".into()) }, &mut fx);
    assert_eq!(replies(&fx, 0), vec!["cmd=spawn_result rc=0\n"]);
    // a stale or unknown answer is only a warning
    let mut fx = Vec::new();
    core.parent_msg(Msg::SpawnResult { req, rc: 0, jobid: None }, &mut fx);
    assert!(matches!(fx.as_slice(), [Effect::Warn(_)]), "{fx:?}");
    // name service from a rank, then relayed for a child
    let fx = rank_lines(&mut core, 0, "cmd=lookup_name service=s\n");
    let Some(Msg::Name { req, .. }) = to_parent(&fx).first().copied().cloned() else {
        panic!("no name request up: {fx:?}")
    };
    let mut fx = Vec::new();
    core.parent_msg(Msg::NameResult { req, ok: true, port: Some("tcp://x".into()) }, &mut fx);
    assert!(replies(&fx, 0)[0].contains("port=tcp://x"), "{fx:?}");
    let mut fx = Vec::new();
    let spawn =
        Box::new(libi::job::SpawnRequest { rank: 1, app: 0, host: "h2".into(), cmds: vec![] });
    core.child_msg(0, Msg::Spawn { req: 77 << 32, spawn }, &mut fx);
    assert!(matches!(to_parent(&fx).as_slice(), [Msg::Spawn { req, .. }] if *req == 77 << 32));
    let mut fx = Vec::new();
    core.parent_msg(Msg::SpawnResult { req: 77 << 32, rc: -1, jobid: None }, &mut fx);
    assert!(
        matches!(fx.as_slice(), [Effect::ToChild(0, Msg::SpawnResult { rc: -1, .. })]),
        "{fx:?}"
    );
    // a malformed block is answered at once and does not fail the job
    let fx = rank_lines(&mut core, 0, "mcmd=spawn\nnprocs=x\ntotspawns=1\nspawnssofar=1\nendcmd\n");
    assert_eq!(replies(&fx, 0), vec!["cmd=spawn_result rc=-1 msg=malformed_spawn\n"]);
    assert!(!to_parent(&fx).iter().any(|m| matches!(m, Msg::Fatal { .. })), "{fx:?}");
}

/// A value of `len` bytes that says which key it belongs to.
fn value_for(key: &str, len: usize) -> String {
    let mut v = format!("{key}:");
    while v.len() < len {
        v.push((b'a' + (v.len() % 26) as u8) as char);
    }
    v.truncate(len);
    v
}

/// Every tree message among the effects fits in a frame of `max` bytes.
fn assert_frames_fit(fx: &[Effect], max: usize) {
    let mut c = codec_with_max(max);
    for e in fx {
        let m = match e {
            Effect::ToParent(m) | Effect::ToChild(_, m) | Effect::ToChildren(m) => m,
            _ => continue,
        };
        let mut buf = bytes::BytesMut::new();
        if let Err(err) = c.encode_ref(m, &mut buf) {
            panic!("a tree message does not fit in {max} bytes: {err}");
        }
    }
}

/// The pairs of every fence message up, in order; checks that the FenceIn comes last.
fn fence_up(fx: &[Effect]) -> (Vec<(libi::msg::Key, libi::msg::Value)>, usize, bool) {
    let (mut pairs, mut parts, mut closed) = (Vec::new(), 0, false);
    for m in to_parent(fx) {
        match m {
            Msg::FenceInPart { pairs: p, .. } => {
                assert!(!closed, "a part after the FenceIn");
                parts += 1;
                pairs.extend(p.iter().cloned());
            }
            Msg::FenceIn { pairs: p, .. } => {
                assert!(!closed, "two FenceIns");
                closed = true;
                pairs.extend(p.iter().cloned());
            }
            _ => {}
        }
    }
    (pairs, parts, closed)
}

const CHUNK: usize = 64 << 10;
/// A frame holds a chunk of pairs plus the message's own few bytes.
const FRAME: usize = CHUNK + 256;

/// A fence 64 times bigger than the frame limit goes up in bounded parts, streamed while the
/// ranks put (before they enter the fence), each pair once; a child's parts are passed on as
/// they come; the closing FenceIn carries the rest.
#[test]
fn big_fence_goes_up_in_bounded_parts() {
    let mut core = NodeCore::new(setup(&[0, 1], &[&[2]], 1 << 20), false, false);
    core.set_fence_chunk(CHUNK);
    let mut want = HashMap::new();
    let mut fx = Vec::new();
    for local in 0..2 {
        fx.extend(rank_lines(&mut core, local, INIT));
        for i in 0..2000 {
            let key = format!("r{local}k{i}");
            let value = value_for(&key, 1000);
            let line = format!("cmd=put kvsname=kvs key={key} value={value}\n");
            fx.extend(rank_lines(&mut core, local, &line));
            want.insert(key, value);
        }
    }
    let (_, parts, closed) = fence_up(&fx);
    assert!(parts >= 50, "the ranks' pairs streamed up before the fence: {parts} parts");
    assert!(!closed);
    // the child's big fence: parts of its own, then its FenceIn
    let top = KvsTop { rank: 2, bytes: 1_000_000 };
    for p in 0..20 {
        let pairs: Vec<(libi::msg::Key, libi::msg::Value)> = (0..50)
            .map(|i| {
                let key = format!("c{p}-{i}");
                let value = value_for(&key, 1000);
                want.insert(key.clone(), value.clone());
                (key.into(), value.into())
            })
            .collect();
        let mut cfx = Vec::new();
        core.child_msg(0, Msg::FenceInPart { epoch: 1, pairs: pairs.clone(), top }, &mut cfx);
        let passed = matches!(to_parent(&cfx).as_slice(),
            [Msg::FenceInPart { epoch: 1, pairs: p, top }] if *p == pairs && top.rank == 0);
        assert!(passed, "passed on as it came, with this subtree's biggest contributor");
        fx.extend(cfx);
    }
    fx.extend(rank_lines(&mut core, 0, "cmd=barrier_in\n"));
    fx.extend(rank_lines(&mut core, 1, "cmd=barrier_in\n"));
    let last = Msg::FenceIn { epoch: 1, pairs: vec![("c-last".into(), "v".into())], top };
    want.insert("c-last".into(), "v".into());
    core.child_msg(0, last, &mut fx);
    assert_frames_fit(&fx, FRAME);
    let (pairs, _, closed) = fence_up(&fx);
    assert!(closed, "the fence closed");
    assert_eq!(pairs.len(), want.len(), "every pair once");
    let got: HashMap<String, String> = pairs
        .into_iter()
        .map(|(k, v)| (k.to_string(), String::from_utf8_lossy(&v).into_owned()))
        .collect();
    assert_eq!(got, want);
    assert_eq!(core.kvs().len(), want.len() + 1, "stored once (plus the preput pair)");
    match to_parent(&fx).last() {
        Some(Msg::FenceIn { top, .. }) => {
            assert_eq!(top.rank, 0, "rank 0 put ~2 MB, more than the child's 1 MB: {top:?}")
        }
        other => panic!("{other:?}"),
    }
}

/// The root releases a big pushed fence in bounded parts; a node below stores the parts
/// as they come, passes them on and answers gets locally.
#[test]
fn big_release_goes_down_in_bounded_parts() {
    let root_setup = whole_job(&[], &[&[0], &[1]], 1 << 30);
    let mut root = NodeCore::new(root_setup, true, false);
    root.set_fence_chunk(CHUNK);
    let mut want = HashMap::new();
    let mut fx = Vec::new();
    for child in 0..2 {
        for p in 0..10 {
            let pairs: Vec<(libi::msg::Key, libi::msg::Value)> = (0..100)
                .map(|i| {
                    let key = format!("n{child}p{p}k{i}");
                    let value = value_for(&key, 900);
                    want.insert(key.clone(), value.clone());
                    (key.into(), value.into())
                })
                .collect();
            let top = KvsTop { rank: child as u32, bytes: 1 };
            let m = if p == 9 {
                Msg::FenceIn { epoch: 1, pairs, top }
            } else {
                Msg::FenceInPart { epoch: 1, pairs, top }
            };
            root.child_msg(child, m, &mut fx);
        }
    }
    assert_frames_fit(&fx, FRAME);
    let down: Vec<Msg> = fx
        .into_iter()
        .filter_map(|e| if let Effect::ToChildren(m) = e { Some(m) } else { None })
        .collect();
    assert!(down.len() > 20, "{} messages", down.len());
    assert!(matches!(down.last(), Some(Msg::FenceOut { epoch: 1, pushed: true, .. })));
    // a node below: every part stored and passed on, ranks released by the FenceOut
    let mut node = NodeCore::new(setup(&[0, 1], &[&[2]], 1 << 30), false, false);
    node.set_fence_chunk(CHUNK);
    for l in 0..2 {
        rank_lines(&mut node, l, INIT);
        rank_lines(&mut node, l, "cmd=barrier_in\n");
    }
    node.child_msg(
        0,
        Msg::FenceIn { epoch: 1, pairs: vec![], top: KvsTop::default() },
        &mut Vec::new(),
    );
    let mut fx = Vec::new();
    for m in down {
        node.parent_msg(m, &mut fx);
    }
    assert_eq!(replies(&fx, 0), vec!["cmd=barrier_out rc=0\n"]);
    let passed = fx.iter().filter(|e| matches!(e, Effect::ToChildren(_))).count();
    assert!(passed > 20);
    for (k, v) in want.iter().take(50) {
        let fx = rank_lines(&mut node, 1, &format!("cmd=get kvsname=kvs key={k}\n"));
        assert_eq!(replies(&fx, 1), vec![format!("cmd=get_result rc=0 msg=success value={v}\n")]);
        assert!(to_parent(&fx).is_empty(), "answered locally");
    }
}

/// A big unpushed fence that overwrote many keys: the stale keys go down in bounded parts.
#[test]
fn many_stale_keys_go_down_in_bounded_parts() {
    let mut root = NodeCore::new(whole_job(&[], &[&[0]], 0), true, false);
    root.set_fence_chunk(4096);
    let pairs: Vec<(libi::msg::Key, libi::msg::Value)> =
        (0..3000).map(|i| (format!("key{i:05}").into(), "v".into())).collect();
    let top = KvsTop { rank: 0, bytes: 1 };
    let mut fx = Vec::new();
    root.child_msg(0, Msg::FenceIn { epoch: 1, pairs: pairs.clone(), top }, &mut fx);
    let mut fx = Vec::new();
    root.child_msg(0, Msg::FenceIn { epoch: 2, pairs, top }, &mut fx);
    assert_frames_fit(&fx, 4096 + 256);
    let mut stale = Vec::new();
    for e in &fx {
        match e {
            Effect::ToChildren(Msg::FenceOutPart { stale: s, pairs, .. })
            | Effect::ToChildren(Msg::FenceOut { stale: s, pairs, pushed: false, .. }) => {
                assert!(pairs.is_empty());
                stale.extend(s.iter().cloned());
            }
            other => panic!("{other:?}"),
        }
    }
    stale.sort();
    assert_eq!(stale.len(), 3000);
    stale.dedup();
    assert_eq!(stale.len(), 3000, "each stale key once");
}

/// A rank that puts one key twice: both puts succeed, the key is stored and sent up once,
/// with the last value (what Hydra does: `put_result rc=0` twice, `get` returns the last).
#[test]
fn repeated_put_is_stored_once_last_value_wins() {
    let mut core = NodeCore::new(setup(&[0, 1], &[], 1 << 20), false, false);
    rank_lines(&mut core, 0, INIT);
    rank_lines(&mut core, 1, INIT);
    let mut fx = rank_lines(
        &mut core,
        0,
        "cmd=put kvsname=kvs key=a value=1\ncmd=put kvsname=kvs key=a value=2\n",
    );
    assert_eq!(replies(&fx, 0), vec!["cmd=put_result rc=0 msg=success\n"; 2]);
    let before = core.kvs().len();
    fx.extend(rank_lines(&mut core, 0, "cmd=put kvsname=kvs key=a value=3\ncmd=barrier_in\n"));
    assert_eq!(core.kvs().len(), before, "stored once");
    fx.extend(rank_lines(&mut core, 1, "cmd=barrier_in\n"));
    let (pairs, parts, closed) = fence_up(&fx);
    assert!(closed);
    assert_eq!(parts, 0);
    assert_eq!(pairs, vec![("a".into(), "3".into())], "sent up once, last value");
    let fx = rank_lines(&mut core, 1, "cmd=get kvsname=kvs key=a\n");
    assert_eq!(replies(&fx, 1), vec!["cmd=get_result rc=0 msg=success value=3\n"]);
}

fn fatal(fx: &[Effect]) -> Option<(String, i32)> {
    to_parent(fx).into_iter().find_map(|m| match m {
        Msg::Fatal { message, status, .. } => Some((message.clone(), *status)),
        _ => None,
    })
}

/// A rank that puts more than the job's KVS limit fails the job, named, with the sizes.
#[test]
fn kvs_limit_names_the_rank() {
    let mut s = setup(&[4, 5], &[], 1 << 20);
    s.job.kvs_max = 10_000;
    let mut core = NodeCore::new(s, false, false);
    rank_lines(&mut core, 1, INIT);
    let mut fx = Vec::new();
    for i in 0..20 {
        let line = format!("cmd=put kvsname=kvs key=k{i} value={}\n", "x".repeat(600));
        fx.extend(rank_lines(&mut core, 1, &line));
    }
    let (message, status) = fatal(&fx).expect("the job fails");
    assert_eq!(status, 1);
    assert_eq!(
        message,
        "rank 5 on h1 put 10 KiB of KVS data; the job's limit is 9.8 KiB (--kvs-max)"
    );
    assert_eq!(to_parent(&fx).len(), 1, "one failure, nothing else: {fx:?}");
}

/// The root finds the job's total over the limit (each rank below it) and names the biggest
/// contributor its children reported.
#[test]
fn kvs_limit_total_names_the_biggest_contributor() {
    let mut s = whole_job(&[], &[&[0], &[1, 2]], 1 << 20);
    s.job.kvs_max = 3000;
    let mut root = NodeCore::new(s, true, false);
    let pairs = |n: &str| vec![(libi::msg::Key::from(n), libi::msg::Value::from("x".repeat(999)))];
    let mut fx = Vec::new();
    root.child_msg(
        0,
        Msg::FenceIn { epoch: 1, pairs: pairs("a"), top: KvsTop { rank: 0, bytes: 1000 } },
        &mut fx,
    );
    let part =
        Msg::FenceInPart { epoch: 1, pairs: pairs("b"), top: KvsTop { rank: 2, bytes: 1000 } };
    root.child_msg(1, part, &mut fx);
    assert!(fatal(&fx).is_none());
    let part = Msg::FenceInPart {
        epoch: 1,
        pairs: [pairs("c"), pairs("d")].concat(),
        top: KvsTop { rank: 2, bytes: 3000 },
    };
    root.child_msg(1, part, &mut fx);
    let (message, status) = fatal(&fx).expect("the job fails");
    assert_eq!(status, 1);
    assert_eq!(
        message,
        "the job's KVS data reached 3.9 KiB (rank 2 on h3 put the most: 2.9 KiB); \
         the job's limit is 2.9 KiB (--kvs-max)"
    );
}

fn fuzz_cases() -> u32 {
    std::env::var("LIBI_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(25_000) / 5
}

#[derive(Debug, Clone)]
enum Ev {
    Rank(usize, Vec<u8>),
    Parent(Msg),
    Child(usize, Msg),
    Ended(usize, i32),
    ChildGone(usize),
    /// EOF on a rank's PMI socket.
    Eof(usize),
    /// The grace after a close is over (does the rank run?).
    /// Every timer of the core fires.
    Timers,
}

fn soup() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b"cmd=init pmi_version=1 pmi_subversion=1\n".to_vec()),
        Just(b"cmd=barrier_in\n".to_vec()),
        Just(b"cmd=put kvsname=kvs key=k value=v\n".to_vec()),
        Just(b"cmd=get kvsname=kvs key=k\n".to_vec()),
        Just(b"cmd=finalize\n".to_vec()),
        Just(b"cmd=abort exitcode=3\n".to_vec()),
        Just(b"mcmd=spawn\nnprocs=1\n".to_vec()),
        Just(b"execname=a\ntotspawns=1\nspawnssofar=1\nendcmd\n".to_vec()),
        Just(b"cmd=publish_name service=s port=p\n".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..24),
    ];
    proptest::collection::vec(piece, 1..4).prop_map(|v| v.concat())
}

fn tree_msg() -> impl Strategy<Value = Msg> {
    prop_oneof![
        (0u64..4, any::<bool>()).prop_map(|(epoch, pushed)| Msg::FenceOut {
            epoch,
            pushed,
            pairs: vec![("k".into(), "v".into())],
            stale: vec!["k".into()]
        }),
        (0u64..4).prop_map(|epoch| Msg::FenceIn {
            epoch,
            pairs: vec![("c".into(), "1".into())],
            top: KvsTop { rank: 3, bytes: 2 }
        }),
        (0u64..4, 0u64..100).prop_map(|(epoch, bytes)| Msg::FenceInPart {
            epoch,
            pairs: vec![("c".into(), "1".into()), ("k".into(), "x".repeat(bytes as usize).into())],
            top: KvsTop { rank: 4, bytes }
        }),
        (0u64..4).prop_map(|epoch| Msg::FenceOutPart {
            epoch,
            pairs: vec![("p".into(), "1".into())],
            stale: vec!["k".into()]
        }),
        Just(Msg::Get { key: "k".into() }),
        Just(Msg::GetResult { key: "k".into(), value: Some("x".into()) }),
        Just(Msg::GetResult { key: "k".into(), value: None }),
        Just(Msg::Kill),
        Just(Msg::Signal { signal: 10 }),
        Just(Msg::Stdin { data: b"in".to_vec() }),
        (0u32..8).prop_map(|rank| Msg::RankEnded {
            rank,
            host: "h".into(),
            end: RankEnd::Signaled { signal: 9 }
        }),
        (0u32..4).prop_map(|ranks| Msg::SubtreeLost {
            host: "h".into(),
            ranks,
            message: "x".into()
        }),
        Just(Msg::Hello { node: 9, secret: "s".into(), host: "h".into(), pid: 1 }),
        (0u64..3, -1i32..1).prop_map(|(req, rc)| Msg::SpawnResult {
            req: (1 << 32) | req,
            rc,
            jobid: None
        }),
        (0u64..3).prop_map(|req| Msg::NameResult { req: (1 << 32) | req, ok: true, port: None }),
        (0u64..3).prop_map(|req| Msg::Spawn {
            req,
            spawn: Box::new(libi::job::SpawnRequest {
                rank: 0,
                app: 0,
                host: "h".into(),
                cmds: vec![]
            })
        }),
    ]
}

fn event() -> impl Strategy<Value = Ev> {
    prop_oneof![
        4 => ((0usize..4), soup()).prop_map(|(l, b)| Ev::Rank(l, b)),
        1 => tree_msg().prop_map(Ev::Parent),
        1 => ((0usize..3), tree_msg()).prop_map(|(c, m)| Ev::Child(c, m)),
        1 => ((0usize..4), -1i32..3).prop_map(|(l, c)| Ev::Ended(l, c)),
        1 => (0usize..3).prop_map(Ev::ChildGone),
        1 => (0usize..4).prop_map(Ev::Eof),
        1 => Just(Ev::Timers),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::with_cases(fuzz_cases()) })]

    /// Random event sequences (PMI bytes from ranks, tree messages from parent and children,
    /// exits, lost children; indices sometimes out of range) never panic, and every effect
    /// names a rank or child that exists.
    #[test]
    fn node_core_never_panics(events in proptest::collection::vec(event(), 1..40), root in any::<bool>()) {
        let shape: (&[u32], &[&[u32]]) = (&[0, 1, 2], &[&[3], &[4, 5]]);
        let mut s = if root { whole_job(shape.0, shape.1, 0) } else { setup(shape.0, shape.1, 1 << 20) };
        s.job.kvs_max = if root { 1 << 20 } else { 40 };
        let mut core = NodeCore::new(s, root, true);
        core.set_fence_chunk(if root { 1 << 20 } else { 16 });
        let before = core.ranks_left();
        for ev in events {
            let mut fx = Vec::new();
            match ev {
                Ev::Rank(l, b) => core.rank_data(l, &b, &mut fx),
                Ev::Parent(m) => core.parent_msg(m, &mut fx),
                Ev::Child(c, m) => core.child_msg(c, m, &mut fx),
                Ev::Ended(l, c) => core.rank_ended(l, ProcEnd::Exited(c), &mut fx),
                Ev::ChildGone(c) => core.child_gone(c, "gone", &mut fx),
                Ev::Eof(l) => core.rank_eof(l, &mut fx),
                Ev::Timers => core.handle_timeout(f64::INFINITY, &mut fx),
            }
            for e in &fx {
                match e {
                    Effect::ToRank(l, _) | Effect::CloseRank(l) => {
                        prop_assert!(*l < 3)
                    }
                    Effect::ToChild(c, _) => prop_assert!(*c < 2),
                    _ => {}
                }
            }
            prop_assert!(core.ranks_left() <= before);
        }
    }
}

/// Launch progress travels up once per subtree: a node reports its subtree up when it
/// started its ranks and every child reported (or was lost), counts merged.
#[test]
fn subtree_up_once_per_node() {
    let mut core = NodeCore::new(setup(&[0, 1], &[&[2], &[3, 4]], 1 << 20), false, false);
    let mut fx = Vec::new();
    core.child_msg(0, Msg::SubtreeUp { nodes: 1, ranks: 1 }, &mut fx);
    core.ranks_started(&mut fx);
    assert!(to_parent(&fx).is_empty(), "child 1 has not reported: {fx:?}");
    core.child_msg(1, Msg::SubtreeUp { nodes: 1, ranks: 2 }, &mut fx);
    assert_eq!(to_parent(&fx), vec![&Msg::SubtreeUp { nodes: 3, ranks: 5 }]);
    // a lost child counts as reported
    let mut core = NodeCore::new(setup(&[0], &[&[1]], 1 << 20), false, false);
    let mut fx = Vec::new();
    core.ranks_started(&mut fx);
    core.child_gone(0, "gone", &mut fx);
    assert!(to_parent(&fx).contains(&&Msg::SubtreeUp { nodes: 1, ranks: 1 }), "{fx:?}");
}

/// A process-table request goes down to every child; the node answers once, with its own
/// ranks' pids and every child's answer; a child lost before it answered is not waited for.
#[test]
fn proc_table_waits_for_children_then_answers_once() {
    let mut core = NodeCore::new(setup(&[0, 1], &[&[2], &[3]], 1 << 20), false, false);
    core.rank_pid(0, 100);
    core.rank_pid(1, 101);
    let mut fx = Vec::new();
    core.parent_msg(Msg::ProcTableReq { req: 7 }, &mut fx);
    assert!(fx.iter().any(|e| matches!(e, Effect::ToChildren(Msg::ProcTableReq { req: 7 }))));
    assert!(to_parent(&fx).is_empty(), "{fx:?}");
    let child = |node: u32, rank: u32, pid: i32| Msg::ProcTable {
        req: 7,
        nodes: vec![ProcNode { host: format!("h{node}"), ranks: vec![(rank, 0, pid)] }],
    };
    fx.clear();
    core.child_msg(0, child(2, 2, 200), &mut fx);
    // The same child twice counts once.
    core.child_msg(0, child(2, 2, 200), &mut fx);
    assert!(to_parent(&fx).is_empty(), "{fx:?}");
    core.child_gone(1, "connection closed", &mut fx);
    let tables: Vec<_> = to_parent(&fx)
        .into_iter()
        .filter_map(
            |m| if let Msg::ProcTable { req, nodes } = m { Some((*req, nodes)) } else { None },
        )
        .collect();
    assert_eq!(tables.len(), 1, "{fx:?}");
    let (req, nodes) = &tables[0];
    assert_eq!(*req, 7);
    assert_eq!(
        *nodes,
        &vec![
            ProcNode { host: "h1".into(), ranks: vec![(0, 0, 100), (1, 0, 101)] },
            ProcNode { host: "h2".into(), ranks: vec![(2, 0, 200)] },
        ]
    );
}

/// `PMI_hwloc_xmlfile` is this node's: never asked of the parent; a rank that asks while
/// the file is being written waits for it (PMI-1 `get` and PMI-2 `info-getjobattr` alike),
/// and without a file (none written, or the writing failed) it is told so at once.
#[test]
fn the_topology_file_is_answered_on_the_node_and_waited_for() {
    const GET: &str = "cmd=get kvsname=kvs key=PMI_hwloc_xmlfile\n";
    let v2 = |body: &str| format!("{:<6}{body}", body.len());
    let v2_init =
        "cmd=init pmi_version=2 pmi_subversion=0\n".to_owned() + &v2("cmd=fullinit;pmirank=1;");
    let ask_v2 = v2("cmd=info-getjobattr;key=PMI_hwloc_xmlfile;");
    // No file: a miss at once, on the node.
    let mut core = NodeCore::new(setup(&[0, 1], &[&[2]], 0), false, false);
    rank_lines(&mut core, 0, INIT);
    let fx = rank_lines(&mut core, 0, GET);
    assert!(to_parent(&fx).is_empty(), "{fx:?}");
    assert!(replies(&fx, 0)[0].starts_with("cmd=get_result rc=-1"), "{fx:?}");
    // Being written: both protocols wait, then get the path.
    core.hwloc_xmlfile_pending();
    let fx = rank_lines(&mut core, 0, GET);
    assert!(fx.is_empty(), "{fx:?}");
    rank_lines(&mut core, 1, &v2_init);
    let fx = rank_lines(&mut core, 1, &ask_v2);
    assert!(fx.is_empty(), "{fx:?}");
    let mut fx = Vec::new();
    core.set_hwloc_xmlfile(Some("/run/t.xml".into()), &mut fx);
    assert_eq!(replies(&fx, 0), ["cmd=get_result rc=0 msg=success value=/run/t.xml\n"]);
    let r1 = replies(&fx, 1);
    assert!(r1.len() == 1 && r1[0].contains("found=TRUE;value=/run/t.xml;"), "{r1:?}");
    // Written: answered at once from now on.
    let fx = rank_lines(&mut core, 0, GET);
    assert_eq!(replies(&fx, 0), ["cmd=get_result rc=0 msg=success value=/run/t.xml\n"]);
    assert!(to_parent(&fx).is_empty());
    // A writing that fails: the waiting rank is told there is none.
    let mut core = NodeCore::new(setup(&[0, 1], &[], 0), false, false);
    core.hwloc_xmlfile_pending();
    rank_lines(&mut core, 1, &v2_init);
    assert!(rank_lines(&mut core, 1, &ask_v2).is_empty());
    let mut fx = Vec::new();
    core.set_hwloc_xmlfile(None, &mut fx);
    let r1 = replies(&fx, 1);
    assert!(r1.len() == 1 && r1[0].contains("found=FALSE;"), "{r1:?}");
}

/// A child whose link fills (it does not read what it is sent): its input is not read any
/// more and a 30 s timer runs; room before the limit resumes it and stops the timer; a link
/// still full at the limit drops the child (once), and nothing else is touched. A child
/// far behind stops the reading of the parent until every child far behind caught up.
#[test]
fn a_full_child_is_paused_then_dropped_at_its_limit() {
    let mut core = NodeCore::new(setup(&[0], &[&[1], &[2]], 1 << 20), false, false);
    at_ms(&mut core, 0);
    let mut fx = Vec::new();
    core.child_full(0, &mut fx);
    assert_eq!(fx, [Effect::PauseChild(0, true)]);
    assert_eq!(core.poll_timeout(), Some(30.0));
    fx.clear();
    core.child_full(0, &mut fx);
    assert!(fx.is_empty(), "told once: {fx:?}");
    // It reads at 10 s: resumed, no timer left.
    at_ms(&mut core, 10_000);
    core.child_room(0, &mut fx);
    assert_eq!(fx, [Effect::PauseChild(0, false)]);
    assert_eq!(core.poll_timeout(), None);
    fx.clear();
    // Full again at 10 s, and still at 40 s: dropped then, not a moment before.
    core.child_full(0, &mut fx);
    fx.clear();
    core.handle_timeout(39.999, &mut fx);
    assert!(fx.is_empty(), "{fx:?}");
    core.handle_timeout(40.0, &mut fx);
    assert_eq!(fx, [Effect::DropChild(0, "it read nothing of what it was sent for 30 s".into())]);
    fx.clear();
    // Far behind: the parent is paused while any child is, resumed when none is.
    core.child_behind(1, true, &mut fx);
    assert_eq!(fx, [Effect::PauseParent(true)]);
    fx.clear();
    core.child_behind(0, true, &mut fx);
    core.child_behind(1, false, &mut fx);
    assert!(fx.is_empty(), "{fx:?}");
    core.child_behind(0, false, &mut fx);
    assert_eq!(fx, [Effect::PauseParent(false)]);
    fx.clear();
    // A child that is gone is not paused or dropped any more.
    core.child_gone(1, "closed", &mut fx);
    fx.clear();
    core.child_full(1, &mut fx);
    assert!(fx.is_empty(), "{fx:?}");
}

/// The stall limit counts from the latest fill: a child full at 0 s that reads at 20 s and
/// fills again at 25 s is dropped at 55 s, not at 30 s; one that is gone before its limit
/// is not dropped (nothing fires for it).
#[test]
fn a_child_stall_runs_from_the_latest_fill_and_ends_with_the_child() {
    let mut core = NodeCore::new(setup(&[0], &[&[1], &[2]], 1 << 20), false, false);
    let mut fx = Vec::new();
    at_ms(&mut core, 0);
    core.child_full(0, &mut fx);
    at_ms(&mut core, 20_000);
    core.child_room(0, &mut fx);
    at_ms(&mut core, 25_000);
    core.child_full(0, &mut fx);
    fx.clear();
    assert_eq!(core.timers().collect::<Vec<_>>(), vec![(55.0, &Timer::ChildStall(0))]);
    core.handle_timeout(30.0, &mut fx);
    core.handle_timeout(54.9, &mut fx);
    assert!(fx.is_empty(), "{fx:?}");
    core.handle_timeout(55.0, &mut fx);
    assert_eq!(fx, [Effect::DropChild(0, "it read nothing of what it was sent for 30 s".into())]);
    fx.clear();
    // Child 1 fills at 60 s and its connection closes at 70 s: nothing at 90 s.
    at_ms(&mut core, 60_000);
    core.child_full(1, &mut fx);
    assert_eq!(fx, [Effect::PauseChild(1, true)]);
    fx.clear();
    at_ms(&mut core, 70_000);
    core.child_gone(1, "connection closed", &mut fx);
    fx.clear();
    assert!(!core.timers().any(|(_, t)| *t == Timer::ChildStall(1)));
    core.handle_timeout(90.0, &mut fx);
    assert!(!fx.iter().any(|e| matches!(e, Effect::DropChild(..))), "{fx:?}");
}

/// A teardown gives up the children's launches at once (before the children are told to
/// stop), once: a second Kill changes nothing.
#[test]
fn a_kill_aborts_the_launches_once() {
    let mut core = NodeCore::new(setup(&[0], &[&[1], &[2]], 1 << 20), false, false);
    at_ms(&mut core, 0);
    let mut fx = Vec::new();
    core.parent_msg(Msg::Kill, &mut fx);
    let abort = fx.iter().position(|e| *e == Effect::AbortLaunches);
    let kill = fx.iter().position(|e| *e == Effect::ToChildren(Msg::Kill));
    assert!(abort.is_some() && abort < kill, "{fx:?}");
    fx.clear();
    core.parent_msg(Msg::Kill, &mut fx);
    assert!(fx.is_empty(), "{fx:?}");
}

/// Stdin goes to global rank 0 only: delivered on the node that runs it, passed to the
/// child whose subtree runs it, and dropped anywhere else; its end (empty data) the same way.
#[test]
fn stdin_goes_to_rank_0_only() {
    let mut fx = Vec::new();
    let mut here = NodeCore::new(setup(&[0, 1], &[&[2]], 1 << 20), false, false);
    here.stdin(Msg::Stdin { data: b"in".to_vec() }, &mut fx);
    here.stdin(Msg::Stdin { data: Vec::new() }, &mut fx);
    assert_eq!(fx, [Effect::Stdin(b"in".to_vec()), Effect::Stdin(Vec::new())]);
    fx.clear();
    let mut above = NodeCore::new(setup(&[3], &[&[1], &[0, 2]], 1 << 20), false, false);
    above.stdin(Msg::Stdin { data: b"in".to_vec() }, &mut fx);
    assert_eq!(fx, [Effect::ToChild(1, Msg::Stdin { data: b"in".to_vec() })]);
    fx.clear();
    let mut elsewhere = NodeCore::new(setup(&[3], &[&[1], &[2]], 1 << 20), false, false);
    elsewhere.stdin(Msg::Stdin { data: b"in".to_vec() }, &mut fx);
    assert!(fx.is_empty(), "{fx:?}");
}

/// `whole_job` (or `setup` when `part`) of a PMIx job.
fn pmix_job(local: &[u32], children: &[&[u32]], part: bool) -> NodeSetup {
    let mut s =
        if part { setup(local, children, 1 << 20) } else { whole_job(local, children, 1 << 20) };
    let nodes = std::iter::once(local)
        .chain(children.iter().copied())
        .enumerate()
        .map(|(i, r)| (format!("h{}", i + 1), r.to_vec()))
        .collect();
    s.job.pmix = Some(libi::job::PmixJob { nodes, parent: None });
    s
}

fn to_pmix(fx: &[Effect]) -> Vec<&libi_pmix::proto::ToCompanion> {
    fx.iter().filter_map(|e| if let Effect::ToPmix(m) = e { Some(m) } else { None }).collect()
}

#[test]
fn a_direct_modex_goes_to_the_node_that_runs_the_rank_and_its_answer_comes_back() {
    use libi_pmix::proto::{FromCompanion, Proc, ToCompanion};
    let mut core = NodeCore::new(pmix_job(&[0, 1], &[&[2, 3]], false), false, false);
    // Our server asks for rank 2's data: down to the child that runs it.
    let mut fx = Vec::new();
    let proc = Proc { nspace: "kvs".into(), rank: 2 };
    core.pmix_msg(FromCompanion::DirectModex { id: 5, proc }, &mut fx);
    let req = match fx.as_slice() {
        [Effect::ToChild(0, Msg::PmixDmodex { from, req, nspace, rank: 2 })] => {
            assert_eq!((from.as_str(), nspace.as_str()), ("kvs", "kvs"));
            *req
        }
        other => panic!("{other:?}"),
    };
    let mut fx = Vec::new();
    let data = Msg::PmixDmodexData { from: "kvs".into(), req, status: 0, blob: vec![1, 2] };
    core.child_msg(0, data, &mut fx);
    assert_eq!(
        to_pmix(&fx),
        [&ToCompanion::ModexData { id: 5, status: 0, blob: vec![1, 2] }],
        "{fx:?}"
    );
    // Another group asks (through the parent) for local rank 1: our server answers it, and
    // the answer goes back up.
    let mut fx = Vec::new();
    let ask = Msg::PmixDmodex { from: "other".into(), req: 9, nspace: "kvs".into(), rank: 1 };
    core.parent_msg(ask, &mut fx);
    let id = match to_pmix(&fx).as_slice() {
        [ToCompanion::DmodexRequest { id, proc }] => {
            assert_eq!(proc.rank, 1);
            *id
        }
        other => panic!("{other:?}"),
    };
    let mut fx = Vec::new();
    core.pmix_msg(FromCompanion::DmodexData { id, status: 0, blob: vec![3] }, &mut fx);
    let back = Msg::PmixDmodexData { from: "other".into(), req: 9, status: 0, blob: vec![3] };
    assert_eq!(to_parent(&fx), [&back]);
}

#[test]
fn a_rank_lost_before_its_finalize_is_told_to_every_server_of_the_job() {
    use libi_pmix::proto::{status, FromCompanion, Proc, ToCompanion};
    // Part of a job: the loss goes up to the node that holds the whole job.
    let mut core = NodeCore::new(pmix_job(&[0, 1], &[&[2]], true), false, false);
    let mut fx = Vec::new();
    let proc = Proc { nspace: "kvs".into(), rank: 1 };
    core.pmix_msg(FromCompanion::ClientConnected { proc }, &mut fx);
    core.rank_pid(1, 4242);
    core.rank_ended(1, ProcEnd::Signaled(9), &mut fx);
    let lost = to_parent(&fx)
        .into_iter()
        .find(|m| matches!(m, Msg::PmixLost { .. }))
        .cloned()
        .expect("sent up");
    match &lost {
        Msg::PmixLost { rank: 1, code, exit_code: None, .. } => {
            assert_eq!(*code, status::ERR_PROC_TERM_WO_SYNC)
        }
        other => panic!("{other:?}"),
    }
    assert!(to_pmix(&fx).is_empty(), "told on the way down, not up");
    // Back down from the parent: our server and our children are told.
    let mut fx = Vec::new();
    core.parent_msg(lost.clone(), &mut fx);
    match to_pmix(&fx).as_slice() {
        [ToCompanion::Notify { affected, .. }] => assert_eq!(affected[0].rank, 1),
        other => panic!("{other:?}"),
    }
    assert!(fx.contains(&Effect::ToChildren(lost)));
}

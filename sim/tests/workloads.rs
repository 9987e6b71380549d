//! The PMGR and spawn workloads in the simulator: PMGR collectives through the real cores'
//! aggregation over every tree shape, with each rank checking its answers; a wrong answer,
//! a mismatch between ranks, an abort or a lost agent failing the job with the real
//! message; `MPI_Comm_spawn` of a second process group with its own agents.

use libi::tree::Shape;
use libi_sim::model::Costs;
use libi_sim::workload::Trace;
use libi_sim::{Cluster, Config, Fault, Outcome};

fn run(cfg: Config) -> Outcome {
    Cluster::new(cfg).expect("valid config").run()
}

fn config(nodes: usize, ppn: u32, trace: Trace) -> Config {
    let mut cfg = Config::new(nodes, ppn, trace);
    cfg.launch_timeout = 5.0;
    cfg.limit = 60.0;
    cfg
}

fn pmgr_with(lines: &str) -> Trace {
    Trace::parse("pmgr-test", &format!(">pmgr open\n{lines}>pmgr close\n")).expect("parse")
}

fn assert_ok(o: &Outcome) {
    assert_eq!(o.status, 0, "{:?} {:?}", o.message, o.first_mismatch);
    assert!(o.end.is_some());
    assert_eq!(o.mismatches, 0, "{:?}", o.first_mismatch);
    assert_eq!(o.ranks_done, o.ranks);
    assert_eq!(o.ranks_waiting, 0);
}

/// Barrier, bcast, gather, scatter, allgather and alltoall through the real cores' PMGR
/// aggregation on every tree shape (and a single node, and one rank per node), each rank
/// checking the bytes it gets against PMGR's semantics.
#[test]
fn pmgr_collectives_on_every_shape() {
    let shapes = [Shape::Greedy, Shape::Flat, Shape::Chain, Shape::Binomial, Shape::Kary(2)];
    for (nodes, ppn) in [(7, 3), (1, 4), (5, 1)] {
        for shape in &shapes {
            let mut cfg = config(nodes, ppn, Trace::load("pmgr").expect("builtin"));
            cfg.shape = shape.clone();
            let o = run(cfg);
            assert_ok(&o);
            // open, 7 collectives, close: every one reached the rank's node.
            assert_eq!(o.pmi_requests, o.ranks * 9, "{shape} {nodes}x{ppn}");
        }
    }
}

/// Roots other than 0 and several rounds, still checked.
#[test]
fn pmgr_other_roots_and_rounds() {
    let t = pmgr_with(
        ">pmgr bcast root=5 size=3\n>pmgr gather root=4 size=5\n>pmgr scatter root=2 size=7\n\
         >pmgr allgather size=1 seed=9\n>pmgr alltoall size=3\n>pmgr bcast root=1 size=4096\n",
    );
    let mut cfg = config(3, 2, t);
    cfg.shape = Shape::Binomial;
    assert_ok(&run(cfg));
}

/// A rank that contributes other data than its peers expect (here rank 1's block of an
/// allgather): the ranks see a wrong answer, exit 1 without closing PMGR, and the job fails
/// with the front end's message for that.
#[test]
fn pmgr_wrong_value_fails_the_job() {
    let t = pmgr_with(
        ">pmgr barrier\n?rank=1 >pmgr allgather size=8 seed=7\n?!rank=1 >pmgr allgather size=8\n",
    );
    let o = run(config(3, 2, t));
    assert_eq!(o.status, 1, "{:?}", o.message);
    assert!(o.mismatches > 0);
    let m = o.first_mismatch.as_deref().unwrap_or("");
    assert!(m.contains("PMGR Allgather"), "{m}");
    let msg = o.message.as_deref().unwrap_or("");
    assert!(msg.contains("exited with code 1 without calling PMGR close"), "{msg}");
    assert!(o.end.is_some());
}

/// Ranks that disagree on a collective's size: the real core's mismatch message, after its
/// grace for an abort record.
#[test]
fn pmgr_mismatch_fails_with_the_cores_message() {
    let t = pmgr_with("?rank=2 >pmgr bcast root=0 size=16\n?!rank=2 >pmgr bcast root=0 size=8\n");
    let mut cfg = config(4, 2, t);
    cfg.shape = Shape::Kary(2);
    let o = run(cfg);
    assert_eq!(o.status, 1, "{:?}", o.message);
    let msg = o.message.as_deref().unwrap_or("");
    assert!(msg.contains("PMGR collective mismatch") && msg.contains("different size"), "{msg}");
    // The core waits PMGR_ABORT_GRACE (1.5 s) for an abort record before failing.
    assert!(o.end.is_some_and(|e| e > 1.5), "{:?}", o.end);
}

/// `PMGR_ABORT`: the job fails with the rank's code.
#[test]
fn pmgr_abort_fails_the_job() {
    let t = pmgr_with(">pmgr barrier\n?rank=3 >pmgr abort code=-5\n>pmgr barrier\n");
    let o = run(config(3, 2, t));
    assert_eq!(o.status, 5, "{:?}", o.message);
    let msg = o.message.as_deref().unwrap_or("");
    assert_eq!(msg, "rank 3 on n2 sent PMGR_ABORT (code -5)");
}

/// An agent killed in the middle of the PMGR job: the job fails naming it.
#[test]
fn pmgr_killed_agent_fails_the_job() {
    for at in [0.002, 0.008, 0.0115] {
        let mut cfg = config(7, 3, Trace::load("pmgr").expect("builtin"));
        cfg.faults = vec![Fault::Kill { node: 3, at }];
        let o = run(cfg);
        assert_eq!(o.status, 255, "at {at}: {:?}", o.message);
        let msg = o.message.as_deref().unwrap_or("");
        assert!(msg.starts_with("lost the NLA on n3: "), "at {at}: {msg}");
        assert!(o.end.is_some());
        assert_eq!(o.ranks_waiting, 0, "at {at}");
    }
}

/// Rank 0 spawns 3 ranks running the same trace: a second process group with its own root
/// and agents, its kvsname, the preput pair, answered once its ranks run; the job ends when
/// both groups ended.
#[test]
fn spawn_runs_a_second_group() {
    for shape in [Shape::Greedy, Shape::Flat, Shape::Chain] {
        let mut cfg = config(4, 2, Trace::load("spawn").expect("builtin"));
        cfg.shape = shape.clone();
        let o = run(cfg);
        assert_ok(&o);
        assert_eq!(o.ranks, 8 + 3);
        assert_eq!(o.groups.len(), 2, "{shape}");
        let (job, spawned) = (&o.groups[0], &o.groups[1]);
        assert_eq!((job.ranks, job.ranks_done, job.agents), (8, 8, 4));
        assert_eq!((spawned.ranks, spawned.ranks_done), (3, 3));
        // Placed after the job's ranks on the host list (n1..n4, 2 slots each): n1 and n2.
        assert_eq!(spawned.agents, 2);
        assert_eq!(spawned.kvsname, "kvs_1_1_1_fe");
        assert_eq!(spawned.workload, "spawn");
        let up = spawned.up.expect("spawned ranks ran");
        assert!(spawned.started > 0.0 && up > spawned.started);
        assert!(o.end.is_some_and(|e| e > up));
        assert!(o.warnings.is_empty(), "{:?}", o.warnings);
    }
}

fn spawning(execname: &str, nprocs: u32, answer: &str) -> Trace {
    let text = format!(
        "> cmd=init pmi_version=1 pmi_subversion=1\n< cmd=response_to_init\n\
         ?rank=1 > mcmd=spawn nprocs={nprocs} execname={execname} totspawns=1 spawnssofar=1 \
         argcnt=0 preput_num=0 info_num=0 endcmd\n< {answer}\n\
         > cmd=barrier_in\n< cmd=barrier_out\n> cmd=finalize\n< cmd=finalize_ack\n"
    );
    Trace::parse("spawning", &text).expect("parse")
}

/// The spawned ranks run the workload the command's executable names (a built-in here),
/// placed where the front end's planner puts them (wrapping round the host list).
#[test]
fn spawn_of_a_builtin_workload() {
    let o = run(config(2, 2, spawning("fence", 5, "cmd=spawn_result rc=0")));
    assert_ok(&o);
    assert_eq!(o.groups.len(), 2);
    assert_eq!(o.groups[1].workload, "fence");
    assert_eq!((o.groups[1].ranks, o.groups[1].ranks_done), (5, 5));
    assert_eq!(o.groups[1].agents, 2);
    assert_eq!(o.ranks_done, 4 + 5);
}

/// A spawn the front end refuses is answered with an error and one line (the root core's
/// `Print`, on the front end's stderr); the job goes on.
#[test]
fn refused_spawn_is_answered_with_an_error() {
    let o = run(config(2, 2, spawning("/nonexistent.pmitrace", 2, "cmd=spawn_result rc=-1")));
    assert_ok(&o);
    assert_eq!(o.groups.len(), 1);
    assert!(
        o.prints.iter().any(|w| w.starts_with("spawn by rank 1 on n1 failed: workload")),
        "{:?}",
        o.prints
    );
    let o = run(config(2, 2, spawning("self", 0, "cmd=spawn_result rc=-1")));
    assert_ok(&o);
    assert!(o.prints.iter().any(|w| w.contains("nothing to spawn")), "{:?}", o.prints);
}

/// A spawned group's agent lost: the job fails (both groups are torn down) and ends.
#[test]
fn spawn_then_fault_ends_everything() {
    let mut cfg = config(4, 2, Trace::load("spawn").expect("builtin"));
    cfg.faults = vec![Fault::Kill { node: 2, at: 0.009 }];
    let o = run(cfg);
    assert_eq!(o.status, 255, "{:?}", o.message);
    assert!(o.end.is_some());
    assert_eq!(o.ranks_waiting, 0);
}

fn fingerprint(o: &Outcome) -> String {
    format!(
        "{:?} {:?} {:?} {} {:?} {} {} {} {} {:?}",
        o.launch,
        o.fences,
        o.end,
        o.status,
        o.message,
        o.tree_msgs,
        o.tree_bytes,
        o.events,
        o.pmi_requests,
        o.groups
    )
}

/// The same seed gives the same outcome (with jitter, so that the seed matters).
#[test]
fn same_seed_same_outcome() {
    for name in ["pmgr", "spawn"] {
        let cfg = |seed| {
            let mut cfg = config(6, 2, Trace::load(name).expect("builtin"));
            cfg.costs = Costs { jitter: 0.3, ..Costs::default() };
            cfg.seed = seed;
            cfg
        };
        let (a, b, c) = (run(cfg(7)), run(cfg(7)), run(cfg(8)));
        assert_ok(&a);
        assert_eq!(fingerprint(&a), fingerprint(&b), "{name}");
        assert_ne!(fingerprint(&a), fingerprint(&c), "{name}: the seed changes nothing");
    }
}

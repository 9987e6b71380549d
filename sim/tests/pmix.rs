//! PMIx jobs in the simulator: Open MPI 5's `MPI_Init` + `MPI_Finalize` (`ompi5-init`,
//! recorded) through each node's simulated PMIx server and the real cores' PMIx fences, on
//! several tree shapes; every server checks the fence results as libpmix unpacks them.

mod common;

use libi::tree::Shape;
use libi_sim::model::Costs;
use libi_sim::workload::{BlobLaw, Trace};
use libi_sim::{Cluster, Config, Fault, Outcome};
use proptest::prelude::*;

fn run(cfg: Config) -> Outcome {
    Cluster::new(cfg).expect("valid config").run()
}

fn config(nodes: usize, ppn: u32, shape: Shape) -> Config {
    let mut cfg = Config::new(nodes, ppn, Trace::load("ompi5-init").expect("builtin"));
    cfg.shape = shape;
    cfg.launch_timeout = 5.0;
    cfg.limit = 60.0;
    cfg
}

fn assert_ok(o: &Outcome) {
    assert_eq!(o.status, 0, "{:?} {:?} {:?}", o.message, o.first_mismatch, o.warnings);
    assert!(o.end.is_some());
    assert_eq!(o.mismatches, 0, "{:?}", o.first_mismatch);
    assert_eq!(o.ranks_done, o.ranks);
    assert_eq!(o.ranks_waiting, 0);
    assert!(o.warnings.is_empty(), "{:?}", o.warnings);
}

/// What every node's server must have seen of `ompi5-init` on `nodes` x `ppn` (node `i`,
/// 1-based, runs ranks `(i-1)*ppn ..`): every rank connected and finalized; five fences
/// asked of its agent — with data, without, with data, without, without — its own blob in
/// those with data, and back from the agent the concatenation of every node's.
fn check_servers(o: &Outcome, nodes: usize, ppn: u32) {
    let blob = |i: u32| BlobLaw::Ompi5.size(i * ppn, ppn);
    let total: u64 = (0..nodes as u32).map(blob).sum();
    assert_eq!(o.pmix_nodes.len(), nodes + 1, "the front end and every agent");
    assert_eq!(o.pmix_nodes[0], Default::default(), "the front end runs no server");
    for (i, s) in o.pmix_nodes.iter().enumerate().skip(1) {
        let b = blob(i as u32 - 1);
        assert_eq!((s.connected, s.finalized, s.local), (ppn, ppn, 0), "node {i}");
        assert_eq!(s.asked, [b, 0, b, 0, 0], "node {i}'s blobs");
        assert_eq!(s.done, [total, 0, total, 0, 0], "node {i}'s fence results");
    }
    assert_eq!(o.pmix_fences, 5 * nodes as u64);
    assert_eq!(o.pmix_blob_up, 2 * total);
    assert_eq!(o.pmix_blob_down, 2 * total * nodes as u64);
    // Per rank: ClientConnected and ClientFinalized; per node, five fences.
    assert_eq!(o.pmix_msgs, 2 * o.ranks + 5 * nodes as u64);
    assert_eq!(o.pmi_requests, 0, "no PMI-1 or PMI-2");
}

/// 64 nodes x 4 ranks over four tree shapes: five fences at every node, each server's own
/// blob up and the sum of all 64 back, released by the fence root five times; each fence
/// one message up and one down per agent below the fence root.
#[test]
fn ompi5_init_over_64_nodes_on_four_shapes() {
    let (nodes, ppn) = (64, 4);
    for shape in [Shape::Greedy, Shape::Kary(4), Shape::Binomial, Shape::Flat] {
        let o = run(config(nodes, ppn, shape.clone()));
        assert_ok(&o);
        check_servers(&o, nodes, ppn);
        assert_eq!(o.fences.len(), 5, "{shape}: released by the fence root");
        assert_eq!(o.fences_done.len(), 5, "{shape}: every rank left every fence");
        assert!(o.fences.windows(2).all(|w| w[0] <= w[1]), "{shape}: {:?}", o.fences);
        let below = if o.levels[1].nodes == 1 { nodes as u64 - 1 } else { nodes as u64 };
        assert_eq!(o.fence_msgs, 2 * below * 5, "{shape}");
    }
}

/// The law's figures are the recorded blob sizes (`bench/pmix-record.sh`).
#[test]
fn ompi5_blob_law_matches_the_recording() {
    let law = BlobLaw::Ompi5;
    for (l, other, rank0) in
        [(1, 56, 77), (2, 102, 129), (3, 144, 182), (4, 185, 234), (8, 349, 442), (16, 677, 858)]
    {
        assert_eq!(law.size(l, l), other, "{l} ranks, not rank 0's node");
        assert_eq!(law.size(0, l), rank0, "{l} ranks on rank 0's node");
    }
    // 2 x 72: ranks 128..143 take a byte more each.
    assert_eq!(law.size(72, 72), 2989);
    assert_eq!(law.size(0, 72), 3770);
    let ranks: Vec<u32> = (120..140).collect();
    assert_eq!(law.size_of_ranks(&ranks), law.size(120, 20));
    assert_eq!(law.size(5, 0), 0, "no ranks, no server");
    assert_eq!(BlobLaw::Linear { per: 10, base: 3 }.size(7, 4), 43);
}

/// On one node libpmix completes every fence itself: its agent hears of none. With that
/// shortcut off, the five fences reach the agent, which answers with the node's own blob.
#[test]
fn one_node_fences_stay_in_the_server_unless_asked() {
    let o = run(config(1, 4, Shape::Greedy));
    assert_ok(&o);
    let s = &o.pmix_nodes[1];
    assert_eq!((s.connected, s.finalized, s.local), (4, 4, 5));
    assert!(s.asked.is_empty() && s.done.is_empty());
    assert!(o.fences.is_empty());
    assert_eq!(o.fences_done.len(), 5);

    let mut cfg = config(1, 4, Shape::Greedy);
    cfg.pmix_localonly = false;
    let o = run(cfg);
    assert_ok(&o);
    check_servers(&o, 1, 4);
    assert_eq!(o.fences.len(), 5);
}

/// Servers whose blobs do not add up to what every server expects (rank 0's node puts 8
/// bytes where the others follow Open MPI's law) fail the fence: each rank exits 1, as
/// Open MPI does when `MPI_Init`'s fence fails, and the job fails.
#[test]
fn a_fence_result_that_does_not_add_up_fails_the_job() {
    let t = Trace::parse(
        "bad",
        ">pmix init\n?rank=0 >pmix fence collect=8\n?!rank=0 >pmix fence collect=ompi5\n>pmix finalize\n",
    )
    .expect("parse");
    let mut cfg = config(4, 1, Shape::Greedy);
    cfg.workload = t;
    let o = run(cfg);
    assert!(o.end.is_some());
    assert_ne!(o.status, 0);
    assert_eq!(o.mismatches, 4, "every rank: {:?}", o.first_mismatch);
    let m = o.first_mismatch.unwrap_or_default();
    assert!(m.contains("not the") && m.contains("of every node's blob"), "{m}");
}

/// The companion's start delays each agent's ranks and, as the driver waits for it before
/// its loop, the setups of its children: the launch grows by up to `pmix_start` per level.
#[test]
fn the_companion_start_is_paid_once_per_tree_level() {
    let launch = |start: f64, shape: Shape| {
        let mut cfg = config(16, 2, shape);
        cfg.costs = Costs { pmix_start: start, ..Costs::default() };
        let o = run(cfg);
        assert_ok(&o);
        (o.launch.expect("launched"), o.depth)
    };
    let (chain0, depth) = launch(0.0, Shape::Chain);
    let (chain1, _) = launch(0.05, Shape::Chain);
    let (flat0, _) = launch(0.0, Shape::Flat);
    let (flat1, _) = launch(0.05, Shape::Flat);
    assert_eq!(depth, 16);
    // Each of the 15 agents with a child: the child's hello (REM after its launch) waits
    // for the rest of the parent's companion start; the last agent: its ranks wait for its
    // own.
    let rem = Costs::default().rem;
    let grew = chain1 - chain0;
    assert!(grew > 15.0 * (0.05 - rem) && grew < 16.0 * 0.05 + 0.01, "chain {chain0} -> {chain1}");
    assert!((flat1 - flat0 - 0.05).abs() < 0.01, "flat {flat0} -> {flat1}");
}

/// A PMIx workload cannot be spawned (the agents refuse a PMIx spawn).
#[test]
fn a_spawned_pmix_group_is_refused() {
    let t = Trace::parse(
        "s",
        "?rank=0 > mcmd=spawn nprocs=2 execname=ompi5-init totspawns=1 spawnssofar=1 argcnt=0 preput_num=0 info_num=0 endcmd\n< cmd=spawn_result rc=-1\n",
    )
    .expect("parse");
    let mut cfg = Config::new(2, 1, t);
    cfg.launch_timeout = 5.0;
    let o = run(cfg);
    assert_eq!(o.status, 0, "{:?} {:?}", o.message, o.first_mismatch);
    assert!(o.prints.iter().any(|p| p.contains("speaks PMIx")), "{:?}", o.prints);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24), ..ProptestConfig::default() })]

    /// Any shape and size: every server sees its five fences with the whole job's data (one
    /// node: none, libpmix keeps them); a lost agent ends the job with its message, no rank
    /// left waiting in a fence.
    #[test]
    fn ompi5_init_on_any_tree(
        nodes in 1usize..40,
        ppn in 1u32..5,
        shape in prop_oneof![Just(Shape::Greedy), Just(Shape::Flat), Just(Shape::Chain), Just(Shape::Binomial), (1u32..6).prop_map(Shape::Kary)],
        pick in any::<prop::sample::Index>(),
        at in 0.0f64..0.2,
    ) {
        let o = run(config(nodes, ppn, shape.clone()));
        prop_assert_eq!(o.status, 0, "{:?} {:?}", o.message, o.first_mismatch);
        prop_assert_eq!(o.ranks_done, o.ranks);
        if nodes > 1 {
            check_servers(&o, nodes, ppn);
            prop_assert_eq!(o.fences.len(), 5);
        } else {
            prop_assert_eq!(o.pmix_nodes[1].local, 5);
        }
        let node = (pick.index(nodes) + 1) as u32;
        let mut cfg = config(nodes, ppn, shape);
        cfg.faults = vec![Fault::Kill { node, at }];
        let o = run(cfg);
        prop_assert_eq!(common::lost_agent_ending(&o), Ok(()), "kill:{}@{}", node, at);
    }
}

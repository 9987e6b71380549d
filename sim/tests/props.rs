//! Properties of the real node cores, checked in the simulator over random tree shapes,
//! sizes, workloads and fault schedules (sizes kept small so that CI stays fast; the same
//! code runs at 100k agents in `bench/`).

mod common;

use libi::tree::Shape;
use libi_sim::model::Costs;
use libi_sim::workload::Trace;
use libi_sim::{Cluster, Config, Fault, Outcome};
use proptest::prelude::*;

fn shape() -> impl Strategy<Value = Shape> {
    prop_oneof![
        Just(Shape::Greedy),
        Just(Shape::Flat),
        Just(Shape::Chain),
        Just(Shape::Binomial),
        (1u32..6).prop_map(Shape::Kary),
    ]
}

fn workload() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just("mpich-init"),
        Just("exchange"),
        Just("fence"),
        Just("pmi2"),
        Just("mpich5-init")
    ]
}

#[derive(Debug, Clone)]
struct Case {
    nodes: usize,
    ppn: u32,
    shape: Shape,
    workload: &'static str,
    push_max: u64,
    batch: Option<u32>,
    jitter: f64,
    seed: u64,
}

fn case() -> impl Strategy<Value = Case> {
    (
        1usize..40,
        1u32..5,
        shape(),
        workload(),
        prop_oneof![Just(0u64), Just(1 << 20)],
        prop_oneof![Just(None), (1u32..4).prop_map(Some)],
        prop_oneof![Just(0.0), Just(0.3)],
        any::<u64>(),
    )
        .prop_map(|(nodes, ppn, shape, workload, push_max, batch, jitter, seed)| Case {
            nodes,
            ppn,
            shape,
            workload,
            push_max,
            batch,
            jitter,
            seed,
        })
}

fn config(c: &Case) -> Config {
    let mut cfg = Config::new(c.nodes, c.ppn, Trace::load(c.workload).expect("builtin"));
    cfg.shape = c.shape.clone();
    cfg.push_max = c.push_max;
    cfg.batch = c.batch;
    cfg.seed = c.seed;
    cfg.costs = Costs { jitter: c.jitter, ..Costs::default() };
    cfg.launch_timeout = 5.0;
    cfg
}

fn run(cfg: Config) -> Outcome {
    Cluster::new(cfg).expect("valid config").run()
}

/// The parts of a run that must repeat exactly for one seed.
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

proptest! {
    // 48 cases in CI; PROPTEST_CASES=N for more.
    #![proptest_config(ProptestConfig { cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48), ..ProptestConfig::default() })]

    /// Without faults every job ends well, every rank finishes its conversation with the
    /// answers the workload expects, and each fence costs exactly one message up and one
    /// down per agent below the fence root, whatever the number of ranks per agent. (The
    /// fence root is the front end, or its only child: that agent's subtree holds every
    /// rank.)
    #[test]
    fn healthy_jobs_end_well(c in case()) {
        let o = run(config(&c));
        prop_assert_eq!(o.status, 0, "{:?}", o.message);
        prop_assert!(o.end.is_some());
        prop_assert_eq!(o.ranks_done, o.ranks);
        prop_assert_eq!(o.ranks_waiting, 0);
        prop_assert_eq!(o.mismatches, 0, "{:?}", o.first_mismatch);
        let fences = o.fences.len() as u64;
        prop_assert!(fences >= 1);
        // What reaches the front end is O(children of the root), not O(ranks) or O(nodes):
        // per child a launch report, its fence messages, its end (and gets when lazy).
        let root_children = o.levels.get(1).map(|l| l.nodes).unwrap_or(0);
        let below = if root_children == 1 { c.nodes as u64 - 1 } else { c.nodes as u64 };
        prop_assert_eq!(o.fence_msgs, 2 * below * fences);
        if c.push_max > 0 {
            prop_assert!(o.fan_in_msgs <= root_children * (2 + fences), "{} > {} children", o.fan_in_msgs, root_children);
        }
        // The launch, as the launch model predicts it (jitter aside).
        if c.jitter == 0.0 {
            prop_assert!((o.agents_up - o.model_launch).abs() <= 0.05 * o.model_launch + 0.001,
                "simulated {} vs model {}", o.agents_up, o.model_launch);
        }
    }

    /// The same seed gives the same run.
    #[test]
    fn same_seed_same_run(c in case()) {
        let a = run(config(&c));
        let b = run(config(&c));
        prop_assert_eq!(fingerprint(&a), fingerprint(&b));
    }

    /// A lost agent — killed, cut off, or never started — fails the job with status 255 and
    /// a message naming it, within the configured time; every job ends and no rank is left
    /// waiting for an answer.
    #[test]
    fn lost_agents_fail_the_job(c in case(), pick in any::<prop::sample::Index>(), at in 0.0f64..0.05, kind in 0u8..3) {
        let node = (pick.index(c.nodes) + 1) as u32;
        let fault = match kind {
            0 => Fault::Kill { node, at },
            1 => Fault::Drop { node, at },
            _ => Fault::Never { node },
        };
        let mut cfg = config(&c);
        cfg.faults = vec![fault.clone()];
        let o = run(cfg);
        prop_assert_eq!(common::lost_agent_ending(&o), Ok(()), "{:?}", fault);
        match fault {
            // Never started: always fails, within the launch timeout of its launch.
            Fault::Never { .. } => {
                prop_assert_eq!(o.status, 255);
                let end = o.end.unwrap_or(f64::MAX);
                prop_assert!(end <= 5.0 + 1.0, "ended at {}", end);
            }
            // Killed or cut while ranks ran: noticed at once (a connection closes).
            Fault::Kill { at, .. } | Fault::Drop { at, .. } if o.status != 0 => {
                let end = o.end.unwrap_or(f64::MAX);
                prop_assert!(end <= at.max(o.launch.unwrap_or(0.0)) + 0.5, "fault at {} ended at {}", at, end);
            }
            _ => {}
        }
    }
}

proptest! {
    // 24 cases in CI; PROPTEST_CASES=N for more.
    #![proptest_config(ProptestConfig { cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24), ..ProptestConfig::default() })]

    /// PMGR collectives and spawned process groups end well on any shape and size (every
    /// rank of every group checked its answers); with an agent lost they end with its
    /// message and leave no rank waiting; and a seed repeats its run.
    #[test]
    fn pmgr_and_spawn_jobs(c in case(), pmgr in any::<bool>(), pick in any::<prop::sample::Index>(), at in 0.0f64..0.03, lose in any::<bool>()) {
        let c = Case { workload: if pmgr { "pmgr" } else { "spawn" }, ..c };
        let o = run(config(&c));
        prop_assert_eq!(o.status, 0, "{:?} {:?}", o.message, o.first_mismatch);
        prop_assert_eq!(o.mismatches, 0);
        prop_assert_eq!(o.ranks_done, o.ranks);
        prop_assert_eq!(o.ranks_waiting, 0);
        let groups = if pmgr { 1 } else { 2 };
        prop_assert_eq!(o.groups.len(), groups);
        prop_assert!(o.groups.iter().all(|g| g.ranks_done == g.ranks));
        prop_assert_eq!(fingerprint(&o), fingerprint(&run(config(&c))));
        if lose {
            let node = (pick.index(c.nodes) + 1) as u32;
            let mut cfg = config(&c);
            cfg.faults = vec![Fault::Kill { node, at }];
            let o = run(cfg);
            prop_assert_eq!(common::lost_agent_ending(&o), Ok(()));
        }
    }
}

/// A workload whose expected answers cannot come: the replay fails like the real client
/// (exit 1) and the job says which rank. Proves the answer check can fail.
#[test]
fn wrong_answers_fail_the_job() {
    let t = Trace::parse(
        "bad",
        "> cmd=init pmi_version=1 pmi_subversion=1\n> cmd=put kvsname={kvsname} key=k{rank} value={fill:8}\n> cmd=barrier_in\n>peers cmd=get kvsname={kvsname} key=k{peer}\n< cmd=get_result rc=0 value={fill:9}\n> cmd=finalize\n",
    )
    .expect("parse");
    let o = run(Config::new(3, 2, t));
    assert!(o.mismatches > 0);
    assert_eq!(o.status, 1, "{:?}", o.message);
    assert!(o.message.unwrap_or_default().contains("exited with code 1"));
}

/// The greedy launch of a large tree matches the launch model (the property above checks
/// small ones); kept to 2000 agents so that it runs in a second.
#[test]
fn greedy_launch_matches_the_model_at_2000() {
    let o = run(Config::new(2000, 2, Trace::load("fence").expect("builtin")));
    assert_eq!(o.status, 0);
    let err = (o.agents_up - o.model_launch).abs() / o.model_launch;
    assert!(err < 0.05, "simulated {} vs model {}", o.agents_up, o.model_launch);
}

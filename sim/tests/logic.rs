//! Multi-node logic of the real node cores, checked in the simulator instead of with real
//! processes: where each `get` is answered in the tree, what a pushed fence saves, the order
//! of batched launches, and how a launch that never connects ends the job. (The tests with
//! real processes in `tests/` keep what needs real I/O: sockets, signals, output, reports.)

use libi::tree::Shape;
use libi_sim::workload::Trace;
use libi_sim::{Cluster, Config, Fault, Outcome};

fn run(cfg: Config) -> Outcome {
    Cluster::new(cfg).expect("valid config").run()
}

fn exchange(nodes: usize, ppn: u32, shape: Shape) -> Config {
    let mut cfg = Config::new(nodes, ppn, Trace::load("exchange").expect("builtin"));
    cfg.shape = shape;
    cfg
}

/// Fetched lazily (`--kvs-push-max 0`) over a chain of 3 agents × 2 ranks: each agent asks
/// its parent once for each key its subtree lacks, the second local rank's get of a key is
/// answered here (from the cache or with the same pending request), and nothing climbs to
/// the front end (the first agent holds every key of its subtree, which is the job).
/// A second round of gets after the first is answered from each agent's cache.
#[test]
fn lazy_gets_climb_once_per_missing_key() {
    let twice = "> cmd=init pmi_version=1 pmi_subversion=1\n> cmd=put kvsname={kvsname} key=k{rank} value={fill:64}\n> cmd=barrier_in\n< cmd=barrier_out\n>peers cmd=get kvsname={kvsname} key=k{peer}\n< cmd=get_result rc=0 msg=success value={fill:64}\n>peers cmd=get kvsname={kvsname} key=k{peer}\n< cmd=get_result rc=0 msg=success value={fill:64}\n> cmd=finalize\n";
    let mut cfg = Config::new(3, 2, Trace::parse("twice", twice).expect("parse"));
    cfg.shape = Shape::Chain;
    cfg.push_max = 0;
    let o = run(cfg);
    assert_eq!((o.status, o.mismatches), (0, 0), "{:?} {:?}", o.message, o.first_mismatch);
    let c = &o.counters;
    assert_eq!(c.len(), 4);
    assert_eq!(c[0].gets_for_children, 0, "nothing climbs to the front end: {:?}", c[0]);
    assert_eq!(c[1].gets_up, 0, "{:?}", c[1]);
    assert_eq!(c[2].gets_up, 2, "one request per missing key: {:?}", c[2]);
    assert_eq!(c[3].gets_up, 4, "{:?}", c[3]);
    assert_eq!(c[1].gets_for_children, 2, "{:?}", c[1]);
    assert_eq!(c[2].gets_for_children, 4, "{:?}", c[2]);
    // Each rank's second get of each remote key is a cache hit.
    let hits: Vec<u64> = c[1..].iter().map(|c| c.cache_hits).collect();
    assert!(hits[1] >= 4 && hits[2] >= 8, "{c:?}");
}

/// The same exchange with pushed fences (the default for small key spaces): every get is
/// answered where the rank is, on any tree.
#[test]
fn pushed_fences_answer_every_get_locally() {
    for shape in [Shape::Chain, Shape::Flat, Shape::Binomial, Shape::Kary(2)] {
        let o = run(exchange(7, 3, shape.clone()));
        assert_eq!((o.status, o.mismatches), (0, 0), "{shape}: {:?}", o.message);
        assert_eq!(o.get_msgs, 0, "{shape}");
        for (node, c) in o.counters.iter().enumerate() {
            assert_eq!(c.gets_up, 0, "{shape}: node {node}: {c:?}");
        }
    }
}

/// Batched launch (`--launch-batch 2`) over a flat tree of 6 agents: the front end starts
/// each batch of two only after both of the previous batch connected back.
#[test]
fn batched_launch_waits_for_each_batch() {
    let mut cfg = exchange(6, 1, Shape::Flat);
    cfg.batch = Some(2);
    let o = run(cfg);
    assert_eq!(o.status, 0, "{:?}", o.message);
    let mut l = o.launches.clone();
    assert_eq!(l.len(), 6);
    l.sort_by(|a, b| a.2.total_cmp(&b.2));
    assert!(l.iter().all(|x| x.1 == 0 && x.3 >= x.2), "{l:?}");
    for batch in 1..3 {
        let prev_done = l[2 * batch - 2].3.max(l[2 * batch - 1].3);
        for x in &l[2 * batch..2 * batch + 2] {
            assert!(x.2 >= prev_done, "batch {batch} started before the previous connected: {l:?}");
        }
    }
    // Without batches the front end does not wait: the third launch starts before the
    // first two connected.
    let o = run(exchange(6, 1, Shape::Flat));
    let l = &o.launches;
    assert!(l[2].2 < l[0].3.max(l[1].3), "{l:?}");
}

/// An agent whose launch never connects back fails the job when the launch timeout of that
/// launch is over, with status 255 and a message naming its host and the timeout; the other
/// agents' ranks are torn down, none is left waiting.
#[test]
fn launch_that_never_connects_times_out() {
    let mut cfg = exchange(4, 2, Shape::Kary(2));
    cfg.launch_timeout = 2.0;
    cfg.faults = vec![Fault::Never { node: 3 }];
    let o = run(cfg);
    assert_eq!(o.status, 255, "{:?}", o.message);
    let m = o.message.unwrap_or_default();
    assert!(m.contains("n3") && m.contains("launch timeout"), "{m}");
    let end = o.end.unwrap_or(f64::MAX);
    assert!((2.0..3.0).contains(&end), "ended at {end}");
    assert_eq!(o.ranks_waiting, 0);
}

/// The shared-core model (`--costs vm`: processor-shared cores, launches and rank starts on
/// the event loop, sends costing the sender) runs every shape to the same outcome as the
/// default costs, with batches too; a fault still ends the job with the front end's words;
/// the last rank leaves each fence after the root released it.
#[test]
fn vm_costs_keep_the_logic() {
    for (shape, batch) in [(Shape::Greedy, None), (Shape::Binomial, Some(2)), (Shape::Flat, None)] {
        let mut cfg = exchange(9, 4, shape.clone());
        cfg.costs = libi_sim::model::Costs::this_vm();
        cfg.batch = batch;
        let o = run(cfg);
        assert_eq!((o.status, o.mismatches, o.ranks_done), (0, 0, 36), "{shape}: {:?}", o.message);
        assert_eq!(o.fences.len(), o.fences_done.len(), "{shape}");
        for (root, last) in o.fences.iter().zip(&o.fences_done) {
            assert!(last >= root, "{shape}: {root} {last}");
        }
        let base = run(exchange(9, 4, shape.clone()));
        assert_eq!((o.tree_msgs, o.pmi_requests), (base.tree_msgs, base.pmi_requests), "{shape}");
    }
    let mut cfg = exchange(9, 4, Shape::Greedy);
    cfg.costs = libi_sim::model::Costs::this_vm();
    cfg.faults = vec![Fault::Kill { node: 3, at: 0.001 }];
    let o = run(cfg);
    assert_eq!(o.status, libi_sim::cluster::STATUS_LAUNCH, "{:?}", o.message);
    assert!(o.message.as_deref().is_some_and(|m| m.contains("n3")), "{:?}", o.message);
}

/// The front end is the real root core (`libi_node::proto::root::RootCore`): a healthy job prints
/// nothing and ends once every tree finished, after the last rank's exit; a lost agent fails
/// the job with the root core's one line, which is the job's message.
#[test]
fn the_front_end_is_the_root_core() {
    let o = run(exchange(6, 2, Shape::Kary(2)));
    assert_eq!(o.status, 0, "{:?}", o.message);
    assert!(o.prints.is_empty() && o.warnings.is_empty(), "{:?} {:?}", o.prints, o.warnings);
    assert!(o.end.is_some_and(|e| e > o.last_exit), "{:?} {}", o.end, o.last_exit);
    let mut cfg = exchange(6, 2, Shape::Kary(2));
    cfg.faults = vec![Fault::Kill { node: 4, at: 0.005 }];
    let o = run(cfg);
    assert_eq!(o.status, 255, "{:?}", o.message);
    assert_eq!(o.prints.len(), 1, "{:?}", o.prints);
    assert_eq!(o.message.as_ref(), o.prints.first());
    assert!(o.prints[0].starts_with("lost the NLA on n4"), "{:?}", o.prints);
}

//! Tests of the launch trees, the model and the comm tree.

use proptest::prelude::*;

use super::greedy;
use super::*;

const EPS: f64 = 1e-9;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= EPS * (1.0 + a.abs().max(b.abs()))
}

fn total(shape: &Shape, n: usize, m: &LaunchModel) -> f64 {
    evaluate(&Tree::build(shape, n, m), m).total
}

fn parents(t: &Tree) -> Vec<Option<usize>> {
    (0..t.len()).map(|v| t.parent(v)).collect()
}

// ---------------------------------------------------------------- hand-computed values

#[test]
fn flat_is_seq_times_n_minus_2_plus_rem() {
    for &(seq, rem) in &[(0.007, 0.172), (1.0, 10.0), (10.0, 1.0), (0.0, 0.5), (0.25, 0.0)] {
        let m = LaunchModel::new(seq, rem);
        for n in 2..200 {
            let want = seq * (n as f64 - 2.0) + rem;
            assert!(close(total(&Shape::Flat, n, &m), want), "n={n} seq={seq} rem={rem}");
        }
    }
}

#[test]
fn chain_is_n_minus_1_times_rem() {
    for &(seq, rem) in &[(0.007, 0.172), (1.0, 10.0), (10.0, 1.0)] {
        let m = LaunchModel::new(seq, rem);
        for n in 1..200 {
            let want = (n as f64 - 1.0) * rem;
            assert!(close(total(&Shape::Chain, n, &m), want), "n={n}");
        }
    }
}

#[test]
fn binomial_by_hand() {
    // n = 8: 0 -> 1, 2, 4;  1 -> 3, 5;  2 -> 6;  3 -> 7.
    let t = Tree::binomial(8);
    assert_eq!(t.children(0), &[1, 2, 4]);
    assert_eq!(t.children(1), &[3, 5]);
    assert_eq!(t.children(2), &[6]);
    assert_eq!(t.children(3), &[7]);
    assert_eq!(t.depth(), 3);
    assert_eq!(t.max_fanout(), 3);
    // SEQ = 1, REM = 10: t1 = 10, t2 = 11, t4 = 12, t3 = 20, t5 = 21, t6 = 21, t7 = 30.
    let e = evaluate(&t, &LaunchModel::new(1.0, 10.0));
    assert_eq!(e.times, vec![0.0, 10.0, 11.0, 20.0, 12.0, 21.0, 21.0, 30.0]);
    assert_eq!(e.total, 30.0);
}

#[test]
fn kary2_by_hand() {
    // n = 7: 0 -> 1, 2;  1 -> 3, 4;  2 -> 5, 6.  SEQ = 1, REM = 10.
    let t = Tree::build(&Shape::Kary(2), 7, &LaunchModel::DEFAULT);
    assert_eq!(t.children(0), &[1, 2]);
    assert_eq!(t.children(2), &[5, 6]);
    let e = evaluate(&t, &LaunchModel::new(1.0, 10.0));
    assert_eq!(e.times, vec![0.0, 10.0, 11.0, 20.0, 21.0, 21.0, 22.0]);
    assert_eq!(e.total, 22.0);
    assert_eq!(t.depth(), 2);
}

#[test]
fn greedy_by_hand() {
    // SEQ = 1, REM = 2: first child of 0 at 2; then 0's 2nd child at 3 (vs 1's first at 4);
    // then 1's first child (opened before 0's third) at 4; then 0's third at 4.
    let m = LaunchModel::new(1.0, 2.0);
    let t = Tree::greedy(5, &m);
    assert_eq!(parents(&t), vec![None, Some(0), Some(0), Some(1), Some(0)]);
    assert_eq!(evaluate(&t, &m).times, vec![0.0, 2.0, 3.0, 4.0, 4.0]);
}

#[test]
fn concurrency_by_hand() {
    // Flat, 5 children, c = 2, SEQ = 1, REM = 10: starts 0,0,1,1,2.
    let m = LaunchModel::new(1.0, 10.0).with_slots(2);
    let e = evaluate(&Tree::flat(6), &m);
    assert_eq!(e.times, vec![0.0, 10.0, 10.0, 11.0, 11.0, 12.0]);
    assert_eq!(e.total, 12.0);
    // c = 3 on a chain changes nothing.
    let m3 = LaunchModel::new(1.0, 10.0).with_slots(3);
    assert_eq!(evaluate(&Tree::chain(4), &m3).total, 30.0);
    // kary:4, n = 9, c = 2, SEQ = 1, REM = 10: 0 -> 1..4 at 10,10,11,11; 1 -> 5..8 at 20,20,21,21.
    let e = evaluate(&Tree::kary(9, 4), &m);
    assert_eq!(e.times, vec![0.0, 10.0, 10.0, 11.0, 11.0, 20.0, 20.0, 21.0, 21.0]);
    // c = 1 is the base model exactly.
    let m1 = LaunchModel::new(1.0, 10.0).with_slots(1);
    assert_eq!(evaluate(&Tree::flat(6), &m1).times, vec![0.0, 10.0, 11.0, 12.0, 13.0, 14.0]);
    // slots = 0 reads as 1.
    assert_eq!(evaluate(&Tree::flat(6), &m1.with_slots(0)), evaluate(&Tree::flat(6), &m1));
}

#[test]
fn batching_by_hand() {
    // Flat, 5 children, b = 2, SEQ = 1, REM = 10: batch [0,1] starts 0,1 (up at 10, 11);
    // batch [2,3] starts at 11 (up at 21, 22); child 4 starts at 22 (up at 32).
    let m = LaunchModel::new(1.0, 10.0).with_batch(Some(2));
    let e = evaluate(&Tree::flat(6), &m);
    assert_eq!(e.times, vec![0.0, 10.0, 11.0, 21.0, 22.0, 32.0]);
    assert_eq!(e.total, 32.0);
    // REM < SEQ: the parent's own gap still applies, SEQ = 3, REM = 1, b = 2:
    // starts 0,3 | 6,9 | 12 -> up at 1,4,7,10,13 (same as unbatched).
    let m = LaunchModel::new(3.0, 1.0).with_batch(Some(2));
    let e = evaluate(&Tree::flat(6), &m);
    assert_eq!(e.times, vec![0.0, 1.0, 4.0, 7.0, 10.0, 13.0]);
    // Batching and lanes: flat, 7 children, c = 2, b = 3, SEQ = 1, REM = 10:
    // batch starts 0,0,1 (up 10,10,11); next batch at 1+10 = 11: 11,11,12 (up 21,21,22);
    // last batch at 12+10 = 22 (up 32).
    let m = LaunchModel::new(1.0, 10.0).with_slots(2).with_batch(Some(3));
    let e = evaluate(&Tree::flat(8), &m);
    assert_eq!(e.times, vec![0.0, 10.0, 10.0, 11.0, 21.0, 21.0, 22.0, 32.0]);
    // On a binary tree, b = 1: every launch waits for the previous child: 0 -> 1 at 10,
    // 2 at 20; 1 -> 3 at 20, 4 at 30; 2 -> 5 at 30, 6 at 40.
    let m = LaunchModel::new(1.0, 10.0).with_batch(Some(1));
    let e = evaluate(&Tree::kary(7, 2), &m);
    assert_eq!(e.times, vec![0.0, 10.0, 20.0, 20.0, 30.0, 30.0, 40.0]);
    // batch = Some(0) reads as no batching.
    let m0 = LaunchModel::new(1.0, 10.0).with_batch(Some(0));
    assert_eq!(evaluate(&Tree::flat(6), &m0).total, 14.0);
}

#[test]
fn greedy_batched_by_hand() {
    // b = 1, SEQ = 1, REM = 10: every position is "a placed node + 10", so greedy makes
    // a binomial-like tree: 1 at 10; then 0's 2nd and 1's 1st at 20 (0's opened first).
    let m = LaunchModel::new(1.0, 10.0).with_batch(Some(1));
    let t = Tree::greedy(4, &m);
    assert_eq!(parents(&t), vec![None, Some(0), Some(0), Some(1)]);
    assert_eq!(evaluate(&t, &m).times, vec![0.0, 10.0, 20.0, 20.0]);
}

// ---------------------------------------------------------------- structure

#[test]
fn small_and_empty_trees() {
    let m = LaunchModel::DEFAULT;
    for shape in Shape::candidates() {
        let t = Tree::build(&shape, 0, &m);
        assert!(t.is_empty());
        assert_eq!(t.depth(), 0);
        assert_eq!(t.max_fanout(), 0);
        let e = evaluate(&t, &m);
        assert_eq!((e.times.len(), e.total), (0, 0.0));

        let t = Tree::build(&shape, 1, &m);
        assert_eq!(t.len(), 1);
        assert_eq!(t.parent(0), None);
        assert!(t.children(0).is_empty());
        assert_eq!(t.subtree(0), vec![0]);
        assert_eq!(evaluate(&t, &m).total, 0.0);

        let t = Tree::build(&shape, 2, &m);
        assert_eq!(t.parent(1), Some(0));
        assert_eq!(evaluate(&t, &m).total, m.rem);
    }
    assert_eq!(Tree::kary(5, 0), Tree::chain(5));
}

#[test]
fn accessors_agree() {
    let m = LaunchModel::new(0.01, 0.1);
    for shape in Shape::candidates() {
        let n = 777;
        let t = Tree::build(&shape, n, &m);
        assert_eq!(t.len(), n);
        let mut seen = vec![0usize; n];
        for v in 0..n {
            for (i, &c) in t.children(v).iter().enumerate() {
                assert_eq!(t.parent(c), Some(v), "{shape}");
                assert!(c > v, "{shape}: parent id below child id");
                if i > 0 {
                    assert!(c > t.children(v)[i - 1]);
                }
                seen[c] += 1;
            }
        }
        assert_eq!(seen[0], 0);
        assert!(seen[1..].iter().all(|&s| s == 1), "{shape}");
        let mut pre = t.subtree(0);
        assert_eq!(pre[0], 0);
        pre.sort_unstable();
        assert_eq!(pre, (0..n).collect::<Vec<_>>());
        let depths = t.depths();
        assert_eq!(depths.iter().max().copied(), Some(t.depth()));
        let fan = (0..n).map(|v| t.children(v).len()).max();
        assert_eq!(fan, Some(t.max_fanout()));
    }
}

#[test]
fn subtree_is_preorder() {
    let t = Tree::kary(7, 2);
    assert_eq!(t.subtree(0), vec![0, 1, 3, 4, 2, 5, 6]);
    assert_eq!(t.subtree(2), vec![2, 5, 6]);
    assert_eq!(t.subtree(6), vec![6]);
}

#[test]
fn from_parents_checks_and_orders() {
    // Not topologically numbered: 0 -> 3 -> 1, 0 -> 2.
    let t = Tree::from_parents(&[None, Some(3), Some(0), Some(0)]).unwrap();
    assert_eq!(t.children(0), &[2, 3]);
    assert_eq!(t.depth(), 2);
    assert_eq!(t.depths(), vec![0, 2, 1, 1]);
    let e = evaluate(&t, &LaunchModel::new(1.0, 10.0));
    assert_eq!(e.times, vec![0.0, 21.0, 10.0, 11.0]);
    assert!(Tree::from_parents(&[None, Some(2), Some(1)]).is_err());
    assert!(Tree::from_parents(&[None, Some(1)]).is_err());
    assert!(Tree::from_parents(&[Some(0)]).is_err());
    assert!(Tree::from_parents(&[None, None]).is_err());
    assert!(Tree::from_parents(&[None, Some(5)]).is_err());
    assert!(Tree::from_parents(&[]).unwrap().is_empty());
}

#[test]
fn shape_parse_and_display() {
    for s in ["greedy", "flat", "chain", "binomial", "kary:1", "kary:16", "kary:512"] {
        let shape: Shape = s.parse().unwrap();
        assert_eq!(shape.to_string(), s);
    }
    assert_eq!("kary:8".parse::<Shape>(), Ok(Shape::Kary(8)));
    for bad in ["", "kary", "kary:", "kary:0", "kary:-1", "kary:x", "tree", "Greedy"] {
        let err = bad.parse::<Shape>().unwrap_err().to_string();
        assert!(!err.contains('\n') && !err.is_empty(), "{bad}: {err}");
    }
    assert!("kary:0".parse::<Shape>().unwrap_err().to_string().contains("k >= 1"));
    let names: Vec<String> = Shape::candidates().iter().map(|s| s.to_string()).collect();
    assert_eq!(names[..4], ["greedy", "flat", "chain", "binomial"]);
    assert_eq!(names.last().map(String::as_str), Some("kary:512"));
}

#[test]
fn model_parse() {
    let m: LaunchModel = "0.007,0.172".parse().unwrap();
    assert_eq!(m, LaunchModel::new(0.007, 0.172));
    assert_eq!(m.slots, 1);
    assert_eq!(m.batch, None);
    assert_eq!(" 1 , 2 ".parse::<LaunchModel>(), Ok(LaunchModel::new(1.0, 2.0)));
    for bad in ["", "1", "1,2,3", "a,1", "1,b", "-1,1", "1,-0.5", "nan,1", "1,inf"] {
        let err = bad.parse::<LaunchModel>().unwrap_err().to_string();
        assert!(!err.contains('\n') && !err.is_empty(), "{bad}: {err}");
    }
    assert!("-1,1".parse::<LaunchModel>().unwrap_err().to_string().contains("SEQ"));
    assert!("1,x".parse::<LaunchModel>().unwrap_err().to_string().contains("REM"));
    assert_eq!(LaunchModel::default(), LaunchModel::DEFAULT);
    assert!(LaunchModel::DEFAULT.validate().is_ok());
    assert!(LaunchModel::new(1.0, 1.0).with_slots(0).validate().is_err());
    assert!(LaunchModel::new(1.0, 1.0).with_batch(Some(0)).validate().is_err());
    let shown = LaunchModel::DEFAULT.to_string();
    assert_eq!(shown.parse::<LaunchModel>(), Ok(LaunchModel::DEFAULT));
}

#[test]
fn rank_shapes_sorted_greedy_first() {
    for &(seq, rem) in &[(0.007, 0.172), (0.007, 10.0), (1.0, 0.1)] {
        let m = LaunchModel::new(seq, rem);
        let r = rank_shapes(1000, &m);
        assert_eq!(r.len(), Shape::candidates().len());
        assert!(r.windows(2).all(|w| w[0].time <= w[1].time));
        assert_eq!(r[0].time, r.iter().find(|s| s.shape == "greedy").unwrap().time);
    }
    // SEQ > REM: flat is optimal and ties greedy; greedy is listed first on the tie.
    let r = rank_shapes(50, &LaunchModel::new(1.0, 0.1));
    assert_eq!(r[0].shape, "greedy");
}

// ---------------------------------------------------------------- greedy

fn models() -> Vec<LaunchModel> {
    let mut v = Vec::new();
    for &(seq, rem) in &[
        (0.007, 0.172),
        (1.0, 10.0),
        (10.0, 1.0),
        (1.0, 1.0),
        (1.0, 3.0),
        (0.0, 1.0),
        (1.0, 0.0),
        (0.1, 0.3),
        (0.3, 0.1),
    ] {
        for slots in [1, 2, 3] {
            for batch in [None, Some(1), Some(2), Some(5)] {
                v.push(LaunchModel::new(seq, rem).with_slots(slots).with_batch(batch));
            }
        }
    }
    v
}

#[test]
fn greedy_queues_match_the_heap_algorithm() {
    for m in models() {
        for n in [0, 1, 2, 3, 10, 100, 1000, 3001] {
            let fast = Tree::greedy(n, &m);
            let heap = greedy::reference::build(n, &m);
            assert_eq!(fast, heap, "n={n} model={m:?}");
        }
    }
}

#[test]
fn greedy_times_are_the_evaluator_times() {
    for m in models() {
        let (t, times) = greedy::build(2000, &m);
        let e = evaluate(&t, &m);
        assert_eq!(e.times, times, "{m:?}");
        // Placement order is launch-time order.
        assert!(times.windows(2).all(|w| w[0] <= w[1]));
    }
}

#[test]
fn greedy_is_deterministic() {
    let m = LaunchModel::new(1.0, 1.0);
    assert_eq!(Tree::greedy(5000, &m), Tree::greedy(5000, &m));
}

/// Every ordered rooted (plane) tree with `n` nodes, as parent arrays in preorder, whose
/// children come in increasing id = launch order. There are Catalan(n-1) of them.
fn plane_trees(n: usize) -> Vec<Vec<Option<usize>>> {
    fn rec(
        n: usize,
        parents: &mut Vec<Option<usize>>,
        stack: &mut Vec<usize>,
        out: &mut Vec<Vec<Option<usize>>>,
    ) {
        if parents.len() == n {
            out.push(parents.clone());
            return;
        }
        // Either add a child to the node on top of the stack…
        let top = *stack.last().expect("the root is never popped");
        let v = parents.len();
        parents.push(Some(top));
        stack.push(v);
        rec(n, parents, stack, out);
        stack.pop();
        parents.pop();
        // …or close the top node (never the root) and go back up.
        if stack.len() > 1 {
            let closed = stack.pop().expect("checked");
            rec(n, parents, stack, out);
            stack.push(closed);
        }
    }
    let mut out = Vec::new();
    if n == 0 {
        return out;
    }
    rec(n, &mut vec![None], &mut vec![0], &mut out);
    out
}

/// The shape of an ordered tree, independent of numbering: `(` children `)`.
fn shape_code(t: &Tree, v: usize) -> String {
    let inner: String = t.children(v).iter().map(|&c| shape_code(t, c)).collect();
    format!("({inner})")
}

#[test]
fn plane_tree_counts_are_catalan() {
    let counts: Vec<usize> = (1..=8).map(|n| plane_trees(n).len()).collect();
    assert_eq!(counts, vec![1, 1, 2, 5, 14, 42, 132, 429]);
    // All distinct shapes.
    let mut codes: Vec<String> =
        plane_trees(8).iter().map(|p| shape_code(&Tree::from_parents(p).unwrap(), 0)).collect();
    codes.sort();
    codes.dedup();
    assert_eq!(codes.len(), 429);
}

#[test]
fn greedy_is_optimal_over_all_plane_trees() {
    let pairs = [
        (0.007, 0.172),
        (1.0, 10.0),
        (10.0, 1.0),
        (1.0, 1.0),
        (1.0, 2.0),
        (2.0, 1.0),
        (0.3, 0.7),
        (0.0, 1.0),
        (1.0, 0.0),
    ];
    for n in 1..=8 {
        let trees: Vec<Tree> =
            plane_trees(n).iter().map(|p| Tree::from_parents(p).unwrap()).collect();
        for &(seq, rem) in &pairs {
            // c = 1 is what the issue asks; lanes and batches are covered too.
            for (slots, batch) in [(1, None), (2, None), (1, Some(2)), (3, Some(2))] {
                let m = LaunchModel::new(seq, rem).with_slots(slots).with_batch(batch);
                let g = total(&Shape::Greedy, n, &m);
                let best =
                    trees.iter().map(|t| evaluate(t, &m).total).fold(f64::INFINITY, f64::min);
                assert_eq!(g, best, "n={n} model={m:?}");
                // And greedy's own tree is one of the plane trees (up to numbering).
                let gt = shape_code(&Tree::build(&Shape::Greedy, n, &m), 0);
                assert!(trees.iter().any(|t| shape_code(t, 0) == gt));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn greedy_beats_every_shape(
        n in 1usize..=5000,
        seq in 0.0f64..1.0,
        rem in 0.0f64..5.0,
        slots in 1u32..=8,
        batch in prop::option::of(1u32..=20),
        k in 1u32..=600,
    ) {
        let m = LaunchModel::new(seq, rem).with_slots(slots).with_batch(batch);
        let g = total(&Shape::Greedy, n, &m);
        let mut shapes = Shape::candidates();
        shapes.push(Shape::Kary(k));
        for shape in &shapes[1..] {
            let t = total(shape, n, &m);
            prop_assert!(g <= t + EPS, "{shape}: greedy {g} > {t} (n={n}, {m:?})");
        }
    }

    #[test]
    fn comm_tree_caps_degree(
        n in 1usize..=3000,
        shape_ix in 0usize..13,
        cap in 0usize..=200,
    ) {
        let shape = Shape::candidates()[shape_ix].clone();
        let t = Tree::build(&shape, n, &LaunchModel::new(0.001, 1.0));
        let c = CommTree::from_launch(&t, cap);
        check_comm(&c, n, cap.max(3));
    }
}

// ---------------------------------------------------------------- comm tree

fn check_comm(c: &CommTree, n: usize, cap: usize) {
    assert_eq!(c.len(), n);
    if n == 0 {
        return;
    }
    assert_eq!(c.parent(0), None);
    for v in 0..n {
        assert!(c.degree(v) <= cap, "node {v} has degree {}", c.degree(v));
        for &k in c.children(v) {
            assert_eq!(c.parent(k), Some(v));
        }
        // Every node reaches the root (no cycles: at most n steps).
        let mut x = v;
        let mut steps = 0;
        while let Some(p) = c.parent(x) {
            x = p;
            steps += 1;
            assert!(steps <= n, "cycle through {v}");
        }
        assert_eq!(x, 0);
    }
    let edges: usize = (0..n).map(|v| c.children(v).len()).sum();
    assert_eq!(edges, n - 1);
}

#[test]
fn flat_1000_capped_at_128() {
    let t = Tree::flat(1000);
    assert_eq!(t.max_fanout(), 999);
    let c = CommTree::from_launch(&t, DEFAULT_MAX_CONN);
    check_comm(&c, 1000, 128);
    assert_eq!(c.max_degree(), 128);
    assert_eq!(c.depth(), 2);
    // The first 128 launch children stay under the root, in launch order.
    assert_eq!(c.children(0), (1..=128).collect::<Vec<_>>().as_slice());
    // Overflow fills the first kept children's spare capacity, in order.
    assert_eq!(c.children(1), (129..=255).collect::<Vec<_>>().as_slice());
    assert_eq!(c.parent(999), Some(7));
    assert_eq!(c, CommTree::from_launch(&t, 128));
}

#[test]
fn comm_tree_keeps_launch_edges_that_fit() {
    let m = LaunchModel::DEFAULT;
    let t = Tree::build(&Shape::Kary(16), 5000, &m);
    let c = CommTree::from_launch(&t, DEFAULT_MAX_CONN);
    for v in 0..t.len() {
        assert_eq!(c.parent(v), t.parent(v));
        assert_eq!(c.children(v), t.children(v));
    }
    // Huge flat launch: depth stays logarithmic in the cap.
    let t = Tree::flat(1_000_000);
    let c = CommTree::from_launch(&t, DEFAULT_MAX_CONN);
    assert!(c.max_degree() <= 128);
    assert!(c.depth() <= 3, "depth {}", c.depth());
    // A tiny cap still gives a valid tree.
    let c = CommTree::from_launch(&Tree::flat(100), 3);
    check_comm(&c, 100, 3);
    let c = CommTree::from_launch(&Tree::flat(0), 3);
    assert!(c.is_empty());
}

#[test]
fn from_parents_depth_in_topological_order() {
    let t = Tree::from_parents(&[None, Some(0), Some(1)]).expect("chain");
    assert_eq!(t.depth(), 2);
    let t = Tree::from_parents(&[None, Some(2), Some(0)]).expect("reordered chain");
    assert_eq!(t.depth(), 2);
}

// ---------------------------------------------------------------- shared cores, held setups

/// Every shape over `n` nodes, for the event-driven checks.
fn all_shapes() -> Vec<Shape> {
    vec![
        Shape::Greedy,
        Shape::Flat,
        Shape::Chain,
        Shape::Binomial,
        Shape::Kary(2),
        Shape::Kary(3),
        Shape::Kary(16),
    ]
}

#[test]
fn plenty_of_cores_is_the_base_model() {
    // With more cores than jobs every launch runs at full speed: the event-driven
    // evaluation gives the closed-form times, whatever part of REM is CPU.
    for (seq, rem) in [(0.007, 0.172), (1.0, 10.0), (10.0, 1.0), (0.0, 0.5)] {
        let base = LaunchModel::new(seq, rem);
        for slots in [1, 2, 3] {
            for batch in [None, Some(2), Some(5)] {
                let b = base.with_slots(slots).with_batch(batch);
                for cpu in [0.0, rem / 2.0, rem] {
                    let m = b.with_shared(1e6, cpu);
                    for shape in all_shapes() {
                        for n in [1, 2, 3, 7, 40] {
                            let t = Tree::build(&shape, n, &b);
                            let (want, got) = (evaluate(&t, &b), evaluate(&t, &m));
                            for v in 0..n {
                                assert!(
                                    (want.times[v] - got.times[v]).abs() < 1e-9,
                                    "{shape} n={n} v={v} {b:?} cpu={cpu}: {} vs {}",
                                    want.times[v],
                                    got.times[v]
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn processor_sharing_by_hand() {
    // Flat over 5 nodes on one core, SEQ 0, REM = W = 1: the 4 starts share the core from
    // t = 0 and all end at 4.
    let m = LaunchModel::new(0.0, 1.0).with_shared(1.0, 1.0);
    assert_eq!(evaluate(&Tree::flat(5), &m).times, vec![0.0, 4.0, 4.0, 4.0, 4.0]);
    // Two cores: 4 jobs at half speed, done at 2.
    let m = LaunchModel::new(0.0, 1.0).with_shared(2.0, 1.0);
    assert_eq!(evaluate(&Tree::flat(5), &m).times, vec![0.0, 2.0, 2.0, 2.0, 2.0]);
    // Half of REM is a delay: the CPU halves share the core (done at 2), then 0.5 more.
    let m = LaunchModel::new(0.0, 1.0).with_shared(1.0, 0.5);
    assert_eq!(evaluate(&Tree::flat(5), &m).times, vec![0.0, 2.5, 2.5, 2.5, 2.5]);
    // A chain on one core: the parent's SEQ and its child's start share it at first.
    // SEQ 0.2, W = REM = 1: both run at 1/2 until the lane is done at 0.4, then the start
    // alone: it ends at 0.4 + 0.8 = 1.2 = REM + SEQ per hop. The last node has no lane.
    let m = LaunchModel::new(0.2, 1.0).with_shared(1.0, 1.0);
    let e = evaluate(&Tree::chain(4), &m);
    for (v, want) in [(1, 1.2), (2, 2.4), (3, 3.6)] {
        assert!((e.times[v] - want).abs() < 1e-12, "{:?}", e.times);
    }
}

#[test]
fn shared_cores_cannot_beat_the_work() {
    // No tree launches n - 1 children faster than their CPU work over the cores.
    for (seq, rem, cores, cpu) in
        [(0.003, 0.17, 2.0, 0.06), (0.01, 0.2, 1.0, 0.2), (0.0, 0.1, 4.0, 0.1)]
    {
        let m = LaunchModel::new(seq, rem).with_shared(cores, cpu).with_hold(true);
        for shape in all_shapes() {
            for n in [2, 9, 33, 100] {
                let t = evaluate(&Tree::build(&shape, n, &m), &m).total;
                let work = (n - 1) as f64 * (cpu + seq) / cores;
                assert!(t >= work - 1e-9, "{shape} n={n}: {t} < {work}");
                // And it is never faster than the same tree with cores of its own.
                let own = LaunchModel::new(seq, rem).with_hold(true);
                let t_own = evaluate(&Tree::build(&shape, n, &m), &own).total;
                assert!(t >= t_own - 1e-9, "{shape} n={n}: {t} < {t_own}");
            }
        }
    }
}

#[test]
fn held_setups_by_hand() {
    // Flat root launching 3 children, SEQ 1, REM 1.5; node 1 launches one child (node 4).
    // Paper: 1 up at 1.5, launches 4 at once: 4 up at 3.0. Held: 1 gets its setup when the
    // root's last launch is out (at 3), so 4 is up at 4.5.
    let t = Tree::from_parents(&[None, Some(0), Some(0), Some(0), Some(1)]).expect("tree");
    let m = LaunchModel::new(1.0, 1.5);
    assert_eq!(evaluate(&t, &m).times, vec![0.0, 1.5, 2.5, 3.5, 3.0]);
    let e = evaluate(&t, &m.with_hold(true));
    assert_eq!(e.times, vec![0.0, 1.5, 2.5, 3.5, 4.5]);
    assert_eq!(e.total, 4.5);
    // With batches of 1 the root is done with each batch when it launches it... and waits
    // for the child: every setup is sent before the next launch, as without holding.
    let b = m.with_batch(Some(1));
    assert_eq!(evaluate(&t, &b), evaluate(&t, &b.with_hold(true)));
    // Holding changes nothing when a parent's launches are out before its first child is up.
    let quick = LaunchModel::new(0.1, 1.0);
    for shape in [Shape::Kary(2), Shape::Binomial, Shape::Chain] {
        let tree = Tree::build(&shape, 30, &quick);
        let (a, b) = (evaluate(&tree, &quick), evaluate(&tree, &quick.with_hold(true)));
        for v in 0..30 {
            assert!((a.times[v] - b.times[v]).abs() < 1e-9, "{shape} v={v}");
        }
    }
}

#[test]
fn greedy_on_shared_cores_is_no_worse_than_its_family() {
    // The shared-cores greedy picks, by the full model, among greedy trees for scaled REM:
    // never worse than the base greedy tree or the flat tree (both in that family) under it.
    for (seq, rem, cores, cpu) in
        [(0.0027, 0.158, 2.0, 0.059), (0.007, 0.3, 1.0, 0.1), (0.01, 0.05, 8.0, 0.04)]
    {
        for hold in [false, true] {
            let m = LaunchModel::new(seq, rem).with_shared(cores, cpu).with_hold(hold);
            let base = LaunchModel::new(seq, rem);
            for n in [2, 3, 17, 33, 129] {
                let g = evaluate(&Tree::greedy(n, &m), &m).total;
                let bg = evaluate(&Tree::greedy(n, &base), &m).total;
                let flat = evaluate(&Tree::flat(n), &m).total;
                assert!(g <= bg + 1e-12 && g <= flat + 1e-12, "n={n} {m:?}: {g} {bg} {flat}");
                // Deterministic.
                assert_eq!(Tree::greedy(n, &m), Tree::greedy(n, &m));
            }
        }
    }
}

#[test]
fn shared_model_parse_and_display() {
    let m: LaunchModel = "0.003,0.17,cores=2,cpu=0.06,hold=1".parse().expect("parse");
    assert_eq!(m, LaunchModel::new(0.003, 0.17).with_shared(2.0, 0.06).with_hold(true));
    assert_eq!(m.to_string(), "0.003,0.17,cores=2,cpu=0.06,hold=1");
    assert_eq!(m.to_string().parse::<LaunchModel>(), Ok(m));
    assert!(m.validate().is_ok());
    assert!("0.003,0.17,cpu=0.2".parse::<LaunchModel>().is_err(), "cpu above REM");
    assert!("0.003,0.17,cores=-1".parse::<LaunchModel>().is_err());
    assert!("0.003,0.17,bogus=1".parse::<LaunchModel>().is_err());
    assert!("0.003,0.17,hold=2".parse::<LaunchModel>().is_err());
    assert!(LaunchModel::new(0.1, 0.1).with_shared(1.0, 0.2).validate().is_err());
    assert_eq!("0.007,0.172".parse::<LaunchModel>(), Ok(LaunchModel::new(0.007, 0.172)));
}

#[test]
fn parents_loop_by_hand() {
    // Flat over 4 nodes, SEQ 0, REM 1, 0.5 s of the root's loop per hello: the three hellos
    // arrive at 1 and are handled one after the other.
    let m = LaunchModel::new(0.0, 1.0).with_accept(0.5);
    assert!(m.is_event_driven());
    assert_eq!(evaluate(&Tree::flat(4), &m).times, vec![0.0, 1.5, 2.0, 2.5]);
    // SEQ 1: hellos arrive 1 apart, no queue: each is up A after it arrived.
    let m = LaunchModel::new(1.0, 1.0).with_accept(0.5);
    assert_eq!(evaluate(&Tree::flat(4), &m).times, vec![0.0, 1.5, 2.5, 3.5]);
    // A chain: A per hop.
    assert_eq!(evaluate(&Tree::chain(3), &m).times, vec![0.0, 1.5, 3.0]);
    // On one shared core the loop's work shares it: flat over 3, SEQ 0, REM = W = 1,
    // A = 1: both starts end at 2 (half speed), then the two hellos one after the other.
    let m = LaunchModel::new(0.0, 1.0).with_shared(1.0, 1.0).with_accept(1.0);
    assert_eq!(evaluate(&Tree::flat(3), &m).times, vec![0.0, 3.0, 4.0]);
    let p: LaunchModel = "0,1,accept=0.5,hold=1".parse().expect("parse");
    assert_eq!(p, LaunchModel::new(0.0, 1.0).with_accept(0.5).with_hold(true));
    assert_eq!(p.to_string(), "0,1,accept=0.5,hold=1");
}

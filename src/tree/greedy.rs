//! The greedy launch tree (Goehner et al., Cluster 2012), built in O(n).
//!
//! Every placed node has exactly one free position: its next child slot (the first-child
//! slot of a node without children, the next-sibling slot of its last child otherwise). The
//! algorithm repeatedly places the next node in the free position with the smallest modeled
//! launch time. Keys are compared as `(time, sequence)` where the sequence number says when
//! the position opened (a parent's next-sibling slot opens just before the new node's
//! first-child slot), so ties are broken deterministically, in favour of older positions.
//!
//! Under the model a position's time is "time of a placed node + a constant", the constant
//! being one of `REM` (first child), `0`, `SEQ` or `max(SEQ, REM)` (next sibling; see
//! [`LaunchModel::sibling_gap`]), and nodes are placed in nondecreasing time. So the positions
//! of one kind open in nondecreasing `(time, sequence)` order, and four FIFO queues — one per
//! constant — do the job of the usual min-heap: the smallest free position is the smallest of
//! the four queue heads. This is exactly the heap algorithm (same keys, same tie-breaks, same
//! tree; a heap version is kept in the tests to check that) in O(n) instead of O(n log n).
//!
//! Why it is optimal: a tree with `n` nodes is a set of `n` positions closed under "parent
//! of" and "previous sibling of", and a position's time is never below those of its parent or
//! previous sibling (times are non-negative). Taking positions cheapest first from the
//! frontier therefore picks `n` positions whose largest time is the n-th smallest over all
//! positions, a lower bound for any tree. Positions' times are computed along the same
//! floating-point path as [`evaluate`](super::evaluate), so this holds bit for bit.

use super::model::{Gap, LaunchModel};
use super::shapes::{Tree, NO_PARENT};

/// Builds the greedy tree over `n` nodes; returns it with its modeled launch times (the same
/// values [`evaluate`](super::evaluate) gives).
pub(crate) fn build(n: usize, model: &LaunchModel) -> (Tree, Vec<f64>) {
    assert!(n < NO_PARENT as usize, "launch trees are limited to {} nodes", NO_PARENT - 1);
    let mut parent = vec![NO_PARENT; n];
    let mut times = vec![0.0f64; n];
    if n <= 1 {
        return (Tree::from_topo_parents(parent), times);
    }
    let rem = model.rem;
    let plain = model.is_plain();
    let gaps = [Gap::Zero, Gap::Seq, Gap::Batch];
    let gap_vals = gaps.map(|g| model.gap_value(g));
    // Next-sibling positions, one FIFO per gap kind. An entry is the node `u` just placed; the
    // position is `parent[u]`'s next child slot, at `times[u] + gap`, opened with sequence
    // number 2u - 1.
    let mut queues: [Vec<u32>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    let mut heads = [0usize; 3];
    // First-child positions open in placement order: node r's opens with sequence number 2r
    // at `times[r] + REM`; they are consumed in that order too, so a cursor is the queue.
    let mut r = 0usize;
    // Children placed so far per node (only needed for the gap rule beyond the plain model).
    let mut nkids: Vec<u32> = if plain { Vec::new() } else { vec![0; n] };
    if plain {
        queues[1].reserve(n);
    }

    for v in 1..n {
        // Source 3 = first-child cursor, 0..3 = the sibling queues.
        let mut src = 3usize;
        let mut best_key = f64::INFINITY;
        let mut best_seq = u64::MAX;
        if r < v {
            best_key = times[r] + rem;
            best_seq = 2 * r as u64;
        }
        for q in 0..3 {
            if let Some(&u) = queues[q].get(heads[q]) {
                let key = times[u as usize] + gap_vals[q];
                let seq = 2 * u64::from(u) - 1;
                if src == 3 && r >= v || key < best_key || (key == best_key && seq < best_seq) {
                    src = q;
                    best_key = key;
                    best_seq = seq;
                }
            }
        }
        let p = if src == 3 {
            r += 1;
            r - 1
        } else {
            let u = queues[src][heads[src]];
            heads[src] += 1;
            parent[u as usize] as usize
        };
        parent[v] = p as u32;
        times[v] = best_key;
        let gap = if plain {
            1
        } else {
            let k = nkids[p];
            nkids[p] = k + 1;
            match model.gap_kind(u64::from(k)) {
                Gap::Zero => 0,
                Gap::Seq => 1,
                Gap::Batch => 2,
            }
        };
        queues[gap].push(v as u32);
    }
    (Tree::from_topo_parents(parent), times)
}

/// The greedy tree on shared cores (`model.cores > 0`) or with held setups (`hold`).
/// Processor sharing (and holding) makes a
/// position's time depend on every launch in flight, so positions cannot be taken cheapest
/// first. What the load does, though, is stretch `REM` and `SEQ` by how many launches share
/// the cores — that is, change the effective `REM/SEQ`, the one figure that shapes a greedy
/// tree. So: the greedy trees of the base model for `REM` scaled by `2^j` (from chain-like
/// to flat), each evaluated with processor sharing; the fastest is taken (the unscaled one
/// on ties). O(n log² n).
pub(crate) fn build_shared(n: usize, model: &LaunchModel) -> Tree {
    let base = LaunchModel { cores: 0.0, cpu: 0.0, hold: false, accept: 0.0, ..*model };
    let mut best = build(n, &base).0;
    if n <= 2 {
        return best;
    }
    let mut best_t = super::shared::evaluate(&best, model).total;
    let unit = if model.rem > 0.0 { model.rem } else { model.seq };
    if unit <= 0.0 {
        return best;
    }
    // 2^-span .. 2^span with 2^span >= 2n: from REM << SEQ (chain) to REM >= n SEQ (flat),
    // whatever REM/SEQ is now.
    let span = (usize::BITS - n.leading_zeros()) as i32 + 1;
    let ratio = if model.seq > 0.0 { model.rem / model.seq } else { f64::INFINITY };
    let mut last_shape: Option<Vec<Option<usize>>> = None;
    for j in -span..=span {
        let f = 2f64.powi(j);
        // Scaling REM past the ratio that already makes a flat tree changes nothing.
        if ratio.is_finite() && ratio * f > 4.0 * n as f64 && j > 0 && f > 2.0 {
            break;
        }
        let m = LaunchModel { rem: unit * f, ..base };
        let tree = build(n, &m).0;
        let shape: Vec<Option<usize>> = (0..n).map(|v| tree.parent(v)).collect();
        if last_shape.as_ref() == Some(&shape) {
            continue;
        }
        last_shape = Some(shape);
        let t = super::shared::evaluate(&tree, model).total;
        if t < best_t {
            best = tree;
            best_t = t;
        }
    }
    best
}

#[cfg(test)]
pub(crate) mod reference {
    //! The textbook O(n log n) heap version, to check the queue version against.
    use std::cmp::{Ordering, Reverse};
    use std::collections::BinaryHeap;

    use super::super::model::LaunchModel;
    use super::super::shapes::{Tree, NO_PARENT};

    #[derive(PartialEq)]
    struct Key(f64, u64);
    impl Eq for Key {}
    impl PartialOrd for Key {
        fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
            Some(self.cmp(other))
        }
    }
    impl Ord for Key {
        fn cmp(&self, other: &Self) -> Ordering {
            self.0.total_cmp(&other.0).then(self.1.cmp(&other.1))
        }
    }

    pub(crate) fn build(n: usize, model: &LaunchModel) -> Tree {
        let mut parent = vec![NO_PARENT; n];
        let mut times = vec![0.0f64; n];
        let mut nkids = vec![0u64; n];
        // (key, seq) -> (parent node, time of its previous child or None for a first child)
        let mut heap = BinaryHeap::new();
        let mut seq = 0u64;
        if n > 1 {
            heap.push((Reverse(Key(model.rem, seq)), 0usize));
        }
        for v in 1..n {
            let Some((Reverse(Key(t, _)), p)) = heap.pop() else {
                break;
            };
            parent[v] = p as u32;
            times[v] = t;
            let k = nkids[p];
            nkids[p] += 1;
            seq += 1;
            heap.push((Reverse(Key(t + model.sibling_gap(k), seq)), p));
            seq += 1;
            heap.push((Reverse(Key(t + model.rem, seq)), v));
        }
        Tree::from_topo_parents(parent)
    }
}

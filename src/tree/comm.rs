//! The NLA communication tree: the launch tree with every process's connection count capped.
//!
//! A process's connections are its children plus its parent. However flat the launch tree,
//! [`CommTree::from_launch`] gives a tree over the same nodes, rooted at node 0, in which no
//! node has more than `max_conn` connections (the root up to `max_conn` children, every other
//! node up to `max_conn - 1`).
//!
//! # Construction
//!
//! Nodes are processed breadth first from the root. A node's *candidates* are its launch
//! children (in launch order) followed by the nodes its comm parent handed down to it. If
//! they fit under the cap they all become its comm children. Otherwise the first `cap` ones
//! (the earliest launched, which are up first) become its comm children, and the overflow is
//! handed down to them: first filling each kept child's spare capacity (cap minus its own
//! launch children), in order, then round-robin. An overflow node keeps its whole launch
//! subtree, re-parented under a launch sibling (or a node its parent adopted). Launch edges
//! that fit are kept, the result is deterministic, and the depth grows only by about
//! `log_{max_conn-1}` of the overflow: a flat launch of 1000 nodes capped at 128 gives a
//! comm tree of depth 2.

use super::shapes::{Tree, NO_PARENT};

/// The connection cap of the design (ScELA): at most ~128 open connections per process.
pub const DEFAULT_MAX_CONN: usize = 128;

/// A rooted tree over nodes `0..len()` (root 0) for NLA communication.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommTree {
    parent: Vec<u32>,
    start: Vec<u32>,
    count: Vec<u32>,
    kids: Vec<usize>,
}

impl CommTree {
    /// Derives the communication tree of `tree` with at most `max_conn` connections
    /// (children + parent) per node. `max_conn` below 3 is read as 3 (a node needs its parent
    /// and two children for the tree to fan out at all).
    pub fn from_launch(tree: &Tree, max_conn: usize) -> CommTree {
        let n = tree.len();
        let max_conn = max_conn.max(3);
        let mut parent = vec![NO_PARENT; n];
        let mut start = vec![0u32; n];
        let mut count = vec![0u32; n];
        let mut kids: Vec<usize> = Vec::with_capacity(n.saturating_sub(1));
        // Nodes handed down to a node by its comm parent (allocated only where needed).
        let mut adopted: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut cand: Vec<usize> = Vec::new();
        if n == 0 {
            return CommTree { parent, start, count, kids };
        }
        // `kids` doubles as the BFS queue: node order is root, then every node's comm
        // children in turn.
        let mut queue_head = 0usize;
        let mut x = 0usize;
        loop {
            let cap = if x == 0 { max_conn } else { max_conn - 1 };
            cand.clear();
            cand.extend_from_slice(tree.children(x));
            cand.append(&mut adopted[x]);
            adopted[x] = Vec::new();
            let keep = cand.len().min(cap);
            start[x] = kids.len() as u32;
            count[x] = keep as u32;
            for &c in &cand[..keep] {
                parent[c] = x as u32;
                kids.push(c);
            }
            let overflow = &cand[keep..];
            if !overflow.is_empty() {
                let kept = &cand[..keep];
                let mut rest = overflow.iter().copied();
                // Fill spare capacity first, in launch order.
                'fill: for &k in kept {
                    let spare = (max_conn - 1).saturating_sub(tree.children(k).len());
                    for _ in 0..spare {
                        match rest.next() {
                            Some(o) => adopted[k].push(o),
                            None => break 'fill,
                        }
                    }
                }
                // Then round-robin.
                for (i, o) in rest.enumerate() {
                    adopted[kept[i % keep]].push(o);
                }
            }
            if queue_head >= kids.len() {
                break;
            }
            x = kids[queue_head];
            queue_head += 1;
        }
        CommTree { parent, start, count, kids }
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.parent.len()
    }

    /// True for the empty tree.
    pub fn is_empty(&self) -> bool {
        self.parent.is_empty()
    }

    /// The comm parent of `node` (`None` for the root).
    ///
    /// # Panics
    ///
    /// If `node >= len()`.
    pub fn parent(&self, node: usize) -> Option<usize> {
        match self.parent[node] {
            NO_PARENT => None,
            p => Some(p as usize),
        }
    }

    /// The comm children of `node`: its launch children that fit, then adopted nodes.
    ///
    /// # Panics
    ///
    /// If `node >= len()`.
    pub fn children(&self, node: usize) -> &[usize] {
        let s = self.start[node] as usize;
        &self.kids[s..s + self.count[node] as usize]
    }

    /// Connections of `node`: children plus its parent.
    pub fn degree(&self, node: usize) -> usize {
        self.children(node).len() + usize::from(self.parent(node).is_some())
    }

    /// The largest [`degree`](Self::degree) of any node.
    pub fn max_degree(&self) -> usize {
        (0..self.len()).map(|v| self.degree(v)).max().unwrap_or(0)
    }

    /// The number of edges on the longest root-to-leaf path.
    pub fn depth(&self) -> usize {
        let mut d = vec![0usize; self.len()];
        let mut max = 0;
        // `kids` is in BFS order: parents come before their children.
        for &v in &self.kids {
            if let Some(p) = self.parent(v) {
                d[v] = d[p] + 1;
                max = max.max(d[v]);
            }
        }
        max
    }
}

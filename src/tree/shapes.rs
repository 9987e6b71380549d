//! Launch-tree shapes and the flat, vector-based [`Tree`] storage.

use std::fmt;
use std::str::FromStr;

use super::greedy;
use super::model::LaunchModel;

/// Marks the root in [`Tree`]'s parent array.
pub(crate) const NO_PARENT: u32 = u32::MAX;

/// A launch-tree shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shape {
    /// The greedy tree of Goehner et al.: optimal under the [`LaunchModel`] it is built for.
    Greedy,
    /// Every node launches up to `k` children, breadth first. `Kary(0)` is built as `Kary(1)`.
    Kary(u32),
    /// Binomial tree: in round `j` every node already up launches one child.
    Binomial,
    /// The root launches every other node (sequential launch).
    Flat,
    /// Every node launches exactly one child.
    Chain,
}

impl Shape {
    /// Every shape `libi-tree plan` compares: greedy, flat, chain, binomial and k-ary for
    /// k = 2, 4, 8, …, 512.
    pub fn candidates() -> Vec<Shape> {
        let mut v = vec![Shape::Greedy, Shape::Flat, Shape::Chain, Shape::Binomial];
        v.extend((1..=9).map(|e| Shape::Kary(1 << e)));
        v
    }
}

/// A tree shape that does not parse: the text (one line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    #[error("k-ary shape needs k >= 1, got kary:0")]
    KaryZero,
    #[error("k-ary shape needs a whole number k >= 1, got '{}'", .0.escape_debug())]
    KaryNumber(String),
    #[error(
        "unknown tree shape '{}' (expected greedy, kary:K, binomial, flat or chain)",
        .0.escape_debug()
    )]
    Unknown(String),
}

impl FromStr for Shape {
    type Err = ShapeError;

    /// `greedy`, `kary:K` (K ≥ 1), `binomial`, `flat` or `chain`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        match s {
            "greedy" => return Ok(Shape::Greedy),
            "binomial" => return Ok(Shape::Binomial),
            "flat" => return Ok(Shape::Flat),
            "chain" => return Ok(Shape::Chain),
            _ => {}
        }
        if let Some(k) = s.strip_prefix("kary:") {
            return match k.parse::<u32>() {
                Ok(0) => Err(ShapeError::KaryZero),
                Ok(k) => Ok(Shape::Kary(k)),
                Err(_) => Err(ShapeError::KaryNumber(s.to_string())),
            };
        }
        Err(ShapeError::Unknown(s.to_string()))
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shape::Greedy => f.write_str("greedy"),
            Shape::Kary(k) => write!(f, "kary:{k}"),
            Shape::Binomial => f.write_str("binomial"),
            Shape::Flat => f.write_str("flat"),
            Shape::Chain => f.write_str("chain"),
        }
    }
}

/// A parent array that is not a tree (see [`Tree::from_parents`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParentsError {
    #[error("too many nodes: {0}")]
    TooMany(usize),
    #[error("node 0 must be the root")]
    RootHasParent,
    /// A node other than the root without a parent.
    #[error("node {0} has no parent (only node 0 may)")]
    NoParent(usize),
    #[error("node {node} has parent {parent}, out of range")]
    OutOfRange { node: usize, parent: usize },
    #[error("the parent array has a cycle: not every node reaches node 0")]
    Cycle,
}

/// A rooted, ordered launch tree over nodes `0..len()`; node 0 is the root.
///
/// Storage is flat: one parent array and the children of all nodes in one array indexed by
/// CSR offsets, each node's children in launch order.
///
/// # Node numbering of the built shapes
///
/// Every shape [`Tree::build`] makes numbers nodes so that a parent's id is smaller than its
/// children's and a parent's children, in launch order, have increasing ids:
///
/// * `greedy`: placement order — the order in which the greedy algorithm places nodes, which
///   is nondecreasing modeled launch time (ties broken by when the position opened);
/// * `kary:K`: breadth first — the children of `i` are `K*i+1 ..= K*i+K`;
/// * `binomial`: round order — in round `j` node `i < 2^j` launches `i + 2^j`, so the
///   children of `i` are `i + 2^j` for every `2^j > i`;
/// * `flat`: `0` launches `1, 2, …`; `chain`: `i` launches `i + 1`.
///
/// Node counts are limited to `u32::MAX - 1`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tree {
    parent: Vec<u32>,
    offsets: Vec<u32>,
    kids: Vec<usize>,
    depth: usize,
    /// A parent-before-child order when node ids are not one already.
    order: Option<Vec<u32>>,
}

impl Tree {
    /// Builds the tree of `shape` over `n` nodes (`n = 0` gives an empty tree, `n = 1` a lone
    /// root). Only `Shape::Greedy` uses `model`.
    ///
    /// # Panics
    ///
    /// If `n >= u32::MAX`.
    pub fn build(shape: &Shape, n: usize, model: &LaunchModel) -> Tree {
        match shape {
            Shape::Greedy => Tree::greedy(n, model),
            Shape::Kary(k) => Tree::kary(n, *k),
            Shape::Binomial => Tree::binomial(n),
            Shape::Flat => Tree::kary(n, u32::MAX),
            Shape::Chain => Tree::kary(n, 1),
        }
    }

    /// The greedy tree for `model` (see [`Shape::Greedy`]).
    pub fn greedy(n: usize, model: &LaunchModel) -> Tree {
        if model.is_event_driven() {
            return greedy::build_shared(n, model);
        }
        greedy::build(n, model).0
    }

    /// The breadth-first k-ary tree (`k = 0` is read as 1).
    pub fn kary(n: usize, k: u32) -> Tree {
        check_len(n);
        // Node v > 0 has parent (v - 1) / k: runs of k equal parents, no division needed.
        let k = (k.max(1) as usize).min(n.max(1));
        let mut parent = Vec::with_capacity(n);
        if n > 0 {
            parent.push(NO_PARENT);
        }
        let mut p = 0u32;
        while parent.len() < n {
            let run = k.min(n - parent.len());
            parent.resize(parent.len() + run, p);
            p += 1;
        }
        Tree::from_topo_parents(parent)
    }

    /// The binomial tree.
    pub fn binomial(n: usize) -> Tree {
        check_len(n);
        // In round j node i < 2^j launches i + 2^j: the parent of v is v minus its top bit.
        let parent = (0..n as u32)
            .map(|v| if v == 0 { NO_PARENT } else { v & !(1u32 << (31 - v.leading_zeros())) })
            .collect();
        Tree::from_topo_parents(parent)
    }

    /// The flat tree: the root launches everything.
    pub fn flat(n: usize) -> Tree {
        Tree::kary(n, u32::MAX)
    }

    /// The chain.
    pub fn chain(n: usize) -> Tree {
        Tree::kary(n, 1)
    }

    /// Any ordered tree, from a parent array: `parents[0]` must be `None` (node 0 is the
    /// root), every other entry `Some(p)` with `p < parents.len()`, and every node must reach
    /// the root. A node's children are ordered (launched) by increasing id.
    pub fn from_parents(parents: &[Option<usize>]) -> Result<Tree, ParentsError> {
        let n = parents.len();
        if n >= NO_PARENT as usize {
            return Err(ParentsError::TooMany(n));
        }
        let mut parent = Vec::with_capacity(n);
        for (v, p) in parents.iter().enumerate() {
            match (v, p) {
                (0, None) => parent.push(NO_PARENT),
                (0, Some(_)) => return Err(ParentsError::RootHasParent),
                (_, None) => return Err(ParentsError::NoParent(v)),
                (_, Some(p)) if *p >= n => {
                    return Err(ParentsError::OutOfRange { node: v, parent: *p })
                }
                (_, Some(p)) => parent.push(*p as u32),
            }
        }
        let topo = parent.iter().enumerate().skip(1).all(|(v, &p)| (p as usize) < v);
        if topo {
            return Ok(Tree::from_topo_parents(parent));
        }
        let mut tree = Tree::from_parent_array(parent);
        let order = tree.bfs_order();
        if order.len() != n {
            return Err(ParentsError::Cycle);
        }
        tree.depth = depth_by(&tree.parent, order.iter().map(|&v| v as usize));
        tree.order = Some(order);
        Ok(tree)
    }

    /// For parent arrays with `parent[v] < v` for every `v > 0`.
    pub(crate) fn from_topo_parents(parent: Vec<u32>) -> Tree {
        debug_assert!(parent.iter().enumerate().skip(1).all(|(v, &p)| (p as usize) < v));
        let mut tree = Tree::from_parent_array(parent);
        tree.depth = depth_by(&tree.parent, 0..tree.parent.len());
        tree
    }

    /// CSR children (ascending id) from a parent array; depth and order left to the caller.
    fn from_parent_array(parent: Vec<u32>) -> Tree {
        let n = parent.len();
        // Counting sort by parent. Count node p's children in offsets[p + 2], prefix-sum so
        // that offsets[p + 1] is where p's children start, then use offsets[p + 1] as p's
        // fill cursor: once filled it is where p's children end, i.e. the final offsets.
        let mut offsets = vec![0u32; n + 2];
        for &p in parent.iter().skip(1) {
            offsets[p as usize + 2] += 1;
        }
        for i in 2..n + 2 {
            offsets[i] += offsets[i - 1];
        }
        let mut kids = vec![0usize; n.saturating_sub(1)];
        for (v, &p) in parent.iter().enumerate().skip(1) {
            let slot = &mut offsets[p as usize + 1];
            kids[*slot as usize] = v;
            *slot += 1;
        }
        offsets.truncate(n + 1);
        Tree { parent, offsets, kids, depth: 0, order: None }
    }

    fn bfs_order(&self) -> Vec<u32> {
        let n = self.len();
        let mut order = Vec::with_capacity(n);
        if n == 0 {
            return order;
        }
        order.push(0u32);
        let mut head = 0;
        while head < order.len() {
            let p = order[head] as usize;
            head += 1;
            order.extend(self.children(p).iter().map(|&c| c as u32));
            if order.len() > n {
                break;
            }
        }
        order
    }

    /// A parent-before-child visiting order, or `None` when that is `0..len()`.
    pub(crate) fn topo_order(&self) -> Option<&[u32]> {
        self.order.as_deref()
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.parent.len()
    }

    /// True for the empty tree.
    pub fn is_empty(&self) -> bool {
        self.parent.is_empty()
    }

    /// The parent of `node` (`None` for the root).
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

    /// The children of `node`, in launch order.
    ///
    /// # Panics
    ///
    /// If `node >= len()`.
    pub fn children(&self, node: usize) -> &[usize] {
        &self.kids[self.offsets[node] as usize..self.offsets[node + 1] as usize]
    }

    /// The number of edges on the longest root-to-leaf path (0 for a lone root).
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// The largest number of children of any node.
    pub fn max_fanout(&self) -> usize {
        self.offsets.windows(2).map(|w| (w[1] - w[0]) as usize).max().unwrap_or(0)
    }

    /// `node` and all its descendants, in preorder (children in launch order).
    ///
    /// # Panics
    ///
    /// If `node >= len()`.
    pub fn subtree(&self, node: usize) -> Vec<usize> {
        let mut out = Vec::new();
        let mut stack = vec![node];
        while let Some(v) = stack.pop() {
            out.push(v);
            stack.extend(self.children(v).iter().rev());
        }
        out
    }

    /// The depth of every node (edges from the root).
    pub fn depths(&self) -> Vec<usize> {
        let mut d = vec![0usize; self.len()];
        let mut visit = |v: usize| {
            if let Some(p) = self.parent(v) {
                d[v] = d[p] + 1;
            }
        };
        match self.topo_order() {
            Some(order) => order.iter().for_each(|&v| visit(v as usize)),
            None => (0..self.len()).for_each(&mut visit),
        }
        d
    }
}

fn check_len(n: usize) {
    assert!(n < NO_PARENT as usize, "launch trees are limited to {} nodes", NO_PARENT - 1);
}

/// Max depth, visiting nodes parent-first.
fn depth_by(parent: &[u32], order: impl Iterator<Item = usize>) -> usize {
    let mut d = vec![0u32; parent.len()];
    let mut max = 0;
    for v in order {
        let p = parent[v];
        if p != NO_PARENT {
            let dv = d[p as usize] + 1;
            d[v] = dv;
            max = max.max(dv);
        }
    }
    max as usize
}

//! Ranking every candidate shape by modeled launch time (what `libi-tree plan` prints).

use serde::Serialize;

use super::model::{evaluate, LaunchModel};
use super::shapes::{Shape, Tree};

/// One shape's figures under a model.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ShapeCost {
    /// The shape, spelled as [`Shape`]'s `Display` (`greedy`, `kary:16`, …).
    pub shape: String,
    /// Modeled launch time of the whole tree, seconds.
    pub time: f64,
    /// Edges on the longest root-to-leaf path.
    pub depth: usize,
    /// Largest number of children of one node.
    pub max_fanout: usize,
}

/// Builds and evaluates every shape of [`Shape::candidates`] over `n` nodes, sorted by
/// ascending modeled time (a stable sort: on ties, greedy comes first).
pub fn rank_shapes(n: usize, model: &LaunchModel) -> Vec<ShapeCost> {
    let mut out: Vec<ShapeCost> = Shape::candidates()
        .iter()
        .map(|shape| {
            let tree = Tree::build(shape, n, model);
            ShapeCost {
                shape: shape.to_string(),
                time: evaluate(&tree, model).total,
                depth: tree.depth(),
                max_fanout: tree.max_fanout(),
            }
        })
        .collect();
    out.sort_by(|a, b| a.time.total_cmp(&b.time));
    out
}

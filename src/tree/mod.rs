//! Launch trees and the launch model.
//!
//! * [`LaunchModel`] — the two constants of a machine room (`SEQ`, `REM`) plus the optional
//!   concurrent-launch (`slots`), batching (`batch`), shared-cores (`cores`, `cpu`),
//!   held-setup (`hold`) and parent's-loop (`accept`) extensions; the exact rules are in the
//!   [`model`] module docs (the last three are evaluated event by event, in `shared`).
//! * [`Tree`] — an ordered launch tree (node 0 is the root; in `libi-mpiexec` it is the front
//!   end and the other nodes are NLAs), built for a [`Shape`]: the optimal `greedy` tree, or
//!   `kary:K`, `binomial`, `flat`, `chain` for comparison. Node numbering is documented on
//!   [`Tree`].
//! * [`evaluate`] — modeled launch time of every node of any tree, and the total.
//! * [`CommTree`] — the communication tree derived from a launch tree, with no process
//!   holding more than `max_conn` connections.
//! * [`rank_shapes`] — every candidate shape ranked by modeled time.

pub mod comm;
mod greedy;
pub mod model;
pub mod plan;
pub mod shapes;
mod shared;

#[cfg(test)]
mod tests;

pub use comm::{CommTree, DEFAULT_MAX_CONN};
pub use model::{evaluate, Evaluation, LaunchModel, ModelError};
pub use plan::{rank_shapes, ShapeCost};
pub use shapes::{ParentsError, Shape, ShapeError, Tree};

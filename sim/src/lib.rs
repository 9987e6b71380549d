//! `libi-sim`: the real node cores of libi — every agent's [`libi_node::proto::node::NodeCore`] and the
//! front end's root core — in virtual time, on a discrete-event queue, with no sockets and
//! no processes. It answers what the real code does at sizes we cannot run: 10k or 100k
//! agents with millions of ranks, on one 2-core machine.
//!
//! * [`model`]: what launching, links, CPU and ranks cost ([`model::Costs`]);
//! * [`workload`]: what simulated ranks say (PMI-1 conversations recorded from MPICH, PMIx
//!   calls recorded from Open MPI 5);
//! * [`calibrate`]: the cost model fitted to real runs of this machine (`libi-sim calibrate`);
//! * [`cluster`]: the simulation itself, its faults and its measurements;
//! * [`memory`]: the memory a run will take, estimated before it starts;
//! * [`queue`]: the event queue (a radix heap);
//! * [`report`]: tables, JSON and the SVG plot.
#![forbid(unsafe_code)]

pub mod calibrate;
pub mod cluster;
pub mod memory;
pub mod model;
pub mod queue;
pub mod report;
pub mod workload;

pub use cluster::{Cluster, Config, Fault, Outcome};

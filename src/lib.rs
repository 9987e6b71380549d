//! libi: the job model, hosts, launch trees and the launch model, and the messages that travel
//! over the NLA tree. Pure code shared by `libi-mpiexec`, `libi-nla` and `libi-tree`; the
//! `libi-tree` tool itself and its report fitting (`calibrate`) are the `libi-tree` crate.

pub mod hosts;
pub mod job;
pub mod launch;
pub mod msg;
pub mod report;
pub mod slurm;
pub mod spawn;
pub mod text;
pub mod tree;

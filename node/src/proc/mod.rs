//! The processes a node starts, watches and ends.
//!
//! * [`start`]: how a rank process is started (environment, `PMI_FD`, process group,
//!   binding, limits), a vfork-style clone;
//! * [`bind`]: each local rank's cpu set and memory policy (`-bind-to`, `-map-by`);
//! * [`gpu`]: each local rank's GPUs (`-gpus-per-proc`, `-gpu-subdevs-per-proc`);
//! * [`reaper`]: exact cleanup (subreaper, claimed children, orphan reaping and sweep);
//! * [`stage`]: `--bcast`'s staged executables;
//! * [`scratch`]: an agent's own directories under `$TMPDIR`, swept after a killed agent;
//! * [`hwloc`]: the node's hwloc topology file for MPICH's ranks.

pub mod bind;
pub mod gpu;
pub mod hwloc;
pub mod reaper;
pub mod scratch;
pub mod stage;
pub mod start;

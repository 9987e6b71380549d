//! The drivers: descriptors and system calls, and nothing they decide themselves beyond
//! moving bytes (the decisions are [`crate::proto`]'s).
//!
//! * [`agent`]: the agent's event loop (`libi-nla`): its parent, children, ranks, PMGR
//!   port, signals, and the one reading of the clock per turn;
//! * [`tree`]: tree connections: listening, the pre-authentication pool, child links that
//!   never wait, launching children, connecting to the parent;
//! * [`rankio`]: the rank reactor (each rank's PMI socket, stdout, stderr and exit);
//! * [`uplink`]: rank output up the tree and stdin down to rank 0, bounded end to end;
//! * [`guard`]: what every listening port does about connections it cannot trust yet;
//! * [`peer`]: which local process holds the other end of a TCP connection (PMGR);
//! * [`pmix`]: the PMIx companion of a PMIx job (start, registration, its messages);
//! * [`singleton`]: serving an MPI process that started `mpiexec -pmi_args` itself.

pub mod agent;
pub mod guard;
pub mod peer;
pub mod pmix;
pub mod rankio;
pub mod singleton;
pub mod tree;
pub mod uplink;

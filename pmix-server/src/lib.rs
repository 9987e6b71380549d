//! libi-pmix: the PMIx side of a libi node, as a companion process of the agent.
//!
//! Open MPI 5 speaks only PMIx. Its ranks find a PMIx server through the environment that
//! `PMIx_server_setup_fork` writes (a rendezvous socket, a namespace, a rank) and ask it for
//! everything the job is: sizes, maps, local peers, session directories, and the fence and
//! direct-modex exchanges of `MPI_Init`. This crate serves that with OpenPMIx's own server
//! library (Debian's `libpmix-dev`, 4.2.2; the PMIx wire protocol is never written by hand
//! here) and maps each upcall of the library onto what the libi tree already does.
//!
//! # Why a companion process, and not libpmix inside the agent
//!
//! The agent (`libi-nla`) starts `libi-pmix` only for a PMIx job, on a socketpair, and
//! drives it with the messages of [`proto`]. The agent itself stays as it is:
//!
//! * **static and libpmix-free.** `libi-nla` is a static PIE (see `static-pie/`) that runs on
//!   nodes with nothing installed. libpmix is a shared library with plugins (`dlopen`),
//!   hwloc and libevent behind it; linking it would end the static agent, and a node without
//!   libpmix could not run even a PMI-1 job. With the companion only PMIx jobs need libpmix,
//!   and only on the nodes that run them.
//! * **isolated from libpmix's failures.** A crash or an abort inside libpmix (or in one of
//!   its plugins) ends the companion, which the agent sees as an EOF on the socketpair and
//!   reports as one job failure; the agent, its tree links and its other duties survive it.
//! * **single-threaded.** libpmix runs its own progress thread and calls the host's upcalls
//!   from it. Inside the agent those threads would share its memory and its loop, whose
//!   core is pure and single-threaded by design. Here they meet the rest only through a
//!   channel into the companion's main loop (the binary's `server` module): an upcall copies
//!   what it was given, queues it, wakes the loop and returns, and never blocks libpmix's
//!   progress thread; the completion (`cbfunc(status, data, …)`) is called when the agent's
//!   answer comes back.
//!
//! The cost is one more process per node for PMIx jobs (its start time and resident size are
//! in `docs/spec/pmix-companion.md`) and one local hop for each upcall.
//!
//! # Parts
//!
//! * [`proto`]: the messages between agent and companion (the spec is
//!   `docs/spec/pmix-companion.md`); [`frame`]: their framing (a 4-byte length and postcard).
//! * [`jobinfo`]: what a namespace registers (the job-level, application, node and process
//!   information Open MPI reads), built from a [`proto::NspaceInfo`]; pure, so it is tested
//!   without libpmix.
//! * The binary `libi-pmix` (`src/main.rs`, not part of this library): the hand-written
//!   binding of the few libpmix functions and structures it needs (`ffi.rs`, checked against
//!   the C headers by a unit test) and the server loop (`server.rs`).
//!
//! Building this crate needs `pkg-config pmix` (the build fails with one line saying so when
//! it is missing); only the binary links libpmix.
#![forbid(unsafe_code)]

pub mod frame;
pub mod jobinfo;
pub mod proto;

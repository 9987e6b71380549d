//! PMI wire protocols: codecs and per-connection server state machines.
//!
//! Pure code: no sockets, no processes, no timers. A driver (the NLA) feeds bytes read from a
//! rank's `PMI_FD` into a [`server::Connection`] and writes back the bytes it returns; anything
//! that needs node- or job-wide knowledge (KVS, fences, abort) comes out as an [`server::Action`]
//! for the driver to act on, and the answer goes back in through the `Connection`'s methods.
//!
//! * [`v1`]: PMI-1 ("simple") requests and replies — parse and encode both directions (the
//!   client direction is used by tests, benchmarks and later by our client libraries).
//! * [`v2`]: PMI-2 frames, requests and replies — both directions (used by the server and
//!   by the client libraries `libpmi2`).
//! * [`server`]: the per-connection server state machine (PMI-1 and PMI-2 on one socket).
//!
//! Wire facts come from `docs/spec/pmi-wire.md`; section numbers there are cited in the docs.
#![forbid(unsafe_code)]

pub mod server;
pub mod v1;
pub mod v2;

pub use server::{Action, ConnConfig, Connection, Eof, Phase};
pub use v1::{GetMiss, ParseError, Reply, Request, SpawnCmd};

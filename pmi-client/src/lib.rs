//! The client side of PMI shared by the two C libraries, `libpmi.so` (PMI-1, crate
//! `libpmi`) and `libpmi2.so` (PMI-2, crate `libpmi2`): both reach the process manager the
//! same way and cross the C boundary the same way, so that code lives here once.
//!
//! * [`transport`]: the client end of `PMI_FD` — blocking writes, PMI-1 reply lines and
//!   PMI-2 frames read with a carry-over buffer.
//! * [`cutil`]: C-boundary helpers — panics never cross into C, pointers are checked for
//!   null, strings are copied with their NUL within the caller's capacity.
//! * [`mapping`]: the node-local ranks of a process from `PMI_process_mapping`.
//! * [`spawn`]: a spawn request's C arrays read into the wire's commands, and the error
//!   codes written back.
//!
//! The wire codecs themselves are `pmi-wire`'s; this crate only moves bytes and C strings.
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod cutil;
pub mod mapping;
pub mod spawn;
pub mod transport;

pub use transport::Transport;

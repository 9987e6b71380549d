//! In-process servers for the client libraries' tests, so that each client is tested against
//! the real server-side state machines instead of canned replies, and so that the tests of
//! `libpmi`, `libpmi2`, `pmgr` and `pmgr-capi` share one copy of each server.
//!
//! * [`pmi`]: a one-rank PMI-1/PMI-2 server (pmi-wire's `Connection`) on a socketpair, for
//!   `libpmi` and `libpmi2`.
//! * [`pmgr`]: a PMGR_COLLECTIVE server of several "NLAs" on loopback TCP, for `pmgr`'s client
//!   and the C ABI of `pmgr-capi`.
//!
//! Dev-only (`publish = false`): these servers panic on their own setup failures, which is
//! what a test wants and what a library must not do.
#![forbid(unsafe_code)]

pub mod pmgr;
pub mod pmi;

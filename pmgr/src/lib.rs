//! PMGR collectives (MVAPICH-1 / LLNL pmgr_collective bootstrap protocol, version 8).
//!
//! * [`wire`] — per-connection server state machine over bytes (no I/O), the abort-record
//!   parser and the reply encoders.
//! * [`collective`] — one collective combined over a tree of serde-serializable partial
//!   aggregates: [`collective::Partial`] up, [`collective::resolve`] at the root,
//!   [`collective::Outcome`] (restricted per subtree) down, then the reply bytes per rank.
//! * [`client`] — the client library (`pmgr_init` … `pmgr_finalize` as a safe Rust API); the
//!   C ABI (`libpmgr_collective.so`) is the `pmgr-capi` crate in `capi/`.
//!
//! See `docs/spec/pmgr-wire.md`.
#![forbid(unsafe_code)]

pub mod client;
pub mod collective;
pub mod wire;

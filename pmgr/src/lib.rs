//! PMGR collectives (MVAPICH-1 / LLNL pmgr_collective bootstrap protocol).
//!
//! Placeholder crate: the protocol state machine and the client library arrive with the
//! PMGR issue. See `shared/spec/pmgr-wire.md`.

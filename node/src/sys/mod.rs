//! Small system helpers every layer may use: limits ([`rlimit`]), errno text
//! ([`errno`]), logging ([`log`]), CPU accounting ([`report_cpu`]).

pub mod errno;
pub mod log;
pub mod report_cpu;
pub mod rlimit;

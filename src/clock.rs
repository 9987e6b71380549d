//! The one monotonic clock of a process: seconds since its first reading. Every deadline of
//! the cores (`poll_timeout`, `handle_timeout`) is on it; each driver reads it once per turn
//! of its loop and passes it in. Wall time (`report::now`) is only for what is compared
//! across hosts: the launch reports.

use std::sync::OnceLock;
use std::time::Instant;

/// The clock's start, and the wall time then (seconds since the Unix epoch).
fn epoch() -> &'static (Instant, f64) {
    static EPOCH: OnceLock<(Instant, f64)> = OnceLock::new();
    EPOCH.get_or_init(|| (Instant::now(), crate::report::now()))
}

/// Seconds on this process's monotonic clock.
pub fn mono() -> f64 {
    epoch().0.elapsed().as_secs_f64()
}

/// The wall time (seconds since the Unix epoch, as `report::now`) of time `t` of this
/// process's monotonic clock, for the launch reports: what the cores stamped on the
/// monotonic clock is compared there with other hosts' stamps. Taken from the wall time at
/// the clock's first reading: a step of the wall clock since moves no stamp.
pub fn wall(t: f64) -> f64 {
    epoch().1 + t
}

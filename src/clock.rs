//! The one monotonic clock of a process: seconds since its first reading. Every deadline of
//! the cores (`poll_timeout`, `handle_timeout`) is on it; each driver reads it once per turn
//! of its loop and passes it in. Wall time (`report::now`) is only for what is compared
//! across hosts: the launch reports.

use std::sync::OnceLock;
use std::time::Instant;

/// Seconds on this process's monotonic clock.
pub fn mono() -> f64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_secs_f64()
}

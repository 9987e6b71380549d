//! The process's own CPU, for the launch report ([`libi::report::NodeReport`]).

/// The CPU this process has used so far (all its threads, not its children): user and
/// system seconds; zeros where that is unknown.
pub fn own_cpu() -> (f64, f64) {
    use nix::sys::resource::{getrusage, UsageWho};
    let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    match getrusage(UsageWho::RUSAGE_SELF) {
        Ok(u) => (secs(u.user_time()), secs(u.system_time())),
        Err(_) => (0.0, 0.0),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn own_cpu_counts_work_done() {
        let (u0, s0) = super::own_cpu();
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < std::time::Duration::from_millis(30) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let (u1, s1) = super::own_cpu();
        assert!(u1 + s1 > u0 + s0, "{u0}+{s0} -> {u1}+{s1}");
    }
}

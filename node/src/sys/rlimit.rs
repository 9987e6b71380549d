//! Limits of the processes we start: the soft limit on open files the job was started with
//! (raised for ourselves, given back to ranks and launchers), and how many processes this
//! machine lets this user run.

/// Carries the soft limit on open files the job was started with from the front end to the
/// NLAs it starts itself (fork launcher) and to launchers that pass the environment on (srun).
pub const NOFILE_ENV: &str = "LIBI_NOFILE_SOFT";

/// The soft limit on open files the job's processes get (see [`raise_fd_limit`]).
static JOB_NOFILE: std::sync::OnceLock<libc::rlim_t> = std::sync::OnceLock::new();

/// Raise the soft limit on open files to the hard limit: an NLA holds a few descriptors per
/// local rank and one per child; the front end one per child. The limit the user set is
/// remembered ([`NOFILE_ENV`] when a parent passed it on, else our own at start): ranks and
/// launchers get it back ([`job_fd_limit`]), as under Hydra, which does not raise it.
pub fn raise_fd_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit on a valid struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return;
    }
    let job = std::env::var(NOFILE_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<libc::rlim_t>().ok())
        .map_or(lim.rlim_cur, |v| v.min(lim.rlim_max));
    let _ = JOB_NOFILE.set(job);
    if lim.rlim_cur < lim.rlim_max {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: setrlimit on a valid struct.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
    }
}

/// The limit on open files to give a process we start (soft, hard), when it differs from
/// ours: the soft limit the job was started with, under our hard limit.
pub fn job_fd_limit() -> Option<libc::rlimit> {
    let job = *JOB_NOFILE.get()?;
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit on a valid struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return None;
    }
    (job < lim.rlim_cur).then_some(libc::rlimit { rlim_cur: job, rlim_max: lim.rlim_max })
}

/// The most processes this machine lets this user run at once, and what sets it: the
/// kernel's `pid_max` and `threads-max`, and `RLIMIT_NPROC` (`ulimit -u`) for a user other
/// than root (whom it does not bind). `None` if none of them can be read.
pub fn process_limit() -> Option<(u64, &'static str)> {
    let read = |p: &str| std::fs::read_to_string(p).ok()?.trim().parse::<u64>().ok();
    let mut limits = vec![
        (read("/proc/sys/kernel/pid_max"), "kernel.pid_max"),
        (read("/proc/sys/kernel/threads-max"), "kernel.threads-max"),
    ];
    if !nix::unistd::geteuid().is_root() {
        let nproc = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NPROC)
            .ok()
            .map(|(soft, _)| soft)
            .filter(|&s| s != nix::sys::resource::RLIM_INFINITY);
        limits.push((nproc, "the limit on processes, ulimit -u"));
    }
    limits.into_iter().filter_map(|(n, what)| Some((n?, what))).min_by_key(|l| l.0)
}

/// More ranks than a machine lets us run: how many, where, the limit and which it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{ranks} ranks on {here} are more processes than it lets us run ({max}, {what})")]
pub struct TooManyRanks {
    pub ranks: usize,
    /// The machine, for the message ("this machine", a host name).
    pub here: String,
    pub max: u64,
    /// Which limit ([`process_limit`]'s name of it).
    pub what: &'static str,
}

/// Whether `n` ranks fit on this machine ([`process_limit`]): if not, why.
pub fn check_rank_count(n: usize, here: &str) -> Result<(), TooManyRanks> {
    match process_limit() {
        Some((max, what)) if n as u64 > max => {
            Err(TooManyRanks { ranks: n, here: here.to_string(), max, what })
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_many_ranks_says_where_and_which_limit() {
        let e = TooManyRanks {
            ranks: 5000,
            here: "this machine".into(),
            max: 4096,
            what: "the limit on processes, ulimit -u",
        };
        assert_eq!(
            e.to_string(),
            "5000 ranks on this machine are more processes than it lets us run (4096, the \
             limit on processes, ulimit -u)"
        );
        // Ranks within every limit pass.
        assert_eq!(check_rank_count(1, "h"), Ok(()));
    }
}

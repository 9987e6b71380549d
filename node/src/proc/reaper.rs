//! Exact cleanup: the NLA signals only processes it can prove belong to the job.
//!
//! * The NLA is a child subreaper ([`become_subreaper`]): whatever a rank leaves behind —
//!   its background children once it exits, a daemon it detached with `setsid` and a double
//!   fork — is re-parented to the NLA, not to init. A child of ours cannot change its pid
//!   before we reap it, so signalling it by pid is exact.
//! * Children that somebody waits for by pid (ranks, launchers, the NLAs of spawned groups)
//!   are *claimed* in a registry ([`spawn_claimed`], [`Claims::claim`]); everything else
//!   that is our child is an orphan of the job. Orphans are reaped as they die
//!   ([`spawn_orphan_reaper`], on SIGCHLD) and, when the NLA is done, killed and reaped until
//!   none is left ([`sweep`]).
//! * A rank's exit is learnt without reaping it ([`peek`]); the driver reaps it ([`reap`])
//!   only after it marked the rank ended, so a signal to the rank's process group is sent only
//!   while its leader is still unreaped (its pid, hence its group id, cannot be reused).

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::collections::HashSet;
use std::io;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tracing::{debug, warn};

/// Children of this process that somebody waits for by pid.
static CLAIMED: Mutex<Option<HashSet<i32>>> = Mutex::new(None);

/// How long the final [`sweep`] may take (a killed process stuck in the kernel is given up).
const SWEEP_LIMIT: Duration = Duration::from_secs(3);
/// SIGCHLDs are coalesced for this long before orphans are reaped.
const REAP_DELAY: Duration = Duration::from_millis(20);

/// The registry of claimed children, locked. Hold it across the creation of a child and its
/// [`Claims::claim`], so the orphan reaper never sees the child unclaimed.
pub struct Claims(MutexGuard<'static, Option<HashSet<i32>>>);

impl Claims {
    pub fn claim(&mut self, pid: i32) {
        self.0.get_or_insert_with(HashSet::new).insert(pid);
    }

    pub fn release(&mut self, pid: i32) {
        if let Some(s) = self.0.as_mut() {
            s.remove(&pid);
        }
    }

    pub fn contains(&self, pid: i32) -> bool {
        self.0.as_ref().is_some_and(|s| s.contains(&pid))
    }
}

pub fn claims() -> Claims {
    Claims(CLAIMED.lock().unwrap_or_else(|p| p.into_inner()))
}

/// Our child `pid` is waited for elsewhere no longer (it was reaped there).
pub fn release(pid: i32) {
    claims().release(pid);
}

/// Is `pid` a claimed child (started by us on purpose and not reaped yet)?
pub fn is_claimed(pid: i32) -> bool {
    claims().contains(pid)
}

/// Start `cmd` and claim the child: its waiter must [`release`] it after reaping.
pub fn spawn_claimed(cmd: &mut tokio::process::Command) -> io::Result<tokio::process::Child> {
    let mut claims = claims();
    let child = cmd.spawn()?;
    if let Some(pid) = child.id() {
        claims.claim(pid as i32);
    }
    Ok(child)
}

/// Make this process the reaper of its descendants' orphans.
pub fn become_subreaper() {
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        warn!("cannot become a child subreaper ({e}): daemons of ranks may outlive the job");
    }
}

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Exited(i32),
    Signaled(i32),
}

/// Has child `pid` ended? Learnt without reaping it (`WNOWAIT`): the pid stays ours.
/// `Ok(None)` while it runs.
pub fn peek(pid: i32) -> io::Result<Option<Exit>> {
    // SAFETY: waitid into a zeroed siginfo; raw libc because nix's `WaitStatus` cannot hold
    // a real-time signal, which a rank may well die of.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        // __WALL: ranks are started with no exit signal (see `spawn::start_rank`).
        let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT | libc::__WALL;
        if libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, flags) < 0 {
            return Err(io::Error::last_os_error());
        }
        if info.si_pid() == 0 {
            return Ok(None);
        }
        Ok(Some(match info.si_code {
            libc::CLD_EXITED => Exit::Exited(info.si_status()),
            _ => Exit::Signaled(info.si_status()),
        }))
    }
}

/// Is child `pid` still running (not ended, or not our child any more)?
pub fn running(pid: i32) -> bool {
    matches!(peek(pid), Ok(None))
}

/// Reap claimed child `pid` and release it. Called once the driver is done with it: its
/// exit was seen with [`peek`]. Should it still run (its wait failed), its process group is
/// killed first — its pid is still ours, so the group is.
pub fn reap(pid: i32) {
    let mut claims = claims();
    let p = Pid::from_raw(pid);
    // __WALL: a rank that failed before its exec ends with no exit signal (see
    // `spawn::start_rank`).
    if matches!(
        waitpid(p, Some(WaitPidFlag::WNOHANG | WaitPidFlag::__WALL)),
        Ok(WaitStatus::StillAlive)
    ) {
        let _ = kill(Pid::from_raw(-pid), Signal::SIGKILL);
        let _ = waitpid(p, Some(WaitPidFlag::__WALL));
    }
    claims.release(pid);
}

/// Our children (a thread-group id each), from `/proc/self/task/*/children` where the kernel
/// has it, else by scanning every process's parent.
fn children() -> Vec<i32> {
    let me = std::process::id() as i32;
    let mut out = Vec::new();
    let tasks = std::fs::read_dir("/proc/self/task").into_iter().flatten().flatten();
    let mut have_children_files = false;
    for t in tasks {
        if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
            have_children_files = true;
            out.extend(s.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
        }
    }
    if have_children_files {
        return out;
    }
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else { continue };
        // "pid (comm) state ppid ...": comm may hold anything, so start after its last ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        if ppid == Some(me) {
            out.push(pid);
        }
    }
    out
}

/// Reap every orphan that has ended (non-blocking). Returns how many were reaped.
pub fn reap_orphans() -> usize {
    let claims = claims();
    let mut n = 0;
    // Cheap path: the first ended child, as long as it is an orphan.
    loop {
        // SAFETY: as in `peek`, for any child.
        let first = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
            if libc::waitid(libc::P_ALL, 0, &mut info, flags) < 0 {
                return n;
            }
            info.si_pid()
        };
        if first == 0 {
            return n;
        }
        if claims.contains(first) {
            break;
        }
        let _ = waitpid(Pid::from_raw(first), Some(WaitPidFlag::WNOHANG));
        n += 1;
    }
    // A claimed child ended first (its waiter has not reaped it yet): look at each child.
    for pid in children().into_iter().filter(|p| !claims.contains(*p)) {
        if matches!(
            waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)),
            Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..))
        ) {
            n += 1;
        }
    }
    n
}

/// Reap orphans as they die, for as long as the runtime runs.
pub fn spawn_orphan_reaper() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut sigchld = match signal(SignalKind::child()) {
        Ok(s) => s,
        Err(e) => {
            warn!("cannot watch SIGCHLD ({e}): orphans are reaped when the job ends");
            return;
        }
    };
    tokio::spawn(async move {
        while sigchld.recv().await.is_some() {
            tokio::time::sleep(REAP_DELAY).await;
            let n = reap_orphans();
            if n > 0 {
                debug!(n, "reaped orphans");
            }
        }
    });
}

/// The job is over here: kill every orphan by pid and reap it, until none is left (an
/// orphan's own children become ours when it dies). Claimed children are left alone.
/// Returns how many were swept.
pub fn sweep() -> usize {
    sweep_but(|_| false)
}

/// [`sweep`], leaving alone the children for which `spare` is true as well.
fn sweep_but(spare: impl Fn(i32) -> bool) -> usize {
    let deadline = Instant::now() + SWEEP_LIMIT;
    let mut swept = 0;
    loop {
        let claims = claims();
        let orphans: Vec<i32> =
            children().into_iter().filter(|p| !claims.contains(*p) && !spare(*p)).collect();
        drop(claims);
        if orphans.is_empty() {
            return swept;
        }
        for &pid in &orphans {
            // Our child, not reaped yet: this pid is exactly that process.
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            swept += 1;
        }
        for &pid in &orphans {
            loop {
                match waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)) {
                    Ok(WaitStatus::StillAlive) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(2))
                    }
                    Ok(WaitStatus::StillAlive) => {
                        warn!("process {pid} left by the job does not die; giving up on it");
                        return swept;
                    }
                    _ => break,
                }
            }
        }
    }
}

/// The signals a warden passes on to its agent (the agent's own reaction to each is kept:
/// SIGTERM and SIGHUP are handled there, the rest end it).
const WARDEN_FORWARDS: [Signal; 7] = [
    Signal::SIGHUP,
    Signal::SIGINT,
    Signal::SIGQUIT,
    Signal::SIGTERM,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGALRM,
];

/// Keep a warden over this agent: for an NLA whose parent is not ours (started by ssh or
/// rsh), so that no subreaper of the job is above it. Should the agent die without
/// cleaning up (SIGKILL, the OOM killer), its ranks die with it (their parent-death signal)
/// but what they started in the background would be re-parented to init, out of anybody's
/// reach. So the process forks here: the parent becomes a child subreaper that only waits
/// (the warden), and the child returns and is the agent. When the agent ends, whatever the
/// ranks left that was re-parented to the warden is killed by pid ([`sweep`]) and the warden
/// exits as the agent did (the same code, or the same signal). The NLAs of spawned process
/// groups the agent started are spared: they outlive it by design. Signals sent to the
/// warden are passed on to the agent; should the warden be killed, the agent gets SIGTERM
/// (its parent-death signal), as an agent started by the fork launcher does.
///
/// Call first thing, while this process has one thread. Should the fork fail, the agent
/// runs without a warden (said once).
pub fn fork_warden() {
    use nix::sys::signal::{SigSet, SigmaskHow};
    use nix::unistd::{fork, getpid, ForkResult};
    if nix::sys::prctl::set_child_subreaper(true).is_err() {
        return;
    }
    let warden = getpid();
    // SIGCHLD ignored by whoever started us would reap the agent unseen (and never wake us).
    // SAFETY: the default action, set while this process has one thread.
    unsafe {
        let _ = nix::sys::signal::signal(Signal::SIGCHLD, nix::sys::signal::SigHandler::SigDfl);
    }
    let mut set = SigSet::empty();
    for s in WARDEN_FORWARDS.into_iter().chain([Signal::SIGCHLD]) {
        set.add(s);
    }
    // Blocked across the fork: the warden takes them with sigwait, the agent restores its mask.
    let mut old = SigSet::empty();
    if nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&set), Some(&mut old)).is_err() {
        let _ = nix::sys::prctl::set_child_subreaper(false);
        return;
    }
    // SAFETY: one thread (see above): the child may run any code.
    match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
            // SAFETY: prctl and getppid only set and read attributes of this process.
            let orphaned = unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong, 0, 0, 0);
                libc::getppid() != warden.as_raw()
            };
            if orphaned {
                // The warden died before we could ask (its parent-death signal is ours now).
                eprintln!("libi-nla: its warden process died at its start");
                std::process::exit(1);
            }
        }
        Ok(ForkResult::Parent { child }) => watch(child, &set),
        Err(e) => {
            let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
            let _ = nix::sys::prctl::set_child_subreaper(false);
            warn!("cannot fork a warden ({e}): should this agent be killed, what its ranks started in the background is left to init");
        }
    }
}

/// The warden's life: pass signals on to `agent`, and once it ended, kill and reap what it
/// left us, then end as it did.
fn watch(agent: Pid, set: &nix::sys::signal::SigSet) -> ! {
    let end = loop {
        match set.wait() {
            Ok(Signal::SIGCHLD) => {}
            Ok(sig) => {
                // Our child, not reaped yet: the pid is the agent's.
                let _ = kill(agent, sig);
                continue;
            }
            Err(_) => {}
        }
        // Reap the agent when it ended (no other child is ours while it lives: its own
        // orphans go to it, a subreaper too).
        match waitpid(agent, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(_, code)) => break Exit::Exited(code),
            Ok(WaitStatus::Signaled(_, sig, _)) => break Exit::Signaled(sig as i32),
            Err(nix::errno::Errno::ECHILD) => break Exit::Exited(1),
            _ => {}
        }
    };
    // Every rank starts a session of its own, so what the ranks left behind is in another
    // session than ours. A child in ours was started by the agent itself: the NLA of a
    // spawned process group, which outlives the agent by design (its group is the front
    // end's to end), or a launcher, which dies with the agent on its own.
    let ours = nix::unistd::getsid(None).ok();
    let swept = sweep_but(|pid| nix::unistd::getsid(Some(Pid::from_raw(pid))).ok() == ours);
    if swept > 0 {
        debug!(swept, "killed what the ranks of an agent that died left behind");
    }
    match end {
        Exit::Exited(code) => std::process::exit(code),
        Exit::Signaled(sig) => {
            if let Ok(sig) = Signal::try_from(sig) {
                // SAFETY: back to the default action, then the same end as the agent's.
                unsafe {
                    let _ = nix::sys::signal::signal(sig, nix::sys::signal::SigHandler::SigDfl);
                }
                let mut only = nix::sys::signal::SigSet::empty();
                only.add(sig);
                let _ = kill(nix::unistd::getpid(), sig);
                let _ = only.thread_unblock();
            }
            std::process::exit(128 + sig)
        }
    }
}

//! What every listening port of ours does about connections it cannot trust yet: a cap on
//! the connections still being authenticated, accept errors that back off instead of ending
//! the port, and refusals logged as one line, then one summary line per interval.

use std::collections::BTreeMap;
use std::io;
use std::sync::Mutex;
use std::time::Duration;
use tracing::warn;

/// Connections accepted and not yet authenticated, per port; more are closed at once.
pub const MAX_PENDING: usize = 64;
/// Refusals after the first are summed up this often.
pub const REJECT_INTERVAL: Duration = Duration::from_secs(5);

/// Refused connections of one kind of port: the first is logged at once, the next ones are
/// counted and logged as one summary line per [`REJECT_INTERVAL`] (and by [`flush_rejections`]).
pub struct RejectLog {
    what: &'static str,
    inner: Mutex<Window>,
    /// The job is being torn down here: connections that close before they say anything
    /// are the NLAs whose launches the teardown killed, and are logged at debug level only.
    tearing_down: std::sync::atomic::AtomicBool,
}

/// What a connection that closed before its first message is refused for.
pub const CLOSED_EARLY: &str = "closed before hello";

#[derive(Default)]
struct Window {
    open: bool,
    count: u64,
    /// Refusals by reason (the reasons are few and fixed; the peer's address is not part).
    reasons: BTreeMap<String, u64>,
}

/// Refused tree connections (front end and NLAs).
pub static TREE_REJECTS: RejectLog = RejectLog::new("tree connection");
/// Refused PMGR connections (NLAs with `--pmgr`).
pub static PMGR_REJECTS: RejectLog = RejectLog::new("PMGR connection");

impl RejectLog {
    pub const fn new(what: &'static str) -> RejectLog {
        RejectLog {
            what,
            inner: Mutex::new(Window { open: false, count: 0, reasons: BTreeMap::new() }),
            tearing_down: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The job is being torn down: launches in flight are killed, and their NLAs' half-made
    /// connections are expected (see [`RejectLog::tearing_down`]).
    pub fn tearing_down(&self) {
        self.tearing_down.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Window> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A connection from `peer` was refused because of `why`. Call from within the runtime.
    pub fn note(&'static self, peer: &str, why: &str) {
        if why == CLOSED_EARLY && self.tearing_down.load(std::sync::atomic::Ordering::Relaxed) {
            tracing::debug!("refused a {} from {peer}: {why} (tearing down)", self.what);
            return;
        }
        let mut w = self.lock();
        if w.open {
            w.count += 1;
            *w.reasons.entry(why.to_string()).or_default() += 1;
            return;
        }
        w.open = true;
        drop(w);
        warn!("refused a {} from {peer}: {why}", self.what);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(REJECT_INTERVAL).await;
                if !self.summary(true) {
                    return;
                }
            }
        });
    }

    /// Log the refusals counted since the last line; `keep_open`: the window goes on (if
    /// there was something to log). Returns whether there was.
    fn summary(&self, keep_open: bool) -> bool {
        let mut w = self.lock();
        if w.count == 0 {
            w.open = false;
            return false;
        }
        let count = std::mem::take(&mut w.count);
        let reasons = std::mem::take(&mut w.reasons);
        w.open = keep_open;
        drop(w);
        let mut by: Vec<(String, u64)> = reasons.into_iter().collect();
        by.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
        let mut list: Vec<String> = by.iter().take(3).map(|(r, n)| format!("{n} {r}")).collect();
        if by.len() > 3 {
            list.push("other reasons".into());
        }
        let s = if count == 1 { "" } else { "s" };
        warn!("refused {count} more {}{s} ({})", self.what, list.join(", "));
        true
    }

    /// Log what is counted and not logged yet (at exit).
    pub fn flush(&self) {
        self.summary(false);
    }
}

/// Log the refusals not logged yet, of every kind.
pub fn flush_rejections() {
    TREE_REJECTS.flush();
    PMGR_REJECTS.flush();
}

/// After a failed `accept` (out of descriptors, out of memory, a connection reset before it
/// was accepted): wait before the next one, 10 ms doubling up to 1 s while accepts keep
/// failing. Only the first error of the port is logged.
#[derive(Default)]
pub struct AcceptBackoff {
    delay: Option<Duration>,
    logged: bool,
}

impl AcceptBackoff {
    pub async fn failed(&mut self, port: &str, e: &io::Error) {
        if !std::mem::replace(&mut self.logged, true) {
            warn!("cannot accept a connection on the {port} ({e}); retrying with a backoff");
        }
        let delay = match self.delay {
            None => Duration::from_millis(10),
            Some(d) => (d * 2).min(Duration::from_secs(1)),
        };
        self.delay = Some(delay);
        tokio::time::sleep(delay).await;
    }

    pub fn succeeded(&mut self) {
        self.delay = None;
    }
}

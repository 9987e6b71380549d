//! The launch report (`libi-mpiexec --report FILE.json`): when each NLA's launch started and
//! when it connected back, when each rank entered and left each fence, and the KVS cache
//! counters of each NLA. `libi-tree calibrate` fits SEQ and REM from it; `libi-tree plot`
//! draws measured against modeled launch times (both in the `libi-tree` crate).
//!
//! Times inside the processes are Unix-epoch microseconds of the process that took them;
//! the front end rewrites them as seconds since its own start when it writes the file.

use serde::{Deserialize, Serialize};

/// One child launch, as its parent saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaunchRecord {
    /// The child's node id.
    pub node: u32,
    pub host: String,
    /// The parent's node id (0 = front end).
    pub parent: u32,
    /// 1-based launch order among the parent's children.
    pub order: u32,
    /// When the parent started this launch.
    pub start: f64,
    /// When the child's authenticated hello reached the parent.
    pub connected: f64,
}

/// One rank's passage through one fence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FenceRecord {
    pub rank: u32,
    pub epoch: u64,
    pub enter: f64,
    pub leave: f64,
}

/// KVS counters of one NLA.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// `get`s of local ranks answered from this NLA's KVS.
    pub gets_local: u64,
    /// Of those, answered from a value fetched earlier from up the tree (cache hits).
    pub cache_hits: u64,
    /// `Get` messages this NLA sent to its parent.
    pub gets_up: u64,
    /// `Get` messages received from children (answered here or after asking further up).
    pub gets_for_children: u64,
    /// Fences this NLA took part in.
    pub fences: u64,
    /// Parts of big fences this NLA sent up (`FenceInPart`) and got from up the tree
    /// (`FenceOutPart`; at the front end: sent down).
    pub fence_parts_up: u64,
    pub fence_parts_down: u64,
    /// KVS data (keys plus values) this NLA held at the end.
    pub kvs_bytes: u64,
}

/// What one NLA (or the front end, node 0) reports.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeReport {
    pub node: u32,
    pub host: String,
    /// When this node could start launching its children (front end: launch start; NLA:
    /// setup received).
    pub ready: f64,
    /// Its children's launches.
    pub launches: Vec<LaunchRecord>,
    /// Its ranks' fences.
    pub fences: Vec<FenceRecord>,
    pub counters: Counters,
    /// The process's peak resident memory (VmHWM) when it made the report, in KiB.
    pub peak_rss_kib: u64,
    /// The CPU the process had used when it made the report (all its threads, not its
    /// children), user and system, in seconds.
    #[serde(default)]
    pub cpu_user: f64,
    #[serde(default)]
    pub cpu_sys: f64,
}

/// The whole file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Number of NLAs.
    pub nodes: u32,
    pub ranks: u32,
    /// Launch tree shape (`greedy`, `kary:4`, ...).
    pub tree: String,
    pub launcher: String,
    /// The model constants the tree was built with.
    pub seq: f64,
    pub rem: f64,
    /// Seconds from the front end's start until every NLA had connected.
    pub launch_time: f64,
    /// Seconds from the front end's start until the job ended.
    pub total_time: f64,
    /// Front end first (node 0), then every NLA.
    pub reports: Vec<NodeReport>,
}

/// Microseconds since the Unix epoch, as seconds (f64) — the unit of every time above
/// until the front end rebases them.
pub fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// This process's peak resident memory so far (`VmHWM` of /proc/self/status), in KiB; 0
/// where that is unknown.
pub fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

impl Report {
    /// Rewrite every time as seconds since `t0`.
    pub fn rebase(&mut self, t0: f64) {
        for r in &mut self.reports {
            r.ready -= t0;
            for l in &mut r.launches {
                l.start -= t0;
                l.connected -= t0;
            }
            for f in &mut r.fences {
                f.enter -= t0;
                f.leave -= t0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn peak_rss_is_known_on_linux() {
        let kib = super::peak_rss_kib();
        assert!(kib > 100 && kib < 1 << 30, "{kib}");
    }
}

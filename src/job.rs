//! The job model: what runs where, with which environment.
//!
//! The front end builds a [`JobSpec`] from the command line and sends each NLA the part it
//! needs in a [`NodeSetup`]. Everything here is plain data (serde), computed once.

use serde::{Deserialize, Serialize};

/// One executable of an MPMD command line (`prog1 args : -n 2 prog2`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppSpec {
    /// Program as given by the user (resolved on the node through the rank's `PATH`).
    pub exe: String,
    /// argv[1..].
    pub args: Vec<String>,
    /// Number of ranks of this executable.
    pub nprocs: u32,
    /// The complete environment of its ranks (before the per-rank PMI variables are added).
    pub env: Vec<(String, String)>,
    /// Working directory; `None` = the front end's.
    pub wdir: Option<String>,
}

/// One rank placed on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankSlot {
    /// Global rank.
    pub rank: u32,
    /// Index into [`NodeSetup::apps`] (also its `appnum`).
    pub app: u32,
}

/// Everything an NLA needs to run its part of the job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeSetup {
    /// This NLA's node id in the launch tree (0 is the front end).
    pub node: u32,
    /// Host name the front end knows this node by (for messages).
    pub host: String,
    /// Job size.
    pub size: u32,
    pub universe_size: i32,
    pub kvsname: String,
    /// Pairs pre-loaded into every NLA's KVS (`PMI_process_mapping`, ...).
    pub preput: Vec<(String, String)>,
    pub apps: Vec<AppSpec>,
    /// The ranks this node runs, in local-rank order.
    pub ranks: Vec<RankSlot>,
    /// Whether stdin data for rank 0 will arrive at this node.
    pub stdin_rank0: bool,
    /// Grace period between SIGTERM and SIGKILL when the job is torn down, in ms.
    pub kill_grace_ms: u64,
    /// Verbose tracing.
    pub verbose: bool,
}

/// How a rank ended, as the NLA saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RankEnd {
    /// Exited with this code. `finalized`: it completed `PMI_Finalize` (or never spoke PMI).
    Exited { code: i32, clean_pmi: bool },
    /// Killed by this signal number.
    Signaled { signal: i32 },
    /// Could not be started: `errno` and a one-line reason.
    SpawnFailed { errno: i32, reason: String },
}

impl RankEnd {
    /// The exit status a shell would report for this end (128+signal for a signal, 127/126
    /// for a program that could not be executed). A rank that exited 0 between PMI `init` and
    /// `finalize` failed the job all the same: status 1.
    pub fn status(&self) -> i32 {
        match self {
            RankEnd::Exited { code: 0, clean_pmi: false } => 1,
            RankEnd::Exited { code, .. } => *code,
            RankEnd::Signaled { signal } => 128 + signal,
            RankEnd::SpawnFailed { errno, .. } => {
                if *errno == libc_enoent() {
                    127
                } else {
                    126
                }
            }
        }
    }

    /// Did the rank end in a way that fails the job?
    pub fn is_failure(&self) -> bool {
        !matches!(self, RankEnd::Exited { code: 0, clean_pmi: true })
    }
}

const fn libc_enoent() -> i32 {
    2
}

/// Process mapping in the explicit-triplet form every MPICH accepts (spec §8.1): `ranks_per`
/// lists, per node in node order, how many consecutive ranks it holds (block placement).
/// Consecutive nodes with the same count are merged into one `(start,n,count)` block.
/// Returns `None` when the value would be too long for MPICH 4.0 clients (> 600 bytes) or
/// the layout is empty; the key is then omitted and MPICH falls back to hostnames.
pub fn process_mapping(ranks_per: &[u32]) -> Option<String> {
    let mut out = String::from("(vector");
    let mut i = 0;
    let mut any = false;
    while i < ranks_per.len() {
        let count = ranks_per[i];
        let mut j = i + 1;
        while j < ranks_per.len() && ranks_per[j] == count {
            j += 1;
        }
        if count > 0 {
            out.push_str(&format!(",({},{},{})", i, j - i, count));
            any = true;
        }
        i = j;
    }
    out.push(')');
    (any && out.len() <= 600).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_single_node() {
        assert_eq!(process_mapping(&[4]).as_deref(), Some("(vector,(0,1,4))"));
    }

    #[test]
    fn mapping_blocks_merge() {
        assert_eq!(
            process_mapping(&[2, 2, 4, 4, 1]).as_deref(),
            Some("(vector,(0,2,2),(2,2,4),(4,1,1))")
        );
    }

    #[test]
    fn mapping_skips_empty_nodes_and_empty_layout() {
        assert_eq!(process_mapping(&[2, 0, 2]).as_deref(), Some("(vector,(0,1,2),(2,1,2))"));
        assert_eq!(process_mapping(&[]), None);
        assert_eq!(process_mapping(&[0]), None);
    }

    #[test]
    fn mapping_too_long_is_omitted() {
        let v: Vec<u32> = (1..200).collect();
        assert_eq!(process_mapping(&v), None);
    }

    #[test]
    fn rank_end_status() {
        assert_eq!(RankEnd::Signaled { signal: 11 }.status(), 139);
        assert_eq!(RankEnd::Exited { code: 3, clean_pmi: true }.status(), 3);
        assert!(RankEnd::Exited { code: 0, clean_pmi: false }.is_failure());
        assert_eq!(RankEnd::Exited { code: 0, clean_pmi: false }.status(), 1);
        assert!(!RankEnd::Exited { code: 0, clean_pmi: true }.is_failure());
        let e = RankEnd::SpawnFailed { errno: 2, reason: "x".into() };
        assert_eq!(e.status(), 127);
    }
}

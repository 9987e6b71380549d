//! `-membind`: the memory policy of each local rank (Hydra's option, Linux's `set_mempolicy`).
//!
//! `firsttouch` is the kernel's local policy (pages on the node of the cpu that touches them
//! first); `nexttouch` is accepted and sets nothing (Linux has no next-touch policy);
//! `bind[:NODES]` is the strict bind policy (allocations never leave the nodes) and
//! `interleave[:NODES]` interleaving. Without NODES, a rank gets the NUMA nodes of the cpus it
//! is bound to, or, when it is not bound, every node the NLA may allocate on. Unlike Hydra,
//! the policy is set whether or not the ranks are bound to cpus, and NODES is honoured.

use crate::cpus::CpuSet;
use crate::error::{OptionError, PlacementError};
use crate::topology::Topology;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A set of NUMA nodes by number (the kernel's list syntax, as for cpus).
pub type NodeSet = CpuSet;

/// `-membind`, as given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MemBind {
    FirstTouch,
    NextTouch,
    /// `bind[:NODES]`; `None`: the rank's own nodes.
    Bind(Option<NodeSet>),
    /// `interleave[:NODES]`; `None`: the rank's own nodes.
    Interleave(Option<NodeSet>),
}

/// Parse `-membind` (`HYDRA_MEMBIND`) where `none` may be given: no policy set (the
/// default), as `-bind-to none` binds nothing. Hydra takes any word here and sets nothing for
/// one it does not know; we refuse those by name, but scripts written for Hydra say `none`.
pub fn parse_membind_or_none(s: &str) -> Result<Option<MemBind>, OptionError> {
    match s {
        "none" => Ok(None),
        _ => parse_membind(s).map(Some),
    }
}

/// Parse a `-membind` policy (not `none`: see [`parse_membind_or_none`]).
pub fn parse_membind(s: &str) -> Result<MemBind, OptionError> {
    match s {
        "firsttouch" => return Ok(MemBind::FirstTouch),
        "nexttouch" => return Ok(MemBind::NextTouch),
        _ => {}
    }
    let (word, nodes) = match s.split_once(':') {
        Some((w, n)) => (w, Some(n)),
        None => (s, None),
    };
    let make: fn(Option<NodeSet>) -> MemBind = match word {
        "bind" => MemBind::Bind,
        "interleave" => MemBind::Interleave,
        _ => return Err(OptionError::UnknownPolicy(s.to_string())),
    };
    let nodes = match nodes.filter(|n| !n.trim().is_empty()) {
        None => None,
        Some(n) => Some(
            CpuSet::parse_items(n, ',', "NUMA node")
                .map_err(|list| OptionError::MemNodes { value: s.to_string(), list })?,
        ),
    };
    Ok(make(nodes))
}

impl fmt::Display for MemBind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (word, nodes) = match self {
            MemBind::FirstTouch => return f.write_str("firsttouch"),
            MemBind::NextTouch => return f.write_str("nexttouch"),
            MemBind::Bind(n) => ("bind", n),
            MemBind::Interleave(n) => ("interleave", n),
        };
        match nodes {
            Some(n) => write!(f, "{word}:{n}"),
            None => f.write_str(word),
        }
    }
}

/// A rank's memory policy, as the kernel takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemPolicy {
    /// On the node of the allocating cpu (`MPOL_LOCAL`).
    Local,
    /// Only on these nodes (`MPOL_BIND`).
    Bind(NodeSet),
    /// Page by page over these nodes (`MPOL_INTERLEAVE`).
    Interleave(NodeSet),
}

impl fmt::Display for MemPolicy {
    /// As `/proc/PID/numa_maps` shows it: `local`, `bind:0-1`, `interleave:0,2`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemPolicy::Local => f.write_str("local"),
            MemPolicy::Bind(n) => write!(f, "bind:{n}"),
            MemPolicy::Interleave(n) => write!(f, "interleave:{n}"),
        }
    }
}

/// The memory policy of each of a node's `nlocal` ranks, in local-rank order; `None` when
/// nothing is set: no `-membind`, `nexttouch`, or a kernel without NUMA nodes (which has no
/// memory policies; a NODES list there may name node 0 only). `cpus`: each rank's cpu binding
/// ([`crate::rank_cpus`]), `None` when the ranks are not bound. `host` names the node in
/// error messages; a NODES entry the node cannot allocate on is an error.
pub fn rank_mems(
    topo: &Topology,
    mem: Option<&MemBind>,
    cpus: Option<&[Option<CpuSet>]>,
    nlocal: usize,
    host: &str,
) -> Result<Option<Vec<MemPolicy>>, PlacementError> {
    let Some(mem) = mem else { return Ok(None) };
    let mems = topo.mems().cloned().unwrap_or_else(|| CpuSet::new(vec![0]));
    let given = match mem {
        MemBind::NextTouch => return Ok(None),
        MemBind::FirstTouch => None,
        MemBind::Bind(n) | MemBind::Interleave(n) => n.as_ref(),
    };
    if let Some(nodes) = given {
        let bad: CpuSet = nodes.cpus().iter().copied().filter(|&n| !mems.contains(n)).collect();
        if !bad.is_empty() {
            let (mem, host, usable) = (mem.clone(), host.to_string(), mems);
            return Err(PlacementError::MemNodes { mem, bad, host, usable });
        }
    }
    if topo.mems().is_none() {
        return Ok(None);
    }
    if mems.is_empty() {
        return Err(PlacementError::NoMemNode { mem: mem.clone(), host: host.to_string() });
    }
    // Without NODES: the nodes of the rank's cpus that have memory, else every usable node.
    let own = |local: usize| -> NodeSet {
        if let Some(given) = given {
            return given.clone();
        }
        match cpus.and_then(|c| c.get(local)).and_then(Option::as_ref) {
            Some(set) => {
                let n = topo.nodes_of(set).intersect(&mems);
                if n.is_empty() {
                    mems.clone()
                } else {
                    n
                }
            }
            None => mems.clone(),
        }
    };
    let policy = |local: usize| match mem {
        MemBind::Bind(_) => MemPolicy::Bind(own(local)),
        MemBind::Interleave(_) => MemPolicy::Interleave(own(local)),
        _ => MemPolicy::Local,
    };
    Ok(Some((0..nlocal).map(policy).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Pu;

    fn set(s: &str) -> CpuSet {
        CpuSet::parse(s).unwrap()
    }

    /// 2 sockets x 2 NUMA nodes x 2 cores x 2 threads: node n has cores 2n and 2n+1, whose
    /// threads are cpus c and c + 8. Node 3 has no memory (cpus only).
    fn two_by_two() -> Topology {
        let pus = (0..16)
            .map(|os| {
                let core = os % 8;
                Pu {
                    os,
                    package: core / 4,
                    core: CpuSet::new(vec![core, core + 8]),
                    numa: Some(core / 2),
                    caches: Vec::new(),
                }
            })
            .collect();
        Topology::new(pus).with_mems(Some(set("0-2")))
    }

    fn policies(t: &Topology, mem: &str, cpus: Option<&[&str]>, n: usize) -> Vec<String> {
        let cpus: Option<Vec<Option<CpuSet>>> = cpus.map(|c| {
            c.iter().map(|s| (!s.is_empty()).then(|| set(s))).collect::<Vec<Option<CpuSet>>>()
        });
        let m = parse_membind(mem).unwrap();
        let p = rank_mems(t, Some(&m), cpus.as_deref(), n, "h").unwrap();
        p.map(|v| v.iter().map(ToString::to_string).collect()).unwrap_or_default()
    }

    #[test]
    fn spellings() {
        assert_eq!(parse_membind("firsttouch").unwrap(), MemBind::FirstTouch);
        assert_eq!(parse_membind("nexttouch").unwrap(), MemBind::NextTouch);
        assert_eq!(parse_membind("bind").unwrap(), MemBind::Bind(None));
        assert_eq!(parse_membind("bind:").unwrap(), MemBind::Bind(None));
        assert_eq!(parse_membind("interleave").unwrap(), MemBind::Interleave(None));
        assert_eq!(parse_membind("bind:0,2-3").unwrap(), MemBind::Bind(Some(set("0,2,3"))));
        assert_eq!(parse_membind("interleave:1").unwrap().to_string(), "interleave:1");
        assert_eq!(parse_membind("bind:3,0-1").unwrap().to_string(), "bind:0-1,3");
        assert_eq!(parse_membind_or_none("none"), Ok(None));
        assert_eq!(parse_membind_or_none("bind"), Ok(Some(MemBind::Bind(None))));
        assert!(parse_membind_or_none("None").is_err());
        for (s, msg) in [
            ("", "-membind: unknown policy '' (expected none, firsttouch, nexttouch, bind[:NODES] or interleave[:NODES])"),
            ("local", "-membind: unknown policy 'local'"),
            ("Bind", "-membind: unknown policy 'Bind'"),
            ("firsttouch:0", "-membind: unknown policy 'firsttouch:0'"),
            ("bind:x", "-membind bind:x: 'x' is not a NUMA node number"),
            ("interleave:3-1", "-membind interleave:3-1: '3-1' is not a NUMA node range"),
            ("bind:0,,1", "-membind bind:0,,1: '' is not a NUMA node number"),
        ] {
            let e = parse_membind(s).unwrap_err().to_string();
            assert!(e.starts_with(msg), "{s}: {e}");
            assert!(!e.contains('\n'));
        }
    }

    #[test]
    fn nodes_of_the_rank_binding() {
        let t = two_by_two();
        // One core each: its node.
        let c = ["0,8", "2,10", "4,12", "6,14"];
        assert_eq!(
            policies(&t, "bind", Some(&c[..]), 4),
            ["bind:0", "bind:1", "bind:2", "bind:0-2"],
            "node 3 has no memory: the rank falls back on every node with memory"
        );
        assert_eq!(policies(&t, "interleave:", Some(&c[..2]), 2), ["interleave:0", "interleave:1"]);
        // A socket each: both its nodes (with memory).
        let s = ["0-3,8-11", "4-7,12-15"];
        assert_eq!(policies(&t, "interleave", Some(&s[..]), 2), ["interleave:0-1", "interleave:2"]);
        // Straddling two nodes.
        assert_eq!(policies(&t, "bind", Some(&["1-2"]), 1), ["bind:0-1"]);
        // Unbound ranks (none, or past a user: list): every node with memory.
        assert_eq!(policies(&t, "bind", None, 2), ["bind:0-2", "bind:0-2"]);
        assert_eq!(policies(&t, "bind", Some(&["0", ""]), 2), ["bind:0", "bind:0-2"]);
    }

    #[test]
    fn given_nodes_and_the_others() {
        let t = two_by_two();
        let c = ["0,8", "4,12"];
        // NODES wins over the binding.
        assert_eq!(policies(&t, "bind:2", Some(&c[..]), 2), ["bind:2", "bind:2"]);
        assert_eq!(policies(&t, "interleave:0-1", None, 1), ["interleave:0-1"]);
        assert_eq!(policies(&t, "firsttouch", Some(&c[..]), 2), ["local", "local"]);
        assert_eq!(policies(&t, "firsttouch", None, 1), ["local"]);
        // nexttouch and no -membind: nothing set.
        let none = rank_mems(&t, Some(&MemBind::NextTouch), None, 2, "h").unwrap();
        assert_eq!(none, None);
        assert_eq!(rank_mems(&t, None, None, 2, "h").unwrap(), None);
    }

    #[test]
    fn nodes_the_host_cannot_allocate_on() {
        let t = two_by_two();
        let err = |m: &str| rank_mems(&t, Some(&parse_membind(m).unwrap()), None, 1, "n7");
        assert_eq!(
            err("bind:7").unwrap_err().to_string(),
            "-membind bind:7: NUMA node 7 is not usable on n7 (its NUMA nodes with memory: 0-2)"
        );
        assert_eq!(
            err("interleave:1-4").unwrap_err().to_string(),
            "-membind interleave:1-4: NUMA nodes 3-4 are not usable on n7 (its NUMA nodes with \
             memory: 0-2)"
        );
        // Restricted to the NLA's cpuset's memory nodes.
        let r = two_by_two().restrict_mems(Some(&set("1")));
        let e = rank_mems(&r, Some(&parse_membind("bind:0").unwrap()), None, 1, "h")
            .unwrap_err()
            .to_string();
        assert!(e.ends_with("NUMA node 0 is not usable on h (its NUMA nodes with memory: 1)"));
        let p = rank_mems(&r, Some(&MemBind::Bind(None)), Some(&[Some(set("0"))]), 1, "h");
        assert_eq!(p.unwrap(), Some(vec![MemPolicy::Bind(set("1"))]));
    }

    #[test]
    fn a_kernel_without_numa_sets_nothing() {
        let t = Topology::new(vec![Pu {
            os: 0,
            package: 0,
            core: set("0"),
            numa: None,
            caches: Vec::new(),
        }]);
        for m in ["firsttouch", "bind", "interleave:0"] {
            let p = rank_mems(&t, Some(&parse_membind(m).unwrap()), None, 2, "h").unwrap();
            assert_eq!(p, None, "{m}");
        }
        let e = rank_mems(&t, Some(&parse_membind("bind:1").unwrap()), None, 1, "h")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("NUMA node 1 is not usable on h (its NUMA nodes with memory: 0)"),
            "{e}"
        );
    }
}

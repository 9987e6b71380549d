//! Binding this node's ranks (`-bind-to`, `-map-by`, `-membind`): the node's topology, read
//! from /sys and kept to the cpus and memory nodes this NLA may use (its own affinity and
//! cpuset: a cgroup or batch system's), mapped by `libi-binding`. The masks and memory
//! policies are built here; the rank's child applies them between clone and exec.

use crate::proc::start::{KernelMemPolicy, RankBinding};
use libi::job::{JobCommon, NodePlan};
use libi_binding::{
    rank_cpus, rank_mems, CpuSet, MemPolicy, PlacementError, Topology, TopologyError,
};
use std::path::Path;

/// The cpus this process may run on; `None` if the kernel does not say (then all online
/// cpus count).
fn allowed() -> Option<CpuSet> {
    let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).ok()?;
    let cpus: Vec<u32> = (0..nix::sched::CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .map(|c| c as u32)
        .collect();
    (!cpus.is_empty()).then(|| CpuSet::new(cpus))
}

/// The NUMA nodes this process may allocate on (its cpuset's, `Mems_allowed_list`); `None`
/// if the kernel does not say.
fn allowed_mems() -> Option<CpuSet> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let list = status.lines().find_map(|l| l.strip_prefix("Mems_allowed_list:"))?;
    CpuSet::parse(list).ok().filter(|s| !s.is_empty())
}

/// What this node's ranks are bound to, by local rank.
#[derive(Debug, Default)]
pub struct NodeBinding {
    /// Each rank's cpu set (`None` for a rank left unbound, past the end of a `user:` list);
    /// `None` without `-bind-to`.
    pub cpus: Option<Vec<Option<CpuSet>>>,
    /// Each rank's memory policy; `None` when none is set (see [`rank_mems`]).
    pub mems: Option<Vec<MemPolicy>>,
}

/// What the child of one rank applies: its affinity mask and memory policy, in the kernel's
/// terms.
#[derive(Debug, Default)]
pub struct KernelBinding {
    pub mask: Option<Vec<u64>>,
    pub mem: Option<KernelMemPolicy>,
}

impl KernelBinding {
    pub fn rank(&self) -> RankBinding<'_> {
        RankBinding { cpus: self.mask.as_deref(), mem: self.mem.as_ref() }
    }
}

impl NodeBinding {
    /// Each of `n` local ranks' CPUs in the kernel's list syntax (`0-3,8`), `None` where not
    /// bound.
    pub fn cpu_lists(&self, n: usize) -> Vec<Option<String>> {
        (0..n)
            .map(|i| self.cpus.as_ref().and_then(|c| c.get(i)?.as_ref()).map(|s| s.to_string()))
            .collect()
    }

    /// What the children of the node's `n` ranks apply, by local rank.
    pub fn kernel(&self, n: usize) -> Vec<KernelBinding> {
        (0..n)
            .map(|i| KernelBinding {
                mask: self.cpus.as_ref().and_then(|c| c.get(i)?.as_ref()).map(CpuSet::mask),
                mem: self.mems.as_ref().and_then(|m| m.get(i)).map(KernelMemPolicy::new),
            })
            .collect()
    }
}

/// Why this node's ranks cannot be bound; its `Display` is the one line (naming the host)
/// that each rank's failed start reports.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeBindError {
    /// The node's topology cannot be read from /sys.
    #[error("cannot bind ranks on {host}: {error}")]
    Topology { host: String, error: TopologyError },
    /// The binding or the memory policy does not fit the node.
    #[error(transparent)]
    Placement(#[from] PlacementError),
}

/// The cpu set and memory policy of each local rank of this node; an error (one line) names
/// the host.
pub fn node_binding(job: &JobCommon, plan: &NodePlan) -> Result<NodeBinding, NodeBindError> {
    let b = &job.binding.on_host(&plan.host);
    if b.is_none() && b.mem.is_none() {
        return Ok(NodeBinding::default());
    }
    let topo = Topology::from_sysfs(Path::new("/sys"), allowed().as_ref())
        .map_err(|error| NodeBindError::Topology { host: plan.host.clone(), error })?
        .restrict_mems(allowed_mems().as_ref());
    let n = plan.ranks.len();
    let cpus = rank_cpus(&topo, b, n, &plan.host)?;
    let mems = rank_mems(&topo, b.mem.as_ref(), cpus.as_deref(), n, &plan.host)?;
    Ok(NodeBinding { cpus, mems })
}

/// `-v`: one line per rank with its cpus and memory policy, on the NLA's stderr.
pub fn report(job: &JobCommon, plan: &NodePlan, b: &NodeBinding) {
    if let (Some(mem), None) = (&job.binding.mem, &b.mems) {
        if *mem != libi_binding::MemBind::NextTouch {
            eprintln!(
                "[libi-nla@{}] -membind {mem}: nothing set (the kernel has no NUMA nodes)",
                plan.host
            );
        }
    }
    if b.cpus.is_none() && b.mems.is_none() {
        return;
    }
    for (local, slot) in plan.ranks.iter().enumerate() {
        let cpus = match b.cpus.as_ref().map(|c| c.get(local).and_then(Option::as_ref)) {
            Some(Some(set)) => format!(" bound to cpus {set}"),
            Some(None) => " not bound (past the -bind-to user: list)".to_string(),
            None => String::new(),
        };
        let mem = match b.mems.as_ref().and_then(|m| m.get(local)) {
            Some(p) if cpus.is_empty() => format!(" memory policy {p}"),
            Some(p) => format!(", memory policy {p}"),
            None => String::new(),
        };
        eprintln!("[libi-nla@{}] rank {} (local {local}){cpus}{mem}", plan.host, slot.rank);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines are those given when the error was text: the host named before a
    /// topology's error, a placement error as libi_binding says it.
    #[test]
    fn errors_read_as_before() {
        let e = NodeBindError::Topology { host: "n1".into(), error: TopologyError::NoCpu };
        assert_eq!(e.to_string(), "cannot bind ranks on n1: no usable cpu");
        let p =
            PlacementError::NoMemNode { mem: libi_binding::MemBind::NextTouch, host: "n2".into() };
        assert_eq!(NodeBindError::from(p.clone()).to_string(), p.to_string());
    }
}

//! Binding this node's ranks (`-bind-to`, `-map-by`): the node's topology, read from /sys and
//! kept to the cpus this NLA may use (its own affinity: a cgroup or batch system's cpuset),
//! mapped by `libi-binding`. The masks are built here; the rank's child applies its mask
//! between clone and exec.

use libi::job::{JobCommon, NodePlan};
use libi_binding::{rank_cpus, CpuSet, Topology};
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

/// The cpu set of each local rank of this node (local-rank order; `None` for a rank left
/// unbound, past the end of a `user:` list), or `None` without binding; an error names the
/// host.
pub fn node_cpus(job: &JobCommon, plan: &NodePlan) -> Result<Option<Vec<Option<CpuSet>>>, String> {
    if job.binding.is_none() {
        return Ok(None);
    }
    let topo = Topology::from_sysfs(Path::new("/sys"), allowed().as_ref())
        .map_err(|e| format!("cannot bind ranks on {}: {e}", plan.host))?;
    rank_cpus(&topo, &job.binding, plan.ranks.len(), &plan.host)
}

/// `-v`: one line per rank, on the NLA's stderr.
pub fn report(plan: &NodePlan, cpus: &[Option<CpuSet>]) {
    for (local, (slot, set)) in plan.ranks.iter().zip(cpus).enumerate() {
        match set {
            Some(set) => eprintln!(
                "[libi-nla@{}] rank {} (local {local}) bound to cpus {set}",
                plan.host, slot.rank
            ),
            None => eprintln!(
                "[libi-nla@{}] rank {} (local {local}) not bound (past the -bind-to user: list)",
                plan.host, slot.rank
            ),
        }
    }
}

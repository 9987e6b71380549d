//! Which cpus each local rank of a node is bound to.
//!
//! The semantics follow what Hydra does (measured with MPICH 4's `mpiexec.hydra`, see the
//! README): binding objects are handed out in logical order, round-robin across the
//! `-map-by` objects, and rank `i` of the node gets entry `i` modulo the number of entries
//! (ranks beyond the objects wrap around, they are not refused). A `user:` list does not wrap:
//! as in Hydra 4 and 5, the ranks beyond it are not bound.

use crate::cpus::CpuSet;
use crate::spec::{BindTo, Binding, Objects};
use crate::topology::Topology;

/// The cpu set of each of a node's `nlocal` ranks, in local-rank order (`None` for a rank left
/// unbound: past the end of a `user:` list); `None` when the ranks are not bound. `host` names
/// the node in error messages.
pub fn rank_cpus(
    topo: &Topology,
    binding: &Binding,
    nlocal: usize,
    host: &str,
) -> Result<Option<Vec<Option<CpuSet>>>, String> {
    let entries = match &binding.bind {
        BindTo::None => return Ok(None),
        BindTo::RoundRobin => topo.all().cpus().iter().map(|&c| CpuSet::new(vec![c])).collect(),
        BindTo::User(list) => {
            let all = topo.all();
            for e in list {
                if let Some(c) = e.cpus().iter().find(|&&c| !all.contains(c)) {
                    return Err(format!(
                        "-bind-to {}: cpu {c} is not usable on {host} (its cpus: {all})",
                        binding.bind
                    ));
                }
            }
            // Hydra leaves the ranks beyond the list unbound (they keep the launcher's
            // affinity), measured with mpiexec.hydra 4 and 5.
            return Ok(Some((0..nlocal).map(|i| list.get(i).cloned()).collect()));
        }
        BindTo::Objects(b) => {
            objects(topo, *b, binding.map.unwrap_or(Objects { obj: b.obj, count: 1 }), host)?
        }
    };
    if entries.is_empty() {
        return Err(format!("-bind-to {}: nothing to bind to on {host}", binding.bind));
    }
    Ok(Some((0..nlocal).map(|i| Some(entries[i % entries.len()].clone())).collect()))
}

/// The binding entries of an object binding, in the order ranks take them.
///
/// Each binding object goes to the mapping object holding its first cpu. When the mapping
/// objects are coarser (some holds several binding objects), the entries (`count` binding
/// objects each, consecutive within one mapping object) are dealt round-robin over the
/// mapping objects, `map.count` at a time. Otherwise the mapping changes nothing and entries
/// are consecutive binding objects in logical order.
fn objects(
    topo: &Topology,
    bind: Objects,
    map: Objects,
    host: &str,
) -> Result<Vec<CpuSet>, String> {
    let bobjs = topo.objects(bind.obj);
    let mobjs = topo.objects(map.obj);
    let need = bind.count as usize;
    if need > bobjs.len() {
        return Err(format!(
            "-bind-to {bind}: {host} has only {} {} object(s) (cpus {})",
            bobjs.len(),
            bind.obj,
            topo.all()
        ));
    }
    let mut buckets: Vec<Vec<CpuSet>> = vec![Vec::new(); mobjs.len()];
    for b in &bobjs {
        let first = b.first().unwrap_or(0);
        match mobjs.iter().position(|m| m.contains(first)) {
            Some(i) => buckets[i].push(b.clone()),
            None => buckets.push(vec![b.clone()]),
        }
    }
    if buckets.iter().all(|b| b.len() <= 1) {
        buckets = vec![bobjs];
    }
    // Entries of `need` consecutive binding objects within each mapping object.
    let mut chunks: Vec<std::collections::VecDeque<CpuSet>> = buckets
        .iter()
        .map(|b| {
            b.chunks_exact(need)
                .map(|c| c.iter().fold(CpuSet::default(), |a, s| a.union(s)))
                .collect()
        })
        .filter(|c: &std::collections::VecDeque<CpuSet>| !c.is_empty())
        .collect();
    if chunks.is_empty() {
        return Err(format!(
            "-bind-to {bind} -map-by {map}: no {} of {host} holds {need} {} objects",
            map.obj, bind.obj
        ));
    }
    let mut out = Vec::new();
    while chunks.iter().any(|c| !c.is_empty()) {
        for c in &mut chunks {
            for _ in 0..map.count {
                match c.pop_front() {
                    Some(e) => out.push(e),
                    None => break,
                }
            }
        }
    }
    Ok(out)
}

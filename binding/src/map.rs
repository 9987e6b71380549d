//! Which cpus each local rank of a node is bound to.
//!
//! The semantics follow what Hydra does (measured with MPICH 4's `mpiexec.hydra`, see
//! docs/binding.md): binding objects are handed out in logical order, round-robin across the
//! `-map-by` objects, and rank `i` of the node gets entry `i` modulo the number of entries
//! (ranks beyond the objects wrap around, they are not refused). A `user:` list does not wrap:
//! as in Hydra 4 and 5, the ranks beyond it are not bound.

use crate::cpus::CpuSet;
use crate::error::PlacementError;
use crate::spec::{BindTo, Binding, Object, Objects};
use crate::topology::Topology;

/// The cpu set of each of a node's `nlocal` ranks, in local-rank order (`None` for a rank left
/// unbound: past the end of a `user:` list); `None` when the ranks are not bound. `host` names
/// the node in error messages.
pub fn rank_cpus(
    topo: &Topology,
    binding: &Binding,
    nlocal: usize,
    host: &str,
) -> Result<Option<Vec<Option<CpuSet>>>, PlacementError> {
    let entries = match &binding.bind {
        BindTo::None => return Ok(None),
        BindTo::RoundRobin => topo.all().cpus().iter().map(|&c| CpuSet::new(vec![c])).collect(),
        BindTo::User(list) => {
            let all = topo.all();
            for e in list {
                if let Some(&cpu) = e.cpus().iter().find(|&&c| !all.contains(c)) {
                    let (bind, host) = (binding.bind.clone(), host.to_string());
                    return Err(PlacementError::UserCpu { bind, cpu, host, usable: all });
                }
            }
            // Hydra leaves the ranks beyond the list unbound (they keep the launcher's
            // affinity), measured with mpiexec.hydra 4 and 5.
            return Ok(Some((0..nlocal).map(|i| list.get(i).cloned()).collect()));
        }
        BindTo::Objects(b) if b.obj.is_io() => devices(topo, binding, b, host)?,
        BindTo::Objects(b) => {
            let map = binding.map.clone().unwrap_or(Objects { obj: b.obj.clone(), count: 1 });
            objects(topo, b, &map, host)?
        }
    };
    if entries.is_empty() {
        let (bind, host) = (binding.bind.clone(), host.to_string());
        return Err(PlacementError::Nothing { bind, host });
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
    bind: &Objects,
    map: &Objects,
    host: &str,
) -> Result<Vec<CpuSet>, PlacementError> {
    let bobjs = topo.objects(bind.obj.clone());
    let mobjs = topo.objects(map.obj.clone());
    let need = bind.count as usize;
    if need > bobjs.len() {
        return Err(PlacementError::FewObjects {
            bind: bind.clone(),
            host: host.to_string(),
            have: bobjs.len(),
            usable: topo.all(),
        });
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
        let (bind, map, host) = (bind.clone(), map.clone(), host.to_string());
        return Err(PlacementError::NoMapObject { bind, map, host });
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

/// The usable cpus near each device an I/O object (`pci:`, `gpu`, `ib`, `hfi`, `eth`, `en`)
/// names, in order: one entry per device, so two devices near the same cpus are two entries.
fn io_objects(
    topo: &Topology,
    obj: &Object,
    options: &str,
    host: &str,
) -> Result<Vec<CpuSet>, PlacementError> {
    let devs = topo.devices();
    let (options, host) = (options.to_string(), host.to_string());
    match obj {
        Object::Pci(a) => match devs.pci.get(a) {
            Some(cpus) => Ok(vec![cpus.clone()]),
            None => Err(PlacementError::NoPciDevice { options, host, address: *a }),
        },
        Object::Device { kind, id } => {
            let (all, kind) = (devs.of_kind(*kind), *kind);
            if all.is_empty() {
                return Err(PlacementError::NoDevice { options, host, kind });
            }
            let Some(id) = id else {
                return Ok(all.iter().map(|d| d.cpus.clone()).collect());
            };
            match devs.named(kind, id) {
                Some(d) => Ok(vec![d.cpus.clone()]),
                None => {
                    let names: Vec<String> = all
                        .iter()
                        .enumerate()
                        .map(|(i, d)| match d.names.first() {
                            Some(n) => format!("{i} {n}"),
                            None => {
                                format!("{i} at {}", d.pci.map_or("?".into(), |a| a.to_string()))
                            }
                        })
                        .collect();
                    let (id, devices) = (id.clone(), names.join(", "));
                    Err(PlacementError::NoNamedDevice { options, host, kind, id, devices })
                }
            }
        }
        _ => Ok(Vec::new()),
    }
}

/// The binding entries of an I/O binding, in the order ranks take them.
///
/// As Hydra, the binding object is one device (its nearby cpus) per device, in order, and
/// `B:N` entries are N consecutive devices, the list taken as a ring (4 GPUs, `gpu:3`:
/// 0-2, 3+0-1, 2-3+0, 1-3). `-map-by` names the same devices, `M` at a time (default: as
/// many as the binding takes): with M larger than N, the ring is cut into groups of M and the
/// entries are dealt round-robin over the groups, each group handing out its devices N at a
/// time (`gpu -map-by gpu:2`: 0, 2, 1, 3); M no larger than N changes nothing.
fn devices(
    topo: &Topology,
    binding: &Binding,
    bind: &Objects,
    host: &str,
) -> Result<Vec<CpuSet>, PlacementError> {
    let options = match &binding.map {
        Some(m) => format!("-bind-to {} -map-by {m}", binding.bind),
        None => format!("-bind-to {}", binding.bind),
    };
    let list = io_objects(topo, &bind.obj, &options, host)?;
    let n = list.len();
    let b = bind.count as usize;
    let m = binding.map.as_ref().map_or(b, |m| m.count as usize).max(b);
    if m > n {
        let what = match &bind.obj {
            Object::Device { kind, .. } => kind.describe(),
            _ => "PCI",
        };
        let host = host.to_string();
        return Err(PlacementError::FewDevices { options, host, have: n, what, want: m });
    }
    let lcm = |a: usize, b: usize| a / gcd(a, b) * b;
    let groups = lcm(n, m) / m;
    let per_group = lcm(m, b) / b;
    let mut out = Vec::with_capacity(groups * per_group);
    for e in 0..per_group {
        for g in 0..groups {
            let set = (0..b)
                .map(|j| &list[(g * m + (e * b + j) % m) % n])
                .fold(CpuSet::default(), |a, s| a.union(s));
            out.push(set);
        }
    }
    Ok(out)
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

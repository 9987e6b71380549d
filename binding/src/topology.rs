//! A node's topology as Linux describes it under `/sys/devices/system`: hardware threads
//! grouped into cores, caches, NUMA nodes and sockets, in hwloc's *logical* order (the order
//! of the topology tree: socket, NUMA node, caches, core, thread), which is what "the first
//! core" means to Hydra, not the OS numbering (which on most x86 machines lists one thread of
//! every core before the second threads).
//!
//! I/O devices come from `/sys/bus/pci` and `/sys/class` (see [`crate::devices`]).
//!
//! Read with plain file reads: no libhwloc (the hwloc crates link the C library, which every
//! node would need installed, with its headers at build time), and the few files used here
//! are what hwloc itself reads on Linux.

use crate::cpus::CpuSet;
use crate::devices::Devices;
use crate::error::TopologyError;
use crate::spec::{CacheKind, Object};
use std::collections::BTreeMap;
use std::path::Path;

/// One cache as sysfs lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cache {
    pub level: u8,
    pub kind: CacheKind,
    pub cpus: CpuSet,
}

/// What the binding code needs of one hardware thread (PU).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pu {
    /// OS number (`cpuN`).
    pub os: u32,
    pub package: u32,
    /// The threads of its core (itself included).
    pub core: CpuSet,
    /// Its NUMA node, if the kernel has NUMA nodes.
    pub numa: Option<u32>,
    /// The caches it uses (each with all the cpus sharing it).
    pub caches: Vec<Cache>,
}

/// The usable hardware threads of a node, and its usable NUMA nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// In logical order.
    pus: Vec<Pu>,
    /// Its I/O devices, each with the usable cpus near it.
    devices: Devices,
    /// The NUMA nodes that have memory (and that we may allocate on, once
    /// [`Topology::restrict_mems`] was told); `None`: the kernel has no NUMA nodes.
    mems: Option<CpuSet>,
}

/// Read a small sysfs file; `None` if it is missing or unreadable.
fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

impl Topology {
    /// Build from PUs in any order: sorts them into logical order.
    pub fn new(pus: Vec<Pu>) -> Topology {
        let mut t = Topology { pus, devices: Devices::default(), mems: None };
        t.sort();
        t
    }

    /// The same, with these NUMA nodes holding memory (`None`: no NUMA nodes).
    pub fn with_mems(self, mems: Option<CpuSet>) -> Topology {
        Topology { mems, ..self }
    }

    /// Keep to the NUMA nodes in `allowed` (the NLA's own: its cpuset's memory nodes), when
    /// given.
    pub fn restrict_mems(self, allowed: Option<&CpuSet>) -> Topology {
        match (self.mems.as_ref(), allowed) {
            (Some(m), Some(a)) => {
                let mems = Some(m.intersect(a));
                Topology { mems, ..self }
            }
            _ => self,
        }
    }

    /// Read the topology of the machine whose sysfs is mounted at `sys` (normally `/sys`),
    /// keeping only the cpus in `allowed` (the NLA's own affinity: a cgroup or batch
    /// system's cpuset), when given.
    pub fn from_sysfs(sys: &Path, allowed: Option<&CpuSet>) -> Result<Topology, TopologyError> {
        let cpu_dir = sys.join("devices/system/cpu");
        let path = cpu_dir.join("online");
        let Some(online) = read(&path) else { return Err(TopologyError::Unreadable(path)) };
        let mut online =
            CpuSet::parse(&online).map_err(|list| TopologyError::Online { path, list })?;
        if let Some(a) = allowed {
            online = online.intersect(a);
        }
        // NUMA node of every cpu.
        let mut numa_of: BTreeMap<u32, u32> = BTreeMap::new();
        let node_dir = sys.join("devices/system/node");
        // The nodes with memory (a node of cpus only, or one offline, cannot be allocated on);
        // a kernel older than 2.6.35 lists only the online ones.
        let mems = ["has_memory", "online"]
            .iter()
            .find_map(|f| read(&node_dir.join(f)))
            .and_then(|l| CpuSet::parse(&l).ok());
        if let Ok(dir) = std::fs::read_dir(&node_dir) {
            for e in dir.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let Some(id) = name.strip_prefix("node").and_then(|n| n.parse::<u32>().ok()) else {
                    continue;
                };
                if let Some(l) = read(&e.path().join("cpulist")) {
                    for c in CpuSet::parse(&l).unwrap_or_default().cpus() {
                        numa_of.insert(*c, id);
                    }
                }
            }
        }
        let mut pus = Vec::with_capacity(online.len());
        for &os in online.cpus() {
            let d = cpu_dir.join(format!("cpu{os}"));
            let topo = d.join("topology");
            let package = read(&topo.join("physical_package_id"))
                .and_then(|s| s.parse::<i64>().ok())
                .map(|p| p.max(0) as u32)
                .unwrap_or(0);
            let core = read(&topo.join("thread_siblings_list"))
                .or_else(|| read(&topo.join("core_cpus_list")))
                .and_then(|l| CpuSet::parse(&l).ok())
                .filter(|s| s.contains(os))
                .unwrap_or_else(|| CpuSet::new(vec![os]));
            let mut caches = Vec::new();
            if let Ok(dir) = std::fs::read_dir(d.join("cache")) {
                for e in dir.flatten() {
                    if !e.file_name().to_string_lossy().starts_with("index") {
                        continue;
                    }
                    let p = e.path();
                    let level = read(&p.join("level")).and_then(|l| l.parse::<u8>().ok());
                    let kind = read(&p.join("type")).and_then(|t| CacheKind::from_sysfs(&t));
                    let cpus =
                        read(&p.join("shared_cpu_list")).and_then(|l| CpuSet::parse(&l).ok());
                    if let (Some(level), Some(kind), Some(cpus)) = (level, kind, cpus) {
                        caches.push(Cache { level, kind, cpus });
                    }
                }
            }
            pus.push(Pu { os, package, core, numa: numa_of.get(&os).copied(), caches });
        }
        if pus.is_empty() {
            return Err(TopologyError::NoCpu);
        }
        // Sibling lists name offline or disallowed cpus too: keep to the usable ones.
        for pu in &mut pus {
            pu.core = pu.core.intersect(&online);
            for c in &mut pu.caches {
                c.cpus = c.cpus.intersect(&online);
            }
        }
        let mut t = Topology::new(pus).with_mems(mems);
        t.devices = Devices::from_sysfs(sys, &t.all());
        Ok(t)
    }

    /// Order PUs as hwloc's tree does: by socket, NUMA node, L3, L2, L1 (each named by its
    /// lowest cpu), core, and OS number within the core.
    fn sort(&mut self) {
        fn cache_key(pu: &Pu, level: u8) -> u32 {
            pu.caches
                .iter()
                .filter(|c| c.level == level && c.kind != CacheKind::Instruction)
                .filter_map(|c| c.cpus.first())
                .next()
                .unwrap_or(0)
        }
        self.pus.sort_by_key(|pu| {
            (
                pu.package,
                pu.numa.unwrap_or(0),
                cache_key(pu, 3),
                cache_key(pu, 2),
                cache_key(pu, 1),
                pu.core.first().unwrap_or(pu.os),
                pu.os,
            )
        });
    }

    /// The PUs in logical order.
    pub fn pus(&self) -> &[Pu] {
        &self.pus
    }

    /// Its I/O devices (read by [`from_sysfs`](Self::from_sysfs): `/sys/bus/pci`,
    /// `/sys/class/{net,infiniband}`).
    pub fn devices(&self) -> &Devices {
        &self.devices
    }

    /// The usable NUMA nodes that have memory; `None` when the kernel has no NUMA nodes.
    pub fn mems(&self) -> Option<&CpuSet> {
        self.mems.as_ref()
    }

    /// The NUMA nodes of these cpus (those the kernel puts in a node).
    pub fn nodes_of(&self, cpus: &CpuSet) -> CpuSet {
        self.pus.iter().filter(|p| cpus.contains(p.os)).filter_map(|p| p.numa).collect()
    }

    /// All usable cpus.
    pub fn all(&self) -> CpuSet {
        self.pus.iter().map(|p| p.os).collect()
    }

    /// The objects of one kind, each as its usable cpus, in logical order (of their first
    /// PU). An object the kernel does not describe (no L3 in sysfs, no NUMA nodes) is the
    /// whole machine, as one object.
    pub fn objects(&self, obj: Object) -> Vec<CpuSet> {
        let all = self.all();
        let mut out: Vec<CpuSet> = Vec::new();
        let mut seen: std::collections::HashSet<CpuSet> = Default::default();
        for pu in &self.pus {
            let set = match obj {
                Object::HwThread => CpuSet::new(vec![pu.os]),
                Object::Core => pu.core.clone(),
                Object::Socket => {
                    self.pus.iter().filter(|q| q.package == pu.package).map(|q| q.os).collect()
                }
                Object::Numa => match pu.numa {
                    Some(n) => self
                        .pus
                        .iter()
                        .filter(|q| q.package == pu.package && q.numa == Some(n))
                        .map(|q| q.os)
                        .collect(),
                    None => all.clone(),
                },
                Object::Cache { level, kind } => pu
                    .caches
                    .iter()
                    .find(|c| c.level == level && kind.matches(c.kind))
                    .map(|c| c.cpus.clone())
                    .unwrap_or_else(|| all.clone()),
                // I/O objects are not in the cpu tree: the map finds them in `devices`.
                Object::Machine | Object::Pci(_) | Object::Device { .. } => all.clone(),
            };
            let set = set.intersect(&all);
            if !set.is_empty() && seen.insert(set.clone()) {
                out.push(set);
            }
        }
        out
    }
}

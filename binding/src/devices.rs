//! The I/O devices `-bind-to pci:`, `gpu`, `ib`, `hfi` and `eth`/`en` bind near, read from
//! Linux's sysfs: each with the cpus near it, which are those of its PCI device (the nearest
//! one above it in `/sys/devices`): `local_cpulist`, else the cpus of its `numa_node`. That
//! is the cpu set of what hwloc calls the device's non-I/O ancestor. A device without a PCI
//! device above it (a virtual interface, a platform device) is near every cpu.
//!
//! - GPUs: PCI display controllers (class `0x03xxxx`) of NVIDIA (vendor `0x10de`), else AMD
//!   (`0x1002`), else Intel (`0x8086`): the first of these vendors with any, as `-gpus-per-proc`
//!   picks its vendor, so that `gpuN` is the N-th device of the runtime's PCI-ordered list.
//! - InfiniBand: `/sys/class/infiniband/*` but `hfi*`, with a port whose link layer is
//!   InfiniBand (RoCE and software devices are Ethernet); named by themselves (`mlx5_0`) and
//!   by their IPoIB interfaces (`ib0`: what Hydra's `ib0` names).
//! - Omni-Path: `/sys/class/infiniband/hfi*` (`hfi1_0`).
//! - Ethernet: `/sys/class/net/*` of type 1 (ARPHRD_ETHER) with a device of their own (a
//!   `device` link); interfaces without one (bridges, bonds, veth, `ifb`) only when the node
//!   has no other, and by name.
//!
//! Every list is ordered by PCI address (devices without one last), then name.

use crate::cpus::CpuSet;
use crate::spec::{DeviceKind, PciAddr};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One device of a kind `-bind-to` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// `Gpu`, `Ib`, `Hfi` or `Eth` (`En` is `Eth`).
    pub kind: DeviceKind,
    /// The names `-bind-to KINDid` may give it: an interface's (`eth0`, `ib0`), an HCA's
    /// (`hfi1_0`, `mlx5_0`); none for a GPU.
    pub names: Vec<String>,
    /// The PCI device it is, or hangs below.
    pub pci: Option<PciAddr>,
    /// No device of its own (`/sys/class/net/X/device` missing): a bridge, bond, veth.
    pub is_virtual: bool,
    /// The usable cpus near it (all of them if none is).
    pub cpus: CpuSet,
}

/// A node's I/O devices.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Devices {
    /// GPUs, InfiniBand, Omni-Path and Ethernet devices, each kind in PCI address order.
    pub list: Vec<Device>,
    /// Every PCI device and the usable cpus near it.
    pub pci: BTreeMap<PciAddr, CpuSet>,
}

const GPU_VENDORS: [u32; 3] = [0x10de, 0x1002, 0x8086];

/// Read a small sysfs file; `None` if it is missing or unreadable.
fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

/// A sysfs hex value (`0x030200`).
fn read_hex(path: &Path) -> Option<u32> {
    let s = read(path)?;
    u32::from_str_radix(s.strip_prefix("0x").unwrap_or(&s), 16).ok()
}

/// The entries of a directory, by name.
fn entries(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut v: Vec<(String, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().into_string().ok()?, e.path())))
        .collect();
    v.sort();
    v
}

/// A sysfs PCI device name (`0000:41:00.0`, exactly as the kernel writes it).
fn pci_name(name: &str) -> Option<PciAddr> {
    PciAddr::parse(name).filter(|a| a.to_string() == name)
}

/// The PCI device a sysfs device (`/sys/class/net/eth0`, a link into `/sys/devices`) is or
/// hangs below, and its directory.
fn pci_parent(class_entry: &Path) -> Option<(PciAddr, PathBuf)> {
    let real = std::fs::canonicalize(class_entry).ok()?;
    real.ancestors().find_map(|p| {
        let a = pci_name(p.file_name()?.to_str()?)?;
        Some((a, p.to_path_buf()))
    })
}

/// The usable cpus near a PCI device (its sysfs directory): `local_cpulist`, else its NUMA
/// node's; all of them when neither says or none of those is usable.
fn locality(sys: &Path, dev: &Path, all: &CpuSet) -> CpuSet {
    let near = read(&dev.join("local_cpulist"))
        .and_then(|l| CpuSet::parse(&l).ok())
        .filter(|s| !s.is_empty())
        .or_else(|| {
            let node = read(&dev.join("numa_node"))?.parse::<u32>().ok()?;
            let l = read(&sys.join(format!("devices/system/node/node{node}/cpulist")))?;
            CpuSet::parse(&l).ok()
        })
        .map(|s| s.intersect(all))
        .unwrap_or_default();
    if near.is_empty() {
        all.clone()
    } else {
        near
    }
}

impl Devices {
    /// Read the devices of the machine whose sysfs is at `sys`; `all`: the usable cpus.
    /// Missing or unreadable parts are devices the node does not have.
    pub fn from_sysfs(sys: &Path, all: &CpuSet) -> Devices {
        let mut d = Devices::default();
        let near = |p: Option<&(PciAddr, PathBuf)>| match p {
            Some((_, dir)) => locality(sys, dir, all),
            None => all.clone(),
        };
        // PCI devices; GPUs among them.
        let mut gpus: Vec<(u32, PciAddr, CpuSet)> = Vec::new();
        for (name, dir) in entries(&sys.join("bus/pci/devices")) {
            let Some(addr) = pci_name(&name) else { continue };
            let cpus = locality(sys, &dir, all);
            let class = read_hex(&dir.join("class")).unwrap_or(0);
            let vendor = read_hex(&dir.join("vendor")).unwrap_or(0);
            if class >> 16 == 0x03 && GPU_VENDORS.contains(&vendor) {
                gpus.push((vendor, addr, cpus.clone()));
            }
            d.pci.insert(addr, cpus);
        }
        if let Some(&v) = GPU_VENDORS.iter().find(|v| gpus.iter().any(|g| g.0 == **v)) {
            d.list.extend(gpus.into_iter().filter(|g| g.0 == v).map(|(_, a, cpus)| Device {
                kind: DeviceKind::Gpu,
                names: Vec::new(),
                pci: Some(a),
                is_virtual: false,
                cpus,
            }));
        }
        // Network interfaces: Ethernet ones, and IPoIB ones to name their HCA.
        let mut ipoib: Vec<(PciAddr, String)> = Vec::new();
        for (name, path) in entries(&sys.join("class/net")) {
            let ty = read(&path.join("type")).and_then(|t| t.parse::<u32>().ok());
            let parent = pci_parent(&path);
            match ty {
                Some(1) => d.list.push(Device {
                    kind: DeviceKind::Eth,
                    names: vec![name],
                    pci: parent.as_ref().map(|p| p.0),
                    is_virtual: !path.join("device").exists(),
                    cpus: near(parent.as_ref()),
                }),
                Some(32) => ipoib.extend(parent.map(|p| (p.0, name))),
                _ => {}
            }
        }
        // RDMA devices: Omni-Path (hfi*) and InfiniBand.
        for (name, path) in entries(&sys.join("class/infiniband")) {
            let kind = if name.starts_with("hfi") {
                DeviceKind::Hfi
            } else {
                let layers: Vec<String> = entries(&path.join("ports"))
                    .iter()
                    .filter_map(|(_, p)| read(&p.join("link_layer")))
                    .collect();
                if !layers.is_empty() && !layers.iter().any(|l| l == "InfiniBand") {
                    continue;
                }
                DeviceKind::Ib
            };
            let parent = pci_parent(&path);
            let pci = parent.as_ref().map(|p| p.0);
            let mut names = vec![name];
            names.extend(ipoib.iter().filter(|(a, _)| Some(*a) == pci).map(|(_, n)| n.clone()));
            d.list.push(Device {
                kind,
                names,
                pci,
                is_virtual: false,
                cpus: near(parent.as_ref()),
            });
        }
        let rank = |k: DeviceKind| k as u8;
        d.list.sort_by(|a, b| {
            (rank(a.kind), a.pci.is_none(), a.pci, &a.names).cmp(&(
                rank(b.kind),
                b.pci.is_none(),
                b.pci,
                &b.names,
            ))
        });
        d
    }

    /// The devices `kind` (`gpu`, `ib`, ...) binds to, in order: Ethernet interfaces
    /// without a device of their own only if there is no other.
    pub fn of_kind(&self, kind: DeviceKind) -> Vec<&Device> {
        let all: Vec<&Device> = self.list.iter().filter(|d| d.kind == kind.family()).collect();
        if all.iter().any(|d| !d.is_virtual) {
            all.into_iter().filter(|d| !d.is_virtual).collect()
        } else {
            all
        }
    }

    /// The device `kind` followed by `id` names (`gpu1`, `ib0`, `eth0`, `hfi1_0`, `en3`): a
    /// GPU by its number; another device by its name, else by its number in
    /// [`of_kind`](Self::of_kind)'s list.
    pub fn named(&self, kind: DeviceKind, id: &str) -> Option<&Device> {
        let full = format!("{}{id}", kind.prefix());
        let by_name =
            self.list.iter().filter(|d| d.kind == kind.family()).find(|d| d.names.contains(&full));
        by_name.or_else(|| self.of_kind(kind).get(id.parse::<usize>().ok()?).copied())
    }
}

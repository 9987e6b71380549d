//! The errors of this crate, each one line for the user: a list of numbers that does not
//! parse ([`ListError`]), an option that does not parse or a binding and a mapping that do
//! not go together ([`OptionError`]), a node that cannot apply a binding or a memory policy
//! ([`PlacementError`]), a sysfs that does not describe a machine ([`TopologyError`]).

use crate::cpus::CpuSet;
use crate::membind::{MemBind, NodeSet};
use crate::spec::{BindTo, DeviceKind, Object, Objects, PciAddr};
use std::path::PathBuf;

/// A list of numbers in the kernel's syntax (`0-3,8`) that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListError {
    /// An entry that is not a number, or one above [`MAX_CPU`](crate::cpus::MAX_CPU): the
    /// entry, and what the list numbers (`cpu`, `NUMA node`).
    #[error("'{entry}' is not a {what} number")]
    Number { entry: String, what: String },
    /// A range whose first number is above its last.
    #[error("'{range}' is not a {what} range")]
    Range { range: String, what: String },
}

/// The objects `-bind-to` and `-map-by` name, for a message.
pub(crate) const OBJECTS: &str = "hwthread, core, l1cache, l2cache, l3cache, numa, socket, \
                                  machine, gpu, ib, hfi, eth or en (optionally :N), or \
                                  pci:ADDRESS";

/// The `-membind` policies, for a message.
pub(crate) const POLICIES: &str = "none, firsttouch, nexttouch, bind[:NODES] or interleave[:NODES]";

/// A `-bind-to`, `-map-by` or `-membind` value that does not parse, or a binding and a
/// mapping that do not go together. `option` is the option's name (`-bind-to`, `-map-by`),
/// `value` its value as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionError {
    /// `-membind` names no policy we know: the value.
    #[error("-membind: unknown policy '{0}' (expected {POLICIES})")]
    UnknownPolicy(String),
    /// `-membind POLICY:NODES` whose NODES do not parse.
    #[error("-membind {value}: {list}")]
    MemNodes { value: String, list: ListError },
    /// `-bind-to user:LIST` with an entry that does not parse.
    #[error("-bind-to {value}: {list}")]
    UserEntry { value: String, list: ListError },
    /// `-bind-to user:LIST` with an empty entry.
    #[error("-bind-to {0}: empty entry")]
    EmptyUserEntry(String),
    /// `pci:ADDRESS` whose address does not parse.
    #[error(
        "{option} {value}: '{address}' is not a PCI address ([domain:]bus:device.function in \
         hex, as 0000:41:00.0)"
    )]
    PciAddress { option: &'static str, value: String, address: String },
    /// `OBJECT:N` whose N is not a positive count.
    #[error("{option} {value}: '{count}' is not a positive count")]
    Count { option: &'static str, value: String, count: String },
    /// `gpuID` whose ID is not a number.
    #[error("{option} {value}: '{id}' is not a GPU number (gpu, gpuN or gpu:N)")]
    GpuNumber { option: &'static str, value: String, id: String },
    /// `ibID`, `hfiID`, `ethID`, `enID` whose ID is not a device's name or number.
    #[error(
        "{option} {value}: '{id}' is not a device name or number ({p}, {p}ID or {p}:N)",
        p = .kind.prefix()
    )]
    DeviceName { option: &'static str, value: String, kind: DeviceKind, id: String },
    /// An object name we do not know (`-map-by` takes none of `none`, `rr`, `user:LIST`).
    #[error(
        "{option}: unknown object '{name}' (expected {}{OBJECTS})",
        if *.option == "-map-by" { "" } else { "none, rr, user:LIST, " }
    )]
    UnknownObject { option: &'static str, name: String },
    /// A binding and a mapping that do not go together (see
    /// [`Binding::check`](crate::Binding::check)).
    #[error("-bind-to {bind} -map-by {map}: {}", mismatch(&.bind.obj))]
    Mismatch { bind: Objects, map: Objects },
}

/// Why a binding to `obj` does not map by another object.
fn mismatch(obj: &Object) -> String {
    match obj {
        Object::Pci(_) => format!("an I/O binding maps only by its own devices ({obj})"),
        _ if obj.is_io() => format!("an I/O binding maps only by its own devices ({obj}[:N])"),
        _ => "only an I/O binding (pci:, gpu, ib, hfi, eth, en) maps by I/O devices".to_string(),
    }
}

/// A binding or a memory policy that a node cannot apply. `host` names the node; `options`
/// is `-bind-to B` or `-bind-to B -map-by M`, as the job gives them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// A cpu of a `user:` list that the node cannot use.
    #[error("-bind-to {bind}: cpu {cpu} is not usable on {host} (its cpus: {usable})")]
    UserCpu { bind: BindTo, cpu: u32, host: String, usable: CpuSet },
    /// The binding gives no cpus at all.
    #[error("-bind-to {bind}: nothing to bind to on {host}")]
    Nothing { bind: BindTo, host: String },
    /// Fewer binding objects than one entry takes.
    #[error("-bind-to {bind}: {host} has only {have} {} object(s) (cpus {usable})", .bind.obj)]
    FewObjects { bind: Objects, host: String, have: usize, usable: CpuSet },
    /// No mapping object holds as many binding objects as one entry takes.
    #[error(
        "-bind-to {bind} -map-by {map}: no {} of {host} holds {} {} objects",
        .map.obj, .bind.count, .bind.obj
    )]
    NoMapObject { bind: Objects, map: Objects, host: String },
    /// The node has no PCI device at this address.
    #[error("{options}: {host} has no PCI device {address}")]
    NoPciDevice { options: String, host: String, address: PciAddr },
    /// The node has no device of this kind.
    #[error("{options}: {host} has no {} device", .kind.describe())]
    NoDevice { options: String, host: String, kind: DeviceKind },
    /// The node has no device of this kind with this name or number: its devices of the
    /// kind, listed (`0 mlx5_0, 1 at 0000:41:00.0`).
    #[error(
        "{options}: {host} has no {d} device {}{id} (its {d} devices: {devices})",
        .kind.prefix(),
        d = .kind.describe()
    )]
    NoNamedDevice { options: String, host: String, kind: DeviceKind, id: String, devices: String },
    /// Fewer devices than an entry or a mapping group takes: `what` calls them (`GPU`,
    /// `PCI`).
    #[error("{options}: {host} has only {have} {what} device(s) for {want}")]
    FewDevices { options: String, host: String, have: usize, what: &'static str, want: usize },
    /// NUMA nodes of `-membind POLICY:NODES` that the node cannot allocate on; `usable`:
    /// those it can.
    #[error(
        "-membind {mem}: NUMA {} {bad} {} not usable on {host} (its NUMA nodes with memory: {})",
        if .bad.len() == 1 { "node" } else { "nodes" },
        if .bad.len() == 1 { "is" } else { "are" },
        if .usable.is_empty() { "none".to_string() } else { .usable.to_string() }
    )]
    MemNodes { mem: MemBind, bad: NodeSet, host: String, usable: NodeSet },
    /// The node has NUMA nodes but none with memory that it may allocate on.
    #[error("-membind {mem}: no NUMA node with memory is usable on {host}")]
    NoMemNode { mem: MemBind, host: String },
}

/// A sysfs that does not describe a machine (see
/// [`Topology::from_sysfs`](crate::Topology::from_sysfs)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    /// The list of online cpus cannot be read: its path.
    #[error("cannot read {}", .0.display())]
    Unreadable(PathBuf),
    /// The list of online cpus does not parse.
    #[error("{}: {list}", .path.display())]
    Online { path: PathBuf, list: ListError },
    /// No cpu is online and allowed.
    #[error("no usable cpu")]
    NoCpu,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{parse_bind, parse_map};
    use crate::{parse_membind, CpuSet};

    /// The messages whose wording depends on what is wrong, word for word.
    #[test]
    fn messages() {
        let objs = |s: &str| parse_map(s).expect("an object");
        let cases: Vec<(Box<dyn std::fmt::Display>, &str)> = vec![
            (
                Box::new(parse_bind("nope").unwrap_err()),
                "-bind-to: unknown object 'nope' (expected none, rr, user:LIST, hwthread, core, \
                 l1cache, l2cache, l3cache, numa, socket, machine, gpu, ib, hfi, eth or en \
                 (optionally :N), or pci:ADDRESS)",
            ),
            (
                Box::new(parse_map("none:2").unwrap_err()),
                "-map-by: unknown object 'none' (expected hwthread, core, l1cache, l2cache, \
                 l3cache, numa, socket, machine, gpu, ib, hfi, eth or en (optionally :N), or \
                 pci:ADDRESS)",
            ),
            (Box::new(parse_bind("core:0").unwrap_err()), "-bind-to core:0: '0' is not a positive count"),
            (
                Box::new(parse_map("gpux").unwrap_err()),
                "-map-by gpux: 'x' is not a GPU number (gpu, gpuN or gpu:N)",
            ),
            (
                Box::new(parse_bind("ib0/1:2").unwrap_err()),
                "-bind-to ib0/1:2: '0/1' is not a device name or number (ib, ibID or ib:N)",
            ),
            (
                Box::new(parse_bind("pci:zz").unwrap_err()),
                "-bind-to pci:zz: 'zz' is not a PCI address ([domain:]bus:device.function in hex, \
                 as 0000:41:00.0)",
            ),
            (Box::new(parse_bind("user:0,,1").unwrap_err()), "-bind-to user:0,,1: empty entry"),
            (Box::new(parse_bind("user:3-1").unwrap_err()), "-bind-to user:3-1: '3-1' is not a cpu range"),
            (
                Box::new(parse_membind("bind:x").unwrap_err()),
                "-membind bind:x: 'x' is not a NUMA node number",
            ),
            (
                Box::new(OptionError::Mismatch { bind: objs("pci:41:00.0"), map: objs("core") }),
                "-bind-to pci:0000:41:00.0 -map-by core: an I/O binding maps only by its own \
                 devices (pci:0000:41:00.0)",
            ),
            (
                Box::new(OptionError::Mismatch { bind: objs("gpu:2"), map: objs("ib") }),
                "-bind-to gpu:2 -map-by ib: an I/O binding maps only by its own devices (gpu[:N])",
            ),
            (
                Box::new(OptionError::Mismatch { bind: objs("core"), map: objs("gpu") }),
                "-bind-to core -map-by gpu: only an I/O binding (pci:, gpu, ib, hfi, eth, en) maps \
                 by I/O devices",
            ),
            (
                Box::new(PlacementError::NoMapObject {
                    bind: objs("core:3"),
                    map: objs("socket"),
                    host: "h".into(),
                }),
                "-bind-to core:3 -map-by socket: no socket of h holds 3 core objects",
            ),
            (
                Box::new(PlacementError::NoNamedDevice {
                    options: "-bind-to ib1".into(),
                    host: "h".into(),
                    kind: DeviceKind::Ib,
                    id: "1".into(),
                    devices: "0 mlx5_0".into(),
                }),
                "-bind-to ib1: h has no InfiniBand device ib1 (its InfiniBand devices: 0 mlx5_0)",
            ),
            (
                Box::new(PlacementError::MemNodes {
                    mem: parse_membind("bind:3").expect("a policy"),
                    bad: CpuSet::new(vec![3]),
                    host: "h".into(),
                    usable: CpuSet::default(),
                }),
                "-membind bind:3: NUMA node 3 is not usable on h (its NUMA nodes with memory: none)",
            ),
            (
                Box::new(PlacementError::MemNodes {
                    mem: parse_membind("bind:2-3").expect("a policy"),
                    bad: CpuSet::new(vec![2, 3]),
                    host: "h".into(),
                    usable: CpuSet::new(vec![0, 1]),
                }),
                "-membind bind:2-3: NUMA nodes 2-3 are not usable on h (its NUMA nodes with \
                 memory: 0-1)",
            ),
        ];
        for (e, want) in cases {
            assert_eq!(e.to_string(), want);
        }
    }
}

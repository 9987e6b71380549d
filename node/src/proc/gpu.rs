//! GPUs for this node's ranks (`-gpus-per-proc N`, `-gpu-subdevs-per-proc N`): local rank i
//! sees entries `[i*N, i*N+N)` of the node's device list, written into the GPU runtime's
//! visibility variable; a rank past the end of the list, or every rank under `N = 0`, sees no
//! device ([`NONE`]).
//!
//! The list is the node's own, read by its NLA: the entries of the first visibility variable
//! set in the NLA's environment (a batch system's allocation: Slurm's GRES sets
//! `CUDA_VISIBLE_DEVICES=2,3`), else the devices found under `/` ([`detect`]: NVIDIA, AMD,
//! Intel, the first with any), numbered 0..k-1 as their runtime numbers them. The variable
//! written is the one that gave the list, else the vendor's, else `CUDA_VISIBLE_DEVICES`
//! (no GPU found: every rank gets [`NONE`] there). Detection reads files under a root
//! path only, so that tests run it on fabricated trees.

use libi::job::{JobCommon, NodePlan};
use std::path::Path;

/// The value that shows a rank no device: an index no runtime has (CUDA and HIP show the
/// devices before the first bad index; an empty `ZE_AFFINITY_MASK` would mean no mask at
/// all). Hydra writes the same.
pub const NONE: &str = "-1";

/// The visibility variables, in the order a preset one is looked for (after those of the
/// vendor found on the node).
pub const VARS: [&str; 4] =
    ["CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK"];

/// A GPU vendor whose devices [`detect`] finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vendor {
    Nvidia,
    Amd,
    Intel,
}

impl Vendor {
    /// Its runtime's variables, in the order a preset one is looked for: for AMD the HIP
    /// list first, whose entries index the devices a `ROCR_VISIBLE_DEVICES` left.
    fn vars(self) -> &'static [&'static str] {
        match self {
            Vendor::Nvidia => &["CUDA_VISIBLE_DEVICES"],
            Vendor::Amd => &["HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"],
            Vendor::Intel => &["ZE_AFFINITY_MASK"],
        }
    }

    /// The variable written for devices found on the machine (`ROCR_VISIBLE_DEVICES` for
    /// AMD: every ROCm runtime honours it, HIP's variable only HIP).
    fn var(self) -> &'static str {
        match self {
            Vendor::Nvidia => "CUDA_VISIBLE_DEVICES",
            Vendor::Amd => "ROCR_VISIBLE_DEVICES",
            Vendor::Intel => "ZE_AFFINITY_MASK",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Vendor::Nvidia => "NVIDIA",
            Vendor::Amd => "AMD",
            Vendor::Intel => "Intel",
        }
    }
}

/// The names in directory `dir` that are `prefix` followed by a number, by that number.
fn numbered(dir: &Path, prefix: &str) -> Vec<(u64, String)> {
    let mut v: Vec<(u64, String)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let n = name.strip_prefix(prefix)?.parse().ok()?;
            Some((n, name))
        })
        .collect();
    v.sort();
    v
}

/// NVIDIA: one directory per GPU (named by its PCI address) in `/proc/driver/nvidia/gpus`
/// while the driver is loaded (in a container, only those it was given).
fn nvidia(root: &Path) -> usize {
    std::fs::read_dir(root.join("proc/driver/nvidia/gpus")).map_or(0, |d| d.flatten().count())
}

/// AMD: the KFD topology's nodes with compute units (`simd_count` > 0) or a `gpu_id`; CPU
/// nodes have neither.
fn amd(root: &Path) -> usize {
    let nodes = root.join("sys/class/kfd/kfd/topology/nodes");
    numbered(&nodes, "")
        .iter()
        .filter(|(_, name)| {
            let node = nodes.join(name);
            let nonzero = |s: &str| s.trim().parse::<u64>().is_ok_and(|n| n > 0);
            let simds = std::fs::read_to_string(node.join("properties")).is_ok_and(|p| {
                p.lines().any(|l| l.strip_prefix("simd_count").is_some_and(nonzero))
            });
            simds || std::fs::read_to_string(node.join("gpu_id")).is_ok_and(|s| nonzero(&s))
        })
        .count()
}

/// Intel: the DRM cards (`card0`, not `card0-DP-1` or `renderD128`) driven by `i915` or
/// `xe`, in card order, each with its number of tiles (`xe`: `device/tile*`; `i915`:
/// `gt/gt*`; 0 where neither is listed).
fn intel(root: &Path) -> Vec<usize> {
    let drm = root.join("sys/class/drm");
    numbered(&drm, "card")
        .iter()
        .filter(|(_, name)| {
            let driver = std::fs::read_link(drm.join(name).join("device/driver"));
            driver.is_ok_and(|d| d.file_name().is_some_and(|n| n == "i915" || n == "xe"))
        })
        .map(|(_, name)| {
            let card = drm.join(name);
            let tiles = numbered(&card.join("device"), "tile").len();
            if tiles > 0 {
                tiles
            } else {
                numbered(&card.join("gt"), "gt").len()
            }
        })
        .collect()
}

/// Level Zero's ids of Intel devices with these tile counts: `d` per device, or with
/// `subdevs` `d.s` per tile of a device with two or more (one with a single tile is its
/// own only sub-device: `d`).
fn intel_ids(tiles: &[usize], subdevs: bool) -> Vec<String> {
    let mut ids = Vec::new();
    for (d, &t) in tiles.iter().enumerate() {
        if subdevs && t > 1 {
            ids.extend((0..t).map(|s| format!("{d}.{s}")));
        } else {
            ids.push(d.to_string());
        }
    }
    ids
}

/// The GPUs under `root` (`/` on a node): the first of NVIDIA, AMD, Intel with any, and
/// their ids as the runtime numbers them (0..k-1; with `subdevs`, Intel tiles `d.s`).
pub fn detect(root: &Path, subdevs: bool) -> Option<(Vendor, Vec<String>)> {
    let count = |k: usize| (0..k).map(|i| i.to_string()).collect::<Vec<_>>();
    match (nvidia(root), amd(root)) {
        (k, _) if k > 0 => Some((Vendor::Nvidia, count(k))),
        (_, k) if k > 0 => Some((Vendor::Amd, count(k))),
        _ => {
            let tiles = intel(root);
            (!tiles.is_empty()).then(|| (Vendor::Intel, intel_ids(&tiles, subdevs)))
        }
    }
}

/// Where a node's device list came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The variable was set in the NLA's environment.
    Preset,
    /// Found on the machine.
    Found(Vendor),
    /// Neither: no device.
    Nothing,
}

/// A node's device list and the variable that shows a rank its part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeList {
    pub var: &'static str,
    pub ids: Vec<String>,
    pub source: Source,
}

/// The node's device list: the entries of the first visibility variable `get` finds set
/// (even empty: an allocation of no device) — the found vendor's first, then in [`VARS`]
/// order — else the devices [`detect`] finds under `root`. With `subdevs`, whole devices of
/// a preset `ZE_AFFINITY_MASK` are taken apart into their tiles.
pub fn node_list(root: &Path, get: &dyn Fn(&str) -> Option<String>, subdevs: bool) -> NodeList {
    let found = detect(root, subdevs);
    let vendor = found.as_ref().map(|(v, _)| *v);
    let order = vendor.map_or(&[][..], |v| v.vars()).iter().chain(VARS.iter());
    for &var in order {
        let Some(value) = get(var) else { continue };
        let mut ids: Vec<String> =
            value.split(',').map(str::trim).filter(|e| !e.is_empty()).map(str::to_string).collect();
        if subdevs && var == "ZE_AFFINITY_MASK" {
            let tiles = intel(root);
            ids = ids
                .into_iter()
                .flat_map(|e| match e.parse::<usize>().ok().and_then(|d| tiles.get(d)) {
                    Some(&t) if t > 1 => (0..t).map(|s| format!("{e}.{s}")).collect(),
                    _ => vec![e],
                })
                .collect();
        }
        return NodeList { var, ids, source: Source::Preset };
    }
    match found {
        Some((v, ids)) => NodeList { var: v.var(), ids, source: Source::Found(v) },
        None => NodeList { var: VARS[0], ids: Vec::new(), source: Source::Nothing },
    }
}

/// Local rank `local`'s part of `ids` with `n` per rank: `[local*n, local*n+n)`, shorter at
/// the end, empty past it.
pub fn slice(ids: &[String], n: u32, local: usize) -> &[String] {
    let start = local.saturating_mul(n as usize).min(ids.len());
    let end = start.saturating_add(n as usize).min(ids.len());
    &ids[start..end]
}

/// The variable's value for these ids ([`NONE`] for none).
pub fn value(ids: &[String]) -> String {
    if ids.is_empty() {
        NONE.to_string()
    } else {
        ids.join(",")
    }
}

/// What this node's ranks get: the variable and each local rank's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    pub var: &'static str,
    /// By local rank.
    pub values: Vec<String>,
    /// The node's list, for `-v`.
    pub list: NodeList,
}

/// Split `list` among `nranks` local ranks, `n` each.
pub fn assign(list: NodeList, n: u32, nranks: usize) -> Assignment {
    let values = (0..nranks).map(|local| value(slice(&list.ids, n, local))).collect();
    Assignment { var: list.var, values, list }
}

/// This node's assignment, or `None` when the job sets no GPU variable (`auto`): the list
/// from this process's environment and `/`.
pub fn node_gpus(job: &JobCommon, plan: &NodePlan) -> Option<Assignment> {
    let (n, subdevs) = job.gpus.per_rank()?;
    let get = |k: &str| std::env::var_os(k).map(|v| v.to_string_lossy().into_owned());
    let list = node_list(Path::new("/"), &get, subdevs);
    Some(assign(list, n, plan.ranks.len()))
}

/// `-v`: the node's list, then one line per rank, on the NLA's stderr.
pub fn report(plan: &NodePlan, a: &Assignment) {
    let host = &plan.host;
    let ids = a.list.ids.join(",");
    match &a.list.source {
        Source::Preset => eprintln!("[libi-nla@{host}] gpu list '{ids}' (preset {})", a.var),
        Source::Found(v) => eprintln!("[libi-nla@{host}] gpu list {ids} ({} found)", v.name()),
        Source::Nothing => eprintln!("[libi-nla@{host}] gpu list empty (no GPU found)"),
    }
    for (local, (slot, v)) in plan.ranks.iter().zip(&a.values).enumerate() {
        let rank = slot.rank;
        if v == NONE {
            eprintln!("[libi-nla@{host}] rank {rank} (local {local}) gpus none ({}={NONE})", a.var);
        } else {
            eprintln!("[libi-nla@{host}] rank {rank} (local {local}) gpus {v} ({})", a.var);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libi::job::GpuSplit;
    use std::path::PathBuf;

    /// A fresh directory to fabricate a machine's /proc and /sys in (removed on drop).
    struct Root(PathBuf);

    impl Root {
        fn new(name: &str) -> Root {
            let p = std::env::temp_dir().join(format!("libi-gpu-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Root(p)
        }
        fn file(&self, path: &str, text: &str) -> &Self {
            let p = self.0.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
            self
        }
        fn dir(&self, path: &str) -> &Self {
            std::fs::create_dir_all(self.0.join(path)).unwrap();
            self
        }
        fn link(&self, path: &str, to: &str) -> &Self {
            let p = self.0.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::os::unix::fs::symlink(to, p).unwrap();
            self
        }
        /// A DRM card driven by `driver` with `tiles` tile directories (xe's layout) or gt
        /// directories (i915's).
        fn card(&self, n: u32, driver: &str, tiles: u32) -> &Self {
            let to = format!("../../../bus/pci/drivers/{driver}");
            self.link(&format!("sys/class/drm/card{n}/device/driver"), &to);
            self.dir(&format!("sys/class/drm/card{n}-DP-1"));
            for t in 0..tiles {
                match driver {
                    "xe" => self.dir(&format!("sys/class/drm/card{n}/device/tile{t}/gt{t}")),
                    _ => self.dir(&format!("sys/class/drm/card{n}/gt/gt{t}")),
                };
            }
            self
        }
    }

    impl Drop for Root {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn nothing_found_on_an_empty_tree() {
        let r = Root::new("empty");
        assert_eq!(detect(&r.0, false), None);
        let l = node_list(&r.0, &no_env, false);
        assert_eq!(
            l,
            NodeList { var: "CUDA_VISIBLE_DEVICES", ids: vec![], source: Source::Nothing }
        );
        // A CPU-only KFD node and a card of another driver are no GPU either.
        r.file(
            "sys/class/kfd/kfd/topology/nodes/0/properties",
            "cpu_cores_count 8\nsimd_count 0\n",
        )
        .file("sys/class/kfd/kfd/topology/nodes/0/gpu_id", "0\n")
        .link("sys/class/drm/card0/device/driver", "../../../bus/pci/drivers/ast")
        .dir("proc/driver/nvidia");
        assert_eq!(detect(&r.0, false), None);
    }

    #[test]
    fn nvidia_counts_the_driver_entries() {
        let r = Root::new("nvidia");
        for bus in ["0000:07:00.0", "0000:0b:00.0", "0000:48:00.0"] {
            r.file(&format!("proc/driver/nvidia/gpus/{bus}/information"), "Model: x\n");
        }
        // An Intel iGPU next to them does not count: NVIDIA comes first.
        r.card(0, "i915", 1);
        assert_eq!(detect(&r.0, false), Some((Vendor::Nvidia, ids(&["0", "1", "2"]))));
        assert_eq!(detect(&r.0, true), Some((Vendor::Nvidia, ids(&["0", "1", "2"]))));
        let l = node_list(&r.0, &no_env, false);
        assert_eq!((l.var, l.source), ("CUDA_VISIBLE_DEVICES", Source::Found(Vendor::Nvidia)));
    }

    #[test]
    fn amd_counts_kfd_nodes_with_compute_units() {
        let r = Root::new("amd");
        let nodes = "sys/class/kfd/kfd/topology/nodes";
        r.file(&format!("{nodes}/0/properties"), "cpu_cores_count 64\nsimd_count 0\n")
            .file(&format!("{nodes}/0/gpu_id"), "0\n");
        for n in 1..=4 {
            r.file(&format!("{nodes}/{n}/properties"), "cpu_cores_count 0\nsimd_count 440\n")
                .file(&format!("{nodes}/{n}/gpu_id"), &format!("{}\n", 1000 + n));
        }
        // gpu_id alone also marks a GPU.
        r.file(&format!("{nodes}/5/properties"), "cpu_cores_count 0\n")
            .file(&format!("{nodes}/5/gpu_id"), "2222\n");
        assert_eq!(detect(&r.0, false), Some((Vendor::Amd, ids(&["0", "1", "2", "3", "4"]))));
        let l = node_list(&r.0, &no_env, false);
        assert_eq!(l.var, "ROCR_VISIBLE_DEVICES");
    }

    #[test]
    fn intel_cards_and_tiles() {
        let r = Root::new("intel");
        r.link("sys/class/drm/card0/device/driver", "../../../bus/pci/drivers/ast");
        r.card(1, "xe", 2).card(2, "i915", 2).card(10, "i915", 1);
        r.dir("sys/class/drm/renderD128");
        assert_eq!(detect(&r.0, false), Some((Vendor::Intel, ids(&["0", "1", "2"]))));
        let subs = ids(&["0.0", "0.1", "1.0", "1.1", "2"]);
        assert_eq!(detect(&r.0, true), Some((Vendor::Intel, subs)));
        assert_eq!(node_list(&r.0, &no_env, true).var, "ZE_AFFINITY_MASK");
        // A preset mask: whole devices taken apart into their tiles, tiles kept.
        let env = |k: &str| (k == "ZE_AFFINITY_MASK").then(|| "1, 0.1,2".to_string());
        let l = node_list(&r.0, &env, true);
        assert_eq!(l.ids, ids(&["1.0", "1.1", "0.1", "2"]));
        assert_eq!(l.source, Source::Preset);
        assert_eq!(node_list(&r.0, &env, false).ids, ids(&["1", "0.1", "2"]));
    }

    #[test]
    fn a_preset_variable_wins_over_the_machine() {
        let r = Root::new("preset");
        r.file("proc/driver/nvidia/gpus/0000:07:00.0/information", "");
        let env = |k: &str| (k == "CUDA_VISIBLE_DEVICES").then(|| "4,5,6,7".to_string());
        let l = node_list(&r.0, &env, false);
        assert_eq!(
            l,
            NodeList {
                var: "CUDA_VISIBLE_DEVICES",
                ids: ids(&["4", "5", "6", "7"]),
                source: Source::Preset
            }
        );
        // Set but empty: an allocation of nothing.
        let empty = |k: &str| (k == "CUDA_VISIBLE_DEVICES").then(String::new);
        assert_eq!(node_list(&r.0, &empty, false).ids, Vec::<String>::new());
        // Another vendor's variable, with no GPU found: used as it is.
        let none = Root::new("preset-none");
        let rocr = |k: &str| (k == "ROCR_VISIBLE_DEVICES").then(|| "2,3".to_string());
        let l = node_list(&none.0, &rocr, false);
        assert_eq!((l.var, l.ids), ("ROCR_VISIBLE_DEVICES", ids(&["2", "3"])));
        // Several set (Slurm may set them all): the found vendor's first, then VARS order.
        let all = |k: &str| Some(format!("{k}-list"));
        assert_eq!(node_list(&r.0, &all, false).var, "CUDA_VISIBLE_DEVICES");
        let amd = Root::new("preset-amd");
        amd.file("sys/class/kfd/kfd/topology/nodes/1/gpu_id", "7\n");
        assert_eq!(node_list(&amd.0, &all, false).var, "HIP_VISIBLE_DEVICES");
        let rocr_cuda = |k: &str| {
            matches!(k, "ROCR_VISIBLE_DEVICES" | "CUDA_VISIBLE_DEVICES").then(|| k.to_string())
        };
        assert_eq!(node_list(&amd.0, &rocr_cuda, false).var, "ROCR_VISIBLE_DEVICES");
        assert_eq!(node_list(&none.0, &rocr_cuda, false).var, "CUDA_VISIBLE_DEVICES");
    }

    #[test]
    fn slices_per_local_rank() {
        let l = ids(&["4", "5", "6", "7"]);
        let parts = |n: u32, k: usize| (0..k).map(|i| value(slice(&l, n, i))).collect::<Vec<_>>();
        assert_eq!(parts(2, 2), ["4,5", "6,7"]);
        assert_eq!(parts(1, 5), ["4", "5", "6", "7", "-1"]);
        assert_eq!(parts(3, 3), ["4,5,6", "7", "-1"]);
        assert_eq!(parts(0, 2), ["-1", "-1"]);
        assert_eq!(parts(u32::MAX, 2), ["4,5,6,7", "-1"]);
        assert_eq!(value(slice(&[], 2, 0)), "-1");
        let a = assign(NodeList { var: "X", ids: ids(&["0", "1"]), source: Source::Preset }, 1, 3);
        assert_eq!((a.var, a.values), ("X", ids(&["0", "1", "-1"])));
    }

    #[test]
    fn hydra_precedence_of_the_two_options() {
        let s = |devices, subdevs| GpuSplit { devices, subdevs }.per_rank();
        assert_eq!(s(None, None), None);
        assert_eq!(s(Some(2), None), Some((2, false)));
        assert_eq!(s(None, Some(2)), Some((2, true)));
        assert_eq!(s(Some(1), Some(2)), Some((2, true)));
        assert_eq!(s(Some(0), Some(2)), Some((0, false)));
        assert_eq!(s(Some(2), Some(0)), Some((0, false)));
    }
}

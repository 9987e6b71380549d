//! Process binding for libi: a node's topology read from Linux's sysfs, Hydra's `-bind-to`,
//! `-map-by` and `-membind` options, and the cpu set and memory policy of each local rank.
//!
//! Pure except for [`Topology::from_sysfs`], which reads files under a given root (tests
//! point it at recorded fixture trees of bigger machines). Applying a set is the NLA's job.
#![forbid(unsafe_code)]

pub mod cpus;
pub mod devices;
pub mod error;
pub mod map;
pub mod membind;
pub mod spec;
pub mod topology;

pub use cpus::CpuSet;
pub use devices::{Device, Devices};
pub use error::{ListError, OptionError, PlacementError, TopologyError};
pub use map::rank_cpus;
pub use membind::{parse_membind, parse_membind_or_none, rank_mems, MemBind, MemPolicy, NodeSet};
pub use spec::{
    parse_bind, parse_map, BindTo, Binding, CacheKind, DeviceKind, Object, Objects, PciAddr,
};
pub use topology::Topology;

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    /// A machine to fake under a sysfs root, numbered as Linux numbers x86 machines: the
    /// first threads of all cores (socket by socket), then the second threads.
    struct Machine {
        sockets: u32,
        numa_per_socket: u32,
        cores_per_socket: u32,
        threads: u32,
        /// Cores sharing one L3 (0: no L3 in sysfs).
        l3_cores: u32,
        /// Write NUMA nodes.
        numa: bool,
    }

    fn write(p: &Path, s: &str) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, format!("{s}\n")).unwrap();
    }

    impl Machine {
        fn cores(&self) -> u32 {
            self.sockets * self.cores_per_socket
        }
        fn cpu(&self, core: u32, thread: u32) -> u32 {
            thread * self.cores() + core
        }
        fn set(&self, cores: impl Iterator<Item = u32> + Clone) -> String {
            (0..self.threads)
                .flat_map(|t| cores.clone().map(move |c| (c, t)))
                .map(|(c, t)| self.cpu(c, t))
                .collect::<CpuSet>()
                .to_string()
        }

        /// Write the sysfs files the topology reader uses into a fresh directory.
        fn sysfs(&self, name: &str) -> PathBuf {
            let root =
                std::env::temp_dir().join(format!("libi-binding-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            let cpu = root.join("devices/system/cpu");
            let n = self.cores() * self.threads;
            write(&cpu.join("online"), &format!("0-{}", n - 1));
            for core in 0..self.cores() {
                let socket = core / self.cores_per_socket;
                let l3 = core.checked_div(self.l3_cores).map_or(0, |g| g * self.l3_cores);
                for t in 0..self.threads {
                    let d = cpu.join(format!("cpu{}", self.cpu(core, t)));
                    write(&d.join("topology/physical_package_id"), &socket.to_string());
                    write(&d.join("topology/core_id"), &(core % self.cores_per_socket).to_string());
                    write(&d.join("topology/thread_siblings_list"), &self.set(core..core + 1));
                    for (i, (level, ty)) in
                        [(1, "Data"), (1, "Instruction"), (2, "Unified")].iter().enumerate()
                    {
                        let c = d.join(format!("cache/index{i}"));
                        write(&c.join("level"), &level.to_string());
                        write(&c.join("type"), ty);
                        write(&c.join("shared_cpu_list"), &self.set(core..core + 1));
                    }
                    if self.l3_cores > 0 {
                        let c = d.join("cache/index3");
                        write(&c.join("level"), "3");
                        write(&c.join("type"), "Unified");
                        write(&c.join("shared_cpu_list"), &self.set(l3..l3 + self.l3_cores));
                    }
                }
            }
            if self.numa {
                let nodes = self.sockets * self.numa_per_socket;
                write(&root.join("devices/system/node/has_memory"), &format!("0-{}", nodes - 1));
                let per = self.cores_per_socket / self.numa_per_socket;
                for node in 0..self.sockets * self.numa_per_socket {
                    write(
                        &root.join(format!("devices/system/node/node{node}/cpulist")),
                        &self.set(node * per..(node + 1) * per),
                    );
                }
            }
            root
        }
    }

    /// 2 sockets × 64 cores × 2 threads, L3 per 8 cores, 2 NUMA nodes per socket (an AMD
    /// EPYC 7xx3 pair in NPS2): cpus 0-127 are first threads, 128-255 their siblings.
    fn epyc() -> Topology {
        static T: std::sync::OnceLock<Topology> = std::sync::OnceLock::new();
        T.get_or_init(read_epyc).clone()
    }

    /// 2 sockets × 64 cores × 2 threads, L3 per 8 cores, 2 NUMA nodes a socket.
    fn epyc_machine() -> Machine {
        Machine {
            sockets: 2,
            numa_per_socket: 2,
            cores_per_socket: 64,
            threads: 2,
            l3_cores: 8,
            numa: true,
        }
    }

    fn read_epyc() -> Topology {
        let root = epyc_machine().sysfs("epyc");
        let t = Topology::from_sysfs(&root, None).unwrap();
        let _ = std::fs::remove_dir_all(root);
        t
    }

    /// `-bind-to bind [-map-by map]`.
    fn binding(bind: &str, map: Option<&str>) -> Binding {
        Binding {
            bind: parse_bind(bind).unwrap(),
            map: map.map(|m| parse_map(m).unwrap()),
            ..Binding::default()
        }
    }

    /// The cpu lists of `n` local ranks under `-bind-to bind [-map-by map]`.
    fn lists(t: &Topology, bind: &str, map: Option<&str>, n: usize) -> Vec<String> {
        let b = binding(bind, map);
        let sets = rank_cpus(t, &b, n, "h").unwrap().unwrap();
        sets.iter().map(|s| s.as_ref().map_or("unbound".to_string(), |s| s.to_string())).collect()
    }

    fn err(t: &Topology, bind: &str, map: Option<&str>) -> String {
        rank_cpus(t, &binding(bind, map), 4, "h").unwrap_err().to_string()
    }

    #[test]
    fn epyc_objects() {
        let t = epyc();
        assert_eq!(t.pus().len(), 256);
        assert_eq!(t.objects(Object::Core).len(), 128);
        assert_eq!(t.objects(Object::Socket).len(), 2);
        assert_eq!(t.objects(Object::Numa).len(), 4);
        assert_eq!(t.objects(Object::Cache { level: 3, kind: CacheKind::Any }).len(), 16);
        assert_eq!(t.objects(Object::Cache { level: 1, kind: CacheKind::Instruction }).len(), 128);
        // Logical order: both threads of core 0 come first.
        let first: Vec<u32> = t.pus().iter().take(4).map(|p| p.os).collect();
        assert_eq!(first, [0, 128, 1, 129]);
    }

    #[test]
    fn epyc_bind_to_objects() {
        let t = epyc();
        assert_eq!(lists(&t, "core", None, 3), ["0,128", "1,129", "2,130"]);
        assert_eq!(lists(&t, "hwthread", None, 3), ["0", "128", "1"]);
        assert_eq!(lists(&t, "l2cache", None, 2), ["0,128", "1,129"]);
        assert_eq!(lists(&t, "l3cache", None, 2), ["0-7,128-135", "8-15,136-143"]);
        assert_eq!(lists(&t, "numa", None, 2), ["0-31,128-159", "32-63,160-191"]);
        assert_eq!(
            lists(&t, "socket", None, 3),
            ["0-63,128-191", "64-127,192-255", "0-63,128-191"]
        );
        assert_eq!(lists(&t, "machine", None, 1), ["0-255"]);
        // More ranks than objects wrap around, as in Hydra.
        let c = lists(&t, "core", None, 130);
        assert_eq!(c[127], "127,255");
        assert_eq!(c[128], "0,128");
        // rr: OS numbering.
        assert_eq!(lists(&t, "rr", None, 3), ["0", "1", "2"]);
    }

    #[test]
    fn epyc_counts() {
        let t = epyc();
        assert_eq!(lists(&t, "core:2", None, 2), ["0-1,128-129", "2-3,130-131"]);
        assert_eq!(lists(&t, "hwthread:2", None, 1), ["0,128"]);
        // 128 cores in threes: 42 entries, then wrap (the last 2 cores stay unused).
        let c = lists(&t, "core:3", None, 43);
        assert_eq!(c[41], "123-125,251-253");
        assert_eq!(c[42], c[0]);
        assert_eq!(lists(&t, "socket:2", None, 1), ["0-255"]);
        let e = err(&t, "socket:3", None);
        assert!(e.contains("h has only 2 socket object(s)"), "{e}");
    }

    #[test]
    fn epyc_map_by() {
        let t = epyc();
        // Spread over the sockets, core by core.
        assert_eq!(lists(&t, "core", Some("socket"), 3), ["0,128", "64,192", "1,129"]);
        assert_eq!(
            lists(&t, "core", Some("numa"), 5),
            ["0,128", "32,160", "64,192", "96,224", "1,129"]
        );
        assert_eq!(lists(&t, "core", Some("l3cache"), 3), ["0,128", "8,136", "16,144"]);
        // Two cores of a socket each, alternating sockets.
        assert_eq!(
            lists(&t, "core:2", Some("socket"), 3),
            ["0-1,128-129", "64-65,192-193", "2-3,130-131"]
        );
        // Two at a time from each socket.
        assert_eq!(lists(&t, "core", Some("socket:2"), 3), ["0,128", "1,129", "64,192"]);
        // First threads of all cores, then the second threads.
        let h = lists(&t, "hwthread", Some("core"), 129);
        assert_eq!(&h[..3], ["0", "1", "2"]);
        assert_eq!(h[128], "128");
        // A mapping object finer than the binding one changes nothing.
        assert_eq!(lists(&t, "socket", Some("core"), 2), lists(&t, "socket", None, 2));
        assert_eq!(lists(&t, "core", Some("core"), 2), lists(&t, "core", None, 2));
    }

    #[test]
    fn user_lists() {
        let t = epyc();
        // Ranks beyond the list are not bound (Hydra 4 and 5); the list is not wrapped.
        assert_eq!(lists(&t, "user:0+128,5", None, 3), ["0,128", "5", "unbound"]);
        assert_eq!(lists(&t, "user:7", None, 4), ["7", "unbound", "unbound", "unbound"]);
        assert_eq!(lists(&t, "user:1,2,3", None, 2), ["1", "2"]);
        let e = err(&t, "user:0,300", None);
        assert_eq!(e, "-bind-to user:0,300: cpu 300 is not usable on h (its cpus: 0-255)");
    }

    /// `-membind` without nodes over the NUMA nodes of the recorded EPYC pair: each rank's
    /// binding's nodes.
    #[test]
    fn epyc_membind() {
        let t = epyc();
        assert_eq!(t.mems().map(ToString::to_string).as_deref(), Some("0-3"));
        let mems = |bind: &str, map: Option<&str>, mem: &str, n: usize| -> Vec<String> {
            let b = Binding { mem: Some(parse_membind(mem).unwrap()), ..binding(bind, map) };
            let cpus = rank_cpus(&t, &b, n, "h").unwrap();
            let p = rank_mems(&t, b.mem.as_ref(), cpus.as_deref(), n, "h").unwrap().unwrap();
            p.iter().map(ToString::to_string).collect()
        };
        assert_eq!(
            mems("core", Some("numa"), "bind", 5),
            ["bind:0", "bind:1", "bind:2", "bind:3", "bind:0"]
        );
        assert_eq!(mems("socket", None, "interleave", 2), ["interleave:0-1", "interleave:2-3"]);
        assert_eq!(mems("core", None, "bind:3", 2), ["bind:3", "bind:3"]);
        assert_eq!(mems("none", None, "bind", 1), ["bind:0-3"]);
        assert_eq!(mems("l3cache", None, "firsttouch", 1), ["local"]);
        // Restricted to a cpuset of nodes 1 and 2 (cpus and memory).
        let allowed = CpuSet::parse("32-95,160-223").unwrap();
        let root = epyc_machine().sysfs("epyc-cpuset");
        let t = Topology::from_sysfs(&root, Some(&allowed)).unwrap();
        let _ = std::fs::remove_dir_all(root);
        let t = t.restrict_mems(Some(&CpuSet::parse("1-2").unwrap()));
        let b = binding("core", None);
        let cpus = rank_cpus(&t, &b, 1, "h").unwrap();
        let p = rank_mems(&t, Some(&MemBind::Bind(None)), cpus.as_deref(), 1, "h").unwrap();
        assert_eq!(p, Some(vec![MemPolicy::Bind(CpuSet::parse("1").unwrap())]));
        let p = rank_mems(&t, Some(&MemBind::Interleave(None)), None, 1, "h").unwrap();
        assert_eq!(p, Some(vec![MemPolicy::Interleave(CpuSet::parse("1-2").unwrap())]));
    }

    #[test]
    fn none_binds_nothing() {
        let t = epyc();
        let b = binding("none", Some("core"));
        assert_eq!(rank_cpus(&t, &b, 4, "h").unwrap(), None);
    }

    #[test]
    fn restricted_to_allowed_cpus() {
        let m = Machine {
            sockets: 2,
            numa_per_socket: 1,
            cores_per_socket: 4,
            threads: 2,
            l3_cores: 4,
            numa: true,
        };
        let root = m.sysfs("small");
        // A cpuset of cores 1 and 4 (both threads) and cpu 2.
        let allowed = CpuSet::parse("1-2,4,9,12").unwrap();
        let t = Topology::from_sysfs(&root, Some(&allowed)).unwrap();
        let _ = std::fs::remove_dir_all(root);
        assert_eq!(lists(&t, "core", None, 4), ["1,9", "2", "4,12", "1,9"]);
        assert_eq!(lists(&t, "socket", None, 2), ["1-2,9", "4,12"]);
        assert_eq!(lists(&t, "rr", None, 5), ["1", "2", "4", "9", "12"]);
        assert!(err(&t, "user:0", None).contains("cpu 0 is not usable on h (its cpus: 1-2,4,9,12)"));
    }

    #[test]
    fn missing_levels_are_the_machine() {
        let m = Machine {
            sockets: 1,
            numa_per_socket: 1,
            cores_per_socket: 4,
            threads: 1,
            l3_cores: 0,
            numa: false,
        };
        let root = m.sysfs("flat");
        let t = Topology::from_sysfs(&root, None).unwrap();
        let _ = std::fs::remove_dir_all(root);
        assert_eq!(lists(&t, "l3cache", None, 2), ["0-3", "0-3"]);
        assert_eq!(lists(&t, "numa", None, 1), ["0-3"]);
        assert_eq!(lists(&t, "core", None, 5), ["0", "1", "2", "3", "0"]);
        assert_eq!(lists(&t, "hwthread", Some("socket"), 2), ["0", "1"]);
    }

    // ---- I/O devices ----

    /// Fake a PCI device `addr` below host bridge `bridge` (with `local_cpulist` `near`, or
    /// only a `numa_node` when `near` is None) and list it in `bus/pci/devices`; returns its
    /// directory.
    fn pci(root: &Path, addr: &str, class: &str, vendor: &str, near: Option<&str>) -> PathBuf {
        let dir = root.join(format!("devices/pci0000:{}/{addr}", &addr[5..7]));
        write(&dir.join("class"), class);
        write(&dir.join("vendor"), vendor);
        match near {
            Some(l) => write(&dir.join("local_cpulist"), l),
            None => write(&dir.join("numa_node"), "0"),
        }
        link(&root.join("bus/pci/devices").join(addr), &dir);
        dir
    }

    fn link(at: &Path, to: &Path) {
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(to, at).unwrap();
    }

    /// A network interface `name` of ARPHRD type `ty` in `dir` (below a device or in
    /// `devices/virtual/net`), with a `device` link unless virtual.
    fn net(root: &Path, dir: &Path, name: &str, ty: u32, device: Option<&Path>) {
        let d = dir.join("net").join(name);
        write(&d.join("type"), &ty.to_string());
        if let Some(dev) = device {
            link(&d.join("device"), dev);
        }
        link(&root.join("class/net").join(name), &d);
    }

    /// An RDMA device with one port of `layer`.
    fn rdma(root: &Path, dev: &Path, name: &str, layer: &str) {
        let d = dev.join("infiniband").join(name);
        write(&d.join("ports/1/link_layer"), layer);
        link(&root.join("class/infiniband").join(name), &d);
    }

    /// 2 sockets × 64 cores × 2 threads, a NUMA node each (socket 0: cpus 0-63,128-191;
    /// socket 1: 64-127,192-255), with 4 NVIDIA GPUs (2 a socket), an Intel display controller
    /// and an ASPEED VGA (not GPUs here), 2 mlx5 InfiniBand HCAs (one a socket, IPoIB `ib0`,
    /// `ib1`), a RoCE mlx5 on socket 1 (not InfiniBand; its `ens2` is Ethernet), an Omni-Path
    /// HFI on socket 1, `eth0` on socket 0 (a virtio device below its PCI device, located by
    /// its NUMA node only), and virtual `docker0` and `lo`.
    fn io_machine() -> Topology {
        static T: std::sync::OnceLock<Topology> = std::sync::OnceLock::new();
        T.get_or_init(|| {
            let m = Machine {
                sockets: 2,
                numa_per_socket: 1,
                cores_per_socket: 64,
                threads: 2,
                l3_cores: 8,
                numa: true,
            };
            let root = m.sysfs("io");
            add_io(&root);
            let t = Topology::from_sysfs(&root, None).unwrap();
            let _ = std::fs::remove_dir_all(root);
            t
        })
        .clone()
    }

    fn add_io(root: &Path) {
        let (s0, s1) = (Some(S0), Some(S1));
        // Made out of address order: the lists are sorted.
        pci(root, "0000:c1:00.0", "0x030200", "0x10de", s1);
        pci(root, "0000:01:00.0", "0x030200", "0x10de", s0);
        pci(root, "0000:81:00.0", "0x030200", "0x10de", s1);
        pci(root, "0000:41:00.0", "0x030000", "0x10de", s0);
        pci(root, "0000:02:00.0", "0x030000", "0x1a03", s0);
        pci(root, "0000:03:00.0", "0x038000", "0x8086", s0);
        let hca1 = pci(root, "0000:a1:00.0", "0x020700", "0x15b3", s1);
        let hca0 = pci(root, "0000:21:00.0", "0x020700", "0x15b3", s0);
        rdma(root, &hca1, "mlx5_1", "InfiniBand");
        rdma(root, &hca0, "mlx5_0", "InfiniBand");
        net(root, &hca0, "ib0", 32, Some(&hca0));
        net(root, &hca1, "ib1", 32, Some(&hca1));
        let roce = pci(root, "0000:a2:00.0", "0x020000", "0x15b3", s1);
        rdma(root, &roce, "mlx5_2", "Ethernet");
        net(root, &roce, "ens2", 1, Some(&roce));
        let hfi = pci(root, "0000:a3:00.0", "0x020800", "0x8086", s1);
        rdma(root, &hfi, "hfi1_0", "");
        let nic = pci(root, "0000:23:00.0", "0x020000", "0x1af4", None);
        let virtio = nic.join("virtio2");
        net(root, &virtio, "eth0", 1, Some(&virtio));
        let virt = root.join("devices/virtual");
        net(root, &virt, "docker0", 1, None);
        net(root, &virt, "lo", 772, None);
    }

    const S0: &str = "0-63,128-191";
    const S1: &str = "64-127,192-255";
    const ALL: &str = "0-255";

    fn bind_io(bind: &str, map: Option<&str>, n: usize) -> Vec<String> {
        lists(&io_machine(), bind, map, n)
    }

    #[test]
    fn io_devices_found() {
        let t = io_machine();
        let d = t.devices();
        let gpus: Vec<String> = d
            .of_kind(DeviceKind::Gpu)
            .iter()
            .map(|g| g.pci.map(|a| a.to_string()).unwrap_or_default())
            .collect();
        assert_eq!(gpus, ["0000:01:00.0", "0000:41:00.0", "0000:81:00.0", "0000:c1:00.0"]);
        let names =
            |k| -> Vec<Vec<String>> { d.of_kind(k).iter().map(|x| x.names.clone()).collect() };
        assert_eq!(names(DeviceKind::Ib), [vec!["mlx5_0", "ib0"], vec!["mlx5_1", "ib1"]]);
        assert_eq!(names(DeviceKind::Hfi), [vec!["hfi1_0"]]);
        assert_eq!(names(DeviceKind::Eth), [vec!["eth0"], vec!["ens2"]]);
        assert_eq!(names(DeviceKind::En), names(DeviceKind::Eth));
        assert_eq!(d.pci.len(), 11);
        // eth0's PCI device has only a NUMA node.
        assert_eq!(d.of_kind(DeviceKind::Eth)[0].cpus.to_string(), S0);
    }

    #[test]
    fn bind_to_gpus() {
        assert_eq!(bind_io("gpu", None, 5), [S0, S0, S1, S1, S0]);
        assert_eq!(bind_io("gpu1", None, 2), [S0, S0]);
        assert_eq!(bind_io("gpu2", None, 1), [S1]);
        // N devices a rank, consecutive, the list a ring.
        assert_eq!(bind_io("gpu:2", None, 3), [S0, S1, S0]);
        assert_eq!(bind_io("gpu:3", None, 4), [ALL, ALL, ALL, ALL]);
        assert_eq!(bind_io("gpu:4", None, 1), [ALL]);
        // Dealt over groups of 2: gpu0, gpu2, gpu1, gpu3.
        assert_eq!(bind_io("gpu", Some("gpu:2"), 5), [S0, S1, S0, S1, S0]);
        assert_eq!(bind_io("gpu", Some("gpu:4"), 4), [S0, S0, S1, S1]);
        // A mapping no coarser than the binding changes nothing.
        assert_eq!(bind_io("gpu:2", Some("gpu"), 3), bind_io("gpu:2", None, 3));
        assert_eq!(bind_io("gpu", Some("gpu"), 5), bind_io("gpu", None, 5));
        let t = io_machine();
        assert_eq!(err(&t, "gpu:5", None), "-bind-to gpu:5: h has only 4 GPU device(s) for 5");
        assert_eq!(
            err(&t, "gpu", Some("gpu:8")),
            "-bind-to gpu -map-by gpu:8: h has only 4 GPU device(s) for 8"
        );
        assert_eq!(err(&t, "gpu1:2", None), "-bind-to gpu1:2: h has only 1 GPU device(s) for 2");
        assert_eq!(
            err(&t, "gpu4", None),
            "-bind-to gpu4: h has no GPU device gpu4 (its GPU devices: 0 at 0000:01:00.0, \
             1 at 0000:41:00.0, 2 at 0000:81:00.0, 3 at 0000:c1:00.0)"
        );
    }

    /// `(bind, map, want)`: `want` the cpu lists of as many ranks.
    fn check_io(cases: &[(&str, Option<&str>, &[&str])]) {
        for (bind, map, want) in cases {
            assert_eq!(bind_io(bind, *map, want.len()), *want, "{bind} {map:?}");
        }
    }

    #[test]
    fn bind_to_network_devices() {
        check_io(&[
            ("ib", None, &[S0, S1, S0]),
            ("ib:2", None, &[ALL]),
            // By IPoIB name (Hydra's meaning) or number.
            ("ib1", None, &[S1, S1]),
            ("ib0", None, &[S0]),
            ("hfi", None, &[S1, S1]),
            ("hfi1_0", None, &[S1]),
            ("hfi0", None, &[S1]),
            // Ethernet: eth0, then the RoCE port's ens2; not docker0 or lo.
            ("eth", None, &[S0, S1, S0]),
            ("en", None, &[S0, S1]),
            ("eth", Some("en:2"), &[S0, S1]),
            ("eth0", None, &[S0]),
            ("ens2", None, &[S1]),
            ("eth1", None, &[S1]),
            // Any PCI device, not only the kinds above; eth0's by its NUMA node.
            ("pci:41:00.0", None, &[S0, S0]),
            ("pci:0000:c1:00.0", None, &[S1]),
            ("pci:02:00.0", None, &[S0]),
            ("pci:23:00.0", None, &[S0]),
        ]);
        let t = io_machine();
        assert_eq!(
            err(&t, "ib7", None),
            "-bind-to ib7: h has no InfiniBand device ib7 (its InfiniBand devices: 0 mlx5_0, \
             1 mlx5_1)"
        );
        assert!(err(&t, "enp9s0", None)
            .starts_with("-bind-to enp9s0: h has no Ethernet device enp9s0 ("));
        assert_eq!(
            err(&t, "pci:99:00.0", None),
            "-bind-to pci:0000:99:00.0: h has no PCI device 0000:99:00.0"
        );
    }

    #[test]
    fn io_devices_within_the_allowed_cpus() {
        let m = Machine {
            sockets: 2,
            numa_per_socket: 1,
            cores_per_socket: 4,
            threads: 1,
            l3_cores: 4,
            numa: true,
        };
        let root = m.sysfs("io-small");
        pci(&root, "0000:01:00.0", "0x030200", "0x1002", Some("0-3"));
        pci(&root, "0000:81:00.0", "0x030200", "0x1002", Some("4-7"));
        // Ethernet with no device of its own only: near every cpu.
        net(&root, &root.join("devices/virtual"), "eth9", 1, None);
        let allowed = CpuSet::parse("2-5").unwrap();
        let t = Topology::from_sysfs(&root, Some(&allowed)).unwrap();
        let _ = std::fs::remove_dir_all(&root);
        // AMD GPUs when there is no NVIDIA one.
        assert_eq!(lists(&t, "gpu", None, 2), ["2-3", "4-5"]);
        assert_eq!(lists(&t, "eth", None, 1), ["2-5"]);
        assert_eq!(lists(&t, "eth9", None, 1), ["2-5"]);
        assert_eq!(lists(&t, "eth0", None, 1), ["2-5"]);
        let allowed = CpuSet::parse("0-1").unwrap();
        let root = m.sysfs("io-small2");
        pci(&root, "0000:81:00.0", "0x030200", "0x8086", Some("4-7"));
        let t = Topology::from_sysfs(&root, Some(&allowed)).unwrap();
        let _ = std::fs::remove_dir_all(&root);
        // A device near none of the usable cpus: all of them (hwloc moves it up the tree).
        assert_eq!(lists(&t, "gpu", None, 1), ["0-1"]);
        assert_eq!(err(&t, "ib", None), "-bind-to ib: h has no InfiniBand device");
        assert_eq!(
            err(&t, "eth", Some("eth")),
            "-bind-to eth -map-by eth: h has no Ethernet device"
        );
        assert_eq!(err(&t, "hfi", None), "-bind-to hfi: h has no Omni-Path (hfi) device");
        assert_eq!(err(&t, "ib0", None), "-bind-to ib0: h has no InfiniBand device");
        // No device directories at all.
        assert_eq!(err(&epyc(), "gpu", None), "-bind-to gpu: h has no GPU device");
    }

    #[test]
    fn this_machine() {
        let t = Topology::from_sysfs(Path::new("/sys"), None).unwrap();
        assert!(!t.pus().is_empty());
        assert!(!t.objects(Object::Core).is_empty());
        // A NUMA kernel has node 0 at least (with memory, on any usual machine).
        if Path::new("/sys/devices/system/node").exists() {
            assert!(t.mems().is_some_and(|m| !m.is_empty()), "{:?}", t.mems());
        }
    }

    #[test]
    fn missing_sysfs_is_an_error() {
        let e = Topology::from_sysfs(Path::new("/nonexistent"), None).unwrap_err().to_string();
        assert!(e.starts_with("cannot read /nonexistent/devices/system/cpu/online"), "{e}");
    }
}

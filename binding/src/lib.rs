//! Process binding for libi: a node's topology read from Linux's sysfs, Hydra's `-bind-to`,
//! `-map-by` and `-membind` options, and the cpu set and memory policy of each local rank.
//!
//! Pure except for [`Topology::from_sysfs`], which reads files under a given root (tests
//! point it at recorded fixture trees of bigger machines). Applying a set is the NLA's job.

pub mod cpus;
pub mod map;
pub mod membind;
pub mod spec;
pub mod topology;

pub use cpus::CpuSet;
pub use map::rank_cpus;
pub use membind::{parse_membind, rank_mems, MemBind, MemPolicy, NodeSet};
pub use spec::{parse_bind, parse_map, BindTo, Binding, CacheKind, Object, Objects};
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

    /// The cpu lists of `n` local ranks under `-bind-to bind [-map-by map]`.
    fn lists(t: &Topology, bind: &str, map: Option<&str>, n: usize) -> Vec<String> {
        let b = Binding {
            bind: parse_bind(bind).unwrap(),
            map: map.map(|m| parse_map(m).unwrap()),
            mem: None,
        };
        let sets = rank_cpus(t, &b, n, "h").unwrap().unwrap();
        sets.iter().map(|s| s.as_ref().map_or("unbound".to_string(), |s| s.to_string())).collect()
    }

    fn err(t: &Topology, bind: &str, map: Option<&str>) -> String {
        let b = Binding {
            bind: parse_bind(bind).unwrap(),
            map: map.map(|m| parse_map(m).unwrap()),
            mem: None,
        };
        rank_cpus(t, &b, 4, "h").unwrap_err()
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
            let b = Binding {
                bind: parse_bind(bind).unwrap(),
                map: map.map(|m| parse_map(m).unwrap()),
                mem: Some(parse_membind(mem).unwrap()),
            };
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
        let b = Binding { bind: parse_bind("core").unwrap(), map: None, mem: None };
        let cpus = rank_cpus(&t, &b, 1, "h").unwrap();
        let p = rank_mems(&t, Some(&MemBind::Bind(None)), cpus.as_deref(), 1, "h").unwrap();
        assert_eq!(p, Some(vec![MemPolicy::Bind(CpuSet::parse("1").unwrap())]));
        let p = rank_mems(&t, Some(&MemBind::Interleave(None)), None, 1, "h").unwrap();
        assert_eq!(p, Some(vec![MemPolicy::Interleave(CpuSet::parse("1-2").unwrap())]));
    }

    #[test]
    fn none_binds_nothing() {
        let t = epyc();
        let b = Binding { bind: BindTo::None, map: Some(parse_map("core").unwrap()), mem: None };
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
        let e = Topology::from_sysfs(Path::new("/nonexistent"), None).unwrap_err();
        assert!(e.starts_with("cannot read /nonexistent/devices/system/cpu/online"), "{e}");
    }
}

//! `MPI_Comm_spawn` planned from a command line's plan: the planning is [`libi::spawn`]
//! (pure, shared with `libi-sim`); these tests check it as the front end uses it.

mod tests {
    use crate::cli::parse;
    use crate::plan::{plan, Context, Plan};
    use libi::job::SpawnCmd;
    use libi::job::{AppSpec, NodePlan, SpawnRequest};
    use libi::spawn::Spawner;

    fn base(args: &str) -> Plan {
        let ctx = Context {
            inherited: vec![("PATH".into(), "/bin".into())],
            inherited_raw: Vec::new(),
            cwd: Some("/w".into()),
            kvs: crate::plan::KvsNames::new(9, 5, "fe"),
            singleton_exe: None,
            kill_grace_ms: 1000,
            nla_path: "/x/libi-nla".into(),
            local_host: "fe".into(),
            slurm: None,
            rm_hosts: None,
            job_id: 7,
            is_local: |_| false,
            links_pmix: |_| false,
        };
        let argv: Vec<String> = args.split_whitespace().map(str::to_string).collect();
        plan(&parse(&argv).expect("parse"), &ctx).expect("plan")
    }

    fn cmd(exe: &str, n: u32, info: &[(&str, &str)]) -> SpawnCmd {
        SpawnCmd {
            exe: exe.into(),
            args: vec!["x".into()],
            nprocs: n,
            preput: vec![("PARENT_ROOT_PORT_NAME".into(), "tag#0".into())],
            info: info.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            env: Vec::new(),
        }
    }

    fn req(cmds: Vec<SpawnCmd>) -> SpawnRequest {
        SpawnRequest { rank: 0, app: 0, host: "n1".into(), cmds }
    }

    fn hosts_of(p: &NodePlan, out: &mut Vec<(String, Vec<u32>)>) {
        out.extend(
            p.nodes()
                .into_iter()
                .filter(|n| n.node != 0)
                .map(|n| (n.host.clone(), n.ranks.iter().map(|r| r.rank).collect())),
        );
        out.sort();
    }

    /// A group that the job's NLAs started (its launcher says `Joined`: nobody launches its
    /// NLAs, they join) may spawn onto a host where the job has no NLA: that group's NLAs
    /// are started the job's way. (Planned with the parent's launcher, they waited for a
    /// join that never came, and the spawn failed after the launch timeout: MPICH's
    /// test/mpi/spawn/concurrent_spawns over 4 fork-launcher nodes.)
    #[test]
    fn a_group_started_by_the_jobs_nlas_spawns_with_the_jobs_launcher() {
        let b = base("-launcher fork -hosts n1:2,n2:2 -n 1 prog");
        let mut s = Spawner::new(&b.spawn_base());
        let mut joined = b.job.clone();
        joined.launcher.kind = libi::job::LauncherKind::Joined;
        let g = s.plan(&b.spawn_base(), &joined, &req(vec![cmd("c", 2, &[])]), 2, 2);
        let g = g.expect("spawn");
        assert_eq!(g.job.launcher, b.job.launcher);
        assert_eq!(g.job.launcher.kind, libi::job::LauncherKind::Fork);
    }

    #[test]
    fn continues_round_robin_after_the_job() {
        let b = base("-launcher fork -hosts n1,n2,n3,n4 -n 1 prog");
        let mut s = Spawner::new(&b.spawn_base());
        let g =
            s.plan(&b.spawn_base(), &b.job, &req(vec![cmd("child", 2, &[])]), 1, 1).expect("spawn");
        let mut h = Vec::new();
        hosts_of(&g.root, &mut h);
        assert_eq!(h, vec![("n2".into(), vec![0]), ("n3".into(), vec![1])]);
        assert_eq!(g.job.kvsname, "kvs_9_1_5_fe");
        assert_eq!(g.job.spawned_by.as_deref(), Some("kvs_9_0_5_fe"));
        assert_eq!(g.job.size, 2);
        assert!(g.job.preput.contains(&("PARENT_ROOT_PORT_NAME".into(), "tag#0".into())));
        assert_eq!(g.job.preput[0].0, "PMI_process_mapping");
        // the next spawn goes on from there, wrapping round
        let g = s
            .plan(&b.spawn_base(), &b.job, &req(vec![cmd("a", 1, &[]), cmd("b", 2, &[])]), 3, 2)
            .expect("spawn");
        let mut h = Vec::new();
        hosts_of(&g.root, &mut h);
        assert_eq!(h, vec![("n1".into(), vec![1]), ("n2".into(), vec![2]), ("n4".into(), vec![0])]);
        assert_eq!(g.job.kvsname, "kvs_9_2_5_fe");
        assert_eq!(g.job.apps.len(), 2);
        assert_eq!(g.job.preput[0].1, "(vector,(0,3,1))");
    }

    /// The memory kinds the job's startup requested (`-memory-alloc-kinds`) hold for the
    /// groups it spawns.
    #[test]
    fn spawned_groups_keep_the_memory_kinds() {
        let b = base("-memory-alloc-kinds mpi:alloc_mem -n 1 prog");
        let mut s = Spawner::new(&b.spawn_base());
        let g = s.plan(&b.spawn_base(), &b.job, &req(vec![cmd("c", 1, &[])]), 1, 1);
        let key = (crate::plan::MEMORY_ALLOC_KINDS_KEY.to_string(), "mpi:alloc_mem".to_string());
        assert!(g.expect("spawn").job.preput.contains(&key));
    }

    #[test]
    fn info_keys() {
        let b = base("-launcher fork -hosts n1:2,n2:2 -n 2 prog");
        let mut s = Spawner::new(&b.spawn_base());
        let r = req(vec![
            cmd("a", 2, &[("host", "n1"), ("wdir", "/tmp"), ("path", "/opt/bin")]),
            cmd("b", 3, &[("hosts", "x,y:2")]),
        ]);
        let g = s.plan(&b.spawn_base(), &b.job, &r, 2, 1).expect("spawn");
        let mut h = Vec::new();
        hosts_of(&g.root, &mut h);
        assert_eq!(
            h,
            vec![("n1".into(), vec![0, 1]), ("x".into(), vec![2]), ("y".into(), vec![3, 4])]
        );
        assert_eq!(g.job.apps[0].wdir.as_deref(), Some("/tmp".as_ref()));
        assert_eq!(g.job.apps[1].wdir.as_deref(), Some("/w".as_ref()));
        let path = |a: &AppSpec| a.env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.clone());
        assert_eq!(path(&g.job.apps[0]).as_deref(), Some("/opt/bin:/bin".as_ref()));
        assert_eq!(path(&g.job.apps[1]).as_deref(), Some("/bin".as_ref()));
        // info placement does not move the round-robin cursor
        let g = s.plan(&b.spawn_base(), &b.job, &req(vec![cmd("c", 1, &[])]), 7, 1).expect("spawn");
        let mut h = Vec::new();
        hosts_of(&g.root, &mut h);
        assert_eq!(h, vec![("n2".into(), vec![0])]);
    }

    #[test]
    fn universe_and_bad_requests() {
        let b = base("-launcher fork -usize 4 -n 2 prog");
        assert_eq!(b.job.universe_size, 4);
        let mut s = Spawner::new(&b.spawn_base());
        let e = s
            .plan(&b.spawn_base(), &b.job, &req(vec![cmd("a", 3, &[])]), 2, 1)
            .err()
            .expect("too many");
        assert_eq!(e.to_string(), "3 more processes would exceed the universe size 4 (2 running)");
        assert!(s.plan(&b.spawn_base(), &b.job, &req(vec![cmd("a", 2, &[])]), 2, 1).is_ok());
        let e = s.plan(&b.spawn_base(), &b.job, &req(vec![]), 2, 1).err().expect("nothing");
        assert_eq!(e.to_string(), "nothing to spawn (0 processes)");
        let r = req(vec![cmd("a", 1, &[]), cmd("", 1, &[])]);
        let e = s.plan(&b.spawn_base(), &b.job, &r, 0, 1).err().expect("no executable");
        assert_eq!(e.to_string(), "command 2 has no executable");
        let e = s
            .plan(&b.spawn_base(), &b.job, &req(vec![cmd("a", 1, &[("hosts", "a:0")])]), 0, 1)
            .err()
            .expect("bad hosts");
        assert!(e.to_string().starts_with("info key hosts: "), "{e}");
        let b = base("-launcher fork -n 1 prog");
        let r = req(vec![cmd("a", libi::job::MAX_JOB_SIZE + 1, &[])]);
        let e = Spawner::new(&b.spawn_base()).plan(&b.spawn_base(), &b.job, &r, 1, 1);
        let e = e.err().expect("too many");
        assert_eq!(e.to_string(), "too many processes: 16777217 (at most 16777216 in a spawn)");
        // without -usize the universe is unknown (as Hydra's), and not enforced; so is
        // SYSTEM (the host list's slots), which a spawned group sees never less than its size
        let b = base("-launcher fork -hosts n1:3 -n 1 prog");
        assert_eq!(b.job.universe_size, -1);
        let g = Spawner::new(&b.spawn_base()).plan(
            &b.spawn_base(),
            &b.job,
            &req(vec![cmd("a", 9, &[])]),
            1,
            1,
        );
        assert_eq!(g.expect("spawn").job.universe_size, -1);
        let b = base("-launcher fork -hosts n1:3 -usize SYSTEM -n 1 prog");
        assert_eq!(b.job.universe_size, 3);
        let g = Spawner::new(&b.spawn_base()).plan(
            &b.spawn_base(),
            &b.job,
            &req(vec![cmd("a", 2, &[])]),
            1,
            1,
        );
        assert_eq!(g.expect("spawn").job.universe_size, 3);
        let g = Spawner::new(&b.spawn_base()).plan(
            &b.spawn_base(),
            &b.job,
            &req(vec![cmd("a", 9, &[])]),
            1,
            1,
        );
        assert_eq!(g.expect("spawn").job.universe_size, 9);
        // a group spawned by a spawned group sees the job's universe too
        let b = base("-launcher fork -usize 4 -n 1 prog");
        let mut s = Spawner::new(&b.spawn_base());
        let g = s.plan(&b.spawn_base(), &b.job, &req(vec![cmd("a", 2, &[])]), 1, 1).expect("spawn");
        assert_eq!(g.job.universe_size, 4);
        let g = s.plan(&b.spawn_base(), &g.job, &req(vec![cmd("a", 1, &[])]), 3, 2).expect("spawn");
        assert_eq!(g.job.universe_size, 4);
        assert_eq!(g.job.spawned_by.as_deref(), Some("kvs_9_1_5_fe"));
    }
}

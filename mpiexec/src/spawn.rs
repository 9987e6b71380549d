//! `MPI_Comm_spawn` at the front end: from a rank's spawn request to the plan of a new
//! process group (its own kvsname, `PMI_SPAWNED=1`, its own NLAs), or one line saying why
//! the spawn is refused.
//!
//! Placement: the new ranks continue the job's block placement where the last placed rank
//! left off (round-robin over the host list's slots, wrapping), unless the command's info
//! says otherwise:
//! * `host` — every rank of the command on that host;
//! * `hosts` — a `host[:slots],…` list, block placement over it from its start;
//! * `wdir` — the working directory of the new ranks (default: the spawner's);
//! * `path` — directories searched for the executable before the spawner's `PATH`.
//!
//! Other info keys (`arch`, `file`, `soft`, …) are ignored, as Hydra does. The new ranks get
//! the environment of the spawner's executable. `-usize N` caps the ranks running at once.

use crate::plan::{nla_tree, Plan};
use libi::hosts::{self, Host};
use libi::job::{process_mapping, AppSpec, JobCommon, NodePlan, RankSlot, SpawnRequest};

/// A planned spawn: the new group's job and NLA tree.
pub struct Group {
    pub job: JobCommon,
    pub root: NodePlan,
}

/// What the front end remembers between spawns.
pub struct Spawner {
    /// Next slot of the host list's slot cycle (the job's ranks took the first ones).
    cursor: u64,
}

impl Spawner {
    pub fn new(plan: &Plan) -> Self {
        Spawner { cursor: u64::from(plan.job.size) }
    }

    /// Plan process group number `group` for `req`, made by a rank of the job `parent`;
    /// `running` ranks of the whole job have not ended yet.
    pub fn plan(
        &mut self,
        base: &Plan,
        parent: &JobCommon,
        req: &SpawnRequest,
        running: u64,
        group: usize,
    ) -> Result<Group, String> {
        let total: u64 = req.cmds.iter().map(|c| u64::from(c.nprocs)).sum();
        if req.cmds.is_empty() || total == 0 {
            return Err("nothing to spawn (0 processes)".into());
        }
        if let Some(limit) = base.universe_limit {
            if running + total > u64::from(limit) {
                return Err(format!(
                    "{total} more processes would exceed the universe size {limit} \
                     ({running} running)"
                ));
            }
        }
        let size = u32::try_from(total).map_err(|_| format!("too many processes: {total}"))?;
        let penv = parent.apps.get(req.app as usize).or(parent.apps.first());
        let mut cursor = self.cursor;
        // (host, rank slots) in order of first use; one NLA per host.
        let mut per_node: Vec<(String, Vec<RankSlot>)> = Vec::new();
        let mut runs: Vec<(usize, u32)> = Vec::new();
        let mut apps = Vec::new();
        let mut preput: Vec<(String, String)> = Vec::new();
        let mut rank = 0u32;
        for (i, cmd) in req.cmds.iter().enumerate() {
            if cmd.exe.is_empty() {
                return Err(format!("command {} has no executable", i + 1));
            }
            let info = |k: &str| cmd.info.iter().find(|(ik, _)| ik == k).map(|(_, v)| v.as_str());
            let mut env = penv.map(|a| a.env.clone()).unwrap_or_default();
            if let Some(dirs) = info("path").filter(|p| !p.is_empty()) {
                let old = env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.clone());
                env.retain(|(k, _)| k != "PATH");
                let path = match old {
                    Some(o) if !o.is_empty() => format!("{dirs}:{o}"),
                    _ => dirs.to_string(),
                };
                env.push(("PATH".into(), path));
            }
            let wdir =
                info("wdir").map(str::to_string).or_else(|| penv.and_then(|a| a.wdir.clone()));
            apps.push(AppSpec {
                exe: cmd.exe.clone(),
                args: cmd.args.clone(),
                nprocs: cmd.nprocs,
                env,
                wdir,
            });
            for (k, v) in &cmd.preput {
                preput.retain(|(pk, _)| pk != k);
                preput.push((k.clone(), v.clone()));
            }
            // Where this command's ranks go, one host name per rank.
            let targets: Vec<String> = if let Some(h) = info("host").filter(|h| !h.is_empty()) {
                vec![h.to_string(); cmd.nprocs as usize]
            } else if let Some(list) = info("hosts").filter(|h| !h.is_empty()) {
                let list =
                    hosts::parse_hosts_arg(list).map_err(|e| format!("info key hosts: {e}"))?;
                host_names(&list, 0, cmd.nprocs)
            } else {
                let t = host_names(&base.hosts, cursor, cmd.nprocs);
                cursor += u64::from(cmd.nprocs);
                t
            };
            for host in targets {
                let node = match per_node.iter().position(|(h, _)| *h == host) {
                    Some(n) => n,
                    None => {
                        per_node.push((host, Vec::new()));
                        per_node.len() - 1
                    }
                };
                per_node[node].1.push(RankSlot { rank, app: i as u32 });
                match runs.last_mut() {
                    Some((n, c)) if *n == node => *c += 1,
                    _ => runs.push((node, 1)),
                }
                rank += 1;
            }
        }
        self.cursor = cursor;
        if let Some(m) = process_mapping(&runs) {
            preput.retain(|(k, _)| k != "PMI_process_mapping");
            preput.insert(0, ("PMI_process_mapping".into(), m));
        }
        // The group sees the job's universe size, never less than its own size.
        let universe_size = match base.job.universe_size {
            u if u < 0 => -1,
            u => u.max(size.min(i32::MAX as u32) as i32),
        };
        let job = JobCommon {
            size,
            universe_size,
            kvsname: base.kvs.name(group),
            preput,
            apps,
            report: false,
            pmgr: None,
            spawned_by: Some(parent.kvsname.clone()),
            singleton: None,
            each_end: false,
            staged: Vec::new(),
            ..parent.clone()
        };
        let root = nla_tree(per_node, &base.shape, &base.model, base.max_conn, &base.root.host);
        Ok(Group { job, root })
    }
}

/// The host of each of `n` ranks placed from slot `start` of the hosts' slot cycle.
fn host_names(hosts: &[Host], start: u64, n: u32) -> Vec<String> {
    let p = hosts::place_from(hosts, start, n);
    p.runs
        .iter()
        .flat_map(|&(h, c)| std::iter::repeat_n(hosts[h].name.clone(), c as usize))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::parse;
    use crate::plan::{plan, Context};
    use libi::job::SpawnCmd;

    fn base(args: &str) -> Plan {
        let ctx = Context {
            inherited: vec![("PATH".into(), "/bin".into())],
            cwd: Some("/w".into()),
            default_n: 2,
            kvs: crate::plan::KvsNames::new(9, 5, "fe"),
            singleton_exe: None,
            kill_grace_ms: 1000,
            nla_path: "/x/libi-nla".into(),
            local_host: "fe".into(),
            slurm: None,
            rm_hosts: None,
            job_id: 7,
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

    #[test]
    fn continues_round_robin_after_the_job() {
        let b = base("-launcher fork -hosts n1,n2,n3,n4 -n 1 prog");
        let mut s = Spawner::new(&b);
        let g = s.plan(&b, &b.job, &req(vec![cmd("child", 2, &[])]), 1, 1).expect("spawn");
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
            .plan(&b, &b.job, &req(vec![cmd("a", 1, &[]), cmd("b", 2, &[])]), 3, 2)
            .expect("spawn");
        let mut h = Vec::new();
        hosts_of(&g.root, &mut h);
        assert_eq!(h, vec![("n1".into(), vec![1]), ("n2".into(), vec![2]), ("n4".into(), vec![0])]);
        assert_eq!(g.job.kvsname, "kvs_9_2_5_fe");
        assert_eq!(g.job.apps.len(), 2);
        assert_eq!(g.job.preput[0].1, "(vector,(0,3,1))");
    }

    #[test]
    fn info_keys() {
        let b = base("-launcher fork -hosts n1:2,n2:2 -n 2 prog");
        let mut s = Spawner::new(&b);
        let r = req(vec![
            cmd("a", 2, &[("host", "n1"), ("wdir", "/tmp"), ("path", "/opt/bin")]),
            cmd("b", 3, &[("hosts", "x,y:2")]),
        ]);
        let g = s.plan(&b, &b.job, &r, 2, 1).expect("spawn");
        let mut h = Vec::new();
        hosts_of(&g.root, &mut h);
        assert_eq!(
            h,
            vec![("n1".into(), vec![0, 1]), ("x".into(), vec![2]), ("y".into(), vec![3, 4])]
        );
        assert_eq!(g.job.apps[0].wdir.as_deref(), Some("/tmp"));
        assert_eq!(g.job.apps[1].wdir.as_deref(), Some("/w"));
        let path = |a: &AppSpec| a.env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.clone());
        assert_eq!(path(&g.job.apps[0]).as_deref(), Some("/opt/bin:/bin"));
        assert_eq!(path(&g.job.apps[1]).as_deref(), Some("/bin"));
        // info placement does not move the round-robin cursor
        let g = s.plan(&b, &b.job, &req(vec![cmd("c", 1, &[])]), 7, 1).expect("spawn");
        let mut h = Vec::new();
        hosts_of(&g.root, &mut h);
        assert_eq!(h, vec![("n2".into(), vec![0])]);
    }

    #[test]
    fn universe_and_bad_requests() {
        let b = base("-launcher fork -usize 4 -n 2 prog");
        assert_eq!(b.job.universe_size, 4);
        let mut s = Spawner::new(&b);
        let e = s.plan(&b, &b.job, &req(vec![cmd("a", 3, &[])]), 2, 1).err().expect("too many");
        assert!(e.contains("universe size 4"), "{e}");
        assert!(s.plan(&b, &b.job, &req(vec![cmd("a", 2, &[])]), 2, 1).is_ok());
        assert!(s.plan(&b, &b.job, &req(vec![]), 2, 1).is_err());
        assert!(s.plan(&b, &b.job, &req(vec![cmd("", 1, &[])]), 0, 1).is_err());
        let e = s
            .plan(&b, &b.job, &req(vec![cmd("a", 1, &[("hosts", "a:0")])]), 0, 1)
            .err()
            .expect("bad hosts");
        assert!(e.contains("hosts"), "{e}");
        // without -usize the universe is unknown (as Hydra's), and not enforced; so is
        // SYSTEM (the host list's slots), which a spawned group sees never less than its size
        let b = base("-launcher fork -hosts n1:3 -n 1 prog");
        assert_eq!(b.job.universe_size, -1);
        let g = Spawner::new(&b).plan(&b, &b.job, &req(vec![cmd("a", 9, &[])]), 1, 1);
        assert_eq!(g.expect("spawn").job.universe_size, -1);
        let b = base("-launcher fork -hosts n1:3 -usize SYSTEM -n 1 prog");
        assert_eq!(b.job.universe_size, 3);
        let g = Spawner::new(&b).plan(&b, &b.job, &req(vec![cmd("a", 2, &[])]), 1, 1);
        assert_eq!(g.expect("spawn").job.universe_size, 3);
        let g = Spawner::new(&b).plan(&b, &b.job, &req(vec![cmd("a", 9, &[])]), 1, 1);
        assert_eq!(g.expect("spawn").job.universe_size, 9);
        // a group spawned by a spawned group sees the job's universe too
        let b = base("-launcher fork -usize 4 -n 1 prog");
        let mut s = Spawner::new(&b);
        let g = s.plan(&b, &b.job, &req(vec![cmd("a", 2, &[])]), 1, 1).expect("spawn");
        assert_eq!(g.job.universe_size, 4);
        let g = s.plan(&b, &g.job, &req(vec![cmd("a", 1, &[])]), 3, 2).expect("spawn");
        assert_eq!(g.job.universe_size, 4);
        assert_eq!(g.job.spawned_by.as_deref(), Some("kvs_9_1_5_fe"));
    }
}

//! `MPI_Comm_spawn` at the front end, pure: from a rank's spawn request to the plan of a new
//! process group (its own kvsname, `PMI_SPAWNED=1`, its own NLAs), or one line saying why
//! the spawn is refused. `libi-mpiexec` starts the group it plans; `libi-sim` simulates it.
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

use crate::hosts::{self, Host, HostError};
use crate::job::{
    process_mapping, AppSpec, JobCommon, KvsNames, LauncherSpec, NodePlan, RankSlot, SpawnRequest,
    TooDeep,
};
use crate::tree::{LaunchModel, Shape};

/// What every spawn of a job is planned from (the job's own plan, as the front end made it).
#[derive(Debug, Clone)]
pub struct SpawnBase {
    /// The host list (spawned ranks are placed on it too).
    pub hosts: Vec<Host>,
    /// `-usize N`: a spawn that would make more than N ranks run at once fails.
    pub universe_limit: Option<u32>,
    /// The universe size the job's ranks see (-1: unknown).
    pub universe_size: i32,
    /// The kvsnames of the job and of its spawned groups.
    pub kvs: KvsNames,
    /// How each group's NLA tree is shaped.
    pub shape: Shape,
    pub model: LaunchModel,
    pub max_conn: usize,
    /// The front end's host (the root of every group's tree).
    pub root_host: String,
    /// Ranks of the job itself (they took the first slots of the host list).
    pub job_size: u32,
    /// How the job's own NLAs are started. A spawned group's are started the same way,
    /// whatever group spawns it: a group whose NLAs the job's NLAs started (its launcher
    /// says `Joined`) may spawn onto hosts where the job has none.
    pub launcher: LauncherSpec,
}

/// The KVS key under which `-memory-alloc-kinds` reaches the ranks (MPICH reads it with a
/// PMI `get` at `MPI_Init`; `mpiexec.hydra` publishes it under this name).
pub const MEMORY_ALLOC_KINDS_KEY: &str = "PMI_mpi_memory_alloc_kinds";

/// A planned spawn: the new group's job and NLA tree.
pub struct Group {
    pub job: JobCommon,
    pub root: NodePlan,
}

/// Why a spawn is refused; its `Display` is the line the spawning rank is answered with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpawnPlanError {
    /// No command, or none with a process.
    #[error("nothing to spawn (0 processes)")]
    Nothing,
    /// `-usize N`: the new ranks and the `running` ones would be more than N.
    #[error("{total} more processes would exceed the universe size {limit} ({running} running)")]
    Universe { total: u64, limit: u32, running: u64 },
    /// More processes than a job may have.
    #[error("too many processes: {total} (at most {max} in a spawn)", max = crate::job::MAX_JOB_SIZE)]
    TooMany { total: u64 },
    /// Command number `command` (from 1) names no executable.
    #[error("command {command} has no executable")]
    NoExecutable { command: usize },
    /// The info key `hosts` does not parse.
    #[error("info key hosts: {0}")]
    Hosts(HostError),
    /// The group's NLA tree would be too deep.
    #[error(transparent)]
    TooDeep(#[from] TooDeep),
}

/// What the front end remembers between spawns.
pub struct Spawner {
    /// Next slot of the host list's slot cycle (the job's ranks took the first ones).
    cursor: u64,
}

impl Spawner {
    pub fn new(base: &SpawnBase) -> Self {
        Spawner { cursor: u64::from(base.job_size) }
    }

    /// Plan process group number `group` for `req`, made by a rank of the job `parent`;
    /// `running` ranks of the whole job have not ended yet.
    pub fn plan(
        &mut self,
        base: &SpawnBase,
        parent: &JobCommon,
        req: &SpawnRequest,
        running: u64,
        group: usize,
    ) -> Result<Group, SpawnPlanError> {
        let total: u64 = req.cmds.iter().map(|c| u64::from(c.nprocs)).sum();
        if req.cmds.is_empty() || total == 0 {
            return Err(SpawnPlanError::Nothing);
        }
        if let Some(limit) = base.universe_limit {
            if running + total > u64::from(limit) {
                return Err(SpawnPlanError::Universe { total, limit, running });
            }
        }
        let size = crate::job::job_size(total).ok_or(SpawnPlanError::TooMany { total })?;
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
                return Err(SpawnPlanError::NoExecutable { command: i + 1 });
            }
            let info = |k: &str| cmd.info.iter().find(|(ik, _)| ik == k).map(|(_, v)| v.as_str());
            let mut env = penv.map(|a| a.env.clone()).unwrap_or_default();
            if let Some(dirs) = info("path").filter(|p| !p.is_empty()) {
                let old = env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.clone());
                env.retain(|(k, _)| k != "PATH");
                let path = match old {
                    Some(o) if !o.is_empty() => {
                        let mut p = std::ffi::OsString::from(format!("{dirs}:"));
                        p.push(o);
                        p
                    }
                    _ => dirs.into(),
                };
                env.push(("PATH".into(), path));
            }
            for (k, v) in &cmd.env {
                env.retain(|(ek, _)| ek != k);
                env.push((k.clone(), v.into()));
            }
            let wdir = info("wdir").map(Into::into).or_else(|| penv.and_then(|a| a.wdir.clone()));
            apps.push(AppSpec {
                exe: cmd.exe.clone(),
                args: cmd.args.iter().map(Into::into).collect(),
                nprocs: cmd.nprocs,
                env,
                wdir,
                // Spawned ranks start from the agent's environment when their parents did.
                agent_env: penv.is_some_and(|a| a.agent_env),
                raw_env: penv.map(|a| a.raw_env.clone()).unwrap_or_default(),
            });
            for (k, v) in &cmd.preput {
                preput.retain(|(pk, _)| pk != k);
                preput.push((k.clone(), v.clone()));
            }
            // Where this command's ranks go, one host name per rank.
            let targets: Vec<String> = if let Some(h) = info("host").filter(|h| !h.is_empty()) {
                vec![h.to_string(); cmd.nprocs as usize]
            } else if let Some(list) = info("hosts").filter(|h| !h.is_empty()) {
                let list = hosts::parse_hosts_arg(list).map_err(SpawnPlanError::Hosts)?;
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
        // The memory kinds the job's startup requested hold for its spawned groups too.
        if let Some(kinds) = parent.preput.iter().find(|(k, _)| k == MEMORY_ALLOC_KINDS_KEY) {
            if !preput.iter().any(|(k, _)| k == MEMORY_ALLOC_KINDS_KEY) {
                preput.push(kinds.clone());
            }
        }
        if let Some(m) = process_mapping(&runs) {
            preput.retain(|(k, _)| k != "PMI_process_mapping");
            preput.insert(0, ("PMI_process_mapping".into(), m));
        }
        // The group sees the job's universe size, never less than its own size.
        let universe_size = match base.universe_size {
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
            // A PMIx job's spawned group is served PMIx too, its parent named.
            pmix: parent.pmix.as_ref().map(|_| crate::job::PmixJob {
                nodes: per_node
                    .iter()
                    .map(|(h, slots)| (h.clone(), slots.iter().map(|s| s.rank).collect()))
                    .collect(),
                parent: Some((parent.kvsname.clone(), req.rank)),
            }),
            launcher: base.launcher.clone(),
            ..parent.clone()
        };
        let root =
            NodePlan::tree(per_node, &base.shape, &base.model, base.max_conn, &base.root_host)?;
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

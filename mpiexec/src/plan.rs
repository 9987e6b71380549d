//! From the command line to the job: executables with their final environment, hosts and rank
//! placement, the launch tree, and the per-node plans.

use crate::cli::{CommandLine, EnvMode, PmiKind, Rmk};
use libi::hosts::{self, Host, HostError};
use libi::job::{
    process_mapping, AppSpec, JobCommon, LauncherKind, LauncherSpec, NodePlan, RankSlot,
};
use libi::tree::{LaunchModel, Shape, DEFAULT_MAX_CONN};
use std::ffi::OsString;

pub use libi::job::inherited_ok;

/// The environment of one executable's ranks, Hydra's rules: the executable's own mode
/// (`-envall/-envnone/-envlist`) or else the global one, then `-genv` pairs, then `-env` pairs.
/// A LIBI session's key ([`libi::job::SESSION_KEY_VAR`]) is passed on whatever the mode.
pub fn app_env(
    inherited: &[(String, OsString)],
    global_mode: &EnvMode,
    local_mode: Option<&EnvMode>,
    genv: &[(String, OsString)],
    env: &[(String, OsString)],
) -> Vec<(String, OsString)> {
    let mode = local_mode.unwrap_or(global_mode);
    let mut out: Vec<(String, OsString)> = match mode {
        EnvMode::All => inherited.iter().filter(|(k, _)| inherited_ok(k)).cloned().collect(),
        EnvMode::None => Vec::new(),
        EnvMode::List(names) => {
            inherited.iter().filter(|(k, _)| names.iter().any(|n| n == k)).cloned().collect()
        }
    };
    if !out.iter().any(|(k, _)| k == libi::job::SESSION_KEY_VAR) {
        if let Some(key) = inherited.iter().find(|(k, _)| k == libi::job::SESSION_KEY_VAR) {
            out.push(key.clone());
        }
    }
    for (k, v) in genv.iter().chain(env) {
        out.retain(|(ek, _)| ek != k);
        out.push((k.clone(), v.clone()));
    }
    out
}

/// The inherited variables whose name is not UTF-8 ([`AppSpec::raw_env`]): all of them with
/// `-genvall`; none otherwise (no option can name them, and with `-genvnone`/`-genvlist` the
/// agent's own environment is the base, such variables included).
fn raw_env(ctx: &Context, mode: &EnvMode) -> Vec<OsString> {
    match mode {
        EnvMode::All => ctx.inherited_raw.clone(),
        EnvMode::None | EnvMode::List(_) => Vec::new(),
    }
}

pub use libi::job::KvsNames;

/// The universe size ranks see (`MPI_UNIVERSE_SIZE`, PMI `get_universe_size`) for `-usize`
/// (`None`: not given; `Some(0)`: SYSTEM; `Some(-1)`: INFINITE) in a job of `size` ranks over
/// host lists of `slots` slots. As Hydra: unknown (-1, the attribute is not set) unless
/// `-usize` says otherwise; SYSTEM is the host list's slots. A known universe is never
/// smaller than the process group that sees it.
pub fn universe_size(usize_opt: Option<i32>, slots: u32, size: u32) -> i32 {
    let n = match usize_opt {
        None | Some(-1) => return -1,
        Some(0) => slots,
        Some(n) => n.max(1) as u32,
    };
    n.max(size).min(i32::MAX as u32) as i32
}

/// The whole job as the front end plans it.
#[derive(Debug, Clone)]
pub struct Plan {
    pub job: JobCommon,
    /// The front end's own node (node 0, no ranks) with the NLA tree below it.
    pub root: NodePlan,
    pub shape: Shape,
    pub model: LaunchModel,
    /// Number of NLAs.
    pub nodes: usize,
    /// The host list (spawned ranks are placed on it too).
    pub hosts: Vec<Host>,
    /// Degree cap of the NLA tree.
    pub max_conn: usize,
    /// `-usize N`: a spawn that would make more than N ranks run at once fails.
    pub universe_limit: Option<u32>,
    /// The kvsnames of the job and of its spawned groups.
    pub kvs: KvsNames,
}

impl Plan {
    /// What the job's spawns are planned from ([`libi::spawn::Spawner`]).
    pub fn spawn_base(&self) -> libi::spawn::SpawnBase {
        libi::spawn::SpawnBase {
            hosts: self.hosts.clone(),
            universe_limit: self.universe_limit,
            universe_size: self.job.universe_size,
            kvs: self.kvs.clone(),
            shape: self.shape.clone(),
            model: self.model,
            max_conn: self.max_conn,
            root_host: self.root.host.clone(),
            job_size: self.job.size,
            launcher: self.job.launcher.clone(),
        }
    }
}

/// Why a job cannot be planned, or the resource manager's hosts not found: one line each.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A host list, a host file or a rank map that does not parse or fit, or LSF's hosts.
    #[error(transparent)]
    Hosts(#[from] HostError),
    /// `HYDRA_HOST_FILE`'s host file.
    #[error("HYDRA_HOST_FILE: {0}")]
    EnvHostfile(HostError),
    /// `PBS_NODEFILE`'s host file.
    #[error("PBS_NODEFILE: {0}")]
    PbsNodefile(HostError),
    /// Slurm's variables do not describe an allocation.
    #[error(transparent)]
    Slurm(libi::slurm::AllocationError),
    /// `-rmk NAME` (or `HYDRA_RMK`) outside a job of that resource manager.
    #[error("-rmk {0}: not inside a {0} job")]
    NotInside(&'static str),
    #[error(
        "-launcher slurm needs a Slurm allocation (run inside salloc or sbatch) or a host list"
    )]
    SlurmWithoutAllocation,
    #[error(
        "-skip-launch-node: every host is this machine; no host is left to run ranks on (give \
         a host list with other hosts)"
    )]
    NoHostLeft,
    /// A program without `-n` runs one process per slot, and the slots are too many.
    #[error(
        "too many processes: the host list has {slots} slots, and a program without -n runs \
         one process per slot (at most {max})"
    )]
    TooManySlots { slots: u64, max: u32 },
    #[error("too many processes: {size} (at most {max} in a job)")]
    TooManyProcesses { size: u64, max: u32 },
    /// A host file's `binding=` for a host that `-map-by` does not fit.
    #[error("host {host} (its hostfile binding=): {why}")]
    HostBinding { host: String, why: libi_binding::OptionError },
    /// The launch tree cannot be built.
    #[error(transparent)]
    Tree(libi::job::TooDeep),
}

/// Settings that do not come from the command line.
pub struct Context {
    /// Our environment; a value need not be UTF-8.
    pub inherited: Vec<(String, OsString)>,
    /// Our variables whose name is not UTF-8, each whole (`NAME=VALUE`).
    pub inherited_raw: Vec<OsString>,
    /// Our working directory (its name need not be UTF-8).
    pub cwd: Option<OsString>,
    pub kvs: KvsNames,
    /// Path of the singleton's program (`-pmi_args`), if it can be found: only a label.
    pub singleton_exe: Option<String>,
    pub kill_grace_ms: u64,
    pub nla_path: String,
    pub local_host: String,
    /// The hosts of the Slurm allocation we run in, if any.
    pub slurm: Option<Vec<Host>>,
    /// The hosts of a PBS or LSF job we run in (see [`rm_allocation`]), if any.
    pub rm_hosts: Option<Vec<Host>>,
    /// A job-unique nonzero number (PMGR's `MPIRUN_ID`).
    pub job_id: i32,
    /// Whether a host name is this machine (`-skip-launch-node` leaves such hosts out).
    pub is_local: fn(&str) -> bool,
    /// `-pmi auto`: whether a program (its name or path, looked up on our `PATH` from our
    /// working directory) links a PMIx client ([`crate::pmix_detect::links_pmix`]).
    pub links_pmix: fn(&str) -> bool,
}

/// The resource manager's hosts: (Slurm allocation, PBS/LSF hosts). `-rmk` (or `HYDRA_RMK`)
/// chooses one, which must then be there; without it the first found of Slurm
/// (`SLURM_JOB_ID`), PBS (`PBS_NODEFILE`: one line per slot) and LSF (`LSB_MCPU_HOSTS`).
/// Only consulted when no host list is given. `get` looks a variable up.
#[allow(clippy::type_complexity)]
pub fn rm_allocation(
    rmk: Option<Rmk>,
    get: &dyn Fn(&str) -> Option<String>,
) -> Result<(Option<Vec<Host>>, Option<Vec<Host>>), PlanError> {
    let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
    let pbs = || -> Result<Option<Vec<Host>>, PlanError> {
        get("PBS_NODEFILE")
            .map(|f| hosts::read_hostfile(f.trim()).map_err(PlanError::PbsNodefile))
            .transpose()
    };
    let lsf = || -> Result<Option<Vec<Host>>, PlanError> {
        Ok(get("LSB_MCPU_HOSTS").map(|v| hosts::parse_lsf_hosts(&v)).transpose()?)
    };
    let slurm = || libi::slurm::allocation_from_env(&|k: &str| get(k)).map_err(PlanError::Slurm);
    let need =
        |h: Option<Vec<Host>>, what: &'static str| h.map(Some).ok_or(PlanError::NotInside(what));
    Ok(match rmk {
        Some(Rmk::User) => (None, None),
        Some(Rmk::Slurm) => (need(slurm()?, "slurm")?, None),
        Some(Rmk::Pbs) => (None, need(pbs()?, "pbs")?),
        Some(Rmk::Lsf) => (None, need(lsf()?, "lsf")?),
        None => match slurm()? {
            Some(a) => (Some(a), None),
            None => (None, pbs()?.map_or_else(lsf, |h| Ok(Some(h)))?),
        },
    })
}

/// Default launch timeout: a child NLA that has not connected back 60 s after its launch
/// started has failed (ssh's own ConnectTimeout usually ends an unreachable host sooner).
pub const LAUNCH_TIMEOUT_MS: u64 = 60_000;

/// Default bytes of new pairs a fence may push down the tree whole (see `JobCommon`).
/// MPICH 4's `MPI_Init` makes every node fetch every rank's 430-byte business card: pushing
/// them is one bulk transfer per node instead of one climbing `get` per card (measured at
/// 64 nodes x 64 ranks, 1.9 MB of cards: 8.7 s against 12.1 s with 1 MiB; libi-sim: 2-4x
/// at 64-256 nodes). 16 MiB covers that exchange up to ~36k ranks.
pub const KVS_PUSH_MAX: u64 = 16 << 20;

/// Default most KVS data (keys plus values) a job's ranks may put (see `JobCommon`): far
/// above what MPI needs (MPICH's business cards are ~100 bytes a rank), low enough that a
/// runaway program fails with a message rather than exhausts the NLAs' memory.
pub const KVS_MAX: u64 = 1 << 30;

/// The KVS key under which `-memory-alloc-kinds` reaches the ranks.
pub const MEMORY_ALLOC_KINDS_KEY: &str = libi::spawn::MEMORY_ALLOC_KINDS_KEY;

/// Hydra's hostfile name for "this machine, one slot" (`-f HYDRA_USE_LOCALHOST`).
const USE_LOCALHOST: &str = "HYDRA_USE_LOCALHOST";

/// Plan the job, or say in one line why it cannot run.
pub fn plan(cl: &CommandLine, ctx: &Context) -> Result<Plan, PlanError> {
    let g = &cl.global;
    // Hosts: -hosts, else -f, else the Slurm allocation we run in, else this machine with one
    // slot (Hydra's default localhost: `mpiexec prog` runs one process, `-usize SYSTEM` is 1;
    // also Hydra's `-f HYDRA_USE_LOCALHOST`).
    let explicit_hosts = g.hosts.is_some() || g.hostfile.is_some();
    let this_machine = || vec![Host::new(ctx.local_host.clone(), 1)];
    let mut host_list: Vec<Host> = if let Some(h) = &g.hosts {
        hosts::parse_hosts_arg(h)?
    } else if let Some(f) = &g.hostfile {
        if f == USE_LOCALHOST {
            this_machine()
        } else {
            hosts::read_hostfile(f).map_err(|e| match g.hostfile_from_env {
                true => PlanError::EnvHostfile(e),
                false => PlanError::Hosts(e),
            })?
        }
    } else if let Some(alloc) = ctx.slurm.as_ref().or(ctx.rm_hosts.as_ref()) {
        alloc.clone()
    } else {
        this_machine()
    };
    if g.launcher == Some(LauncherKind::Slurm) && !explicit_hosts && ctx.slurm.is_none() {
        return Err(PlanError::SlurmWithoutAllocation);
    }
    if g.skip_launch_node && g.singleton_port.is_none() {
        // As Hydra: the hosts that are this machine run no rank (a batch job's first node
        // keeps its cores for the launcher, or for a tool).
        host_list.retain(|h| !(ctx.is_local)(&h.name));
        if host_list.is_empty() {
            return Err(PlanError::NoHostLeft);
        }
    }
    if let Some(ppn) = g.ppn {
        host_list = hosts::with_ppn(host_list, ppn);
    }
    if let Some(order) = g.order_nodes {
        hosts::order_nodes(&mut host_list, order);
    }
    // As Hydra: an executable without -n gets as many processes as the host list has slots
    // (after -ppn), each of them (`-hosts a:2 x : y` runs two x and two y).
    let total_slots: u64 = host_list.iter().map(|h| u64::from(h.slots)).sum();
    let max = libi::job::MAX_JOB_SIZE;
    let default_n = || {
        libi::job::job_size(total_slots.max(1))
            .ok_or(PlanError::TooManySlots { slots: total_slots, max })
    };
    let mut apps: Vec<AppSpec> = cl
        .execs
        .iter()
        .map(|e| {
            let mode = e.env_mode.as_ref().unwrap_or(&g.genv_mode);
            Ok(AppSpec {
                exe: e.prog.clone(),
                args: e.args.clone(),
                nprocs: match e.n {
                    Some(n) => n,
                    None => default_n()?,
                },
                env: app_env(&ctx.inherited, &g.genv_mode, e.env_mode.as_ref(), &g.genv, &e.env),
                wdir: e.wdir.clone().or_else(|| g.gwdir.clone()).or_else(|| ctx.cwd.clone()),
                agent_env: !matches!(mode, EnvMode::All),
                raw_env: raw_env(ctx, mode),
            })
        })
        .collect::<Result<_, PlanError>>()?;
    if g.singleton_port.is_some() {
        // Singleton init: one rank, the MPI process that started us, on this host. Its spawns
        // get our environment (which is its own) and working directory.
        apps = vec![AppSpec {
            exe: ctx.singleton_exe.clone().unwrap_or_else(|| "singleton".into()),
            args: Vec::new(),
            nprocs: 1,
            env: app_env(&ctx.inherited, &g.genv_mode, None, &g.genv, &[]),
            wdir: g.gwdir.clone().or_else(|| ctx.cwd.clone()),
            agent_env: !matches!(g.genv_mode, EnvMode::All),
            raw_env: raw_env(ctx, &g.genv_mode),
        }];
        if !explicit_hosts {
            host_list = this_machine();
        }
    }
    let size: u64 = apps.iter().map(|a| a.nprocs as u64).sum();
    let size = libi::job::job_size(size).ok_or(PlanError::TooManyProcesses { size, max })?;
    let mut app_of = Vec::with_capacity(size as usize);
    for (i, a) in apps.iter().enumerate() {
        app_of.extend(std::iter::repeat_n(i as u32, a.nprocs as usize));
    }

    // Placement; hosts that get no rank get no NLA.
    let placement = match (&g.rankmap, g.singleton_port) {
        (Some(map), None) => hosts::place_by_map(&host_list, map, size)?,
        _ => hosts::place(&host_list, size),
    };
    let used: Vec<usize> =
        (0..host_list.len()).filter(|&i| !placement.per_host[i].is_empty()).collect();
    let mut node_of_host = vec![usize::MAX; host_list.len()];
    for (k, &h) in used.iter().enumerate() {
        node_of_host[h] = k;
    }
    let runs: Vec<(usize, u32)> =
        placement.runs.iter().map(|&(h, c)| (node_of_host[h], c)).collect();
    let mut preput = Vec::new();
    if let Some(m) = process_mapping(&runs) {
        preput.push(("PMI_process_mapping".to_string(), m));
    }
    if let Some(k) = &g.memory_alloc_kinds {
        // Where MPICH (4.2 and later) looks for the kinds the startup mechanism requests
        // (a PMI `get` of this key at `MPI_Init`), as `mpiexec.hydra` publishes them.
        preput.push((MEMORY_ALLOC_KINDS_KEY.to_string(), k.clone()));
    }

    // Default launcher: like Hydra's resource-manager detection, srun inside an allocation
    // (unless a host list was given), ssh for a host list, fork on this machine alone.
    let launcher = g.launcher.unwrap_or(if explicit_hosts {
        LauncherKind::Ssh
    } else if ctx.slurm.is_some() {
        LauncherKind::Slurm
    } else if ctx.rm_hosts.is_some() {
        LauncherKind::Ssh
    } else {
        LauncherKind::Fork
    });
    // A hostfile's `binding=` replaces `-bind-to` on its host; `-map-by` must fit each.
    let binding = libi_binding::Binding {
        hosts: (host_list.iter())
            .filter_map(|h| Some((h.name.clone(), h.binding.clone()?)))
            .collect(),
        ..g.binding.clone()
    };
    for (host, bind) in &binding.hosts {
        let b = libi_binding::Binding { bind: bind.clone(), ..g.binding.clone() };
        b.check().map_err(|why| PlanError::HostBinding { host: host.clone(), why })?;
    }
    // PMIx for every program, or for programs that link it; not for a singleton (its MPI
    // library connected to us over PMI-1 already).
    let pmix = g.singleton_port.is_none()
        && match g.pmi.unwrap_or_default() {
            PmiKind::Pmix => true,
            PmiKind::Pmi1 | PmiKind::Pmi2 => false,
            PmiKind::Auto => apps.iter().any(|a| (ctx.links_pmix)(&a.exe)),
        };
    let mut job = JobCommon {
        size,
        universe_size: universe_size(g.usize, total_slots.min(u64::from(u32::MAX)) as u32, size),
        kvsname: ctx.kvs.name(0),
        preput,
        apps,
        launcher: LauncherSpec {
            kind: launcher,
            exec: g.launcher_exec.clone(),
            nla_path: ctx.nla_path.clone(),
            nla_by_name: g.hybrid_hosts && g.nla_path.is_none(),
            extra_args: g.launcher_extra_args.clone(),
            connect_retries: g.connect_retries,
            users: (host_list.iter())
                .filter_map(|h| Some((h.name.clone(), h.user.clone()?)))
                .collect(),
        },
        kill_grace_ms: ctx.kill_grace_ms,
        launch_timeout_ms: g
            .launch_timeout
            .map(|s| (s * 1000.0) as u64)
            .unwrap_or(LAUNCH_TIMEOUT_MS),
        launch_batch: g.launch_batch,
        kvs_push_max: g.kvs_push_max.unwrap_or(KVS_PUSH_MAX),
        kvs_max: g.kvs_max.unwrap_or(KVS_MAX),
        report: g.report.is_some(),
        pmgr: g.pmgr.then_some(ctx.job_id),
        verbose: g.verbose,
        binding,
        spawned_by: None,
        singleton: g.singleton_port,
        each_end: g.print_all_exitcodes,
        staged: Vec::new(),
        gpus: g.gpus,
        pmix: None,
    };

    // Launch tree over the front end (node 0) and one NLA per used host (nodes 1..).
    let shape = g.tree.clone().unwrap_or(Shape::Greedy);
    // Greedy places nodes under the same batching rule the launch will follow.
    let model = LaunchModel {
        batch: g.launch_batch.or(g.launch_model.and_then(|m| m.batch)),
        ..g.launch_model.unwrap_or(LaunchModel::DEFAULT)
    };
    let max_conn = g.max_conn.unwrap_or(DEFAULT_MAX_CONN);
    let per_node: Vec<(String, Vec<RankSlot>)> = used
        .iter()
        .map(|&h| {
            let ranks = placement.per_host[h]
                .iter()
                .map(|&r| RankSlot { rank: r, app: app_of[r as usize] })
                .collect();
            (host_list[h].name.clone(), ranks)
        })
        .collect();
    if pmix {
        let nodes = per_node
            .iter()
            .map(|(host, ranks)| (host.clone(), ranks.iter().map(|r| r.rank).collect()))
            .collect();
        job.pmix = Some(libi::job::PmixJob { nodes, parent: None });
    }
    let root = nla_tree(per_node, &shape, &model, max_conn, &ctx.local_host)?;
    let universe_limit = g.usize.filter(|&n| n > 0).map(|n| n as u32);
    Ok(Plan {
        job,
        root,
        shape,
        model,
        nodes: used.len(),
        hosts: host_list,
        max_conn,
        universe_limit,
        kvs: ctx.kvs.clone(),
    })
}

/// The NLA tree of a job: the front end (node 0, no ranks, `local_host`) and one NLA per
/// entry of `per_node` (nodes 1.., in order), shaped by the launch tree.
pub fn nla_tree(
    per_node: Vec<(String, Vec<RankSlot>)>,
    shape: &Shape,
    model: &LaunchModel,
    max_conn: usize,
    local_host: &str,
) -> Result<NodePlan, PlanError> {
    NodePlan::tree(per_node, shape, model, max_conn, local_host).map_err(PlanError::Tree)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::parse;

    /// Pairs with text values, or with values that need not be UTF-8 (an environment's).
    fn kv<V: From<&'static str>>(a: &[(&str, &'static str)]) -> Vec<(String, V)> {
        a.iter().map(|(k, v)| (k.to_string(), V::from(v))).collect()
    }

    fn ctx() -> Context {
        Context {
            inherited: kv(&[("PATH", "/bin")]),
            inherited_raw: Vec::new(),
            cwd: Some("/w".into()),
            kvs: KvsNames::new(1, 77, "fe"),
            singleton_exe: None,
            kill_grace_ms: 1000,
            nla_path: "/x/libi-nla".into(),
            local_host: "fe".into(),
            slurm: None,
            rm_hosts: None,
            job_id: 7,
            is_local: |h| h == "fe" || h == "localhost",
            links_pmix: |exe| exe.ends_with("ompi_app"),
        }
    }

    fn cl(s: &str) -> CommandLine {
        parse(&s.split_whitespace().map(str::to_string).collect::<Vec<_>>()).expect("parse")
    }

    #[test]
    fn env_rules() {
        let inh = kv(&[("PATH", "/bin"), ("HOME", "/h"), ("PMI_FD", "9"), ("PMIX_RANK", "1")]);
        let all = app_env(&inh, &EnvMode::All, None, &kv(&[("A", "1")]), &kv(&[("A", "2")]));
        assert_eq!(all, kv(&[("PATH", "/bin"), ("HOME", "/h"), ("A", "2")]));
        let none = app_env(&inh, &EnvMode::None, None, &kv(&[("A", "1")]), &[]);
        assert_eq!(none, kv(&[("A", "1")]));
        let list =
            app_env(&inh, &EnvMode::All, Some(&EnvMode::List(vec!["HOME".into()])), &[], &[]);
        assert_eq!(list, kv(&[("HOME", "/h")]));
        // an explicit -genv may set a PMI_ variable (PMI_DEBUG, say)
        let dbg = app_env(&inh, &EnvMode::None, None, &kv(&[("PMI_DEBUG", "1")]), &[]);
        assert_eq!(dbg, kv(&[("PMI_DEBUG", "1")]));
        // A LIBI session's key, handed to us in our environment, reaches every rank.
        let inh = kv(&[("HOME", "/h"), ("LIBI_SESSION_KEY", "k")]);
        let none = app_env(&inh, &EnvMode::None, None, &[], &[]);
        assert_eq!(none, kv(&[("LIBI_SESSION_KEY", "k")]));
        let list = app_env(&inh, &EnvMode::List(vec!["HOME".into()]), None, &[], &[]);
        assert_eq!(list, kv(&[("HOME", "/h"), ("LIBI_SESSION_KEY", "k")]));
    }

    fn all_nodes(p: &NodePlan, out: &mut Vec<NodePlan>) {
        out.extend(p.nodes().into_iter().map(NodePlan::shallow));
    }

    /// Without -n: one process without a host list (Hydra's localhost has one slot), with
    /// -ppn N then N; with a host list or an allocation its slots, for every executable.
    #[test]
    fn default_process_counts_as_hydra() {
        let size = |line: &str, c: &Context| plan(&cl(line), c).expect(line).job.size;
        let counts = |line: &str| -> Vec<u32> {
            plan(&cl(line), &ctx()).expect(line).job.apps.iter().map(|a| a.nprocs).collect()
        };
        assert_eq!(size("x", &ctx()), 1);
        assert_eq!(counts("x : y"), [1, 1]);
        assert_eq!(size("-ppn 2 x", &ctx()), 2);
        assert_eq!(size("-hosts a:3,b x", &ctx()), 4);
        assert_eq!(counts("-hosts a:2 x : -n 1 y : z"), [2, 1, 2]);
        assert_eq!(size("-ppn 2 -hosts a:3,b x", &ctx()), 4);
        let mut c = ctx();
        c.slurm = Some(vec![Host::new("s1", 3)]);
        assert_eq!(size("x", &c), 3);
    }

    #[test]
    fn single_host_default() {
        let p = plan(&cl("-n 3 a"), &ctx()).expect("plan");
        assert_eq!(p.nodes, 1);
        assert_eq!(p.job.launcher.kind, LauncherKind::Fork);
        assert_eq!(p.root.children.len(), 1);
        assert_eq!(p.root.children[0].ranks.len(), 3);
        assert_eq!(p.job.preput, kv(&[("PMI_process_mapping", "(vector,(0,1,3))")]));
        assert_eq!(p.job.launcher.connect_retries, None, "the NLA's default");
        let mut c = cl("-n 3 a");
        c.global.connect_retries = Some(4);
        assert_eq!(plan(&c, &ctx()).expect("plan").job.launcher.connect_retries, Some(4));
    }

    #[test]
    fn hosts_tree_and_mapping() {
        let p = plan(&cl("-hosts a:2,b:2,c:2 --tree flat -n 6 x"), &ctx()).expect("plan");
        assert_eq!(p.job.launcher.kind, LauncherKind::Ssh);
        assert_eq!(p.root.children.len(), 3);
        assert_eq!(p.root.subtree_ranks(), 6);
        assert_eq!(p.job.preput, kv(&[("PMI_process_mapping", "(vector,(0,3,2))")]));
        let p = plan(&cl("-hosts a,b,c,d,e,f,g --tree chain -n 7 x"), &ctx()).expect("plan");
        let mut nodes = Vec::new();
        all_nodes(&p.root, &mut nodes);
        assert_eq!(nodes.len(), 8);
        assert_eq!(p.root.children.len(), 1);
        let mut hosts: Vec<String> = nodes[1..].iter().map(|n| n.host.clone()).collect();
        hosts.sort();
        assert_eq!(hosts, vec!["a", "b", "c", "d", "e", "f", "g"]);
    }

    #[test]
    fn connection_cap_reshapes_wide_trees() {
        let hosts: Vec<String> = (0..300).map(|i| format!("h{i}")).collect();
        let args = format!("-hosts {} --tree flat -n 300 x", hosts.join(","));
        let p = plan(&cl(&args), &ctx()).expect("plan");
        fn check(n: &NodePlan, is_root: bool, count: &mut usize) {
            *count += 1;
            let conns = n.children.len() + usize::from(!is_root);
            assert!(conns <= DEFAULT_MAX_CONN, "node {} has {conns} connections", n.node);
            for c in &n.children {
                check(c, false, count);
            }
        }
        let mut count = 0;
        check(&p.root, true, &mut count);
        assert_eq!(count, 301);
        assert_eq!(p.root.subtree_ranks(), 300);
        let args = format!("-hosts {} --tree flat --max-conn 16 -n 300 x", hosts.join(","));
        let p = plan(&cl(&args), &ctx()).expect("plan");
        assert!(p.root.children.len() <= 16);
    }

    #[test]
    fn unused_hosts_get_no_nla() {
        let p = plan(&cl("-hosts a:4,b:4 -launcher fork -n 3 x"), &ctx()).expect("plan");
        assert_eq!(p.nodes, 1);
        assert_eq!(p.job.launcher.kind, LauncherKind::Fork);
    }

    /// A tree deeper than `MAX_TREE_DEPTH` is refused with a message (it would be a nested
    /// plan too deep to encode safely, and a launch of thousands of sequential steps).
    #[test]
    fn too_deep_trees_are_refused() {
        let hosts: Vec<String> = (0..1100).map(|i| format!("h{i}")).collect();
        let line = format!("-hosts {} --tree chain -n 1100 x", hosts.join(","));
        let Err(err) = plan(&cl(&line), &ctx()) else { panic!("a chain of 1100 was planned") };
        assert_eq!(
            err.to_string(),
            "a chain tree of 1100 NLAs is 1100 levels deep; at most 1024 (use --tree greedy, \
             binomial or kary:K)"
        );
        let line = format!("-hosts {} --tree chain -n 1000 x", hosts[..1000].join(","));
        assert!(plan(&cl(&line), &ctx()).is_ok());
    }

    /// `-order-nodes`: hosts sorted by slots before placement (stably), so the ranks, the
    /// process mapping and the NLA tree follow the sorted list; after -ppn, nothing moves.
    #[test]
    fn order_nodes_sorts_before_placement() {
        let ranks_of = |p: &Plan| -> Vec<(String, Vec<u32>)> {
            let mut nodes = Vec::new();
            all_nodes(&p.root, &mut nodes);
            nodes[1..]
                .iter()
                .map(|n| (n.host.clone(), n.ranks.iter().map(|r| r.rank).collect()))
                .collect()
        };
        let line = "-hosts h1:1,h2:3,h3:1 --tree flat -order-nodes descending -n 4 x";
        let p = plan(&cl(line), &ctx()).expect("plan");
        assert_eq!(p.hosts.iter().map(|h| h.name.as_str()).collect::<Vec<_>>(), ["h2", "h1", "h3"]);
        assert_eq!(ranks_of(&p), [("h2".into(), vec![0, 1, 2]), ("h1".into(), vec![3])]);
        let line = "-hosts h2:3,h1:1,h3:1 --tree flat -order-nodes ascending -n 4 x";
        let p = plan(&cl(line), &ctx()).expect("plan");
        assert_eq!(
            ranks_of(&p),
            [("h1".into(), vec![0]), ("h3".into(), vec![1]), ("h2".into(), vec![2, 3])]
        );
        assert_eq!(p.job.preput, kv(&[("PMI_process_mapping", "(vector,(0,2,1),(2,1,2))")]));
        let line = "-hosts h1:1,h2:3 -ppn 2 -order-nodes descending -n 4 x";
        let p = plan(&cl(line), &ctx()).expect("plan");
        assert_eq!(p.hosts.iter().map(|h| h.name.as_str()).collect::<Vec<_>>(), ["h1", "h2"]);
    }

    #[test]
    fn ppn_and_wrap() {
        let p = plan(&cl("-hosts a,b -ppn 2 -n 6 x"), &ctx()).expect("plan");
        let mut nodes = Vec::new();
        all_nodes(&p.root, &mut nodes);
        let a = nodes.iter().find(|n| n.host == "a").expect("a");
        assert_eq!(a.ranks.iter().map(|r| r.rank).collect::<Vec<_>>(), vec![0, 1, 4, 5]);
        assert_eq!(p.job.preput, kv(&[("PMI_process_mapping", "(vector,(0,2,2),(0,1,2))")]));
    }

    #[test]
    fn slurm_allocation() {
        let mut c = ctx();
        c.slurm = Some(vec![Host::new("node01", 3), Host::new("node02", 3)]);
        let p = plan(&cl("x"), &c).expect("plan");
        assert_eq!(p.job.launcher.kind, LauncherKind::Slurm);
        assert_eq!(p.job.size, 6, "one rank per allocated task by default");
        assert_eq!(p.nodes, 2);
        let p = plan(&cl("-hosts a,b -n 2 x"), &c).expect("plan");
        assert_eq!(p.job.launcher.kind, LauncherKind::Ssh, "an explicit host list wins");
        let e = plan(&cl("-launcher slurm -n 2 x"), &ctx()).expect_err("no allocation").to_string();
        assert!(e.contains("Slurm allocation"), "{e}");
    }

    #[test]
    fn pbs_and_lsf_allocations() {
        let dir = std::env::temp_dir().join(format!("libi-pbs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let nf = dir.join("nodefile");
        std::fs::write(&nf, "n1\nn1\nn2\n").expect("write");
        let nf = nf.to_string_lossy().into_owned();
        let vars = [("PBS_NODEFILE".to_string(), nf), ("LSB_MCPU_HOSTS".into(), "l1 2".into())];
        let get = |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let two = |a: &str, b: &str| vec![Host::new(a, 2), Host::new(b, 1)];
        // Detected: PBS before LSF; -rmk chooses.
        assert_eq!(rm_allocation(None, &get).expect("pbs"), (None, Some(two("n1", "n2"))));
        let lsf = rm_allocation(Some(Rmk::Lsf), &get).expect("lsf").1.expect("hosts");
        assert_eq!(lsf, vec![Host::new("l1", 2)]);
        assert_eq!(rm_allocation(Some(Rmk::User), &get).expect("user"), (None, None));
        let e = rm_allocation(Some(Rmk::Slurm), &get).expect_err("no slurm").to_string();
        assert!(e.contains("slurm"), "{e}");
        let none = |_: &str| None;
        assert_eq!(rm_allocation(None, &none).expect("none"), (None, None));
        assert!(rm_allocation(Some(Rmk::Pbs), &none).is_err());
        let bad = |k: &str| (k == "PBS_NODEFILE").then(|| "/nonexistent/nf".to_string());
        let e = rm_allocation(None, &bad).expect_err("missing").to_string();
        assert!(e.starts_with("PBS_NODEFILE: cannot read hostfile /nonexistent/nf"), "{e}");
        // The plan: the PBS hosts, ssh by default.
        let mut c = ctx();
        c.rm_hosts = Some(two("n1", "n2"));
        let p = plan(&cl("x"), &c).expect("plan");
        assert_eq!((p.job.size, p.nodes), (3, 2));
        assert_eq!(p.job.launcher.kind, LauncherKind::Ssh);
    }

    /// Slots add up without wrapping; a job larger than `MAX_JOB_SIZE` (from `-n` or from
    /// the slots) is refused before anything is built.
    #[test]
    fn job_size_limits() {
        let err = |line: &str| plan(&cl(line), &ctx()).expect_err(line).to_string();
        assert_eq!(
            err("-hosts a:4294967295,b:2 x"),
            "too many processes: the host list has 4294967297 slots, and a program without -n \
             runs one process per slot (at most 16777216)"
        );
        assert!(err("-hosts a:16777217 x").starts_with("too many processes: the host list has"));
        assert_eq!(
            err("-n 16777217 x"),
            "too many processes: 16777217 (at most 16777216 in a job)"
        );
        assert_eq!(
            err("-n 4294967295 x : -n 2 y"),
            "too many processes: 4294967297 (at most 16777216 in a job)"
        );
        let p = plan(&cl("-hosts a:4294967295,b:2 -usize SYSTEM -n 1 x"), &ctx()).expect("plan");
        assert_eq!(p.job.universe_size, i32::MAX);
    }

    #[test]
    fn universe_size_as_hydra() {
        // not given or INFINITE: unknown (-1), whatever the host list
        assert_eq!(plan(&cl("-n 3 a"), &ctx()).expect("plan").job.universe_size, -1);
        let p = plan(&cl("-hosts a:2,b:2 -n 1 a"), &ctx()).expect("plan");
        assert_eq!(p.job.universe_size, -1);
        let p = plan(&cl("-usize INFINITE -n 1 a"), &ctx()).expect("plan");
        assert_eq!(p.job.universe_size, -1);
        // SYSTEM: the host list's slots (without one, this machine's one slot, as Hydra's
        // localhost), never less than the job
        let p = plan(&cl("-hosts a:2,b:3 -usize SYSTEM -n 1 a"), &ctx()).expect("plan");
        assert_eq!(p.job.universe_size, 5);
        assert_eq!(plan(&cl("-usize SYSTEM a"), &ctx()).expect("plan").job.universe_size, 1);
        assert_eq!(plan(&cl("-usize SYSTEM -n 2 a"), &ctx()).expect("plan").job.universe_size, 2);
        let p = plan(&cl("-hosts a:2 -usize SYSTEM -n 3 a"), &ctx()).expect("plan");
        assert_eq!(p.job.universe_size, 3);
        // N
        let p = plan(&cl("-usize 7 -n 2 a"), &ctx()).expect("plan");
        assert_eq!((p.job.universe_size, p.universe_limit), (7, Some(7)));
    }

    #[test]
    fn kvsnames_are_hydra_style() {
        let p = plan(&cl("-n 1 a"), &ctx()).expect("plan");
        assert_eq!(p.job.kvsname, "kvs_1_0_77_fe");
        assert_eq!(p.kvs.name(3), "kvs_1_3_77_fe");
        let k = KvsNames::new(42, 4_000_000_000, "node 1=x;y_long");
        assert_eq!(k.name(0), "kvs_42_0_4000000000_node1xylong");
        assert!(KvsNames::new(1, 1, &"h".repeat(300)).name(9).len() < 100);
        assert_eq!(KvsNames::new(1, 2, "").name(0), "kvs_1_0_2_localhost");
    }

    #[test]
    fn singleton_job() {
        let mut c = ctx();
        c.singleton_exe = Some("/bin/app".into());
        let p = plan(&cl("-pmi_args 5000 default_interface default_key 12"), &c).expect("plan");
        assert_eq!(p.job.size, 1);
        assert_eq!(p.job.singleton, Some(5000));
        assert_eq!(p.job.universe_size, -1);
        assert_eq!(p.job.apps[0].exe, "/bin/app");
        assert_eq!(p.job.apps[0].wdir.as_deref(), Some("/w".as_ref()));
        assert_eq!(p.job.launcher.kind, LauncherKind::Fork);
        assert_eq!(p.root.children.len(), 1);
        assert_eq!(p.root.children[0].host, "fe");
        assert_eq!(p.root.children[0].ranks, vec![RankSlot { rank: 0, app: 0 }]);
        assert_eq!(plan(&cl("-n 1 a"), &ctx()).expect("plan").job.singleton, None);
    }

    /// Hydra's `-f HYDRA_USE_LOCALHOST`: this machine, one slot, even inside an allocation.
    #[test]
    fn hostfile_use_localhost() {
        let mut c = ctx();
        c.rm_hosts = Some(vec![Host::new("pbs1", 8)]);
        let p = plan(&cl("-f HYDRA_USE_LOCALHOST -n 3 x"), &c).expect("plan");
        assert_eq!(p.hosts, [Host::new("fe", 1)]);
        assert_eq!(p.root.children[0].ranks.len(), 3);
    }

    #[test]
    fn bad_hostfile_names_file() {
        let e = plan(&cl("-f /nonexistent/hosts -n 1 x"), &ctx()).expect_err("missing").to_string();
        assert!(e.contains("/nonexistent/hosts"), "{e}");
    }

    #[test]
    fn hydra5_placement_options() {
        // -skip-launch-node: hosts that are this machine ("fe", "localhost" here) run nothing.
        let p = plan(&cl("-hosts fe:2,n1,localhost,n2 -skip-launch-node -n 3 x"), &ctx())
            .expect("plan");
        assert_eq!(p.hosts.iter().map(|h| h.name.as_str()).collect::<Vec<_>>(), ["n1", "n2"]);
        let e =
            plan(&cl("-skip-launch-node -n 1 x"), &ctx()).expect_err("nothing left").to_string();
        assert!(e.starts_with("-skip-launch-node: every host is this machine"), "{e}");
        // -rankmap: rank r on host map[r % len]; NLAs for the hosts used, in list order.
        let p = plan(&cl("-hosts a,b,c -rankmap 2,0,2 -n 4 x"), &ctx()).expect("plan");
        let mut all = Vec::new();
        all_nodes(&p.root, &mut all);
        let placed: Vec<(String, Vec<u32>)> = all
            .iter()
            .filter(|n| n.node != 0)
            .map(|n| (n.host.clone(), n.ranks.iter().map(|s| s.rank).collect()))
            .collect();
        assert_eq!(placed, [("a".to_string(), vec![1]), ("c".to_string(), vec![0, 2, 3])]);
        assert_eq!(
            p.job.preput,
            kv(&[("PMI_process_mapping", "(vector,(1,1,1),(0,1,1),(1,1,2))")])
        );
        let e =
            plan(&cl("-hosts a,b -rankmap 0,5 -n 2 x"), &ctx()).expect_err("node 5").to_string();
        assert!(e.contains("names node 5"), "{e}");
        // -memory-alloc-kinds reaches the ranks' KVS; -hybrid-hosts starts remote NLAs by name.
        let p = plan(&cl("-memory-alloc-kinds mpi:alloc_mem -hybrid-hosts -n 1 x"), &ctx())
            .expect("plan");
        assert!(p.job.preput.contains(&(MEMORY_ALLOC_KINDS_KEY.into(), "mpi:alloc_mem".into())));
        assert!(p.job.launcher.nla_by_name);
        assert_eq!(p.job.launcher.remote_nla(), "libi-nla");
        let p = plan(&cl("-hybrid-hosts --nla-path /y/nla -n 1 x"), &ctx()).expect("plan");
        assert!(!p.job.launcher.nla_by_name, "an explicit --nla-path is used as given");
    }
}

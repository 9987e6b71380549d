//! The job model: what runs where, with which environment.
//!
//! The front end builds the job from the command line (a [`JobCommon`], and a [`NodePlan`]
//! for each node) and sends each NLA the part it needs in a [`NodeSetup`]. Everything here
//! is plain data (serde), computed once.

use serde::{Deserialize, Serialize};

/// One executable of an MPMD command line (`prog1 args : -n 2 prog2`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppSpec {
    /// Program as given by the user (resolved on the node through the rank's `PATH`).
    pub exe: String,
    /// argv[1..], as bytes: an argument need not be UTF-8 (Hydra passes its bytes on).
    pub args: Vec<std::ffi::OsString>,
    /// Number of ranks of this executable.
    pub nprocs: u32,
    /// The environment of its ranks (before the per-rank PMI variables are added): the
    /// complete one, or with `agent_env` what goes on top of the agent's own.
    pub env: Vec<(String, std::ffi::OsString)>,
    /// Hydra's rule for `-genvnone`/`-genvlist` (`-envnone`/`-envlist`): the ranks start from
    /// the environment of the agent that starts them (on this machine the front end's, over
    /// ssh the login's), less PMI settings of an outer job, and `env` goes on top; so they
    /// keep `PATH`, `HOME` and the like. False (`-genvall`, the default): `env` is all.
    #[serde(default)]
    pub agent_env: bool,
    /// Working directory, as bytes (a directory's name need not be UTF-8); `None` = the
    /// front end's.
    pub wdir: Option<std::ffi::OsString>,
    /// Inherited variables whose name is not UTF-8, each whole (`NAME=VALUE`, bytes), for the
    /// ranks as Hydra passes them (with `-genvall`: no option can name them). They go after
    /// `env`.
    #[serde(default)]
    pub raw_env: Vec<std::ffi::OsString>,
}

/// One rank placed on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankSlot {
    /// Global rank.
    pub rank: u32,
    /// Index into [`JobCommon::apps`] (also its `appnum`).
    pub app: u32,
}

/// How NLAs start NLAs on other nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LauncherKind {
    /// Every NLA runs on this machine (one node, or many simulated nodes).
    Fork,
    /// `ssh -o BatchMode=yes HOST libi-nla ...`
    Ssh,
    /// `rsh HOST libi-nla ...`
    Rsh,
    /// One `srun` step places an NLA on every node of the allocation; the NLAs then join
    /// the front end, which tells each where its parent in the NLA tree is.
    Slurm,
    /// A spawned process group on hosts that already run an NLA of the job: each of those
    /// NLAs starts the group's NLA on its host, which joins the front end (as under Slurm).
    /// Never chosen on the command line.
    Joined,
}

impl LauncherKind {
    /// NLAs are started by someone else and join the front end (no parent launches them).
    pub fn joins(self) -> bool {
        matches!(self, LauncherKind::Slurm | LauncherKind::Joined)
    }
}

/// A launcher name we do not know: the name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown launcher '{0}' (expected ssh, rsh, slurm or fork)")]
pub struct UnknownLauncher(pub String);

impl std::str::FromStr for LauncherKind {
    type Err = UnknownLauncher;
    fn from_str(s: &str) -> Result<Self, UnknownLauncher> {
        match s {
            "fork" => Ok(LauncherKind::Fork),
            "ssh" => Ok(LauncherKind::Ssh),
            "rsh" => Ok(LauncherKind::Rsh),
            "slurm" | "srun" => Ok(LauncherKind::Slurm),
            other => Err(UnknownLauncher(other.to_string())),
        }
    }
}

/// The launcher and the NLA binary every node uses to start its children.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LauncherSpec {
    pub kind: LauncherKind,
    /// `-launcher-exec`: the ssh/rsh program to run instead of the default.
    pub exec: Option<String>,
    /// Path of `libi-nla` on the nodes.
    pub nla_path: String,
    /// `-hybrid-hosts`: hosts do not share paths, so a remote NLA (ssh, rsh, srun) is
    /// started by the file name of `nla_path`, found on that host's `PATH`, as Hydra starts
    /// its proxy then. Local ones still use `nla_path`.
    #[serde(default)]
    pub nla_by_name: bool,
    /// `HYDRA_LAUNCHER_EXTRA_ARGS`: words given to ssh, rsh or srun before the host (or
    /// before the NLA command, for srun), as Hydra does (`-p 2222`, `-o ...`).
    #[serde(default)]
    pub extra_args: Vec<String>,
    /// A hostfile's `user=NAME`s: (host, user) — ssh logs in as `NAME@host`, rsh with `-l
    /// NAME`, as Hydra does. Only the hosts that have one.
    #[serde(default)]
    pub users: Vec<(String, String)>,
    /// `HYDRA_PROXY_RETRY_COUNT`: how often a new NLA tries its connection to its parent (or
    /// to the front end it joins) again when it fails; `None`: the NLA's default
    /// (`libi-nla --retries`).
    #[serde(default)]
    pub connect_retries: Option<u32>,
}

impl LauncherSpec {
    /// `kind` with its default program, the NLA at `nla_path`, nothing else set.
    pub fn new(kind: LauncherKind, nla_path: impl Into<String>) -> Self {
        LauncherSpec {
            kind,
            exec: None,
            nla_path: nla_path.into(),
            nla_by_name: false,
            extra_args: Vec::new(),
            users: Vec::new(),
            connect_retries: None,
        }
    }

    /// The user ssh or rsh logs in as on `host`, if the hostfile named one.
    pub fn user(&self, host: &str) -> Option<&str> {
        self.users.iter().find(|(h, _)| h == host).map(|(_, u)| u.as_str())
    }

    /// The NLA program as a remote host's shell should run it.
    pub fn remote_nla(&self) -> String {
        if !self.nla_by_name {
            return self.nla_path.clone();
        }
        std::path::Path::new(&self.nla_path)
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.nla_path.clone())
    }
}

/// What every NLA of the job shares (sent once per tree connection).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobCommon {
    /// Job size.
    pub size: u32,
    pub universe_size: i32,
    pub kvsname: String,
    /// Pairs pre-loaded into every NLA's KVS (`PMI_process_mapping`, ...).
    pub preput: Vec<(String, String)>,
    pub apps: Vec<AppSpec>,
    pub launcher: LauncherSpec,
    /// Grace period between SIGTERM and SIGKILL when the job is torn down, in ms.
    pub kill_grace_ms: u64,
    /// How long a child NLA may take from the start of its launch to its authenticated
    /// connection, in ms, before its launch counts as failed.
    pub launch_timeout_ms: u64,
    /// Launch children this many at a time, each batch after the previous one connected.
    pub launch_batch: Option<u32>,
    /// A fence whose new pairs total at most this many bytes pushes them down to every NLA
    /// with the release; a larger one leaves them where they are and `get`s climb the tree
    /// (hierarchical cache).
    pub kvs_push_max: u64,
    /// Most KVS data (keys plus values, a key counted once) the job's ranks may put
    /// (`--kvs-max`): beyond it the job fails with a message naming a rank.
    pub kvs_max: u64,
    /// Collect a launch report (`--report`).
    pub report: bool,
    /// Serve PMGR collectives (`--pmgr`): each NLA listens for its ranks' v8 connections;
    /// `MPIRUN_ID` is this job-unique nonzero id.
    pub pmgr: Option<i32>,
    /// Verbose tracing (and one line per rank with its cpu binding).
    pub verbose: bool,
    /// `-bind-to` / `-map-by`: each NLA maps its local ranks to cpu sets of its own node.
    pub binding: libi_binding::Binding,
    /// Ranks of this job were started by `MPI_Comm_spawn` of a rank of the job with this
    /// kvsname (`PMI_SPAWNED=1`, PMI-2 `spawner-jobid`).
    pub spawned_by: Option<String>,
    /// Singleton init (`mpiexec -pmi_args PORT ...`): rank 0 is not started but is the MPI
    /// process that started `libi-mpiexec`, listening on this loopback port; its NLA connects
    /// there and serves it PMI-1 after the `singinit` handshake.
    #[serde(default)]
    pub singleton: Option<u16>,
    /// Report every rank's end to the front end on its own (`-print-all-exitcodes` needs
    /// each status). Otherwise ranks that end cleanly, or by the teardown's signals, are
    /// counted per node and reported once per subtree ([`crate::msg::Msg::RanksDone`]):
    /// the front end gets one message per child at the end instead of one per rank.
    #[serde(default)]
    pub each_end: bool,
    /// `--bcast`: executables sent down the tree with the setup (one copy per tree edge);
    /// each NLA writes them to node-local storage and starts its ranks from there.
    #[serde(default)]
    pub staged: Vec<Staged>,
    /// `-gpus-per-proc` / `-gpu-subdevs-per-proc`: each NLA gives its local ranks slices of
    /// its node's GPUs (`libi_node::proc::gpu`).
    #[serde(default)]
    pub gpus: GpuSplit,
    /// Serve PMIx to the ranks too (`-pmi pmix`, or `auto` for a program that links a PMIx
    /// client): each NLA with ranks starts its PMIx companion (`libi-pmix`) and registers
    /// the job with it. `None`: PMI-1/PMI-2 (and PMGR) only.
    #[serde(default)]
    pub pmix: Option<PmixJob>,
}

/// What a PMIx server must know of the whole job that one node's plan does not say: every
/// node's host and ranks (PMIx's node and process maps; a node's PMIx id is its index here).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PmixJob {
    /// Every node with ranks of the job, in the order of their first rank: host, ranks.
    pub nodes: Vec<(String, Vec<u32>)>,
    /// A spawned group: the namespace and rank of the process that spawned it
    /// (`PMIX_PARENT_ID`).
    #[serde(default)]
    pub parent: Option<(String, u32)>,
}

/// A PMIx process group as the servers of another group register it after a connect (so
/// that its ranks can be found: `PMIx_Get` of their data goes to the node that runs them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PmixPeer {
    /// Its namespace (kvsname) and size.
    pub nspace: String,
    pub size: u32,
    /// The size of each of its applications.
    pub apps: Vec<u32>,
    pub map: PmixJob,
}

impl JobCommon {
    /// The job as the NLAs of `plan`'s subtree need it: a hostfile's per-host settings
    /// (`user=`, `binding=`) for their own hosts only, so that a setup does not carry the
    /// whole host list to every node of a large job.
    pub fn for_subtree(&self, plan: &NodePlan) -> JobCommon {
        let mut job = self.clone();
        if !job.launcher.users.is_empty() || !job.binding.hosts.is_empty() {
            let hosts: std::collections::HashSet<&str> =
                plan.nodes().into_iter().map(|p| p.host.as_str()).collect();
            job.launcher.users.retain(|(h, _)| hosts.contains(h.as_str()));
            job.binding.hosts.retain(|(h, _)| hosts.contains(h.as_str()));
        }
        job
    }
}

/// Hydra 5's `-gpus-per-proc N|auto` and `-gpu-subdevs-per-proc N|auto` (`None`: `auto`,
/// the default, which sets nothing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuSplit {
    /// Devices per rank.
    pub devices: Option<u32>,
    /// Sub-devices (Level Zero tiles) per rank.
    pub subdevs: Option<u32>,
}

impl GpuSplit {
    /// What each rank gets, as Hydra decides it: `None` when both are `auto`; else the
    /// count per rank and whether it counts sub-devices. A 0 in either hides every device
    /// (count 0); otherwise `-gpu-subdevs-per-proc` wins over `-gpus-per-proc`.
    pub fn per_rank(&self) -> Option<(u32, bool)> {
        match (self.devices, self.subdevs) {
            (None, None) => None,
            (Some(0), _) | (_, Some(0)) => Some((0, false)),
            (_, Some(n)) => Some((n, true)),
            (Some(n), None) => Some((n, false)),
        }
    }
}

/// One staged executable (see [`JobCommon::staged`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Staged {
    /// The apps (indices into [`JobCommon::apps`]) that run it.
    pub apps: Vec<u32>,
    /// File name on the node (the executable's own name).
    pub name: String,
    /// Permission bits.
    pub mode: u32,
    pub data: bytes::Bytes,
}

/// The most bytes `--bcast` stages in all (they travel in one setup message per tree edge).
pub const STAGE_MAX: u64 = 192 << 20;

/// One node of the NLA tree and everything below it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodePlan {
    /// Node id in the launch tree (0 is the front end).
    pub node: u32,
    /// Host name as given by the user (also where its children connect back to).
    pub host: String,
    /// The ranks this node runs, in local-rank order.
    pub ranks: Vec<RankSlot>,
    /// Child NLAs in launch order.
    pub children: Vec<NodePlan>,
}

/// The most processes one job (or spawned group) may have: 16,777,216, above the core count
/// of the largest machines (~10 million). A larger `-n`, or a host list whose slots add up
/// to more, is refused before anything is planned: the front end's tables grow with it.
pub const MAX_JOB_SIZE: u32 = 1 << 24;

/// Variables of the front end's (or an agent's) environment that never reach ranks
/// (`docs/spec/pmi-wire.md` §6, §12.12): an outer job's PMI/PMIx settings would confuse
/// MPICH's PMI selection.
pub fn inherited_ok(name: &str) -> bool {
    !(name.starts_with("PMI_")
        || name.starts_with("PMIX_")
        || name.starts_with("PMI2_")
        || name == "PRTE_LAUNCHED")
}

/// An environment (`std::env::vars_os()`) split for the ranks: the variables by name, and
/// whole (`NAME=VALUE`, see [`raw_entry`]) those whose name is not UTF-8 and which a rank
/// may inherit.
pub fn split_environment(
    vars: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> (Vec<(String, std::ffi::OsString)>, Vec<std::ffi::OsString>) {
    let (mut named, mut raw) = (Vec::new(), Vec::new());
    for (k, v) in vars {
        match k.into_string() {
            Ok(k) => named.push((k, v)),
            Err(k) => raw.extend(raw_entry(&k, &v)),
        }
    }
    (named, raw)
}

/// The environment entry `NAME=VALUE` of a variable whose name is not UTF-8, if it is one a
/// rank may inherit (see [`inherited_ok`]; its name read with U+FFFD for what is not UTF-8).
pub fn raw_entry(name: &std::ffi::OsStr, value: &std::ffi::OsStr) -> Option<std::ffi::OsString> {
    if name.to_str().is_some() || !inherited_ok(&name.to_string_lossy()) {
        return None;
    }
    let mut entry = name.to_os_string();
    entry.push("=");
    entry.push(value);
    Some(entry)
}

/// The variable in which a LIBI session front end (crate `libi-session`) hands
/// `libi-mpiexec` its session's key: in the environment, readable by the same user only,
/// never on a command line, which every local user can read. `libi-mpiexec` gives it to
/// every rank whatever the environment options (`-genvnone`, `-envlist`, ...).
pub const SESSION_KEY_VAR: &str = "LIBI_SESSION_KEY";

/// `n` processes as a job's (or a spawn's) size, if within [`MAX_JOB_SIZE`].
pub fn job_size(n: u64) -> Option<u32> {
    u32::try_from(n).ok().filter(|&n| n <= MAX_JOB_SIZE)
}

/// The deepest NLA tree a job may have. A plan is a nested value (each NLA is sent its
/// subtree), walked recursively when it is encoded and decoded; a deeper tree would also
/// take thousands of sequential launches (a chain of 100,000 hosts over ssh: hours). Shapes
/// that grow this deep (`chain`, `kary:1`) are refused beyond it with a message.
pub const MAX_TREE_DEPTH: usize = 1024;

/// An NLA tree deeper than [`MAX_TREE_DEPTH`]: its shape, its NLAs and its depth.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a {shape} tree of {nlas} NLAs is {depth} levels deep; at most {MAX_TREE_DEPTH} (use --tree \
     greedy, binomial or kary:K)"
)]
pub struct TooDeep {
    pub shape: crate::tree::Shape,
    pub nlas: usize,
    pub depth: usize,
}

impl NodePlan {
    /// The NLA tree of a job: the front end (node 0, no ranks, `local_host`) and one NLA per
    /// entry of `per_node` (nodes 1.., in order), shaped by the launch tree; an error when
    /// it would be deeper than [`MAX_TREE_DEPTH`].
    pub fn tree(
        per_node: Vec<(String, Vec<RankSlot>)>,
        shape: &crate::tree::Shape,
        model: &crate::tree::LaunchModel,
        max_conn: usize,
        local_host: &str,
    ) -> Result<NodePlan, TooDeep> {
        let n_nlas = per_node.len();
        let tree = crate::tree::Tree::build(shape, n_nlas + 1, model);
        let mut nodes: Vec<Option<NodePlan>> = std::iter::once(NodePlan {
            node: 0,
            host: local_host.to_string(),
            ranks: Vec::new(),
            children: Vec::new(),
        })
        .chain(per_node.into_iter().enumerate().map(|(i, (host, ranks))| NodePlan {
            node: i as u32 + 1,
            host,
            ranks,
            children: Vec::new(),
        }))
        .map(Some)
        .collect();
        // The NLA tree follows the launch tree, except that no process holds more than
        // `max_conn` connections (ScELA's bound): where the launch tree fans out wider, the
        // overflow is re-parented under earlier siblings (`CommTree`; identical to the launch
        // tree when nothing exceeds the cap).
        let comm = crate::tree::CommTree::from_launch(&tree, max_conn);
        if comm.depth() > MAX_TREE_DEPTH {
            return Err(TooDeep { shape: shape.clone(), nlas: n_nlas, depth: comm.depth() });
        }
        fn build(
            comm: &crate::tree::CommTree,
            node: usize,
            nodes: &mut [Option<NodePlan>],
        ) -> NodePlan {
            let mut p = nodes[node].take().unwrap_or_else(|| NodePlan {
                node: node as u32,
                host: String::new(),
                ranks: Vec::new(),
                children: Vec::new(),
            });
            p.children = comm.children(node).iter().map(|&c| build(comm, c, nodes)).collect();
            p
        }
        Ok(build(&comm, 0, &mut nodes))
    }

    /// Ranks in this subtree.
    pub fn subtree_ranks(&self) -> usize {
        self.ranks.len() + self.children.iter().map(NodePlan::subtree_ranks).sum::<usize>()
    }

    /// NLAs in this subtree (this one included).
    pub fn subtree_nodes(&self) -> usize {
        1 + self.children.iter().map(NodePlan::subtree_nodes).sum::<usize>()
    }

    /// This node and every node below it, parents before children (pre-order).
    pub fn nodes(&self) -> Vec<&NodePlan> {
        let (mut out, mut stack) = (Vec::new(), vec![self]);
        while let Some(p) = stack.pop() {
            out.push(p);
            stack.extend(p.children.iter().rev());
        }
        out
    }

    /// Is node `node` in this subtree?
    pub fn has_node(&self, node: u32) -> bool {
        self.node == node || self.children.iter().any(|c| c.has_node(node))
    }

    /// Does this subtree run global rank `rank`?
    pub fn has_rank(&self, rank: u32) -> bool {
        self.ranks.iter().any(|r| r.rank == rank) || self.children.iter().any(|c| c.has_rank(rank))
    }

    /// This plan without its children (what a parent keeps about a child it launched).
    pub fn shallow(&self) -> NodePlan {
        NodePlan { children: Vec::new(), ..self.clone() }
    }
}

/// Everything an NLA needs to run its part of the job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeSetup {
    pub job: JobCommon,
    pub plan: NodePlan,
}

/// One command of a spawn request (`MPI_Comm_spawn_multiple` has several).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpawnCmd {
    pub exe: String,
    pub args: Vec<String>,
    pub nprocs: u32,
    /// Pairs to pre-load into the new job's KVS (`PARENT_ROOT_PORT_NAME`, ...).
    pub preput: Vec<(String, String)>,
    /// MPI_Info pairs (`host`, `hosts`, `wdir`, `path`, ...).
    pub info: Vec<(String, String)>,
    /// Variables the caller gives the new ranks on top of the environment they inherit
    /// (PMIx's `pmix_app_t.env`: Open MPI's `OMPI_PARENT_PORT`, ...).
    #[serde(default)]
    pub env: Vec<(String, String)>,
}

/// A rank's spawn request, as it travels up the NLA tree to the front end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpawnRequest {
    /// The calling rank (in its own job) and its executable (whose environment the new
    /// ranks inherit).
    pub rank: u32,
    pub app: u32,
    pub host: String,
    pub cmds: Vec<SpawnCmd>,
}

/// How a rank ended, as the NLA saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RankEnd {
    /// Exited with this code. `finalized`: it completed `PMI_Finalize` (or never spoke PMI).
    Exited { code: i32, clean_pmi: bool },
    /// Killed by this signal number.
    Signaled { signal: i32 },
    /// Could not be started: `errno` and a one-line reason.
    SpawnFailed { errno: i32, reason: String },
}

impl RankEnd {
    /// The exit status a shell would report for this end (128+signal for a signal, 127/126
    /// for a program that could not be executed). A rank that exited 0 between PMI `init` and
    /// `finalize` failed the job all the same: status 1. A rank that could not be started for
    /// want of resources (descriptors, processes, memory) is a launch failure: 255, as for an
    /// NLA that cannot start (Hydra's proxy fails the same way, and `mpiexec.hydra` exits
    /// 255).
    pub fn status(&self) -> i32 {
        match self {
            RankEnd::Exited { code: 0, clean_pmi: false } => 1,
            RankEnd::Exited { code, .. } => *code,
            RankEnd::Signaled { signal } => 128 + signal,
            RankEnd::SpawnFailed { errno, .. } => match *errno {
                errno::ENOENT => 127,
                errno::EAGAIN | errno::ENOMEM | errno::ENFILE | errno::EMFILE => 255,
                _ => 126,
            },
        }
    }

    /// Did the rank end in a way that fails the job?
    pub fn is_failure(&self) -> bool {
        !matches!(self, RankEnd::Exited { code: 0, clean_pmi: true })
    }

    /// The rank's wait status as `waitpid(2)` reports it (what Hydra's `-print-all-exitcodes`
    /// prints): the exit code times 256, or the signal number. A rank that could not be
    /// started counts as having exited with its [`status`](Self::status).
    pub fn wait_status(&self) -> i32 {
        match self {
            RankEnd::Exited { code, .. } => (code & 0xff) << 8,
            RankEnd::Signaled { signal } => signal & 0x7f,
            RankEnd::SpawnFailed { .. } => (self.status() & 0xff) << 8,
        }
    }

    /// The rank ended by `sig`: killed by it, or exited 128 + it, as a shell does when its
    /// child is.
    pub fn by_signal(&self, sig: i32) -> bool {
        match *self {
            RankEnd::Signaled { signal } => signal == sig,
            RankEnd::Exited { code, .. } => code == 128 + sig,
            _ => false,
        }
    }

    /// This end as a wait status for [`combined_status`]: as [`wait_status`](Self::wait_status),
    /// except that a rank that exited 0 without finalizing counts as exit code 1.
    pub fn status_word(&self) -> i32 {
        match self {
            RankEnd::Signaled { .. } => self.wait_status(),
            _ => (self.status() & 0xff) << 8,
        }
    }
}

/// The job's exit status when several ranks failed, by Hydra's rule: the failed ranks' wait
/// statuses (see [`RankEnd::status_word`]) OR'ed together make `word`. If it has signal bits,
/// the status is 128 + those bits (the shell's convention for a signal; `mpiexec.hydra` exits
/// with the bits themselves), otherwise the OR of the exit codes: ranks exiting 3 and 5 make
/// 7, a SIGSEGV (11) and an exit 2 make 139.
pub fn combined_status(word: i32) -> i32 {
    match word & 0x7f {
        0 => (word >> 8) & 0xff,
        sig => 128 + sig,
    }
}

/// The Linux errno values [`RankEnd::status`] tells apart (this crate does without libc).
mod errno {
    pub const ENOENT: i32 = 2;
    pub const EAGAIN: i32 = 11;
    pub const ENOMEM: i32 = 12;
    pub const ENFILE: i32 = 23;
    pub const EMFILE: i32 = 24;
}

/// Process mapping in the explicit-triplet form every MPICH accepts (`docs/spec/pmi-wire.md`
/// §8.1). `runs` is the rank order as (node id, consecutive ranks on it); runs on consecutive
/// node ids with the same count merge into one `(start,n,count)` block. Returns `None` when the
/// value would be too long for MPICH 4.0 clients (> 600 bytes) or the layout is empty; the key
/// is then omitted and MPICH falls back to exchanging hostnames.
pub fn process_mapping(runs: &[(usize, u32)]) -> Option<String> {
    let mut blocks: Vec<(usize, usize, u32)> = Vec::new();
    for &(node, count) in runs.iter().filter(|r| r.1 > 0) {
        match blocks.last_mut() {
            Some((start, n, c)) if *c == count && *start + *n == node => *n += 1,
            _ => blocks.push((node, 1, count)),
        }
    }
    if blocks.is_empty() {
        return None;
    }
    let mut out = String::from("(vector");
    for (start, n, c) in blocks {
        out.push_str(&format!(",({start},{n},{c})"));
    }
    out.push(')');
    (out.len() <= 600).then_some(out)
}

/// A byte count for people: `512 B`, `4 KiB`, `1.2 GiB` (one decimal unless whole).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    let text = format!("{v:.1}");
    let text = text.strip_suffix(".0").unwrap_or(&text);
    format!("{text} {}", UNITS[unit])
}

/// A byte count that does not parse (or does not fit 64 bits): the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected a byte count such as 1048576, 64K, 512M or 1G, got '{0}'")]
pub struct BytesError(pub String);

/// A byte count on the command line: a number, optionally followed by `K`, `M`, `G` or `T`
/// (powers of 1024; `KiB`, `KB`, `k` … are accepted too).
pub fn parse_bytes(s: &str) -> Result<u64, BytesError> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || BytesError(s.to_string());
    let n: u64 = num.parse().map_err(|_| bad())?;
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(bad()),
    };
    n.checked_mul(1u64 << shift).ok_or_else(bad)
}

/// The KVS names of a job's process groups, in Hydra's form `kvs_<pid>_<group>_<random>_<host>`:
/// unique across jobs (the random part: MPICH names its shared-memory segments after the
/// kvsname, and a name that repeats after pid reuse reopens a stale segment) and across hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvsNames {
    pid: u32,
    random: u32,
    host: String,
}

impl KvsNames {
    /// The host part keeps only letters, digits, `-` and `.` (at most 64 of them), so that
    /// a name never needs quoting in PMI and stays far below PMI-1's `kvsname_max` (256).
    pub fn new(pid: u32, random: u32, host: &str) -> Self {
        let host: String = host
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
            .take(64)
            .collect();
        KvsNames { pid, random, host: if host.is_empty() { "localhost".into() } else { host } }
    }

    /// The kvsname of process group `group` (0: the job itself, then one per spawn).
    pub fn name(&self, group: usize) -> String {
        format!("kvs_{}_{group}_{}_{}", self.pid, self.random, self.host)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whole entries only for names that are not UTF-8, and never an outer job's PMI ones.
    #[test]
    fn raw_entries() {
        use std::os::unix::ffi::OsStrExt as _;
        fn os(b: &[u8]) -> &std::ffi::OsStr {
            std::ffi::OsStr::from_bytes(b)
        }
        let e = raw_entry(os(b"N\xe9"), os(b"v\xfe=w")).expect("an entry");
        assert_eq!(e.as_bytes(), b"N\xe9=v\xfe=w");
        assert_eq!(raw_entry(os(b"N"), os(b"v")), None, "a UTF-8 name goes by name");
        assert_eq!(raw_entry(os(b"PMI_\xff"), os(b"1")), None);
        assert_eq!(raw_entry(os(b"PMIX_\xff"), os(b"1")), None);
    }

    /// A child's setup carries the hostfile's per-host settings of its own subtree only.
    #[test]
    fn setup_of_a_subtree_keeps_its_own_hosts() {
        let node = |node: u32, host: &str, children| NodePlan {
            node,
            host: host.into(),
            ranks: vec![RankSlot { rank: node - 1, app: 0 }],
            children,
        };
        let n2 = node(2, "n2", vec![node(4, "n4", vec![])]);
        let n3 = node(3, "n3", vec![]);
        let hosts = ["n1", "n2", "n3", "n4"];
        let job = JobCommon {
            size: 4,
            universe_size: 4,
            kvsname: "k".into(),
            preput: vec![],
            apps: vec![AppSpec {
                exe: "a".into(),
                args: vec![],
                nprocs: 4,
                env: vec![],
                wdir: None,
                agent_env: false,
                raw_env: Vec::new(),
            }],
            launcher: LauncherSpec {
                users: hosts.iter().map(|h| (h.to_string(), format!("u{h}"))).collect(),
                ..LauncherSpec::new(LauncherKind::Ssh, "/x")
            },
            kill_grace_ms: 1,
            launch_timeout_ms: 1,
            launch_batch: None,
            kvs_push_max: 1,
            kvs_max: 1,
            report: false,
            pmgr: None,
            verbose: false,
            binding: libi_binding::Binding {
                bind: libi_binding::parse_bind("core").unwrap(),
                map: None,
                mem: None,
                hosts: (hosts.iter())
                    .map(|h| (h.to_string(), libi_binding::parse_bind("hwthread").unwrap()))
                    .collect(),
                report: false,
            },
            spawned_by: None,
            singleton: None,
            each_end: false,
            staged: Vec::new(),
            gpus: GpuSplit::default(),
            pmix: None,
        };
        let sub = job.for_subtree(&n2);
        let users: Vec<_> =
            sub.launcher.users.iter().map(|(h, u)| (h.as_str(), u.as_str())).collect();
        assert_eq!(users, [("n2", "un2"), ("n4", "un4")]);
        let bound: Vec<_> = sub.binding.hosts.iter().map(|(h, _)| h.as_str()).collect();
        assert_eq!(bound, ["n2", "n4"]);
        assert_eq!(sub.binding.on_host("n4").bind, libi_binding::parse_bind("hwthread").unwrap());
        assert_eq!(sub.binding.on_host("n1").bind, libi_binding::parse_bind("core").unwrap());
        let sub = job.for_subtree(&n3);
        assert_eq!(sub.launcher.user("n3"), Some("un3"));
        assert_eq!(sub.launcher.user("n2"), None);
        // Everything else is the job's.
        assert_eq!(
            JobCommon { launcher: job.launcher.clone(), binding: job.binding.clone(), ..sub },
            job
        );
    }

    #[test]
    fn byte_counts() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1 << 30), "1 GiB");
        assert_eq!(human_bytes(1288490189), "1.2 GiB");
        assert_eq!(human_bytes(300 << 20), "300 MiB");
        assert_eq!(parse_bytes("1048576"), Ok(1 << 20));
        assert_eq!(parse_bytes("64K"), Ok(64 << 10));
        assert_eq!(parse_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("1g"), Ok(1 << 30));
        assert!(parse_bytes("").is_err());
        assert!(parse_bytes("1.5G").is_err());
        assert!(parse_bytes("-1").is_err());
        assert!(parse_bytes("99999999999999999999").is_err());
        assert!(parse_bytes("20000000000T").is_err());
    }

    #[test]
    fn mapping_single_node() {
        assert_eq!(process_mapping(&[(0, 4)]).as_deref(), Some("(vector,(0,1,4))"));
    }

    #[test]
    fn mapping_blocks_merge() {
        let runs = [(0, 2), (1, 2), (2, 4), (3, 4), (4, 1)];
        assert_eq!(process_mapping(&runs).as_deref(), Some("(vector,(0,2,2),(2,2,4),(4,1,1))"));
    }

    #[test]
    fn mapping_wraps_explicitly() {
        // 6 ranks over two 2-slot hosts: 0,1 -> node 0; 2,3 -> node 1; 4,5 -> node 0 again
        let runs = [(0, 2), (1, 2), (0, 2)];
        assert_eq!(process_mapping(&runs).as_deref(), Some("(vector,(0,2,2),(0,1,2))"));
    }

    #[test]
    fn mapping_empty_layout() {
        assert_eq!(process_mapping(&[]), None);
        assert_eq!(process_mapping(&[(0, 0)]), None);
    }

    #[test]
    fn mapping_too_long_is_omitted() {
        let v: Vec<(usize, u32)> = (1..200).map(|i| (i, i as u32)).collect();
        assert_eq!(process_mapping(&v), None);
    }

    #[test]
    fn nodes_in_pre_order() {
        let n = |node: u32, children: Vec<NodePlan>| NodePlan {
            node,
            host: format!("h{node}"),
            ranks: vec![],
            children,
        };
        let t = n(0, vec![n(1, vec![n(3, vec![]), n(4, vec![])]), n(2, vec![n(5, vec![])])]);
        let order: Vec<u32> = t.nodes().iter().map(|p| p.node).collect();
        assert_eq!(order, vec![0, 1, 3, 4, 2, 5]);
    }

    #[test]
    fn combining_failures() {
        let word = |ends: &[RankEnd]| ends.iter().fold(0, |w, e| w | e.status_word());
        let exit = |code| RankEnd::Exited { code, clean_pmi: true };
        let sig = |signal| RankEnd::Signaled { signal };
        assert_eq!(combined_status(word(&[exit(3), exit(5)])), 7);
        assert_eq!(combined_status(word(&[exit(1), exit(2), exit(4)])), 7);
        assert_eq!(combined_status(word(&[sig(11), exit(2)])), 139);
        assert_eq!(combined_status(word(&[sig(11), exit(4)])), 139);
        assert_eq!(combined_status(word(&[sig(11), sig(6)])), 128 + 15);
        assert_eq!(combined_status(word(&[exit(3)])), 3);
        assert_eq!(combined_status(word(&[sig(9)])), 137);
        // exit 0 without finalize fails as 1
        assert_eq!(combined_status(word(&[RankEnd::Exited { code: 0, clean_pmi: false }])), 1);
        assert_eq!(RankEnd::Exited { code: 0, clean_pmi: false }.wait_status(), 0);
        assert_eq!(exit(3).wait_status(), 768);
        assert_eq!(sig(11).wait_status(), 11);
        let e = RankEnd::SpawnFailed { errno: 2, reason: "x".into() };
        assert_eq!(e.wait_status(), 127 << 8);
        // a single failure keeps its own status
        for e in [exit(3), sig(11), RankEnd::SpawnFailed { errno: 24, reason: "x".into() }] {
            assert_eq!(combined_status(e.status_word()), e.status(), "{e:?}");
        }
    }

    #[test]
    fn rank_end_status() {
        assert_eq!(RankEnd::Signaled { signal: 11 }.status(), 139);
        assert_eq!(RankEnd::Exited { code: 3, clean_pmi: true }.status(), 3);
        assert!(RankEnd::Exited { code: 0, clean_pmi: false }.is_failure());
        assert_eq!(RankEnd::Exited { code: 0, clean_pmi: false }.status(), 1);
        assert!(!RankEnd::Exited { code: 0, clean_pmi: true }.is_failure());
        let e = RankEnd::SpawnFailed { errno: 2, reason: "x".into() };
        assert_eq!(e.status(), 127);
        let e = RankEnd::SpawnFailed { errno: 13, reason: "x".into() };
        assert_eq!(e.status(), 126);
        for errno in [11, 12, 23, 24] {
            let e = RankEnd::SpawnFailed { errno, reason: "x".into() };
            assert_eq!(e.status(), 255, "errno {errno}");
        }
    }
}

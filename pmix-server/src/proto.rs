//! The messages between an agent and its PMIx companion (`docs/spec/pmix-companion.md`).
//!
//! The agent sends [`ToCompanion`], the companion [`FromCompanion`], each as one frame
//! ([`crate::frame`]). Requests the companion starts (an upcall of libpmix: a fence, a
//! direct modex, a name-service call, a spawn, an abort, a finalize) carry an `id` unique in
//! that companion; the agent answers each exactly once with a message carrying the same id,
//! and until it does, the rank that caused it waits. Requests the agent starts carry the
//! agent's own id where an answer must be matched ([`ToCompanion::DmodexRequest`]), or are
//! answered per namespace and rank.
//!
//! Statuses are PMIx status codes (`pmix_status_t`); the ones the agent needs are in
//! [`status`].

use serde::{Deserialize, Serialize};

/// A PMIx status code: 0 is success, negative values are PMIx's errors and events.
pub type Status = i32;

/// The PMIx status codes the agent uses (values of OpenPMIx's `pmix_common.h`; the binary's
/// unit test checks them against the header).
pub mod status {
    use super::Status;
    /// `PMIX_SUCCESS`.
    pub const SUCCESS: Status = 0;
    /// `PMIX_ERROR`: a general error.
    pub const ERROR: Status = -1;
    /// `PMIX_ERR_PROC_ABORTED`: a process aborted (event code).
    pub const ERR_PROC_ABORTED: Status = -7;
    /// `PMIX_ERR_TIMEOUT`.
    pub const ERR_TIMEOUT: Status = -24;
    /// `PMIX_ERR_UNREACH`: the process or node cannot be reached.
    pub const ERR_UNREACH: Status = -25;
    /// `PMIX_ERR_BAD_PARAM`.
    pub const ERR_BAD_PARAM: Status = -27;
    /// `PMIX_ERR_NOT_FOUND`: a lookup or a direct modex found nothing.
    pub const ERR_NOT_FOUND: Status = -46;
    /// `PMIX_ERR_NOT_SUPPORTED`.
    pub const ERR_NOT_SUPPORTED: Status = -47;
    /// `PMIX_ERR_LOST_CONNECTION`.
    pub const ERR_LOST_CONNECTION: Status = -61;
    /// `PMIX_PROC_TERMINATED`: a process ended (event code).
    pub const PROC_TERMINATED: Status = -111;
    /// `PMIX_ERR_PROC_TERM_WO_SYNC`: a process ended without finalizing (event code).
    pub const ERR_PROC_TERM_WO_SYNC: Status = -200;
    /// `PMIX_EVENT_PROC_TERMINATED` (event code).
    pub const EVENT_PROC_TERMINATED: Status = -201;
    /// `PMIX_EVENT_NODE_DOWN`: a node was lost (event code).
    pub const EVENT_NODE_DOWN: Status = -231;
}

/// `PMIX_RANK_WILDCARD`: every rank of a namespace (in [`Proc::rank`]).
pub const RANK_WILDCARD: u32 = u32::MAX - 1;

/// [`NspaceInfo::this_node`] of a namespace with no ranks on this node (another job's,
/// registered after a connect so that its ranks can be found).
pub const REMOTE_NODE: u32 = u32::MAX;

/// Longest namespace PMIx holds (`PMIX_MAX_NSLEN`); a longer one is refused.
pub const MAX_NSLEN: usize = 255;

/// A process: its namespace (libi's kvsname of the job) and its rank in it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Proc {
    pub nspace: String,
    /// The rank, or [`RANK_WILDCARD`] for every rank of the namespace.
    pub rank: u32,
}

/// An application (one executable of an MPMD command line). Ranks are numbered application
/// by application: application `i` has the `size` ranks after those of applications `0..i`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppInfo {
    pub size: u32,
    /// The ranks' initial working directory.
    pub wdir: Option<String>,
}

/// A node of the job: its host name and the ranks it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub host: String,
    pub ranks: Vec<u32>,
}

/// A rank of this node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalProc {
    pub rank: u32,
    /// Its index among this job's ranks on this node (`PMIX_LOCAL_RANK`).
    pub local_rank: u16,
    /// Its index among all ranks on this node, of every job (`PMIX_NODE_RANK`).
    pub node_rank: u16,
    /// The CPUs it is bound to, as a list like `0-3,8` (`None`: not bound). The companion
    /// turns it into `PMIX_CPUSET` and `PMIX_LOCALITY_STRING`.
    pub cpus: Option<String>,
}

/// Everything a node's companion registers for one namespace (a job, or a spawned group).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NspaceInfo {
    pub nspace: String,
    /// Ranks in the job.
    pub size: u32,
    /// `PMIX_UNIV_SIZE` (MPI's universe size).
    pub universe: u32,
    /// In rank order; their sizes add up to `size`.
    pub apps: Vec<AppInfo>,
    /// Every node with ranks of the job; a node's id (`PMIX_NODEID`) is its index here.
    pub nodes: Vec<NodeInfo>,
    /// This node's index in `nodes`, or [`REMOTE_NODE`]: the namespace has no ranks here
    /// (`local` is then empty, and `tmpdir` is not used).
    pub this_node: u32,
    /// This node's ranks: the ranks of `nodes[this_node]`, each once.
    pub local: Vec<LocalProc>,
    /// The job's top session directory (`PMIX_TMPDIR`): the companion creates the
    /// namespace's directory (`PMIX_NSDIR`) and one per local rank (`PMIX_PROCDIR`) below
    /// it, and removes them when the namespace is deregistered.
    pub tmpdir: String,
    /// The rank that spawned this namespace (`PMIX_PARENT_ID`), if it was spawned.
    pub parent: Option<Proc>,
    /// More ranks than cores on this node (`PMIX_NODE_OVERSUBSCRIBED`).
    pub oversubscribed: bool,
}

/// One application of a spawn request, as the calling rank gave it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpawnApp {
    pub cmd: String,
    pub argv: Vec<String>,
    /// `NAME=VALUE` entries to add to the new ranks' environment.
    pub env: Vec<String>,
    pub cwd: Option<String>,
    pub maxprocs: i32,
    /// The application's directives (key, value written as text).
    pub info: Vec<(String, String)>,
}

/// A published name as a lookup returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Published {
    pub key: String,
    pub value: String,
    /// The process that published it.
    pub publisher: Proc,
}

/// Agent → companion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToCompanion {
    /// Register a namespace and its job-level information (answered with
    /// [`FromCompanion::Registered`]). [`ToCompanion::SetupFork`]s for it may follow at once:
    /// the companion holds them until the registration completed.
    RegisterNspace(Box<NspaceInfo>),
    /// Drop a namespace whose ranks here all ended (answered with
    /// [`FromCompanion::Deregistered`]); its session directories are removed.
    DeregisterNspace { nspace: String },
    /// Prepare these local ranks of a registered namespace for their start: one
    /// [`FromCompanion::ForkEnv`] per rank, sent once the rank is registered as a client, so
    /// the agent may fork it as soon as it has its environment.
    SetupFork { nspace: String, ranks: Vec<u32> },
    /// Answer to [`FromCompanion::Fence`]: the fence completed everywhere. `blob` is the
    /// concatenation, in any order, of the `blob`s of every companion's `Fence` for it
    /// (empty when the fence did not collect data).
    FenceDone {
        id: u64,
        status: Status,
        #[serde(with = "serde_bytes")]
        blob: Vec<u8>,
    },
    /// Another node's companion asked for a rank of this node ([`FromCompanion::DirectModex`]):
    /// get its data from the local server (answered with [`FromCompanion::DmodexData`] with
    /// the same `id`, the agent's).
    DmodexRequest { id: u64, proc: Proc },
    /// Answer to [`FromCompanion::DirectModex`]: the `blob` of a [`FromCompanion::DmodexData`]
    /// from the node that holds the rank, and its status.
    ModexData {
        id: u64,
        status: Status,
        #[serde(with = "serde_bytes")]
        blob: Vec<u8>,
    },
    /// Answer to a request that returns only a status: [`FromCompanion::Publish`],
    /// [`FromCompanion::Unpublish`], [`FromCompanion::Abort`],
    /// [`FromCompanion::ClientFinalized`], [`FromCompanion::Connect`],
    /// [`FromCompanion::Disconnect`].
    Done { id: u64, status: Status },
    /// Answer to [`FromCompanion::Group`]: the context id when one was asked for.
    GroupDone { id: u64, status: Status, ctxid: Option<u64> },
    /// Answer to [`FromCompanion::Lookup`].
    LookupResult { id: u64, status: Status, found: Vec<Published> },
    /// Answer to [`FromCompanion::Spawn`]: the new namespace once its ranks run (and are
    /// registered on every node that runs them), or an error status.
    SpawnResult { id: u64, status: Status, nspace: Option<String> },
    /// Tell the local ranks about an event, such as a lost rank
    /// ([`status::ERR_PROC_ABORTED`], [`status::ERR_PROC_TERM_WO_SYNC`]) or a lost node
    /// ([`status::EVENT_NODE_DOWN`], with its `host`). `affected`: the processes it is about.
    /// The event goes to the ranks of `nspace` (PMIx's namespace range).
    Notify {
        code: Status,
        nspace: String,
        affected: Vec<Proc>,
        host: Option<String>,
        exit_code: Option<i32>,
    },
    /// Finalize the server and exit (answered with [`FromCompanion::Bye`]). An EOF on the
    /// socket does the same, without the answer.
    Finalize,
}

/// Companion → agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum FromCompanion {
    /// The server is up (first message). `version`: libpmix's version string.
    Ready { pid: u32, version: String, tmpdir: String },
    /// Answer to [`ToCompanion::RegisterNspace`].
    Registered { nspace: String, status: Status },
    /// Answer to [`ToCompanion::DeregisterNspace`].
    Deregistered { nspace: String },
    /// Answer to [`ToCompanion::SetupFork`], per rank: the variables to add to its
    /// environment (on success the rank is registered and may be started).
    ForkEnv { nspace: String, rank: u32, status: Status, env: Vec<(String, String)> },
    /// A local rank connected to the server (in its `PMIx_Init`). Needs no answer.
    ClientConnected { proc: Proc },
    /// A local rank called `PMIx_Finalize`; it waits for [`ToCompanion::Done`] (so the agent
    /// has recorded the finalize before the rank can exit).
    ClientFinalized { id: u64, proc: Proc },
    /// Every local participant of a fence entered it. `procs`: the participants (a
    /// [`RANK_WILDCARD`] rank stands for all ranks of its namespace); `collect`: the ranks
    /// asked for the data (`PMIX_COLLECT_DATA`); `blob`: this node's contribution, opaque.
    /// Answered with [`ToCompanion::FenceDone`] once every node with participants entered.
    Fence {
        id: u64,
        procs: Vec<Proc>,
        collect: bool,
        /// `PMIX_TIMEOUT` in seconds, if the ranks gave one.
        timeout: Option<u32>,
        #[serde(with = "serde_bytes")]
        blob: Vec<u8>,
    },
    /// A local rank wants the data of `proc`, which runs on another node: the agent asks
    /// that node's companion ([`ToCompanion::DmodexRequest`]) and answers with
    /// [`ToCompanion::ModexData`].
    DirectModex { id: u64, proc: Proc },
    /// Answer to [`ToCompanion::DmodexRequest`].
    DmodexData {
        id: u64,
        status: Status,
        #[serde(with = "serde_bytes")]
        blob: Vec<u8>,
    },
    /// `PMIx_Publish` (`MPI_Publish_name`): answered with [`ToCompanion::Done`]. `range`: the
    /// PMIx data range asked for (0 when none was).
    Publish { id: u64, proc: Proc, range: u8, pairs: Vec<(String, String)> },
    /// `PMIx_Lookup` (`MPI_Lookup_name`): answered with [`ToCompanion::LookupResult`].
    /// `wait`: the rank asked to wait until the keys are published (`PMIX_WAIT`).
    Lookup { id: u64, proc: Proc, keys: Vec<String>, wait: bool },
    /// `PMIx_Unpublish`: answered with [`ToCompanion::Done`].
    Unpublish { id: u64, proc: Proc, keys: Vec<String> },
    /// `PMIx_Connect` (`MPI_Comm_spawn`, `MPI_Comm_connect`/`accept`): every local
    /// participant called it; `procs` are all participants (of every namespace; a
    /// [`RANK_WILDCARD`] rank stands for all of its namespace). Answered with
    /// [`ToCompanion::Done`] once every participant's server connected.
    Connect { id: u64, procs: Vec<Proc> },
    /// `PMIx_Disconnect` (`MPI_Comm_disconnect`), as [`FromCompanion::Connect`].
    Disconnect { id: u64, procs: Vec<Proc> },
    /// `PMIx_Group_construct` (`construct`) or `PMIx_Group_destruct` of group `grp` (Open
    /// MPI makes the communicator of a spawn or a connect this way): every local member
    /// called it; `procs` are all members. `assign_ctxid`: the members asked for a context
    /// id, unique to the group. Answered with [`ToCompanion::GroupDone`] once every
    /// member's server called it.
    Group { id: u64, construct: bool, grp: String, procs: Vec<Proc>, assign_ctxid: bool },
    /// `PMIx_Spawn` (`MPI_Comm_spawn`): answered with [`ToCompanion::SpawnResult`].
    Spawn { id: u64, proc: Proc, apps: Vec<SpawnApp>, job_info: Vec<(String, String)> },
    /// `PMIx_Abort` (`MPI_Abort`): `procs` are the processes to end (empty: the caller's
    /// whole namespace). Answered with [`ToCompanion::Done`], which lets the rank go on
    /// (Open MPI's ranks then exit with `status`).
    Abort { id: u64, proc: Proc, status: i32, message: String, procs: Vec<Proc> },
    /// Something the agent should report (a request it sent could not be served, libpmix
    /// said something unexpected).
    Warning { message: String },
    /// Answer to [`ToCompanion::Finalize`]: the server is finalized, the process exits.
    Bye,
}

impl FromCompanion {
    /// The message in one short line for a log: its kind, its id and, for a fence, whether
    /// it collects data and its blob's length (not the bytes).
    pub fn brief(&self) -> String {
        match self {
            FromCompanion::Fence { id, procs, collect, blob, .. } => {
                format!("Fence id={id} procs={} collect={collect} blob={}", procs.len(), blob.len())
            }
            FromCompanion::DmodexData { id, blob, .. } => {
                format!("DmodexData id={id} blob={}", blob.len())
            }
            FromCompanion::ClientConnected { proc } => {
                format!("ClientConnected rank={}", proc.rank)
            }
            FromCompanion::ClientFinalized { id, proc } => {
                format!("ClientFinalized id={id} rank={}", proc.rank)
            }
            FromCompanion::DirectModex { id, proc } => {
                format!("DirectModex id={id} rank={}", proc.rank)
            }
            other => {
                let d = format!("{other:?}");
                d.chars().take(120).collect()
            }
        }
    }
}

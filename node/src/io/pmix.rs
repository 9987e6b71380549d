//! The agent's PMIx companion (`libi-pmix`): start it, register the job, get each local
//! rank's environment, then move its messages (`docs/spec/pmix-companion.md`).
//!
//! The companion is a child process of the agent on a socketpair (its stdin). Before the
//! first rank starts, [`Companion::start`] waits (bounded by [`PMIX_START`]) for its
//! `Ready`, its `Registered` and one `ForkEnv` per local rank: the ranks cannot start
//! without the environment that names the server. From then on a reader task turns its
//! frames into events for the loop and a writer task sends what the core says; neither
//! waits inside the loop. What the messages mean is the node core's
//! ([`crate::proto::node::NodeCore::pmix_msg`]).

use crate::proto::node::limits::PMIX_START;
use libi::job::JobCommon;
use libi::job::NodePlan;
use libi_pmix::frame::{encode, FrameReader};
use libi_pmix::proto::{
    status, AppInfo, FromCompanion, LocalProc, NodeInfo, NspaceInfo, ToCompanion,
};
use std::os::fd::OwnedFd;
use std::process::Stdio;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};

/// The companion's program: `LIBI_PMIX`, else `libi-pmix` beside this agent's own
/// executable, else `libi-pmix` on the `PATH`.
fn program() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("LIBI_PMIX") {
        return p.into();
    }
    if let Some(dir) = std::env::current_exe().ok().and_then(|e| e.parent().map(|d| d.to_owned())) {
        let beside = dir.join("libi-pmix");
        if beside.exists() {
            return beside;
        }
    }
    "libi-pmix".into()
}

/// Each local rank's variables from the PMIx server (by local rank): `NAME`, value.
pub type RankEnvs = Vec<Vec<(String, String)>>;

/// A running companion, after the job was registered.
pub struct Companion {
    child: tokio::process::Child,
    pid: u32,
    /// The server's own directory (its rendezvous files), removed by it when it ends well,
    /// and by us when it did not.
    tmpdir: std::path::PathBuf,
    /// Frames for the writer task (a non-blocking enqueue; `None` once it ended).
    to: Option<UnboundedSender<Vec<u8>>>,
    /// The reader half until the loop takes it ([`Companion::take_reader`]).
    reader: Option<(OwnedReadHalf, FrameReader)>,
    writer: Option<tokio::task::JoinHandle<OwnedWriteHalf>>,
}

/// What a companion's reader reports to the loop.
#[derive(Debug)]
pub enum PmixEvent {
    Msg(FromCompanion),
    /// The companion closed its end (or wrote garbage): `bye` whether it said `Bye` first.
    Gone {
        why: String,
        bye: bool,
    },
}

/// The namespace a node registers, from the job and this node's plan.
/// `cpus`: each local rank's CPUs if it is bound (`-bind-to`), in the kernel's list syntax.
pub fn nspace_info(
    job: &JobCommon,
    plan: &NodePlan,
    tmpdir: &str,
    cpus: &[Option<String>],
) -> Result<NspaceInfo, String> {
    let map = job.pmix.as_ref().ok_or("the job serves no PMIx")?;
    let first = plan.ranks.first().map(|r| r.rank).ok_or("no ranks on this node")?;
    let this_node = map
        .nodes
        .iter()
        .position(|(_, ranks)| ranks.contains(&first))
        .ok_or_else(|| format!("rank {first} is on no node of the job's PMIx map"))?;
    let online = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    Ok(NspaceInfo {
        nspace: job.kvsname.clone(),
        size: job.size,
        universe: u32::try_from(job.universe_size).unwrap_or(job.size).max(job.size),
        apps: job
            .apps
            .iter()
            .map(|a| AppInfo {
                size: a.nprocs,
                wdir: a.wdir.as_ref().map(|w| w.to_string_lossy().into_owned()),
            })
            .collect(),
        nodes: map
            .nodes
            .iter()
            .map(|(host, ranks)| NodeInfo { host: host.clone(), ranks: ranks.clone() })
            .collect(),
        this_node: this_node as u32,
        local: plan
            .ranks
            .iter()
            .enumerate()
            .map(|(i, r)| LocalProc {
                rank: r.rank,
                local_rank: i as u16,
                node_rank: i as u16,
                cpus: cpus.get(i).cloned().flatten(),
            })
            .collect(),
        tmpdir: tmpdir.to_string(),
        parent: map
            .parent
            .as_ref()
            .map(|(nspace, rank)| libi_pmix::proto::Proc { nspace: nspace.clone(), rank: *rank }),
        oversubscribed: plan.ranks.len() > online,
    })
}

impl Companion {
    /// Start the companion for this node's ranks, register the job and get each local
    /// rank's environment (by local index). The error is the one line the job fails with.
    /// `cpus` as [`nspace_info`]'s. `topology`: this node's hwloc XML file, if written
    /// (`proc::hwloc`): the server loads it instead of discovering the node (its PCI
    /// devices' configuration space above all, most of a server's start).
    pub async fn start(
        job: &JobCommon,
        plan: &NodePlan,
        cpus: &[Option<String>],
        topology: Option<&str>,
    ) -> Result<(Companion, RankEnvs), String> {
        let host = &plan.host;
        let starting = Self::start_inner(job, plan, cpus, topology);
        match tokio::time::timeout(PMIX_START, starting).await {
            Ok(r) => r.map_err(|e| format!("cannot start the PMIx server on {host}: {e}")),
            Err(_) => Err(format!(
                "the PMIx server on {host} did not start within {} s",
                PMIX_START.as_secs()
            )),
        }
    }

    async fn start_inner(
        job: &JobCommon,
        plan: &NodePlan,
        cpus: &[Option<String>],
        topology: Option<&str>,
    ) -> Result<(Companion, RankEnvs), String> {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().map_err(|e| e.to_string())?;
        ours.set_nonblocking(true).map_err(|e| e.to_string())?;
        let prog = program();
        let mut cmd = tokio::process::Command::new(&prog);
        cmd.args(["--host", &plan.host])
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            // Its own process group: a ^C for the job is the ranks' (the companion ends
            // when the agent finalizes it or closes the socket).
            .process_group(0)
            .kill_on_drop(true);
        if let Some(t) = topology.filter(|_| std::env::var_os(TOPO_FILE).is_none()) {
            cmd.env(TOPO_FILE, t);
        }
        // Claimed: reaped by its waiter here, not by the orphan reaper.
        let mut child = crate::proc::reaper::spawn_claimed(&mut cmd)
            .map_err(|e| format!("{}: {e}", prog.display()))?;
        let pid = child.id().unwrap_or(0);
        let stream = UnixStream::from_std(ours).map_err(|e| e.to_string())?;
        let (mut rd, mut wr) = stream.into_split();
        let mut frames = FrameReader::new();
        let tmpdir = match read_one(&mut rd, &mut frames).await? {
            Some(FromCompanion::Ready { tmpdir, .. }) => tmpdir,
            Some(other) => return Err(format!("its first message was {other:?}")),
            None => {
                let st = child.wait().await.map_err(|e| e.to_string())?;
                crate::proc::reaper::release(pid as i32);
                return Err(format!("it ended ({st}) before it was ready"));
            }
        };
        let info = nspace_info(job, plan, &tmpdir, cpus)?;
        let nspace = info.nspace.clone();
        let ranks: Vec<u32> = plan.ranks.iter().map(|r| r.rank).collect();
        for m in [
            ToCompanion::RegisterNspace(Box::new(info)),
            ToCompanion::SetupFork { nspace, ranks: ranks.clone() },
        ] {
            let f = encode(&m).map_err(|e| e.to_string())?;
            wr.write_all(&f).await.map_err(|e| e.to_string())?;
        }
        let mut envs: Vec<Option<Vec<(String, String)>>> = vec![None; ranks.len()];
        let mut registered = false;
        let mut left = ranks.len();
        while !registered || left > 0 {
            match read_one(&mut rd, &mut frames).await? {
                Some(FromCompanion::Registered { status: s, .. }) if s == status::SUCCESS => {
                    registered = true
                }
                Some(FromCompanion::Registered { status: s, .. }) => {
                    return Err(format!("the job's registration failed (PMIx status {s})"))
                }
                Some(FromCompanion::ForkEnv { rank, status: s, env, .. }) => {
                    if s != status::SUCCESS {
                        return Err(format!("rank {rank}'s setup failed (PMIx status {s})"));
                    }
                    let Some(local) = ranks.iter().position(|&r| r == rank) else {
                        return Err(format!("an environment for rank {rank}, not of this node"));
                    };
                    if envs[local].replace(env).is_none() {
                        left -= 1;
                    }
                }
                Some(FromCompanion::Warning { message }) => return Err(message),
                Some(other) => return Err(format!("unexpected before the start: {other:?}")),
                None => return Err("it closed the connection during the job's registration".into()),
            }
        }
        let (tx, mut rx) = unbounded_channel::<Vec<u8>>();
        let writer = tokio::spawn(async move {
            while let Some(f) = rx.recv().await {
                if wr.write_all(&f).await.is_err() {
                    break;
                }
            }
            wr
        });
        let envs = envs.into_iter().map(Option::unwrap_or_default).collect();
        let c = Companion {
            child,
            pid,
            tmpdir: tmpdir.into(),
            to: Some(tx),
            reader: Some((rd, frames)),
            writer: Some(writer),
        };
        Ok((c, envs))
    }

    /// The companion's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Queue a message (never waits). An error only if it cannot be encoded or the writer
    /// ended (the companion is gone, which its reader reports).
    pub fn send(&self, msg: &ToCompanion) -> Result<(), String> {
        if tracing::enabled!(tracing::Level::DEBUG) {
            let text = format!("{msg:?}");
            tracing::debug!("to the PMIx server: {}", text.get(..200).unwrap_or(&text));
        }
        let f = encode(msg).map_err(|e| e.to_string())?;
        match &self.to {
            Some(tx) => tx.send(f).map_err(|_| "the PMIx server's connection is closed".into()),
            None => Err("the PMIx server was finalized".into()),
        }
    }

    /// Start the reader task: each message, and the end, goes to `ev`.
    pub fn spawn_reader(&mut self, ev: impl Fn(PmixEvent) -> bool + Send + 'static) {
        let Some((mut rd, mut frames)) = self.reader.take() else { return };
        tokio::spawn(async move {
            let mut bye = false;
            let why = loop {
                match read_one(&mut rd, &mut frames).await {
                    Ok(Some(FromCompanion::Bye)) => bye = true,
                    Ok(Some(m)) => {
                        if !ev(PmixEvent::Msg(m)) {
                            return;
                        }
                    }
                    Ok(None) => break "it closed the connection".to_string(),
                    Err(e) => break e,
                }
            };
            let _ = ev(PmixEvent::Gone { why, bye });
        });
    }

    /// Finalize the server and wait (bounded) for it to exit; killed if it does not.
    pub async fn finish(mut self) {
        let _ = self.send(&ToCompanion::Finalize);
        self.to = None;
        if let Some(w) = self.writer.take() {
            let _ = tokio::time::timeout(PMIX_START, w).await;
        }
        if tokio::time::timeout(PMIX_START, self.child.wait()).await.is_err() {
            let _ = self.child.start_kill();
            let _ = self.child.wait().await;
        }
        crate::proc::reaper::release(self.pid as i32);
        remove_own_dir(&self.tmpdir);
    }
}

/// libpmix's setting for a topology file to load instead of discovering the node.
const TOPO_FILE: &str = "PMIX_MCA_pmix_hwloc_topo_file";

/// Removes what a companion that did not end well left of its directory: only a real
/// directory of ours named as the companion names it.
fn remove_own_dir(dir: &std::path::Path) {
    use std::os::unix::fs::MetadataExt;
    let named = dir.file_name().is_some_and(|n| n.to_string_lossy().starts_with("libi-pmix."));
    let ours = std::fs::symlink_metadata(dir)
        .is_ok_and(|m| m.is_dir() && m.uid() == nix::unistd::getuid().as_raw());
    if named && ours {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The next message of the companion (`None`: it closed the connection between frames).
async fn read_one(
    rd: &mut OwnedReadHalf,
    frames: &mut FrameReader,
) -> Result<Option<FromCompanion>, String> {
    let mut buf = [0u8; 64 << 10];
    loop {
        if let Some(m) = frames.next_frame::<FromCompanion>().map_err(|e| e.to_string())? {
            return Ok(Some(m));
        }
        let n = rd.read(&mut buf).await.map_err(|e| e.to_string())?;
        if n == 0 {
            if frames.pending() > 0 {
                return Err("it closed the connection in the middle of a message".into());
            }
            return Ok(None);
        }
        frames.push(&buf[..n]);
    }
}

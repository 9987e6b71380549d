//! This node's hwloc topology file for MPICH's ranks (`PMI_hwloc_xmlfile`): found in the
//! user's cache ([`libi_hwloc_xml`]) at once, or written by hwloc's tool while the ranks
//! start (MPICH's `MPI_Init` asks for it well after; a rank that asks earlier waits for
//! it, as under Hydra, whose proxy discovers the topology when first asked). The tool is a
//! claimed child of the NLA: waited for, given a bounded time ([`TOOL_LIMIT`]), and
//! killed and reaped if it overstays, or if the job ends first and it takes longer still.

use crate::proc::reaper;
use crate::proto::node::NodeCore;
use libi::job::JobCommon;
use libi_hwloc_xml::{disabled, Cache, Skip, STEERING, TOOL_ARGS, TOOL_LIMIT};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

/// How long the end of a job waits for a tool still writing the file (so that the next
/// job finds it) before it is killed.
pub const AT_END: Duration = Duration::from_secs(1);

/// The tool at work: its pid (claimed) and temporary file, and the task that waits for it.
pub struct Writing {
    pid: i32,
    tmp: PathBuf,
    cache: Cache,
    task: JoinHandle<()>,
}

/// A variable of the ranks' environment, as any of the job's executables gets it.
fn ranks_env(job: &JobCommon, name: &str) -> Option<OsString> {
    job.apps.iter().find_map(|a| {
        let set = a.env.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        set.or_else(|| if a.agent_env { std::env::var_os(name) } else { None })
    })
}

/// Offer the file to the ranks of this node: now if it is cached, else once the tool has
/// written it (`ready` is called from a task with its path, or `None` if the tool failed:
/// pass it to [`NodeCore::set_hwloc_xmlfile`]). Nothing for a node of fewer than two ranks
/// (MPICH does not ask), or when the ranks' environment rules it out. When the user's
/// directory is not usable the file goes into a fresh directory of the agent's own, put in
/// `scratch` (keep it until the ranks are gone).
pub fn offer(
    core: &mut NodeCore,
    fx: &mut Vec<crate::proto::node::Effect>,
    scratch: &mut Option<crate::proc::scratch::Scratch>,
    ready: impl FnOnce(Option<String>) + Send + 'static,
) -> Option<Writing> {
    if core.local_count() < 2 {
        return None;
    }
    if let Some(skip) = disabled(|k| ranks_env(core.job(), k)) {
        debug!("no hwloc topology file for the ranks: {skip}");
        return None;
    }
    let cache = match Cache::open() {
        Ok(c) => c,
        // The user's directory is not usable (another user took its name first, say):
        // this agent's own fresh one instead, gone with the agent. Nothing the user could
        // act on, so nothing said beyond the debug level.
        Err(Skip::Dir(why)) => {
            debug!("hwloc topology file in a directory of this agent's own: {why}");
            let opened = crate::proc::scratch::Scratch::new("hwloc")
                .map_err(|e| Skip::Dir(e.to_string()))
                .and_then(|s| Cache::open_in(s.dir().to_path_buf()).map(|c| (c, s)));
            match opened {
                Ok((c, s)) => {
                    *scratch = Some(s);
                    c
                }
                Err(skip) => {
                    debug!("no hwloc topology file for the ranks: {skip}");
                    return None;
                }
            }
        }
        Err(skip) => {
            debug!("no hwloc topology file for the ranks: {skip}");
            return None;
        }
    };
    if let Some(path) = cache.lookup() {
        debug!(path = %path.display(), "hwloc topology file cached");
        core.set_hwloc_xmlfile(Some(path.to_string_lossy().into_owned()), fx);
        return None;
    }
    let writing = write(cache, ready);
    if writing.is_some() {
        core.hwloc_xmlfile_pending();
    }
    writing
}

/// Start the tool writing the file; `ready` gets its path once it is in place.
fn write(cache: Cache, ready: impl FnOnce(Option<String>) + Send + 'static) -> Option<Writing> {
    let (out, tmp) = match cache.temp_file() {
        Ok(f) => f,
        // The name carries our pid: a leftover of a killed NLA whose pid came round again
        // (removed by a later prune), or a directory we cannot write. Ranks discover the
        // topology themselves.
        Err(e) => {
            debug!("hwloc topology file not written: {}: {e}", cache.dir().display());
            return None;
        }
    };
    let mut cmd = tokio::process::Command::new(cache.tool());
    cmd.args(TOOL_ARGS)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(Stdio::null())
        // Its own group: killing it (`reaper::reap`) touches nothing else.
        .process_group(0);
    for var in STEERING {
        cmd.env_remove(var);
    }
    let child = match reaper::spawn_claimed(&mut cmd) {
        Ok(c) => c,
        Err(e) => {
            warn!("cannot run {} for the ranks' hwloc topology file: {e}", cache.tool().display());
            cache.discard(&tmp);
            return None;
        }
    };
    let Some(pid) = child.id().map(|p| p as i32) else {
        cache.discard(&tmp);
        return None;
    };
    let task = {
        let (cache, tmp) = (cache.clone(), tmp.clone());
        tokio::spawn(async move {
            let mut child = child;
            let tool = cache.tool().display().to_string();
            let written = match tokio::time::timeout(TOOL_LIMIT, child.wait()).await {
                Ok(Ok(st)) if st.success() => {
                    reaper::release(pid);
                    match cache.install(&tmp) {
                        Ok(path) => {
                            debug!(path = %path.display(), "hwloc topology file written");
                            Some(path.to_string_lossy().into_owned())
                        }
                        Err(e) => {
                            warn!("{tool} wrote no usable hwloc topology file: {e}");
                            None
                        }
                    }
                }
                Ok(Ok(st)) => {
                    reaper::release(pid);
                    cache.discard(&tmp);
                    warn!("{tool} (the ranks' hwloc topology file) failed: {st}");
                    None
                }
                Ok(Err(e)) => {
                    reaper::reap(pid);
                    cache.discard(&tmp);
                    warn!("cannot wait for {tool} (the ranks' hwloc topology file): {e}");
                    None
                }
                Err(_) => {
                    reaper::reap(pid);
                    cache.discard(&tmp);
                    warn!(
                        "{tool} (the ranks' hwloc topology file) ran {} s: killed",
                        TOOL_LIMIT.as_secs()
                    );
                    None
                }
            };
            ready(written);
        })
    };
    Some(Writing { pid, tmp, cache, task })
}

impl Writing {
    /// At the end of the job: let the tool finish (bounded by [`AT_END`]), else kill and
    /// reap it and remove its temporary file.
    pub async fn finish(mut self) {
        if tokio::time::timeout(AT_END, &mut self.task).await.is_ok() {
            return;
        }
        self.task.abort();
        reaper::reap(self.pid);
        self.cache.discard(&self.tmp);
        debug!("hwloc topology file not written: the job ended first");
    }
}

//! Starting one rank: environment, `PMI_FD`, own session/process group, parent-death signal.

use libi::job::{AppSpec, JobCommon, NodePlan, RankSlot};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::process::Stdio;
use tokio::process::{Child, Command};

/// A started rank: the process and the server end of its PMI socketpair.
pub struct Started {
    pub child: Child,
    pub pmi: StdUnixStream,
}

/// Variables that must never leak from an outer job into our ranks (spec §6, §12.12).
pub fn is_scrubbed(name: &str) -> bool {
    name.starts_with("PMI_")
        || name.starts_with("PMIX_")
        || name.starts_with("PMI2_")
        || name == "PRTE_LAUNCHED"
}

/// Start local rank `local` (global `slot.rank`) of this node.
pub fn start_rank(
    job: &JobCommon,
    plan: &NodePlan,
    local: usize,
    slot: RankSlot,
    pmgr_port: Option<u16>,
) -> io::Result<Started> {
    let app: &AppSpec = job
        .apps
        .get(slot.app as usize)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "rank names an unknown app"))?;
    // Both ends close-on-exec; the child clears the flag on its own end only, so no rank
    // inherits another rank's socket.
    let (server, client) = StdUnixStream::pair()?;
    let client_fd: OwnedFd = client.into();
    let raw = client_fd.as_raw_fd();

    let mut cmd = Command::new(&app.exe);
    cmd.args(&app.args);
    cmd.env_clear();
    for (k, v) in &app.env {
        cmd.env(k, v);
    }
    cmd.env("PMI_FD", raw.to_string())
        .env("PMI_RANK", slot.rank.to_string())
        .env("PMI_SIZE", job.size.to_string())
        .env("PMI_SPAWNED", "0")
        .env("PMI_HOSTNAME", &plan.host)
        .env("MPI_LOCALRANKID", local.to_string())
        .env("MPI_LOCALNRANKS", plan.ranks.len().to_string())
        .env("LIBI_JOB", &job.kvsname);
    if let (Some(id), Some(port)) = (job.pmgr, pmgr_port) {
        // What a PMGR (pmgr_collective v8 / MVAPICH-1) client reads; shared memory off, or
        // clients of >= 1024 ranks never talk to the server (spec §2).
        cmd.env("MPIRUN_HOST", "127.0.0.1")
            .env("MPIRUN_PORT", port.to_string())
            .env("MPIRUN_RANK", slot.rank.to_string())
            .env("MPIRUN_NPROCS", job.size.to_string())
            .env("MPIRUN_ID", id.to_string())
            .env("MPIRUN_SHM_ENABLE", "0")
            .env("MPIRUN_MPD", "0")
            .env("NOT_USE_TOTALVIEW", "1")
            .env("MPIRUN_CONNECT_ONCE", "1");
    }
    if let Some(w) = &app.wdir {
        cmd.current_dir(w);
    }
    let is_rank0 = slot.rank == 0;
    cmd.stdin(if is_rank0 { Stdio::piped() } else { Stdio::null() });
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.kill_on_drop(false);
    // SAFETY: only async-signal-safe calls (setsid, prctl, fcntl) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::fcntl(raw, libc::F_SETFD, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    drop(client_fd);
    Ok(Started { child, pmi: server })
}

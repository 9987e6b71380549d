//! `libi-mpiexec`: start a parallel job through libi's Node Launch Agents. Hydra-compatible
//! options; see `libi-mpiexec --help`.

#![deny(clippy::undocumented_unsafe_blocks)]

mod cli;
#[cfg(test)]
mod comm_spawn;
mod control;
mod frontend;
mod man;
mod mpir;
mod nameserver;
mod plan;
mod pmix_detect;
mod rawargs;
mod stdio;

use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    // Our options travel as text; a program's arguments need not be UTF-8 (Hydra passes
    // their bytes on): see `RawArgs`.
    let (argv, mut raw) = rawargs::RawArgs::command_line(std::env::args_os().skip(1));
    // Hydra's defaults file ($HYDRA_CONFIG_FILE or ~/.mpiexec.hydra.conf): global options
    // read before the command line's.
    let (defaults, unread) = match cli::defaults_file(&|k: &str| std::env::var(k).ok()) {
        Ok(d) => d,
        Err(m) => {
            eprintln!("libi-mpiexec: {m}");
            return ExitCode::from(2);
        }
    };
    let defaults = defaults.as_ref().map(|(p, w)| (p.as_str(), w.as_slice()));
    let mut cl = match cli::parse_with_defaults(defaults, &argv, &mut raw) {
        Ok(c) => c,
        Err(cli::CliError::Info(text)) => {
            print!("{text}");
            return ExitCode::SUCCESS;
        }
        Err(cli::CliError::ProcTable(pid)) => return ExitCode::from(control::query(pid) as u8),
        Err(cli::CliError::JobLauncher(pid)) => {
            return ExitCode::from(control::query_launcher(pid) as u8)
        }
        Err(cli::CliError::Usage(m)) => {
            let m = raw.refusal(&m).map_or_else(|| raw.lossy(&m), |e| e.to_string());
            eprintln!("libi-mpiexec: {m}");
            return ExitCode::from(2);
        }
    };
    if let Err(m) = raw.restore(&mut cl) {
        eprintln!("libi-mpiexec: {m}");
        return ExitCode::from(2);
    }
    if let Some((path, words)) = defaults {
        cl.global.notes.insert(0, format!("default options from {path}: {}", words.join(" ")));
    }
    if let Some(note) = unread {
        cl.global.notes.insert(0, note);
    }
    let getenv = |k: &str| std::env::var(k).ok();
    if let Err(m) = cli::apply_env(&mut cl.global, &getenv) {
        eprintln!("libi-mpiexec: {m}");
        return ExitCode::from(2);
    }
    if let Err(m) = libi::launch::port_range(&getenv) {
        eprintln!("libi-mpiexec: {m}");
        return ExitCode::from(2);
    }
    // The resource manager's hosts, unless a host list is given.
    let (slurm, rm_hosts) = if cl.global.hosts.is_some() || cl.global.hostfile.is_some() {
        (None, None)
    } else {
        match plan::rm_allocation(cl.global.rmk, &getenv) {
            Ok(a) => a,
            Err(m) => {
                eprintln!("libi-mpiexec: {m}");
                return ExitCode::from(2);
            }
        }
    };
    libi_node::init_tracing("libi-mpiexec", cl.global.verbose);
    if cl.global.verbose {
        for note in &cl.global.notes {
            eprintln!("libi-mpiexec: {note}");
        }
    }
    libi_node::tune_allocator();
    let timeout = match cli::mpiexec_timeout(std::env::var("MPIEXEC_TIMEOUT").ok().as_deref()) {
        Ok(t) => t,
        Err(m) => {
            eprintln!("libi-mpiexec: {m}");
            return ExitCode::from(2);
        }
    };
    let nla_path = match cl.global.nla_path.clone().or_else(|| std::env::var("LIBI_NLA").ok()) {
        Some(p) => p,
        None => match std::env::current_exe() {
            Ok(p) => p.with_file_name("libi-nla").to_string_lossy().into_owned(),
            Err(_) => "libi-nla".into(),
        },
    };
    let local_host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".into());
    // By name, and whole (`NAME=VALUE`) those whose name is not UTF-8: names and values need
    // not be UTF-8, their bytes are passed on, as Hydra does.
    let (inherited, inherited_raw) = libi::job::split_environment(std::env::vars_os());
    let ctx = plan::Context {
        inherited,
        inherited_raw,
        // As bytes: a directory whose name is not UTF-8 is where the ranks start too.
        cwd: std::env::current_dir().ok().map(std::path::PathBuf::into_os_string),
        kvs: plan::KvsNames::new(
            std::process::id(),
            rand::RngCore::next_u32(&mut rand::rngs::OsRng),
            &local_host,
        ),
        // The singleton started us: it is our parent.
        singleton_exe: cl.global.singleton_port.and_then(|_| {
            let exe = std::fs::read_link(format!("/proc/{}/exe", nix::unistd::getppid())).ok()?;
            Some(exe.to_string_lossy().into_owned())
        }),
        kill_grace_ms: 3000,
        nla_path,
        local_host,
        // Positive, nonzero, different between concurrent jobs on a node (MVAPICH names its
        // shared-memory files after it) and not guessable: pmgr_collective's ranks
        // authenticate their tree connections to each other with it (a v8 client never sends
        // it to the server, which identifies its ranks otherwise: see `node/src/io/peer.rs`).
        job_id: rand::Rng::gen_range(&mut rand::rngs::OsRng, 1..=i32::MAX),
        slurm,
        rm_hosts,
        is_local: libi_node::io::tree::is_local_host,
        links_pmix: |exe| {
            let cwd = std::env::current_dir().ok();
            pmix_detect::links_pmix(exe, std::env::var_os("PATH").as_deref(), cwd.as_deref())
        },
    };
    let mut plan = match plan::plan(&cl, &ctx) {
        Ok(p) => p,
        Err(m) => {
            eprintln!("libi-mpiexec: {m}");
            return ExitCode::from(2);
        }
    };
    // Every host is this machine (a host file naming it, a one-node PBS or LSF job): as
    // Hydra, no ssh or rsh; the fork launcher starts the NLAs (see `tree::autofork`). What a
    // spawn then uses for other hosts: `remote_launcher` (the rules: `root::job_launcher`).
    let remote_launcher = {
        let nodes = plan.root.nodes();
        let mut hosts = nodes.iter().filter(|n| n.node != 0).map(|n| n.host.as_str());
        let planned = plan.job.launcher.kind;
        let launchers = libi_node::proto::root::job_launcher(
            planned,
            cl.global.launcher.is_some(),
            libi_node::io::tree::autofork(),
            || hosts.all(libi_node::io::tree::is_local_host),
        );
        if launchers.job != planned {
            tracing::debug!("every host is this machine: NLAs started directly (no ssh or rsh)");
        }
        plan.job.launcher.kind = launchers.job;
        launchers.remote
    };
    if cl.global.bcast && cl.global.singleton_port.is_none() {
        match stage_executables(&plan.job) {
            Ok(staged) => plan.job.staged = staged,
            Err(m) => {
                eprintln!("libi-mpiexec: --bcast: {m}");
                return ExitCode::from(2);
            }
        }
    }
    let advertise = match advertise_addr(&cl.global) {
        Ok(a) => a,
        Err(m) => {
            eprintln!("libi-mpiexec: {m}");
            return ExitCode::from(2);
        }
    };
    // Every NLA of a fork launch runs on this machine: more ranks than it can run, or a
    // binding (cpus or memory nodes) it cannot apply, is a usage error now, not a failed
    // start later (nor an agent growing with ranks it will never start).
    if plan.job.launcher.kind == libi::job::LauncherKind::Fork {
        let here: usize = plan.root.nodes().iter().map(|n| n.ranks.len()).sum();
        if let Err(m) = libi_node::sys::rlimit::check_rank_count(here, "this machine") {
            eprintln!("libi-mpiexec: {m}");
            return ExitCode::from(2);
        }
        for node in plan.root.nodes().into_iter().filter(|n| !n.ranks.is_empty()) {
            if let Err(m) = libi_node::proc::bind::node_binding(&plan.job, node) {
                eprintln!("libi-mpiexec: {m}");
                return ExitCode::from(2);
            }
        }
    }
    let opts = frontend::Options {
        label: stdio::RankFormat {
            label: cl.global.label,
            prepend: cl.global.prepend_pattern.clone(),
            outfile: cl.global.outfile_pattern.clone(),
            errfile: cl.global.errfile_pattern.clone(),
        },
        timeout,
        grace: Duration::from_millis(ctx.kill_grace_ms),
        advertise,
        report: cl.global.report.clone(),
        no_cleanup: cl.global.disable_auto_cleanup,
        print_all_exitcodes: cl.global.print_all_exitcodes,
        nameserver: cl.global.nameserver.clone(),
        end_on_stdin_eof: cl.global.end_on_stdin_eof,
        remote_launcher,
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("libi-mpiexec: cannot start runtime: {e}");
            return ExitCode::from(1);
        }
    };
    libi_node::sys::rlimit::raise_fd_limit();
    // Under the fork launcher everything below us is the job's: should an NLA die without
    // cleaning up (SIGKILL), what its ranks left behind is re-parented to us, not to init,
    // and killed here at the end (by pid: our children). Not under ssh or rsh, whose own
    // helpers (a ControlPersist master) are not ours to end.
    let fork = plan.job.launcher.kind == libi::job::LauncherKind::Fork;
    if fork {
        libi_node::proc::reaper::become_subreaper();
    }
    let status = rt.block_on(frontend::run(plan, opts));
    if fork {
        let swept = libi_node::proc::reaper::sweep();
        if swept > 0 {
            tracing::debug!(swept, "killed processes the job left behind");
        }
    }
    // Do not wait for the stdin thread.
    std::process::exit(status & 0xff);
}

/// `-info`: what this build offers (Hydra's `-info` kind of content).
pub fn info_text() -> String {
    let rows: &[(&str, String)] = &[
        ("Version", env!("CARGO_PKG_VERSION").to_string()),
        ("Process manager", "libi NLA tree (PMI-1, PMI-2, PMGR)".into()),
        ("Launchers available", "ssh rsh fork slurm".into()),
        ("Resource managers available", "user slurm pbs lsf".into()),
        ("Launch trees available", "greedy kary:K binomial flat chain".into()),
        (
            "Features",
            "MPMD, MPI_Comm_spawn, stdin to rank 0, flow-controlled output, output patterns, \
             cpu binding, memory policy, GPU assignment, rank maps, memory allocation kinds, \
             outside name server, launch report"
                .into(),
        ),
        (
            "Build",
            format!(
                "{} {} ({}, linked {})",
                std::env::consts::ARCH,
                std::env::consts::OS,
                if cfg!(debug_assertions) { "debug" } else { "release" },
                option_env!("LIBI_LINKED").unwrap_or("dynamic")
            ),
        ),
    ];
    let mut s = String::from("libi-mpiexec build details:\n");
    for (k, v) in rows {
        s.push_str(&format!("    {:<30}{v}\n", format!("{k}:")));
    }
    s
}

/// Open /dev/null on whichever of descriptors 0, 1 and 2 is closed, so that no descriptor we
/// open later takes its number (MPICH's singleton init starts us with stdin closed: the
/// first socket we opened would become our "stdin"). Read-only: a closed stdin still reads
/// as empty, and a write to a closed stdout or stderr still fails with EBADF, so rank output
/// with nowhere to go fails the job with a message (as a full device does) instead of
/// vanishing; a job that writes nothing there ends as it would have (Hydra fails it with 255
/// either way). It runs from `.init_array`, before the standard library's start-up, which
/// would otherwise open /dev/null read-write on them first, where writes succeed.
extern "C" fn reserve_std_fds() {
    for fd in 0..3 {
        // SAFETY: fcntl(F_GETFD) only queries; open/dup2/close act on descriptors we own.
        unsafe {
            if libc::fcntl(fd, libc::F_GETFD) >= 0 {
                continue;
            }
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY);
            if null >= 0 && null != fd {
                libc::dup2(null, fd);
                libc::close(null);
            }
        }
    }
}

#[used]
#[link_section = ".init_array"]
static RESERVE_STD_FDS: extern "C" fn() = reserve_std_fds;

/// `--bcast`: read each app's executable (found as the NLA would find it: on the app's
/// `PATH`), once per distinct file.
fn stage_executables(job: &libi::job::JobCommon) -> Result<Vec<libi::job::Staged>, String> {
    use std::os::unix::fs::PermissionsExt;
    let mut staged: Vec<(std::ffi::OsString, libi::job::Staged)> = Vec::new();
    let mut total = 0u64;
    for (i, app) in job.apps.iter().enumerate() {
        let mut path = libi_node::proc::start::resolve(&app.exe, &app.env);
        if !path.as_encoded_bytes().contains(&b'/') {
            return Err(format!("'{}' is not found on PATH", app.exe));
        }
        if let Some(w) = app.wdir.as_deref().filter(|_| !std::path::Path::new(&path).is_absolute())
        {
            path = std::path::Path::new(w).join(&path).into_os_string();
        }
        if let Some((_, s)) = staged.iter_mut().find(|(p, _)| *p == path) {
            s.apps.push(i as u32);
            continue;
        }
        let shown = std::path::Path::new(&path).display().to_string();
        let meta = std::fs::metadata(&path).map_err(|e| format!("cannot read '{shown}': {e}"))?;
        if !meta.is_file() {
            return Err(format!("'{shown}' is not a file"));
        }
        total += meta.len();
        if total > libi::job::STAGE_MAX {
            return Err(format!(
                "the executables total more than {} (at '{shown}')",
                libi::job::human_bytes(libi::job::STAGE_MAX)
            ));
        }
        let data = std::fs::read(&path).map_err(|e| format!("cannot read '{shown}': {e}"))?;
        let name = std::path::Path::new(&path)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "exe".into());
        let mode = meta.permissions().mode();
        staged.push((
            path,
            libi::job::Staged { apps: vec![i as u32], name, mode, data: data.into() },
        ));
    }
    Ok(staged.into_iter().map(|(_, s)| s).collect())
}

/// `-localhost ADDR` (an address or a resolvable name) or `-iface IF` (its IPv4 address).
fn advertise_addr(g: &cli::Global) -> Result<Option<std::net::IpAddr>, String> {
    use std::net::ToSocketAddrs;
    if let Some(h) = &g.localhost {
        if let Ok(ip) = h.parse() {
            return Ok(Some(ip));
        }
        return (h.as_str(), 0)
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .map(|a| Some(a.ip()))
            .ok_or_else(|| format!("-localhost: cannot resolve '{h}'"));
    }
    if let Some(iface) = &g.iface {
        let addrs = nix::ifaddrs::getifaddrs().map_err(|e| format!("-iface {iface}: {e}"))?;
        for a in addrs {
            if a.interface_name != *iface {
                continue;
            }
            if let Some(sin) = a.address.as_ref().and_then(|s| s.as_sockaddr_in()) {
                return Ok(Some(std::net::IpAddr::V4(sin.ip())));
            }
        }
        return Err(format!("-iface: interface '{iface}' has no IPv4 address"));
    }
    Ok(None)
}

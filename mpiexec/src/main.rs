//! `libi-mpiexec`: start a parallel job through libi's Node Launch Agents. Hydra-compatible
//! options; see `libi-mpiexec --help`.

mod cli;
mod frontend;
mod plan;
mod spawn;
mod stdio;

use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let cl = match cli::parse(&argv) {
        Ok(c) => c,
        Err(cli::CliError::Info(text)) => {
            print!("{text}");
            return ExitCode::SUCCESS;
        }
        Err(cli::CliError::Usage(m)) => {
            eprintln!("libi-mpiexec: {m}");
            return ExitCode::from(2);
        }
    };
    // MPICH's singleton init starts us with stdin closed: keep descriptors 0-2 taken, or the
    // first socket we open would become our "stdin".
    reserve_std_fds();
    nla::init_tracing(cl.global.verbose);
    nla::tune_allocator();
    let timeout = match std::env::var("MPIEXEC_TIMEOUT") {
        Ok(v) if !v.trim().is_empty() => match v.trim().parse::<u64>() {
            Ok(0) => None,
            Ok(s) => Some(Duration::from_secs(s)),
            Err(_) => {
                eprintln!("libi-mpiexec: MPIEXEC_TIMEOUT must be a number of seconds, got '{v}'");
                return ExitCode::from(2);
            }
        },
        _ => None,
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
    let ctx = plan::Context {
        inherited: std::env::vars().collect(),
        cwd: std::env::current_dir().ok().map(|p| p.to_string_lossy().into_owned()),
        default_n: std::thread::available_parallelism().map(|n| n.get() as u32).unwrap_or(1),
        kvs: plan::KvsNames::new(std::process::id(), rand::random::<u32>(), &local_host),
        // The singleton started us: it is our parent.
        singleton_exe: cl.global.singleton_port.and_then(|_| {
            let exe = std::fs::read_link(format!("/proc/{}/exe", nix::unistd::getppid())).ok()?;
            Some(exe.to_string_lossy().into_owned())
        }),
        kill_grace_ms: 3000,
        nla_path,
        local_host,
        // Positive, nonzero, different between concurrent jobs on a node (MVAPICH names its
        // shared-memory files after it): our pid and some randomness.
        job_id: ((std::process::id() as i32) << 8 ^ rand::random::<u8>() as i32).max(1)
            & 0x7fff_ffff
            | 1,
        slurm: match slurm_allocation() {
            Ok(a) => a,
            Err(m) => {
                eprintln!("libi-mpiexec: {m}");
                return ExitCode::from(2);
            }
        },
    };
    let plan = match plan::plan(&cl, &ctx) {
        Ok(p) => p,
        Err(m) => {
            eprintln!("libi-mpiexec: {m}");
            return ExitCode::from(2);
        }
    };
    let advertise = match advertise_addr(&cl.global) {
        Ok(a) => a,
        Err(m) => {
            eprintln!("libi-mpiexec: {m}");
            return ExitCode::from(2);
        }
    };
    let opts = frontend::Options {
        label: cl.global.label,
        timeout,
        grace: Duration::from_millis(ctx.kill_grace_ms),
        advertise,
        report: cl.global.report.clone(),
        print_all_exitcodes: cl.global.print_all_exitcodes,
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("libi-mpiexec: cannot start runtime: {e}");
            return ExitCode::from(1);
        }
    };
    nla::driver::raise_fd_limit();
    let status = rt.block_on(frontend::run(plan, opts));
    // Do not wait for the stdin thread.
    std::process::exit(status & 0xff);
}

/// Open /dev/null on whichever of descriptors 0, 1 and 2 is closed.
fn reserve_std_fds() {
    for fd in 0..3 {
        // SAFETY: fcntl(F_GETFD) only queries; open/dup2/close act on descriptors we own.
        unsafe {
            if libc::fcntl(fd, libc::F_GETFD) >= 0 {
                continue;
            }
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
            if null >= 0 && null != fd {
                libc::dup2(null, fd);
                libc::close(null);
            }
        }
    }
}

/// The hosts of the Slurm allocation we run in (`SLURM_JOB_ID`, `SLURM_JOB_NODELIST`,
/// `SLURM_TASKS_PER_NODE`), if any.
fn slurm_allocation() -> Result<Option<Vec<libi::hosts::Host>>, String> {
    libi::slurm::allocation_from_env(&|k: &str| std::env::var(k).ok())
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

//! `libi-nla`: the Node Launch Agent. Started by a launcher (fork, ssh, ...) as
//! `libi-nla --parent HOST:PORT --node ID`; the job secret arrives as the first line of stdin.
//!
//! Its command line is machine-made (by `libi::launch`): it is parsed by hand, and tracing
//! is a minimal subscriber unless `LIBI_LOG` asks for filters; both keep clap, regex and
//! `tracing-subscriber` off the start-up path of every NLA.
#![forbid(unsafe_code)]

use std::io::BufRead;
use std::process::ExitCode;

const USAGE: &str = "\
libi Node Launch Agent (started by libi-mpiexec)

Usage: libi-nla --parent ADDR --node ID [--keep-stdin] [--parent-pid PID] [--retries N] [-v]
       libi-nla --rendezvous ADDR [--host NAME] [--keep-stdin] [--retries N] [-v]

Options:
      --parent ADDR      Address of the parent (front end or NLA) to connect back to
      --node ID          This NLA's node id in the launch tree
      --rendezvous ADDR  Started by a resource manager's step: join the front end at this
                         address, which says where the parent is
      --host NAME        With --rendezvous: this node's name in the job's host list
                         (default: Slurm's SLURMD_NODENAME, else the host name)
  -v, --verbose          Verbose tracing on stderr (LIBI_LOG takes a tracing filter)
      --keep-stdin       Stdin stays open for the job (after the secret line): EOF means the
                         launcher connection (ssh session, parent process) is gone, and the
                         NLA tears its ranks down
      --parent-pid PID   Started by this parent process itself (the fork launcher): die with it
      --retries N        Try a failed connection to the parent (or the front end) again up
                         to N times, waiting 10 ms, then twice as long each time up to
                         200 ms (default 10; HYDRA_PROXY_RETRY_COUNT of libi-mpiexec)
  -h, --help             Print help
  -V, --version          Print version
";

#[derive(Debug, Default, PartialEq)]
struct Args {
    parent: Option<String>,
    node: Option<u32>,
    rendezvous: Option<String>,
    host: Option<String>,
    verbose: bool,
    keep_stdin: bool,
    parent_pid: Option<u32>,
    retries: Option<u32>,
}

/// What the command line asks for.
#[derive(Debug, PartialEq)]
enum Cmd {
    Run(Args),
    Help,
    Version,
}

fn parse(argv: impl IntoIterator<Item = String>) -> Result<Cmd, String> {
    let mut a = Args::default();
    let mut it = argv.into_iter();
    while let Some(arg) = it.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |what: &str| {
            inline.clone().or_else(|| it.next()).ok_or_else(|| format!("{name} needs {what}"))
        };
        let number = |v: String| v.parse::<u32>().map_err(|_| format!("invalid {name} '{v}'"));
        match name.as_str() {
            "--parent" => a.parent = Some(value("an address")?),
            "--node" => a.node = Some(number(value("a node id")?)?),
            "--rendezvous" => a.rendezvous = Some(value("an address")?),
            "--host" => a.host = Some(value("a host name")?),
            "--parent-pid" => a.parent_pid = Some(number(value("a pid")?)?),
            "--retries" => a.retries = Some(number(value("a number")?)?),
            "-v" | "--verbose" => a.verbose = true,
            "--keep-stdin" => a.keep_stdin = true,
            "-h" | "--help" => return Ok(Cmd::Help),
            "-V" | "--version" => return Ok(Cmd::Version),
            _ => return Err(format!("unexpected argument '{arg}'")),
        }
    }
    match (&a.parent, a.node, &a.rendezvous) {
        (Some(_), Some(_), None) => {}
        (None, _, Some(_)) if a.node.is_none() => {}
        (Some(_), _, Some(_)) => return Err("--parent and --rendezvous exclude each other".into()),
        _ => return Err("give --parent ADDR --node ID or --rendezvous ADDR".into()),
    }
    if a.host.is_some() && a.rendezvous.is_none() {
        return Err("--host goes with --rendezvous".into());
    }
    Ok(Cmd::Run(a))
}

fn main() -> ExitCode {
    let argv: Result<Vec<String>, _> =
        std::env::args_os().skip(1).map(|a| a.into_string()).collect();
    let Ok(argv) = argv else {
        eprintln!("libi-nla: an argument is not valid UTF-8\n\n{USAGE}");
        return ExitCode::from(2);
    };
    let args = match parse(argv) {
        Ok(Cmd::Run(a)) => a,
        Ok(Cmd::Help) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Ok(Cmd::Version) => {
            println!("libi-nla {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("libi-nla: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if let Some(ppid) = args.parent_pid {
        if !libi_node::io::tree::die_with_parent(ppid) {
            eprintln!("libi-nla: parent process {ppid} is gone");
            return ExitCode::from(1);
        }
    }
    if std::env::var_os("LIBI_LOG").is_some() {
        libi_node::init_tracing("libi-nla", args.verbose);
    } else {
        libi_node::sys::log::init("libi-nla", args.verbose);
    }
    if args.parent_pid.is_none() && args.rendezvous.is_none() {
        // Started by ssh or rsh: no subreaper of the job is above us (under the fork
        // launcher our parent is one; a resource manager's step ends its processes itself).
        libi_node::proc::reaper::fork_warden();
    }
    libi_node::tune_allocator();
    let mut secret = String::new();
    if std::io::stdin().lock().read_line(&mut secret).is_err() || secret.trim().is_empty() {
        eprintln!("libi-nla: no job secret on stdin (libi-nla is started by libi-mpiexec)");
        return ExitCode::from(2);
    }
    let secret = secret.trim().to_string();
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("libi-nla: cannot start runtime: {e}");
            return ExitCode::from(1);
        }
    };
    libi_node::sys::rlimit::raise_fd_limit();
    let retries = args.retries.unwrap_or(libi_node::proto::node::limits::CONNECT_RETRIES);
    let parent = match (args.parent, args.node, args.rendezvous) {
        (Some(addr), Some(node), _) => libi_node::io::agent::Parent::Direct { addr, node, retries },
        (_, _, Some(front_end)) => {
            libi_node::io::agent::Parent::Rendezvous { front_end, host: args.host, retries }
        }
        _ => {
            eprintln!("libi-nla: give --parent ADDR --node ID or --rendezvous ADDR");
            return ExitCode::from(2);
        }
    };
    let who = args.node.map(|n| format!("node {n}")).unwrap_or_else(|| "joining NLA".into());
    match rt.block_on(libi_node::io::agent::run(parent, secret, args.keep_stdin)) {
        Ok(code) => ExitCode::from(code as u8),
        Err(e) => {
            eprintln!("libi-nla: {who}: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Cmd, String> {
        parse(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn launcher_command_lines() {
        let a = p(&["--parent", "unix:@x", "--node", "3", "--keep-stdin", "--parent-pid", "7"]);
        let want = Args {
            parent: Some("unix:@x".into()),
            node: Some(3),
            keep_stdin: true,
            parent_pid: Some(7),
            ..Args::default()
        };
        assert_eq!(a, Ok(Cmd::Run(want)));
        let a =
            p(&["--rendezvous=10.0.0.1:5", "--keep-stdin", "-v", "--host", "n2", "--retries=0"]);
        let want = Args {
            rendezvous: Some("10.0.0.1:5".into()),
            host: Some("n2".into()),
            verbose: true,
            keep_stdin: true,
            retries: Some(0),
            ..Args::default()
        };
        assert_eq!(a, Ok(Cmd::Run(want)));
        assert_eq!(p(&["--help"]), Ok(Cmd::Help));
        assert_eq!(p(&["-V"]), Ok(Cmd::Version));
    }

    #[test]
    fn bad_command_lines() {
        for bad in [
            &[][..],
            &["--parent", "a:1"],
            &["--node", "1"],
            &["--parent", "a:1", "--node", "x"],
            &["--parent", "a:1", "--node"],
            &["--parent", "a:1", "--node", "1", "--rendezvous", "b:2"],
            &["--rendezvous", "b:2", "--node", "1"],
            &["--parent", "a:1", "--node", "1", "--host", "h"],
            &["--parent", "a:1", "--node", "1", "--bogus"],
            &["--parent", "a:1", "--node", "1", "--retries", "-1"],
            &["--parent", "a:1", "--node", "1", "--retries"],
        ] {
            assert!(p(bad).is_err(), "{bad:?}");
        }
    }
}

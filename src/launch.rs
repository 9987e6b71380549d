//! How a parent starts a child NLA: the launcher's command line (pure; the drivers spawn it).
//!
//! The job secret is never on this command line: the parent writes it to the launcher's
//! stdin, which ssh/rsh forward to the remote `libi-nla`.

use crate::job::{LauncherKind, LauncherSpec};

/// The variables that limit the ports we listen on, in the order Hydra 5 lets them win (the
/// first set one wins): MPICH's CVAR and its aliases, then Hydra's own two spellings
/// (checked one pair at a time with mpiexec.hydra 5.0.2, by the port its listener took).
pub const PORT_RANGE_VARS: [&str; 11] = [
    "MPIR_CVAR_CH3_PORT_RANGE",
    "MPIR_PARAM_CH3_PORT_RANGE",
    "MPICH_CH3_PORT_RANGE",
    "MPIR_CVAR_PORTRANGE",
    "MPIR_CVAR_PORT_RANGE",
    "MPIR_PARAM_PORTRANGE",
    "MPIR_PARAM_PORT_RANGE",
    "MPICH_PORTRANGE",
    "MPICH_PORT_RANGE",
    "MPIEXEC_PORTRANGE",
    "MPIEXEC_PORT_RANGE",
];

/// A port range variable that is not a range: its name and value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{var} must be MIN:MAX (ports 1..65535, MIN <= MAX) or 0:0 (any), got '{value}'")]
pub struct PortRangeError {
    pub var: &'static str,
    pub value: String,
}

/// The port range `MIN:MAX` our listeners (tree, PMGR) must bind in, if one is set: the
/// variable's name and the range. `0:0` (the CVAR's default, MPICH's "any port") is no range;
/// it still wins over the variables after it. `get` looks a variable up.
pub fn port_range(
    get: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<(&'static str, u16, u16)>, PortRangeError> {
    for var in PORT_RANGE_VARS {
        let Some(v) = get(var).filter(|v| !v.trim().is_empty()) else { continue };
        let bad = || PortRangeError { var, value: v.clone() };
        let (a, b) = v.trim().split_once(':').ok_or_else(bad)?;
        let (a, b) = (a.parse::<u16>().map_err(|_| bad())?, b.parse::<u16>().map_err(|_| bad())?);
        if (a, b) == (0, 0) {
            return Ok(None);
        }
        if a == 0 || a > b {
            return Err(bad());
        }
        return Ok(Some((var, a, b)));
    }
    Ok(None)
}

/// Program and arguments that start the NLA for `node` on `host`, connecting back to
/// `parent` (`ADDR:PORT`).
pub fn nla_command(
    spec: &LauncherSpec,
    host: &str,
    parent: &str,
    node: u32,
    verbose: bool,
) -> (String, Vec<String>) {
    let nla_prog = match spec.kind {
        LauncherKind::Fork => spec.nla_path.clone(),
        _ => spec.remote_nla(),
    };
    let mut nla = vec![
        nla_prog,
        "--parent".to_string(),
        parent.to_string(),
        "--node".to_string(),
        node.to_string(),
        // The launcher's stdin stays open for the whole job: the NLA sees EOF when its
        // parent or the ssh/rsh session goes away, wherever it runs.
        "--keep-stdin".to_string(),
    ];
    if let Some(n) = spec.connect_retries {
        nla.extend(["--retries".to_string(), n.to_string()]);
    }
    if verbose {
        nla.push("-v".to_string());
    }
    // ssh/rsh do not pass our environment on: a port range goes on the remote command line.
    let remote_env: Vec<String> = match port_range(&|k| std::env::var(k).ok()) {
        Ok(Some((var, a, b))) => vec!["env".into(), format!("{var}={a}:{b}")],
        _ => Vec::new(),
    };
    match spec.kind {
        LauncherKind::Fork => {
            let prog = nla.remove(0);
            (prog, nla)
        }
        LauncherKind::Ssh => {
            let prog = spec.exec.clone().unwrap_or_else(|| "ssh".to_string());
            // No X forwarding, whatever the user's ssh config says: Hydra passes -x too
            // (unless -enable-x), to its own ssh or to a -launcher-exec program alike.
            let mut args = vec!["-x".to_string()];
            if spec.exec.is_none() {
                // Never a password prompt. A -launcher-exec program may not take ssh's -o.
                args.extend(
                    ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new"]
                        .map(String::from),
                );
            }
            args.extend(spec.extra_args.iter().cloned());
            args.push(match spec.user(host) {
                Some(user) => format!("{user}@{host}"),
                None => host.to_string(),
            });
            args.push(shell_join(&[remote_env, nla].concat()));
            (prog, args)
        }
        LauncherKind::Rsh => {
            let prog = spec.exec.clone().unwrap_or_else(|| "rsh".to_string());
            let mut args = spec.extra_args.clone();
            if let Some(user) = spec.user(host) {
                args.extend(["-l".to_string(), user.to_string()]);
            }
            args.extend([host.to_string(), shell_join(&[remote_env, nla].concat())]);
            (prog, args)
        }
        // NLAs of a Slurm job are started all at once by `srun_command`, those of a joined
        // group by the job's NLAs: never one by one.
        LauncherKind::Slurm | LauncherKind::Joined => (String::new(), Vec::new()),
    }
}

/// The one `srun` step that starts an NLA on each of `nodes`; every NLA joins the front end
/// at `front_end`. Stdin goes to every task (`--input=all`): the job secret, then EOF when the
/// front end is gone. No Slurm MPI plugin (the NLAs serve PMI themselves).
pub fn srun_command(
    spec: &LauncherSpec,
    nodes: &[String],
    front_end: &str,
    verbose: bool,
) -> (String, Vec<String>) {
    let prog = spec.exec.clone().unwrap_or_else(|| "srun".to_string());
    let n = nodes.len();
    let mut args = vec![
        format!("--nodes={n}"),
        format!("--ntasks={n}"),
        "--ntasks-per-node=1".to_string(),
        format!("--nodelist={}", nodes.join(",")),
        "--kill-on-bad-exit=1".to_string(),
        "--input=all".to_string(),
        "--mpi=none".to_string(),
        "--overlap".to_string(),
        "--job-name=libi-nla".to_string(),
    ];
    args.extend(spec.extra_args.iter().cloned());
    args.extend([
        spec.remote_nla(),
        "--rendezvous".to_string(),
        front_end.to_string(),
        "--keep-stdin".to_string(),
    ]);
    if let Some(n) = spec.connect_retries {
        args.extend(["--retries".to_string(), n.to_string()]);
    }
    if verbose {
        args.push("-v".to_string());
    }
    (prog, args)
}

/// Quote words for the remote shell (ssh/rsh pass one command string to `sh -c`).
pub fn shell_join(words: &[String]) -> String {
    words
        .iter()
        .map(|w| {
            if !w.is_empty()
                && w.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./:=,@+%".contains(&b))
            {
                w.clone()
            } else {
                format!("'{}'", w.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The local address the kernel would use to reach `host` (a UDP "connect" sends nothing).
pub fn route_source(host: &str) -> std::io::Result<std::net::IpAddr> {
    use std::net::ToSocketAddrs;
    let target = (host, 9)
        .to_socket_addrs()
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot resolve host '{host}': {e}")))?
        .next()
        .ok_or_else(|| std::io::Error::other(format!("cannot resolve host '{host}'")))?;
    let sock = if target.is_ipv6() {
        std::net::UdpSocket::bind("[::]:0")?
    } else {
        std::net::UdpSocket::bind("0.0.0.0:0")?
    };
    sock.connect(target)?;
    Ok(sock.local_addr()?.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_ranges() {
        let env = |pairs: Vec<(&'static str, &'static str)>| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        assert_eq!(port_range(&env(vec![])), Ok(None));
        let r = port_range(&env(vec![("MPIR_CVAR_CH3_PORT_RANGE", "5000:5010")]));
        assert_eq!(r, Ok(Some(("MPIR_CVAR_CH3_PORT_RANGE", 5000, 5010))));
        // Hydra 5's order: the CVAR, then MPIEXEC_PORTRANGE, then MPIEXEC_PORT_RANGE.
        let both = vec![("MPIEXEC_PORT_RANGE", "7000:7000"), ("MPIR_CVAR_CH3_PORT_RANGE", "1:2")];
        assert_eq!(port_range(&env(both)), Ok(Some(("MPIR_CVAR_CH3_PORT_RANGE", 1, 2))));
        let both = vec![("MPIEXEC_PORT_RANGE", "7000:7000"), ("MPIEXEC_PORTRANGE", "8:9")];
        assert_eq!(port_range(&env(both)), Ok(Some(("MPIEXEC_PORTRANGE", 8, 9))));
        // Each name wins over every name after it (the aliases MPICH reads for the CVAR).
        for (i, first) in PORT_RANGE_VARS.iter().enumerate() {
            for later in &PORT_RANGE_VARS[i + 1..] {
                let pair = vec![(*later, "7000:7000"), (*first, "8:9")];
                assert_eq!(port_range(&env(pair)), Ok(Some((*first, 8, 9))), "{first} {later}");
            }
        }
        // 0:0 is "any port" (the CVAR's default), and still wins over the ones after it.
        assert_eq!(port_range(&env(vec![("MPIEXEC_PORT_RANGE", "0:0")])), Ok(None));
        let any = vec![("MPIR_CVAR_CH3_PORT_RANGE", " 0:0 "), ("MPIEXEC_PORT_RANGE", "10:5")];
        assert_eq!(port_range(&env(any)), Ok(None));
        for bad in ["5000", "10:5", "0:10", "a:b", "1:70000", ":", "0", "0:0:0"] {
            let e = port_range(&env(vec![("MPIEXEC_PORT_RANGE", bad)])).expect_err(bad).to_string();
            assert!(e.contains("MPIEXEC_PORT_RANGE"), "{e}");
        }
    }

    fn spec(kind: LauncherKind, exec: Option<&str>) -> LauncherSpec {
        LauncherSpec {
            exec: exec.map(String::from),
            ..LauncherSpec::new(kind, "/opt/libi/libi-nla")
        }
    }

    #[test]
    fn fork_runs_the_nla_directly() {
        let (p, a) = nla_command(&spec(LauncherKind::Fork, None), "n1", "127.0.0.1:9", 3, false);
        assert_eq!(p, "/opt/libi/libi-nla");
        assert_eq!(a, vec!["--parent", "127.0.0.1:9", "--node", "3", "--keep-stdin"]);
    }

    #[test]
    fn ssh_batch_mode_and_exec_override() {
        let (p, a) = nla_command(&spec(LauncherKind::Ssh, None), "n1", "10.0.0.1:9", 2, true);
        assert_eq!(p, "ssh");
        assert!(a.contains(&"BatchMode=yes".to_string()));
        assert_eq!(a[0], "-x", "no X forwarding: {a:?}");
        assert_eq!(a[a.len() - 2], "n1");
        assert_eq!(
            a[a.len() - 1],
            "/opt/libi/libi-nla --parent 10.0.0.1:9 --node 2 --keep-stdin -v"
        );
        let (p, a) = nla_command(&spec(LauncherKind::Ssh, Some("/x/ssh")), "h", "a:1", 1, false);
        assert_eq!(p, "/x/ssh");
        assert_eq!(a, vec!["-x", "h", "/opt/libi/libi-nla --parent a:1 --node 1 --keep-stdin"]);
    }

    /// A hostfile's `user=NAME`: `NAME@host` for ssh, `-l NAME` for rsh; other hosts as
    /// they are.
    #[test]
    fn hostfile_users_log_in() {
        let users =
            |kind| LauncherSpec { users: vec![("n1".into(), "alice".into())], ..spec(kind, None) };
        let (_, a) = nla_command(&users(LauncherKind::Ssh), "n1", "a:1", 1, false);
        assert_eq!(a[a.len() - 2], "alice@n1");
        let (_, a) = nla_command(&users(LauncherKind::Ssh), "n2", "a:1", 1, false);
        assert_eq!(a[a.len() - 2], "n2");
        let (_, a) = nla_command(&users(LauncherKind::Rsh), "n1", "a:1", 1, false);
        assert_eq!(a[..3], ["-l", "alice", "n1"]);
    }

    /// `HYDRA_LAUNCHER_EXTRA_ARGS`: before the host for ssh and rsh, before the NLA for srun.
    #[test]
    fn extra_launcher_args() {
        let extra = |kind| LauncherSpec {
            extra_args: vec!["-p".into(), "2222".into()],
            ..spec(kind, None)
        };
        let (_, a) = nla_command(&extra(LauncherKind::Ssh), "n1", "a:1", 1, false);
        assert_eq!(a[a.len() - 4..a.len() - 1], ["-p", "2222", "n1"]);
        let (_, a) = nla_command(&extra(LauncherKind::Rsh), "n1", "a:1", 1, false);
        assert_eq!(a[..3], ["-p", "2222", "n1"]);
        let (_, a) = srun_command(&extra(LauncherKind::Slurm), &["n1".into()], "a:1", false);
        let at = a.iter().position(|w| w == "-p").expect("-p");
        assert_eq!(a[at..at + 3], ["-p", "2222", "/opt/libi/libi-nla"]);
        let (p, a) = nla_command(&extra(LauncherKind::Fork), "n1", "a:1", 1, false);
        assert!(p == "/opt/libi/libi-nla" && !a.contains(&"2222".to_string()));
    }

    /// `-hybrid-hosts`: remote launches run `libi-nla` from the remote PATH; a local (fork)
    /// one still runs our path.
    #[test]
    fn hybrid_hosts_name_the_agent() {
        let by_name = |kind| LauncherSpec { nla_by_name: true, ..spec(kind, None) };
        let (_, a) = nla_command(&by_name(LauncherKind::Ssh), "n1", "a:1", 1, false);
        assert_eq!(a[a.len() - 1], "libi-nla --parent a:1 --node 1 --keep-stdin");
        let (_, a) = nla_command(&by_name(LauncherKind::Rsh), "n1", "a:1", 1, false);
        assert_eq!(a[1], "libi-nla --parent a:1 --node 1 --keep-stdin");
        let (p, _) = nla_command(&by_name(LauncherKind::Fork), "n1", "a:1", 1, false);
        assert_eq!(p, "/opt/libi/libi-nla");
        let (_, a) = srun_command(&by_name(LauncherKind::Slurm), &["n1".into()], "a:1", false);
        assert!(a.contains(&"libi-nla".to_string()) && !a.iter().any(|w| w.contains("/opt/")));
    }

    #[test]
    fn rsh() {
        let (p, a) = nla_command(&spec(LauncherKind::Rsh, None), "h", "a:1", 1, false);
        assert_eq!(p, "rsh");
        assert_eq!(a[0], "h");
    }

    #[test]
    fn srun_step() {
        let (p, a) = srun_command(
            &spec(LauncherKind::Slurm, None),
            &["a".into(), "b".into()],
            "10.0.0.1:5",
            false,
        );
        assert_eq!(p, "srun");
        for want in [
            "--nodes=2",
            "--ntasks=2",
            "--ntasks-per-node=1",
            "--nodelist=a,b",
            "--input=all",
            "--kill-on-bad-exit=1",
        ] {
            assert!(a.iter().any(|x| x == want), "{want} in {a:?}");
        }
        let tail: Vec<&str> = a[a.len() - 4..].iter().map(String::as_str).collect();
        assert_eq!(tail, vec!["/opt/libi/libi-nla", "--rendezvous", "10.0.0.1:5", "--keep-stdin"]);
    }

    /// `HYDRA_PROXY_RETRY_COUNT` reaches every NLA's command line, whatever starts it; unset,
    /// the NLA's own default holds and nothing is added.
    #[test]
    fn connect_retries_go_on_the_nla_command_line() {
        let mut s = spec(LauncherKind::Fork, None);
        s.connect_retries = Some(3);
        let (_, a) = nla_command(&s, "n1", "127.0.0.1:9", 3, false);
        assert_eq!(a[a.len() - 2..], ["--retries", "3"]);
        s.kind = LauncherKind::Ssh;
        let (_, a) = nla_command(&s, "n1", "10.0.0.1:9", 2, false);
        assert!(a[a.len() - 1].ends_with("--keep-stdin --retries 3"), "{a:?}");
        let (_, a) = srun_command(&s, &["a".into()], "10.0.0.1:5", false);
        assert_eq!(a[a.len() - 2..], ["--retries", "3"]);
        let (_, a) = nla_command(&spec(LauncherKind::Ssh, None), "n1", "10.0.0.1:9", 2, false);
        assert!(!a.iter().any(|w| w.contains("--retries")), "{a:?}");
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_join(&["a b".into(), "it's".into(), "".into()]), "'a b' 'it'\\''s' ''");
    }
}

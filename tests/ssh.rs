//! Multi-node tests over real ssh into network-namespace hosts, each with its own sshd
//! (`ci/netns-hosts.sh`). `ci/test.sh` runs the suite inside `ci/with-netns-hosts.sh`, which
//! sets `LIBI_TEST_HOSTS` (comma-separated addresses) and `LIBI_TEST_SSH` (an ssh wrapper
//! with the test key) and sets `LIBI_REQUIRE_SSH_TESTS=1`, so that a missing setup fails the
//! run instead of skipping these tests.
//!
//! The namespaces share this machine's filesystem and process table: the NLAs run the same
//! `libi-nla` binary, and leftovers on any "host" are visible in our /proc.

mod common;

use common::{
    hello_lines, mpich5_program, pmi_child, prog, run, spawn_block, spawner_script, sync_dir,
    wait_marks, LAUNCHED_BY,
};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One ssh job at a time (the leftover check looks for any NLA of any ssh job).
static SERIAL: Mutex<()> = Mutex::new(());

struct Hosts {
    list: Vec<String>,
    ssh: String,
}

fn hosts() -> Option<Hosts> {
    match (std::env::var("LIBI_TEST_HOSTS"), std::env::var("LIBI_TEST_SSH")) {
        (Ok(h), Ok(ssh)) if !h.is_empty() => {
            Some(Hosts { list: h.split(',').map(str::to_string).collect(), ssh })
        }
        _ => {
            assert!(
                std::env::var("LIBI_REQUIRE_SSH_TESTS").is_err(),
                "LIBI_REQUIRE_SSH_TESTS is set but LIBI_TEST_HOSTS/LIBI_TEST_SSH are not: run under ci/with-netns-hosts.sh"
            );
            eprintln!("ssh tests skipped: run under ci/with-netns-hosts.sh N -- cargo test");
            None
        }
    }
}

/// No NLA started over ssh may survive its job.
fn no_remote_nlas(grace: Duration) {
    let deadline = Instant::now() + grace;
    loop {
        let mut found = Vec::new();
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
                continue;
            };
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains("libi-nla") && cmd.contains("--parent 10.") {
                found.push(cmd);
            }
        }
        if found.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "NLAs left behind: {found:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn ssh_args(h: &Hosts, n_hosts: usize, slots: u32) -> Vec<String> {
    let list: Vec<String> = h.list.iter().take(n_hosts).map(|x| format!("{x}:{slots}")).collect();
    vec![
        "-launcher".into(),
        "ssh".into(),
        "-launcher-exec".into(),
        h.ssh.clone(),
        "-hosts".into(),
        list.join(","),
    ]
}

/// MPICH hello across 4 hosts over ssh, 2 ranks per host, with every tree shape.
#[test]
fn mpich_hello_over_ssh_every_shape() {
    let Some(h) = hosts() else { return };
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    assert!(h.list.len() >= 4, "need 4 test hosts, have {:?}", h.list);
    for shape in ["greedy", "flat", "chain", "binomial", "kary:2"] {
        let mut args = ssh_args(&h, 4, 2);
        args.extend(["--tree".into(), shape.into(), "-n".into(), "8".into(), prog("hello")]);
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = run(&a, b"");
        hello_lines(&r, 8);
        no_remote_nlas(Duration::from_secs(5));
    }
}

/// Open MPI 5 over ssh: each host's agent starts its PMIx server (`libi-pmix`, beside
/// `libi-nla`), the fences cross the tree, the ranks talk TCP between the hosts; a spawn's
/// children find their parents across hosts.
#[test]
fn openmpi_hello_ring_abort_spawn_and_names_over_ssh() {
    let Some(h) = hosts() else { return };
    if common::openmpi5().is_none() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // Between the hosts the ranks use their namespace's link (10.x); on one host, memory.
    let env = common::ompi_env("10.0.0.0/8");
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let runs =
        [("hello", "8", 8), ("ring", "", 8), ("abort", "", 4), ("spawn", "", 4), ("names", "", 2)];
    for (prog_name, arg, n) in runs {
        let mut args = ssh_args(&h, 4, 2);
        args.extend(["-n".into(), n.to_string(), common::ompi_program(prog_name)]);
        if !arg.is_empty() {
            args.push(arg.into());
        }
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = common::run_env(&a, b"", &env);
        match prog_name {
            "abort" => {
                assert_eq!(r.status, 7, "{}", r.stderr);
                assert!(common::failure_line(&r).contains("MPI_Abort"), "{}", r.stderr);
            }
            "names" => {
                assert_eq!(r.status, 0, "names: {}\n{}", r.stdout, r.stderr);
                for want in
                    ["publish rc=0", "lookup rc=0 port=libi-port-42", "second lookup not found"]
                {
                    assert!(r.stdout.contains(want), "{want:?} missing: {}", r.stdout);
                }
            }
            "spawn" => {
                assert_eq!(r.status, 0, "spawn: {}\n{}", r.stdout, r.stderr);
                let parents = r.stdout.lines().filter(|l| l.ends_with(": 2 children")).count();
                assert_eq!(parents, 4, "{}", r.stdout);
                assert!(r.stdout.contains("child 1 of 2 got 1"), "{}", r.stdout);
            }
            _ => {
                assert_eq!(r.status, 0, "{prog_name}: {}\n{}", r.stdout, r.stderr);
                let lines = r.stdout.lines().filter(|l| l.contains(" of 8")).count();
                assert_eq!(lines, 8, "{prog_name}: {}", r.stdout);
            }
        }
        no_remote_nlas(Duration::from_secs(5));
    }
}

/// Ranks really run on the namespace hosts (their own hostnames), and output, stdin and
/// labels cross ssh.
#[test]
fn ranks_run_on_the_hosts() {
    let Some(h) = hosts() else { return };
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut args = ssh_args(&h, 4, 1);
    args.extend(["-l".into(), "-n".into(), "4".into(), "hostname".into()]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = run(&a, b"");
    assert_eq!(r.status, 0, "{}", r.stderr);
    let mut lines: Vec<&str> = r.stdout.lines().collect();
    lines.sort();
    assert_eq!(lines, vec!["[0] node1", "[1] node2", "[2] node3", "[3] node4"]);
    let mut args = ssh_args(&h, 2, 1);
    args.extend(["--tree".into(), "chain".into(), "-n".into(), "2".into(), "cat".into()]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = run(&a, b"over ssh\n");
    assert_eq!(r.stdout, "over ssh\n");
    no_remote_nlas(Duration::from_secs(5));
}

/// Over ssh, bytes that are not UTF-8 cross as they are: the working directory the job is
/// started in (ranks start there on every host, not in the login's home), a program's
/// arguments, an inherited variable's value, and a variable whose name is not UTF-8.
#[test]
fn non_utf8_cwd_arguments_and_environment_over_ssh() {
    use std::os::unix::ffi::OsStrExt as _;
    let Some(h) = hosts() else { return };
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let raw = |b: &[u8]| std::ffi::OsStr::from_bytes(b).to_os_string();
    let dir = std::env::temp_dir().join(raw(&[
        format!("libi-ssh-{}-", std::process::id()).as_bytes(),
        b"\xe9",
    ]
    .concat()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let out = std::process::Command::new(common::MPIEXEC)
        .args(ssh_args(&h, 2, 1))
        .args([
            "-n",
            "2",
            "sh",
            "-c",
            r#"printf '%s|%s|%s|%s\n' "$(pwd -P)" "$1" "$X" "$(tr '\0' '\n' </proc/$$/environ | grep -a '^LIBI_SSH_N')""#,
            "sh",
        ])
        .arg(raw(b"a\xff"))
        .env("X", raw(b"x\xfe"))
        // A variable whose name is not UTF-8 travels too (in the job's setup).
        .env(raw(b"LIBI_SSH_N\xe9"), raw(b"v\xfd"))
        .env("MPIEXEC_TIMEOUT", "60")
        .current_dir(&dir)
        .env_remove("PWD")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run libi-mpiexec");
    let _ = std::fs::remove_dir(&dir);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let line = [dir.as_os_str().as_bytes(), b"|a\xff|x\xfe|LIBI_SSH_N\xe9=v\xfd\n"].concat();
    assert_eq!(
        out.stdout,
        [line.as_slice(), line.as_slice()].concat(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    no_remote_nlas(Duration::from_secs(5));
}

/// Exit codes and MPI_Abort across hosts, and nothing left running anywhere.
#[test]
fn failures_over_ssh() {
    let Some(h) = hosts() else { return };
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let cases: [(&[&str], i32, &str); 3] = [
        (&["abort", "7"], 7, "MPI_Abort"),
        (&["exit", "3"], 3, "exited with code 3"),
        (&["segv"], 139, "SIGSEGV"),
    ];
    for (what, status, needle) in cases {
        let mut args = ssh_args(&h, 4, 2);
        args.extend(["--tree".into(), "binomial".into(), "-n".into(), "8".into(), prog("fail")]);
        args.extend(what.iter().map(|s| s.to_string()));
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = run(&a, b"");
        assert_eq!(r.status, status, "{what:?}: {}", r.stderr);
        let line = r.stderr.lines().find(|l| l.starts_with("libi-mpiexec: ")).unwrap_or_default();
        assert!(line.contains("rank 1 on ") && line.contains(needle), "{what:?}: {}", r.stderr);
        no_remote_nlas(Duration::from_secs(5));
    }
}

/// An unreachable host: the job fails naming the host, without hanging.
#[test]
fn unreachable_host() {
    let Some(h) = hosts() else { return };
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // .200 is on the test network but nobody is there: ssh's ConnectTimeout ends it.
    let hosts = format!("{},10.201.0.200", h.list[0]);
    let r = run(
        &["-launcher", "ssh", "-launcher-exec", &h.ssh, "-hosts", &hosts, "-n", "2", "hostname"],
        b"",
    );
    assert_eq!(r.status, 255, "{}", r.stderr);
    assert!(r.stderr.contains("10.201.0.200"), "{}", r.stderr);
    no_remote_nlas(Duration::from_secs(5));
}

/// Scenario 6: The ssh session of one host drops (its sshd session process is killed): the NLA there
/// sees its stdin close and tears its ranks down, its parent sees the connection and the ssh
/// client end; the job ends with 255 naming the host, and nothing is left on any host.
#[test]
fn ssh_session_drop() {
    let Some(h) = hosts() else { return };
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut args = ssh_args(&h, 3, 2);
    args.extend([
        "--tree".into(),
        "flat".into(),
        "-n".into(),
        "6".into(),
        "sleep".into(),
        "60".into(),
    ]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let live = common::start(&a, &[]);
    live.wait_for(6, |c| c.starts_with("sleep"));
    // The NLA on the second host and the sshd session that runs it.
    let nla = remote_nla(&h.list[1]).expect("NLA on the second host");
    let mut session = parent_of(nla).expect("parent of the NLA");
    while !cmdline(session).starts_with("sshd") {
        session = parent_of(session).expect("an sshd above the NLA");
    }
    let t = Instant::now();
    common::signal(session, 9);
    let (r, secs) = live.finish(t);
    assert_eq!(r.status, 255, "{}", r.stderr);
    let line = common::failure_line(&r);
    assert!(line.contains(&format!("lost the NLA on {}", h.list[1])), "{line}");
    no_remote_nlas(Duration::from_secs(5));
    eprintln!("teardown | ssh session dropped | status {} | {secs:.3} s", r.status);
}

/// The agent on a host reached by ssh is killed with SIGKILL (the OOM killer, a user's
/// `kill -9`): the job ends 255 naming the host, and nothing its ranks started in the
/// background is left there. Its ranks die with it (their parent-death signal); what they
/// started is re-parented to the agent's warden, which kills it (nobody above the agent is a
/// subreaper of the job under ssh). A SIGTERM sent to a warden reaches its agent, which
/// passes it on to its ranks as ever.
#[test]
fn sigkill_of_an_agent_over_ssh_leaves_nothing() {
    let Some(h) = hosts() else { return };
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut args = ssh_args(&h, 2, 1);
    args.extend(["-n", "2", "sh", "-c", "sleep 77.7 & wait"].map(str::to_string));
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let live = common::start(&a, &[]);
    let ranks = live.wait_for(2, |c| c.starts_with("sh -c sleep 77.7"));
    live.wait_for(2, |c| c.starts_with("sleep 77.7"));
    let agent = ranks
        .iter()
        .filter_map(|(pid, _)| parent_of(*pid))
        .find(|p| cmdline(*p).contains("libi-nla"))
        .expect("an agent above a rank");
    let t = Instant::now();
    common::signal(agent, 9);
    let (r, secs) = live.finish(t);
    assert_eq!(r.status, 255, "{}", r.stderr);
    assert!(common::failure_line(&r).contains("lost the NLA on "), "{}", r.stderr);
    no_remote_nlas(Duration::from_secs(5));
    eprintln!("teardown | agent over ssh SIGKILLed | status {} | {secs:.3} s", r.status);

    let mut args = ssh_args(&h, 2, 1);
    let script = "trap 'echo got-TERM $PMI_RANK; exit 0' TERM; sleep 77.7 & wait";
    args.extend(["-n", "2", "sh", "-c", script].map(str::to_string));
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let live = common::start(&a, &[]);
    let ranks = live.wait_for(2, |c| c.starts_with("sh -c trap"));
    live.wait_for(2, |c| c.starts_with("sleep 77.7"));
    for (rank, _) in &ranks {
        let agent = parent_of(*rank).expect("the rank's agent");
        let warden = parent_of(agent).expect("the agent's warden");
        assert!(cmdline(warden).contains("libi-nla"), "{}", cmdline(warden));
        common::signal(warden, 15);
    }
    let (r, _) = live.finish(Instant::now());
    assert_eq!(r.status, 0, "{}", r.stderr);
    let mut lines: Vec<&str> = r.stdout.lines().collect();
    lines.sort();
    assert_eq!(lines, ["got-TERM 0", "got-TERM 1"], "{}", r.stderr);
    no_remote_nlas(Duration::from_secs(5));
}

/// A spawned group outlives the agent that started its NLA: the parent rank spawns a child
/// onto its own host (its agent starts the group's NLA there) and ends at once; the child
/// runs on and is heard from. The agent's warden, which takes the group's NLA as its child
/// once the agent is gone, leaves it alone (it ends with its group, not with the agent).
#[test]
fn a_spawned_group_outlives_the_agent_over_ssh() {
    let Some(h) = hosts() else { return };
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let child = pmi_child("sleep 1.5; echo child $PMI_RANK on $(hostname) spawned=$PMI_SPAWNED");
    let block = spawn_block("1", &child, "p", &[("host", h.list[0].as_str())]);
    let script = spawner_script(&["B"], "say cmd=finalize");
    let mut args = ssh_args(&h, 2, 1);
    args.extend(["-genv", "B", &block, "-n", "1", "bash", "-c", &script].map(str::to_string));
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = run(&a, b"");
    assert_eq!(r.status, 0, "{}", r.stderr);
    let mut lines: Vec<&str> = r.stdout.lines().collect();
    lines.sort();
    assert_eq!(lines.len(), 2, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(lines[0], "child 0 on node1 spawned=1", "{}", r.stderr);
    assert!(lines[1].starts_with("parent on node1 cmd=spawn_result rc=0"), "{}", r.stdout);
    no_remote_nlas(Duration::from_secs(5));
}

/// Scenario 9: A missing or non-executable program on the remote hosts: 127 / 126 and the message.
#[test]
fn missing_program_on_remote_host() {
    let Some(h) = hosts() else { return };
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut args = ssh_args(&h, 2, 1);
    args.extend(["-n".into(), "2".into(), "/nonexistent/prog".into()]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = run(&a, b"");
    assert_eq!(r.status, 127, "{}", r.stderr);
    let line = common::failure_line(&r);
    assert!(line.starts_with("libi-mpiexec: cannot execute '/nonexistent/prog' on "), "{line}");
    assert!(line.ends_with(": No such file or directory"), "{line}");
    // The namespaces share our filesystem: a plain data file is there on every host.
    let f = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("ssh-not-executable");
    std::fs::write(&f, "data\n").expect("write");
    std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .expect("chmod");
    let mut args = ssh_args(&h, 2, 1);
    args.extend(["-n".into(), "2".into(), f.to_string_lossy().into_owned()]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = run(&a, b"");
    assert_eq!(r.status, 126, "{}", r.stderr);
    assert!(common::failure_line(&r).contains("Permission denied"), "{}", r.stderr);
    no_remote_nlas(Duration::from_secs(5));
}

fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .unwrap_or_default()
}

fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // pid (comm) state ppid ...: comm may contain spaces; split after the last ')'
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

/// The pid of the NLA whose ranks run on `host` (its ranks' PMI_HOSTNAME).
fn remote_nla(host: &str) -> Option<i32> {
    let needle = format!("PMI_HOSTNAME={host}\0");
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(env) = std::fs::read(e.path().join("environ")) else { continue };
        if env.windows(needle.len()).any(|w| w == needle.as_bytes())
            && cmdline(pid).starts_with("sleep")
        {
            return parent_of(pid).filter(|p| cmdline(*p).contains("libi-nla"));
        }
    }
    None
}

/// A host that goes silent (its network link cut mid-job: no FIN, no RST): TCP keepalive on
/// the tree connections turns it into a lost NLA within seconds; the job ends with 255 naming
/// the host; the NLA on the cut-off host notices too and tears its ranks down.
#[test]
fn silent_host() {
    let Some(h) = hosts() else { return };
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut args = ssh_args(&h, 3, 1);
    args.extend([
        "--tree".into(),
        "flat".into(),
        "-n".into(),
        "3".into(),
        "sleep".into(),
        "60".into(),
    ]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let live = common::start(&a, &[]);
    live.wait_for(3, |c| c.starts_with("sleep"));
    // host index 3 is namespace libin3 (ci/netns-hosts.sh)
    let ns = "libin3";
    let link = |state: &str| {
        let st = std::process::Command::new("ip")
            .args(["-n", ns, "link", "set", "eth0", state])
            .status()
            .expect("ip");
        assert!(st.success(), "ip link set {state}");
    };
    let t = Instant::now();
    link("down");
    let out = live.child.wait_with_output().expect("wait");
    let detect = t.elapsed().as_secs_f64();
    link("up");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(255), "{stderr}");
    let line = stderr.lines().find(|l| l.starts_with("libi-mpiexec: ")).unwrap_or_default();
    assert!(line.contains(&format!("lost the NLA on {}", h.list[2])), "{stderr}");
    // the cut-off NLA finds out through its own keepalive probes
    no_remote_nlas(Duration::from_secs(20));
    assert!(common::leftovers(&live.mark, Duration::from_secs(1)).is_empty());
    eprintln!("teardown | host link cut (silent host) | status 255 | detected after {detect:.3} s");
}

/// MPI_Comm_spawn over ssh: the MPICH-5 spawn program (2 children, which spawn a grandchild,
/// and 1+2 children; data over the intercommunicators) across 4 hosts; and a raw PMI spawn whose children report the host
/// they run on — the next hosts after the job's rank, reached by new NLAs over ssh.
#[test]
fn spawn_over_ssh() {
    let Some(h) = hosts() else { return };
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let p = mpich5_program("spawn");
    let mut args = ssh_args(&h, 4, 1);
    args.extend(["-genv", "MPIR_CVAR_CH4_NETMOD", "ofi", "-l", "-n", "2", &p].map(str::to_string));
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = run(&a, b"");
    assert_eq!(r.status, 0, "{}", r.stderr);
    // 2 children, a grandchild (nested spawn), 1 + 2 of spawn_multiple, rank 0's line.
    let mut lines: Vec<&str> = r.stdout.lines().collect();
    lines.sort();
    assert_eq!(lines.len(), 7, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(lines[0], "[0] parent ok", "{}", r.stdout);
    assert!(r.stdout.contains("child g 0/1 app 0 ok"), "{}", r.stdout);
    no_remote_nlas(Duration::from_secs(5));

    let child = pmi_child(&format!(
        "{}; echo child $PMI_RANK on $(hostname) spawned=$PMI_SPAWNED by=$by",
        LAUNCHED_BY.replace('\n', "; ")
    ));
    // the second spawn goes to the job's host: that NLA starts the group's NLA (no ssh)
    let first = h.list[0].clone();
    let blocks = [
        spawn_block("2", &child, "p", &[]),
        spawn_block("1", &child, "p", &[("host", first.as_str())]),
    ];
    let sync = sync_dir("ssh");
    let script = spawner_script(&["B1", "B2"], &format!("{}\nsay cmd=finalize", wait_marks(3)));
    let mut args = ssh_args(&h, 4, 1);
    args.extend(
        ["-genv", "B1", &blocks[0], "-genv", "B2", &blocks[1], "-genv", "SYNC", &sync]
            .map(str::to_string),
    );
    args.extend(["-n", "1", "bash", "-c", &script].map(str::to_string));
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = run(&a, b"");
    assert_eq!(r.status, 0, "{}", r.stderr);
    let mut lines: Vec<&str> = r.stdout.lines().collect();
    lines.sort();
    assert_eq!(lines.len(), 5, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(
        &lines[..3],
        [
            "child 0 on node1 spawned=1 by=nla",
            "child 0 on node2 spawned=1 by=fe",
            "child 1 on node3 spawned=1 by=fe"
        ]
    );
    assert!(lines[3].starts_with("parent on node1 cmd=spawn_result rc=0"), "{}", r.stdout);
    assert!(lines[4].starts_with("parent on node1 cmd=spawn_result rc=0"), "{}", r.stdout);
    no_remote_nlas(Duration::from_secs(5));
}

//! The LIBI session API (`liblibi.so`, `libi.h`) with C front ends and members: the paper's
//! micro benchmark and the tree-overlay bootstrap from `examples/libi/`, and the checks of
//! `tests/programs/libi_check_fe.c` (several sessions, two images, a crashed member, a
//! killed agent, bad host distributions) on 1 node, 4 simulated nodes (fork launcher) and
//! the ssh namespace hosts (under `ci/with-netns-hosts.sh`).

mod common;

use common::{leftovers, new_mark, MPIEXEC};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// Compile the C programs against `liblibi.so` with the flags `pkg-config libi` gives.
fn programs() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let (out, flags) = common::libi_c_programs(
            "libi-c",
            &[
                ("microbench_fe", "examples/libi/microbench_fe.c"),
                ("microbench_member", "examples/libi/microbench_member.c"),
                ("overlay_fe", "examples/libi/overlay_fe.c"),
                ("overlay_member", "examples/libi/overlay_member.c"),
                ("libi_check_fe", "tests/programs/libi_check_fe.c"),
                ("libi_check_member", "tests/programs/libi_check_member.c"),
            ],
        );
        // The header is C++ too.
        let cxx = out.join("header.cc");
        std::fs::write(&cxx, "#include <libi.h>\nint main() { return LIBI_OK; }\n").expect("write");
        let st = Command::new("g++")
            .arg("-fsyntax-only")
            .arg(&cxx)
            .args(flags.iter().filter(|f| f.starts_with("-I")))
            .status()
            .expect("g++");
        assert!(st.success(), "libi.h does not compile as C++");
        out
    })
}

fn prog(name: &str) -> String {
    programs().join(name).to_string_lossy().into_owned()
}

/// Run a front end with these libi-mpiexec options; assert nothing of it is left.
fn run_fe(mpiexec_args: &str, args: &[&str]) -> (i32, String, String) {
    let mark = new_mark();
    let out = Command::new(prog(args[0]))
        .args(&args[1..])
        .env("LIBI_MPIEXEC", MPIEXEC)
        .env("LIBI_MPIEXEC_ARGS", mpiexec_args)
        .env("LIBI_E2E_MARK", &mark)
        .output()
        .expect("run the front end");
    let left = leftovers(&mark, Duration::from_secs(10));
    assert!(left.is_empty(), "left running: {left:?}");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn line<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no '{name}' line in:\n{out}"))
}

fn microbench(opts: &str, hosts: &str, members: usize) {
    let (st, out, err) = run_fe(opts, &["microbench_fe", &prog("microbench_member"), hosts, "10"]);
    assert_eq!(st, 0, "{out}{err}");
    assert!(out.contains(&format!(" members={members} iterations=10 ")), "{out}");
    assert!(out.trim_end().ends_with(" errors=0"), "{out}");
}

fn overlay(opts: &str, hosts: &str, members: usize, k: u32) {
    let (st, out, err) =
        run_fe(opts, &["overlay_fe", &prog("overlay_member"), hosts, &k.to_string()]);
    assert_eq!(st, 0, "{out}{err}");
    let want = format!("overlay members={members} k={k} ");
    assert!(out.starts_with(&want), "{out}");
    assert!(out.contains(&format!(" edges={0} connected={0} ok", members - 1)), "{out}");
}

/// Every check of `libi_check_fe` on these hosts (`hosts[i]` as `host:n`).
fn checks(opts: &str, hosts: &[String]) {
    let all = hosts.join(",");
    let n: usize = hosts
        .iter()
        .map(|h| h.rsplit(':').next().unwrap_or("1").parse::<usize>().unwrap_or(1))
        .sum();
    let member = prog("libi_check_member");
    let fe = |what: &str, extra: &[&str]| {
        let mut a = vec!["libi_check_fe", member.as_str(), what];
        a.extend_from_slice(extra);
        run_fe(opts, &a)
    };

    let (st, out, err) = fe("sessions", &[&all]);
    assert_eq!(st, 0, "{out}{err}");
    assert_eq!(
        line(&out, "createSession-before-init"),
        "createSession-before-init LIBI_EINIT LIBI_fe_init was not called"
    );
    assert_eq!(line(&out, "init-again"), "init-again LIBI_EINIT LIBI_fe_init was called already");
    assert_eq!(line(&out, "launch").trim_end(), "launch LIBI_OK");
    assert_eq!(
        line(&out, "launch-again"),
        "launch-again LIBI_ESESSALREADYLAUNCHED session 0 was launched already"
    );
    let members: Vec<String> = (0..n).map(|r| format!("A{r}")).collect();
    for s in 0..3 {
        assert_eq!(
            line(&out, &format!("reply ping-{s}")),
            format!("reply ping-{s} ping-{s} size={n} members={}", members.join(","))
        );
    }
    assert_eq!(line(&out, "finalize").trim_end(), "finalize LIBI_OK");

    // Two images: the first host list runs image A, the rest image B, ranks in that order.
    // On one host: image A on 2 of its slots, B on 1 more.
    let host0 = hosts[0].split(':').next().unwrap_or_default();
    let (a, b) = match hosts.split_at(1) {
        (_, []) => (format!("{host0}:2"), format!("{host0}:1")),
        (a, b) => (a.join(","), b.join(",")),
    };
    let na: usize = a.rsplit(':').next().and_then(|x| x.parse().ok()).unwrap_or(1);
    let n = if hosts.len() == 1 { 3 } else { n };
    let (st, out, err) = fe("images", &[&a, &b]);
    assert_eq!(st, 0, "{out}{err}");
    let imgs: Vec<String> =
        (0..n).map(|r| format!("{}{r}", if r < na { "A" } else { "B" })).collect();
    assert_eq!(
        line(&out, "reply"),
        format!("reply ping-images ping-images size={n} members={}", imgs.join(","))
    );

    // A crashed member fails its session (named), the other session goes on.
    let (st, out, err) = fe("crash", &[&all]);
    assert_eq!(st, 0, "{out}{err}");
    assert_eq!(
        line(&out, "recv-failed"),
        format!("recv-failed LIBI_ESESSFAILED session 0: rank 1 on {host0} was killed by signal 9 (SIGKILL)")
    );
    assert!(
        line(&out, "send-failed").starts_with("send-failed LIBI_ESESSFAILED session 0: rank 1"),
        "{out}"
    );
    assert!(line(&out, "reply").starts_with("reply ping-survivor ping-survivor size="), "{out}");
    assert_eq!(line(&out, "finalize").trim_end(), "finalize LIBI_OK", "{out}");

    // A killed agent likewise (the last host's, killed by its last member).
    if hosts.len() > 1 {
        let (st, out, err) = fe("killagent", &[&all]);
        assert_eq!(st, 0, "{out}{err}");
        let last = hosts[hosts.len() - 1].split(':').next().unwrap_or_default();
        assert!(
            line(&out, "recv-failed").starts_with(&format!(
                "recv-failed LIBI_ESESSFAILED session 0: lost the NLA on {last}"
            )),
            "{out}"
        );
        assert!(
            line(&out, "reply").starts_with("reply ping-survivor ping-survivor size="),
            "{out}"
        );
    }

    // Bad distributions and misused calls.
    let (st, out, err) = fe("bad", &[&all]);
    assert_eq!(st, 0, "{out}{err}");
    assert!(line(&out, "empty").starts_with("empty LIBI_EHOSTDIST distribution 0 ("), "{out}");
    assert!(line(&out, "empty").ends_with("): the host distribution is empty"), "{out}");
    assert!(line(&out, "zero").ends_with("): host 'localhost' has 0 processes"), "{out}");
    assert_eq!(line(&out, "nosession"), "nosession LIBI_ESESS no session 42");
    assert_eq!(line(&out, "null"), "null LIBI_EARG the distributions: NULL or negative");
    // Handles are unique in the process: the session of the second front end is 1.
    assert!(
        line(&out, "unknown")
            .starts_with("unknown LIBI_ELAUNCH session 1: lost the NLA on no-such-host.invalid: "),
        "{out}"
    );
    assert_eq!(line(&out, "member-call"), "member-call LIBI_EINIT LIBI_init was not called");
    assert_eq!(
        line(&out, "after-finalize"),
        "after-finalize LIBI_EINIT LIBI_fe_finalize was called (LIBI_fe_init starts again)"
    );
    assert_eq!(line(&out, "finalize").trim_end(), "finalize LIBI_OK", "{out}");

    // A master that floods a front end that does not read: memory stays flat (16 messages
    // held at most; the rest wait in the connection), and everything arrives, in order.
    let (st, out, err) = fe("flood", &[&all]);
    assert_eq!(st, 0, "{out}{err}");
    let l = line(&out, "flood");
    assert!(l.starts_with("flood received=200 good=200 rss_kb_while_unread="), "{out}{err}");
    let rss: u64 = l.rsplit('=').next().and_then(|v| v.parse().ok()).unwrap_or(u64::MAX);
    assert!(rss < 64 * 1024, "front end RSS {rss} kB while 200 MiB were sent to it");

    // A session that failed before the front end's first call, a send: the failure and its
    // reason, not the broken master connection.
    let (st, out, err) = fe("crashsend", &[&all]);
    assert_eq!(st, 0, "{out}{err}");
    let l = line(&out, "send-after-failure");
    assert!(l.starts_with("send-after-failure LIBI_ESESSFAILED session 0: rank 1"), "{out}{err}");

    // A front end that exits without LIBI_fe_finalize, or is killed: its session ends
    // without it (libi-mpiexec's stdin, a pipe from the front end, reaches its end), and
    // nothing of it is left (run_fe checks).
    let (st, out, err) = fe("orphan", &[&all]);
    assert_eq!((st, line(&out, "launch").trim_end()), (0, "launch LIBI_OK"), "{out}{err}");
    let (st, out, err) = fe("killed", &[&all]);
    assert_eq!((st, line(&out, "launch").trim_end()), (-1, "launch LIBI_OK"), "{out}{err}");

    // The members' own misuse checks.
    let (st, out, err) = fe("calls", &[&all]);
    assert_eq!(st, 0, "{out}{err}");
    assert!(line(&out, "reply").starts_with("reply ping-calls ping-calls size="), "{out}{err}");
}

/// Daemons next to a running job (LaunchMON-style): its table and hosts from its front end's
/// pid, one daemon per host, each finds its host's ranks alive.
fn attach(opts: &str, job_args: &[&str], hosts: &[&str], ranks: usize) {
    // The programs first: a failure to build them must not leave the job running.
    let member = prog("libi_check_member");
    let mark = new_mark();
    let mut job = Command::new(MPIEXEC)
        .args(job_args)
        .args(["sleep", "1000.75"])
        .env("LIBI_E2E_MARK", &mark)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start the job");
    // The table is answered once the job's ranks run; before the socket exists, retry.
    let mut tries = 0;
    let out = loop {
        let (st, out, err) =
            run_fe(opts, &["libi_check_fe", &member, "attach", &job.id().to_string()]);
        if out.contains("table LIBI_OK") || tries == 50 {
            break (st, out, err);
        }
        tries += 1;
        std::thread::sleep(Duration::from_millis(50));
    };
    let (st, out, err) = out;
    // The job goes first, whatever the checks find: none of it is left running.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(job.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("SIGINT the job");
    let code = job.wait().expect("wait").code();
    assert_eq!(st, 0, "{out}{err}");
    assert_eq!(line(&out, "table-size"), format!("table-size {ranks}"), "{out}{err}");
    assert_eq!(line(&out, "launch").trim_end(), "launch LIBI_OK", "{out}{err}");
    assert_eq!(
        line(&out, "reply"),
        format!(
            "reply attach daemons={} hosts={} ranks={ranks} alive={ranks}",
            hosts.len(),
            hosts.join(",")
        ),
        "{err}"
    );
    assert!(
        line(&out, "notajob").starts_with(
            "notajob LIBI_ESESS --proctable 1: process 1 is not a libi-mpiexec job with a control \
             socket"
        ),
        "{out}"
    );
    assert_eq!(code, Some(130));
    assert!(leftovers(&mark, Duration::from_secs(10)).is_empty());
}

#[test]
fn daemons_next_to_a_running_job() {
    attach(
        "-launcher fork",
        &["-launcher", "fork", "-hosts", "n1:2,n2:2,n3:1", "-n", "5"],
        &["n1", "n2", "n3"],
        5,
    );
}

#[test]
fn examples_on_one_node() {
    microbench("-launcher fork", "localhost:4", 4);
    overlay("-launcher fork", "localhost:4", 4, 2);
    overlay("-launcher fork", "localhost:1", 1, 2);
}

#[test]
fn examples_on_four_simulated_nodes() {
    for tree in ["greedy", "kary:2", "flat", "chain"] {
        let opts = format!("-launcher fork --tree {tree}");
        microbench(&opts, "n1:3,n2:3,n3:3,n4:3", 12);
        overlay(&opts, "n1:3,n2:3,n3:3,n4:3", 12, 3);
    }
    // The members' executable staged on each node (`--bcast`).
    microbench("-launcher fork --bcast", "n1:2,n2:2", 4);
}

#[test]
fn checks_on_one_node() {
    checks("-launcher fork", &["localhost:3".to_string()]);
}

#[test]
fn checks_on_four_simulated_nodes() {
    let hosts: Vec<String> = (1..=4).map(|i| format!("n{i}:2")).collect();
    checks("-launcher fork", &hosts);
}

/// Over real ssh into the namespace hosts (see `ssh.rs`).
#[test]
fn over_ssh_hosts() {
    let (Ok(h), Ok(ssh)) = (std::env::var("LIBI_TEST_HOSTS"), std::env::var("LIBI_TEST_SSH"))
    else {
        assert!(
            std::env::var("LIBI_REQUIRE_SSH_TESTS").is_err(),
            "LIBI_REQUIRE_SSH_TESTS is set but LIBI_TEST_HOSTS/LIBI_TEST_SSH are not"
        );
        eprintln!("ssh tests skipped: run under ci/with-netns-hosts.sh N -- cargo test");
        return;
    };
    let hosts: Vec<String> = h.split(',').take(4).map(|x| format!("{x}:2")).collect();
    let opts = format!("-launcher ssh -launcher-exec {ssh}");
    microbench(&opts, &hosts.join(","), 2 * hosts.len());
    microbench(&format!("{opts} --bcast"), &hosts.join(","), 2 * hosts.len());
    overlay(&opts, &hosts.join(","), 2 * hosts.len(), 2);
    checks(&opts, &hosts);
    let names: Vec<&str> = h.split(',').take(3).collect();
    let job_hosts: Vec<String> = names.iter().map(|x| format!("{x}:2")).collect();
    let job_hosts = job_hosts.join(",");
    attach(
        &opts,
        &["-launcher", "ssh", "-launcher-exec", &ssh, "-hosts", &job_hosts, "-n", "6"],
        &names,
        6,
    );
}

/// Under the real single-node Slurm (`ci/with-slurm.sh`): members started by srun steps
/// (`-launcher slurm`) inside `salloc`.
#[test]
fn under_slurm() {
    if std::env::var("LIBI_TEST_SLURM").is_err() {
        assert!(
            std::env::var("LIBI_REQUIRE_SLURM_TESTS").is_err(),
            "LIBI_REQUIRE_SLURM_TESTS is set but no Slurm is up: run under ci/with-slurm.sh"
        );
        eprintln!("Slurm tests skipped: run under ci/with-slurm.sh -- cargo test");
        return;
    }
    let host = nix::unistd::gethostname().expect("hostname").to_string_lossy().into_owned();
    let out = Command::new("salloc")
        .args(["-N1", "-n4", "--quiet"])
        .arg(prog("microbench_fe"))
        .arg(prog("microbench_member"))
        .arg(format!("{host}:4"))
        .arg("10")
        .env("LIBI_MPIEXEC", MPIEXEC)
        .env("LIBI_MPIEXEC_ARGS", "-launcher slurm")
        .output()
        .expect("salloc");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains(" members=4 iterations=10 ") && text.trim_end().ends_with(" errors=0"),
        "{text}"
    );
}

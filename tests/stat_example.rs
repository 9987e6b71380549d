//! The STAT-like example of `examples/libi/` (issue 52): `stat_fe` attaches to a running
//! `libi-mpiexec` job (one `stat_daemon` per host, `LIBI_fe_attachAndLaunch`), the daemons
//! trace every rank of their host with gdb, the master merges the stacks (`LIBI_gatherv`)
//! into a call-prefix tree and the front end prints it.
//!
//! The job is `tests/programs/stat_target.c` (built `-g -O0`): even ranks wait in
//! `main > work > wait_here > pause`, odd ranks in `main > work > odd_path > pause`, so the
//! tree splits under `work`. Real jobs, real gdb traces; nothing may be left running.

mod common;

use common::{Background as Job, Run, MPIEXEC};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// `stat_fe` and `stat_daemon` (on `liblibi.so`) and the job's program, built once.
fn programs() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let (dir, _) = common::libi_c_programs(
            "stat-example",
            &[
                ("stat_fe", "examples/libi/stat_fe.c"),
                ("stat_daemon", "examples/libi/stat_daemon.c"),
            ],
        );
        common::cc_program(&dir, "stat_target", "stat_target.c", &["-g", "-O0", "-Werror"]);
        dir
    })
}

fn prog(name: &str) -> String {
    programs().join(name).to_string_lossy().into_owned()
}

/// `stat_fe ARGS` (with `LIBI_MPIEXEC` set, nothing else) under a watchdog, asserting that
/// nothing it started is left running.
fn stat_fe(args: &[&str]) -> Run {
    let o = common::run_direct(&prog("stat_fe"), args, &[("LIBI_MPIEXEC", MPIEXEC)]);
    assert_ne!(o.status, -2, "stat_fe hung:\n{}{}", o.stdout, o.stderr);
    o
}

/// The printed tree as (path from the root, rank list) pairs: "main>work>wait_here" ->
/// "[0,2,4,6]".
fn tree(out: &str) -> Vec<(String, String)> {
    let mut path: Vec<String> = Vec::new();
    let mut nodes = Vec::new();
    for l in out.lines().skip(1).take_while(|l| !l.starts_with("not traced ")) {
        let depth = (l.len() - l.trim_start().len()) / 2;
        let (name, ranks) = l.trim_start().rsplit_once(' ').expect("NAME [RANKS]");
        path.truncate(depth);
        path.push(name.to_string());
        nodes.push((path.join(">"), ranks.to_string()));
    }
    nodes
}

fn ranks_of<'a>(nodes: &'a [(String, String)], path: &str, out: &str) -> &'a str {
    nodes
        .iter()
        .find(|(p, _)| p == path)
        .map(|(_, r)| r.as_str())
        .unwrap_or_else(|| panic!("no node {path} in the tree:\n{out}"))
}

/// The main check: 8 ranks on 4 simulated hosts, 4 daemons, every rank traced, the tree
/// splits under `work` by parity; every path below ends in the C library's pause. The ranks
/// run on after the trace (gdb detached): a second trace gives the same tree.
#[test]
fn stat_tree_of_a_job_on_four_hosts() {
    let target = prog("stat_target");
    let job =
        Job::start(&["-launcher", "fork", "-hosts", "n1:2,n2:2,n3:2,n4:2", "-n", "8", &target], 8);
    let mut first = String::new();
    for round in 0..2 {
        let o = stat_fe(&[&job.pid()]);
        assert_eq!(o.status, 0, "{}{}", o.stdout, o.stderr);
        assert!(o.stderr.contains(": 4 daemons in "), "{}", o.stderr);
        let head = o.stdout.lines().next().unwrap_or_default();
        assert_eq!(head, "stat: 4 daemons, 8 ranks [0-7], 8 traced [0-7], 0 not traced");
        let nodes = tree(&o.stdout);
        assert_eq!(ranks_of(&nodes, "main", &o.stdout), "[0-7]");
        assert_eq!(ranks_of(&nodes, "main>work", &o.stdout), "[0-7]");
        assert_eq!(ranks_of(&nodes, "main>work>wait_here", &o.stdout), "[0,2,4,6]");
        assert_eq!(ranks_of(&nodes, "main>work>odd_path", &o.stdout), "[1,3,5,7]");
        // main is the only root, work its only child, and the two branches its only ones.
        let roots: Vec<_> = nodes.iter().filter(|(p, _)| !p.contains('>')).collect();
        assert_eq!(roots.len(), 1, "{}", o.stdout);
        let under_work: Vec<_> = nodes
            .iter()
            .filter(|(p, _)| p.starts_with("main>work>") && p.matches('>').count() == 2)
            .collect();
        assert_eq!(under_work.len(), 2, "{}", o.stdout);
        // Below wait_here / odd_path: the C library's pause (its name as libc's symbols
        // give it), with the same ranks.
        for (branch, ranks) in [("wait_here", "[0,2,4,6]"), ("odd_path", "[1,3,5,7]")] {
            let prefix = format!("main>work>{branch}>");
            let below: Vec<_> = nodes.iter().filter(|(p, _)| p.starts_with(&prefix)).collect();
            assert!(!below.is_empty(), "{}", o.stdout);
            assert!(below.iter().all(|(p, r)| r == ranks && p.contains("pause")), "{}", o.stdout);
        }
        if round == 0 {
            first = o.stdout;
        } else {
            assert_eq!(o.stdout, first, "the second trace differs");
        }
    }
}

/// A rank that cannot be traced (already under another tracer) is reported as such, the
/// others are traced; a debugger that hangs is ended after the timeout and its ranks said
/// so; a subset of ranks gets daemons on their hosts only.
#[test]
fn ranks_that_cannot_be_traced_are_reported() {
    let target = prog("stat_target");
    let job = Job::start(
        &["-launcher", "fork", "-hosts", "n1:2,n2:2,n3:2,n4:2", "-n", "8", &target, "5"],
        8,
    );
    let o = stat_fe(&[&job.pid()]);
    assert_eq!(o.status, 0, "{}{}", o.stdout, o.stderr);
    let mut lines = o.stdout.lines();
    assert_eq!(
        lines.next().unwrap_or_default(),
        "stat: 4 daemons, 8 ranks [0-7], 7 traced [0-4,6-7], 1 not traced"
    );
    let nodes = tree(&o.stdout);
    assert_eq!(ranks_of(&nodes, "main>work>wait_here", &o.stdout), "[0,2,4,6]");
    assert_eq!(ranks_of(&nodes, "main>work>odd_path", &o.stdout), "[1,3,7]");
    let last = o.stdout.lines().last().unwrap_or_default();
    assert!(last.starts_with("not traced [5]: already traced by another process"), "{}", o.stdout);

    // A "debugger" that never answers: ended after 1 s, for ranks 2 and 3 (host n2) only.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let hang = common::write_script(
        &dir.join(format!("stat-hanging-gdb-{}", std::process::id())),
        "#!/bin/sh\nexec sleep 1000\n",
    );
    let o = stat_fe(&["-t", "1", "-g", &hang, "-r", "2,3", &job.pid()]);
    assert_eq!(o.status, 0, "{}{}", o.stdout, o.stderr);
    assert_eq!(
        o.stdout,
        "stat: 1 daemons, 2 ranks [2-3], 0 traced [], 2 not traced\n\
         not traced [2-3]: gdb took more than 1 s (ended)\n"
    );
    // No debugger at all.
    let o = stat_fe(&["-g", "/nonexistent/gdb", "-r", "0", &job.pid()]);
    assert_eq!(
        o.stdout,
        "stat: 1 daemons, 1 ranks [0], 0 traced [], 1 not traced\n\
         not traced [0]: could not run /nonexistent/gdb: No such file or directory\n"
    );
}

/// Over real ssh into the namespace hosts (under `ci/with-netns-hosts.sh`): the job runs with
/// `-launcher ssh -launcher-exec WRAPPER`, the daemons reach its hosts the same way; gdb
/// runs on each host (the namespace hosts share this machine's filesystem, so its gdb).
#[test]
fn stat_over_ssh() {
    let Some((h, ssh)) = common::ssh_test_hosts() else { return };
    let names: Vec<&str> = h.iter().take(4).map(String::as_str).collect();
    let hosts: Vec<String> = names.iter().map(|x| format!("{x}:2")).collect();
    let n = 2 * names.len();
    let target = prog("stat_target");
    let job = Job::start(
        &[
            "-launcher",
            "ssh",
            "-launcher-exec",
            &ssh,
            "-hosts",
            &hosts.join(","),
            "-n",
            &n.to_string(),
            &target,
        ],
        n,
    );
    let o = stat_fe(&[&job.pid()]);
    assert_eq!(o.status, 0, "{}{}", o.stdout, o.stderr);
    let all = format!("[0-{}]", n - 1);
    assert_eq!(
        o.stdout.lines().next().unwrap_or_default(),
        format!("stat: {} daemons, {n} ranks {all}, {n} traced {all}, 0 not traced", names.len())
    );
    let nodes = tree(&o.stdout);
    assert_eq!(ranks_of(&nodes, "main>work", &o.stdout), all);
    let even: Vec<String> = (0..n).step_by(2).map(|r| r.to_string()).collect();
    let odd: Vec<String> = (1..n).step_by(2).map(|r| r.to_string()).collect();
    let list = |v: Vec<String>| format!("[{}]", v.join(","));
    assert_eq!(ranks_of(&nodes, "main>work>wait_here", &o.stdout), list(even));
    assert_eq!(ranks_of(&nodes, "main>work>odd_path", &o.stdout), list(odd));
}

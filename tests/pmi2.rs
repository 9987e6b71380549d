//! End-to-end PMI-2 and client-library tests: real C programs, real process managers.
//!
//! * Slurm's own PMI-2 client (`libpmi2-0-dev`, linked into `pmi2_slurm.c`) under
//!   `libi-mpiexec` at n = 1, 4 and 64 ranks over 16 simulated nodes.
//! * Our `libpmi.so` / `libpmi2.so` (`pmi1_ours.c`, `pmi2_ours.c`) under `libi-mpiexec`
//!   (one node and several fork-simulated nodes), under Debian's `mpiexec.hydra`, and as
//!   singletons (no `PMI_FD`).
//!
//! Our libraries are the cdylibs of the workspace crates `libi-pmi1` / `libi-pmi2`, found next
//! to the `libi-mpiexec` binary (target/<profile>/). `cargo test --workspace` builds them
//! (those crates have integration tests of their own); for `cargo test -p libi-mpiexec`
//! alone, run `cargo build --workspace` first — a missing library fails these tests with
//! that advice, it never skips them.

mod common;

use common::{cc_program, leftovers, run, MPIEXEC};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

struct Progs {
    slurm: String,
    ours1: String,
    ours2: String,
    spawn: String,
}

/// The directory holding our libpmi.so / libpmi2.so (the cargo profile dir).
fn lib_dir() -> PathBuf {
    let dir = Path::new(MPIEXEC).parent().expect("target dir").to_path_buf();
    for lib in ["libpmi.so", "libpmi2.so"] {
        assert!(
            dir.join(lib).exists(),
            "{} is missing: build the client libraries first \
             (`cargo build --workspace`, or `cargo build -p libi-pmi1 -p libi-pmi2` \
             with the same profile and target dir)",
            dir.join(lib).display()
        );
    }
    dir
}

fn progs() -> &'static Progs {
    static P: OnceLock<Progs> = OnceLock::new();
    P.get_or_init(|| {
        let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("pmi2-progs-{}", std::process::id()));
        assert!(
            Path::new("/usr/include/slurm/pmi2.h").exists(),
            "Slurm's PMI-2 client is missing: install libpmi2-0-dev (ci/install-deps.sh)"
        );
        let lib = lib_dir();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let l = format!("-L{}", lib.display());
        let rpath = format!("-Wl,-rpath,{}", lib.display());
        let inc1 = format!("-I{}", root.join("libpmi/include").display());
        let inc2 = format!("-I{}", root.join("libpmi2/include").display());
        let s = |p: PathBuf| p.to_string_lossy().into_owned();
        let slurm =
            cc_program(&out, "pmi2_slurm", "pmi2_slurm.c", &["-I/usr/include/slurm", "-lpmi2"]);
        // Make sure the Slurm program really uses Slurm's library, not ours.
        let ldd = Command::new("ldd").arg(&slurm).output().expect("ldd");
        let ldd = String::from_utf8_lossy(&ldd.stdout);
        assert!(
            ldd.contains("libpmi2.so.0 => /") && !ldd.contains(&*lib.to_string_lossy()),
            "pmi2_slurm not linked to Slurm's libpmi2: {ldd}"
        );
        let ours1 = cc_program(&out, "pmi1_ours", "pmi1_ours.c", &[&inc1, &l, &rpath, "-lpmi"]);
        let ours2 = cc_program(&out, "pmi2_ours", "pmi2_ours.c", &[&inc2, &l, &rpath, "-lpmi2"]);
        for (exe, lib) in [(&ours1, "libpmi.so"), (&ours2, "libpmi2.so")] {
            let ldd = Command::new("ldd").arg(exe).output().expect("ldd");
            let ldd = String::from_utf8_lossy(&ldd.stdout);
            let want = lib_dir().join(lib);
            assert!(
                ldd.contains(&*want.to_string_lossy()),
                "{} not linked to ours: {ldd}",
                exe.display()
            );
        }
        let spawn =
            cc_program(&out, "pmi2_spawn", "pmi2_spawn.c", &["-I/usr/include/slurm", "-lpmi2"]);
        Progs { slurm: s(slurm), ours1: s(ours1), ours2: s(ours2), spawn: s(spawn) }
    })
}

/// Every rank printed exactly one "<tag> ok rank R size N…" line; exit status 0.
fn check_ok(status: i32, stdout: &str, stderr: &str, tag: &str, n: usize) {
    assert_eq!(status, 0, "stdout: {stdout}\nstderr: {stderr}");
    let mut seen = vec![false; n];
    for line in stdout.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        assert!(w.len() >= 6 && w[0] == tag && w[1] == "ok", "line: {line}");
        let r: usize = w[3].parse().expect("rank");
        assert_eq!(w[5], n.to_string(), "size in {line}");
        assert!(r < n && !seen[r], "rank {r} twice or out of range");
        seen[r] = true;
    }
    assert!(seen.iter().all(|&s| s), "missing ranks: stdout {stdout}\nstderr {stderr}");
}

fn libi(args: &[&str], prog: &str, extra: &[&str], tag: &str, n: usize) -> String {
    let mut a: Vec<&str> = args.to_vec();
    a.push(prog);
    a.extend_from_slice(extra);
    let r = run(&a, b"");
    check_ok(r.status, &r.stdout, &r.stderr, tag, n);
    r.stdout
}

fn hosts(nodes: usize, slots: usize) -> String {
    (1..=nodes).map(|i| format!("n{i}:{slots}")).collect::<Vec<_>>().join(",")
}

/// The node ids the program read from PMI_process_mapping, per rank.
fn nodes(stdout: &str) -> Vec<(usize, usize)> {
    let mut v: Vec<(usize, usize)> = stdout
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w[3].parse().expect("rank"), w[7].parse().expect("node"))
        })
        .collect();
    v.sort_unstable();
    v
}

// ------------------------------------------------------------------ Slurm's client

#[test]
fn slurm_client_n1() {
    libi(&["-n", "1"], &progs().slurm, &[], "pmi2", 1);
}

#[test]
fn slurm_client_n4() {
    let out = libi(&["-n", "4"], &progs().slurm, &[], "pmi2", 4);
    assert!(nodes(&out).iter().all(|&(_, node)| node == 0), "{out}");
}

#[test]
fn slurm_client_n64_on_16_nodes() {
    let h = hosts(16, 4);
    let out =
        libi(&["-launcher", "fork", "-hosts", &h, "-n", "64"], &progs().slurm, &[], "pmi2", 64);
    // Block placement: ranks 4k..4k+3 on node k (the node attribute checks rely on this too).
    for (rank, node) in nodes(&out) {
        assert_eq!(node, rank / 4, "{out}");
    }
}

// ------------------------------------------------------------------ our libraries, libi

#[test]
fn ours_pmi2_n4() {
    libi(&["-n", "4"], &progs().ours2, &["ns"], "pmi2", 4);
}

#[test]
fn ours_pmi2_multinode() {
    let h = hosts(3, 2);
    let out =
        libi(&["-launcher", "fork", "-hosts", &h, "-n", "6"], &progs().ours2, &["ns"], "pmi2", 6);
    for (rank, node) in nodes(&out) {
        assert_eq!(node, rank / 2, "{out}");
    }
}

#[test]
fn ours_pmi1_n4() {
    libi(&["-n", "4"], &progs().ours1, &["ns"], "pmi1", 4);
}

#[test]
fn ours_pmi1_multinode() {
    let h = hosts(3, 2);
    libi(&["-launcher", "fork", "-hosts", &h, "-n", "6"], &progs().ours1, &["ns"], "pmi1", 6);
}

// ------------------------------------------------------------------ Debian's mpiexec.hydra

fn hydra(prog: &str, tag: &str, n: usize) {
    let mark = format!("pmi2-hydra-{}-{tag}", std::process::id());
    let out = Command::new("mpiexec.hydra")
        .args(["-n", &n.to_string(), prog, "lenient"])
        .env("LIBI_E2E_MARK", &mark)
        .env("MPIEXEC_TIMEOUT", "60")
        .stdin(Stdio::null())
        .output()
        .expect("mpiexec.hydra not found: install Debian's mpich (ci/install-deps.sh)");
    let left = leftovers(&mark, Duration::from_secs(5));
    assert!(left.is_empty(), "processes left behind: {left:?}");
    check_ok(
        out.status.code().unwrap_or(-1),
        &String::from_utf8_lossy(&out.stdout),
        &String::from_utf8_lossy(&out.stderr),
        tag,
        n,
    );
}

#[test]
fn ours_pmi2_under_hydra() {
    hydra(&progs().ours2, "pmi2", 4);
}

#[test]
fn ours_pmi1_under_hydra() {
    hydra(&progs().ours1, "pmi1", 4);
}

// ------------------------------------------------------------------ singletons

fn singleton(prog: &str, tag: &str) {
    let mut cmd = Command::new(prog);
    for v in ["PMI_FD", "PMI_PORT", "PMI_ID", "PMI_RANK", "PMI_SIZE", "PMI_SPAWNED", "PMI_JOBID"] {
        cmd.env_remove(v);
    }
    let out = cmd.stdin(Stdio::null()).output().expect("run singleton");
    check_ok(
        out.status.code().unwrap_or(-1),
        &String::from_utf8_lossy(&out.stdout),
        &String::from_utf8_lossy(&out.stderr),
        tag,
        1,
    );
}

#[test]
fn ours_pmi2_singleton() {
    singleton(&progs().ours2, "pmi2");
}

#[test]
fn ours_pmi1_singleton() {
    singleton(&progs().ours1, "pmi1");
}

/// PMI-2 `spawn` from Slurm's client (`PMI2_Job_Spawn`): the children start with
/// spawned=1 and their own size, read the parent's pre-put pair, and the parent gets rc 0
/// with a job id (the client insists on one). On one node and on simulated nodes with an
/// info `host`.
#[test]
fn slurm_client_spawn() {
    for extra in [vec![], vec!["-launcher", "fork", "-hosts", "n1,n2,n3"]] {
        let mut args = extra.clone();
        args.extend(["-n", "1", &progs().spawn]);
        if !extra.is_empty() {
            args.push("n3");
        }
        let r = run(&args, b"");
        assert_eq!(r.status, 0, "{extra:?}: {}", r.stderr);
        let mut lines: Vec<&str> = r.stdout.lines().collect();
        lines.sort();
        assert_eq!(
            lines,
            vec![
                "pmi2 child 0/2 spawned=1 value=port-from-parent",
                "pmi2 child 1/2 spawned=1 value=port-from-parent",
                "pmi2 spawn rc=0",
            ],
            "{extra:?}: {}",
            r.stderr
        );
    }
}

//! `libi-pmicheck` (the PMI conformance tester, crate `pmicheck/`) run as the ranks of real
//! process managers:
//!
//! * under `libi-mpiexec` on one node (n = 4) and over 8 fork-simulated nodes (n = 16),
//!   PMI-1 and PMI-2: every check must pass (no FAIL line, exit 0);
//! * under Debian's `mpiexec.hydra` (n = 4) and under Slurm's `srun --mpi=pmi2` (single-node
//!   Slurm of `ci/with-slurm.sh`), PMI-1 and PMI-2: the tool must run to completion and print
//!   one line per check and the summary — which checks those servers fail are facts about them
//!   (docs/pmicheck.md).
//!
//! The binary sits next to `libi-mpiexec`; `cargo test --workspace` builds it (the crate has an
//! integration test of its own). For `cargo test -p libi-mpiexec` alone, run
//! `cargo build --workspace` first.

mod common;

use common::{run, run_program, Run, MPIEXEC};
use std::path::{Path, PathBuf};
use std::process::Command;

fn pmicheck() -> PathBuf {
    let p = Path::new(MPIEXEC).parent().expect("target dir").join("libi-pmicheck");
    assert!(
        p.exists(),
        "{} is missing: build it first (`cargo build --workspace`, or `cargo build -p \
         libi-pmicheck` with the same profile and target dir)",
        p.display()
    );
    p
}

/// The check names the tool runs in this mode (`--list`).
fn names(pmi2: bool) -> Vec<String> {
    let mut c = Command::new(pmicheck());
    c.arg("--list");
    if pmi2 {
        c.arg("--pmi2");
    }
    let out = c.output().expect("libi-pmicheck --list");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect()
}

/// Ran to completion: one `PASS|FAIL|SKIP name: …` line per check (exactly once each, from
/// rank 0 only), then the summary `N passed, N failed[, N skipped]` whose counts match the
/// lines, and an exit status that says whether anything failed. Returns the FAIL lines.
fn completed(r: &Run, pmi2: bool) -> Vec<String> {
    let ctx = format!("status {}\nstdout:\n{}\nstderr:\n{}", r.status, r.stdout, r.stderr);
    let lines: Vec<&str> = r.stdout.lines().collect();
    let summary = *lines.last().unwrap_or_else(|| panic!("no output\n{ctx}"));
    let nums: Vec<usize> = summary
        .split(", ")
        .map(|part| {
            let (n, what) = part.split_once(' ').unwrap_or_else(|| panic!("summary {summary:?}"));
            assert!(["passed", "failed", "skipped"].contains(&what), "summary {summary:?}\n{ctx}");
            n.parse().unwrap_or_else(|_| panic!("summary {summary:?}\n{ctx}"))
        })
        .collect();
    assert!(
        summary.contains(" passed, ") && (nums.len() == 2 || nums.len() == 3),
        "summary line {summary:?}\n{ctx}"
    );
    let body = &lines[..lines.len() - 1];
    let count = |tag: &str| body.iter().filter(|l| l.starts_with(tag)).count();
    assert_eq!(count("PASS "), nums[0], "{ctx}");
    assert_eq!(count("FAIL "), nums[1], "{ctx}");
    assert_eq!(count("SKIP "), nums.get(2).copied().unwrap_or(0), "{ctx}");
    assert_eq!(body.len(), nums.iter().sum::<usize>(), "only check lines expected\n{ctx}");
    for name in names(pmi2) {
        let n = body
            .iter()
            .filter(|l| {
                l.split_once(' ').is_some_and(|(_, rest)| rest.starts_with(&format!("{name}:")))
            })
            .count();
        assert_eq!(n, 1, "check {name} printed {n} times\n{ctx}");
    }
    assert_eq!(r.status == 0, nums[1] == 0, "exit status vs failures\n{ctx}");
    body.iter().filter(|l| l.starts_with("FAIL ")).map(|l| l.to_string()).collect()
}

fn all_pass(r: &Run, pmi2: bool) {
    let fails = completed(r, pmi2);
    assert!(fails.is_empty(), "failures under libi-mpiexec:\n{}\n{}", fails.join("\n"), r.stderr);
    assert_eq!(r.status, 0, "{}", r.stderr);
}

fn mode(pmi2: bool) -> Vec<&'static str> {
    if pmi2 {
        vec!["--pmi2"]
    } else {
        vec![]
    }
}

#[test]
fn libi_one_node() {
    let exe = pmicheck();
    let exe = exe.to_str().expect("utf-8 path");
    for pmi2 in [false, true] {
        let mut a = vec!["-n", "4", exe];
        a.extend(mode(pmi2));
        all_pass(&run(&a, b""), pmi2);
    }
}

#[test]
fn libi_eight_simulated_nodes() {
    let exe = pmicheck();
    let exe = exe.to_str().expect("utf-8 path");
    let hosts = "n1:2,n2:2,n3:2,n4:2,n5:2,n6:2,n7:2,n8:2";
    for pmi2 in [false, true] {
        let mut a = vec!["-launcher", "fork", "-hosts", hosts, "-n", "16", exe];
        a.extend(mode(pmi2));
        let r = run(&a, b"");
        all_pass(&r, pmi2);
        assert!(r.stdout.contains("8 nodes, agrees with the hostnames"), "{}", r.stdout);
    }
}

/// `--spawn`: the tool spawns 2 copies of itself, which check `PMI_SPAWNED` and the
/// parent's pre-put pair; both protocols, one node and simulated nodes.
#[test]
fn libi_spawn_passes() {
    let exe = pmicheck();
    let exe = exe.to_str().expect("utf-8 path");
    for pmi2 in [false, true] {
        for hosts in [None, Some("n1,n2,n3,n4")] {
            let mut a = vec![];
            if let Some(h) = hosts {
                a.extend(["-launcher", "fork", "-hosts", h]);
            }
            a.extend(["-n", "2", exe, "--spawn"]);
            a.extend(mode(pmi2));
            let r = run(&a, b"");
            let spawn = r.stdout.lines().find(|l| l.contains(" spawn: ")).unwrap_or_default();
            assert!(spawn.starts_with("PASS "), "pmi2={pmi2} {hosts:?}: {}", r.stdout);
            all_pass(&r, pmi2);
        }
    }
}

/// Debian's Hydra (MPICH 4.0): runs to completion; its differences are reported, not asserted.
#[test]
fn under_hydra() {
    let exe = pmicheck();
    let exe = exe.to_str().expect("utf-8 path");
    for pmi2 in [false, true] {
        let mut a = vec!["-n", "4", exe];
        a.extend(mode(pmi2));
        let r = run_program("mpiexec.hydra", &a, b"");
        let fails = completed(&r, pmi2);
        eprintln!(
            "Hydra, {}: {} failed\n{}",
            if pmi2 { "PMI-2" } else { "PMI-1" },
            fails.len(),
            fails.join("\n")
        );
    }
}

/// One Slurm job at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn slurm() -> Option<std::sync::MutexGuard<'static, ()>> {
    if std::env::var("LIBI_TEST_SLURM").is_ok() {
        return Some(SERIAL.lock().unwrap_or_else(|p| p.into_inner()));
    }
    assert!(
        std::env::var("LIBI_REQUIRE_SLURM_TESTS").is_err(),
        "LIBI_REQUIRE_SLURM_TESTS is set but no Slurm is up: run under ci/with-slurm.sh"
    );
    eprintln!("Slurm tests skipped: run under ci/with-slurm.sh -- cargo test");
    None
}

/// Slurm's pmi2 plugin (`srun --mpi=pmi2`), which serves PMI-1 and PMI-2: runs to completion.
#[test]
fn under_slurm_srun() {
    let Some(_serial) = slurm() else { return };
    let exe = pmicheck();
    let exe = exe.to_str().expect("utf-8 path");
    for pmi2 in [false, true] {
        let mut a = vec!["--mpi=pmi2", "-N1", "-n", "4", "-t", "5", exe, "--fence-timeout", "20"];
        a.extend(mode(pmi2));
        let r = run_program("srun", &a, b"");
        let fails = completed(&r, pmi2);
        eprintln!(
            "Slurm, {}: {} failed\n{}",
            if pmi2 { "PMI-2" } else { "PMI-1" },
            fails.len(),
            fails.join("\n")
        );
    }
}

//! PMGR collectives end to end: C programs compiled against our `libpmgr_collective.so` (the
//! original C API) and a raw v8 client that uses no library at all, run by `libi-mpiexec
//! --pmgr` on one node and over simulated nodes.

mod common;

use common::{failure_line, run};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// target/<profile>, where cargo puts `libpmgr_collective.so`.
fn lib_dir() -> PathBuf {
    let dir = Path::new(common::MPIEXEC).parent().expect("target dir").to_path_buf();
    assert!(
        dir.join("libpmgr_collective.so").exists(),
        "no libpmgr_collective.so in {dir:?}: build the workspace first (cargo build --workspace)"
    );
    dir
}

fn programs() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let out =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("pmgr-{}", std::process::id()));
        std::fs::create_dir_all(&out).expect("mkdir");
        let lib = lib_dir();
        let cc = |name: &str, src: &Path, with_lib: bool| {
            let mut c = Command::new("cc");
            c.arg("-O2").arg("-Wall").arg("-o").arg(out.join(name)).arg(src);
            if with_lib {
                c.arg("-I").arg(root.join("pmgr/include"));
                c.arg("-L").arg(&lib).arg("-lpmgr_collective");
                c.arg(format!("-Wl,-rpath,{}", lib.display()));
            }
            let st = c.status().expect("cc");
            assert!(st.success(), "cc {name}");
        };
        cc("pmgr_test", &root.join("pmgr/tests/c/pmgr_test.c"), true);
        cc("pmgr_mismatch", &root.join("tests/programs/pmgr_mismatch.c"), true);
        cc("pmgr_raw", &root.join("tests/programs/pmgr_raw.c"), false);
        out
    })
}

fn prog(name: &str) -> String {
    programs().join(name).to_string_lossy().into_owned()
}

fn hosts(n: usize, slots: u32) -> String {
    (1..=n).map(|i| format!("n{i}:{slots}")).collect::<Vec<_>>().join(",")
}

fn all_ok(r: &common::Run, n: usize, suffix: &str) {
    assert_eq!(r.status, 0, "stderr: {}", r.stderr);
    let ok = r.stdout.lines().filter(|l| l.ends_with(suffix)).count();
    assert_eq!(ok, n, "stdout: {}\nstderr: {}", r.stdout, r.stderr);
}

/// Every operation with verified contents through our C ABI, n = 1, 2, 7 on one node.
#[test]
fn c_api_single_node() {
    for n in [1usize, 2, 7] {
        let r = run(&["--pmgr", "-n", &n.to_string(), &prog("pmgr_test")], b"");
        all_ok(&r, n, &format!("of {n}: ok"));
    }
}

/// n = 64 over 16 simulated nodes x 4: collectives combine over the NLA tree.
#[test]
fn c_api_64_ranks_16_nodes() {
    for shape in ["greedy", "binomial"] {
        let r = run(
            &[
                "--pmgr",
                "-launcher",
                "fork",
                "-hosts",
                &hosts(16, 4),
                "--tree",
                shape,
                "-n",
                "64",
                &prog("pmgr_test"),
            ],
            b"",
        );
        all_ok(&r, 64, "of 64: ok");
    }
}

/// A client that speaks raw v8 bytes, one byte per write, on one node and over a chain.
#[test]
fn raw_wire_protocol() {
    let r = run(&["--pmgr", "-n", "5", &prog("pmgr_raw")], b"");
    all_ok(&r, 5, "raw ok");
    let r = run(
        &[
            "--pmgr",
            "-launcher",
            "fork",
            "-hosts",
            &hosts(3, 2),
            "--tree",
            "chain",
            "-n",
            "6",
            &prog("pmgr_raw"),
        ],
        b"",
    );
    all_ok(&r, 6, "raw ok");
}

/// pmgr_abort (on its own connection, after CLOSE, as v1.0_7 does): the job ends with the
/// user's code and a message naming the rank.
#[test]
fn abort_sets_exit_status() {
    let r = run(
        &[
            "--pmgr",
            "-launcher",
            "fork",
            "-hosts",
            "n1:2,n2:2",
            "-n",
            "4",
            &prog("pmgr_test"),
            "abort",
        ],
        b"",
    );
    assert_eq!(r.status, 7, "{}", r.stderr);
    let line = failure_line(&r);
    assert!(
        line.contains("rank 1") && line.contains("pmgr_abort") && line.contains("gives up"),
        "{line}"
    );
}

/// Ranks calling different collectives: the job fails naming the ranks and the difference.
#[test]
fn mismatched_collectives_fail_the_job() {
    let r = run(
        &["--pmgr", "-launcher", "fork", "-hosts", "n1:2,n2:2", "-n", "4", &prog("pmgr_mismatch")],
        b"",
    );
    assert_ne!(r.status, 0, "{}", r.stderr);
    let line = failure_line(&r);
    assert!(line.contains("mismatch") && line.contains("rank 1"), "{line}");
}

//! The C ABI: compile `pmgr/tests/c/pmgr_test.c` against `include/` and
//! `libpmgr_collective.so`, run it as 4 processes with `MPIRUN_*` against the in-process test
//! server (two NLAs), and as a singleton.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use libi_test_servers::pmgr::{env_for, TestServer};

fn lib_dir() -> PathBuf {
    // target/<profile>/deps/c_abi-<hash> -> target/<profile>
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().and_then(Path::parent).expect("target dir").to_path_buf();
    assert!(dir.join("libpmgr_collective.so").exists(), "no libpmgr_collective.so in {dir:?}");
    dir
}

fn build_test_program() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let lib = lib_dir();
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let k = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let out = std::env::temp_dir().join(format!("pmgr_test_{}_{k}", std::process::id()));
    let st = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&out)
        .arg(root.join("tests/c/pmgr_test.c"))
        .arg("-I")
        .arg(root.join("include"))
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lpmgr_collective")
        .status()
        .expect("run cc");
    assert!(st.success(), "compiling pmgr_test.c failed");
    out
}

fn run_ranks(prog: &Path, srv: &TestServer, args: &[&str]) -> Vec<std::process::Output> {
    let kids: Vec<_> = (0..srv.nprocs)
        .map(|r| {
            Command::new(prog)
                .args(args)
                .env_clear()
                .envs(env_for(srv, r, 31337))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn pmgr_test")
        })
        .collect();
    kids.into_iter().map(|k| k.wait_with_output().expect("wait")).collect()
}

#[test]
fn c_program_four_ranks_two_nlas() {
    let prog = build_test_program();
    let mut srv = TestServer::start(4, vec![vec![0, 3], vec![1, 2]]);
    let outs = run_ranks(&prog, &srv, &["abort"]);
    for (r, o) in outs.iter().enumerate() {
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success() && text.contains(&format!("rank {r} of 4: ok")),
            "rank {r}: {:?}\n{text}\n{}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let rep = srv.join();
    assert_eq!(rep.error, None);
    assert_eq!(rep.ops.last(), Some(&pmgr::wire::Op::Close));
    let aborts = srv.wait_aborts(1);
    assert_eq!(aborts.len(), 1);
    assert_eq!(aborts[0].code, Some(-7));
    assert_eq!(aborts[0].rank, Some(1));
    assert_eq!(aborts[0].message, b"rank 1 gives up: testing");
    let _ = std::fs::remove_file(&prog);
}

#[test]
fn c_program_singleton() {
    let prog = build_test_program();
    for env in [vec![], vec![("MPIRUN_RANK", "0"), ("MPIRUN_NPROCS", "1"), ("MPIRUN_ID", "3")]] {
        let o = Command::new(&prog).env_clear().envs(env).output().expect("run");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(String::from_utf8_lossy(&o.stdout).contains("rank 0 of 1: ok"));
    }
    // Invalid environment: exit(1) with a message, as the original library does.
    let o = Command::new(&prog)
        .env_clear()
        .envs([("MPIRUN_RANK", "5"), ("MPIRUN_NPROCS", "2"), ("MPIRUN_ID", "3")])
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("MPIRUN_RANK"));
    let _ = std::fs::remove_file(&prog);
}

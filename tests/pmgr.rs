//! PMGR collectives end to end: C programs compiled against our `libpmgr_collective.so` (the
//! original C API) and a raw v8 client that uses no library at all, run by `libi-mpiexec
//! --pmgr` on one node and over simulated nodes.

mod common;

use common::{failure_line, run, run_env};
use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

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
        cc("pmgr_exit", &root.join("tests/programs/pmgr_exit.c"), false);
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

/// The four shapes of the exit-race tests: one node or four simulated ones, with the
/// server traffic of a v1.0_7 client without trees (collectives through the server, the
/// last a GATHER whose CLOSE follows at once) or with them (`MPIRUN_USE_TREES=1`: one
/// GATHER, the ranks wire up among themselves, then CLOSE).
fn exit_shapes() -> Vec<(&'static str, Vec<&'static str>, &'static str)> {
    let nodes = vec!["-launcher", "fork", "-hosts", "n1:1,n2:1,n3:1,n4:1"];
    vec![
        ("1 node, classic", vec![], "0"),
        ("1 node, trees", vec![], "1"),
        ("4 nodes, classic", nodes.clone(), "0"),
        ("4 nodes, trees", nodes, "1"),
    ]
}

/// Issue 17.1: `pmgr_close` does not wait for the server, so a rank's CLOSE and its exit
/// reach the NLA in any order (and a CLOSE sent behind a GATHER still in flight is read only
/// once the gather completes). A rank that closed is a clean exit whatever the order: 100
/// runs of each shape (the shapes run side by side) all exit 0.
#[test]
fn exit_right_after_close_is_clean() {
    let runs: usize =
        std::env::var("LIBI_PMGR_EXIT_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(100);
    let exe = prog("pmgr_exit");
    let threads: Vec<_> = exit_shapes()
        .into_iter()
        .map(|(name, hosts, trees)| {
            let exe = exe.clone();
            std::thread::spawn(move || {
                let mut args = vec!["--pmgr"];
                args.extend(hosts);
                args.extend(["-n", "4", exe.as_str()]);
                let (mut total, mut worst) = (Duration::ZERO, Duration::ZERO);
                for i in 0..runs {
                    let t = Instant::now();
                    let r = run_env(&args, b"", &[("MPIRUN_USE_TREES", trees)]);
                    let dt = t.elapsed();
                    total += dt;
                    worst = worst.max(dt);
                    assert_eq!(r.status, 0, "{name}: run {i} of {runs} failed: {}", r.stderr);
                    assert!(r.stderr.is_empty(), "{name}: run {i}: {}", r.stderr);
                }
                eprintln!(
                    "{name}: {runs} runs, mean {:.0} ms, worst {:.0} ms",
                    total.as_secs_f64() * 1e3 / runs as f64,
                    worst.as_secs_f64() * 1e3
                );
            })
        })
        .collect();
    for t in threads {
        t.join().expect("shape thread");
    }
}

/// The other side of the same rule: a rank that exits 0 without sending CLOSE fails the job,
/// in every shape.
#[test]
fn exit_without_close_fails_the_job() {
    let exe = prog("pmgr_exit");
    for (name, hosts, trees) in exit_shapes() {
        let mut args = vec!["--pmgr"];
        args.extend(hosts);
        args.extend(["-n", "4", exe.as_str(), "noclose"]);
        let t = Instant::now();
        let r = run_env(&args, b"", &[("MPIRUN_USE_TREES", trees)]);
        eprintln!("{name}: {:.0} ms", t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(r.status, 1, "{name}: {}", r.stderr);
        let line = failure_line(&r);
        assert!(line.contains("exited with code 0 without calling PMGR close"), "{name}: {line}");
    }
}

/// Connect to the PMGR port of a job from outside it (this test process: same user, not a
/// process of any rank) and write `bytes`; returns whether the NLA closed the connection on
/// us within 10 s.
fn outsider(port: u16, bytes: &[u8]) -> bool {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect to PMGR port");
    let _ = s.write_all(bytes);
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(n) => n == 0,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

fn ints(xs: &[i32]) -> Vec<u8> {
    xs.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

/// Issue 17.2: a process outside the job that claims rank 0 on the PMGR port (a handshake,
/// then a collective; a second handshake that takes rank 1's place with an ALLGATHER of
/// junk; a forged abort record for rank 0) is refused: the NLA closes on it, and the job —
/// every rank's collectives checked — ends as it would have without it.
#[test]
fn outsider_claiming_a_rank_is_refused() {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("pmgr-go-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    let go = dir.join("go");
    // Each rank says where its NLA's PMGR port is, then waits for the go before using it.
    let script = format!(
        "echo port=$MPIRUN_PORT; while [ ! -e {} ]; do sleep 0.02; done; exec {}",
        go.display(),
        prog("pmgr_test")
    );
    let mut live = common::start(
        &["--pmgr", "-launcher", "fork", "-hosts", "n1:1,n2:1", "-n", "2", "sh", "-c", &script],
        &[],
    );
    let stdout = live.child.stdout.take().expect("stdout");
    let mut lines = std::io::BufReader::new(stdout).lines();
    let mut ports = Vec::new();
    while ports.len() < 2 {
        let line = lines.next().expect("a port line").expect("read stdout");
        if let Some(p) = line.strip_prefix("port=") {
            ports.push(p.parse::<u16>().expect("port"));
        }
    }
    let t = Instant::now();
    let mut hello0 = ints(&[8, 0, 3]); // handshake as rank 0, BARRIER
    hello0.extend(ints(&[7, 4, 666])); // ALLGATHER
    let mut hello1 = ints(&[8, 1, 7, 4]); // as rank 1: ALLGATHER 4 bytes of junk
    hello1.extend([0xde, 0xad, 0xbe, 0xef]);
    let mut forged = ints(&[-9, 0, 7]); // abort record: code -9, rank 0, "forged"
    forged.extend(b"forged\0");
    for port in &ports {
        for bytes in [&hello0, &hello1, &forged] {
            assert!(outsider(*port, bytes), "the NLA kept an outsider's connection open");
        }
    }
    eprintln!("6 outsider connections refused in {:.0} ms", t.elapsed().as_secs_f64() * 1e3);
    std::fs::write(&go, b"").expect("go");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let (r, _) = live.finish(Instant::now());
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(r.status, 0, "{}", r.stderr);
    for rank in 0..2 {
        let want = format!("rank {rank} of 2: ok");
        assert!(rest.iter().any(|l| l == &want), "{want} missing: {rest:?}\n{}", r.stderr);
    }
    assert!(!r.stderr.contains("forged") && !r.stderr.contains("pmgr_abort"), "{}", r.stderr);
    assert!(r.stderr.contains("refused a PMGR connection"), "{}", r.stderr);
    let warnings = r.stderr.lines().filter(|l| l.contains(": warning: ")).count();
    assert!(warnings <= 4, "a line, then a summary, per NLA: {}", r.stderr);
}

/// A rank's pmgr_abort record with binary bytes in its message: printed escaped, on one line.
#[test]
fn abort_message_with_binary_bytes_is_escaped() {
    // bash: an abort record through /dev/tcp (code -3, rank 0, a message with an escape
    // sequence, a bell, a newline and an invalid byte), then wait for the NLA to close it.
    let script = r#"exec 3<>/dev/tcp/127.0.0.1/$MPIRUN_PORT
printf '\xfd\xff\xff\xff\x00\x00\x00\x00\x14\x00\x00\x00bad\x1b[2J\x07news\nxx\xffend\x00' >&3
cat <&3; exit 0"#;
    let r = run(&["--pmgr", "-n", "1", "bash", "-c", script], b"");
    assert_eq!(r.status, 3, "{}", r.stderr);
    let line = failure_line(&r);
    assert!(!r.stderr.contains('\x1b') && !r.stderr.contains('\x07'), "{:?}", r.stderr);
    assert!(
        line.contains(r"called pmgr_abort (code -3): bad\x1b[2J\x07news\x0axx\xffend"),
        "{line}"
    );
}

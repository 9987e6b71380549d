//! Multi-node end-to-end tests with the `fork` launcher: every NLA runs on this machine but
//! acts as its own node (own listener, own children, own ranks), connected over TCP along
//! the launch tree — the same code paths as ssh, minus ssh. Real ssh across network-namespace
//! hosts is in `ssh.rs`. Tree logic that needs no real I/O (where gets are answered, pushed
//! fences, batched launch order, launch timeouts) is tested on the real node cores in the
//! simulator: `sim/tests/logic.rs` and `sim/tests/props.rs`.

mod common;

use common::{hello_lines, prog, run, run_program, Run, MPIEXEC};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn hosts(n: usize, slots: u32) -> String {
    (1..=n).map(|i| format!("n{i}:{slots}")).collect::<Vec<_>>().join(",")
}

/// MPICH hello over 4 simulated nodes, 2 ranks each, with every tree shape.
#[test]
fn mpich_hello_4_nodes_every_shape() {
    let h = hosts(4, 2);
    for shape in ["greedy", "flat", "chain", "binomial", "kary:2"] {
        let r = run(
            &["-launcher", "fork", "-hosts", &h, "--tree", shape, "-n", "8", &prog("hello")],
            b"",
        );
        hello_lines(&r, 8);
    }
}

/// 64 simulated nodes x 4 ranks of a light PMI client: put one key, fence, get every
/// rank's key; all values checked by the client itself.
#[test]
fn pmi_exchange_64_nodes() {
    let h = hosts(64, 4);
    for shape in ["greedy", "flat", "binomial", "kary:4"] {
        let r = run(
            &[
                "-launcher",
                "fork",
                "-hosts",
                &h,
                "--tree",
                shape,
                "-n",
                "256",
                &prog("pmi_exchange"),
            ],
            b"",
        );
        assert_eq!(r.status, 0, "{shape}: {}", r.stderr);
        let ok = r.stdout.lines().filter(|l| l.ends_with(" of 256 ok 256")).count();
        assert_eq!(ok, 256, "{shape}: {}", r.stdout);
    }
}

/// Failures cross the tree: the abort of a rank on a deep node ends the job with its code,
/// and the message names the rank and its node.
#[test]
fn abort_and_exit_codes_across_nodes() {
    let h = hosts(4, 1);
    let r = run(
        &[
            "-launcher",
            "fork",
            "-hosts",
            &h,
            "--tree",
            "chain",
            "-n",
            "4",
            &prog("fail"),
            "abort",
            "7",
        ],
        b"",
    );
    assert_eq!(r.status, 7, "{}", r.stderr);
    assert!(r.stderr.contains("rank 1 on n2 called MPI_Abort"), "{}", r.stderr);
    let r = run(
        &[
            "-launcher",
            "fork",
            "-hosts",
            &h,
            "--tree",
            "binomial",
            "-n",
            "4",
            &prog("fail"),
            "exit",
            "3",
        ],
        b"",
    );
    assert_eq!(r.status, 3, "{}", r.stderr);
    assert!(r.stderr.contains("rank 1 on n2 exited with code 3"), "{}", r.stderr);
    let r = run(&["-launcher", "fork", "-hosts", &h, "-n", "4", &prog("fail"), "segv"], b"");
    assert_eq!(r.status, 139, "{}", r.stderr);
}

/// stdin reaches rank 0 wherever it is; output of every node arrives, labelled.
#[test]
fn stdio_across_nodes() {
    let r = run(
        &["-launcher", "fork", "-hosts", "n1,n2,n3", "--tree", "chain", "-l", "-n", "3", "cat"],
        b"to rank zero\n",
    );
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert_eq!(r.stdout, "[0] to rank zero\n");
    let r = run(
        &[
            "-launcher",
            "fork",
            "-hosts",
            "n1,n2,n3",
            "--tree",
            "chain",
            "-l",
            "-n",
            "3",
            "sh",
            "-c",
            "echo $PMI_HOSTNAME $MPI_LOCALNRANKS",
        ],
        b"",
    );
    let mut lines: Vec<&str> = r.stdout.lines().collect();
    lines.sort();
    assert_eq!(lines, vec!["[0] n1 1", "[1] n2 1", "[2] n3 1"]);
}

/// The process mapping MPICH sees describes the block layout over the nodes.
#[test]
fn process_mapping_multi_node() {
    let script = r#"printf 'cmd=init pmi_version=1 pmi_subversion=1\n' >&$PMI_FD; read -r x <&$PMI_FD
printf 'cmd=get_my_kvsname\n' >&$PMI_FD; read -r k <&$PMI_FD; k=${k##*kvsname=}
printf 'cmd=get kvsname=%s key=PMI_process_mapping\n' "$k" >&$PMI_FD; read -r m <&$PMI_FD
printf 'cmd=finalize\n' >&$PMI_FD; read -r x <&$PMI_FD; echo "${m##*value=}""#;
    let r = run(&["-launcher", "fork", "-hosts", "a:2,b:2", "-n", "6", "bash", "-c", script], b"");
    assert_eq!(r.status, 0, "{}", r.stderr);
    for l in r.stdout.lines() {
        assert_eq!(l, "(vector,(0,2,2),(0,1,2))");
    }
    assert_eq!(r.stdout.lines().count(), 6);
}

/// Highest number of sockets `pid` held while it ran.
fn max_sockets_while_running(args: &[&str]) -> usize {
    let mut child = Command::new(MPIEXEC)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("start");
    let pid = child.id();
    let mut max_sockets = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        let n = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| {
                d.flatten()
                    .filter(|e| {
                        std::fs::read_link(e.path())
                            .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
                    })
                    .count()
            })
            .unwrap_or(0);
        max_sockets = max_sockets.max(n);
        assert!(Instant::now() < deadline, "job did not end");
        std::thread::sleep(Duration::from_millis(20));
    }
    let st = child.wait().expect("wait");
    assert!(st.success());
    max_sockets
}

/// The front end holds O(children of the root) connections, not O(nodes): with 64 NLAs in
/// a 4-ary tree it has 4 child connections, a listener, the runtime's signal socketpair and
/// the control socket for tools (`--proctable`); with a flat tree (for contrast) all 64.
#[test]
fn front_end_connections_bounded() {
    let h = hosts(64, 1);
    let kary = max_sockets_while_running(&[
        "-launcher",
        "fork",
        "-hosts",
        &h,
        "--tree",
        "kary:4",
        "-n",
        "64",
        "sleep",
        "2",
    ]);
    assert!(kary <= 9, "front end held {kary} sockets for 64 NLAs in a 4-ary tree");
    let flat = max_sockets_while_running(&[
        "-launcher",
        "fork",
        "-hosts",
        &h,
        "--tree",
        "flat",
        "-n",
        "64",
        "sleep",
        "2",
    ]);
    assert!(flat >= 64, "the sampling sees connections: flat tree gave {flat}");
}

/// A bad host file is refused before anything starts, naming the file and line.
#[test]
fn bad_hostfile() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let f = dir.join(format!("bad-hosts-{}", std::process::id()));
    std::fs::write(&f, "n1:2\nn2:zero\n").expect("write");
    let out = Command::new(MPIEXEC)
        .args(["-f", &f.to_string_lossy(), "-n", "2", "true"])
        .stdin(Stdio::null())
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("line 2") && e.contains(&*f.to_string_lossy()), "{e}");
}

/// NLAs started all at once by a resource manager's step join the front end, which adopts
/// its own children and redirects the others to their parents in the NLA tree. `local-srun`
/// (tests/tools) stands in for srun on one machine (one NLA per --nodelist entry, as
/// slurmd would start them); with `--max-conn 3` most NLAs must be redirected.
#[test]
fn slurm_style_join_and_redirect() {
    let srun = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/tools/local-srun");
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let report = dir.join(format!("join-report-{}.json", std::process::id()));
    let rp = report.to_string_lossy().into_owned();
    let h = hosts(8, 2);
    let r = run(
        &[
            "-launcher",
            "slurm",
            "-launcher-exec",
            srun,
            "-hosts",
            &h,
            "--tree",
            "flat",
            "--max-conn",
            "3",
            "--report",
            &rp,
            "-n",
            "16",
            &prog("hello"),
        ],
        b"",
    );
    hello_lines(&r, 16);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).expect("report")).expect("json");
    let reports = v["reports"].as_array().expect("reports");
    assert_eq!(reports.len(), 9, "front end + 8 NLAs reported");
    let fe_children = reports[0]["launches"].as_array().map(Vec::len).unwrap_or(0);
    assert!(fe_children <= 3, "front end adopted {fe_children} children");
    let deeper: usize =
        reports[1..].iter().map(|n| n["launches"].as_array().map(Vec::len).unwrap_or(0)).sum();
    assert_eq!(fe_children + deeper, 8, "every NLA has a parent");
}

/// Every simulated node binds its own ranks by local rank: `MPI_LOCALRANKID` i gets the
/// i-th entry on each node; a local rank past the list is not bound (as under Hydra): it keeps
/// the affinity we started with.
#[test]
fn bind_to_by_local_rank_on_each_node() {
    let c = common::my_cpus();
    if c.len() < 2 {
        eprintln!("binding test skipped: only cpus {c:?}");
        return;
    }
    let (a, b) = (c[0].to_string(), c[1].to_string());
    let spec = format!("user:{b},{a}");
    let r = run(
        &[
            "-launcher",
            "fork",
            "-hosts",
            "n1:2,n2:3",
            "-bind-to",
            &spec,
            "-n",
            "5",
            "sh",
            "-c",
            common::SHOW_CPUS,
        ],
        b"",
    );
    let got = common::rank_cpus(&r, 5);
    let mine = std::fs::read_to_string("/proc/self/status").expect("status");
    let mine = mine.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).expect("cpus");
    let mine = mine.trim().to_string();
    let want: Vec<(String, String)> = [("0", &b), ("1", &a), ("0", &b), ("1", &a), ("2", &mine)]
        .iter()
        .map(|(l, c)| (l.to_string(), c.to_string()))
        .collect();
    assert_eq!(got, want);
    // A cpu one node does not have is refused before anything starts.
    let r = run(
        &["-launcher", "fork", "-hosts", "n1:1,n2:1", "-bind-to", "user:0,9999", "-n", "2", "true"],
        b"",
    );
    assert_eq!(r.status, 2, "{}", r.stderr);
    assert!(
        r.stderr.starts_with("libi-mpiexec: -bind-to user:0,9999: cpu 9999 is not usable on n1"),
        "{}",
        r.stderr
    );
    // So is a device kind a node lacks (no Omni-Path here), naming the node.
    if !std::path::Path::new("/sys/class/infiniband").exists() {
        let r = run(
            &["-launcher", "fork", "-hosts", "n1:1,n2:1", "-bind-to", "hfi", "-n", "2", "true"],
            b"",
        );
        assert_eq!(r.status, 2, "{}", r.stderr);
        assert_eq!(r.stderr, "libi-mpiexec: -bind-to hfi: n1 has no Omni-Path (hfi) device\n");
    }
}

fn scratch(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("libi-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("mkdir");
    d
}

/// `-outfile-pattern`/`-errfile-pattern` as Hydra: %r rank, %g group, %h host, %p node index;
/// files mode 0600, created by the front end on a rank's first output, with the prefix of
/// `-prepend-pattern` on every line; nothing on our stdout.
#[test]
fn output_file_patterns() {
    use std::os::unix::fs::PermissionsExt;
    let d = scratch("outpat");
    let out = format!("{}/out.%r.%g.%h.%p", d.display());
    let err = format!("{}/err.%r", d.display());
    // A stale longer file is truncated.
    std::fs::write(d.join("err.0"), "stale stale stale\n").expect("write");
    let r = run(
        &[
            "-launcher",
            "fork",
            "-hosts",
            "n1:1,n2:2",
            "-outfile-pattern",
            &out,
            "-errfile-pattern",
            &err,
            "-prepend-pattern",
            "<%r@%h> ",
            "-n",
            "3",
            "sh",
            "-c",
            "echo o$PMI_RANK; echo e$PMI_RANK >&2",
        ],
        b"",
    );
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert_eq!(r.stdout, "");
    assert_eq!(r.stderr, "");
    for (rank, host, node) in [(0, "n1", 0), (1, "n2", 1), (2, "n2", 1)] {
        let f = d.join(format!("out.{rank}.0.{host}.{node}"));
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert_eq!(text, format!("<{rank}@{host}> o{rank}\n"));
        let mode = std::fs::metadata(&f).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", f.display());
        let e = std::fs::read_to_string(d.join(format!("err.{rank}"))).expect("err file");
        assert_eq!(e, format!("<{rank}@{host}> e{rank}\n"));
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// A pattern without %r gathers the ranks in one file; a bad field is a usage error.
#[test]
fn output_pattern_shared_file_and_errors() {
    let d = scratch("outpat2");
    let out = format!("{}/all.out", d.display());
    let r = run(&["-outfile-pattern", &out, "-n", "4", "echo", "x"], b"");
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert_eq!(std::fs::read_to_string(&out).expect("read"), "x\nx\nx\nx\n");
    // stdout and stderr into one file, spelt two ways: one handle, nothing overwritten.
    let two = format!("{}/./all.out", d.display());
    let lines = "echo one; sleep 0.2; echo two >&2; sleep 0.2; echo three";
    let r = run(
        &["-outfile-pattern", &out, "-errfile-pattern", &two, "-n", "1", "sh", "-c", lines],
        b"",
    );
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert_eq!(std::fs::read_to_string(&out).expect("read"), "one\ntwo\nthree\n");
    let r = run(&["-prepend-pattern", "%q", "-n", "1", "true"], b"");
    assert_eq!(r.status, 2);
    assert!(r.stderr.contains("%q"), "{}", r.stderr);
    let r = run(&["-l", "-prepend-pattern", "[%r] ", "-n", "1", "true"], b"");
    assert_eq!(r.status, 2, "{}", r.stderr);
    let _ = std::fs::remove_dir_all(&d);
}

/// `%t` is Hydra's timestamp: whole seconds since the job started, at each line's arrival.
#[test]
fn output_pattern_seconds() {
    let r = run(
        &["-prepend-pattern", "[%t|%r] ", "-n", "1", "sh", "-c", "echo a; sleep 1.2; echo b"],
        b"",
    );
    assert_eq!(r.status, 0, "{}", r.stderr);
    let secs: Vec<u64> = r
        .stdout
        .lines()
        .map(|l| {
            let (t, rest) = l.trim_start_matches('[').split_once('|').expect("prefix");
            assert!(rest == "0] a" || rest == "0] b", "{l}");
            t.parse().unwrap_or_else(|_| panic!("not whole seconds: {l}"))
        })
        .collect();
    assert_eq!(secs.len(), 2, "{}", r.stdout);
    assert!(secs[1] > secs[0], "{}", r.stdout);
}

/// An output file that cannot be opened or written loses rank output: as with Hydra, the job
/// is stopped (the ranks do not get to their `touch`) and ends with status 255, the file
/// named in a line of its own. Also when the failure comes after every rank ended.
#[test]
fn output_file_failures_fail_the_job() {
    let d = scratch("outfail");
    let marker = d.join("ran-on");
    let rest = format!("echo x; echo y >&2; sleep 5; touch {}.$PMI_RANK", marker.display());
    let missing = format!("{}/no-such-dir/out.%r", d.display());
    for (opt, path, says) in [
        ("-outfile-pattern", missing.as_str(), "cannot open output file"),
        ("-errfile-pattern", "/dev/full", "cannot write output file '/dev/full'"),
    ] {
        let r = run(&[opt, path, "-n", "2", "sh", "-c", &rest], b"");
        assert_eq!(r.status, 255, "{opt} {path}: {}", r.stderr);
        assert!(r.stderr.contains(says), "{opt} {path}: {}", r.stderr);
        let left: Vec<_> = std::fs::read_dir(&d).expect("ls").flatten().collect();
        assert!(left.is_empty(), "{opt} {path}: the ranks ran on: {left:?}");
    }
    let r = run(&["-outfile-pattern", "/dev/full", "-n", "2", "echo", "x"], b"");
    assert_eq!(r.status, 255, "{}", r.stderr);
    assert!(r.stderr.contains("cannot write output file '/dev/full'"), "{}", r.stderr);
    let _ = std::fs::remove_dir_all(&d);
}

/// An output file that is a FIFO is opened as a shell's `>` opens it: when it is first
/// written, waiting for its reader, and never on the front end's event loop. With a reader,
/// everything arrives; with none, the job still ends at its `MPIEXEC_TIMEOUT`, saying so.
#[test]
fn output_file_fifo_waits_for_its_reader() {
    let d = scratch("outfifo");
    let fifo = d.join("fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let path = fifo.to_string_lossy().into_owned();
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).expect("read the fifo"))
    };
    let r = run(&["-outfile-pattern", &path, "-n", "2", "sh", "-c", "echo x$PMI_RANK"], b"");
    assert_eq!(r.status, 0, "{}", r.stderr);
    let mut got: Vec<String> = reader.join().expect("reader").lines().map(str::to_string).collect();
    got.sort();
    assert_eq!(got, ["x0", "x1"]);
    // Nobody opens it: the ranks run and end, their stderr is written, the stdout waits.
    let r = common::run_env(
        &["-outfile-pattern", &path, "-n", "2", "sh", "-c", "echo x; echo y$PMI_RANK >&2"],
        b"",
        &[("MPIEXEC_TIMEOUT", "2")],
    );
    assert_eq!(r.status, 124, "{}", r.stderr);
    let mut lines: Vec<&str> = r.stderr.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "libi-mpiexec: job timed out after 2 s (MPIEXEC_TIMEOUT) while its output was still \
             being written; the rest of it is dropped",
            "y0",
            "y1"
        ]
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// Inside a (fabricated) PBS job the hosts come from $PBS_NODEFILE, one line per slot;
/// inside LSF from $LSB_MCPU_HOSTS; `-rmk user` ignores both; a host list wins.
#[test]
fn resource_manager_hosts() {
    let d = scratch("pbs");
    let nf = d.join("nodefile");
    std::fs::write(&nf, "n1\nn1\nn2\n").expect("write");
    let nf = nf.to_string_lossy().into_owned();
    let job = ["-launcher", "fork", "-prepend-pattern", "%h ", "sh", "-c", "echo $PMI_SIZE"];
    let lines = |r: &common::Run| {
        let mut v: Vec<String> = r.stdout.lines().map(str::to_string).collect();
        v.sort();
        v
    };
    let r = common::run_env(&job, b"", &[("PBS_NODEFILE", &nf)]);
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert_eq!(lines(&r), vec!["n1 3", "n1 3", "n2 3"]);
    let r = common::run_env(&job, b"", &[("LSB_MCPU_HOSTS", "l1 1 l2 2")]);
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert_eq!(lines(&r), vec!["l1 3", "l2 3", "l2 3"]);
    let mut a = vec!["-rmk", "lsf", "-n", "2"];
    a.extend(job);
    let r = common::run_env(&a, b"", &[("PBS_NODEFILE", &nf), ("LSB_MCPU_HOSTS", "l1 1 l2 2")]);
    assert_eq!(lines(&r), vec!["l1 2", "l2 2"], "{}", r.stderr);
    let mut a = vec!["-hosts", "h1", "-n", "1"];
    a.extend(job);
    let r = common::run_env(&a, b"", &[("PBS_NODEFILE", &nf)]);
    assert_eq!(lines(&r), vec!["h1 1"], "{}", r.stderr);
    let r = common::run_env(&["-rmk", "pbs", "true"], b"", &[]);
    assert_eq!(r.status, 2, "{}", r.stderr);
    let _ = std::fs::remove_dir_all(&d);
}

/// A fake ssh in `dir`: it appends `<its path> <host>` to `log` (the first argument not an
/// option is the host), then runs the remote command (its last argument) as ssh would.
fn fake_ssh(dir: &std::path::Path, log: &std::path::Path) -> String {
    let script = format!(
        "#!/bin/sh\nfor a; do last=$a; case $a in -*) ;; *) [ -z \"$host\" ] && host=$a;; esac; done\n\
         echo \"$0 $host\" >> {}\nexec sh -c \"$last\"\n",
        log.display()
    );
    common::write_script(&dir.join("fake-ssh"), &script)
}

/// Hydra's environment equivalents: HYDRA_HOST_FILE, HYDRA_LAUNCHER, HYDRA_LAUNCHER_EXEC;
/// options win.
#[test]
fn hydra_environment_variables() {
    let d = scratch("hydraenv");
    let hf = d.join("hosts");
    std::fs::write(&hf, "e1:1\ne2:1\n").expect("write");
    let hf = hf.to_string_lossy().into_owned();
    let env = [("HYDRA_HOST_FILE", hf.as_str()), ("HYDRA_LAUNCHER", "fork")];
    let r = common::run_env(&["-prepend-pattern", "%h ", "echo", "x"], b"", &env);
    assert_eq!(r.status, 0, "{}", r.stderr);
    let mut v: Vec<&str> = r.stdout.lines().collect();
    v.sort();
    assert_eq!(v, vec!["e1 x", "e2 x"]);
    let r = common::run_env(&["-hosts", "o1", "-prepend-pattern", "%h ", "echo", "x"], b"", &env);
    assert_eq!(r.stdout, "o1 x\n", "{}", r.stderr);
    let r = common::run_env(&["true"], b"", &[("HYDRA_LAUNCHER", "telnet")]);
    assert_eq!(r.status, 2);
    assert!(r.stderr.contains("HYDRA_LAUNCHER"), "{}", r.stderr);
    // HYDRA_LAUNCHER_EXEC: the ssh launcher runs this program (it logs the host it is
    // asked for, then runs the command as ssh would); -launcher-exec wins.
    let log = d.join("launched");
    let fake = fake_ssh(&d, &log);
    let other = format!("{fake}-2");
    std::fs::copy(&fake, &other).expect("cp");
    let env = [("HYDRA_LAUNCHER", "ssh"), ("HYDRA_LAUNCHER_EXEC", fake.as_str())];
    let r = common::run_env(&["-hosts", "s1,s2", "-n", "2", "true"], b"", &env);
    assert_eq!(r.status, 0, "{}", r.stderr);
    let mut v: Vec<String> =
        std::fs::read_to_string(&log).expect("log").lines().map(str::to_string).collect();
    v.sort();
    assert_eq!(v, [format!("{fake} s1"), format!("{fake} s2")]);
    std::fs::remove_file(&log).expect("rm");
    let r =
        common::run_env(&["-launcher-exec", &other, "-hosts", "s1", "-n", "1", "true"], b"", &env);
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert_eq!(std::fs::read_to_string(&log).expect("log"), format!("{other} s1\n"));
    let _ = std::fs::remove_dir_all(&d);
}

/// A host that is this machine is started directly, not through ssh (Hydra's autofork):
/// every host local (`localhost`, our own name), or one of several; HYDRA_LAUNCHER_AUTOFORK=0
/// turns that off.
#[test]
fn local_hosts_are_not_reached_through_ssh() {
    let d = scratch("autofork");
    let log = d.join("launched");
    let fake = fake_ssh(&d, &log);
    let me = nix::unistd::gethostname().expect("hostname").to_string_lossy().into_owned();
    let launched = || std::fs::read_to_string(&log).unwrap_or_default();
    let env = [("HYDRA_LAUNCHER_EXEC", fake.as_str())];
    for hosts in ["localhost:2".to_string(), format!("{me}:1,localhost:1")] {
        let r =
            common::run_env(&["-launcher", "ssh", "-hosts", &hosts, "-n", "2", "true"], b"", &env);
        assert_eq!(r.status, 0, "{hosts}: {}", r.stderr);
        assert_eq!(launched(), "", "{hosts}");
    }
    // One local host among others: only the others go through ssh.
    let r = common::run_env(
        &[
            "-launcher",
            "ssh",
            "-hosts",
            "localhost:1,far1:1",
            "-prepend-pattern",
            "%h ",
            "-n",
            "2",
            "echo",
            "x",
        ],
        b"",
        &env,
    );
    assert_eq!(r.status, 0, "{}", r.stderr);
    let mut v: Vec<&str> = r.stdout.lines().collect();
    v.sort();
    assert_eq!(v, ["far1 x", "localhost x"]);
    assert_eq!(launched(), format!("{fake} far1\n"));
    std::fs::remove_file(&log).expect("rm");
    let off = [("HYDRA_LAUNCHER_EXEC", fake.as_str()), ("HYDRA_LAUNCHER_AUTOFORK", "0")];
    let r =
        common::run_env(&["-launcher", "ssh", "-hosts", "localhost", "-n", "1", "true"], b"", &off);
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert_eq!(launched(), format!("{fake} localhost\n"));
    let _ = std::fs::remove_dir_all(&d);
}

/// The progress line of a launch longer than 1 s is for terminals only: with stderr a pipe
/// nothing of it appears.
#[test]
fn progress_line_silent_without_terminal() {
    let ssh = common::slow_launcher("silent");
    let r = run(
        &["-launcher", "ssh", "-launcher-exec", &ssh, "-hosts", "p1,p2", "-n", "2", "true"],
        b"",
    );
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("started"), "{}", r.stderr);
    assert_eq!(r.stderr, "");
}

/// On a terminal (a pseudo-terminal from script(1)) the line says how far the launch got.
#[test]
fn progress_line_on_terminal() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("no script(1): skipped");
        return;
    }
    let ssh = common::slow_launcher("tty");
    let cmd = format!("{MPIEXEC} -launcher ssh -launcher-exec {ssh} -hosts p1,p2 -n 4 true");
    let out = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("script");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("started 0/4 ranks on 0/2 nodes"), "{text}");
    assert!(text.contains("started 4/4 ranks on 2/2 nodes"), "{text}");
}

/// MPIEXEC_PORT_RANGE (or MPIR_CVAR_CH3_PORT_RANGE, or an alias of it) bounds every port we listen on: with the
/// range's only port taken the job cannot start and says why; a bad range is a usage error;
/// 0:0 is any port, and the CVAR wins over MPIEXEC_PORT_RANGE (as in Hydra 5).
#[test]
fn port_range_bounds_listeners() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let range = format!("{port}:{port}");
    // Under the fork launcher the tree links are Unix sockets: the ports are the NLAs' PMGR
    // listeners (ssh launches bind the tree ports in the range too).
    let args = ["--pmgr", "-launcher", "fork", "-hosts", "n1,n2", "-n", "2", "true"];
    let r = common::run_env(&args, b"", &[("MPIEXEC_PORT_RANGE", &range)]);
    assert_ne!(r.status, 0);
    assert!(r.stderr.contains("no free port in MPIEXEC_PORT_RANGE"), "{}", r.stderr);
    // An alias MPICH reads for the CVAR (Hydra 5 reads it too) binds the same way, and names
    // itself.
    let r = common::run_env(&args, b"", &[("MPICH_PORT_RANGE", &range)]);
    assert_ne!(r.status, 0);
    assert!(r.stderr.contains("no free port in MPICH_PORT_RANGE"), "{}", r.stderr);
    let any = [("MPIEXEC_PORT_RANGE", range.as_str()), ("MPIR_CVAR_CH3_PORT_RANGE", "0:0")];
    let r = common::run_env(&args, b"", &any);
    assert_eq!(r.status, 0, "{}", r.stderr);
    let r = common::run_env(&args, b"", &[("MPIEXEC_PORT_RANGE", "0:0")]);
    assert_eq!(r.status, 0, "{}", r.stderr);
    drop(taken);
    // A range of free ports (one per listener) works.
    let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = probe.local_addr().expect("addr").port().saturating_sub(200).max(20000);
    drop(probe);
    let range = format!("{base}:{}", base + 100);
    let r = common::run_env(&args, b"", &[("MPIR_CVAR_CH3_PORT_RANGE", &range)]);
    assert_eq!(r.status, 0, "{}", r.stderr);
    let r = common::run_env(&args, b"", &[("MPIEXEC_PORT_RANGE", "9:x")]);
    assert_eq!(r.status, 2, "{}", r.stderr);
    assert_eq!(
        r.stderr,
        "libi-mpiexec: MPIEXEC_PORT_RANGE must be MIN:MAX (ports 1..65535, MIN <= MAX) or 0:0 \
         (any), got '9:x'\n"
    );
}

/// A workload of `sim/workloads/`, the file the simulator replays.
fn workload(name: &str) -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../sim/workloads")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// Every rank of `r` replayed its trace and made `want(rank)` requests.
fn replay_ok(r: &Run, n: usize, want: impl Fn(usize) -> usize, tag: &str) {
    assert_eq!(r.status, 0, "{tag}: {}", r.stderr);
    let mut seen = vec![false; n];
    for l in r.stdout.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        assert!(w.len() == 6 && w[0] == "rank" && w[4] == "ok", "{tag}: line {l}");
        let rank: usize = w[1].parse().expect("rank");
        assert_eq!(w[3], n.to_string(), "{tag}: {l}");
        assert_eq!(w[5], want(rank).to_string(), "{tag}: requests of rank {rank}");
        seen[rank] = true;
    }
    assert!(seen.iter().all(|s| *s), "{tag}: {}", r.stdout);
}

/// The recorded MPICH conversations replayed by tests/programs/pmi_replay.c over simulated
/// nodes: every answer is the expected one, and each rank makes as many requests as the real
/// MPICH rank did in the same job shape (4 nodes x 2 ranks, and 3 nodes x 1 rank).
#[test]
fn pmi_replay_recorded_workloads() {
    let h = hosts(4, 2);
    let with = |trace: &str| {
        let (p, t) = (prog("pmi_replay"), workload(trace));
        run(&["-launcher", "fork", "-hosts", &h, "-n", "8", &p, &t], b"")
    };
    // MPICH 4: 4 setup gets, the node map, 4 barriers, card and shm-name put or get, finalize,
    // and a slice of size/ppn = 4 cards per rank.
    replay_ok(&with("mpich4-init.pmitrace"), 8, |_| 16, "mpich4 4x2");
    // MPICH 5: node leaders put 10 keys and get 10 per leader; the others only barrier.
    replay_ok(&with("mpich5-init.pmitrace"), 8, |r| if r % 2 == 0 { 60 } else { 10 }, "mpich5");
    replay_ok(&with("exchange.pmitrace"), 8, |_| 15, "exchange");
    // One rank per node: no node bcast and its barrier; every rank gets every card.
    let h3 = hosts(3, 1);
    let r = run(
        &[
            "-launcher",
            "fork",
            "-hosts",
            &h3,
            "-n",
            "3",
            &prog("pmi_replay"),
            &workload("mpich4-init.pmitrace"),
        ],
        b"",
    );
    replay_ok(&r, 3, |_| 13, "mpich4 3x1");
}

/// The replay checks the answers: a trace expecting the wrong one fails the job with one
/// line naming the rank, the trace line and the answer.
#[test]
fn pmi_replay_reports_a_wrong_answer() {
    let d = scratch("replay-wrong");
    let t = d.join("wrong.pmitrace");
    std::fs::write(&t, "> cmd=init pmi_version=1 pmi_subversion=1\n< cmd=maxes\n").expect("write");
    let r = run(&["-n", "2", &prog("pmi_replay"), &t.to_string_lossy()], b"");
    assert_eq!(r.status, 1, "{}", r.stderr);
    // Both ranks get the wrong answer; whichever exits first ends the job, and the other may
    // be stopped before it writes its line.
    let line = |rank: u32| {
        format!("pmi_replay: rank {rank}: trace line 1: unexpected answer: cmd=response_to_init")
    };
    assert!(r.stderr.contains(&line(0)) || r.stderr.contains(&line(1)), "{}", r.stderr);
    let _ = std::fs::remove_dir_all(&d);
}

/// The same MPICH 4 conversation against Debian's mpiexec.hydra: our trace is valid PMI-1
/// for Hydra's server too (one node: each rank gets its own card only).
#[test]
fn pmi_replay_under_hydra() {
    let r = run_program(
        "mpiexec.hydra",
        &["-n", "4", &prog("pmi_replay"), &workload("mpich4-init.pmitrace")],
        b"",
    );
    replay_ok(&r, 4, |_| 13, "hydra mpich4");
}

/// `--bcast`: every node runs its own staged copy of the executable (a private directory
/// under `$TMPDIR`), every rank of a node the same copy, and nothing of it is left after
/// the job; MPICH programs run staged too.
#[test]
fn bcast_stages_the_executable_on_each_node() {
    let tmp = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("bcast-{}", std::process::id()));
    let stage_root = tmp.join("nodes");
    std::fs::create_dir_all(&stage_root).expect("mkdir");
    let script = tmp.join("where.sh");
    common::write_script(
        &script,
        "#!/bin/sh\necho \"$PMI_RANK $PMI_HOSTNAME $0 $(stat -c %a \"$(dirname \"$0\")\")\"\n",
    );
    let out = Command::new(MPIEXEC)
        .args(["--bcast", "-launcher", "fork", "-hosts", &hosts(3, 2), "-n", "6"])
        .arg(&script)
        .env("TMPDIR", &stage_root)
        .output()
        .expect("run");
    let r = Run::from_output(&out);
    assert_eq!(r.status, 0, "{}", r.stderr);
    let mut by_node: std::collections::HashMap<String, std::collections::HashSet<String>> =
        Default::default();
    for l in r.stdout.lines() {
        let f: Vec<&str> = l.split(' ').collect();
        assert_eq!(f.len(), 4, "{l}");
        assert!(
            f[2].starts_with(&stage_root.join("libi-stage-").to_string_lossy().into_owned()),
            "{l}"
        );
        assert!(f[2].ends_with("-where.sh"), "{l}");
        assert_eq!(f[3], "700", "{l}");
        by_node.entry(f[1].to_string()).or_default().insert(f[2].to_string());
    }
    assert_eq!(by_node.len(), 3, "{}", r.stdout);
    let copies: std::collections::HashSet<&String> = by_node.values().flatten().collect();
    assert!(by_node.values().all(|c| c.len() == 1) && copies.len() == 3, "{by_node:?}");
    // (The NLAs' topology file for MPICH, kept on purpose under $TMPDIR/libi-UID, is not
    // staging.)
    let left: Vec<_> = std::fs::read_dir(&stage_root)
        .expect("read")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.strip_prefix("libi-").is_some_and(|u| u.bytes().all(|b| b.is_ascii_digit())))
        .collect();
    assert!(left.is_empty(), "staging left behind: {left:?}");

    let r = run(
        &["--bcast", "-launcher", "fork", "-hosts", &hosts(2, 2), "-n", "4", &prog("hello")],
        b"",
    );
    hello_lines(&r, 4);

    // A program that is not there: one line, status 2, nothing started.
    let r = run(&["--bcast", "-n", "1", "no-such-program-here"], b"");
    assert_eq!(r.status, 2);
    assert_eq!(r.stderr, "libi-mpiexec: --bcast: 'no-such-program-here' is not found on PATH\n");
}

/// Each rank's `PMI_RANK PMI_HOSTNAME MPI_LOCALRANKID`, sorted by rank.
fn rank_hosts(r: &Run) -> Vec<String> {
    assert_eq!(r.status, 0, "{}", r.stderr);
    let mut v: Vec<String> = r.stdout.lines().map(str::to_string).collect();
    v.sort_by_key(|l| l.split(' ').next().and_then(|w| w.parse::<u32>().ok()));
    v
}

const WHERE: &str = "echo $PMI_RANK $PMI_HOSTNAME $MPI_LOCALRANKID";

/// `-rankmap` (Hydra 5): rank r runs on host `map[r]` of the list, whatever its slots; a
/// map shorter than the job repeats; the PMI process-mapping form works too. A node the
/// list does not have, or a malformed map, is one line and exit 2.
#[test]
fn rankmap_puts_each_rank_on_its_node() {
    let run_map = |map: &str| {
        run(
            &[
                "-launcher",
                "fork",
                "-hosts",
                "e1,e2",
                "-rankmap",
                map,
                "-n",
                "4",
                "sh",
                "-c",
                WHERE,
            ],
            b"",
        )
    };
    assert_eq!(rank_hosts(&run_map("1,0,0,1")), ["0 e2 0", "1 e1 0", "2 e1 1", "3 e2 1"]);
    assert_eq!(rank_hosts(&run_map("1,0,1")), ["0 e2 0", "1 e1 0", "2 e2 1", "3 e2 2"]);
    assert_eq!(
        rank_hosts(&run_map("(vector,(0,2,1),(1,1,2))")),
        ["0 e1 0", "1 e2 0", "2 e2 1", "3 e2 2"]
    );
    for (bad, says) in [
        ("0,2", "-rankmap names node 2, but the host list has 2 host(s)"),
        ("0,x", "'x' is not a node index"),
        ("(vector,(0,1))", "is not (start,nodes,ranks)"),
        ("", "-rankmap"),
    ] {
        let r = run_map(bad);
        assert_eq!(r.status, 2, "{bad}: {}", r.stderr);
        assert!(r.stderr.contains(says), "{bad}: {}", r.stderr);
        assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    }
}

/// `-skip-launch-node` (Hydra 5): hosts that are this machine run no rank; with nothing
/// else left the job does not start (one line, exit 2).
#[test]
fn skip_launch_node_leaves_this_machine_out() {
    let me = nix::unistd::gethostname().expect("hostname").to_string_lossy().into_owned();
    let hosts = format!("localhost:2,{me},e1:2");
    let r = run(
        &["-launcher", "fork", "-hosts", &hosts, "-skip-launch-node", "-n", "3", "sh", "-c", WHERE],
        b"",
    );
    assert_eq!(rank_hosts(&r), ["0 e1 0", "1 e1 1", "2 e1 2"]);
    for args in [
        &["-skip-launch-node", "true"][..],
        &["-hosts", "localhost:4", "-skip-launch-node", "true"],
    ] {
        let r = run(args, b"");
        assert_eq!(r.status, 2, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains("-skip-launch-node: every host is this machine"), "{}", r.stderr);
    }
}

/// `-hybrid-hosts` (Hydra 5: hosts do not share paths): remote agents are started as
/// `libi-nla`, found on the remote PATH, instead of by our absolute path. And
/// `HYDRA_LAUNCHER_EXTRA_ARGS`: words for ssh before the host, as Hydra.
#[test]
fn hybrid_hosts_find_the_agent_on_the_remote_path() {
    let d = scratch("hybrid");
    let log = d.join("launched");
    let bin = std::path::Path::new(MPIEXEC).parent().expect("bin dir").display().to_string();
    // A "remote" shell whose PATH has the agent: logs the command, then runs it.
    let script = format!(
        "#!/bin/sh\nfor a; do last=$a; done\necho \"$*\" >> {}\nPATH={bin}:$PATH exec sh -c \"$last\"\n",
        log.display()
    );
    let fake = common::write_script(&d.join("fake-ssh"), &script);
    let job = |extra: &[&str], env: &[(&str, &str)]| {
        let mut a = vec!["-launcher", "ssh", "-launcher-exec", &fake, "-hosts", "r1,r2"];
        a.extend(extra);
        a.extend(["-n", "2", "sh", "-c", WHERE]);
        let r = common::run_env(&a, b"", env);
        let launched = std::fs::read_to_string(&log).expect("log");
        std::fs::remove_file(&log).expect("rm");
        (r, launched)
    };
    let (r, launched) = job(&["-hybrid-hosts"], &[]);
    assert_eq!(rank_hosts(&r), ["0 r1 0", "1 r2 0"]);
    let mut lines: Vec<&str> = launched.lines().collect();
    lines.sort();
    assert_eq!(lines.len(), 2, "{launched}");
    assert!(lines[0].starts_with("-x r1 libi-nla --parent "), "{launched}");
    assert!(lines[1].starts_with("-x r2 libi-nla --parent "), "{launched}");
    let (r, launched) = job(&[], &[("HYDRA_LAUNCHER_EXTRA_ARGS", "-p 2222 -o X=y")]);
    assert_eq!(rank_hosts(&r), ["0 r1 0", "1 r2 0"]);
    let nla = format!("{bin}/libi-nla --parent ");
    assert_eq!(launched.lines().count(), 2, "{launched}");
    for l in launched.lines() {
        let rest = l.strip_prefix("-x -p 2222 -o X=y r").expect(l);
        assert!(rest[1..].starts_with(&format!(" {nla}")), "{l}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// A hostfile's `user=NAME` (Hydra 5's per-host ssh user): ssh logs in as `NAME@host`; the
/// host keeps its name everywhere else (ranks' host, labels).
#[test]
fn hostfile_user_logs_in_as_that_user() {
    let d = scratch("hfuser");
    let log = d.join("launched");
    let script = format!(
        "#!/bin/sh\nfor a; do last=$a; done\necho \"$*\" >> {}\nexec sh -c \"$last\"\n",
        log.display()
    );
    let fake = common::write_script(&d.join("fake-ssh"), &script);
    let hf = d.join("hosts");
    std::fs::write(&hf, "r1 user=alice\nr2\n").expect("write");
    let hf = hf.to_string_lossy().into_owned();
    let r = common::run(
        &["-launcher", "ssh", "-launcher-exec", &fake, "-f", &hf, "-n", "2", "sh", "-c", WHERE],
        b"",
    );
    assert_eq!(rank_hosts(&r), ["0 r1 0", "1 r2 0"], "{}", r.stderr);
    let launched = std::fs::read_to_string(&log).expect("log");
    let mut lines: Vec<&str> = launched.lines().collect();
    lines.sort();
    assert_eq!(lines.len(), 2, "{launched}");
    assert!(lines[0].starts_with("-x alice@r1 /"), "{launched}");
    assert!(lines[1].starts_with("-x r2 /"), "{launched}");
    // Down a chain, each NLA is sent the users of its own subtree: r1's NLA logs in to r2 as
    // bob, r2's to r3 as carol.
    std::fs::remove_file(&log).expect("rm");
    std::fs::write(d.join("hosts"), "r1\nr2 user=bob\nr3 user=carol\n").expect("write");
    let r = common::run(
        &[
            "-launcher",
            "ssh",
            "-launcher-exec",
            &fake,
            "-f",
            &hf,
            "--tree",
            "chain",
            "-n",
            "3",
            "sh",
            "-c",
            WHERE,
        ],
        b"",
    );
    assert_eq!(rank_hosts(&r), ["0 r1 0", "1 r2 0", "2 r3 0"], "{}", r.stderr);
    let launched = std::fs::read_to_string(&log).expect("log");
    let lines: Vec<&str> = launched.lines().collect();
    assert_eq!(lines.len(), 3, "{launched}");
    assert!(lines[0].starts_with("-x r1 /"), "{launched}");
    assert!(lines[1].starts_with("-x bob@r2 /"), "{launched}");
    assert!(lines[2].starts_with("-x carol@r3 /"), "{launched}");
    let _ = std::fs::remove_dir_all(&d);
}

/// A hostfile's `binding=SPEC` (Hydra 5): that host's `-bind-to`, over the job's; the other
/// hosts keep `-bind-to`. A `-map-by` that does not fit a host's binding is one line, exit 2.
#[test]
fn hostfile_binding_overrides_bind_to_on_its_host() {
    let cpus = common::my_cpus();
    if cpus.len() < 2 {
        eprintln!("skipped: needs 2 cpus, have {cpus:?}");
        return;
    }
    let (a, b) = (cpus[0], cpus[1]);
    let d = scratch("hfbind");
    let hf = d.join("hosts");
    std::fs::write(&hf, format!("n1:2 binding=user:{b}\nn2:2\n")).expect("write");
    let hf = hf.to_string_lossy().into_owned();
    let args = ["-launcher", "fork", "-f", &hf, "-bind-to", "hwthread", "-n", "4"];
    let r = common::run(&[&args[..], &["sh", "-c", common::SHOW_CPUS]].concat(), b"");
    let all = common::rank_cpus(&common::run(&["-n", "1", "sh", "-c", common::SHOW_CPUS], b""), 1);
    let want =
        [("0", b.to_string()), ("1", all[0].1.clone()), ("0", a.to_string()), ("1", b.to_string())];
    let got = common::rank_cpus(&r, 4);
    let want: Vec<(String, String)> =
        want.iter().map(|(l, c)| (l.to_string(), c.clone())).collect();
    assert_eq!(got, want);
    std::fs::write(&hf, "n1:2 binding=eth\nn2:2\n").expect("write");
    let r =
        common::run(&["-launcher", "fork", "-f", &hf, "-map-by", "core", "-n", "1", "true"], b"");
    assert_eq!(r.status, 2, "{}", r.stderr);
    assert_eq!(
        r.stderr,
        "libi-mpiexec: host n1 (its hostfile binding=): -bind-to eth -map-by core: an I/O binding \
         maps only by its own devices (eth[:N])\n"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// Hydra's defaults file: `HYDRA_CONFIG_FILE`, else `~/.mpiexec.hydra.conf`, holds global
/// options read before the command line's (which win). Anything but global options in it, or
/// a `HYDRA_CONFIG_FILE` that cannot be read, is one line naming the file, exit 2.
#[test]
fn hydra_config_file_gives_default_options() {
    let d = scratch("hydraconf");
    let conf = d.join("conf");
    std::fs::write(&conf, "# defaults\n-genv FOO bar -l   # labels\n-genv BAZ q\n").expect("write");
    let conf = conf.to_string_lossy().into_owned();
    let show = ["sh", "-c", "echo \"$FOO,$BAZ\""];
    let with = |args: &[&str], env: &[(&str, &str)]| {
        let mut a = args.to_vec();
        a.extend(show);
        common::run_env(&a, b"", env)
    };
    let r = with(&["-n", "1"], &[("HYDRA_CONFIG_FILE", &conf)]);
    assert_eq!((r.status, r.stdout.as_str()), (0, "[0] bar,q\n"), "{}", r.stderr);
    let r = with(&["-genv", "FOO", "cmd", "-n", "1"], &[("HYDRA_CONFIG_FILE", &conf)]);
    assert_eq!(r.stdout, "[0] cmd,q\n", "{}", r.stderr);
    // ~/.mpiexec.hydra.conf when HYDRA_CONFIG_FILE is not set.
    let home = d.join("home");
    std::fs::create_dir_all(&home).expect("mkdir");
    let home_s = home.to_string_lossy().into_owned();
    let r = with(&["-n", "1"], &[("HOME", &home_s)]);
    assert_eq!(r.stdout, ",\n", "{}", r.stderr);
    std::fs::write(home.join(".mpiexec.hydra.conf"), "-genv BAZ home\n").expect("write");
    let r = with(&["-n", "1"], &[("HOME", &home_s)]);
    assert_eq!(r.stdout, ",home\n", "{}", r.stderr);
    for (text, says) in [
        ("-bogus\n", "unrecognized option '-bogus'"),
        ("-genv A b prog\n", "'prog' is not an option"),
        ("-n 2\n", "belong on the command line"),
        ("-bind-to nowhere\n", "-bind-to"),
    ] {
        let bad = d.join("bad");
        std::fs::write(&bad, text).expect("write");
        let bad = bad.to_string_lossy().into_owned();
        let r = with(&["-n", "1"], &[("HYDRA_CONFIG_FILE", &bad)]);
        assert_eq!(r.status, 2, "{text}: {}", r.stderr);
        assert!(r.stderr.contains(&format!("{bad}: ")) && r.stderr.contains(says), "{}", r.stderr);
    }
    let gone = d.join("gone").to_string_lossy().into_owned();
    let r = with(&["-n", "1"], &[("HYDRA_CONFIG_FILE", &gone)]);
    assert_eq!(r.status, 2, "{}", r.stderr);
    assert!(r.stderr.contains("HYDRA_CONFIG_FILE: cannot read"), "{}", r.stderr);
    let _ = std::fs::remove_dir_all(&d);
}

/// `-order-nodes` (Hydra): the host list (from -hosts or -f) sorted by slot count before the
/// ranks are placed; hosts with as many slots keep their order. A bad order is one line and
/// exit 2.
#[test]
fn order_nodes_sorts_hosts_by_slots() {
    let job = ["sh", "-c", WHERE];
    let mut a = vec!["-launcher", "fork", "-hosts", "h1:1,h2:3", "-order-nodes", "descending"];
    a.extend(["-n", "4"]);
    a.extend(job);
    assert_eq!(rank_hosts(&run(&a, b"")), ["0 h2 0", "1 h2 1", "2 h2 2", "3 h1 0"]);
    let d = scratch("ordernodes");
    let hf = d.join("hosts");
    std::fs::write(&hf, "a:3\nb:1\nc:2\nd:1\n").expect("write");
    let hf = hf.to_string_lossy().into_owned();
    let mut a = vec!["-launcher", "fork", "-f", &hf, "-order-nodes", "ascending", "-n", "7"];
    a.extend(job);
    assert_eq!(
        rank_hosts(&run(&a, b"")),
        ["0 b 0", "1 d 0", "2 c 0", "3 c 1", "4 a 0", "5 a 1", "6 a 2"]
    );
    let r = run(&["-hosts", "h1:1", "-order-nodes", "size", "true"], b"");
    assert_eq!(r.status, 2, "{}", r.stderr);
    assert_eq!(
        r.stderr,
        "libi-mpiexec: -order-nodes: expected ascending or descending, got 'size'\n"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// `-membind` on every node: each NLA sets its own ranks' policy. A NUMA node a host does
/// not have is found by that host's NLA before it starts any rank (here through a fake ssh,
/// so that the front end does not check it first): one line naming the host and the node,
/// a failed job, nothing left running.
#[test]
fn membind_on_each_node_and_a_missing_node() {
    if !std::path::Path::new("/proc/self/numa_maps").exists()
        || std::path::Path::new("/sys/devices/system/node/node7").exists()
    {
        eprintln!("memory policy test skipped: no NUMA, or a node 7");
        return;
    }
    let show = "echo $PMI_RANK $PMI_HOSTNAME $(awk '/stack/ {print $2}' /proc/self/numa_maps)";
    let hosts = ["-launcher", "fork", "-hosts", "n1:1,n2:1"];
    let mut a = hosts.to_vec();
    a.extend(["-membind", "interleave:0", "-n", "2", "sh", "-c", show]);
    assert_eq!(rank_hosts(&run(&a, b"")), ["0 n1 interleave:0", "1 n2 interleave:0"]);
    let d = scratch("membind");
    let ssh = common::write_script(
        &d.join("fake-ssh"),
        "#!/bin/sh\nfor a; do last=$a; done\nexec sh -c \"$last\"\n",
    );
    let r = run(
        &[
            "-launcher",
            "ssh",
            "-launcher-exec",
            &ssh,
            "-hosts",
            "r1:2,r2:1",
            "-membind",
            "bind:7",
            "-n",
            "3",
            "sleep",
            "30",
        ],
        b"",
    );
    assert_ne!(r.status, 0, "{}", r.stderr);
    let line = r.stderr.lines().next().unwrap_or_default();
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    let host = line
        .strip_prefix("libi-mpiexec: -membind bind:7: NUMA node 7 is not usable on ")
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_default();
    assert!(host == "r1" || host == "r2", "{}", r.stderr);
    let _ = std::fs::remove_dir_all(&d);
}

/// KVS values that are not UTF-8 (Latin-1 text, control bytes) come back byte for byte, as
/// under Hydra: on one node (its NLA answers), and across simulated nodes with the fence's
/// pairs pushed down the tree or fetched up it (`--kvs-push-max 0`).
#[test]
fn kvs_values_keep_their_bytes() {
    let three = hosts(3, 2);
    let cases: [&[&str]; 3] = [
        &["-n", "2"],
        &["-launcher", "fork", "-hosts", &three, "-n", "6"],
        &["-launcher", "fork", "-hosts", &three, "--kvs-push-max", "0", "-n", "6"],
    ];
    for case in cases {
        let p = prog("pmi_bytes");
        let args: Vec<&str> = case.iter().copied().chain([p.as_str()]).collect();
        let r = run(&args, b"");
        let n = args[args.len() - 2].parse::<usize>().expect("n");
        assert_eq!(r.status, 0, "{case:?}: {}{}", r.stdout, r.stderr);
        let ok = r.stdout.lines().filter(|l| l.ends_with(&format!(" of {n} bytes ok"))).count();
        assert_eq!(ok, n, "{case:?}: {}", r.stdout);
        assert_eq!(r.stderr, "", "{case:?}");
    }
}

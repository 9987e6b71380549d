//! End-to-end tests: stock MPICH programs compiled with Debian's `mpicc`, run by the real
//! `libi-mpiexec` (which starts a real `libi-nla` process through the fork launcher).
//!
//! Every test runs the job with a unique marker variable in its environment and, after the
//! job ended, scans /proc for any process still carrying it: a leftover rank or NLA fails
//! the test.

mod common;

use common::{hello_lines, prog, run, run_env, MPIEXEC};
use std::path::Path;
use std::process::{Command, Stdio};

#[test]
fn hello_n1() {
    hello_lines(&run(&["-n", "1", &prog("hello")], b""), 1);
}

/// The front end is a static executable (mpiexec/build.rs, the `static-pie` crate) unless
/// built with `LIBI_MPIEXEC_DYNAMIC`; it still resolves names with the C library's built-in
/// sources: `-localhost localhost` (from /etc/hosts) is the address the agent connects to.
#[test]
fn front_end_linked_statically() {
    if !option_env!("LIBI_MPIEXEC_DYNAMIC").is_some_and(|v| !v.is_empty() && v != "0") {
        let elf = std::fs::read(MPIEXEC).expect("read libi-mpiexec");
        assert_eq!(static_pie::is_static(&elf), Some(true), "libi-mpiexec is linked dynamically");
    }
    // -info tells how it is linked, and tells the truth.
    let info = Command::new(MPIEXEC).arg("-info").output().expect("run -info");
    let info = String::from_utf8_lossy(&info.stdout).into_owned();
    let elf = std::fs::read(MPIEXEC).expect("read libi-mpiexec");
    let linked = if static_pie::is_static(&elf) == Some(true) { "static" } else { "dynamic" };
    assert!(info.contains(&format!("linked {linked})")), "{info}");
    let r = run(&["-localhost", "localhost", "-n", "2", &prog("hello")], b"");
    hello_lines(&r, 2);
    let r = run(&["-localhost", "no such host", "-n", "1", "true"], b"");
    assert!(r.stderr.contains("-localhost: cannot resolve 'no such host'"), "{}", r.stderr);
    assert_ne!(r.status, 0);
}

/// The functions the front end runs (mpiexec/rust-hot.txt) are gathered in their own section
/// before the rest of its code, where its build applied that layout (a static link by
/// rustc's lld): a list out of step with the code (none of its patterns matching) would
/// leave the section out.
#[test]
fn front_end_hot_functions_laid_out_together() {
    if option_env!("LIBI_HOT_SECTION").is_none() {
        return;
    }
    let elf = std::fs::read(MPIEXEC).expect("read libi-mpiexec");
    if let Err(e) = static_pie::hot_section(&elf) {
        panic!("libi-mpiexec: {e}");
    }
}

#[test]
fn hello_n2() {
    hello_lines(&run(&["-n", "2", &prog("hello")], b""), 2);
}

#[test]
fn hello_n8() {
    hello_lines(&run(&["-n", "8", &prog("hello")], b""), 8);
}

#[test]
fn hello_n32() {
    hello_lines(&run(&["-np", "32", &prog("hello")], b""), 32);
}

#[test]
fn non_mpi_program() {
    let r = run(&["-n", "3", "echo", "plain"], b"");
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert_eq!(r.stdout, "plain\nplain\nplain\n");
}

/// A variable whose *name* is not UTF-8 reaches the ranks too, whole, as under Hydra: with
/// `-genvall` (the default) from the front end's environment, with `-genvnone`/`-genvlist`
/// from the agent's; an outer job's `PMI_*` settings are left out all the same.
#[test]
fn variables_with_names_that_are_not_utf8_reach_the_ranks() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt as _;
    let has = |out: &[u8], entry: &[u8]| out.split(|&b| b == b'\n').any(|l| l == entry);
    for opts in [&[][..], &["-genvnone"][..], &["-genvlist", "PATH"][..]] {
        let out = Command::new(MPIEXEC)
            .args(opts)
            .args(["-n", "2", "env"])
            .env(OsStr::from_bytes(b"LIBI_E2E_N\xe9"), OsStr::from_bytes(b"v\xfe"))
            .env(OsStr::from_bytes(b"PMI_\xff"), "outer")
            .stdin(Stdio::null())
            .output()
            .expect("run libi-mpiexec");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{opts:?}: {err}");
        assert!(err.is_empty(), "{opts:?}: {err}");
        let n = out.stdout.split(|&b| b == b'\n').filter(|l| *l == b"LIBI_E2E_N\xe9=v\xfe").count();
        assert_eq!(n, 2, "{opts:?}: {}", String::from_utf8_lossy(&out.stdout));
        assert!(!has(&out.stdout, b"PMI_\xff=outer"), "{opts:?}");
    }
}

/// Bytes that are not UTF-8 in a program's arguments, in `-genv`/`-env` values, in the
/// inherited environment and in a `-configfile`'s words reach the ranks as they are (Hydra
/// passes them on), and so do working directories (`-wdir`, `-gwdir`); in an option
/// that must be text (a host list, a program's name, a variable's name) they are
/// refused by argument number, exit 2, and nothing starts.
#[test]
fn non_utf8_arguments_and_environment_reach_the_ranks() {
    use std::ffi::{OsStr, OsString};
    use std::os::unix::ffi::OsStrExt as _;
    let raw = |b: &[u8]| OsStr::from_bytes(b).to_os_string();
    let mark = common::new_mark();
    // libi-mpiexec with these arguments, our environment and `env` on top, no stdin.
    let job = |args: &[OsString], env: &[(&str, OsString)]| {
        Command::new(MPIEXEC)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env("LIBI_E2E_MARK", &mark)
            .stdin(Stdio::null())
            .output()
            .expect("run libi-mpiexec")
    };
    let text = |words: &[&str]| words.iter().map(OsString::from).collect::<Vec<_>>();
    let printf = r#"printf '%s|%s|%s|%s|%s\n' "$1" "$2" "$G" "$E" "$I""#;
    let mut args = text(&["-n", "2", "-genv", "G"]);
    args.extend([raw(b"g\xfe"), "-env".into(), raw(b"E=e\xfd")]);
    args.extend(text(&["sh", "-c", printf, "sh"]));
    args.extend([raw(b"caf\xe9"), raw(b"--opt=\xff")]);
    let out = job(&args, &[("I", raw(b"i\xfc"))]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let line: &[u8] = b"caf\xe9|--opt=\xff|g\xfe|e\xfd|i\xfc\n";
    assert_eq!(out.stdout, [line, line].concat(), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    for (args, n) in [
        (vec![raw(b"-hosts=h\xff"), "-n".into(), "1".into(), "true".into()], 1),
        (vec!["-n".into(), "1".into(), raw(b"./prog\xff")], 3),
        (
            vec!["-n".into(), "1".into(), "-genv".into(), raw(b"N\xff"), "1".into(), "true".into()],
            4,
        ),
    ] {
        let out = job(&args, &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.starts_with(&format!("libi-mpiexec: argument {n} ("))
                && err.contains("not valid UTF-8"),
            "{args:?}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(out.stdout.is_empty());
    }
    // A working directory (-wdir, -gwdir) is bytes too.
    let wd = std::env::temp_dir().join(raw(&[b"libi-e2e-wd\xe9-", mark.as_bytes()].concat()));
    std::fs::create_dir_all(&wd).expect("mkdir");
    for opt in ["-wdir", "-gwdir"] {
        let mut args = text(&["-n", "1", opt]);
        args.push(wd.clone().into_os_string());
        args.extend(text(&["sh", "-c", "/bin/pwd"]));
        let out = job(&args, &[]);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.stdout, [wd.as_os_str().as_bytes(), b"\n"].concat(), "{opt}");
    }
    let _ = std::fs::remove_dir(&wd);
    // The same in a -configfile: its words are bytes too (one line per program).
    let cf = std::env::temp_dir().join(format!("libi-e2e-raw-{mark}.cfg"));
    let configfile = ["-configfile".into(), cf.clone().into_os_string()];
    std::fs::write(&cf, b"-n 1 -env E=e\xfd printenv E\n-n 1 echo caf\xe9 # c\xe9\n")
        .expect("write");
    let out = job(&configfile, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    // Two ranks: their lines come in either order.
    let mut lines: Vec<&[u8]> = out.stdout.split_inclusive(|&b| b == b'\n').collect();
    lines.sort();
    assert_eq!(lines, [&b"caf\xe9\n"[..], &b"e\xfd\n"[..]]);
    std::fs::write(&cf, b"-n 1 ./prog\xff\n").expect("write");
    let out = job(&configfile, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.starts_with("libi-mpiexec: word 3 of configfile '"), "{err}");
    assert!(err.contains("not valid UTF-8"), "{err}");
    let _ = std::fs::remove_file(&cf);
    assert_eq!(common::leftovers(&mark, std::time::Duration::from_secs(2)), Vec::<String>::new());
}

/// Hydra 5's `-opt=value` and double-dash spellings reach the job; the program's own
/// arguments stay as written.
#[test]
fn hydra_inline_option_values() {
    let r = run(
        &[
            "--n=2",
            "-genv=FOO",
            "bar",
            "-genv",
            "BAZ=q=1",
            "-l",
            "sh",
            "-c",
            "echo $FOO $BAZ $0",
            "-n=3",
        ],
        b"",
    );
    assert_eq!(r.status, 0, "{}", r.stderr);
    let mut lines: Vec<&str> = r.stdout.lines().collect();
    lines.sort();
    assert_eq!(lines, ["[0] bar q=1 -n=3", "[1] bar q=1 -n=3"]);
}

/// Hydra's older names and its machinery options: accepted, the ignored ones with a note under
/// `-v` (those refused in one line, their meaning not being ours: the cli unit tests).
#[test]
fn hydra_machinery_options() {
    let r = run(
        &["-bootstrap", "fork", "-demux", "poll", "-enable-x", "-v", "-n", "1", "echo", "ran"],
        b"",
    );
    assert_eq!((r.status, r.stdout.as_str()), (0, "ran\n"), "{}", r.stderr);
    assert!(r.stderr.contains("libi-mpiexec: -demux poll: ignored ("), "{}", r.stderr);
    assert!(r.stderr.contains("libi-mpiexec: -enable-x: ignored ("), "{}", r.stderr);
}

/// Without -n, as Hydra: one process on this machine alone (its one slot; -ppn N gives N), the
/// host list's slots for each executable otherwise.
#[test]
fn default_process_counts() {
    let r = run(&["echo", "one"], b"");
    assert_eq!((r.status, r.stdout.as_str()), (0, "one\n"), "{}", r.stderr);
    let r = run(&["-ppn", "2", "echo", "two"], b"");
    assert_eq!((r.status, r.stdout.as_str()), (0, "two\ntwo\n"), "{}", r.stderr);
    let r = run(&["-launcher", "fork", "-hosts", "n1:2,n2", "echo", "a", ":", "echo", "b"], b"");
    assert_eq!(r.status, 0, "{}", r.stderr);
    let mut lines: Vec<&str> = r.stdout.lines().collect();
    lines.sort();
    assert_eq!(lines, ["a", "a", "a", "b", "b", "b"]);
}

/// Host files as Hydra reads them: `host[:N]` lines, comments, blank lines; a word Hydra would
/// refuse is one line naming the file, the line and the word, exit 2.
#[test]
fn hostfile_lines() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let f = dir.join("e2e-hostfile-good");
    std::fs::write(&f, "# two hosts\n\nh1:2\n  h2   # one slot\n").expect("write");
    let f = f.to_string_lossy().into_owned();
    let r = run(&["-launcher", "fork", "-f", &f, "-prepend-pattern", "%h ", "echo", "x"], b"");
    assert_eq!(r.status, 0, "{}", r.stderr);
    let mut lines: Vec<&str> = r.stdout.lines().collect();
    lines.sort();
    assert_eq!(lines, ["h1 x", "h1 x", "h2 x"]);
    let bad = dir.join("e2e-hostfile-bad");
    std::fs::write(&bad, "h1:2\nh2 slots=2\n").expect("write");
    let bad = bad.to_string_lossy().into_owned();
    let r = run(&["-launcher", "fork", "-f", &bad, "-n", "1", "true"], b"");
    assert_eq!(r.status, 2);
    assert_eq!(
        r.stderr,
        format!(
            "libi-mpiexec: hostfile {bad} line 2: unexpected 'slots=2' (a line is one host or \
             host:N, then optionally user=NAME and binding=SPEC)\n"
        )
    );
}

#[test]
fn abort_exit_code() {
    let r = run(&["-n", "4", &prog("fail"), "abort", "7"], b"");
    assert_eq!(r.status, 7, "stderr: {}", r.stderr);
    assert!(r.stderr.contains("rank 1") && r.stderr.contains("MPI_Abort"), "{}", r.stderr);
}

#[test]
fn rank_exit_code() {
    let r = run(&["-n", "3", &prog("fail"), "exit", "3"], b"");
    assert_eq!(r.status, 3, "stderr: {}", r.stderr);
    assert!(r.stderr.contains("rank 1") && r.stderr.contains("exited with code 3"), "{}", r.stderr);
}

#[test]
fn rank_segfault() {
    let r = run(&["-n", "2", &prog("fail"), "segv"], b"");
    assert_eq!(r.status, 139, "stderr: {}", r.stderr);
    assert!(r.stderr.contains("rank 1") && r.stderr.contains("SIGSEGV"), "{}", r.stderr);
}

#[test]
fn exit_zero_without_finalize_fails() {
    let r = run(&["-n", "3", &prog("fail"), "nofinalize"], b"");
    assert_eq!(r.status, 1, "stderr: {}", r.stderr);
    assert!(r.stderr.contains("rank 1") && r.stderr.contains("finalize"), "{}", r.stderr);
}

#[test]
fn labels() {
    let r = run(&["-l", "-n", "2", &prog("hello")], b"");
    assert_eq!(r.status, 0, "{}", r.stderr);
    for l in r.stdout.lines() {
        let rank = l.split_whitespace().nth(3).expect("rank field");
        assert!(l.starts_with(&format!("[{rank}] hello rank {rank} ")), "line: {l}");
    }
    assert_eq!(r.stdout.lines().count(), 2);
    let r = run(&["-prepend-rank", "-n", "2", "printf", "a\\nb\\n"], b"");
    let mut lines: Vec<&str> = r.stdout.lines().collect();
    lines.sort();
    assert_eq!(lines, vec!["[0] a", "[0] b", "[1] a", "[1] b"]);
}

#[test]
fn stdin_reaches_rank0_only() {
    let r = run(&["-l", "-n", "2", "cat"], b"line one\nline two\n");
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert_eq!(r.stdout, "[0] line one\n[0] line two\n");
}

/// What `out` gives, read by a thread of its own, piece by piece as it comes.
fn chunks(mut out: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut b = [0u8; 4096];
        while let Ok(n) = out.read(&mut b) {
            if n == 0 {
                break;
            }
            let _ = tx.send(b[..n].to_vec());
        }
    });
    rx
}

/// A prompt (a line begun, not ended) reaches our stdout while the rank waits for input:
/// the input is written only once the prompt has been read.
#[test]
fn a_prompt_shows_before_its_newline() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(common::MPIEXEC)
        .args(["-n", "1", "sh", "-c", "printf 'Enter: '; read x; echo \"got $x\""])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start");
    let rx = chunks(child.stdout.take().expect("stdout"));
    let first = rx.recv_timeout(std::time::Duration::from_secs(20));
    let mut stdin = child.stdin.take().expect("stdin");
    let _ = stdin.write_all(b"abc\n");
    drop(stdin);
    let status = child.wait().expect("wait");
    let first = first.ok();
    assert_eq!(first.as_deref(), Some(&b"Enter: "[..]), "no prompt before the input");
    let mut all = first.unwrap_or_default();
    while let Ok(v) = rx.recv_timeout(std::time::Duration::from_secs(5)) {
        all.extend(v);
    }
    assert!(status.success());
    assert_eq!(String::from_utf8_lossy(&all), "Enter: got abc\n");
}

/// Progress dots (a line a rank goes on writing, never silent for long) show while the
/// line is still unfinished: the rank stops only once the test has read a dot.
#[test]
fn progress_dots_show_before_their_newline() {
    use std::process::{Command, Stdio};
    let stop = std::env::temp_dir().join(format!("libi-e2e-dots-{}", common::new_mark()));
    let script = "while [ ! -e \"$1\" ]; do printf .; sleep 0.01; done; echo end";
    let mut child = Command::new(common::MPIEXEC)
        .args(["-n", "1", "sh", "-c", script, "sh"])
        .arg(&stop)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start");
    let rx = chunks(child.stdout.take().expect("stdout"));
    let first = rx.recv_timeout(std::time::Duration::from_secs(30));
    std::fs::write(&stop, b"").expect("stop file");
    let status = child.wait().expect("wait");
    let _ = std::fs::remove_file(&stop);
    let first = first.expect("no dots before the line ended");
    assert!(!first.is_empty() && first.iter().all(|&b| b == b'.'), "{first:?}");
    let mut all = first;
    while let Ok(v) = rx.recv_timeout(std::time::Duration::from_secs(5)) {
        all.extend(v);
    }
    assert!(status.success());
    let text = String::from_utf8_lossy(&all);
    assert!(
        text.ends_with("end\n") && text.trim_end_matches("end\n").bytes().all(|b| b == b'.'),
        "{text}"
    );
    assert_eq!(text.lines().count(), 1, "{text}");
}

#[test]
fn stdin_from_dev_null_is_eof_at_once() {
    // Started with `< /dev/null`, as scripts and batch systems do (and with nothing to
    // read, no reader thread): every rank reads EOF at once and the job ends.
    let out = Command::new(MPIEXEC)
        .args(["-n", "2", "sh", "-c", "wc -c"])
        .env("MPIEXEC_TIMEOUT", "60")
        .stdin(Stdio::null())
        .output()
        .expect("run libi-mpiexec");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let counts: Vec<&str> = stdout.split_whitespace().collect();
    assert_eq!(counts, ["0", "0"], "{stdout}");
}

#[test]
fn output_to_regular_files() {
    // Stdout and stderr redirected to files (as batch scripts do): written straight from the
    // event loop on a local filesystem. Every line arrives, each rank's in its order, and
    // our own message about the failed rank follows the output before it.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let (o, e) = (
        dir.join(format!("e2e-out-{}.txt", std::process::id())),
        dir.join(format!("e2e-err-{}.txt", std::process::id())),
    );
    let out = Command::new(MPIEXEC)
        .args(["-l", "-n", "4", "sh", "-c"])
        // (the other ranks ignore the teardown's SIGTERM, so that all their output comes
        // whenever rank 3's failure does; rank 3 gives them the time to set the trap)
        .arg("trap '' TERM; seq 1 2000; seq 1 50 >&2; [ $PMI_RANK != 3 ] || { sleep 0.3; exit 7; }")
        .env("MPIEXEC_TIMEOUT", "60")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&o).expect("stdout file"))
        .stderr(std::fs::File::create(&e).expect("stderr file"))
        .status()
        .expect("run libi-mpiexec");
    let (stdout, stderr) = (
        std::fs::read_to_string(&o).expect("read stdout"),
        std::fs::read_to_string(&e).expect("read stderr"),
    );
    let _ = (std::fs::remove_file(&o), std::fs::remove_file(&e));
    assert_eq!(out.code(), Some(7), "{stderr}");
    for (text, n) in [(&stdout, 2000), (&stderr, 50)] {
        for rank in 0..4 {
            let tag = format!("[{rank}] ");
            let got: Vec<u32> = text
                .lines()
                .filter_map(|l| l.strip_prefix(&tag))
                .map(|v| v.parse().expect("a number"))
                .collect();
            assert_eq!(got, (1..=n).collect::<Vec<u32>>(), "rank {rank}");
        }
    }
    let lines: Vec<&str> = stderr.lines().collect();
    let ours = lines.iter().position(|l| l.starts_with("libi-mpiexec:")).expect("our line");
    let last3 = lines.iter().rposition(|l| l.starts_with("[3] ")).expect("rank 3's lines");
    assert!(ours > last3, "{stderr}");
}

#[test]
fn partial_last_line_is_flushed() {
    // A last line without a newline arrives as it is (as with Hydra: nothing added).
    let r = run(&["-n", "1", "printf", "no newline"], b"");
    assert_eq!(r.stdout, "no newline");
}

#[test]
fn mpmd_two_programs() {
    let r = run(&["-n", "2", &prog("hello"), ":", "-n", "3", &prog("hello_b")], b"");
    assert_eq!(r.status, 0, "{}", r.stderr);
    let mut hello = 0;
    let mut other = 0;
    for l in r.stdout.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(w[4], "5", "{l}");
        assert_eq!(w[9], "ok", "{l}");
        let rank: u32 = w[2].parse().expect("rank");
        match w[0] {
            "hello" => {
                hello += 1;
                assert!(rank < 2 && w[6] == "0", "{l}");
            }
            "other" => {
                other += 1;
                assert!(rank >= 2 && w[6] == "1", "{l}");
            }
            _ => panic!("{l}"),
        }
    }
    assert_eq!((hello, other), (2, 3));
}

#[test]
fn configfile_mpmd() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let f = dir.join("e2e-configfile");
    std::fs::write(
        &f,
        format!("# two programs\n-n 1 {}\n-n 1 {}\n", prog("hello"), prog("hello_b")),
    )
    .expect("write configfile");
    let r = run(&["-configfile", &f.to_string_lossy()], b"");
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert_eq!(r.stdout.lines().count(), 2);
}

#[test]
fn environment_options() {
    // -genvnone, Hydra's rule: nothing of ours is passed, but the ranks start from the
    // environment of the agent that starts them (here, on this machine, ours: so PATH),
    // less an outer job's PMI settings, with -genv on top.
    let r = run_env(
        &["-genvnone", "-genv", "A", "1", "-n", "1", "/usr/bin/env"],
        b"",
        &[("PMI_OUTER", "x"), ("A", "0")],
    );
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert!(r.stdout.lines().any(|l| l == "A=1"), "{}", r.stdout);
    assert!(!r.stdout.lines().any(|l| l == "A=0" || l.starts_with("PMI_OUTER=")), "{}", r.stdout);
    assert!(r.stdout.lines().any(|l| l.starts_with("PATH=")), "{}", r.stdout);
    assert_eq!(r.stdout.lines().filter(|l| l.starts_with("MPI_LOCALRANKID=")).count(), 1);
    let r = run(&["-n", "1", "-env", "B", "x y", "/usr/bin/env"], b"");
    assert!(r.stdout.lines().any(|l| l == "B=x y"));
    assert!(r.stdout.lines().any(|l| l.starts_with("PATH=")), "genvall is the default");
    assert!(r.stdout.lines().any(|l| l == "PMI_RANK=0"));
    assert!(r.stdout.lines().any(|l| l == "PMI_SIZE=1"));
    assert!(r.stdout.lines().any(|l| l.starts_with("PMI_FD=")));
    assert!(r.stdout.lines().any(|l| l == "MPI_LOCALNRANKS=1"));
    let r = run(&["-genvlist", "HOME", "-n", "1", "/usr/bin/env"], b"");
    assert!(r.stdout.lines().any(|l| l.starts_with("HOME=")));
    assert!(r.stdout.lines().any(|l| l.starts_with("PATH=")), "the agent's own, as Hydra's");
}

/// Every variable a rank gets from us (the table of docs/environment.md), as Hydra sets them, and nothing
/// else (no `LIBI_JOB`): `PMI_FD`, `PMI_RANK`, `PMI_SIZE`, `PMI_SPAWNED`, `PMI_HOSTNAME`,
/// `MPI_LOCALRANKID`, `MPI_LOCALNRANKS`, `GFORTRAN_UNBUFFERED_PRECONNECTED=y` (unless the
/// rank's environment sets it).
#[test]
fn variables_every_rank_gets() {
    let r = run(
        &["-genvnone", "-launcher", "fork", "-hosts", "n1:2,n2:1", "-n", "3", "/usr/bin/env"],
        b"",
    );
    assert_eq!(r.status, 0, "{}", r.stderr);
    // What is not ours: the agent's own environment (under -genvnone, as Hydra), which here
    // is this test's and what it gives libi-mpiexec.
    let mut names: Vec<&str> = r
        .stdout
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .filter(|k| std::env::var_os(k).is_none() && *k != "MPIEXEC_TIMEOUT")
        .collect();
    names.sort();
    names.dedup();
    assert_eq!(
        names,
        vec![
            "GFORTRAN_UNBUFFERED_PRECONNECTED",
            "MPI_LOCALNRANKS",
            "MPI_LOCALRANKID",
            "PMI_FD",
            "PMI_HOSTNAME",
            "PMI_RANK",
            "PMI_SIZE",
            "PMI_SPAWNED"
        ]
    );
    let count = |l: &str| r.stdout.lines().filter(|x| *x == l).count();
    assert_eq!(count("GFORTRAN_UNBUFFERED_PRECONNECTED=y"), 3);
    assert_eq!((count("PMI_HOSTNAME=n1"), count("PMI_HOSTNAME=n2")), (2, 1));
    assert_eq!((count("MPI_LOCALNRANKS=2"), count("MPI_LOCALNRANKS=1")), (2, 1));
    assert_eq!((count("MPI_LOCALRANKID=0"), count("MPI_LOCALRANKID=1")), (2, 1));
    assert_eq!(count("PMI_SPAWNED=0"), 3);
    assert_eq!(count("PMI_SIZE=3"), 3);
    // an explicit value is kept
    let r = run(&["-genv", "GFORTRAN_UNBUFFERED_PRECONNECTED", "n", "-n", "1", "env"], b"");
    assert!(r.stdout.lines().any(|l| l == "GFORTRAN_UNBUFFERED_PRECONNECTED=n"), "{}", r.stdout);
}

/// Several ranks fail: the exit status combines them by Hydra's rule (the wait statuses
/// OR'ed; a signal makes 128 + its bits). Rank 1's failure comes after rank 0's (and it
/// ignores a teardown's SIGTERM). A rank torn down by us does not count.
#[test]
fn several_failures_combine_as_hydra() {
    // (rank 0 gives rank 1 the time to set its trap before the teardown comes)
    let late = |then: &str| {
        format!("if [ $PMI_RANK = 1 ]; then trap '' TERM; sleep 0.6; {then}; fi; sleep 0.2; exit 3")
    };
    let r = run(&["-n", "2", "sh", "-c", &late("exit 5")], b"");
    assert_eq!(r.status, 7, "{}", r.stderr);
    assert!(r.stderr.contains("rank 0 on") && r.stderr.contains("exited with code 3"));
    assert!(r.stderr.contains("exit status 7: the statuses of the 2 ranks"), "{}", r.stderr);
    // an exit 3 and a SIGSEGV: 139
    let r = run(&["-n", "2", "sh", "-c", &late("kill -SEGV $$")], b"");
    assert_eq!(r.status, 139, "{}", r.stderr);
    // the same exit twice is that exit, said once
    let r = run(&["-n", "2", "sh", "-c", &late("exit 3")], b"");
    assert_eq!(r.status, 3, "{}", r.stderr);
    assert!(!r.stderr.contains("combined"), "{}", r.stderr);
    // rank 1 killed by the teardown rank 0's signal death starts: only rank 0's counts
    let r = run(
        &["-n", "2", "sh", "-c", "if [ $PMI_RANK = 1 ]; then sleep 30; fi; kill -SEGV $$"],
        b"",
    );
    assert_eq!(r.status, 139, "{}", r.stderr);
    assert!(!r.stderr.contains("combined"), "{}", r.stderr);
    // MPI_Abort: the first abort's code (as Hydra, which ends the job at the abort)
    let r = run(&["-n", "4", &prog("fail"), "abort", "7"], b"");
    assert_eq!(r.status, 7, "{}", r.stderr);
}

/// `-print-all-exitcodes`: Hydra's format on stdout after the job's own output, one line per
/// host, each rank's wait status in local-rank order.
#[test]
fn print_all_exitcodes() {
    let r = run(
        &[
            "-print-all-exitcodes",
            "-launcher",
            "fork",
            "-hosts",
            "n1:1,n2:2",
            "-n",
            "3",
            "sh",
            "-c",
            "echo out; trap '' TERM; sleep 0.$((PMI_RANK*3)); exit $PMI_RANK",
        ],
        b"",
    );
    assert_eq!(r.status, 3, "{}", r.stderr);
    let host =
        String::from_utf8_lossy(&Command::new("hostname").output().expect("hostname").stdout)
            .trim()
            .to_string();
    assert_eq!(
        r.stdout,
        format!("out\nout\nout\n[mpiexec@{host}] Exit codes: [n1] 0\n[n2] 256,512\n")
    );
    let r = run(&["-print-all-exitcodes", "-n", "2", "true"], b"");
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert_eq!(r.stdout, format!("[mpiexec@{host}] Exit codes: [{host}] 0,0\n"));
}

#[test]
fn inherited_pmi_variables_are_scrubbed() {
    let out = Command::new(MPIEXEC)
        .args(["-n", "1", "/usr/bin/env"])
        .env("PMIX_NAMESPACE", "outer")
        .env("PMI_VERSION", "2")
        .stdin(Stdio::null())
        .output()
        .expect("run");
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(!s.contains("PMIX_NAMESPACE"), "{s}");
    assert!(!s.contains("PMI_VERSION"), "{s}");
}

#[test]
fn wdir() {
    let r = run(&["-wdir", "/tmp", "-n", "1", "pwd"], b"");
    assert_eq!(r.stdout, "/tmp\n");
    let r = run(&["-wdir", "/nonexistent-dir", "-n", "1", "pwd"], b"");
    assert_ne!(r.status, 0);
    assert!(r.stderr.contains("/nonexistent-dir"), "{}", r.stderr);
}

#[test]
fn missing_program() {
    let r = run(&["-n", "2", "./nope"], b"");
    assert_eq!(r.status, 127);
    let e = r.stderr.trim_end();
    assert_eq!(e.lines().count(), 1, "{e}");
    // "on HOST": the planned name of this node (its host name)
    assert!(e.starts_with("libi-mpiexec: cannot execute './nope' on "), "{e}");
    assert!(e.ends_with(": No such file or directory"), "{e}");
}

/// A missing program in one MPMD segment, on another node: the message names that node.
#[test]
fn missing_program_in_mpmd_segment_on_remote_node() {
    let r = run(
        &["-launcher", "fork", "-hosts", "n1:1,n2:1", "-n", "1", "true", ":", "-n", "1", "./nope"],
        b"",
    );
    assert_eq!(r.status, 127, "{}", r.stderr);
    assert_eq!(
        r.stderr.trim_end(),
        "libi-mpiexec: cannot execute './nope' on n2: No such file or directory"
    );
}

#[test]
fn non_executable_program() {
    let f = Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-not-exec");
    std::fs::write(&f, "data").expect("write");
    let r = run(&["-n", "1", &f.to_string_lossy()], b"");
    assert_eq!(r.status, 126, "{}", r.stderr);
    assert!(r.stderr.contains("Permission denied"), "{}", r.stderr);
}

#[test]
fn usage_errors() {
    for (args, needle) in [
        (&["-bogus", "x"][..], "-bogus"),
        (&["-n", "0", "hostname"][..], "-n"),
        (&["-n", "2"][..], "program"),
    ] {
        let out = Command::new(MPIEXEC).args(args).stdin(Stdio::null()).output().expect("run");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let e = String::from_utf8_lossy(&out.stderr);
        assert_eq!(e.lines().count(), 1, "one line: {e}");
        assert!(e.contains(needle), "{e}");
    }
}

#[test]
fn timeout_kills_the_job() {
    let out = Command::new(MPIEXEC)
        .args(["-n", "2", "sleep", "30"])
        .env("MPIEXEC_TIMEOUT", "1")
        .stdin(Stdio::null())
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(124));
    assert!(String::from_utf8_lossy(&out.stderr).contains("MPIEXEC_TIMEOUT"));
}

/// MPIEXEC_TIMEOUT as Hydra reads it: fractions of seconds; -1 and 0 are no timeout; garbage
/// is a one-line usage error (Hydra warns and ignores it).
#[test]
fn timeout_values_as_hydra() {
    let timed = |v: &str, secs: &str| {
        let t = std::time::Instant::now();
        let r = common::run_env(&["-n", "1", "sleep", secs], b"", &[("MPIEXEC_TIMEOUT", v)]);
        (r, t.elapsed().as_secs_f64())
    };
    let (r, took) = timed("0.5", "30");
    assert_eq!(r.status, 124, "{}", r.stderr);
    assert!(took < 10.0, "{took}");
    for none in ["-1", "0"] {
        let (r, took) = timed(none, "1.2");
        assert_eq!(r.status, 0, "{none}: {}", r.stderr);
        assert!(took >= 1.2, "{none}: {took}");
    }
    let (r, _) = timed("abc", "0");
    assert_eq!(r.status, 2);
    assert_eq!(
        r.stderr,
        "libi-mpiexec: MPIEXEC_TIMEOUT must be a number of seconds (0 or -1: none), got 'abc'\n"
    );
}

/// A rank that speaks garbage on its PMI socket fails the job with a message naming it and
/// the line; nothing hangs.
#[test]
fn malformed_pmi_line_fails_the_job() {
    let script = r#"printf 'cmd=init pmi_version=1 pmi_subversion=1\n' >&$PMI_FD
read -r reply <&$PMI_FD
echo "init: $reply"
if [ "$PMI_RANK" = 1 ]; then printf 'this is not pmi\n' >&$PMI_FD; read -r r2 <&$PMI_FD; echo "reply: $r2"; fi
printf 'cmd=barrier_in\n' >&$PMI_FD
read -r r3 <&$PMI_FD
echo "released: $r3""#;
    let r = run(&["-l", "-n", "3", "bash", "-c", script], b"");
    assert_eq!(r.status, 1, "stderr: {}\nstdout: {}", r.stderr, r.stdout);
    assert!(!r.stdout.contains("released"), "fence must not complete: {}", r.stdout);
    let line = r.stderr.lines().find(|l| l.contains("malformed PMI")).unwrap_or_default();
    assert!(line.contains("rank 1") && line.contains("this is not pmi"), "{}", r.stderr);
}

/// A PMI client speaking the protocol directly: put, fence, get of every other rank's key.
#[test]
fn pmi_put_fence_get_by_hand() {
    let script = r#"exec 3<>/dev/null
say() { printf '%s\n' "$1" >&$PMI_FD; read -r REPLY <&$PMI_FD; }
say 'cmd=init pmi_version=1 pmi_subversion=1'
say 'cmd=get_my_kvsname'; kvs=${REPLY##*kvsname=}
say "cmd=put kvsname=$kvs key=k$PMI_RANK value=v$PMI_RANK=x"
say 'cmd=barrier_in'
out=""
for r in $(seq 0 $((PMI_SIZE-1))); do say "cmd=get kvsname=$kvs key=k$r"; out="$out ${REPLY##*value=}"; done
say "cmd=get kvsname=$kvs key=missing"; miss=$REPLY
say 'cmd=get kvsname=$kvs key=PMI_process_mapping'
say "cmd=get kvsname=$kvs key=PMI_process_mapping"; map=${REPLY##*value=}
say 'cmd=finalize'
echo "$PMI_RANK:$out|$miss|$map""#;
    let r = run(&["-n", "4", "bash", "-c", script], b"");
    assert_eq!(r.status, 0, "stderr: {}", r.stderr);
    let mut lines: Vec<&str> = r.stdout.lines().collect();
    lines.sort();
    assert_eq!(lines.len(), 4, "{}", r.stdout);
    for (i, l) in lines.iter().enumerate() {
        let (rank, rest) = l.split_once(':').expect("rank:");
        assert_eq!(rank, i.to_string());
        let mut parts = rest.split('|');
        assert_eq!(parts.next(), Some(" v0=x v1=x v2=x v3=x"), "{l}");
        let miss = parts.next().unwrap_or_default();
        assert!(miss.starts_with("cmd=get_result rc=") && !miss.contains("rc=0"), "{l}");
        assert_eq!(parts.next(), Some("(vector,(0,1,4))"), "{l}");
    }
}

// ---- -bind-to / -map-by (these need two cpus; with one they say so and pass) ----

/// Two cpus we may use, or None (the binding tests then have nothing to show).
fn two_cpus() -> Option<(u32, u32)> {
    let c = common::my_cpus();
    if c.len() < 2 {
        eprintln!("binding test skipped: only cpus {c:?}");
        return None;
    }
    Some((c[0], c[1]))
}

fn list(c: &[(&str, &str)]) -> Vec<(String, String)> {
    c.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

#[test]
fn bind_to_user_list_joins_and_leaves_the_rest_unbound() {
    let Some((a, b)) = two_cpus() else { return };
    let spec = format!("user:{b},{a}+{b}");
    // Started on cpus a and b: the ranks past the list keep that affinity, as under Hydra 4
    // and 5 (the list does not wrap: rank 2 would get b again).
    let launcher = format!("{a},{b}");
    let args =
        ["-c", &launcher, MPIEXEC, "-bind-to", &spec, "-n", "4", "sh", "-c", common::SHOW_CPUS];
    let r = common::run_program("taskset", &args, b"");
    let ab = format!("{a}-{b}");
    let ab = if b == a + 1 { ab } else { format!("{a},{b}") };
    let b = b.to_string();
    let want = list(&[("0", &b), ("1", &ab), ("2", &ab), ("3", &ab)]);
    assert_eq!(common::rank_cpus(&r, 4), want);
}

/// `HYDRA_BINDING` is `-bind-to` when the command line gives none; `-bind-to none` wins.
#[test]
fn hydra_binding_variable() {
    let Some((a, b)) = two_cpus() else { return };
    let spec = format!("user:{b},{a}");
    let env = [("HYDRA_BINDING", spec.as_str())];
    let r = common::run_env(&["-n", "2", "sh", "-c", common::SHOW_CPUS], b"", &env);
    let (a, b) = (a.to_string(), b.to_string());
    assert_eq!(common::rank_cpus(&r, 2), list(&[("0", &b), ("1", &a)]));
    let mine = common::rank_cpus(&run(&["-n", "2", "sh", "-c", common::SHOW_CPUS], b""), 2);
    let r =
        common::run_env(&["-bind-to", "none", "-n", "2", "sh", "-c", common::SHOW_CPUS], b"", &env);
    assert_eq!(common::rank_cpus(&r, 2), mine);
}

#[test]
fn bind_to_hwthread_and_core_one_each_then_wrap() {
    let Some(_) = two_cpus() else { return };
    let n = common::my_cpus().len();
    for obj in ["hwthread", "core", "rr"] {
        let np = (n + 1).to_string();
        let r = run(&["-bind-to", obj, "-n", &np, "sh", "-c", common::SHOW_CPUS], b"");
        let got = common::rank_cpus(&r, n + 1);
        // Local ids are the ranks; different ranks on different cpus until they wrap.
        for (i, (local, _)) in got.iter().enumerate() {
            assert_eq!(*local, i.to_string());
        }
        assert_ne!(got[0].1, got[1].1, "{obj}: {got:?}");
        assert_eq!(got[n].1, got[0].1, "{obj}: {got:?}");
        if obj != "core" {
            assert!(got.iter().all(|(_, c)| c.parse::<u32>().is_ok()), "{obj}: {got:?}");
        }
    }
}

#[test]
fn no_binding_by_default_and_with_map_by_alone() {
    let r = run(&["-n", "2", "sh", "-c", common::SHOW_CPUS], b"");
    let mine = common::rank_cpus(&r, 2);
    let r = run(&["-map-by", "core", "-n", "2", "sh", "-c", common::SHOW_CPUS], b"");
    assert_eq!(common::rank_cpus(&r, 2), mine);
    let r = run(&["-bind-to", "none", "-n", "2", "sh", "-c", common::SHOW_CPUS], b"");
    assert_eq!(common::rank_cpus(&r, 2), mine);
    let r = run(&["-bind-to", "machine", "-n", "2", "sh", "-c", common::SHOW_CPUS], b"");
    assert_eq!(common::rank_cpus(&r, 2), mine);
}

#[test]
fn bind_to_bad_specs_are_usage_errors() {
    for (args, msg) in [
        (&["-bind-to", "bogus"][..], "libi-mpiexec: -bind-to: unknown object 'bogus'"),
        (&["-bind-to", "core:0"][..], "libi-mpiexec: -bind-to core:0: '0' is not a positive count"),
        (&["-bind-to", "user:1,x"][..], "libi-mpiexec: -bind-to user:1,x: 'x' is not a cpu number"),
        (&["-map-by", "user:1"][..], "libi-mpiexec: -map-by: unknown object 'user'"),
        (
            &["-bind-to", "user:9999"][..],
            "libi-mpiexec: -bind-to user:9999: cpu 9999 is not usable on ",
        ),
        (&["-bind-to", "core:9999"][..], "libi-mpiexec: -bind-to core:9999: "),
        (&["-bind-to", "gpux"][..], "libi-mpiexec: -bind-to gpux: 'x' is not a GPU number"),
        (&["-bind-to", "eth:0"][..], "libi-mpiexec: -bind-to eth:0: '0' is not a positive count"),
        (&["-bind-to", "pci:0000:00:00.0:2"][..], "libi-mpiexec: -bind-to pci:0000:00:00.0:2: "),
        (
            &["-bind-to", "gpu", "-map-by", "core"][..],
            "libi-mpiexec: -bind-to gpu -map-by core: an I/O binding maps only by its own devices",
        ),
        (
            &["-bind-to", "core", "-map-by", "eth"][..],
            "libi-mpiexec: -bind-to core -map-by eth: only an I/O binding",
        ),
    ] {
        let mut a = args.to_vec();
        a.extend(["-n", "2", "true"]);
        let r = run(&a, b"");
        assert_eq!(r.status, 2, "{args:?}: {}", r.stderr);
        assert_eq!(r.stderr.lines().count(), 1, "{args:?}: {}", r.stderr);
        assert!(r.stderr.starts_with(msg), "{args:?}: {}", r.stderr);
    }
}

/// This machine's first Ethernet interface with a device of its own, its PCI device and the
/// cpus near that (`local_cpulist`), read here without libi's code; `None` if it has none.
fn first_ethernet() -> Option<(String, String, libi_binding::CpuSet)> {
    let mut names: Vec<String> = std::fs::read_dir("/sys/class/net")
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    for name in names {
        let dir = Path::new("/sys/class/net").join(&name);
        let ty = std::fs::read_to_string(dir.join("type")).unwrap_or_default();
        if ty.trim() != "1" || !dir.join("device").exists() {
            continue;
        }
        let real = std::fs::canonicalize(&dir).ok()?;
        // The nearest directory named like 0000:00:03.0 above it.
        let pci = real.ancestors().find(|p| {
            let n = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let b = n.as_bytes();
            b.len() == 12 && b[4] == b':' && b[7] == b':' && b[10] == b'.'
        })?;
        let near = std::fs::read_to_string(pci.join("local_cpulist")).ok()?;
        let addr = pci.file_name()?.to_string_lossy().into_owned();
        return Some((name, addr, libi_binding::CpuSet::parse(near.trim()).ok()?));
    }
    None
}

/// The vendor and class of each PCI device here.
fn pci_devices() -> Vec<(String, String)> {
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default().trim().to_string();
    std::fs::read_dir("/sys/bus/pci/devices")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| (read(&e.path().join("vendor")), read(&e.path().join("class"))))
        .collect()
}

/// `-bind-to eth` (and `en`, `ethN` by name, `pci:` of its PCI device) binds each rank to the
/// cpus near this machine's Ethernet device (on this VM all of them: as Hydra 5, which gives
/// 0-1 to each rank); a device kind the machine lacks is one line before anything starts.
#[test]
fn bind_to_io_devices() {
    let mine: libi_binding::CpuSet = common::my_cpus().into_iter().collect();
    let (want, by_name) = match first_ethernet() {
        Some((name, addr, near)) => {
            let set = near.intersect(&mine);
            let set = if set.is_empty() { mine.clone() } else { set };
            (set.to_string(), vec![name, format!("pci:{addr}")])
        }
        // Only interfaces without a device (a container's veth): near every cpu.
        None => (mine.to_string(), Vec::new()),
    };
    let mut specs = vec!["eth".to_string(), "en:1".to_string()];
    specs.extend(by_name.iter().filter(|s| s.starts_with("eth") || s.starts_with("en")).cloned());
    specs.extend(by_name.iter().filter(|s| s.starts_with("pci:")).cloned());
    for spec in &specs {
        let r = run(&["-bind-to", spec, "-n", "3", "sh", "-c", common::SHOW_CPUS], b"");
        let got = common::rank_cpus(&r, 3);
        let w = list(&[("0", &want), ("1", &want), ("2", &want)]);
        assert_eq!(got, w, "-bind-to {spec}");
    }
    let pci = pci_devices();
    let gpu_vendor = ["0x10de", "0x1002", "0x8086"];
    let has_gpu =
        pci.iter().any(|(v, c)| gpu_vendor.contains(&v.as_str()) && c.starts_with("0x03"));
    let has_rdma = Path::new("/sys/class/infiniband").exists();
    for (spec, kind, absent) in [
        ("gpu", "GPU", !has_gpu),
        ("ib", "InfiniBand", !has_rdma),
        ("hfi:2", "Omni-Path (hfi)", !has_rdma),
    ] {
        if !absent {
            eprintln!("-bind-to {spec}: this machine has one, skipped");
            continue;
        }
        let r = run(&["-bind-to", spec, "-n", "2", "sh", "-c", "echo started"], b"");
        assert_eq!(r.status, 2, "{spec}: {}", r.stderr);
        assert_eq!(r.stderr.lines().count(), 1, "{spec}: {}", r.stderr);
        assert!(r.stderr.starts_with(&format!("libi-mpiexec: -bind-to {spec}: ")), "{}", r.stderr);
        assert!(r.stderr.ends_with(&format!(" has no {kind} device\n")), "{}", r.stderr);
        assert_eq!(r.stdout, "", "nothing started");
    }
    let r = run(&["-bind-to", "pci:00:1f.7", "-n", "1", "true"], b"");
    if r.status == 2 {
        assert!(r.stderr.ends_with(" has no PCI device 0000:00:1f.7\n"), "{}", r.stderr);
    }
}

#[test]
fn verbose_reports_each_binding() {
    let Some((a, b)) = two_cpus() else { return };
    let spec = format!("user:{b},{a}");
    let r = run(&["-v", "-bind-to", &spec, "-n", "2", "true"], b"");
    assert_eq!(r.status, 0, "{}", r.stderr);
    let lines: Vec<&str> = r.stderr.lines().filter(|l| l.contains(") bound to cpus ")).collect();
    assert_eq!(lines.len(), 2, "{}", r.stderr);
    assert!(lines.iter().any(|l| l.ends_with(&format!("] rank 0 (local 0) bound to cpus {b}"))));
    assert!(lines.iter().any(|l| l.ends_with(&format!("] rank 1 (local 1) bound to cpus {a}"))));
}

/// Binding stays within the cpus libi-mpiexec (and so the NLA) may use, as hwloc does
/// within a cpuset.
#[test]
fn binding_stays_within_the_allowed_cpus() {
    let Some((_, b)) = two_cpus() else { return };
    if Command::new("taskset").arg("-V").output().is_err() {
        eprintln!("no taskset: skipped");
        return;
    }
    let b = b.to_string();
    let r = common::run_program(
        "taskset",
        &["-c", &b, MPIEXEC, "-bind-to", "core", "-n", "2", "sh", "-c", common::SHOW_CPUS],
        b"",
    );
    assert_eq!(common::rank_cpus(&r, 2), list(&[("0", &b), ("1", &b)]));
    let r = common::run_program(
        "taskset",
        &["-c", &b, MPIEXEC, "-bind-to", "user:0,1", "-n", "1", "true"],
        b"",
    );
    assert_eq!(r.status, 2, "{}", r.stderr);
    assert!(r.stderr.contains("is not usable on "), "{}", r.stderr);
}

// ---- -membind (this machine's NUMA nodes; numa_maps shows each rank's policy) ----

/// A rank command printing "PMI_RANK policy": the memory policy of its stack as
/// /proc/self/numa_maps shows it (`default`, `local`, `bind:0`, `interleave:0`).
const SHOW_MEM: &str = "echo $PMI_RANK $(awk '/stack/ {print $2}' /proc/self/numa_maps)";

/// The NUMA nodes with memory, as the kernel lists them (`0`), or None without NUMA (the
/// memory policy tests then have nothing to show).
fn mem_nodes() -> Option<String> {
    let nodes = std::fs::read_to_string("/sys/devices/system/node/has_memory").ok();
    if nodes.is_none() || !Path::new("/proc/self/numa_maps").exists() {
        eprintln!("memory policy test skipped: no NUMA nodes");
    }
    nodes.map(|n| n.trim().to_string())
}

/// Each policy, with and without -bind-to; `HYDRA_MEMBIND` when no -membind is given.
/// Without NODES, `bind` and `interleave` take the nodes of the rank's cpus (bound), or every
/// node with memory (unbound): on a machine of one NUMA node, node 0 either way.
#[test]
fn membind_policies_with_and_without_bind_to() {
    let Some(all) = mem_nodes() else { return };
    let one = all == "0";
    let bind = format!("bind:{all}");
    let interleave = format!("interleave:{all}");
    for (args, want) in [
        (&[][..], "default"),
        (&["-membind", "firsttouch"][..], "local"),
        (&["-membind", "firsttouch", "-bind-to", "core"][..], "local"),
        (&["-membind", "nexttouch", "-bind-to", "core"][..], "default"),
        (&["-membind", "bind"][..], bind.as_str()),
        (&["-membind", "interleave:"][..], interleave.as_str()),
        (&["-membind", "bind:0"][..], "bind:0"),
        (&["-membind", "bind:0", "-bind-to", "core"][..], "bind:0"),
        (&["-membind=interleave:0", "-bind-to", "hwthread"][..], "interleave:0"),
        (&["-membind", "bind", "-bind-to", "core"][..], if one { "bind:0" } else { "" }),
        (
            &["-membind", "interleave", "-bind-to", "core"][..],
            if one { "interleave:0" } else { "" },
        ),
    ] {
        let mut a = args.to_vec();
        a.extend(["-n", "2", "sh", "-c", SHOW_MEM]);
        let got = common::by_rank(&run(&a, b""), 2);
        if want.is_empty() {
            // Several NUMA nodes: each rank's own node(s), whichever they are.
            let word = args[1];
            assert!(got.iter().all(|p| p.starts_with(&format!("{word}:"))), "{args:?}: {got:?}");
        } else {
            assert_eq!(got, [want, want], "{args:?}");
        }
    }
    // HYDRA_MEMBIND, and -membind over it.
    let env = [("HYDRA_MEMBIND", "interleave")];
    let r = common::run_env(&["-n", "2", "sh", "-c", SHOW_MEM], b"", &env);
    assert_eq!(common::by_rank(&r, 2), [interleave.as_str(), interleave.as_str()]);
    let r =
        common::run_env(&["-membind", "firsttouch", "-n", "1", "sh", "-c", SHOW_MEM], b"", &env);
    assert_eq!(common::by_rank(&r, 1), ["local"]);
}

/// Where Hydra 5 applies -membind (with -bind-to), `firsttouch` is the same policy.
/// (Hydra's `bind:` is the kernel's preferred-many policy, ours the strict bind: see
/// docs/binding.md.)
#[test]
fn membind_firsttouch_as_hydra_5() {
    if mem_nodes().is_none() {
        return;
    }
    let hydra = common::mpich5().join("bin/mpiexec.hydra");
    let hydra = hydra.to_string_lossy();
    let args = ["-bind-to", "core", "-membind", "firsttouch", "-n", "2", "sh", "-c", SHOW_MEM];
    let theirs = common::by_rank(&common::run_program(&hydra, &args, b""), 2);
    let ours = common::by_rank(&run(&args, b""), 2);
    assert_eq!(ours, theirs);
    assert_eq!(ours, ["local", "local"]);
}

/// A malformed policy is a usage error before anything starts; so is a NUMA node this
/// machine does not have (found before any rank starts: nothing is left running).
#[test]
fn membind_bad_policies_and_nodes() {
    for (args, env, msg) in [
        (&["-membind", "bogus"][..], None, "libi-mpiexec: -membind: unknown policy 'bogus' ("),
        (&["-membind", "bind:0-x"][..], None, "libi-mpiexec: -membind bind:0-x: 'x' is not a NUMA"),
        (&[][..], Some("nearest"), "libi-mpiexec: HYDRA_MEMBIND: -membind: unknown policy"),
    ] {
        let mut a = args.to_vec();
        a.extend(["-n", "2", "true"]);
        let env: Vec<(&str, &str)> = env.map(|v| ("HYDRA_MEMBIND", v)).into_iter().collect();
        let r = common::run_env(&a, b"", &env);
        assert_eq!(r.status, 2, "{args:?}: {}", r.stderr);
        assert_eq!(r.stderr.lines().count(), 1, "{args:?}: {}", r.stderr);
        assert!(r.stderr.starts_with(msg), "{args:?}: {}", r.stderr);
    }
    let Some(all) = mem_nodes() else { return };
    if Path::new("/sys/devices/system/node/node7").exists() {
        eprintln!("this machine has a NUMA node 7: skipped");
        return;
    }
    for policy in ["bind:7", "interleave:0,7"] {
        let r = run(&["-membind", policy, "-bind-to", "core", "-n", "2", "true"], b"");
        assert_eq!(r.status, 2, "{}", r.stderr);
        let host = nix::unistd::gethostname().expect("hostname").to_string_lossy().into_owned();
        assert_eq!(
            r.stderr,
            format!(
                "libi-mpiexec: -membind {policy}: NUMA node 7 is not usable on {host} (its NUMA \
                 nodes with memory: {all})\n"
            )
        );
    }
}

/// `-v`: each rank's memory policy next to its cpus; `nexttouch` says it sets nothing.
#[test]
fn verbose_reports_each_memory_policy() {
    let Some(all) = mem_nodes() else { return };
    let cpu = common::my_cpus()[0];
    let user = format!("user:{cpu}");
    let r = run(&["-v", "-membind", "interleave:0", "-bind-to", &user, "-n", "2", "true"], b"");
    assert_eq!(r.status, 0, "{}", r.stderr);
    let lines: Vec<&str> = r.stderr.lines().filter(|l| l.contains(" memory policy ")).collect();
    assert_eq!(lines.len(), 2, "{}", r.stderr);
    assert!(
        lines.iter().any(|l| l.ends_with(&format!(
            "] rank 0 (local 0) bound to cpus {cpu}, memory policy interleave:0"
        ))),
        "{}",
        r.stderr
    );
    let unbound = "] rank 1 (local 1) not bound (past the -bind-to user: list), memory policy \
                   interleave:0";
    assert!(lines.iter().any(|l| l.ends_with(unbound)), "{}", r.stderr);
    let r = run(&["-v", "-membind", "bind", "-n", "1", "true"], b"");
    assert!(
        r.stderr
            .lines()
            .any(|l| l.ends_with(&format!("] rank 0 (local 0) memory policy bind:{all}"))),
        "{}",
        r.stderr
    );
    // HYDRA_TOPO_DEBUG: the binding lines alone, without the rest of -v.
    let r = common::run_env(
        &["-membind", "interleave:0", "-bind-to", &user, "-n", "2", "true"],
        b"",
        &[("HYDRA_TOPO_DEBUG", "1")],
    );
    assert_eq!(r.status, 0, "{}", r.stderr);
    let mut got: Vec<&str> = r.stderr.lines().collect();
    got.sort();
    assert_eq!(got.len(), 2, "{}", r.stderr);
    assert!(
        got[0].ends_with(&format!(
            "] rank 0 (local 0) bound to cpus {cpu}, memory policy interleave:0"
        )),
        "{}",
        r.stderr
    );
    assert!(got[1].ends_with(unbound), "{}", r.stderr);
    let r = run(&["-v", "-membind", "nexttouch", "-n", "1", "true"], b"");
    assert_eq!(r.status, 0, "{}", r.stderr);
    let note = "libi-mpiexec: -membind nexttouch: nothing set (Linux has no next-touch policy)";
    assert!(r.stderr.lines().any(|l| l == note), "{}", r.stderr);
    assert!(!r.stderr.contains(" memory policy "), "{}", r.stderr);
}

/// As Hydra (measured): a rank that exits non-zero on its own (it never spoke PMI, or it
/// finalized) ends no other rank; they run to their end and the job's status is the failed
/// rank's. One killed by a signal (or leaving PMI without finalize) ends the others, unless
/// `-disable-auto-cleanup`.
#[test]
fn disable_auto_cleanup_lets_others_finish() {
    let done = |r: &common::Run| {
        let mut lines: Vec<String> = r.stdout.lines().map(str::to_string).collect();
        lines.sort();
        lines
    };
    let exit3 = "[ $PMI_RANK = 1 ] && exit 3; sleep 1; echo done $PMI_RANK";
    for opts in [&["-disable-auto-cleanup"][..], &[]] {
        let r = run(&[opts, &["-n", "3", "sh", "-c", exit3]].concat(), b"");
        assert_eq!(r.status, 3, "{opts:?}: {}", r.stderr);
        assert_eq!(done(&r), ["done 0", "done 2"], "{opts:?}: {}", r.stderr);
        assert!(r.stderr.contains("rank 1") && r.stderr.contains("code 3"), "{}", r.stderr);
    }
    let segv = "[ $PMI_RANK = 1 ] && kill -SEGV $$; sleep 1; echo done $PMI_RANK";
    let r = run(&["-disable-auto-cleanup", "-n", "3", "sh", "-c", segv], b"");
    assert_eq!(r.status, 139, "{}", r.stderr);
    assert_eq!(done(&r), ["done 0", "done 2"], "{}", r.stderr);
    // Without it the others are ended at once.
    let r = run(&["-n", "3", "sh", "-c", segv], b"");
    assert_eq!(r.status, 139, "{}", r.stderr);
    assert!(!r.stdout.contains("done"), "{}", r.stdout);
}

/// `-info` prints what this build offers and exits 0 without running anything.
#[test]
fn info_option() {
    let out = Command::new(MPIEXEC).arg("-info").output().expect("run");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for want in ["Version:", "Launchers available:", "ssh rsh fork slurm", "pbs lsf"] {
        assert!(text.contains(want), "{want}: {text}");
    }
}

/// When `libi-mpiexec` returns, nothing of the job is left, not even a zombie: it waits
/// (bounded) for every launcher it started — here the NLAs themselves — to exit, and reaps
/// them. The test process becomes a subreaper, so an NLA that outlived its front end (still
/// running, or exited and never reaped) would be re-parented to it and seen here.
#[test]
fn nothing_left_when_mpiexec_returns() {
    // SAFETY: prctl with an integer argument.
    let r = unsafe { libc_prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    assert_eq!(r, 0, "PR_SET_CHILD_SUBREAPER");
    for i in 0..5 {
        let mark = format!("return-{}-{i}", std::process::id());
        let st = Command::new(MPIEXEC)
            .args(["-launcher", "fork", "-hosts", "n1,n2,n3", "-n", "3", "true"])
            .env("LIBI_E2E_MARK", &mark)
            .stdin(Stdio::null())
            .status()
            .expect("run");
        assert!(st.success());
        let left = common::leftovers(&mark, std::time::Duration::ZERO);
        assert!(left.is_empty(), "still running when libi-mpiexec returned: {left:?}");
        let me = std::process::id().to_string();
        let orphans: Vec<String> = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
            .filter(|st| {
                // pid (comm) state ppid ...
                let Some((_, rest)) = st.rsplit_once(") ") else { return false };
                st.contains("(libi-nla)") && rest.split_whitespace().nth(1) == Some(me.as_str())
            })
            .collect();
        assert!(orphans.is_empty(), "NLAs outlived libi-mpiexec: {orphans:?}");
    }
}

/// A rank that ended while the others still run is reaped before long (the agent holds it
/// unreaped only until every local rank has ended, or a quarter of a second): not left a
/// zombie for the rest of the job.
#[test]
fn a_rank_that_ended_is_reaped_while_the_others_run() {
    let live =
        common::start(&["-n", "2", "sh", "-c", "[ $PMI_RANK = 0 ] && exit 0; exec sleep 60"], &[]);
    let nla = live.wait_for(1, |c| c.contains("libi-nla"))[0].0;
    live.wait_for(1, |c| c.starts_with("sleep 60"));
    // The agent's children and their states, from /proc.
    let children = || -> Vec<(String, String)> {
        let list =
            std::fs::read_to_string(format!("/proc/{nla}/task/{nla}/children")).unwrap_or_default();
        list.split_whitespace()
            .map(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                let state =
                    stat.rsplit_once(") ").map(|(_, r)| r[..1].to_string()).unwrap_or_default();
                (pid.to_string(), state)
            })
            .collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut now = children();
    while now.len() != 1 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
        now = children();
    }
    assert_eq!(now.len(), 1, "the agent's children: {now:?}");
    assert_ne!(now[0].1, "Z", "the running rank is a zombie: {now:?}");
    common::signal(live.pid(), 15);
    let (r, _) = live.finish(std::time::Instant::now());
    assert_ne!(r.status, 0, "{}", r.stderr);
}

const PR_SET_CHILD_SUBREAPER: i32 = 36;

extern "C" {
    #[link_name = "prctl"]
    fn libc_prctl(option: i32, a2: u64, a3: u64, a4: u64, a5: u64) -> i32;
}

/// The front end and its agents raise their own limit on open files (they hold a few
/// descriptors per rank), but ranks get the limit the job was started with, as under Hydra:
/// on one node, and through the fork launcher's NLAs (the limit travels in their
/// environment, and not on into the ranks').
#[test]
fn ranks_get_the_open_file_limit_of_the_job() {
    let hard = Command::new("sh").args(["-c", "ulimit -Hn"]).output().expect("sh");
    let hard = String::from_utf8_lossy(&hard.stdout).trim().to_string();
    if hard != "unlimited" && hard.parse::<u64>().is_ok_and(|h| h <= 512) {
        eprintln!("hard limit {hard}: nothing to raise, skipped");
        return;
    }
    let rank = "echo $(ulimit -Sn) ${LIBI_NOFILE_SOFT:-unset}";
    for hosts in [None, Some("a,b")] {
        let mut args = vec![MPIEXEC.to_string()];
        if let Some(h) = hosts {
            args.extend(["-launcher", "fork", "-hosts", h].map(String::from));
        }
        args.extend(["-n", "2", "sh", "-c", rank].map(String::from));
        let out = Command::new("sh")
            .args(["-c", "ulimit -Sn 512 && exec \"$@\"", "sh"])
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .expect("run");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{hosts:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(text, "512 unset\n512 unset\n", "{hosts:?}");
    }
}

/// A rank gets its stdin, stdout, stderr and `PMI_FD`, nothing else: neither a descriptor
/// the caller left open without close-on-exec (here a copy of its stderr pipe on 9, which a
/// rank's daemon would hold open) nor one of the agent's, on the first agent and on one it
/// started (as slurmstepd).
#[test]
fn ranks_get_only_stdio_and_pmi_fd() {
    use std::os::unix::process::CommandExt as _;
    let script = r#"for f in /proc/$$/fd/*; do [ -e "$f" ] && printf '%s ' "${f##*/}"; done; echo "pmi=$PMI_FD""#;
    let args = ["-launcher", "fork", "-hosts", "n1:2,n2:2", "-n", "4", "sh", "-c", script];
    let live = common::start_with(&args, &[], |cmd| {
        // SAFETY: dup2 is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                if libc::dup2(2, 9) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    });
    let (r, _) = live.finish(std::time::Instant::now());
    assert_eq!(r.status, 0, "{}{}", r.stdout, r.stderr);
    let text = &r.stdout;
    assert_eq!(text.lines().count(), 4, "{text}");
    for line in text.lines() {
        let (fds, pmi) = line.rsplit_once("pmi=").expect(line);
        let mut fds: Vec<u32> = fds.split_whitespace().map(|f| f.parse().expect(line)).collect();
        fds.sort();
        let pmi: u32 = pmi.parse().expect(line);
        assert!(pmi > 2, "{line}");
        assert_eq!(fds, [0, 1, 2, pmi], "{line}");
    }
}

/// Text that is not UTF-8: a file name given as an argument reaches the program as it is; a
/// variable of our environment whose value is not UTF-8 is passed on, and so is one whose
/// name is not, with nothing said; a current directory that is not UTF-8 is still where the
/// ranks start.
#[test]
fn text_that_is_not_utf8() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let file = std::env::temp_dir().join(OsStr::from_bytes(b"libi-e2e-caf\xe9.txt"));
    std::fs::write(&file, b"").expect("create the file");
    let out = Command::new(MPIEXEC).args(["-n", "1", "ls"]).arg(&file).output().expect("run");
    let _ = std::fs::remove_file(&file);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, [file.as_os_str().as_bytes(), b"\n"].concat());
    let out = Command::new(MPIEXEC)
        // The rank's own environment (a shell does not export names it cannot use).
        .args([
            "-n",
            "1",
            "sh",
            "-c",
            "echo ok; tr '\\0' '\\n' </proc/$$/environ | grep -ac '^LIBI_WEIRD'",
        ])
        .env(OsStr::from_bytes(b"LIBI_WEIRD"), OsStr::from_bytes(b"\xff\xfe"))
        .env(OsStr::from_bytes(b"LIBI_WEIRD_\xe9"), "name")
        .env("LIBI_WEIRD_OK", "fine")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n3\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    let dir = std::env::temp_dir().join(OsStr::from_bytes(b"libi-e2e-d\xe9"));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let out = Command::new(MPIEXEC)
        .args(["-n", "1", "sh", "-c", "/bin/pwd"])
        .current_dir(&dir)
        .env_remove("PWD")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, [dir.as_os_str().as_bytes(), b"\n"].concat());
    let _ = std::fs::remove_dir(&dir);
}

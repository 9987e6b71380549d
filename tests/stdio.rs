//! Output and input under load: every stream bounded (a slow or stopped reader slows the
//! ranks, memory stays flat), the event loop never waits for our readers (timeouts and
//! signals keep their promises), whole lines, and a closed stdout ends the job as Hydra's
//! does. Heavy figures are in `ci/stress.sh`; these are the small, fast versions.

mod common;

use common::{job_processes, run, signal, MPIEXEC};
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Largest RSS any process of the job may reach in these tests.
const RSS_LIMIT_MB: u64 = 100;

fn mark() -> String {
    static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    format!(
        "stdio-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    )
}

/// RSS in MB of the front end and every NLA of the job marked `mark`.
fn launcher_rss(mark: &str) -> Vec<(String, u64)> {
    job_processes(mark)
        .into_iter()
        .filter(|(_, c)| c.contains("libi-mpiexec") || c.contains("libi-nla"))
        .filter_map(|(pid, c)| {
            let kb = common::vm_rss_kib(pid)?;
            let who = if c.contains("libi-nla") { "nla" } else { "fe" };
            Some((format!("{who} {pid}"), kb / 1024))
        })
        .collect()
}

/// Sample the job's launcher RSS every 100 ms while `busy` holds; return the maximum.
fn max_rss_while(mark: &str, mut busy: impl FnMut() -> bool) -> u64 {
    let mut max = 0;
    while busy() {
        for (_, mb) in launcher_rss(mark) {
            max = max.max(mb);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    max
}

/// libi-mpiexec with stdin closed and stdout and stderr piped to us.
fn start_piped(mark: &str, args: &[&str], env: &[(&str, &str)]) -> std::process::Child {
    mpiexec(mark, args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start libi-mpiexec")
}

/// libi-mpiexec with stdin closed, stderr ours, and its stdout for us to read.
fn start_reading(mark: &str, args: &[&str]) -> (std::process::Child, std::process::ChildStdout) {
    let mut child = mpiexec(mark, args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start libi-mpiexec");
    let out = child.stdout.take().expect("stdout");
    (child, out)
}

/// All a finished child wrote on stderr.
fn stderr_text(child: &mut std::process::Child) -> String {
    let mut err = String::new();
    let _ = child.stderr.take().map(|mut e| e.read_to_string(&mut err));
    err
}

fn mpiexec(mark: &str, args: &[&str]) -> Command {
    let mut c = Command::new(MPIEXEC);
    c.args(args).env("LIBI_E2E_MARK", mark);
    c
}

/// Wait for a child with a deadline (the old front end blocked in a write for ever).
fn wait_deadline(child: &mut std::process::Child, secs: u64) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Ok(Some(st)) = child.try_wait() {
            return Some(st);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn no_leftovers(mark: &str) {
    let left = common::leftovers(mark, Duration::from_secs(5));
    assert!(left.is_empty(), "processes left behind: {left:?}");
}

/// A reader that never reads our stdout: `MPIEXEC_TIMEOUT` still ends the job (124), and
/// memory stays flat meanwhile. (Before: the front end blocked in its write to stdout,
/// ignored the timeout and signals, and the NLA grew by gigabytes.)
#[test]
fn stopped_reader_timeout_still_fires() {
    let m = mark();
    let t = Instant::now();
    let mut child = start_piped(&m, &["-n", "1", "yes"], &[("MPIEXEC_TIMEOUT", "2")]);
    // Hold the pipe open without reading it.
    let out = child.stdout.take();
    let mut done = None;
    let max = max_rss_while(&m, || {
        done = child.try_wait().ok().flatten();
        done.is_none() && t.elapsed() < Duration::from_secs(20)
    });
    let st = done.or_else(|| wait_deadline(&mut child, 1));
    drop(out);
    eprintln!("stopped reader: exited after {:.2} s, max RSS {max} MB", t.elapsed().as_secs_f64());
    let st = st.expect("libi-mpiexec did not exit while its stdout was not read");
    assert_eq!(st.code(), Some(124));
    assert!(max < RSS_LIMIT_MB, "RSS reached {max} MB");
    let err = stderr_text(&mut child);
    assert!(err.contains("timed out"), "{err}");
    no_leftovers(&m);
}

/// SIGTERM with an output backlog and a stopped reader: the ranks die of it, and output
/// nobody reads no longer holds the job: 143, nothing left.
#[test]
fn sigterm_with_stopped_reader() {
    let m = mark();
    let mut child = start_piped(&m, &["-n", "2", "yes"], &[]);
    let out = child.stdout.take();
    let t = Instant::now();
    let max = max_rss_while(&m, || t.elapsed() < Duration::from_millis(1500));
    let t = Instant::now();
    signal(child.id() as i32, 15);
    let st = wait_deadline(&mut child, 20).expect("no exit after SIGTERM");
    drop(out);
    eprintln!(
        "SIGTERM with a stopped reader: {:.2} s, max RSS {max} MB",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(st.code(), Some(143));
    assert!(max < RSS_LIMIT_MB, "RSS reached {max} MB");
    no_leftovers(&m);
}

/// A fast flood into a reader that keeps up: memory flat, every byte delivered.
#[test]
fn flood_is_bounded_and_complete() {
    let m = mark();
    // 4 ranks × 64 MiB of 64-byte lines.
    let (mut child, mut out) = start_reading(
        &m,
        &["-n", "4", "sh", "-c", "head -c 67108864 /dev/zero | tr '\\0' 'x' | fold -w 63"],
    );
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 16];
        let (mut bytes, mut lines) = (0u64, 0u64);
        loop {
            match out.read(&mut buf) {
                Ok(0) | Err(_) => return (bytes, lines),
                Ok(n) => {
                    bytes += n as u64;
                    lines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
                }
            }
        }
    });
    let max = max_rss_while(&m, || child.try_wait().ok().flatten().is_none());
    let st = child.wait().expect("wait");
    let (bytes, lines) = reader.join().expect("reader");
    eprintln!("flood: {bytes} bytes, {lines} lines, max RSS {max} MB");
    assert!(st.success());
    // fold leaves each rank's last 4 bytes without a newline: passed as they are, each
    // ended only where another rank's output follows (3 of the 4).
    assert_eq!(lines, 4 * (67108864 / 63) + 3);
    assert_eq!(bytes, 4 * (67108864 + 67108864 / 63) + 3);
    assert!(max < RSS_LIMIT_MB, "RSS reached {max} MB");
    no_leftovers(&m);
}

/// A reader that pauses (longer than a line is held for its newline) slows the ranks, and
/// cuts no line and loses nothing: while a stream is out of budget its rank waits in
/// `write`, not silent, and the line the agent holds has no deadline. Every line comes out
/// whole, labelled, in its rank's order, all of them. (The held line's deadline fired: it
/// was cut, ended by the next rank's output, `[1] 12`, ..., `[1] 3`; and when the rank had
/// exited meanwhile, the deadline gave the stream up, the rest of its output unread.)
#[test]
fn a_pausing_reader_cuts_no_line() {
    let m = mark();
    let n = 300_000u32;
    let seq = format!("seq 1 {n}");
    let (mut child, mut out) = start_reading(&m, &["-l", "-n", "2", "sh", "-c", &seq]);
    let mut all = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    for i in 0.. {
        match out.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(k) => all.extend_from_slice(&buf[..k]),
        }
        // Pauses of 150 ms (three times the partial line's deadline) now and then.
        if i % 16 == 0 && i < 16 * 8 {
            std::thread::sleep(Duration::from_millis(150));
        }
    }
    assert!(child.wait().expect("wait").success());
    let text = String::from_utf8(all).expect("utf-8");
    let mut next = [1u32; 2];
    for line in text.lines() {
        let (label, num) = line.split_once(' ').unwrap_or_else(|| panic!("line {line:?}"));
        let r: usize = match label {
            "[0]" => 0,
            "[1]" => 1,
            _ => panic!("line {line:?}"),
        };
        assert_eq!(num, next[r].to_string(), "rank {r}: line {line:?}");
        next[r] += 1;
    }
    assert_eq!(next, [n + 1; 2]);
    no_leftovers(&m);
}

/// Endless stdin into a rank that does not read it: memory flat (before: the front end read
/// all of it into memory).
#[test]
fn endless_stdin_is_bounded() {
    let m = mark();
    let mut child = mpiexec(&m, &["-n", "1", "sleep", "2"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start");
    let mut stdin = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || {
        let chunk = vec![0u8; 1 << 20];
        let mut sent = 0u64;
        while stdin.write_all(&chunk).is_ok() {
            sent += chunk.len() as u64;
        }
        sent
    });
    let max = max_rss_while(&m, || child.try_wait().ok().flatten().is_none());
    let st = child.wait().expect("wait");
    let sent = writer.join().expect("writer");
    eprintln!("endless stdin: {sent} bytes taken, max RSS {max} MB");
    assert!(st.success());
    assert!(max < RSS_LIMIT_MB, "RSS reached {max} MB");
    assert!(sent < 64 << 20, "{sent} bytes of stdin were taken for a rank that reads none");
    no_leftovers(&m);
}

/// `| head -1`: our stdout closes; the job ends at once with 141 (128 + SIGPIPE), as
/// Hydra's mpiexec ends (killed by SIGPIPE), and nothing is left.
#[test]
fn closed_stdout_ends_the_job() {
    let m = mark();
    let mut child = start_piped(&m, &["-n", "2", "yes"], &[]);
    let mut out = child.stdout.take().expect("stdout");
    let mut first = [0u8; 2];
    out.read_exact(&mut first).expect("first line");
    assert_eq!(&first, b"y\n");
    drop(out);
    let st =
        wait_deadline(&mut child, 20).expect("libi-mpiexec did not end after its stdout closed");
    assert_eq!(st.code(), Some(141));
    let err = stderr_text(&mut child);
    assert!(err.is_empty(), "nothing said: {err}");
    no_leftovers(&m);
}

/// Our stdout or stderr on a full device (`> /dev/full`): rank output is lost, so the job
/// fails with 255 and says why in one line, as Hydra's does (EPIPE alone is silent: above).
/// Also when the failed write comes after every rank ended.
#[test]
fn a_full_stdout_or_stderr_fails_the_job() {
    for (i, stream) in ["stdout", "stderr"].into_iter().enumerate() {
        for _ in 0..5 {
            let full =
                std::fs::OpenOptions::new().write(true).open("/dev/full").expect("/dev/full");
            let mut cmd = Command::new(MPIEXEC);
            cmd.args(["-n", "2", "sh", "-c", if i == 0 { "echo hi" } else { "echo hi >&2" }]);
            let out = if i == 0 {
                cmd.stdout(full).stderr(Stdio::piped()).output()
            } else {
                cmd.stderr(full).stdout(Stdio::piped()).output()
            }
            .expect("run");
            assert_eq!(out.status.code(), Some(255), "{stream}");
            if i == 0 {
                let err = String::from_utf8_lossy(&out.stderr);
                assert!(err.contains("cannot write our stdout: No space left"), "{err}");
            }
        }
    }
}

/// Our stdout or stderr closed (`>&-`, `2>&-`): rank output written there fails the job with
/// 255 (and, stdout closed, one line on stderr naming it), as a full device does, instead of
/// going to a /dev/null the runtime opened in its place; a job that writes nothing there ends
/// with its own status (Hydra fails it with 255 either way); a closed stdin reads as empty.
#[test]
fn a_closed_stdout_or_stderr_fails_the_job_that_writes_there() {
    let closed = |mark: &str, redirect: &str, script: &str| {
        // The shell closes the descriptor, then execs us in its place.
        let out = Command::new("sh")
            .args(["-c", &format!("exec \"$0\" -n 2 sh -c '{script}' {redirect}"), MPIEXEC])
            .env("LIBI_E2E_MARK", mark)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .expect("run");
        no_leftovers(mark);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, _, err) = closed(&mark(), ">&-", "seq 1 1000");
    assert_eq!(code, Some(255), "{err}");
    assert!(err.contains("cannot write our stdout: Bad file descriptor"), "{err}");
    // Our own messages go to stderr too: with it closed, the status is the report.
    let (code, out, _) = closed(&mark(), "2>&-", "echo x >&2");
    assert_eq!(code, Some(255), "{out}");
    let (code, _, err) = closed(&mark(), ">&-", "exit 3");
    assert_eq!(code, Some(3), "{err}");
    let (code, out, err) = closed(&mark(), "<&-", "cat; echo done");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "done\ndone\n");
}

/// Four ranks print one 200 KiB line each, of their own letter: exactly four lines, each
/// one letter, with and without `-l`.
#[test]
fn long_lines_stay_whole() {
    let script = "L=$(printf \"\\\\$(printf %o $((97 + PMI_RANK)))\"); \
                  head -c 204800 /dev/zero | tr '\\0' \"$L\"; echo";
    for label in [false, true] {
        let mut args = vec!["-n", "4", "bash", "-c", script];
        if label {
            args.insert(0, "-l");
        }
        let r = run(&args, b"");
        assert_eq!(r.status, 0, "{}", r.stderr);
        let lines: Vec<&str> = r.stdout.lines().collect();
        assert_eq!(lines.len(), 4, "{} lines", lines.len());
        let mut letters = Vec::new();
        for l in lines {
            let body = if label {
                let (p, b) = l.split_once("] ").expect("label");
                let rank: u8 = p.trim_start_matches('[').parse().expect("rank");
                assert_eq!(b.as_bytes()[0], b'a' + rank, "label [{rank}] on another rank's line");
                b
            } else {
                l
            };
            assert_eq!(body.len(), 204800);
            let c = body.as_bytes()[0];
            assert!(body.bytes().all(|b| b == c), "a line mixes ranks");
            letters.push(c);
        }
        letters.sort();
        assert_eq!(letters, b"abcd");
    }
}

/// A line over the 512 KiB cap travels in pieces; when another rank's output comes between
/// them, the line is ended there and goes on as a (labelled) line of its own: lines of
/// different ranks never mix.
#[test]
fn over_long_lines_of_two_ranks_do_not_mix() {
    let r = run(
        &[
            "-l",
            "-n",
            "2",
            "sh",
            "-c",
            "head -c 3145728 /dev/zero | tr '\\0' $PMI_RANK; echo; echo done$PMI_RANK",
        ],
        b"",
    );
    assert_eq!(r.status, 0, "{}", r.stderr);
    let mut total = [0usize; 2];
    for l in r.stdout.lines() {
        let (p, body) = l.split_once("] ").expect("label");
        let rank: usize = p.trim_start_matches('[').parse().expect("rank");
        if body.starts_with("done") {
            assert_eq!(body, format!("done{rank}"));
            continue;
        }
        let c = b'0' + rank as u8;
        assert!(body.bytes().all(|b| b == c), "a line mixes ranks");
        total[rank] += body.len();
    }
    assert_eq!(total, [3145728, 3145728]);
}

/// The last lines of two ranks without a newline are never joined: the first one is ended
/// when the other comes; the last one stays as it is. Our own line on stderr starts on a
/// line of its own too.
#[test]
fn unterminated_last_lines_stay_apart() {
    let r = run(&["-n", "2", "sh", "-c", "printf rank$PMI_RANK"], b"");
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert!(r.stdout == "rank0\nrank1" || r.stdout == "rank1\nrank0", "{:?}", r.stdout);
    let r = run(&["-l", "-n", "2", "sh", "-c", "printf rank$PMI_RANK"], b"");
    assert!(
        r.stdout == "[0] rank0\n[1] rank1" || r.stdout == "[1] rank1\n[0] rank0",
        "{:?}",
        r.stdout
    );
    let r = run(&["-n", "1", "sh", "-c", "printf oops >&2; exit 3"], b"");
    assert_eq!(r.status, 3);
    assert!(r.stderr.starts_with("oops\nlibi-mpiexec: rank 0"), "{:?}", r.stderr);
}

/// A short line, then (once it has gone up) a line longer than the output window: the long
/// one must not wait for credit that never comes (it hung, until MPIEXEC_TIMEOUT, when a
/// 1 MiB piece needed the whole window while the short line was still unacknowledged).
#[test]
fn long_line_after_a_short_one_does_not_hang() {
    for label in [false, true] {
        let mut args = vec![
            "-n",
            "1",
            "sh",
            "-c",
            "echo hi; sleep 0.2; head -c 3000000 /dev/zero | tr '\\0' z; echo",
        ];
        if label {
            args.insert(0, "-l");
        }
        let out = Command::new(MPIEXEC)
            .args(&args)
            .env("MPIEXEC_TIMEOUT", "60")
            .stdin(Stdio::null())
            .output()
            .expect("run");
        assert!(out.status.success(), "label {label}: {}", String::from_utf8_lossy(&out.stderr));
        let p = if label { "[0] " } else { "" };
        let mut want = format!("{p}hi\n{p}").into_bytes();
        want.extend(std::iter::repeat_n(b'z', 3000000));
        want.push(b'\n');
        assert_eq!(out.stdout.len(), want.len(), "label {label}");
        assert!(out.stdout == want, "label {label}: the bytes differ");
    }
}

/// Output passes byte for byte, as with Hydra: binary data, a line far over the agent's
/// 512 KiB cap and a last line without a newline come out exactly as the rank wrote them.
#[test]
fn output_is_passed_byte_for_byte() {
    let dir = std::env::temp_dir().join(format!("libi-bytes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let f = dir.join("data");
    // Every byte value, then 2.5 MiB without a newline, then no newline at the end.
    let mut data: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
    data.extend(std::iter::repeat_n(b'z', 5 << 19));
    data.extend_from_slice(b"\x00\xff tail");
    std::fs::write(&f, &data).expect("write");
    let f = f.to_string_lossy().into_owned();
    for label in [false, true] {
        let mut args = vec!["-n", "1", "cat", f.as_str()];
        if label {
            args.insert(0, "-l");
        }
        let out = Command::new(MPIEXEC).args(&args).stdin(Stdio::null()).output().expect("run");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let want = if label {
            // The prefix on each line the rank starts; the long line's pieces stay one line.
            let mut w = Vec::new();
            for line in data.split_inclusive(|&c| c == b'\n') {
                w.extend_from_slice(b"[0] ");
                w.extend_from_slice(line);
            }
            w
        } else {
            data.clone()
        };
        assert_eq!(out.stdout.len(), want.len(), "label {label}");
        assert!(out.stdout == want, "label {label}: the bytes differ");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Warnings into a pipe carry no colour codes.
#[test]
fn warnings_have_no_colour_in_a_pipe() {
    let r = run(
        &[
            "-n",
            "1",
            "bash",
            "-c",
            "printf 'cmd=no_such_command\\n' >&$PMI_FD; read -r x <&$PMI_FD",
        ],
        b"",
    );
    assert!(r.stderr.contains("no_such_command"), "{}", r.stderr);
    assert!(!r.stderr.contains('\u{1b}'), "ANSI codes in: {:?}", r.stderr);
}

/// A rank flooding stdout does not starve PMI: rank 0 writes without pause while all ranks
/// run 100 fences (on one node and across two); the fences complete, and their time is
/// printed (`ci/stress.sh` has the heavy version, beside Hydra).
#[test]
fn fences_complete_during_an_output_flood() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("stdio-programs");
    let exe = common::cc_program(&dir, "flood_fence", "flood_fence.c", &["-pthread"]);
    let exe = exe.to_string_lossy().into_owned();
    for hosts in [None, Some("n1:2,n2:2")] {
        let m = mark();
        let mut args = vec!["-n", "4", exe.as_str(), "100"];
        if let Some(h) = hosts {
            args.splice(0..0, ["-launcher", "fork", "-hosts", h]);
        }
        let t = Instant::now();
        let out = mpiexec(&m, &args)
            .env("MPIEXEC_TIMEOUT", "60")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        eprintln!("flood during fences ({hosts:?}): {:.2} s; {err}", t.elapsed().as_secs_f64());
        assert_eq!(out.status.code(), Some(0), "{err}");
        assert!(err.contains("flood_fence: 100 fences in"), "{err}");
        no_leftovers(&m);
    }
}

/// Output into a named FIFO (`mpiexec ... > fifo`, a reader at its other end) arrives whole
/// and the job succeeds, as under Hydra. (The kernel refuses writes that cannot block on a
/// FIFO opened from a filesystem: they failed the job, "Operation not supported".)
#[test]
fn stdout_into_a_named_fifo() {
    let dir = std::env::temp_dir().join(format!("libi-{}", mark()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let fifo = dir.join("out");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(&fifo).expect("read the fifo"))
    };
    let out = std::fs::OpenOptions::new().write(true).open(&fifo).expect("open the fifo");
    let m = mark();
    let mut c = mpiexec(&m, &["-n", "3", "sh", "-c", "echo line-$PMI_RANK"]);
    let mut child = c.stdout(out).stderr(Stdio::piped()).spawn().expect("spawn mpiexec");
    // The command holds our copy of the FIFO's write end: the reader's EOF waits for it.
    drop(c);
    let status = wait_deadline(&mut child, 60).expect("mpiexec did not end");
    let err = stderr_text(&mut child);
    let got = String::from_utf8(reader.join().expect("reader")).expect("text");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(status.success(), "{status:?}: {err}");
    let mut lines: Vec<&str> = got.lines().collect();
    lines.sort();
    assert_eq!(lines, ["line-0", "line-1", "line-2"], "stderr: {err}");
}

/// A rank that leaves a background child holding its stdout and stderr: the rank's end is
/// not held up by the child (its output is given up once silent for a while after the
/// rank's exit), everything the rank wrote arrives, the line it left without a newline too,
/// and the child is swept with the job.
#[test]
fn output_held_open_by_a_rank_child_ends_with_the_rank() {
    let script = "echo out $PMI_RANK; echo err $PMI_RANK >&2; printf 'no-newline'; sleep 300 &";
    let live = common::start(&["-n", "2", "sh", "-c", script], &[]);
    let t = Instant::now();
    let (r, _) = live.finish(t);
    assert_eq!(r.status, 0, "{}", r.stderr);
    for rank in 0..2 {
        assert!(r.stdout.lines().any(|l| l == format!("out {rank}")), "{}", r.stdout);
        assert!(r.stderr.lines().any(|l| l == format!("err {rank}")), "{}", r.stderr);
    }
    assert_eq!(r.stdout.matches("no-newline").count(), 2, "{}", r.stdout);
}

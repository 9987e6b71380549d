//! Helpers shared by the end-to-end test files: the C programs (compiled once with
//! Debian's `mpicc`), running `libi-mpiexec`, and the scan for leftover processes.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub const MPIEXEC: &str = env!("CARGO_BIN_EXE_libi-mpiexec");

/// Compile the C programs once per test binary.
pub fn programs() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/programs");
        let out =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("programs-{}", std::process::id()));
        std::fs::create_dir_all(&out).expect("create program dir");
        let build = |name: &str, file: &str, cc: &str, defs: &[&str]| {
            let st = Command::new(cc)
                .args(defs)
                .arg("-O2")
                .arg("-o")
                .arg(out.join(name))
                .arg(src.join(file))
                .status()
                .unwrap_or_else(|e| {
                    panic!("{cc} not found ({e}): install Debian's mpich (ci/install-deps.sh)")
                });
            assert!(st.success(), "{cc} failed for {file}");
        };
        build("hello", "hello.c", "mpicc", &["-DPROG=\"hello\""]);
        build("hello_b", "hello.c", "mpicc", &["-DPROG=\"other\""]);
        build("fail", "fail.c", "mpicc", &[]);
        build("pmi_exchange", "pmi_exchange.c", "cc", &[]);
        build("pmi_replay", "pmi_replay.c", "cc", &[]);
        build("pmi_close", "pmi_close.c", "cc", &[]);
        build("pmi_bytes", "pmi_bytes.c", "cc", &[]);
        build("bigfence", "bigfence.c", "cc", &[]);
        build("stall_fence", "stall_fence.c", "cc", &[]);
        out
    })
}

pub fn prog(name: &str) -> String {
    programs().join(name).to_string_lossy().into_owned()
}

pub struct Run {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn from_output(out: &std::process::Output) -> Run {
        Run {
            status: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// A marker unique to one job of this test process (see [`leftovers`]).
pub fn new_mark() -> String {
    format!("{}-{}", std::process::id(), MARK_SEQ.fetch_add(1, std::sync::atomic::Ordering::SeqCst))
}

static MARK_SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Run libi-mpiexec with `args`, feeding `stdin`; assert nothing of the job survives it.
pub fn run(args: &[&str], stdin: &[u8]) -> Run {
    run_env(args, stdin, &[])
}

/// As [`run`], with extra environment variables for libi-mpiexec.
pub fn run_env(args: &[&str], stdin: &[u8], env: &[(&str, &str)]) -> Run {
    run_with(MPIEXEC, args, stdin, env)
}

/// As [`run`], but through another program (e.g. `salloc ... libi-mpiexec ...`).
pub fn run_program(program: &str, args: &[&str], stdin: &[u8]) -> Run {
    run_with(program, args, stdin, &[])
}

/// As [`run_program`], with extra environment variables.
pub fn run_program_env(program: &str, args: &[&str], env: &[(&str, &str)]) -> Run {
    run_with(program, args, b"", env)
}

fn run_with(program: &str, args: &[&str], stdin: &[u8], env: &[(&str, &str)]) -> Run {
    let mark = new_mark();
    let mut child = Command::new(program)
        .args(args)
        .env("LIBI_E2E_MARK", &mark)
        .env("MPIEXEC_TIMEOUT", "120")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start libi-mpiexec");
    {
        let mut i = child.stdin.take().expect("stdin");
        let _ = i.write_all(stdin);
    }
    let out = child.wait_with_output().expect("wait libi-mpiexec");
    let r = Run::from_output(&out);
    let left = leftovers(&mark, Duration::from_secs(5));
    assert!(left.is_empty(), "processes left behind: {left:?}\nstderr: {}", r.stderr);
    r
}

/// Run `program` directly (no mpiexec: an MPI singleton) with extra environment variables,
/// in a process group of its own, killed with that group after 120 s (a failed test, not a
/// hung one); assert nothing carrying the job's marker survives it.
pub fn run_direct(program: &str, args: &[&str], env: &[(&str, &str)]) -> Run {
    use std::os::unix::process::CommandExt;
    let mark = new_mark();
    let mut child = Command::new(program)
        .args(args)
        .env("LIBI_E2E_MARK", &mark)
        .env("MPIEXEC_TIMEOUT", "120")
        .envs(env.iter().copied())
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the program");
    let pid = child.id() as i32;
    let reader = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = pipe.read_to_end(&mut v);
            String::from_utf8_lossy(&v).into_owned()
        })
    };
    let out = reader(Box::new(child.stdout.take().expect("stdout")));
    let err = reader(Box::new(child.stderr.take().expect("stderr")));
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st.code().unwrap_or(-1);
        }
        if Instant::now() > deadline {
            signal(-pid, 9);
            let _ = child.wait();
            break -2;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let r = Run {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    };
    let left = leftovers(&mark, Duration::from_secs(5));
    assert!(left.is_empty(), "processes left behind: {left:?}\nstderr: {}", r.stderr);
    r
}

/// Pids of processes whose environment carries the marker, waiting up to `grace` for them
/// to disappear.
pub fn leftovers(mark: &str, grace: Duration) -> Vec<String> {
    let needle = format!("LIBI_E2E_MARK={mark}\0");
    let deadline = Instant::now() + grace;
    loop {
        let mut found = Vec::new();
        if let Ok(dir) = std::fs::read_dir("/proc") {
            for e in dir.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if !name.bytes().all(|b| b.is_ascii_digit()) {
                    continue;
                }
                let Ok(env) = std::fs::read(e.path().join("environ")) else {
                    continue;
                };
                if env.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
                    found.push(format!(
                        "{name}: {}",
                        String::from_utf8_lossy(&cmd).replace('\0', " ")
                    ));
                }
            }
        }
        if found.is_empty() || Instant::now() >= deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Check MPICH hello output: n lines, every rank once, correct sums.
pub fn hello_lines(r: &Run, n: usize) {
    assert_eq!(r.status, 0, "stderr: {}", r.stderr);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), n, "stdout: {}", r.stdout);
    let expect_sum = n * (n - 1) / 2;
    let mut seen = vec![false; n];
    for l in &lines {
        let w: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(w.len(), 10, "line: {l}");
        let rank: usize = w[2].parse().expect("rank");
        assert_eq!(w[4], n.to_string(), "size in {l}");
        assert_eq!(w[9], "ok", "{l}");
        assert_eq!(w[8], expect_sum.to_string(), "{l}");
        assert!(!seen[rank], "rank {rank} twice");
        seen[rank] = true;
    }
}

/// A job running in the background, for tests that act on it while it runs.
pub struct Live {
    pub child: std::process::Child,
    pub mark: String,
}

/// Start libi-mpiexec in the background (stdin closed, output captured).
pub fn start(args: &[&str], env: &[(&str, &str)]) -> Live {
    start_with(args, env, |_| {})
}

/// As [`start`], with `prepare` applied to the command first (limits, signal dispositions).
pub fn start_with(args: &[&str], env: &[(&str, &str)], prepare: impl FnOnce(&mut Command)) -> Live {
    let mark = new_mark();
    let mut cmd = Command::new(MPIEXEC);
    cmd.args(args)
        .env("LIBI_E2E_MARK", &mark)
        .env("MPIEXEC_TIMEOUT", "120")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    prepare(&mut cmd);
    let child = cmd.spawn().expect("start libi-mpiexec");
    Live { child, mark }
}

/// Processes of a job: (pid, cmdline) of everything carrying its marker.
pub fn job_processes(mark: &str) -> Vec<(i32, String)> {
    let needle = format!("LIBI_E2E_MARK={mark}\0");
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(pid) = name.parse::<i32>() else { continue };
        let Ok(env) = std::fs::read(e.path().join("environ")) else { continue };
        if env.windows(needle.len()).any(|w| w == needle.as_bytes()) {
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            found.push((pid, String::from_utf8_lossy(&cmd).replace('\0', " ")));
        }
    }
    found
}

impl Live {
    /// Wait until at least `n` processes of the job match `pred` (panics after 30 s).
    pub fn wait_for(&self, n: usize, pred: impl Fn(&str) -> bool) -> Vec<(i32, String)> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ps: Vec<(i32, String)> =
                job_processes(&self.mark).into_iter().filter(|(_, c)| pred(c)).collect();
            if ps.len() >= n {
                return ps;
            }
            assert!(Instant::now() < deadline, "job never reached {n} matching processes");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Wait for the front end; return its result and the seconds from `since` until every
    /// process of the job is gone (front end, NLAs, ranks, their children).
    pub fn finish(self, since: Instant) -> (Run, f64) {
        let out = self.child.wait_with_output().expect("wait libi-mpiexec");
        let left = leftovers(&self.mark, Duration::from_secs(5));
        let teardown = since.elapsed().as_secs_f64();
        let r = Run::from_output(&out);
        assert!(left.is_empty(), "processes left behind: {left:?}\nstderr: {}", r.stderr);
        (r, teardown)
    }
}

/// The resident size of process `pid` in kB (`VmRSS`), if it runs.
pub fn vm_rss_kib(pid: i32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Send a signal to a process.
pub fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) with a pid we own in the test.
    unsafe {
        libc_kill(pid, sig);
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// The one line libi-mpiexec printed about the failure.
pub fn failure_line(r: &Run) -> String {
    let lines: Vec<&str> = r.stderr.lines().filter(|l| l.starts_with("libi-mpiexec: ")).collect();
    assert_eq!(lines.len(), 1, "exactly one line from libi-mpiexec: {}", r.stderr);
    lines[0].to_string()
}

/// Compile the C program `tests/programs/<file>` with `cc` into `out_dir/<name>` with extra
/// arguments (include dirs, `-L`/`-l`, rpath); panics with the compiler's output on failure.
pub fn cc_program(out_dir: &Path, name: &str, file: &str, args: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/programs").join(file);
    std::fs::create_dir_all(out_dir).expect("create program dir");
    let exe = out_dir.join(name);
    let out = Command::new("cc")
        .arg("-O2")
        .arg("-Wall")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cc not found ({e}): install a C compiler"));
    assert!(out.status.success(), "cc failed for {file}: {}", String::from_utf8_lossy(&out.stderr));
    exe
}

/// The compiler flags for a C program on `liblibi.so` (the LIBI session API), as
/// `pkg-config libi` gives them for the build next to `libi-mpiexec`.
pub fn libi_c_flags() -> Vec<String> {
    let target = Path::new(MPIEXEC).parent().expect("target dir");
    assert!(
        target.join("liblibi.so").is_file() && target.join("libi.pc").is_file(),
        "liblibi.so is not built: run cargo build --workspace first"
    );
    let flags = Command::new("pkg-config")
        .args(["--cflags", "--libs", "libi"])
        .env("PKG_CONFIG_PATH", target)
        .output()
        .expect("pkg-config (install it: ci/install-deps.sh)");
    assert!(flags.status.success(), "pkg-config libi: {}", String::from_utf8_lossy(&flags.stderr));
    String::from_utf8_lossy(&flags.stdout).split_whitespace().map(str::to_string).collect()
}

/// Compile C programs on `liblibi.so` into a fresh directory of this test process (`tag`
/// names it): each (name, source path from the repository's top) with `-Wall -Werror -O2
/// -pthread` and [`libi_c_flags`]. Returns the directory and the flags.
pub fn libi_c_programs(tag: &str, programs: &[(&str, &str)]) -> (PathBuf, Vec<String>) {
    let flags = libi_c_flags();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&out).expect("create program dir");
    for (name, src) in programs {
        let st = Command::new("cc")
            .args(["-Wall", "-Werror", "-O2", "-pthread", "-o"])
            .arg(out.join(name))
            .arg(root.join(src))
            .args(&flags)
            .status()
            .expect("cc");
        assert!(st.success(), "cc {src} failed");
    }
    (out, flags)
}

/// The MPICH 5 installation (PyPI wheel) the dynamic-process tests compile against.
pub fn mpich5() -> PathBuf {
    let dir =
        PathBuf::from(std::env::var("LIBI_MPICH5").unwrap_or_else(|_| "/opt/libi/mpich5".into()));
    assert!(
        dir.join("bin/mpicc").exists(),
        "MPICH 5 not found in {dir:?}: run ci/install-deps.sh (or set LIBI_MPICH5)"
    );
    dir
}

/// A test program compiled once with MPICH 5's `mpicc`.
pub fn mpich5_program(name: &str) -> String {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let out =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("mpich5-{}", std::process::id()));
        std::fs::create_dir_all(&out).expect("create program dir");
        for name in ["nameserv", "spawn", "spawn_fail", "universe", "taskmanager", "alloc_kinds"] {
            let src =
                Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../tests/programs/{name}.c"));
            let st = Command::new(mpich5().join("bin/mpicc"))
                .arg("-o")
                .arg(out.join(name))
                .arg(src)
                .status()
                .expect("mpicc");
            assert!(st.success(), "MPICH 5 mpicc failed for {name}.c");
        }
        out
    });
    dir.join(name).to_string_lossy().into_owned()
}

/// Shell function for raw PMI-1 from a `bash` rank: `say LINE` sends one request and reads
/// the one-line reply into `$REPLY`.
pub const PMI_SAY: &str = r#"say() { printf '%s\n' "$1" >&$PMI_FD; read -r REPLY <&$PMI_FD; }"#;

/// A PMI-1 spawn block (one command): `nprocs` copies of `bash -c CHILD`, with the pre-put
/// pair `PARENT_ROOT_PORT_NAME=port` and `info` pairs. `nprocs` is text so that tests can
/// send a malformed block.
pub fn spawn_block(nprocs: &str, child: &str, port: &str, info: &[(&str, &str)]) -> String {
    let mut b = format!(
        "mcmd=spawn\nnprocs={nprocs}\nexecname=bash\ntotspawns=1\nspawnssofar=1\nargcnt=2\n\
         arg1=-c\narg2={child}\npreput_num=1\npreput_key_0=PARENT_ROOT_PORT_NAME\n\
         preput_val_0={port}\ninfo_num={}\n",
        info.len()
    );
    for (i, (k, v)) in info.iter().enumerate() {
        b.push_str(&format!("info_key_{i}={k}\ninfo_val_{i}={v}\n"));
    }
    b + "endcmd\n"
}

/// A `bash -c` rank that sends each spawn block of the variables `vars` (given with
/// `-genv`) and prints "parent on HOST REPLY" for each, then runs `then`.
pub fn spawner_script(vars: &[&str], then: &str) -> String {
    let blocks: Vec<String> = vars.iter().map(|v| format!("\"${v}\"")).collect();
    format!(
        "{PMI_SAY}\nsay 'cmd=init pmi_version=1 pmi_subversion=1'\n\
         for b in {}; do\n  printf '%s' \"$b\" >&$PMI_FD; read -r REPLY <&$PMI_FD\n  \
         echo \"parent on $(hostname) $REPLY\"\ndone\n{then}\n",
        blocks.join(" ")
    )
}

/// A one-line `bash -c` child: PMI init, `body`, finalize.
pub fn pmi_child(body: &str) -> String {
    format!("{PMI_SAY}; say 'cmd=init pmi_version=1 pmi_subversion=1'; {body}; say cmd=finalize")
}

/// Shell lines for a spawned `bash` rank: `$by` says who started its NLA — `nla` (an NLA
/// of the job, on this host) or `fe` (the front end's launcher: fork, or sshd for ssh) —
/// then the rank leaves a mark in `$SYNC` so that the spawner can wait for it. An agent
/// started by ssh has a warden above it, a process with its own command line: skipped.
pub const LAUNCHED_BY: &str = r#"gp=$(awk '{print $4}' /proc/$PPID/stat)
if cmp -s /proc/$PPID/cmdline /proc/$gp/cmdline; then gp=$(awk '{print $4}' /proc/$gp/stat); fi
case $(tr '\0' ' ' </proc/$gp/cmdline) in *libi-nla*--parent*) by=nla;; *) by=fe;; esac
touch $SYNC/$PMI_RANK-$RANDOM$RANDOM"#;

/// The spawner's wait for `n` marks in `$SYNC` (see [`LAUNCHED_BY`]).
pub fn wait_marks(n: usize) -> String {
    format!("while [ $(ls $SYNC | wc -l) -lt {n} ]; do sleep 0.05; done")
}

/// A fresh, empty directory for [`LAUNCHED_BY`] marks.
pub fn sync_dir(tag: &str) -> String {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "sync-{tag}-{}-{}",
        std::process::id(),
        MARK_SEQ.load(std::sync::atomic::Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("sync dir");
    d.to_string_lossy().into_owned()
}

/// A rank command printing "PMI_RANK MPI_LOCALRANKID cpu-list" (its affinity as the kernel
/// reports it).
pub const SHOW_CPUS: &str =
    "echo $PMI_RANK $MPI_LOCALRANKID $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)";

/// The lines of [`SHOW_CPUS`] ranks: (local rank id, cpu list) by rank.
pub fn rank_cpus(r: &Run, n: usize) -> Vec<(String, String)> {
    assert_eq!(r.status, 0, "stderr: {}", r.stderr);
    let mut v: Vec<(u32, String, String)> = r
        .stdout
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 3, "{l}");
            (f[0].parse().expect("rank"), f[1].to_string(), f[2].to_string())
        })
        .collect();
    v.sort();
    assert_eq!(v.len(), n, "{}", r.stdout);
    v.into_iter().map(|(_, l, c)| (l, c)).collect()
}

/// The "RANK value" lines of a job of `n` ranks (ranks 0 to n-1, each once): the values, by
/// rank.
pub fn by_rank(r: &Run, n: usize) -> Vec<String> {
    assert_eq!(r.status, 0, "{}", r.stderr);
    let mut lines: Vec<(u32, String)> = r
        .stdout
        .lines()
        .map(|l| {
            let (rank, v) = l.split_once(' ').unwrap_or((l, ""));
            (rank.parse().unwrap_or(u32::MAX), v.to_string())
        })
        .collect();
    lines.sort();
    assert_eq!(lines.len(), n, "{}\n{}", r.stdout, r.stderr);
    for (i, (rank, _)) in lines.iter().enumerate() {
        assert_eq!(*rank as usize, i, "{}", r.stdout);
    }
    lines.into_iter().map(|(_, v)| v).collect()
}

/// The cpus this (test) process may use, as numbers.
pub fn my_cpus() -> Vec<u32> {
    let s = std::fs::read_to_string("/proc/self/status").expect("status");
    let l = s.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).expect("list");
    let mut out = Vec::new();
    for part in l.trim().split(',') {
        match part.split_once('-') {
            Some((a, b)) => out.extend(a.parse::<u32>().unwrap()..=b.parse::<u32>().unwrap()),
            None => out.push(part.parse().unwrap()),
        }
    }
    out
}

/// Write `text` to `path` as an executable script; its path as a string.
pub fn write_script(path: &Path, text: &str) -> String {
    std::fs::write(path, text).expect("write script");
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    path.to_string_lossy().into_owned()
}

/// A launcher that takes 1.5 s per node, then runs the command as ssh would.
pub fn slow_launcher(tag: &str) -> String {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let p = dir.join(format!("slow-ssh-{tag}-{}", std::process::id()));
    write_script(&p, "#!/bin/sh\nfor a; do last=$a; done\nsleep 1.5\nexec sh -c \"$last\"\n")
}

/// The ssh namespace hosts (`ci/with-netns-hosts.sh` sets `LIBI_TEST_HOSTS` and
/// `LIBI_TEST_SSH`): their names and the ssh wrapper, or None (the test is skipped) when they
/// are not set; with `LIBI_REQUIRE_SSH_TESTS` (CI) a skip is a failure.
pub fn ssh_test_hosts() -> Option<(Vec<String>, String)> {
    match (std::env::var("LIBI_TEST_HOSTS"), std::env::var("LIBI_TEST_SSH")) {
        (Ok(h), Ok(ssh)) if !h.is_empty() => {
            Some((h.split(',').map(str::to_string).collect(), ssh))
        }
        _ => {
            assert!(
                std::env::var("LIBI_REQUIRE_SSH_TESTS").is_err(),
                "LIBI_REQUIRE_SSH_TESTS is set but LIBI_TEST_HOSTS/LIBI_TEST_SSH are not"
            );
            eprintln!("ssh tests skipped: run under ci/with-netns-hosts.sh N -- cargo test");
            None
        }
    }
}

/// A job left running while a tool looks at it: ended with SIGINT when dropped, then nothing
/// carrying its marker may be left.
pub struct Background(pub Live);

impl Background {
    /// Start libi-mpiexec with `args`; wait until `libi-mpiexec --proctable` shows `n` ranks
    /// running (panics after 30 s).
    pub fn start(args: &[&str], n: usize) -> Background {
        let job = Background(start(args, &[]));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = Command::new(MPIEXEC)
                .args(["--proctable", &job.0.pid().to_string()])
                .output()
                .expect("libi-mpiexec --proctable");
            let text = String::from_utf8_lossy(&out.stdout);
            let running = text
                .lines()
                .filter(|l| l.split_whitespace().nth(2).is_some_and(|pid| pid != "0"))
                .count();
            if out.status.success() && running == n {
                return job;
            }
            assert!(Instant::now() < deadline, "the job never had {n} ranks running: {text}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn pid(&self) -> String {
        self.0.pid().to_string()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        signal(self.0.pid(), 2);
        let _ = self.0.child.wait();
        let left = leftovers(&self.0.mark, Duration::from_secs(10));
        if !std::thread::panicking() {
            assert!(left.is_empty(), "left running by the job: {left:?}");
        }
    }
}

/// The Open MPI 5 installation (PyPI wheel, `ci/install-deps.sh`) the PMIx tests compile
/// against, or `None` (the test is skipped, unless `LIBI_REQUIRE_PMIX_TESTS=1`).
pub fn openmpi5() -> Option<PathBuf> {
    let dir = PathBuf::from(
        std::env::var("LIBI_OPENMPI5").unwrap_or_else(|_| "/opt/libi/openmpi5".into()),
    );
    if dir.join("bin/mpicc").exists() {
        return Some(dir);
    }
    assert!(
        std::env::var("LIBI_REQUIRE_PMIX_TESTS").as_deref() != Ok("1"),
        "LIBI_REQUIRE_PMIX_TESTS=1 but Open MPI 5 is not in {dir:?}: run ci/install-deps.sh"
    );
    eprintln!("Open MPI tests skipped: no Open MPI 5 in {dir:?} (ci/install-deps.sh)");
    None
}

/// An Open MPI 5 test program (`pmix-server/tests/programs/NAME.c`), compiled once per test
/// process with the wheel's `mpicc`.
pub fn ompi_program(name: &str) -> String {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let prefix = openmpi5().expect("Open MPI 5");
        let out =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("ompi5-{}", std::process::id()));
        std::fs::create_dir_all(&out).expect("create program dir");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../pmix-server/tests/programs");
        for name in ["hello", "ring", "abort", "names", "wait", "spawn", "noexit", "lost"] {
            let st = Command::new(prefix.join("bin/mpicc"))
                .arg("-o")
                .arg(out.join(name))
                .arg(src.join(format!("{name}.c")))
                .status()
                .expect("Open MPI's mpicc");
            assert!(st.success(), "Open MPI 5 mpicc failed for {name}.c");
        }
        out
    });
    dir.join(name).to_string_lossy().into_owned()
}

/// What Open MPI's ranks need on a machine without fast networks: the transports pinned
/// (its UCX and OFI components otherwise probe for over a second), TCP on `ifaces`.
pub fn ompi_env(ifaces: &str) -> Vec<(&'static str, String)> {
    vec![
        ("OMPI_MCA_pml", "ob1".into()),
        ("OMPI_MCA_btl", "self,sm,tcp".into()),
        ("OMPI_MCA_btl_tcp_if_include", ifaces.into()),
        // The wheel's ranks may run as root in CI containers.
        ("OMPI_ALLOW_RUN_AS_ROOT", "1".into()),
        ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1".into()),
    ]
}

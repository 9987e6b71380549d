//! Hostile neighbours (issue 50): another local user attacks a user's jobs. Each test runs
//! the job as one real unprivileged user (`libi-owner`) and the attack as another
//! (`libi-evil`), both created with `useradd` if missing and switched to with `setpriv`; the
//! attacker is `tests/tools/hostile-neighbour` (run with `/usr/bin/python3`).
//!
//! Needs root (to create the users and switch to them); without it each test prints a skip
//! line and passes, unless `LIBI_REQUIRE_MULTIUSER_TESTS` is set. The binaries the users run
//! are copies of `libi-mpiexec` and `libi-nla` in a fresh 0755 directory under `/tmp` (root's
//! target directory is not theirs to read), taken from `LIBI_NEIGHBOURS_BIN_DIR` when it is
//! set (to run these tests against other binaries, such as a build of the code before the
//! fixes), else from this build. Every job carries `LIBI_E2E_MARK` and nothing of it may be
//! left behind; every attacker process is killed at the end of its test.

mod common;

use common::{job_processes, leftovers, new_mark, signal, Run};
use std::io::BufRead;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

const OWNER: &str = "libi-owner";
const EVIL: &str = "libi-evil";
/// The users' `PATH` (not root's: its pyenv shims are not theirs to run).
const PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";
const PYTHON: &str = "/usr/bin/python3";

#[derive(Debug, Clone, Copy)]
struct User {
    name: &'static str,
    uid: u32,
    gid: u32,
}

/// The two users and the directory (0755, under /tmp) with the binaries they run.
struct Env {
    owner: User,
    evil: User,
    /// `/tmp/libi-neighbours-PID`: `bin/` and one directory per test.
    base: PathBuf,
}

/// The base directory, removed when the test process exits.
static BASE: OnceLock<PathBuf> = OnceLock::new();

extern "C" fn remove_base() {
    if let Some(b) = BASE.get() {
        let _ = std::fs::remove_dir_all(b);
    }
}

/// The users and binaries, or `None` (after a skip line) when not root.
fn env() -> Option<&'static Env> {
    if !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var_os("LIBI_REQUIRE_MULTIUSER_TESTS").is_none(),
            "LIBI_REQUIRE_MULTIUSER_TESTS is set but these tests need root (to create two users \
             and switch to them)"
        );
        eprintln!("multi-user tests skipped: they need root");
        return None;
    }
    static ENV: OnceLock<Env> = OnceLock::new();
    Some(ENV.get_or_init(setup))
}

fn setup() -> Env {
    let owner = user(OWNER);
    let evil = user(EVIL);
    // Directories of earlier runs whose process is gone (killed before its exit).
    for e in std::fs::read_dir("/tmp").into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(pid) = name.strip_prefix("libi-neighbours-") {
            if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    let base = PathBuf::from(format!("/tmp/libi-neighbours-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir(&base).expect("create the test directory under /tmp");
    let _ = BASE.set(base.clone());
    // SAFETY: registers a plain function that only removes our directory at exit.
    unsafe {
        libc::atexit(remove_base);
    }
    chmod(&base, 0o755);
    let bin = base.join("bin");
    std::fs::create_dir(&bin).expect("create bin");
    chmod(&bin, 0o755);
    let from = match std::env::var_os("LIBI_NEIGHBOURS_BIN_DIR") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_BIN_EXE_libi-mpiexec")).parent().expect("bin dir").into(),
    };
    for exe in ["libi-mpiexec", "libi-nla"] {
        let src = from.join(exe);
        assert!(src.is_file(), "{} is missing (build the workspace first)", src.display());
        std::fs::copy(&src, bin.join(exe))
            .unwrap_or_else(|e| panic!("copy {} into {}: {e}", src.display(), bin.display()));
        chmod(&bin.join(exe), 0o755);
    }
    let tool = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/tools/hostile-neighbour");
    std::fs::copy(&tool, bin.join("hostile-neighbour")).expect("copy hostile-neighbour");
    chmod(&bin.join("hostile-neighbour"), 0o755);
    assert!(Path::new(PYTHON).is_file(), "{PYTHON} is needed for the attacker");
    Env { owner, evil, base }
}

/// The user `name`, created (no home, no login shell) if missing.
fn user(name: &'static str) -> User {
    static CREATE: Mutex<()> = Mutex::new(());
    let _g = CREATE.lock().unwrap_or_else(|e| e.into_inner());
    let found = || nix::unistd::User::from_name(name).ok().flatten();
    if found().is_none() {
        let out = Command::new("useradd")
            .args(["-M", "-s", "/usr/sbin/nologin", name])
            .output()
            .expect("useradd (package passwd)");
        // Another test process may have created it meanwhile.
        assert!(
            out.status.success() || found().is_some(),
            "useradd {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let u = found().unwrap_or_else(|| panic!("no user {name} after useradd"));
    User { name, uid: u.uid.as_raw(), gid: u.gid.as_raw() }
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {mode:o} {}: {e}", p.display()));
}

fn chown(p: &Path, u: User) {
    std::os::unix::fs::chown(p, Some(u.uid), Some(u.gid))
        .unwrap_or_else(|e| panic!("chown {} {}: {e}", u.name, p.display()));
}

impl Env {
    fn mpiexec(&self) -> String {
        self.base.join("bin/libi-mpiexec").to_string_lossy().into_owned()
    }

    fn tool(&self) -> String {
        self.base.join("bin/hostile-neighbour").to_string_lossy().into_owned()
    }

    /// A fresh directory for one test (0755, root's), removed when the guard goes.
    fn dir(&self, tag: &str) -> TestDir {
        let d = self.base.join(tag);
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).expect("test dir");
        chmod(&d, 0o755);
        TestDir(d)
    }

    /// `dir/name`, a directory of user `u` with mode `mode`.
    fn subdir(&self, dir: &Path, name: &str, u: User, mode: u32) -> PathBuf {
        let d = dir.join(name);
        std::fs::create_dir(&d).expect("subdir");
        chown(&d, u);
        chmod(&d, mode);
        d
    }

    /// `prog` run as `u` with `HOME=home`, the users' `PATH`, no `TMPDIR`, no
    /// `XDG_RUNTIME_DIR` and no job marker (a job's command sets its own), in the base
    /// directory. `setpriv` execs in place: the process keeps its pid.
    fn as_user(&self, u: User, home: &str, prog: &str) -> Command {
        let mut c = Command::new("setpriv");
        c.arg(format!("--reuid={}", u.uid))
            .arg(format!("--regid={}", u.gid))
            .args(["--clear-groups", "env"])
            .arg(format!("HOME={home}"))
            .arg(prog)
            .current_dir(&self.base)
            .env("PATH", PATH)
            .env_remove("TMPDIR")
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove("LIBI_E2E_MARK")
            .stdin(Stdio::null());
        c
    }

    /// A job of user `u`: `libi-mpiexec args` with the marker `mark` and `envs`.
    fn job_cmd(&self, u: User, mark: &str, args: &[&str], envs: &[(&str, &str)]) -> Command {
        self.job_cmd_home(u, "/tmp", mark, args, envs)
    }

    fn job_cmd_home(
        &self,
        u: User,
        home: &str,
        mark: &str,
        args: &[&str],
        envs: &[(&str, &str)],
    ) -> Command {
        let mut c = self.as_user(u, home, &self.mpiexec());
        c.args(args)
            .env("LIBI_E2E_MARK", mark)
            .env("MPIEXEC_TIMEOUT", "120")
            .envs(envs.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// Run a job of `u` to its end; assert nothing of it is left.
    fn run(&self, u: User, args: &[&str], envs: &[(&str, &str)]) -> Run {
        self.run_home(u, "/tmp", args, envs)
    }

    /// As [`Env::run`], with `HOME=home`.
    fn run_home(&self, u: User, home: &str, args: &[&str], envs: &[(&str, &str)]) -> Run {
        let mark = new_mark();
        let out = self
            .job_cmd_home(u, home, &mark, args, envs)
            .output()
            .expect("run libi-mpiexec as another user");
        let r = Run::from_output(&out);
        let left = leftovers(&mark, Duration::from_secs(10));
        assert!(left.is_empty(), "processes left behind: {left:?}\nstderr: {}", r.stderr);
        r
    }

    /// Start the attacker (as libi-evil) with these arguments; returns once it said ready.
    fn attacker(&self, args: &[&str]) -> Attacker {
        let mut c = self.as_user(self.evil, "/tmp", PYTHON);
        c.arg(self.tool()).args(args).stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = c.spawn().expect("start the attacker");
        let out = child.stdout.take().expect("stdout");
        let mut a = Attacker { child };
        a.wait_ready(out, args);
        a
    }

    /// Run a short command as `u` (a shell command line) and assert it succeeds.
    fn sh(&self, u: User, script: &str) {
        let out = self
            .as_user(u, "/tmp", "sh")
            .args(["-c", script])
            .output()
            .expect("run sh as another user");
        assert!(
            out.status.success(),
            "as {}: sh -c '{script}' failed: {}",
            u.name,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A test's directory, removed at the end of the test.
struct TestDir(PathBuf);

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl std::ops::Deref for TestDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

/// An attacker process: killed (and reaped) when dropped.
struct Attacker {
    child: Child,
}

impl Attacker {
    fn wait_ready(&mut self, out: std::process::ChildStdout, args: &[&str]) {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::BufReader::new(out).read_line(&mut line);
            let _ = tx.send(line);
        });
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(l) if l.trim() == "ready" => {}
            other => {
                let st = self.child.try_wait();
                panic!("the attacker {args:?} did not get ready: {other:?} (status {st:?})")
            }
        }
    }
}

impl Drop for Attacker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A job running in the background: everything of it is killed if the test ends before
/// it does (a failed test).
struct Job {
    child: Option<Child>,
    mark: String,
}

impl Job {
    fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Wait for the job's end (its front end gives up after MPIEXEC_TIMEOUT); assert
    /// nothing of it is left.
    fn finish(mut self) -> Run {
        let child = self.child.take().expect("the job");
        let out = child.wait_with_output().expect("wait for libi-mpiexec");
        let r = Run::from_output(&out);
        let left = leftovers(&self.mark, Duration::from_secs(10));
        assert!(left.is_empty(), "processes left behind: {left:?}\nstderr: {}", r.stderr);
        r
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill_mark(&self.mark);
            let _ = c.kill();
            let _ = c.wait();
            kill_mark(&self.mark);
        }
    }
}

fn kill_mark(mark: &str) {
    for (pid, _) in job_processes(mark) {
        signal(pid, libc::SIGKILL);
    }
}

/// Spawn `cmd` as process `pid` (`ns_last_pid`); `None` (the child killed and reaped) when
/// another process took that pid first. One at a time in this test process.
fn spawn_at(cmd: &mut Command, pid: u32) -> Option<Child> {
    static PID_LOCK: Mutex<()> = Mutex::new(());
    let _g = PID_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string())
        .expect("write /proc/sys/kernel/ns_last_pid (needs root)");
    let mut child = cmd.spawn().expect("spawn at a chosen pid");
    if child.id() == pid {
        return Some(child);
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// A pid no process has now (nor the one before it, so that ours is the next one).
fn free_pid() -> u32 {
    let max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(32768);
    loop {
        let p = 1000 + rand::random::<u32>() % (max - 1002);
        if !Path::new(&format!("/proc/{p}")).exists() {
            return p;
        }
    }
}

/// Socket inodes among the descriptors of process `pid`.
fn socket_inodes(pid: u32) -> Vec<u64> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|f| std::fs::read_link(f.path()).ok())
        .filter_map(|l| {
            l.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?.parse::<u64>().ok()
        })
        .collect()
}

/// Listening TCP sockets of the machine (`/proc/net/tcp`, `tcp6`): (inode, local address).
fn tcp_listeners() -> Vec<(u64, std::net::SocketAddr)> {
    let mut v = Vec::new();
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for l in text.lines().skip(1) {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 10 || f[3] != "0A" {
                continue;
            }
            let (Some(addr), Ok(inode)) = (hex_addr(f[1]), f[9].parse::<u64>()) else {
                continue;
            };
            v.push((inode, addr));
        }
    }
    v
}

/// `0100007F:1F90` (or 32 hex digits for IPv6: four 32-bit words in host order).
fn hex_addr(s: &str) -> Option<std::net::SocketAddr> {
    let (a, p) = s.split_once(':')?;
    let port = u16::from_str_radix(p, 16).ok()?;
    let word = |i: usize| u32::from_str_radix(a.get(8 * i..8 * i + 8)?, 16).ok();
    let ip: std::net::IpAddr = match a.len() {
        8 => std::net::Ipv4Addr::from(word(0)?.to_le_bytes()).into(),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[4 * i..4 * i + 4].copy_from_slice(&word(i)?.to_le_bytes());
            }
            std::net::Ipv6Addr::from(b).into()
        }
        _ => return None,
    };
    Some(std::net::SocketAddr::new(ip, port))
}

/// The parent of process `pid`.
fn parent(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

/// Wait up to `secs` for `cond`; whether it came true.
fn wait_until(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The control socket (issue 50.1). The attack: libi-evil guesses the pid P of the owner's
/// next job, and a process of its own that has pid P binds and listens on the names a job
/// with pid P could use (`@libi-mpiexec.P`, `@libi-mpiexec.P.0000000000000000`), hands the
/// listening sockets to a long-lived holder by SCM_RIGHTS and exits; the owner's job then
/// gets pid P. The sockets' SO_PEERCRED still says pid P (recorded at `listen`), so a client
/// checking only the pid took the holder's fake table (with a terminal escape in it), and
/// the job ran without a control socket. Promised: `libi-mpiexec --proctable P` as the owner
/// prints the job's own table (3 rows, hosts n1 n1 n2, live `sleep` ranks of the owner),
/// nothing of the attacker's; the job says nothing about its control socket; the attacker's
/// `--proctable P` fails in one line; and the LIBI API's `job_table` gets the same table.
#[test]
fn proctable_is_not_fooled_by_sockets_passed_on_from_the_jobs_pid() {
    let Some(e) = env() else { return };
    let dir = e.dir("proctable");
    let evil_dir = e.subdir(&dir, "evil", e.evil, 0o700);
    let tmp = e.subdir(&dir, "tmp", e.owner, 0o700);
    let hold = evil_dir.join("hold.sock").to_string_lossy().into_owned();
    let _holder = e.attacker(&["hold", &hold, "120"]);
    let mark = new_mark();
    let args = ["-launcher", "fork", "-hosts", "n1:2,n2:1", "-n", "3", "sleep", "1000.5"];
    let envs = [("TMPDIR", tmp.to_str().expect("utf-8"))];
    let mut tries = 0;
    let job = loop {
        tries += 1;
        assert!(tries <= 50, "could not give the job the attacker's pid in {tries} tries");
        let p = free_pid();
        let mut pass = e.as_user(e.evil, "/tmp", PYTHON);
        pass.arg(e.tool()).args(["pass", &hold, &p.to_string()]).stdout(Stdio::piped());
        let Some(child) = spawn_at(&mut pass, p) else { continue };
        let out = child.wait_with_output().expect("wait for the attacker's pass");
        assert!(
            out.status.success() && out.stdout == b"ready\n",
            "the attacker's pass at pid {p} failed: {:?} {}",
            out.status,
            String::from_utf8_lossy(&out.stdout)
        );
        let mut cmd = e.job_cmd(e.owner, &mark, &args, &envs);
        match spawn_at(&mut cmd, p) {
            Some(child) => break Job { child: Some(child), mark: mark.clone() },
            None => kill_mark(&mark),
        }
    };
    let pid = job.pid().to_string();
    // The table, as the owner, once the ranks run (before, the job may not answer yet).
    let proctable = |u: User| {
        let out = e
            .as_user(u, "/tmp", &e.mpiexec())
            .args(["--proctable", &pid])
            .output()
            .expect("run --proctable");
        Run::from_output(&out)
    };
    let mut table = proctable(e.owner);
    let deadline = Instant::now() + Duration::from_secs(20);
    while table.status != 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        table = proctable(e.owner);
    }
    assert_eq!(table.status, 0, "--proctable {pid} as the owner failed: {}", table.stderr);
    assert!(
        !table.stdout.contains("attacker") && !table.stdout.contains('\x1b'),
        "--proctable printed the attacker's table: {:?}",
        table.stdout
    );
    let rows: Vec<Vec<&str>> =
        table.stdout.lines().map(|l| l.splitn(4, ' ').collect::<Vec<_>>()).collect();
    assert_eq!(rows.len(), 3, "3 rows expected: {:?}", table.stdout);
    let mut pids = Vec::new();
    for (i, (row, host)) in rows.iter().zip(["n1", "n1", "n2"]).enumerate() {
        assert_eq!(row.len(), 4, "row {i}: {:?}", table.stdout);
        assert_eq!((row[0], row[1]), (i.to_string().as_str(), host), "{:?}", table.stdout);
        let rank_pid = row[2];
        let m = std::fs::metadata(format!("/proc/{rank_pid}"))
            .unwrap_or_else(|e| panic!("rank {i}'s pid {rank_pid} is no process ({e})"));
        assert_eq!(m.uid(), e.owner.uid, "rank {i}'s pid {rank_pid} is not the owner's");
        let cmdline = std::fs::read(format!("/proc/{rank_pid}/cmdline")).unwrap_or_default();
        assert_eq!(
            cmdline, b"sleep\x001000.5\x00",
            "rank {i}'s pid {rank_pid} runs something else"
        );
        pids.push(rank_pid.parse::<i32>().expect("pid"));
    }
    // The attacker is refused, in one line.
    let theirs = proctable(e.evil);
    assert_eq!(theirs.status, 1, "--proctable as libi-evil: {}{}", theirs.stdout, theirs.stderr);
    assert!(theirs.stdout.is_empty(), "{}", theirs.stdout);
    assert_eq!(theirs.stderr.lines().count(), 1, "one line: {}", theirs.stderr);
    assert!(
        theirs.stderr.starts_with(&format!("libi-mpiexec: --proctable {pid}: ")),
        "{}",
        theirs.stderr
    );
    // The LIBI API (this process runs as root): the same table.
    let mut opts = libi_session::fe::Options::from_env(None).expect("LIBI options");
    opts.mpiexec = e.mpiexec().into();
    let fe = libi_session::fe::FrontEnd::with_options(opts).expect("LIBI front end");
    let api = fe.job_table(job.pid()).expect("job_table");
    let api: Vec<(u32, &str, i32)> = api.iter().map(|r| (r.rank, r.host.as_str(), r.pid)).collect();
    assert_eq!(api, [(0, "n1", pids[0]), (1, "n1", pids[1]), (2, "n2", pids[2])]);
    drop(fe);
    signal(job.pid() as i32, libc::SIGINT);
    let r = job.finish();
    assert!(!r.stderr.contains("control socket"), "the job's stderr: {}", r.stderr);
}

/// The C member of `tests/session.rs` (`libi_check_member`), built against `liblibi.so`.
fn libi_member() -> String {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let flags = common::libi_c_flags();
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("neighbours-{}", std::process::id()));
        common::cc_program(&out, "libi_check_member", "libi_check_member.c", &flags)
    })
    .to_string_lossy()
    .into_owned()
}

/// The LIBI front end's listener (issue 50.2). The attack: libi-evil opens 200 connections
/// to the tool's listener (its port is in /proc/net/tcp) and trickles a hello on each, one
/// byte every 2 s. With a per-read deadline and the first 64 connections kept, the rest
/// refused, the session's master was refused and the launch failed. Promised: a session of
/// 2 members on this host launches (the master's connection evicts the oldest waiting one)
/// and works (a message and its echo, finalize); the listener is bound to 127.0.0.1, not to
/// every address of the host.
#[test]
fn libi_session_launches_despite_a_slowloris_of_another_user() {
    let Some(e) = env() else { return };
    let dir = e.dir("slowloris");
    let member = libi_member();
    let mark = new_mark();
    // Options::mpiexec is a wrapper that marks the session's job (this process is not).
    let wrapper = common::write_script(
        &dir.join("mpiexec"),
        &format!("#!/bin/sh\nLIBI_E2E_MARK={mark} exec {} \"$@\"\n", e.mpiexec()),
    );
    let mut opts = libi_session::fe::Options::from_env(None).expect("LIBI options");
    opts.mpiexec = wrapper.into();
    opts.args = vec!["-launcher".into(), "fork".into()];
    let fe = libi_session::fe::FrontEnd::with_options(opts).expect("LIBI front end");
    let port = fe.port();
    let bound: Vec<std::net::SocketAddr> = {
        let ours = socket_inodes(std::process::id());
        tcp_listeners()
            .into_iter()
            .filter(|(inode, a)| a.port() == port && ours.contains(inode))
            .map(|(_, a)| a)
            .collect()
    };
    let _slow = e.attacker(&["slowloris", "127.0.0.1", &port.to_string(), "200", "2", "40"]);
    let sid = fe.create_session();
    let dist = libi_session::fe::ProcDist {
        session: sid,
        exe: member,
        args: vec!["echo".into(), "A".into()],
        hosts: vec![libi_session::fe::HostDist { host: "localhost".into(), procs: 2 }],
        env: vec![],
    };
    let launched = fe.launch(&[dist]);
    assert!(
        launched.is_ok(),
        "the session did not launch while libi-evil held 200 trickling connections: {:?}",
        launched.err()
    );
    fe.send_usr_data(sid, b"ping-neighbours").expect("send to the master");
    let reply = fe.recv_usr_data(sid).expect("the master's reply");
    assert_eq!(String::from_utf8_lossy(&reply), "ping-neighbours size=2 members=A0,A1");
    fe.finalize().expect("finalize");
    let left = leftovers(&mark, Duration::from_secs(10));
    assert!(left.is_empty(), "processes left behind: {left:?}");
    assert!(!bound.is_empty(), "no listening socket of ours on port {port} in /proc/net/tcp");
    assert!(
        bound.iter().all(|a| a.ip().is_loopback()),
        "the front end's listener is bound to {bound:?}, not to the loopback address only"
    );
}

/// The tree port (issue 50.3). The attack: libi-evil finds the front end's listening TCP
/// ports (in /proc/net/tcp) while the agents are being launched, and opens 200 idle
/// connections to each. With the first 64 kept and the rest refused, the real agent's
/// connection was refused and the job failed ("lost the NLA"). Promised: the job (two
/// agents started through a stand-in for ssh) runs to its end with both ranks' output.
#[test]
fn tree_port_takes_the_agents_despite_idle_connections_of_another_user() {
    let Some(e) = env() else { return };
    let dir = e.dir("treeport");
    let flags = e.subdir(&dir, "flags", e.owner, 0o755);
    let tmp = e.subdir(&dir, "tmp", e.owner, 0o700);
    // Runs the command here, once the attacker is in place (the test creates `go`).
    let fake = common::write_script(
        &dir.join("fake-ssh"),
        &format!(
            "#!/bin/sh\nfor a; do last=$a; done\ntouch {f}/launching\ni=0\n\
             while [ ! -e {f}/go ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done\n\
             exec sh -c \"$last\"\n",
            f = flags.display()
        ),
    );
    let mark = new_mark();
    let args =
        ["-launcher", "ssh", "-launcher-exec", &fake, "-hosts", "r1,r2", "-n", "2", "hostname"];
    let envs = [("TMPDIR", tmp.to_str().expect("utf-8"))];
    let child = e.job_cmd(e.owner, &mark, &args, &envs).spawn().expect("start the job");
    let job = Job { child: Some(child), mark };
    assert!(wait_until(30, || flags.join("launching").exists()), "the fake ssh never ran");
    let ours = socket_inodes(job.pid());
    let addrs: Vec<String> = tcp_listeners()
        .into_iter()
        .filter(|(inode, _)| ours.contains(inode))
        .map(|(_, a)| {
            let ip = match a.ip() {
                std::net::IpAddr::V4(v) if v.is_unspecified() => "127.0.0.1".to_string(),
                std::net::IpAddr::V6(v) if v.is_unspecified() => "[::1]".to_string(),
                std::net::IpAddr::V6(v) => format!("[{v}]"),
                ip => ip.to_string(),
            };
            format!("{ip}:{}", a.port())
        })
        .collect();
    assert!(!addrs.is_empty(), "the front end (pid {}) listens on no TCP port", job.pid());
    let _idle = e.attacker(&["idle", &addrs.join(","), "200", "20"]);
    std::fs::write(flags.join("go"), b"").expect("go");
    let r = job.finish();
    assert_eq!(
        r.status, 0,
        "the job failed while libi-evil held 200 idle connections to {addrs:?}: {}",
        r.stderr
    );
    let host = nix::unistd::gethostname().expect("hostname").to_string_lossy().into_owned();
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines, [host.as_str(), host.as_str()], "both ranks' output; stderr: {}", r.stderr);
}

/// Removes the squatted hwloc directory at the end of the test.
struct Squat(PathBuf);

impl Drop for Squat {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A PMI-1 client by hand: each rank prints "RANK|FILE|OWNER TYPE|REPLY" for its `get` of
/// `PMI_hwloc_xmlfile` (FILE and OWNER TYPE `none` when not found).
const ASK_HWLOC: &str = r#"say 'cmd=init pmi_version=1 pmi_subversion=1'
say 'cmd=get_my_kvsname'; kvs=${REPLY##*kvsname=}
say "cmd=get kvsname=$kvs key=PMI_hwloc_xmlfile"; got=$REPLY
case $got in
*rc=0*) f=${got##*value=}; info=$(stat -c '%U %F' "$f" 2>&1) ;;
*) f=none; info=none ;;
esac
say 'cmd=barrier_in'
say 'cmd=finalize'
echo "$PMI_RANK|$f|$info|$got""#;

/// hwloc's cache directory (issue 50.4). The attack: libi-evil creates `/tmp/libi-UID` of
/// the owner first (mode 0700, its own). The owner's job said "not a private directory" and
/// offered its ranks no topology file. Promised: the ranks of a 2-rank job get a topology
/// file, an existing regular file of the owner's, in a directory of the agent's own
/// (`libi-hwloc-PID-RAND` under /tmp), gone after the job, and nothing is said.
#[test]
fn hwloc_file_is_offered_despite_a_squatted_cache_directory() {
    let Some(e) = env() else { return };
    let squat = PathBuf::from(format!("/tmp/libi-{}", e.owner.uid));
    // One of the owner's own from an earlier run would keep the attacker out: the test is
    // about the attacker's.
    let _ = std::fs::remove_dir_all(&squat);
    let _squat = Squat(squat.clone());
    e.sh(e.evil, &format!("mkdir -m700 {}", squat.display()));
    let script = format!("{}\n{ASK_HWLOC}", common::PMI_SAY);
    let r = e.run(e.owner, &["-n", "2", "bash", "-c", &script], &[]);
    assert_eq!(r.status, 0, "{}", r.stderr);
    let mut lines: Vec<&str> = r.stdout.lines().collect();
    lines.sort();
    assert_eq!(lines.len(), 2, "{}\n{}", r.stdout, r.stderr);
    let rows: Vec<Vec<&str>> = lines.iter().map(|l| l.split('|').collect()).collect();
    let file = rows[0][1];
    for row in &rows {
        assert_eq!(row.len(), 4, "{lines:?}");
        assert_eq!(row[1], file, "both ranks get the same file: {lines:?}");
        assert_eq!(
            row[2],
            format!("{OWNER} regular file"),
            "no topology file of the owner's offered: {lines:?}\nstderr: {}",
            r.stderr
        );
    }
    let file = Path::new(file);
    assert!(!file.starts_with(&squat), "the file is in the attacker's directory: {lines:?}");
    let parent = file.parent().expect("the file's directory");
    let name = parent.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    assert!(
        parent.parent() == Some(Path::new("/tmp")) && name.starts_with("libi-hwloc-"),
        "the file is not in a libi-hwloc-PID-RAND directory under /tmp: {lines:?}"
    );
    assert!(!parent.exists(), "{} is left after the job", parent.display());
    assert!(r.stderr.is_empty(), "the job said something: {}", r.stderr);
    let m = std::fs::symlink_metadata(&squat).expect("the attacker's directory");
    assert_eq!(m.uid(), e.evil.uid, "the attacker's directory was replaced");
}

/// `--bcast` staging directories (issue 50.5). What goes wrong: an agent killed with SIGKILL
/// cannot remove its staging directory (`$TMPDIR/libi-stage-PID-RAND`, a copy of the
/// executables), which stayed forever. Promised: the next `--bcast` agent of the same user
/// sweeps it, while a directory of another user's with such a name (libi-evil plants
/// `libi-stage-<the dead agent's pid>-0000abcd` in the shared, mode 1777 `TMPDIR`) is left
/// alone.
#[test]
fn bcast_staging_of_a_killed_agent_is_swept_but_not_another_users() {
    let Some(e) = env() else { return };
    let dir = e.dir("bcast");
    let tmp = dir.join("tmp");
    std::fs::create_dir(&tmp).expect("tmp");
    chmod(&tmp, 0o1777);
    let envs = [("TMPDIR", tmp.to_str().expect("utf-8"))];
    let stage_dirs = || -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(&tmp)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|d| d.file_name().to_string_lossy().starts_with("libi-stage-"))
            .map(|d| d.path())
            .collect();
        v.sort();
        v
    };
    let mark = new_mark();
    let args = ["--bcast", "-n", "2", "sleep", "1000"];
    let child = e.job_cmd(e.owner, &mark, &args, &envs).spawn().expect("start the job");
    let job = Job { child: Some(child), mark: mark.clone() };
    assert!(
        wait_until(30, || job_processes(&mark)
            .iter()
            .filter(|(_, c)| c.contains("libi-stage-") && c.trim_end().ends_with(" 1000"))
            .count()
            >= 2),
        "the ranks never ran from a staging directory: {:?}",
        job_processes(&mark)
    );
    let stale = stage_dirs();
    assert_eq!(stale.len(), 1, "one staging directory expected: {stale:?}");
    // The agent is the front end's child (a child of its own, forked but not yet exec'ed
    // into hwloc's tool, say, has its command line too).
    let nla: Vec<i32> = job_processes(&mark)
        .into_iter()
        .filter(|(p, c)| c.contains("/libi-nla ") && parent(*p) == Some(job.pid() as i32))
        .map(|(p, _)| p)
        .collect();
    assert_eq!(nla.len(), 1, "one agent expected: {:?}", job_processes(&mark));
    signal(nla[0], libc::SIGKILL);
    let r = job.finish();
    assert_ne!(r.status, 0, "the job of a killed agent succeeded: {}", r.stderr);
    assert!(
        stale[0].exists(),
        "the killed agent's staging directory is gone already (the test needs it left): {}",
        r.stderr
    );
    // Another user's directory with a dead agent's name.
    let planted = tmp.join(format!("libi-stage-{}-0000abcd", nla[0]));
    e.sh(e.evil, &format!("mkdir -m700 {}", planted.display()));
    let r = e.run(e.owner, &["--bcast", "-n", "1", "true"], &envs);
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert!(
        !stale[0].exists(),
        "the killed agent's staging directory {} stays",
        stale[0].display()
    );
    let m = std::fs::symlink_metadata(&planted).expect("libi-evil's directory was removed");
    assert_eq!(m.uid(), e.evil.uid);
    assert_eq!(stage_dirs(), [planted], "the staging directories left");
}

/// Output file patterns in a shared directory (issue 50.6). The attacks, in a mode 1777
/// directory: (a) libi-evil plants `out.0` as a symbolic link to a file of the owner's: it
/// was followed and the owner's file truncated and overwritten; (b) libi-evil pre-creates
/// `out.0` (mode 666, its own): the owner's output went into it. Promised: both are refused
/// (status 255, one line naming the file) and neither file changes; (c) a new file is
/// created with mode 0600, the owner's.
#[test]
fn output_file_patterns_refuse_planted_files() {
    let Some(e) = env() else { return };
    let dir = e.dir("outfile");
    let shared = dir.join("shared");
    std::fs::create_dir(&shared).expect("shared");
    chmod(&shared, 0o1777);
    let mine = e.subdir(&dir, "owner", e.owner, 0o700);
    let precious = mine.join("precious");
    std::fs::write(&precious, "the owner's data\n").expect("write the owner's file");
    chown(&precious, e.owner);
    let out0 = shared.join("out.0");
    let pattern = shared.join("out.%r").to_string_lossy().into_owned();
    let refused = |r: &Run, what: &str| {
        assert_eq!(r.status, 255, "{what}: {}{}", r.stdout, r.stderr);
        let lines: Vec<&str> = r.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{what}: one line: {}", r.stderr);
        assert!(
            lines[0].starts_with("libi-mpiexec: ") && lines[0].contains(&*out0.to_string_lossy()),
            "{what}: the line names the file: {}",
            r.stderr
        );
    };

    // (a) A link to the owner's own file.
    e.sh(e.evil, &format!("ln -s {} {}", precious.display(), out0.display()));
    let r = e.run(e.owner, &["-outfile-pattern", &pattern, "-n", "1", "echo", "hi"], &[]);
    refused(&r, "a planted symbolic link");
    assert_eq!(
        std::fs::read_to_string(&precious).expect("the owner's file"),
        "the owner's data\n",
        "the owner's file was written through the link"
    );
    std::fs::remove_file(&out0).expect("remove the link");

    // (b) The attacker's own file, writable by all.
    e.sh(e.evil, &format!("umask 0; : > {0}; chmod 666 {0}", out0.display()));
    let r = e.run(e.owner, &["-outfile-pattern", &pattern, "-n", "1", "echo", "hi"], &[]);
    refused(&r, "a file of libi-evil's");
    let m = std::fs::symlink_metadata(&out0).expect("the attacker's file");
    assert_eq!((m.uid(), m.len()), (e.evil.uid, 0), "the attacker's file got the output");
    std::fs::remove_file(&out0).expect("remove the attacker's file");

    // (c) A new file: private, the owner's.
    let fresh = shared.join("fresh.%r").to_string_lossy().into_owned();
    let r = e.run(e.owner, &["-outfile-pattern", &fresh, "-n", "1", "echo", "hi"], &[]);
    assert_eq!(r.status, 0, "{}", r.stderr);
    let f = shared.join("fresh.0");
    let m = std::fs::symlink_metadata(&f).expect("the new output file");
    assert_eq!((m.uid(), m.mode() & 0o7777), (e.owner.uid, 0o600), "{}", f.display());
    assert_eq!(std::fs::read_to_string(&f).expect("read it"), "hi\n");
}

/// An unreadable `$HOME` (issue 50.8): after `su` without `-`, `HOME` is another user's
/// (here root's, mode 0700), so `~/.mpiexec.hydra.conf` cannot even be looked at. It made
/// every job fail ("cannot read '/root/.mpiexec.hydra.conf': Permission denied", status 2).
/// Promised: as for Hydra, the file is as good as absent: the job runs; `-v` says why no
/// default options were read.
#[test]
fn unreadable_home_is_no_error() {
    let Some(e) = env() else { return };
    let m = std::fs::metadata("/root").expect("/root");
    assert_eq!(m.mode() & 0o077, 0, "the test needs /root closed to other users");
    let r = e.run_home(e.owner, "/root", &["-n", "1", "true"], &[]);
    assert_eq!(r.status, 0, "HOME=/root: {}", r.stderr);
    let r = e.run_home(e.owner, "/root", &["-v", "-n", "1", "true"], &[]);
    assert_eq!(r.status, 0, "HOME=/root, -v: {}", r.stderr);
    assert!(
        r.stderr.lines().any(|l| l.contains(".mpiexec.hydra.conf")),
        "-v says nothing of ~/.mpiexec.hydra.conf: {}",
        r.stderr
    );
}

/// Issue 50, case 7: a node never starts more ranks than its machine lets the user run
/// (`kernel.pid_max`, `kernel.threads-max`, `ulimit -u` for a user other than root). As the
/// owner with `ulimit -u` 40: a fork launch of 100 ranks is refused in one line, status 2,
/// before anything starts; an agent on another "host" (a fake ssh that runs it here) fails
/// its first rank with that reason and starts none. Before, the agent tried every rank,
/// each failure reported on its own (and, for a huge `-n`, grew to gigabytes doing so).
#[test]
fn ranks_over_the_process_limit_are_refused_before_they_start() {
    let Some(e) = env() else { return };
    let dir = e.dir("nproc");
    let limited = |mark: &str, args: &[&str]| {
        let mut c = e.as_user(e.owner, "/tmp", "prlimit");
        c.args(["--nproc=40", "--", &e.mpiexec()])
            .args(args)
            .env("LIBI_E2E_MARK", mark)
            .env("MPIEXEC_TIMEOUT", "120")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let out = c.output().expect("run libi-mpiexec under prlimit");
        let r = Run::from_output(&out);
        let left = leftovers(mark, Duration::from_secs(10));
        assert!(left.is_empty(), "processes left behind: {left:?}\nstderr: {}", r.stderr);
        r
    };
    let r = limited(&new_mark(), &["-n", "100", "sh", "-c", "echo ran"]);
    assert_eq!(r.status, 2, "{}", r.stderr);
    assert_eq!(
        r.stderr,
        "libi-mpiexec: 100 ranks on this machine are more processes than it lets us run (40, \
         the limit on processes, ulimit -u)\n"
    );
    assert!(r.stdout.is_empty(), "a rank ran: {}", r.stdout);
    let fake = common::write_script(
        &dir.join("fake-ssh"),
        "#!/bin/sh\nfor a; do last=$a; done\nexec sh -c \"$last\"\n",
    );
    let args = ["-launcher", "ssh", "-launcher-exec", &fake, "-hosts", "r1", "-n", "100"];
    let r = limited(&new_mark(), &[&args[..], &["sh", "-c", "echo ran"]].concat());
    assert_ne!(r.status, 0, "{}", r.stderr);
    assert!(r.stdout.is_empty(), "a rank ran: {}", r.stdout);
    let why = "100 ranks on r1 are more processes than it lets us run (40, the limit on \
               processes, ulimit -u)";
    let lines: Vec<&str> = r.stderr.lines().filter(|l| l.contains(why)).collect();
    assert_eq!(lines.len(), 1, "one line saying why: {}", r.stderr);
}

//! The LIBI front end's guarantees (issue 52), with C front ends and members built against
//! `liblibi.so`: messages sent before a session's end all arrive, in order, before it; the
//! thread contract of `libi.h` (a multithreaded front end does not deadlock); a
//! deterministic launch result; `LIBI_EFRONTENDONLY`; handles unique in the process;
//! finalize wakes a master waiting for a message; failures said in LIBI's terms.
//!
//! Every program runs under a watchdog: one that hangs is killed and the test fails.

mod common;

use common::{leftovers, new_mark, MPIEXEC};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long a program may run before it counts as hung.
const WATCHDOG: Duration = Duration::from_secs(120);

/// Compile the C programs against `liblibi.so` with the flags `pkg-config libi` gives.
fn programs() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let progs = ["libi_fe_member", "libi_fe_tool", "libi_fe_threads"]
            .map(|n| (n, format!("tests/programs/{n}.c")));
        let progs: Vec<(&str, &str)> = progs.iter().map(|(n, s)| (*n, s.as_str())).collect();
        common::libi_c_programs("libi-fe-c", &progs).0
    })
}

fn prog(name: &str) -> String {
    programs().join(name).to_string_lossy().into_owned()
}

struct Out {
    status: i32,
    stdout: String,
    stderr: String,
}

/// Run a front end (`args[0]` a program of ours) with these libi-mpiexec options and extra
/// environment, under the watchdog; assert nothing of it is left running.
fn run_fe(mpiexec_args: &str, args: &[&str], env: &[(&str, &str)]) -> Out {
    let mark = new_mark();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("libi-fe-out-{mark}"));
    std::fs::create_dir_all(&dir).expect("output dir");
    let (out_path, err_path) = (dir.join("stdout"), dir.join("stderr"));
    let mut child = Command::new(prog(args[0]))
        .args(&args[1..])
        .env("LIBI_MPIEXEC", MPIEXEC)
        .env("LIBI_MPIEXEC_ARGS", mpiexec_args)
        .env("LIBI_E2E_MARK", &mark)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).expect("stdout file"))
        .stderr(std::fs::File::create(&err_path).expect("stderr file"))
        .spawn()
        .expect("run the front end");
    let until = Instant::now() + WATCHDOG;
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st.code().unwrap_or(-1);
        }
        if Instant::now() >= until {
            let _ = child.kill();
            let _ = child.wait();
            let text = std::fs::read_to_string(&out_path).unwrap_or_default();
            let err = std::fs::read_to_string(&err_path).unwrap_or_default();
            let _ = leftovers(&mark, Duration::from_secs(10));
            panic!("{} hung (killed after {WATCHDOG:?}):\n{text}\n{err}", args[0]);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let left = leftovers(&mark, Duration::from_secs(10));
    assert!(left.is_empty(), "left running: {left:?}");
    Out {
        status,
        stdout: std::fs::read_to_string(&out_path).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err_path).unwrap_or_default(),
    }
}

fn line<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no '{name}' line in:\n{out}"))
}

fn tool(scenario: &str, hosts: &str, env: &[(&str, &str)]) -> Out {
    let member = prog("libi_fe_member");
    run_fe("-launcher fork", &["libi_fe_tool", &member, scenario, hosts], env)
}

/// Defect 1: the master sends 100 messages and calls LIBI_finalize; the front end starts
/// receiving 2 s later. Before: 16 arrived, then LIBI_ESESS (the session's exit overtook
/// the frames queued behind the bounded channel).
#[test]
fn every_message_before_the_end_arrives_in_order() {
    let o = tool("drain", "n1:2,n2:2", &[]);
    assert_eq!(o.status, 0, "{}{}", o.stdout, o.stderr);
    assert_eq!(line(&o.stdout, "drain"), "drain received=100 inorder=100 end=LIBI_ESESS");
    assert_eq!(line(&o.stdout, "finalize").trim_end(), "finalize LIBI_OK");
}

/// Defect 2: a thread waits in LIBI_fe_recvUsrData while another sends the message the
/// master waits for; receivers on three sessions; a launch that waits for its members
/// while another session is pinged; finalize while a thread waits. Before: the first case
/// hung (one global lock held across blocking calls).
#[test]
fn a_multithreaded_front_end_does_not_deadlock() {
    let member = prog("libi_fe_member");
    let o = run_fe("-launcher fork", &["libi_fe_threads", &member, "n1:2,n2:1"], &[]);
    assert_eq!(o.status, 0, "{}{}", o.stdout, o.stderr);
    assert_eq!(line(&o.stdout, "launch"), "launch LIBI_OK");
    assert_eq!(line(&o.stdout, "cross"), "cross send=LIBI_OK recv=LIBI_OK echo:cross");
    for i in 0..3 {
        assert_eq!(
            line(&o.stdout, &format!("many-{i}")),
            format!("many-{i} LIBI_OK echo:many-{i}")
        );
    }
    assert_eq!(
        line(&o.stdout, "overlap"),
        "overlap send=LIBI_OK recv=LIBI_OK echo:overlap while-launching=yes late-launch=LIBI_OK"
    );
    assert_eq!(line(&o.stdout, "finalize"), "finalize LIBI_OK waiting-recv=LIBI_ESESS");
}

/// Defect 8 and the error text: eight sessions of 16 members whose last member exits right
/// after LIBI_init. Launch succeeds when every member called LIBI_init, whatever they do
/// next: LIBI_OK every time (before: LIBI_ELAUNCH in 2 of 3 runs), then each session's
/// failure, in LIBI's words (before: "without calling PMGR close").
#[test]
fn launch_result_is_deterministic() {
    for _ in 0..3 {
        let o = tool("exitinit", "n1:8,n2:8", &[]);
        assert_eq!(o.status, 0, "{}{}", o.stdout, o.stderr);
        assert_eq!(line(&o.stdout, "launch").trim_end(), "launch LIBI_OK", "{}", o.stdout);
        for i in 0..8 {
            let l = line(&o.stdout, &format!("recv-{i}"));
            assert!(l.starts_with(&format!("recv-{i} LIBI_ESESSFAILED session ")), "{}", o.stdout);
            assert!(
                l.ends_with(": rank 15 on n2 exited with code 0 without calling LIBI_finalize"),
                "{l}"
            );
        }
    }
}

/// The master may receive in one thread while another sends (the message the front end
/// waits for before it answers): the member's send and receive do not take the member's
/// lock (before: the receive held it, the send waited for it, a deadlock).
#[test]
fn a_multithreaded_master_does_not_deadlock() {
    let o = tool("mthreads", "n1:2", &[]);
    assert_eq!(o.status, 0, "{}{}", o.stdout, o.stderr);
    assert_eq!(line(&o.stdout, "asked"), "asked LIBI_OK ask");
    assert_eq!(line(&o.stdout, "master"), "master LIBI_OK got LIBI_OK answer");
}

/// Handles are unique in the process: after finalize and init, a stale handle names no
/// session (before: handles restarted at 0, so the stale one named the new session).
#[test]
fn stale_handles_name_no_session() {
    let o = tool("handles", "n1:1", &[]);
    assert_eq!(o.status, 0, "{}{}", o.stdout, o.stderr);
    assert_eq!(line(&o.stdout, "handles"), "handles distinct");
    assert!(line(&o.stdout, "stale").starts_with("stale LIBI_ESESS no session "), "{}", o.stdout);
    assert!(line(&o.stdout, "stale-hosts").starts_with("stale-hosts LIBI_ESESS "), "{}", o.stdout);
}

/// A member's front-end calls: LIBI_EFRONTENDONLY (before: LIBI_OK, a member could start a
/// front end).
#[test]
fn members_get_efrontendonly() {
    let o = tool("fecall", "n1:2", &[]);
    assert_eq!(o.status, 0, "{}{}", o.stdout, o.stderr);
    assert_eq!(
        line(&o.stdout, "member"),
        "member fe_init=LIBI_EFRONTENDONLY createSession=LIBI_EFRONTENDONLY"
    );
}

/// Finalize wakes a master blocked in LIBI_recvUsrData (LIBI_ESESS), which then finalizes:
/// the session ends on its own (before: the master was never woken, the front end waited
/// the whole LIBI_FINALIZE_WAIT and killed it).
#[test]
fn finalize_wakes_a_waiting_master() {
    let o = tool("wake", "n1:2", &[("LIBI_FINALIZE_WAIT", "30")]);
    assert_eq!(o.status, 0, "{}{}", o.stdout, o.stderr);
    assert_eq!(line(&o.stdout, "finalize").trim_end(), "finalize LIBI_OK");
    assert!(
        o.stderr.contains("master-woken LIBI_ESESS the front end ended the session"),
        "{}",
        o.stderr
    );
}

/// A job left running for an attach test, ended (SIGINT) when dropped.
struct Job {
    child: std::process::Child,
    mark: String,
}

impl Job {
    fn start(program: &str, args: &[&str]) -> Job {
        let mark = new_mark();
        let child = Command::new(program)
            .args(args)
            .env("LIBI_E2E_MARK", &mark)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the job");
        Job { child, mark }
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        let _ = self.child.wait();
        let _ = leftovers(&self.mark, Duration::from_secs(10));
    }
}

/// Attach a tool to `job` (`libi_fe_tool attach`), retrying while the job is not up yet
/// (no control socket, or no table yet).
fn attach(job: &Job, mpiexec_args: &str, via: &str, ranks: &[&str]) -> Out {
    let member = prog("libi_fe_member");
    let pid = job.pid();
    let mut args = vec!["libi_fe_tool", member.as_str(), "attach", pid.as_str(), via];
    args.extend_from_slice(ranks);
    for _ in 0..50 {
        let o = run_fe(mpiexec_args, &args, &[]);
        let l = o.stdout.lines().find(|l| l.starts_with("attach ")).unwrap_or_default();
        if !(l.contains("with a control socket") || l.contains("(yet)")) {
            return o;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    run_fe(mpiexec_args, &args, &[])
}

/// Attach and launch in one call (LaunchMON's attachAndSpawn): a job started with
/// `-launcher fork` on three simulated hosts, and a tool with no LIBI_MPIEXEC_ARGS at all:
/// the daemons start the way the job's agents did (before, the tool had to know to set
/// LIBI_MPIEXEC_ARGS="-launcher fork"), one per host, and each gets its host's ranks
/// (LIBI_getMyProctab) and finds them alive. With ranks 2 and 4 only: daemons on their
/// hosts, each told only those ranks. The job's MPIR table, read with gdb, has every rank.
#[test]
fn attach_inherits_the_launcher_and_gives_each_daemon_its_hosts_ranks() {
    let job = Job::start(
        MPIEXEC,
        &["-launcher", "fork", "-hosts", "n1:2,n2:2,n3:1", "-n", "5", "sleep", "1000"],
    );
    let o = attach(&job, "", "libi", &[]);
    assert_eq!(o.status, 0, "{}{}", o.stdout, o.stderr);
    assert_eq!(line(&o.stdout, "attach").trim_end(), "attach LIBI_OK", "{}", o.stdout);
    assert_eq!(line(&o.stdout, "reply"), "reply proctab daemons=3 hosts=n1,n2,n3 ranks=5 alive=5");
    assert_eq!(line(&o.stdout, "mpir-size"), "mpir-size 5", "{}", o.stderr);
    let o = attach(&job, "", "libi", &["2", "4"]);
    assert_eq!(line(&o.stdout, "reply"), "reply proctab daemons=2 hosts=n2,n3 ranks=2 alive=2");
    assert_eq!(line(&o.stdout, "finalize").trim_end(), "finalize LIBI_OK");
}

/// Attach through MPIR (any MPIR starter, read with gdb as a debugger does): to a
/// libi-mpiexec job, whose symbols are there, then daemons as LIBI_MPIEXEC_ARGS says; to
/// Debian's `mpiexec.hydra`, which is stripped: one line saying so (or, should its debug
/// symbols be installed, its table: one daemon on this host with both ranks).
#[test]
fn attach_through_mpir() {
    let job = Job::start(
        MPIEXEC,
        &["-launcher", "fork", "-hosts", "n1:1,n2:2", "-n", "3", "sleep", "1000"],
    );
    // No process table was asked for before: libi-mpiexec filled its MPIR table once the
    // ranks (which never speak PMI) were up (before node/src/io/agent.rs sent the agents'
    // "up" report with the next event only, so the table stayed empty).
    let o = attach(&job, "-launcher fork", "mpir", &[]);
    assert_eq!(o.status, 0, "{}{}", o.stdout, o.stderr);
    assert_eq!(line(&o.stdout, "reply"), "reply proctab daemons=2 hosts=n1,n2 ranks=3 alive=3");
    drop(job);
    let hydra = Job::start("mpiexec.hydra", &["-n", "2", "sleep", "1000"]);
    std::thread::sleep(Duration::from_secs(1));
    let o = attach(&hydra, "-launcher fork", "mpir", &[]);
    assert_eq!(o.status, 0, "{}{}", o.stdout, o.stderr);
    let l = line(&o.stdout, "attach");
    if l.starts_with("attach LIBI_OK") {
        assert!(line(&o.stdout, "reply").ends_with(" ranks=2 alive=2"), "{}", o.stdout);
    } else {
        assert!(
            l.starts_with(&format!(
                "attach LIBI_ESESS process {} (mpiexec.hydra) has no MPIR_proctable symbol: ",
                hydra.pid()
            )),
            "{l}"
        );
    }
}

/// A receive that waits at most so long: LIBI_ETIMEOUT when nothing came (0 ms: at once,
/// without blocking), the message when it did; an unknown handle is LIBI_ESESS.
#[test]
fn timed_and_nonblocking_receive() {
    let o = tool("timed", "n1:2", &[]);
    assert_eq!(o.status, 0, "{}{}", o.stdout, o.stderr);
    assert!(
        line(&o.stdout, "nonblocking").starts_with("nonblocking LIBI_ETIMEOUT "),
        "{}",
        o.stdout
    );
    assert!(line(&o.stdout, "timed").starts_with("timed LIBI_ETIMEOUT "), "{}", o.stdout);
    assert_eq!(line(&o.stdout, "unlimited"), "unlimited LIBI_OK echo:t");
    assert_eq!(line(&o.stdout, "bad-session"), "bad-session LIBI_ESESS no session 12345");
}

/// LIBI_fe_poll over three sessions and the event descriptor in the tool's own poll(2):
/// quiet while nothing waits, readable and DATA for the session with a message, quiet again
/// once it is received, END for a killed session.
#[test]
fn poll_and_event_descriptor() {
    let o = tool("poll", "n1:1,n2:1", &[]);
    assert_eq!(o.status, 0, "{}{}", o.stdout, o.stderr);
    assert_eq!(line(&o.stdout, "eventfd").trim_end(), "eventfd LIBI_OK");
    assert_eq!(line(&o.stdout, "idle"), "idle nready=0 fd=quiet");
    assert_eq!(line(&o.stdout, "one"), "one nready=1 revents=0,1,0 fd=readable");
    assert_eq!(line(&o.stdout, "drained"), "drained nready=0 fd=quiet");
    assert_eq!(line(&o.stdout, "killed").trim_end(), "killed LIBI_OK");
    assert_eq!(line(&o.stdout, "ended"), "ended nready=1 revents=0,0,2 fd=quiet");
}

/// One session ended (its master woken), one killed, one failing on its own (a member
/// exits after LIBI_init), one going on: the others are not touched, the status callback
/// reports each end (the failure with its reason), each status is right.
#[test]
fn end_or_kill_one_session_and_status_callback() {
    let o = tool("end", "n1:2,n2:1", &[]);
    assert_eq!(o.status, 0, "{}{}", o.stdout, o.stderr);
    assert_eq!(line(&o.stdout, "end-0").trim_end(), "end-0 LIBI_OK");
    assert_eq!(line(&o.stdout, "kill-1").trim_end(), "kill-1 LIBI_OK");
    assert!(line(&o.stdout, "recv-0").starts_with("recv-0 LIBI_ESESS "), "{}", o.stdout);
    assert!(line(&o.stdout, "send-1").starts_with("send-1 LIBI_ESESS "), "{}", o.stdout);
    let failure = "rank 2 on n2 exited with code 0 without calling LIBI_finalize";
    assert!(line(&o.stdout, "end-2").ends_with(failure), "{}", o.stdout);
    assert_eq!(line(&o.stdout, "survivor"), "survivor LIBI_OK echo:alive");
    // LIBI_STATUS_ENDED 3, LIBI_STATUS_FAILED 4, LIBI_STATUS_RUNNING 2.
    for (i, st) in [(0, 3), (1, 3), (2, 4), (3, 2)] {
        assert_eq!(line(&o.stdout, &format!("status-{i}")), format!("status-{i} {st}"));
    }
    let mut cbs: Vec<&str> = o.stdout.lines().filter(|l| l.starts_with("callback s")).collect();
    cbs.sort_unstable();
    assert_eq!(cbs.len(), 4, "{}", o.stdout);
    assert_eq!(cbs[0], "callback s0 ENDED  arg");
    assert_eq!(cbs[1], "callback s1 ENDED  arg");
    assert!(
        cbs[2].starts_with("callback s2 FAILED session ")
            && cbs[2].ends_with(&format!("{failure} arg")),
        "{}",
        cbs[2]
    );
    assert_eq!(cbs[3], "callback s3 ENDED  arg");
    // A session ended before it was launched cannot be launched.
    assert_eq!(line(&o.stdout, "end-unlaunched").trim_end(), "end-unlaunched LIBI_OK");
    assert!(line(&o.stdout, "launch-ended").starts_with("launch-ended LIBI_ESESS session "));
    // The session's own stderr says it in LIBI's terms too.
    assert!(!o.stderr.contains("PMGR"), "{}", o.stderr);
}

/// Daemon output where the tool says, per session: into files, each line labelled with its
/// rank, and into descriptors of the tool's; none of it on the tool's own stdout.
#[test]
fn daemon_output_goes_where_the_tool_says() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("libi-fe-output-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("output dir");
    let member = prog("libi_fe_member");
    let dir_s = dir.to_string_lossy().into_owned();
    let o =
        run_fe("-launcher fork", &["libi_fe_tool", &member, "output", "n1:2,n2:1", &dir_s], &[]);
    assert_eq!(o.status, 0, "{}{}", o.stdout, o.stderr);
    assert_eq!(line(&o.stdout, "launch").trim_end(), "launch LIBI_OK");
    assert!(line(&o.stdout, "after-launch").starts_with("after-launch LIBI_ESESSALREADYLAUNCHED "));
    let sorted = |prefix: &str| {
        let mut v: Vec<&str> = o.stdout.lines().filter(|l| l.starts_with(prefix)).collect();
        v.sort_unstable();
        v
    };
    assert_eq!(
        sorted("file-out0 "),
        ["file-out0 [0] out 0", "file-out0 [1] out 1", "file-out0 [2] out 2"]
    );
    assert_eq!(
        sorted("file-err0 "),
        ["file-err0 [0] err 0", "file-err0 [1] err 1", "file-err0 [2] err 2"]
    );
    assert_eq!(sorted("file-out1 "), ["file-out1 out 0", "file-out1 out 1", "file-out1 out 2"]);
    assert_eq!(sorted("file-err1 "), ["file-err1 err 0", "file-err1 err 1", "file-err1 err 2"]);
    assert!(!o.stdout.lines().any(|l| l.starts_with("out ")), "{}", o.stdout);
    assert!(!o.stderr.lines().any(|l| l.starts_with("err ")), "{}", o.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Attach over real ssh into the namespace hosts (under `ci/with-netns-hosts.sh`): the job
/// runs with `-launcher ssh -launcher-exec WRAPPER`, the tool sets no LIBI_MPIEXEC_ARGS, and
/// its daemons reach the job's hosts through the same wrapper.
#[test]
fn attach_over_ssh_inherits_the_launcher_exec() {
    let (Ok(h), Ok(ssh)) = (std::env::var("LIBI_TEST_HOSTS"), std::env::var("LIBI_TEST_SSH"))
    else {
        assert!(
            std::env::var("LIBI_REQUIRE_SSH_TESTS").is_err(),
            "LIBI_REQUIRE_SSH_TESTS is set but LIBI_TEST_HOSTS/LIBI_TEST_SSH are not"
        );
        eprintln!("ssh tests skipped: run under ci/with-netns-hosts.sh N -- cargo test");
        return;
    };
    let names: Vec<&str> = h.split(',').take(3).collect();
    let hosts: Vec<String> = names.iter().map(|x| format!("{x}:2")).collect();
    let n = (2 * names.len()).to_string();
    let hosts = hosts.join(",");
    let job = Job::start(
        MPIEXEC,
        &["-launcher", "ssh", "-launcher-exec", &ssh, "-hosts", &hosts, "-n", &n, "sleep", "1000"],
    );
    let o = attach(&job, "", "libi", &[]);
    assert_eq!(o.status, 0, "{}{}", o.stdout, o.stderr);
    assert_eq!(
        line(&o.stdout, "reply"),
        format!(
            "reply proctab daemons={} hosts={} ranks={n} alive={n}",
            names.len(),
            names.join(",")
        ),
        "{}",
        o.stderr
    );
}

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
        assert!(flags.status.success(), "pkg-config libi failed");
        let flags = String::from_utf8_lossy(&flags.stdout).into_owned();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("libi-fe-c-{}", std::process::id()));
        std::fs::create_dir_all(&out).expect("create program dir");
        for name in ["libi_fe_member", "libi_fe_tool", "libi_fe_threads"] {
            let st = Command::new("cc")
                .args(["-Wall", "-Werror", "-O2", "-pthread", "-o"])
                .arg(out.join(name))
                .arg(root.join(format!("tests/programs/{name}.c")))
                .args(flags.split_whitespace())
                .status()
                .expect("cc");
            assert!(st.success(), "cc {name}.c failed");
        }
        out
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

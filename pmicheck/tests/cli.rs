//! The command line of `libi-pmicheck` without a process manager: help, bad arguments, the
//! check list, and a clean FAIL (not a crash or a hang) when no PMI server is in the
//! environment. The runs under real process managers are in `tests/pmicheck.rs` (workspace
//! root), registered with libi-mpiexec.

use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_libi-pmicheck");

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .env_remove("PMI_FD")
        .env_remove("PMI_PORT")
        .env_remove("PMI_ID")
        .env_remove("PMI_RANK")
        .stdin(Stdio::null())
        .output()
        .expect("run libi-pmicheck");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn help_and_bad_arguments() {
    let (st, out, _) = run(&["--help"]);
    assert_eq!(st, 0);
    assert!(out.contains("usage: libi-pmicheck"), "{out}");
    let (st, _, err) = run(&["--frobnicate"]);
    assert_eq!(st, 2);
    assert!(err.contains("unknown argument"), "{err}");
    let (st, _, err) = run(&["--timeout", "soon"]);
    assert_eq!(st, 2);
    assert!(err.contains("--timeout"), "{err}");
}

#[test]
fn list_of_checks() {
    let (st, out, _) = run(&["--list"]);
    assert_eq!(st, 0);
    assert!(out.lines().any(|l| l == "get-missing"), "{out}");
    assert!(!out.contains("node-attr"), "{out}");
    let (_, out, _) = run(&["--list", "--pmi2"]);
    assert!(out.lines().any(|l| l == "node-attr-wait"), "{out}");
}

#[test]
fn no_server_is_a_clean_failure() {
    let (st, out, _) = run(&[]);
    assert_eq!(st, 1, "{out}");
    assert!(out.lines().any(|l| l.starts_with("FAIL init: neither PMI_FD nor PMI_PORT")), "{out}");
    let last = out.lines().last().unwrap_or("");
    assert!(last.starts_with("0 passed, 1 failed"), "{out}");
}

#[test]
fn pmi_fd_not_a_socket() {
    let out = Command::new(BIN)
        .env("PMI_FD", "0")
        .env("PMI_RANK", "0")
        .env("PMI_SIZE", "1")
        .stdin(Stdio::null())
        .output()
        .expect("run libi-pmicheck");
    let s = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{s}");
    assert!(s.contains("FAIL init: PMI_FD=0"), "{s}");
}

/// Output that cannot be written (a full disk, a reader gone) loses the lines, never
/// panics: the list exits 0, a bad argument still exits 2.
#[test]
fn unwritable_output_is_not_a_crash() {
    let full = || std::fs::OpenOptions::new().write(true).open("/dev/full").expect("/dev/full");
    let st = Command::new(BIN)
        .arg("--list")
        .stdout(Stdio::from(full()))
        .status()
        .expect("run libi-pmicheck");
    assert_eq!(st.code(), Some(0));
    let st = Command::new(BIN)
        .arg("--frobnicate")
        .stderr(Stdio::from(full()))
        .status()
        .expect("run libi-pmicheck");
    assert_eq!(st.code(), Some(2));
}

/// A server that answers with a line that is not a reply (and then nothing): the check says
/// what came, not that nothing did.
#[test]
fn an_incomplete_reply_is_named() {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let server = std::thread::spawn(move || {
        let (mut s, _) = l.accept().expect("accept");
        let mut buf = [0u8; 256];
        let _ = s.read(&mut buf);
        let _ = s.write_all(b"hello world\n");
        // Held open until the checker gives up and closes it.
        while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
    });
    let out = Command::new(BIN)
        .args(["--timeout", "1", "--fence-timeout", "1"])
        .env_remove("PMI_FD")
        .env("PMI_PORT", format!("127.0.0.1:{port}"))
        .env("PMI_ID", "0")
        .stdin(Stdio::null())
        .output()
        .expect("run libi-pmicheck");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(
            "FAIL init: bad reply to cmd=initack: incomplete within 1s: got \"hello world\\n\""
        ),
        "{stdout}"
    );
    let _ = server.join();
}

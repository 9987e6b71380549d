//! `libi-nla` started by hand, the way a misconfigured launcher might: it must refuse with a
//! one-line message and a non-zero status, never hang or panic. (Also makes `cargo test
//! --workspace` build the `libi-nla` binary that the end-to-end tests run.)

use std::io::Write;
use std::process::{Command, Stdio};

const NLA: &str = env!("CARGO_BIN_EXE_libi-nla");

#[test]
fn no_secret_on_stdin() {
    let out = Command::new(NLA)
        .args(["--parent", "127.0.0.1:1", "--node", "1"])
        .stdin(Stdio::null())
        .output()
        .expect("run libi-nla");
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("secret"), "{e}");
}

#[test]
fn unreachable_parent() {
    // Port 1 on loopback: nothing listens there.
    let mut child = Command::new(NLA)
        .args(["--parent", "127.0.0.1:1", "--node", "3"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run libi-nla");
    child.stdin.take().expect("stdin").write_all(b"s3cret\n").expect("write");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(1));
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("node 3") && e.contains("127.0.0.1:1"), "{e}");
}

#[test]
fn missing_arguments() {
    let out = Command::new(NLA).stdin(Stdio::null()).output().expect("run libi-nla");
    assert_eq!(out.status.code(), Some(2));
}

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

/// Run the agent with the secret against `parent`, where nothing listens: it must fail with
/// status 1 and one line on stderr, which is returned.
fn unreachable(parent: &str, node: &str) -> String {
    let mut child = Command::new(NLA)
        .args(["--parent", parent, "--node", node])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run libi-nla");
    child.stdin.take().expect("stdin").write_all(b"s3cret\n").expect("write");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(1));
    let e = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(e.lines().count(), 1, "{e}");
    e
}

#[test]
fn unreachable_parent() {
    // Port 1 on loopback: nothing listens there.
    let e = unreachable("127.0.0.1:1", "3");
    assert!(e.contains("node 3") && e.contains("127.0.0.1:1"), "{e}");
}

#[test]
fn missing_arguments() {
    let out = Command::new(NLA).stdin(Stdio::null()).output().expect("run libi-nla");
    assert_eq!(out.status.code(), Some(2));
}

/// The agent is a static executable (nla/build.rs) unless built with `LIBI_NLA_DYNAMIC`: no
/// program interpreter (PT_INTERP) in its ELF program headers.
#[test]
fn linked_statically() {
    if option_env!("LIBI_NLA_DYNAMIC").is_some_and(|v| !v.is_empty() && v != "0") {
        return;
    }
    let elf = std::fs::read(NLA).expect("read libi-nla");
    assert_eq!(static_pie::is_static(&elf), Some(true), "libi-nla is linked dynamically");
}

/// A parent given by name: the static agent resolves it with the C library's built-in
/// sources (here `localhost` from /etc/hosts) and reports the refused connection, not a
/// failed lookup.
#[test]
fn parent_by_name() {
    let e = unreachable("localhost:1", "4");
    assert!(e.contains("localhost:1") && e.to_lowercase().contains("refused"), "{e}");
}

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

/// Run the agent with the secret against `parent`, where nothing listens, trying again
/// `retries` times: it must fail with status 1 and one line on stderr, which is returned.
fn unreachable(parent: &str, node: &str, retries: u32) -> String {
    let mut child = Command::new(NLA)
        .args(["--parent", parent, "--node", node, "--retries", &retries.to_string()])
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
    let e = unreachable("127.0.0.1:1", "3", 0);
    assert!(e.contains("node 3") && e.contains("127.0.0.1:1"), "{e}");
    assert!(!e.contains("tries"), "{e}");
    // Retried: the same error, and how many tries it took.
    let e = unreachable("127.0.0.1:1", "3", 2);
    assert!(e.contains("127.0.0.1:1") && e.ends_with("(3 tries)\n"), "{e}");
}

/// A parent that listens only after the agent first tried (`HYDRA_PROXY_RETRY_COUNT`'s
/// case): the agent tries again and connects, and its first message carries the secret; a
/// parent that closes the connection before the setup is connected to again, up to the
/// retries (issue 50.3).
#[test]
fn parent_that_listens_late() {
    use std::io::Read;
    // A port nothing listens on now (taken, then given back).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let mut child = Command::new(NLA)
        .args(["--parent", &format!("127.0.0.1:{port}"), "--node", "5", "--retries", "10"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run libi-nla");
    child.stdin.take().expect("stdin").write_all(b"s3cret\n").expect("write");
    // Its first tries are refused; it waits 10, 20, 40, ... ms in between.
    std::thread::sleep(std::time::Duration::from_millis(150));
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("bind the port again");
    listener.set_nonblocking(true).expect("nonblocking");
    // Each connection opens with a hello carrying the secret, and is closed before any
    // setup: the agent connects again (a parent's pool may have evicted it), up to its
    // retries, then gives up with one line, status 1.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut hellos = 0;
    let status = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break st;
        }
        assert!(std::time::Instant::now() < deadline, "the agent never gave up");
        match listener.accept() {
            Ok((mut conn, _)) => {
                conn.set_nonblocking(false).expect("blocking");
                conn.set_read_timeout(Some(std::time::Duration::from_secs(10))).expect("timeout");
                let mut hello = Vec::new();
                let mut buf = [0u8; 256];
                while !hello.windows(6).any(|w| w == b"s3cret") {
                    match conn.read(&mut buf) {
                        Ok(n) if n > 0 => hello.extend_from_slice(&buf[..n]),
                        other => panic!("no hello with the secret: {other:?} after {hello:?}"),
                    }
                }
                hellos += 1;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) => panic!("accept: {e}"),
        }
    };
    let out = child.wait_with_output().expect("wait");
    assert_eq!(status.code(), Some(1));
    assert_eq!(hellos, 11, "one hello, then one for each of the 10 retries");
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("node 5") && e.contains("before setup") && e.contains("11 tries"), "{e}");
}

/// An agent still trying to reach its parent when its launcher goes away (`--keep-stdin`: its
/// stdin closes) stops trying: nobody is left to connect to, and nothing of it may linger.
#[test]
fn launcher_gone_while_retrying() {
    let mut child = Command::new(NLA)
        .args(["--parent", "127.0.0.1:1", "--node", "6", "--keep-stdin", "--retries", "1000"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run libi-nla");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"s3cret\n").expect("write");
    std::thread::sleep(std::time::Duration::from_millis(100));
    drop(stdin);
    // 1000 tries would take over three minutes; a hang guard, not a timing.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().expect("wait").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the agent kept retrying after its launcher was gone");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(1));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("node 6") && e.contains("stdin) closed"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
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

/// The functions the agent runs (nla/rust-hot.txt) are gathered in their own section before
/// the rest of its code, where its build applied that layout (a static link by rustc's lld):
/// none of the list's patterns matching (a list out of step with the code) would leave the
/// section out.
#[test]
fn hot_functions_laid_out_together() {
    if option_env!("LIBI_HOT_SECTION").is_none() {
        return;
    }
    let elf = std::fs::read(NLA).expect("read libi-nla");
    if let Err(e) = static_pie::hot_section(&elf) {
        panic!("libi-nla: {e}");
    }
}

/// A parent given by name: the static agent resolves it with the C library's built-in
/// sources (here `localhost` from /etc/hosts) and reports the refused connection, not a
/// failed lookup.
#[test]
fn parent_by_name() {
    let e = unreachable("localhost:1", "4", 0);
    assert!(e.contains("localhost:1") && e.to_lowercase().contains("refused"), "{e}");
}

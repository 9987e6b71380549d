//! The front end's listener under hostile connections: nothing is read beyond a short
//! hello, a wrong key or an oversized frame closes the connection at once, idle
//! connections are cut after the hello timeout or refused beyond the authentication cap,
//! and none of it disturbs the front end.

use libi_session::fe::{FrontEnd, Options};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

fn fe() -> FrontEnd {
    let opts = Options {
        mpiexec: "/nonexistent/libi-mpiexec".into(),
        args: vec![],
        ready_wait: Duration::from_secs(1),
        finalize_wait: Duration::from_secs(1),
    };
    FrontEnd::with_options(opts).expect("front end")
}

/// Bytes the front end sends before it closes `s` (it never answers a stranger).
fn closed_within(mut s: TcpStream, t: Duration) -> Option<usize> {
    s.set_read_timeout(Some(t)).expect("timeout");
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(n) => Some(n),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Some(0),
        Err(_) => None,
    }
}

#[test]
fn strangers_are_closed_without_being_read() {
    let fe = fe();
    let addr = ("127.0.0.1", fe.port());
    // An oversized first frame: closed before its body is read.
    let mut s = TcpStream::connect(addr).expect("connect");
    s.write_all(&u32::MAX.to_be_bytes()).expect("write");
    assert_eq!(closed_within(s, Duration::from_secs(5)), Some(0));
    // A hello with a key that is no session's.
    let mut s = TcpStream::connect(addr).expect("connect");
    let hello = b"LIBI-MASTER/1 00000000000000000000000000000000";
    s.write_all(&(hello.len() as u32).to_be_bytes()).expect("write");
    s.write_all(hello).expect("write");
    assert_eq!(closed_within(s, Duration::from_secs(5)), Some(0));
    // Garbage text.
    let mut s = TcpStream::connect(addr).expect("connect");
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").expect("write");
    assert_eq!(closed_within(s, Duration::from_secs(5)), Some(0));
}

/// 64 idle connections fill the authentication slots: each new one evicts the one that
/// waited longest, so the newest (a real master, say) always gets in; and each is cut after
/// the hello timeout (10 s) however it trickles its bytes.
#[test]
fn idle_connections_are_evicted_and_cut() {
    let fe = fe();
    let addr = ("127.0.0.1", fe.port());
    let mut idle: Vec<TcpStream> =
        (0..64).map(|_| TcpStream::connect(addr).expect("connect")).collect();
    std::thread::sleep(Duration::from_millis(200));
    let newest = TcpStream::connect(addr).expect("connect");
    // The oldest is closed at once, ...
    let oldest = idle.remove(0);
    assert_eq!(closed_within(oldest, Duration::from_secs(60)), Some(0));
    // ... the newest waits for its hello.
    assert_eq!(closed_within(newest.try_clone().expect("clone"), Duration::from_millis(200)), None);
    drop(idle);
    // A slowloris: the 4-byte length of a hello, one byte every second. The old per-read
    // wait let it hold its slot for as long as it kept trickling; it is cut after 10 s.
    let mut slow = newest;
    let mut cut = false;
    for b in 16u32.to_be_bytes().iter().cycle().take(30) {
        if slow.write_all(&[*b]).is_err() {
            cut = true;
            break;
        }
        if closed_within(slow.try_clone().expect("clone"), Duration::from_secs(1)).is_some() {
            cut = true;
            break;
        }
    }
    assert!(cut, "a connection trickling one byte a second was never cut");
}

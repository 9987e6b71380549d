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

#[test]
fn idle_connections_are_capped_and_cut() {
    let fe = fe();
    let addr = ("127.0.0.1", fe.port());
    // 64 idle connections fill the authentication slots; the next ones are closed at once.
    let mut idle: Vec<TcpStream> =
        (0..64).map(|_| TcpStream::connect(addr).expect("connect")).collect();
    std::thread::sleep(Duration::from_millis(200));
    let extra = TcpStream::connect(addr).expect("connect");
    assert_eq!(closed_within(extra, Duration::from_secs(60)), Some(0));
    // ... while the idle ones still wait for their hello,
    let last = idle.pop().expect("one");
    assert_eq!(closed_within(last.try_clone().expect("clone"), Duration::from_millis(100)), None);
    // and are cut after the hello timeout (10 s).
    assert_eq!(closed_within(last, Duration::from_secs(60)), Some(0));
}

//! The transport against the other end of a real socketpair: replies that arrive split over
//! several reads or several in one read, PMI-2 frames, EOF and bad `PMI_FD` values. One test
//! function: `PMI_FD` is process-wide.

use std::io::{ErrorKind, Write};
use std::os::fd::IntoRawFd;
use std::os::unix::net::UnixStream;

use pmi_client::Transport;
use pmi_wire::v2::{Align, Reply, HEADER_LEN};

#[test]
fn lines_and_frames_over_pmi_fd() {
    // Unset, or set to something that cannot be a descriptor.
    std::env::remove_var("PMI_FD");
    assert!(matches!(Transport::from_env(), Ok(None)));
    for bad in ["x", "-3", ""] {
        std::env::set_var("PMI_FD", bad);
        let e = Transport::from_env().err().expect("a bad PMI_FD is an error");
        assert_eq!(e.kind(), ErrorKind::InvalidData, "{bad:?}: {e}");
    }

    let (mut server, client) = UnixStream::pair().expect("socketpair");
    std::env::set_var("PMI_FD", format!(" {} ", client.into_raw_fd()));
    let mut t = Transport::from_env().expect("usable PMI_FD").expect("PMI_FD is set");

    // What the client sends reaches the server unchanged.
    t.send(b"cmd=init pmi_version=1 pmi_subversion=1\n").expect("send");
    let mut got = [0u8; 40];
    std::io::Read::read_exact(&mut server, &mut got).expect("server reads");
    assert_eq!(&got, b"cmd=init pmi_version=1 pmi_subversion=1\n");

    // Two replies in one write come back one at a time, each with its newline.
    server.write_all(b"cmd=barrier_out\ncmd=my_kvsname kvsname=k").expect("write");
    assert_eq!(t.read_line().expect("line"), b"cmd=barrier_out\n");
    // The second is completed by a later write.
    server.write_all(b"vs_0\n").expect("write");
    assert_eq!(t.read_line().expect("line"), b"cmd=my_kvsname kvsname=kvs_0\n");

    // A PMI-2 frame split inside its header, then a second frame glued to the first.
    let a = Reply::JobGetId { jobid: "job-7".into() }.to_frame(None, Align::Left);
    let b = Reply::JobGetId { jobid: "job-8".into() }.to_frame(None, Align::Left);
    let (body_a, body_b) = (a[HEADER_LEN..].to_vec(), b[HEADER_LEN..].to_vec());
    server.write_all(&a[..3]).expect("write");
    let writer = std::thread::spawn(move || {
        let mut rest = a[3..].to_vec();
        rest.extend_from_slice(&b);
        server.write_all(&rest).expect("write");
        server // dropped by the caller: EOF
    });
    assert_eq!(t.read_frame().expect("frame"), body_a);
    assert_eq!(t.read_frame().expect("frame"), body_b);

    // The server going away is an error, not a hang or a panic.
    drop(writer.join().expect("writer"));
    let e = t.read_line().expect_err("EOF");
    assert_eq!(e.kind(), ErrorKind::UnexpectedEof);
}

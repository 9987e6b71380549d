//! Singleton init, as MPICH does it: an MPI process started without a launcher runs alone
//! until it needs a process manager (`MPI_Comm_spawn`, the universe size, the name service).
//! Then it listens on a TCP port and starts `mpiexec -pmi_args PORT IFACE KEY PID` (the first
//! `mpiexec` on its `PATH`). The job `libi-mpiexec` plans for it has one rank, the singleton,
//! on this host; its NLA connects to the port instead of starting a process, and after this
//! handshake serves the connection PMI-1 as rank 0's:
//!
//! ```text
//! NLA:       cmd=singinit authtype=none
//! singleton: cmd=singinit pmi_version=1 pmi_subversion=2 stdio=yes authtype=none
//! NLA:       cmd=singinit_info versionok=yes stdio=no kvsname=KVSNAME
//! ```
//!
//! `stdio=no`: the singleton keeps its own stdin, stdout and stderr (`libi-mpiexec` inherited
//! them and writes its spawned ranks' output there).

use std::io;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long the singleton may take to connect and answer (it waits for us in `accept`).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest handshake line we read.
const MAX_LINE: usize = 1024;

/// Connect to the singleton listening on `port` of this host and make the handshake; the
/// stream then carries plain PMI-1.
pub async fn connect(port: u16, kvsname: &str) -> io::Result<TcpStream> {
    tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake(port, kvsname))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no singinit handshake in 30 s"))?
}

async fn handshake(port: u16, kvsname: &str) -> io::Result<TcpStream> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await?;
    s.set_nodelay(true)?;
    s.write_all(b"cmd=singinit authtype=none\n").await?;
    // Byte by byte: the singleton sends nothing more until it has our answer, and nothing
    // of the PMI stream that follows may be swallowed here.
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    loop {
        if s.read(&mut b).await? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the singleton closed the connection during the handshake",
            ));
        }
        if b[0] == b'\n' {
            break;
        }
        line.push(b[0]);
        if line.len() > MAX_LINE {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "over-long singinit line"));
        }
    }
    let line = String::from_utf8_lossy(&line);
    if let Err(why) = check_singinit(&line) {
        let _ = s.write_all(b"cmd=singinit_info versionok=no\n").await;
        return Err(io::Error::new(io::ErrorKind::InvalidData, why));
    }
    let info = format!("cmd=singinit_info versionok=yes stdio=no kvsname={kvsname}\n");
    s.write_all(info.as_bytes()).await?;
    Ok(s)
}

/// Is this the singleton's half of the handshake, for PMI-1 without authentication?
pub fn check_singinit(line: &str) -> Result<(), String> {
    let field = |k: &str| {
        line.split_whitespace().find_map(|t| t.strip_prefix(k).and_then(|r| r.strip_prefix('=')))
    };
    if field("cmd") != Some("singinit") {
        return Err(format!(
            "expected cmd=singinit, got '{}'",
            pmi_wire::server::excerpt(line.as_bytes())
        ));
    }
    match field("pmi_version") {
        None | Some("1") => {}
        Some(v) => return Err(format!("the singleton speaks PMI version {v}, not 1")),
    }
    match field("authtype") {
        None | Some("none") => Ok(()),
        Some(a) => Err(format!("the singleton asks for authentication '{a}'")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn singinit_lines() {
        let ok = "cmd=singinit pmi_version=1 pmi_subversion=2 stdio=yes authtype=none";
        assert_eq!(check_singinit(ok), Ok(()));
        assert_eq!(check_singinit("cmd=singinit"), Ok(()));
        assert!(check_singinit("cmd=init pmi_version=1").is_err());
        assert!(check_singinit("cmd=singinit pmi_version=2").is_err());
        assert!(check_singinit("cmd=singinit authtype=shared").is_err());
        assert!(check_singinit("").is_err());
    }

    /// The handshake against a fake singleton: our lines, the kvsname, and the PMI stream
    /// that follows left intact.
    #[tokio::test]
    async fn handshake_with_a_fake_singleton() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = l.local_addr().expect("addr").port();
        let fake = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.expect("accept");
            let mut got = vec![0u8; 27];
            s.read_exact(&mut got).await.expect("read singinit");
            s.write_all(b"cmd=singinit pmi_version=1 pmi_subversion=2 stdio=yes authtype=none\n")
                .await
                .expect("write");
            let mut info = Vec::new();
            let mut b = [0u8; 1];
            while s.read(&mut b).await.expect("read") == 1 && b[0] != b'\n' {
                info.push(b[0]);
            }
            s.write_all(b"cmd=init pmi_version=1 pmi_subversion=1\n").await.expect("write");
            (
                String::from_utf8_lossy(&got).into_owned(),
                String::from_utf8_lossy(&info).into_owned(),
            )
        });
        let mut s = connect(port, "kvs_1_0_2_h").await.expect("handshake");
        let mut rest = vec![0u8; 40];
        s.read_exact(&mut rest).await.expect("pmi");
        assert_eq!(rest, b"cmd=init pmi_version=1 pmi_subversion=1\n");
        let (ours, info) = fake.await.expect("fake");
        assert_eq!(ours, "cmd=singinit authtype=none\n");
        assert_eq!(info, "cmd=singinit_info versionok=yes stdio=no kvsname=kvs_1_0_2_h");
    }
}

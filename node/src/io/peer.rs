//! Who is at the other end of a loopback TCP connection to this NLA.
//!
//! A PMGR v8 client sends its version and its rank and nothing else
//! (`docs/spec/pmgr-wire.md` §3.2: no job id, no secret, no credential; `MPIRUN_ID` never
//! reaches the server), so the PMGR port cannot authenticate a connection by what it says.
//! It authenticates it by who holds it: the client's socket is found in `/proc/net/tcp` by
//! the connection's two ports (its owner's uid and its inode), and the inode among the open
//! files of the local ranks' processes. A rank is a session leader (`setsid` at start), so
//! "the processes of rank r" are those whose session is the rank's pid: the rank, and
//! whatever it started that did not leave its session. Anything else — another user,
//! another job, a process of this job's user outside the ranks' sessions, a client that
//! closed its socket before it could be identified — is not a rank of this node.
//!
//! The client must still hold its socket when we look: a connection is identified as soon
//! as it is accepted, before anything is read from it. Cost: reading `/proc/net/tcp`, then
//! the fd directories of the ranks' processes (the claimed rank's first, when its bytes are
//! already there); the session members are cached and the whole of `/proc` is scanned only
//! when the cache does not explain a connection.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddrV4;

/// The client's end of a connection, as `/proc/net/tcp` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerSocket {
    pub uid: u32,
    /// 0 when no process holds it any more (closed, or its process exited).
    pub inode: u64,
}

/// The socket whose local address is `peer` and remote address is `ours` (the other end of
/// our connection from `peer` to `ours`; IPv4: the PMGR port is bound to 127.0.0.1). Asked of
/// the kernel by its address pair (sock_diag: one hash lookup), or, where that is not
/// available, found in `/proc/net/tcp` (a table of every TCP socket on the host: slow when
/// thousands sit in TIME_WAIT). `None`: no such socket (it is gone).
pub fn tcp_peer(ours: SocketAddrV4, peer: SocketAddrV4) -> io::Result<Option<PeerSocket>> {
    match diag_lookup(ours, peer) {
        Ok(found) => Ok(found),
        Err(_) => {
            let table = std::fs::read_to_string("/proc/net/tcp")?;
            Ok(find_in_table(&table, ours, peer))
        }
    }
}

/// `SOCK_DIAG_BY_FAMILY` request for the one TCP socket bound to `peer` and connected to
/// `ours` (linux/inet_diag.h: `nlmsghdr` + `inet_diag_req_v2`; ports and addresses in network
/// order, integers otherwise in host order).
fn diag_request(ours: SocketAddrV4, peer: SocketAddrV4) -> Vec<u8> {
    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const NLM_F_REQUEST: u16 = 1;
    let mut m = Vec::with_capacity(72);
    m.extend_from_slice(&72u32.to_ne_bytes()); // nlmsg_len
    m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    m.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes()); // seq
    m.extend_from_slice(&0u32.to_ne_bytes()); // pid: the kernel
    m.extend_from_slice(&[libc::AF_INET as u8, libc::IPPROTO_TCP as u8, 0, 0]);
    m.extend_from_slice(&u32::MAX.to_ne_bytes()); // every state
    m.extend_from_slice(&peer.port().to_be_bytes()); // sport
    m.extend_from_slice(&ours.port().to_be_bytes()); // dport
    m.extend_from_slice(&peer.ip().octets());
    m.extend_from_slice(&[0; 12]);
    m.extend_from_slice(&ours.ip().octets());
    m.extend_from_slice(&[0; 12]);
    m.extend_from_slice(&0u32.to_ne_bytes()); // interface: any
    m.extend_from_slice(&[0xff; 8]); // no cookie
    m
}

/// The answer to [`diag_request`]: an `inet_diag_msg` (its uid at offset 64 and inode at 68
/// after the 16-byte header), or an error message (`ENOENT`: no such socket).
fn diag_answer(b: &[u8]) -> io::Result<Option<PeerSocket>> {
    const NLMSG_ERROR: u16 = 2;
    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    let u16_at = |at: usize| b.get(at..at + 2).map(|x| u16::from_ne_bytes([x[0], x[1]]));
    let u32_at =
        |at: usize| b.get(at..at + 4).map(|x| u32::from_ne_bytes([x[0], x[1], x[2], x[3]]));
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "short sock_diag answer");
    match u16_at(4).ok_or_else(bad)? {
        NLMSG_ERROR => {
            let errno = -(u32_at(16).ok_or_else(bad)? as i32);
            if errno == libc::ENOENT {
                Ok(None)
            } else {
                Err(io::Error::from_raw_os_error(errno))
            }
        }
        SOCK_DIAG_BY_FAMILY => {
            let uid = u32_at(16 + 64).ok_or_else(bad)?;
            let inode = u32_at(16 + 68).ok_or_else(bad)?;
            Ok(Some(PeerSocket { uid, inode: inode.into() }))
        }
        t => Err(io::Error::new(io::ErrorKind::InvalidData, format!("sock_diag answer type {t}"))),
    }
}

fn diag_lookup(ours: SocketAddrV4, peer: SocketAddrV4) -> io::Result<Option<PeerSocket>> {
    use nix::sys::socket::{
        recv, sendto, socket, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol,
        SockType,
    };
    use std::os::fd::AsRawFd;
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkSockDiag,
    )?;
    let req = diag_request(ours, peer);
    sendto(fd.as_raw_fd(), &req, &NetlinkAddr::new(0, 0), MsgFlags::empty())?;
    let mut buf = [0u8; 512];
    let n = recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty())?;
    diag_answer(&buf[..n])
}

/// `/proc/net/tcp` prints an address as the IPv4 address's 32 bits in memory order as hex,
/// a colon, and the port as hex.
fn proc_addr(a: SocketAddrV4) -> String {
    format!("{:08X}:{:04X}", u32::from_ne_bytes(a.ip().octets()), a.port())
}

fn find_in_table(table: &str, ours: SocketAddrV4, peer: SocketAddrV4) -> Option<PeerSocket> {
    let (local, remote) = (proc_addr(peer), proc_addr(ours));
    table.lines().skip(1).find_map(|line| {
        // sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 || !f[1].eq_ignore_ascii_case(&local) || !f[2].eq_ignore_ascii_case(&remote)
        {
            return None;
        }
        Some(PeerSocket { uid: f[7].parse().ok()?, inode: f[9].parse().ok()? })
    })
}

/// Does process `pid` hold socket `inode` open?
fn holds(pid: i32, inode: u64) -> bool {
    let want = format!("socket:[{inode}]");
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    dir.flatten()
        .any(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.as_os_str() == want.as_str()))
}

/// The session of process `pid` (field 6 of `/proc/pid/stat`).
fn session_of(stat: &str) -> Option<i32> {
    // "pid (comm) state ppid pgrp session ...": comm may hold anything, up to the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(3)?.parse().ok()
}

/// The processes of the local ranks' sessions, cached between connections.
#[derive(Debug, Default)]
pub struct Sessions {
    members: HashMap<i32, Vec<i32>>,
}

impl Sessions {
    /// Which of `ranks` (global rank, pid of its process: a session leader) holds socket
    /// `inode`, as far as the cached session members say (the leader alone where nothing is
    /// cached)? `claimed` (the rank the connection says it is) is tried first. Cheap: the fd
    /// directories of a few processes.
    pub fn owner_cached(
        &self,
        inode: u64,
        ranks: &[(u32, i32)],
        claimed: Option<u32>,
    ) -> Option<u32> {
        if inode == 0 {
            return None;
        }
        let mut order: Vec<(u32, i32)> = ranks.to_vec();
        order.sort_by_key(|(r, _)| Some(*r) != claimed);
        order.iter().find_map(|&(rank, leader)| {
            let procs = self
                .members
                .get(&leader)
                .map(Vec::as_slice)
                .unwrap_or(std::slice::from_ref(&leader));
            procs.iter().any(|&p| holds(p, inode)).then_some(rank)
        })
    }

    /// As [`Sessions::owner_cached`], after finding the ranks' session members anew (a scan
    /// of `/proc`).
    pub fn owner(&mut self, inode: u64, ranks: &[(u32, i32)], claimed: Option<u32>) -> Option<u32> {
        if inode == 0 {
            return None;
        }
        self.rescan(ranks);
        self.owner_cached(inode, ranks, claimed)
    }

    /// Find every process of the ranks' sessions.
    fn rescan(&mut self, ranks: &[(u32, i32)]) {
        let mut members: HashMap<i32, Vec<i32>> =
            ranks.iter().map(|&(_, leader)| (leader, Vec::new())).collect();
        let Ok(proc_dir) = std::fs::read_dir("/proc") else { return };
        for e in proc_dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else { continue };
            if let Some(list) = session_of(&stat).and_then(|s| members.get_mut(&s)) {
                list.push(pid);
            }
        }
        self.members = members;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, TcpListener, TcpStream};

    #[test]
    fn parses_the_table() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
            0: 0100007F:930A 0100007F:AC5F 01 00000000:00000000 00:00000000 00000000  1000        0 4242 1 0000000000000000 20 4 30 10 -1\n";
        let ours = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0xAC5F);
        let peer = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0x930A);
        if cfg!(target_endian = "little") {
            assert_eq!(
                find_in_table(table, ours, peer),
                Some(PeerSocket { uid: 1000, inode: 4242 })
            );
        }
        assert_eq!(find_in_table(table, peer, ours), None);
        assert_eq!(session_of("12 (a) b) c) S 1 12 77 0 -1"), Some(77));
    }

    #[test]
    fn finds_our_own_connection() {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let c = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (s, _) = l.accept().expect("accept");
        let (std::net::SocketAddr::V4(ours), std::net::SocketAddr::V4(peer)) =
            (s.local_addr().expect("local"), s.peer_addr().expect("peer"))
        else {
            panic!("not IPv4")
        };
        let p = tcp_peer(ours, peer).expect("look up").expect("found");
        assert_eq!(p.uid, nix::unistd::geteuid().as_raw());
        let t = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
        assert_eq!(find_in_table(&t, ours, peer), Some(p));
        assert_eq!(diag_lookup(ours, peer).expect("sock_diag"), Some(p));
        assert_eq!(
            diag_lookup(peer, ours).expect("sock_diag").map(|s| s.inode == p.inode),
            Some(false)
        );
        let gone = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 1);
        assert_eq!(diag_lookup(ours, gone).expect("sock_diag"), None);
        let me = std::process::id() as i32;
        assert!(holds(me, p.inode));
        // We are not in a session led by pid 1 (init's), nor is anyone holding our socket.
        let mut s = Sessions::default();
        assert_eq!(s.owner(p.inode, &[(0, 1)], Some(0)), None);
        let sid = nix::unistd::getsid(None).expect("getsid").as_raw();
        let ranks = [(3, 1), (5, sid)];
        assert_eq!(s.owner(p.inode, &ranks, Some(3)), Some(5));
        assert_eq!(s.owner_cached(p.inode, &ranks, None), Some(5));
        assert_eq!(s.owner_cached(0, &ranks, None), None);
        drop(c);
    }
}

//! PMGR_COLLECTIVE client library (protocol v8), safe Rust API.
//!
//! Every collective goes through the server (§3.4); there is no client-to-client tree. With
//! one rank (or without `MPIRUN_RANK`: a singleton) nothing connects anywhere and the
//! collectives are local copies.
//!
//! Environment (§2): `MPIRUN_RANK` (absent = singleton), `MPIRUN_NPROCS`, `MPIRUN_ID`, and for
//! N > 1 `MPIRUN_HOST` (name or address) and `MPIRUN_PORT`. Connection tuning:
//! `MPIRUN_CONNECT_TRIES` (default 10 attempts), `MPIRUN_CONNECT_TIMEOUT` (seconds per
//! attempt, default 60), `MPIRUN_CONNECT_BACKOFF` (seconds, default 5: the longest sleep
//! between attempts; sleeps grow from 10 ms, doubling), `MPIRUN_CONNECT_RANDOM` (default 1:
//! sleep a random time between half and all of the current backoff).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::wire::{encode_abort_record, encode_hello, opcode, put_int};

/// How long `pmgr_abort` waits for the server to close the abort connection.
const ABORT_ACK_WAIT: Duration = Duration::from_secs(2);

/// Errors of the client library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("PMGR_COLLECTIVE: bad environment: {0}")]
    Env(String),
    #[error("PMGR_COLLECTIVE: pmgr_open has not been called (or the connection was closed)")]
    NotOpen,
    #[error("PMGR_COLLECTIVE: invalid argument: {0}")]
    InvalidArg(String),
    #[error("PMGR_COLLECTIVE: no server to connect to (MPIRUN_HOST/MPIRUN_PORT unset)")]
    NoServer,
    #[error("PMGR_COLLECTIVE: cannot connect to {addr} after {tries} attempts: {source}")]
    Connect { addr: String, tries: u32, source: std::io::Error },
    #[error("PMGR_COLLECTIVE: connection to the server failed: {0}")]
    Io(#[from] std::io::Error),
}

pub type Result<T> = std::result::Result<T, Error>;

/// Reduction for [`Pmgr::allreduce_int64`] (C `PMGR_SUM = 1`, `PMGR_MAX = 2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Max,
}

/// Where and who this task is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub rank: u32,
    pub nprocs: u32,
    pub id: i32,
    /// Server host and port (needed when `nprocs > 1`).
    pub server: Option<(String, u16)>,
    pub connect_tries: u32,
    pub connect_timeout: Duration,
    pub connect_backoff: Duration,
    pub connect_random: bool,
}

impl Config {
    /// A singleton task (rank 0 of 1) with a synthetic nonzero id.
    pub fn singleton() -> Config {
        let id = (seed() as i32 & 0x7fff_ffff).max(1);
        Config {
            rank: 0,
            nprocs: 1,
            id,
            server: None,
            connect_tries: 10,
            connect_timeout: Duration::from_secs(60),
            connect_backoff: Duration::from_secs(5),
            connect_random: true,
        }
    }

    /// Read the process environment.
    pub fn from_env() -> Result<Config> {
        Config::from_lookup(|k| std::env::var(k).ok())
    }

    /// Read the variables through `get` (for tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config> {
        let mut c = Config::singleton();
        let num = |k: &str| -> Result<Option<i64>> {
            match get(k) {
                None => Ok(None),
                Some(v) => v
                    .trim()
                    .parse::<i64>()
                    .map(Some)
                    .map_err(|_| Error::Env(format!("{k}={v:?} is not an integer"))),
            }
        };
        if let Some(t) = num("MPIRUN_CONNECT_TRIES")? {
            c.connect_tries = u32::try_from(t.max(1)).unwrap_or(u32::MAX);
        }
        if let Some(t) = num("MPIRUN_CONNECT_TIMEOUT")? {
            c.connect_timeout = Duration::from_secs(u64::try_from(t.max(1)).unwrap_or(1));
        }
        if let Some(t) = num("MPIRUN_CONNECT_BACKOFF")? {
            c.connect_backoff = Duration::from_secs(u64::try_from(t.max(0)).unwrap_or(0));
        }
        if let Some(t) = num("MPIRUN_CONNECT_RANDOM")? {
            c.connect_random = t != 0;
        }
        let Some(rank) = num("MPIRUN_RANK")? else { return Ok(c) };
        let need = |k: &str| num(k)?.ok_or_else(|| Error::Env(format!("{k} is not set")));
        let nprocs = need("MPIRUN_NPROCS")?;
        let id = need("MPIRUN_ID")?;
        c.nprocs = u32::try_from(nprocs)
            .ok()
            .filter(|&n| n > 0 && n <= i32::MAX as u32)
            .ok_or_else(|| Error::Env(format!("MPIRUN_NPROCS={nprocs} must be positive")))?;
        c.rank = u32::try_from(rank)
            .ok()
            .filter(|&r| r < c.nprocs)
            .ok_or_else(|| Error::Env(format!("MPIRUN_RANK={rank} not in 0..{}", c.nprocs)))?;
        c.id = i32::try_from(id).map_err(|_| Error::Env(format!("MPIRUN_ID={id} out of range")))?;
        if c.nprocs > 1 {
            let host = get("MPIRUN_HOST")
                .filter(|h| !h.is_empty())
                .ok_or_else(|| Error::Env("MPIRUN_HOST is not set".into()))?;
            let port = need("MPIRUN_PORT")?;
            let port = u16::try_from(port)
                .ok()
                .filter(|&p| p > 0)
                .ok_or_else(|| Error::Env(format!("MPIRUN_PORT={port} is not a port")))?;
            c.server = Some((host, port));
        } else if let (Some(h), Ok(Some(p))) = (get("MPIRUN_HOST"), num("MPIRUN_PORT")) {
            // N == 1 never connects for collectives, but pmgr_abort may still use it.
            if let Ok(p) = u16::try_from(p) {
                c.server = Some((h, p));
            }
        }
        Ok(c)
    }
}

fn seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    t ^ (u64::from(std::process::id()) << 32) ^ 0x9e37_79b9_7f4a_7c15
}

/// Connect with retries and growing (optionally randomised) sleeps.
fn connect(cfg: &Config) -> Result<TcpStream> {
    let (host, port) = cfg.server.as_ref().ok_or(Error::NoServer)?;
    let mut rng = seed() | 1;
    let mut delay = Duration::from_millis(10);
    let mut last = std::io::Error::other("no address");
    let tries = cfg.connect_tries.max(1);
    for attempt in 0..tries {
        match (host.as_str(), *port).to_socket_addrs() {
            Ok(addrs) => {
                let mut addrs: Vec<SocketAddr> = addrs.collect();
                addrs.sort_by_key(|a| !a.is_ipv4());
                for a in addrs {
                    match TcpStream::connect_timeout(&a, cfg.connect_timeout) {
                        Ok(s) => {
                            let _ = s.set_nodelay(true);
                            return Ok(s);
                        }
                        Err(e) => last = e,
                    }
                }
            }
            Err(e) => last = e,
        }
        if attempt + 1 < tries {
            let d = delay.min(cfg.connect_backoff);
            let d = if cfg.connect_random {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let half = d / 2;
                half + Duration::from_nanos(rng % (half.as_nanos() as u64 + 1))
            } else {
                d
            };
            std::thread::sleep(d);
            delay = delay.saturating_mul(2);
        }
    }
    Err(Error::Connect { addr: format!("{host}:{port}"), tries, source: last })
}

/// One task's PMGR state: `init` → `open` → collectives → `close` → `finalize`.
#[derive(Debug)]
pub struct Pmgr {
    cfg: Config,
    open: bool,
    conn: Option<TcpStream>,
}

impl Pmgr {
    /// `pmgr_init`: read the environment.
    pub fn init() -> Result<Pmgr> {
        Ok(Pmgr::with_config(Config::from_env()?))
    }

    pub fn with_config(cfg: Config) -> Pmgr {
        Pmgr { cfg, open: false, conn: None }
    }

    pub fn rank(&self) -> u32 {
        self.cfg.rank
    }

    pub fn nprocs(&self) -> u32 {
        self.cfg.nprocs
    }

    pub fn id(&self) -> i32 {
        self.cfg.id
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    pub fn is_open(&self) -> bool {
        self.open
    }

    fn single(&self) -> bool {
        self.cfg.nprocs <= 1
    }

    /// `pmgr_open`: connect to the server and hand-shake (nothing for a single task).
    pub fn open(&mut self) -> Result<()> {
        if self.open {
            return Ok(());
        }
        if !self.single() {
            let mut s = connect(&self.cfg)?;
            s.write_all(&encode_hello(self.cfg.rank as i32))?;
            self.conn = Some(s);
        }
        self.open = true;
        Ok(())
    }

    fn check_open(&self) -> Result<()> {
        if self.open {
            Ok(())
        } else {
            Err(Error::NotOpen)
        }
    }

    /// Send one request and read `reply.len()` bytes into `reply` (a broken connection is
    /// dropped: later calls fail with `NotOpen`).
    fn exchange(&mut self, header: &[i32], data: &[u8], reply: &mut [u8]) -> Result<()> {
        self.send(header, data)?;
        self.receive(reply)
    }

    /// The request: its header, then its payload as it is (no copy behind the header; a
    /// small one goes in the same write).
    fn send(&mut self, header: &[i32], data: &[u8]) -> Result<()> {
        let s = self.conn.as_mut().ok_or(Error::NotOpen)?;
        let mut head = Vec::with_capacity(4 * header.len());
        for &h in header {
            put_int(&mut head, h);
        }
        let r = if data.len() <= 4096 {
            head.extend_from_slice(data);
            s.write_all(&head)
        } else {
            s.write_all(&head).and_then(|()| s.write_all(data))
        };
        self.broken(r)
    }

    /// The reply: exactly `reply.len()` bytes.
    fn receive(&mut self, reply: &mut [u8]) -> Result<()> {
        let s = self.conn.as_mut().ok_or(Error::NotOpen)?;
        let r = s.read_exact(reply);
        self.broken(r)
    }

    fn broken(&mut self, r: std::io::Result<()>) -> Result<()> {
        if let Err(e) = r {
            self.conn = None;
            self.open = false;
            return Err(e.into());
        }
        Ok(())
    }

    fn check_root(&self, root: u32) -> Result<()> {
        if root < self.cfg.nprocs {
            Ok(())
        } else {
            Err(Error::InvalidArg(format!("root {root} not in 0..{}", self.cfg.nprocs)))
        }
    }

    fn size(&self, sz: usize) -> Result<i32> {
        let n = self.cfg.nprocs as usize;
        match (i32::try_from(sz), sz.checked_mul(n)) {
            (Ok(s), Some(t)) if s > 0 && t <= i32::MAX as usize => Ok(s),
            _ => Err(Error::InvalidArg(format!("size {sz} (x {n} ranks) out of range"))),
        }
    }

    fn total(&self, sz: usize) -> usize {
        sz * self.cfg.nprocs as usize // checked by size()
    }

    fn need(what: &str, have: usize, want: usize) -> Result<()> {
        if have < want {
            Err(Error::InvalidArg(format!("{what} holds {have} bytes, {want} needed")))
        } else {
            Ok(())
        }
    }

    /// `pmgr_barrier`.
    pub fn barrier(&mut self) -> Result<()> {
        self.check_open()?;
        if self.single() {
            return Ok(());
        }
        let mut r = [0u8; 4];
        self.exchange(&[opcode::BARRIER], &[], &mut r)
    }

    /// `pmgr_bcast`: the root's `buf` is copied into every rank's `buf` (same length).
    pub fn bcast(&mut self, buf: &mut [u8], root: u32) -> Result<()> {
        self.check_open()?;
        self.check_root(root)?;
        let sz = self.size(buf.len())?;
        if self.single() {
            return Ok(());
        }
        // The root's bytes go from `buf` and come back into it: no copy of them.
        let data = if self.cfg.rank == root { &buf[..] } else { &[][..] };
        self.send(&[opcode::BCAST, root as i32, sz], data)?;
        self.receive(buf)
    }

    /// `pmgr_gather`: the root's `recv` gets `N*send.len()` bytes in rank order; other
    /// ranks' `recv` is not touched (may be empty).
    pub fn gather(&mut self, send: &[u8], recv: &mut [u8], root: u32) -> Result<()> {
        self.check_open()?;
        self.check_root(root)?;
        let sz = self.size(send.len())?;
        let total = self.total(send.len());
        let me_root = self.cfg.rank == root;
        if me_root {
            Self::need("gather recv buffer", recv.len(), total)?;
        }
        if self.single() {
            recv[..send.len()].copy_from_slice(send);
            return Ok(());
        }
        let reply = if me_root { &mut recv[..total] } else { &mut [][..] };
        self.exchange(&[opcode::GATHER, root as i32, sz], send, reply)
    }

    /// `pmgr_scatter`: the root's `send` holds N blocks of `recv.len()` bytes; rank i gets
    /// block i in `recv`. Other ranks' `send` is ignored (may be empty).
    pub fn scatter(&mut self, send: &[u8], recv: &mut [u8], root: u32) -> Result<()> {
        self.check_open()?;
        self.check_root(root)?;
        let sz = self.size(recv.len())?;
        let total = self.total(recv.len());
        let me_root = self.cfg.rank == root;
        if me_root {
            Self::need("scatter send buffer", send.len(), total)?;
        }
        if self.single() {
            let n = recv.len();
            recv.copy_from_slice(&send[..n]);
            return Ok(());
        }
        let data = if me_root { &send[..total] } else { &[][..] };
        self.exchange(&[opcode::SCATTER, root as i32, sz], data, recv)
    }

    /// `pmgr_allgather`: every rank's `recv` gets `N*send.len()` bytes in rank order.
    pub fn allgather(&mut self, send: &[u8], recv: &mut [u8]) -> Result<()> {
        self.check_open()?;
        let sz = self.size(send.len())?;
        let total = self.total(send.len());
        Self::need("allgather recv buffer", recv.len(), total)?;
        if self.single() {
            recv[..send.len()].copy_from_slice(send);
            return Ok(());
        }
        self.exchange(&[opcode::ALLGATHER, sz], send, &mut recv[..total])
    }

    /// `pmgr_alltoall`: block j of `send` (each `sz` bytes, N blocks) goes to rank j; block i
    /// of `recv` came from rank i.
    pub fn alltoall(&mut self, send: &[u8], sz: usize, recv: &mut [u8]) -> Result<()> {
        self.check_open()?;
        let s = self.size(sz)?;
        let total = self.total(sz);
        Self::need("alltoall send buffer", send.len(), total)?;
        Self::need("alltoall recv buffer", recv.len(), total)?;
        if self.single() {
            recv[..sz].copy_from_slice(&send[..sz]);
            return Ok(());
        }
        self.exchange(&[opcode::ALLTOALL, s], &send[..total], &mut recv[..total])
    }

    /// libi's GATHERV (not pmgr_collective's): the root's `recv` gets every rank's `send`,
    /// whatever its length, in rank order: it must be exactly their sum (the caller learnt the
    /// lengths before). Other ranks' `recv` is not touched (may be empty).
    pub fn gatherv(&mut self, send: &[u8], recv: &mut [u8], root: u32) -> Result<()> {
        self.check_open()?;
        self.check_root(root)?;
        let len = i32::try_from(send.len())
            .map_err(|_| Error::InvalidArg(format!("size {} out of range", send.len())))?;
        if self.single() {
            Self::need("gatherv recv buffer", recv.len(), send.len())?;
            recv[..send.len()].copy_from_slice(send);
            return Ok(());
        }
        let reply = if self.cfg.rank == root { recv } else { &mut [][..] };
        self.exchange(&[opcode::GATHERV, root as i32, len], send, reply)
    }

    /// libi's SCATTERV: the root's `send` holds `counts[i]` bytes for rank i, in rank order;
    /// every rank's `recv` gets its block and must be exactly its length (the caller learnt
    /// it before). Other ranks' `send` and `counts` are ignored.
    pub fn scatterv(
        &mut self,
        send: &[u8],
        counts: &[usize],
        recv: &mut [u8],
        root: u32,
    ) -> Result<()> {
        self.check_open()?;
        self.check_root(root)?;
        let me_root = self.cfg.rank == root;
        let mut header = vec![opcode::SCATTERV, root as i32];
        let mut total = 0usize;
        if me_root {
            if counts.len() != self.cfg.nprocs as usize {
                let n = self.cfg.nprocs;
                return Err(Error::InvalidArg(format!("{} counts for {n} ranks", counts.len())));
            }
            for &c in counts {
                let c32 = i32::try_from(c)
                    .map_err(|_| Error::InvalidArg(format!("count {c} out of range")))?;
                header.push(c32);
                total = total.saturating_add(c);
            }
            Self::need("scatterv send buffer", send.len(), total)?;
        }
        if self.single() {
            Self::need("scatterv recv buffer", recv.len(), total)?;
            recv[..total].copy_from_slice(&send[..total]);
            return Ok(());
        }
        let data = if me_root { &send[..total] } else { &[][..] };
        self.exchange(&header, data, recv)
    }

    /// `pmgr_allreduce_int64t`: GATHER(root 0, 8) + BCAST(root 0, 8), as v1.0_7 does.
    pub fn allreduce_int64(&mut self, value: i64, op: ReduceOp) -> Result<i64> {
        self.check_open()?;
        if self.single() {
            return Ok(value);
        }
        let n = self.cfg.nprocs as usize;
        let mut all = if self.cfg.rank == 0 { vec![0u8; 8 * n] } else { Vec::new() };
        self.gather(&value.to_ne_bytes(), &mut all, 0)?;
        let mut res = [0u8; 8];
        if self.cfg.rank == 0 {
            let vals = all.chunks_exact(8).map(|c| {
                let mut b = [0u8; 8];
                b.copy_from_slice(c);
                i64::from_ne_bytes(b)
            });
            let r = match op {
                ReduceOp::Sum => vals.fold(0i64, i64::wrapping_add),
                ReduceOp::Max => vals.max().unwrap_or(value),
            };
            res = r.to_ne_bytes();
        }
        self.bcast(&mut res, 0)?;
        Ok(i64::from_ne_bytes(res))
    }

    /// `pmgr_allgatherstr`: every rank's string (without NUL; bytes after a NUL are dropped),
    /// in rank order. Wire: allreduce-MAX of the padded length, then ALLGATHER of that many
    /// bytes per rank.
    pub fn allgatherstr(&mut self, s: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.check_open()?;
        let s = &s[..s.iter().position(|&b| b == 0).unwrap_or(s.len())];
        let max = self.allreduce_int64(s.len() as i64 + 1, ReduceOp::Max)?;
        let max = usize::try_from(max)
            .ok()
            .filter(|&m| m > s.len())
            .ok_or_else(|| Error::InvalidArg(format!("bad maximum string length {max}")))?;
        self.size(max)?;
        let mut padded = s.to_vec();
        padded.resize(max, 0);
        let mut all = vec![0u8; self.total(max)];
        self.allgather(&padded, &mut all)?;
        Ok(all
            .chunks_exact(max)
            .map(|c| c[..c.iter().position(|&b| b == 0).unwrap_or(c.len())].to_vec())
            .collect())
    }

    /// `pmgr_aggregate`: the concatenation of every rank's bytes (in rank order here; the
    /// API promises no order). Wire: ALLGATHER of the 8-byte lengths, then ALLGATHER of the
    /// longest length with padding.
    pub fn aggregate(&mut self, send: &[u8]) -> Result<Vec<u8>> {
        self.check_open()?;
        if self.single() {
            return Ok(send.to_vec());
        }
        let n = self.cfg.nprocs as usize;
        let mut lens = vec![0u8; 8 * n];
        self.allgather(&(send.len() as u64).to_ne_bytes(), &mut lens)?;
        let lens: Vec<usize> = lens
            .chunks_exact(8)
            .map(|c| {
                let mut b = [0u8; 8];
                b.copy_from_slice(c);
                usize::try_from(u64::from_ne_bytes(b)).unwrap_or(usize::MAX)
            })
            .collect();
        let max = lens.iter().copied().max().unwrap_or(0);
        if max == 0 {
            return Ok(Vec::new());
        }
        self.size(max)?;
        let mut padded = send.to_vec();
        padded.resize(max, 0);
        let mut all = vec![0u8; self.total(max)];
        self.allgather(&padded, &mut all)?;
        let mut out = Vec::new();
        for (c, &l) in all.chunks_exact(max).zip(&lens) {
            out.extend_from_slice(&c[..l.min(max)]);
        }
        Ok(out)
    }

    /// `pmgr_abort`: send the abort record on a fresh connection (§3.6) and wait up to 2 s
    /// for the server to close it. The message is cut to 255 bytes (a `+` marks the cut).
    /// Errors if no server can be reached.
    pub fn abort(&self, code: i32, msg: &[u8]) -> Result<()> {
        let msg = &msg[..msg.iter().position(|&b| b == 0).unwrap_or(msg.len())];
        let mut m = msg.to_vec();
        if m.len() > 255 {
            m.truncate(254);
            m.push(b'+');
        }
        let mut cfg = self.cfg.clone();
        cfg.connect_tries = cfg.connect_tries.min(3);
        let mut s = connect(&cfg)?;
        s.write_all(&encode_abort_record(code, self.cfg.rank as i32, &m))?;
        let _ = s.shutdown(std::net::Shutdown::Write);
        // Wait (briefly) for the server to close the connection: a server that authenticates
        // a connection by the process at its other end (libi's NLA does) must find us alive.
        let _ = s.set_read_timeout(Some(ABORT_ACK_WAIT));
        let mut sink = [0u8; 64];
        while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
        Ok(())
    }

    /// `pmgr_close`: send CLOSE and drop the connection.
    pub fn close(&mut self) -> Result<()> {
        self.open = false;
        if let Some(mut s) = self.conn.take() {
            let mut msg = Vec::new();
            put_int(&mut msg, opcode::CLOSE);
            s.write_all(&msg)?;
            let _ = s.shutdown(std::net::Shutdown::Write);
        }
        Ok(())
    }

    /// `pmgr_finalize`: release everything (closes first if still open).
    pub fn finalize(mut self) -> Result<()> {
        if self.open {
            self.close()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(vars: &[(&str, &str)]) -> Result<Config> {
        let vars: Vec<(String, String)> =
            vars.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
        Config::from_lookup(|k| vars.iter().find(|(a, _)| a == k).map(|(_, b)| b.clone()))
    }

    #[test]
    fn env() {
        let c = cfg(&[]).unwrap();
        assert_eq!((c.rank, c.nprocs), (0, 1));
        assert!(c.id > 0);
        let c = cfg(&[
            ("MPIRUN_RANK", "2"),
            ("MPIRUN_NPROCS", "4"),
            ("MPIRUN_ID", "77"),
            ("MPIRUN_HOST", "127.0.0.1"),
            ("MPIRUN_PORT", "4000"),
            ("MPIRUN_CONNECT_TRIES", "3"),
        ])
        .unwrap();
        assert_eq!((c.rank, c.nprocs, c.id, c.connect_tries), (2, 4, 77, 3));
        assert_eq!(c.server, Some(("127.0.0.1".into(), 4000)));
        for bad in [
            vec![("MPIRUN_RANK", "4"), ("MPIRUN_NPROCS", "4"), ("MPIRUN_ID", "1")],
            vec![("MPIRUN_RANK", "0"), ("MPIRUN_NPROCS", "0"), ("MPIRUN_ID", "1")],
            vec![("MPIRUN_RANK", "x"), ("MPIRUN_NPROCS", "2"), ("MPIRUN_ID", "1")],
            vec![("MPIRUN_RANK", "0"), ("MPIRUN_NPROCS", "2"), ("MPIRUN_ID", "1")],
            vec![("MPIRUN_RANK", "0"), ("MPIRUN_ID", "1")],
        ] {
            assert!(cfg(&bad).is_err(), "{bad:?}");
        }
        let one = cfg(&[("MPIRUN_RANK", "0"), ("MPIRUN_NPROCS", "1"), ("MPIRUN_ID", "5")]);
        assert_eq!(one.unwrap().server, None);
    }

    #[test]
    fn singleton_local_copies() {
        let mut p = Pmgr::with_config(Config::singleton());
        assert!(matches!(p.barrier(), Err(Error::NotOpen)));
        p.open().unwrap();
        p.barrier().unwrap();
        let mut b = [1u8, 2];
        p.bcast(&mut b, 0).unwrap();
        let mut r = [0u8; 2];
        p.gather(&[5, 6], &mut r, 0).unwrap();
        assert_eq!(r, [5, 6]);
        p.scatter(&[7, 8], &mut r, 0).unwrap();
        assert_eq!(r, [7, 8]);
        p.allgather(&[1, 1], &mut r).unwrap();
        p.alltoall(&[3, 4], 2, &mut r).unwrap();
        assert_eq!(r, [3, 4]);
        assert_eq!(p.allreduce_int64(-4, ReduceOp::Max).unwrap(), -4);
        assert_eq!(p.allgatherstr(b"hi").unwrap(), vec![b"hi".to_vec()]);
        assert!(p.bcast(&mut [], 0).is_err());
        assert!(p.bcast(&mut b, 1).is_err());
        assert!(p.gather(&[1, 2], &mut [0u8; 1], 0).is_err());
        assert!(matches!(p.abort(-1, b"x"), Err(Error::NoServer)));
        p.close().unwrap();
        p.finalize().unwrap();
    }
}

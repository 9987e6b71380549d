//! A member of a session: rank, size, the collectives over the agent tree, and (for the
//! master, rank 0) user data to and from the front end.

use crate::fe::ProcEntry;
use crate::{frame, Code, Error, Result, MAX_MSG};
use pmgr::client::{Config, Pmgr};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The hello the master sends the front end: this, a space, the session's key. Version 2:
/// the master connects before the members' first barrier and sends `fe::READY` after it.
pub(crate) const HELLO: &str = "LIBI-MASTER/2";
/// Environment: the front end's address (`ip:port`) and the session's key (master only).
pub(crate) const ENV_FE: &str = "LIBI_FE_ADDR";
pub(crate) const ENV_KEY: &str = libi::job::SESSION_KEY_VAR;
/// Environment: set (to 1) for a session launched next to a job: the master gets the job's
/// process table from the front end in `LIBI_init` and shares it.
pub(crate) const ENV_PROCTAB: &str = "LIBI_PROCTAB";
/// The first line of the process table the front end sends an attach session's master.
pub(crate) const PROCTAB_MAGIC: &str = "LIBI-PROCTAB/1";

/// The master's connection to the front end, shared so that a send and a receive can run
/// in different threads (each direction serialized on its own).
pub struct FeLink {
    conn: TcpStream,
    send: Mutex<()>,
    recv: Mutex<()>,
}

impl FeLink {
    /// Send a message to the front end (whole: concurrent sends go one after the other).
    pub fn send(&self, data: &[u8]) -> Result<()> {
        if data.len() > MAX_MSG {
            return Err(Error::new(Code::EArg, format!("a message is at most {MAX_MSG} bytes")));
        }
        let _one = self.send.lock().unwrap_or_else(|e| e.into_inner());
        frame::write(&mut &self.conn, data).map_err(|e| io("sending to the front end", e))
    }

    /// The next message from the front end (`LIBI_ESESS` once it ended the session).
    pub fn recv(&self) -> Result<Vec<u8>> {
        let _one = self.recv.lock().unwrap_or_else(|e| e.into_inner());
        match frame::read(&mut &self.conn, MAX_MSG) {
            Ok(Some(d)) => Ok(d),
            Ok(None) => Err(Error::new(
                Code::ESess,
                "the front end ended the session (LIBI_fe_finalize or LIBI_fe_endSession)",
            )),
            Err(e) => Err(io("receiving from the front end", e)),
        }
    }
}

/// This process as a member of its session.
pub struct Member {
    pmgr: Pmgr,
    fe: Option<Arc<FeLink>>,
    /// This member's host, as the session's host list names it.
    host: String,
    /// The ranks of the job this session was launched next to that run on `host`.
    proctab: Vec<ProcEntry>,
}

fn io(what: &str, e: impl std::fmt::Display) -> Error {
    Error::new(Code::EIo, format!("{what}: {e}"))
}

impl Member {
    /// `LIBI_init`: join the session (every member must call it; it returns once every
    /// member did, and the master has told the front end so).
    ///
    /// The master connects to the front end first; a barrier (every member is in
    /// `LIBI_init`); the master tells the front end (`READY`); a second barrier, so that no
    /// member leaves `LIBI_init` before the front end can know the launch succeeded. A
    /// session launched next to a job also shares the job's process table (the master has
    /// it from the front end) and keeps each member's host's part.
    pub fn init() -> Result<Member> {
        let cfg = Config::from_env().map_err(|e| Error::new(Code::EInit, e.to_string()))?;
        if std::env::var_os("MPIRUN_RANK").is_none() || std::env::var_os(ENV_KEY).is_none() {
            return Err(Error::new(
                Code::EInit,
                "not a LIBI session member (start it with LIBI_fe_launch)",
            ));
        }
        let mut pmgr = Pmgr::with_config(cfg);
        pmgr.open().map_err(|e| io("joining the session", e))?;
        let host =
            std::env::var("PMI_HOSTNAME").ok().filter(|h| !h.is_empty()).unwrap_or_else(|| {
                nix::unistd::gethostname()
                    .map(|h| h.to_string_lossy().into_owned())
                    .unwrap_or_default()
            });
        let mut m = Member { pmgr, fe: None, host, proctab: Vec::new() };
        let with_table = std::env::var_os(ENV_PROCTAB).is_some_and(|v| v == "1");
        let mut table = Vec::new();
        if m.is_master() {
            let addr = std::env::var(ENV_FE)
                .map_err(|_| Error::new(Code::EInit, format!("{ENV_FE} is not set")))?;
            let key = std::env::var(ENV_KEY).unwrap_or_default();
            let mut s = TcpStream::connect(&addr)
                .map_err(|e| io(&format!("connecting to the front end at {addr}"), e))?;
            let _ = s.set_nodelay(true);
            frame::write(&mut s, format!("{HELLO} {key}").as_bytes())
                .map_err(|e| io("greeting the front end", e))?;
            if with_table {
                table = match frame::read(&mut s, MAX_MSG) {
                    Ok(Some(t)) => t,
                    Ok(None) => {
                        return Err(Error::new(Code::EIo, "the front end closed the connection"))
                    }
                    Err(e) => return Err(io("receiving the process table", e)),
                };
            }
            m.fe = Some(Arc::new(FeLink { conn: s, send: Mutex::new(()), recv: Mutex::new(()) }));
        }
        m.pmgr.barrier().map_err(|e| io("joining the session", e))?;
        if with_table {
            let mut len = (table.len() as u64).to_be_bytes();
            m.pmgr.bcast(&mut len, 0).map_err(|e| io("sharing the process table", e))?;
            let len = usize::try_from(u64::from_be_bytes(len)).unwrap_or(usize::MAX);
            if len > MAX_MSG {
                return Err(Error::new(Code::EIo, "the process table is too long"));
            }
            table.resize(len, 0);
            m.pmgr.bcast(&mut table, 0).map_err(|e| io("sharing the process table", e))?;
            let rank = m.rank() as usize;
            let (host, rows) = my_slice(&table, rank)?;
            if let Some(h) = host {
                m.host = h;
            }
            m.proctab = rows;
        }
        if let Some(l) = m.fe.as_ref() {
            frame::write(&mut &l.conn, crate::fe::READY)
                .map_err(|e| io("greeting the front end", e))?;
        }
        m.pmgr.barrier().map_err(|e| io("joining the session", e))?;
        Ok(m)
    }

    /// This member's host, as the session's host list names it (`PMI_HOSTNAME`).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The ranks of the job this session was launched next to (`LIBI_fe_attachAndLaunch`)
    /// that run on this member's host, in rank order; empty for other sessions.
    pub fn proctab(&self) -> &[ProcEntry] {
        &self.proctab
    }

    pub fn rank(&self) -> u32 {
        self.pmgr.rank()
    }

    pub fn size(&self) -> u32 {
        self.pmgr.nprocs()
    }

    pub fn is_master(&self) -> bool {
        self.pmgr.rank() == 0
    }

    pub fn barrier(&mut self) -> Result<()> {
        self.pmgr.barrier().map_err(|e| io("barrier", e))
    }

    /// The master's `buf` is copied into every member's `buf` (same length everywhere).
    pub fn broadcast(&mut self, buf: &mut [u8]) -> Result<()> {
        self.pmgr.bcast(buf, 0).map_err(|e| io("broadcast", e))
    }

    /// The master's `send` holds `size` blocks of `recv.len()` bytes; member i gets block i.
    /// Other members' `send` is ignored.
    pub fn scatter(&mut self, send: &[u8], recv: &mut [u8]) -> Result<()> {
        if self.is_master() && send.len() < recv.len() * self.size() as usize {
            return Err(Error::new(Code::EArg, "scatter: the send buffer is too short"));
        }
        self.pmgr.scatter(send, recv, 0).map_err(|e| io("scatter", e))
    }

    /// Every member's `send` (same length everywhere) lands in the master's `recv`, in rank
    /// order; other members' `recv` is not touched (may be empty).
    pub fn gather(&mut self, send: &[u8], recv: &mut [u8]) -> Result<()> {
        if self.is_master() && recv.len() < send.len() * self.size() as usize {
            return Err(Error::new(Code::EArg, "gather: the receive buffer is too short"));
        }
        self.pmgr.gather(send, recv, 0).map_err(|e| io("gather", e))
    }

    /// Master only: the connection to the front end (shared: `send` and `recv` may run in
    /// different threads, without this member's lock).
    pub fn fe_link(&self) -> Result<Arc<FeLink>> {
        self.fe.clone().ok_or_else(|| {
            Error::new(Code::ENotMaster, "only the master (rank 0) talks to the front end")
        })
    }

    /// Master only: send a message to the front end.
    pub fn send_usr_data(&mut self, data: &[u8]) -> Result<()> {
        self.fe_link()?.send(data)
    }

    /// Master only: the next message from the front end.
    pub fn recv_usr_data(&mut self) -> Result<Vec<u8>> {
        self.fe_link()?.recv()
    }

    /// `LIBI_finalize`: leave the session (after a last barrier, so that no member leaves
    /// while another still expects it in a collective).
    pub fn finalize(mut self) -> Result<()> {
        let r = self.pmgr.barrier().map_err(|e| io("finalize", e));
        if let Some(l) = self.fe.take() {
            let _ = l.conn.shutdown(std::net::Shutdown::Both);
        }
        let closed = self.pmgr.finalize().map_err(|e| io("finalize", e));
        r.and(closed)
    }

    /// How long a member may wait for the front end's message (no limit: the tool decides).
    pub fn set_recv_timeout(&mut self, t: Option<Duration>) -> Result<()> {
        let l = self.fe_link()?;
        l.conn.set_read_timeout(t).map_err(|e| io("setting the timeout", e))
    }
}

/// Member `rank`'s host and its part of the process table the front end sent (see
/// `fe::proctab_text`): the first line `LIBI-PROCTAB/1 N`, N lines of members' hosts, then
/// one line per rank of the job (`RANK HOST PID EXE`, escaped).
pub(crate) fn my_slice(table: &[u8], rank: usize) -> Result<(Option<String>, Vec<ProcEntry>)> {
    let bad = || Error::new(Code::EIo, "a malformed process table from the front end");
    let text = std::str::from_utf8(table).map_err(|_| bad())?;
    let mut lines = text.lines();
    let n: usize = lines
        .next()
        .and_then(|l| l.strip_prefix(PROCTAB_MAGIC)?.trim().parse().ok())
        .ok_or_else(bad)?;
    let mut host = None;
    for i in 0..n {
        let h = lines.next().ok_or_else(bad)?;
        if i == rank {
            host = Some(String::from_utf8_lossy(&libi::text::unescape(h)).into_owned());
        }
    }
    let Some(me) = host.clone() else { return Ok((None, Vec::new())) };
    let mut rows = Vec::new();
    for l in lines {
        let e = crate::fe::parse_row(l)?;
        if e.host == me {
            rows.push(e);
        }
    }
    Ok((host, rows))
}

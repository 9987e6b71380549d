//! A member of a session: rank, size, the collectives over the agent tree, and (for the
//! master, rank 0) user data to and from the front end.

use crate::fe::ProcEntry;
use crate::{frame, Code, Error, Result, MAX_COLL, MAX_MSG};
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
        self.pmgr.barrier().map_err(|e| coll_err("barrier", e))
    }

    // ---- collectives (docs/session.md, "Collectives"): every member calls each one with
    // the same sizes; a call over MAX_COLL, or with a bad argument, returns EArg on every
    // member before anything is sent (the checks see only what every member knows), and a
    // call of 0 bytes is a no-op.

    /// `per` bytes for each member: their total, or `EArg` when it is over [`MAX_COLL`].
    pub fn total(&self, call: &str, per: usize) -> Result<usize> {
        let n = self.size() as u64;
        let total = (per as u64).saturating_mul(n);
        if total > MAX_COLL as u64 {
            return Err(Error::new(
                Code::EArg,
                format!("{call}: {n} members x {per} bytes = {total} bytes, over {}", limit()),
            ));
        }
        Ok(total as usize)
    }

    /// The master's `buf` is copied into every member's `buf` (same length everywhere, at
    /// most [`MAX_COLL`]).
    pub fn broadcast(&mut self, buf: &mut [u8]) -> Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        check_len("broadcast", buf.len())?;
        self.pmgr.bcast(buf, 0).map_err(|e| coll_err("broadcast", e))
    }

    /// The master's `send` holds `size` blocks of `recv.len()` bytes; member i gets block i.
    /// Other members' `send` is ignored.
    pub fn scatter(&mut self, send: &[u8], recv: &mut [u8]) -> Result<()> {
        if recv.is_empty() {
            return Ok(());
        }
        let total = self.total("scatter", recv.len())?;
        if self.is_master() && send.len() < total {
            let m = format!("scatter: the send buffer holds {} bytes, {total} needed", send.len());
            return Err(Error::new(Code::EArg, m));
        }
        self.pmgr.scatter(send, recv, 0).map_err(|e| coll_err("scatter", e))
    }

    /// Every member's `send` (same length everywhere) lands in the master's `recv`, in rank
    /// order; other members' `recv` is not touched (may be empty).
    pub fn gather(&mut self, send: &[u8], recv: &mut [u8]) -> Result<()> {
        if send.is_empty() {
            return Ok(());
        }
        let total = self.total("gather", send.len())?;
        if self.is_master() && recv.len() < total {
            let m =
                format!("gather: the receive buffer holds {} bytes, {total} needed", recv.len());
            return Err(Error::new(Code::EArg, m));
        }
        self.pmgr.gather(send, recv, 0).map_err(|e| coll_err("gather", e))
    }

    /// Every member's `send` (same length everywhere) lands in every member's `recv`, in
    /// rank order (`size` × `send.len()` bytes).
    pub fn allgather(&mut self, send: &[u8], recv: &mut [u8]) -> Result<()> {
        if send.is_empty() {
            return Ok(());
        }
        let total = self.total("allgather", send.len())?;
        if recv.len() < total {
            let m =
                format!("allgather: the receive buffer holds {} bytes, {total} needed", recv.len());
            return Err(Error::new(Code::EArg, m));
        }
        self.pmgr.allgather(send, &mut recv[..total]).map_err(|e| coll_err("allgather", e))
    }

    /// Every member's `send` (any length, the sum at most [`MAX_COLL`]) reaches the master,
    /// in rank order, with each member's count; `None` on the other members.
    pub fn gatherv(&mut self, send: &[u8]) -> Result<Option<Gathered>> {
        self.gatherv_with(Ok(send), true)
    }

    /// [`Member::gatherv`] for a caller whose arguments may be unusable (the C API): `send`
    /// is this member's bytes or what is wrong with them; `can_receive` (the master's):
    /// whether it has a place for the result. A member with unusable arguments still takes
    /// part in the round that agrees on the sizes, so every member returns the same `EArg`
    /// and nothing is sent.
    ///
    /// Rounds: a gather of each member's count (or refusal), a broadcast of the master's
    /// verdict, then the bytes (libi's GATHERV).
    pub fn gatherv_with(
        &mut self,
        send: std::result::Result<&[u8], Refusal>,
        can_receive: bool,
    ) -> Result<Option<Gathered>> {
        let n = self.size() as usize;
        let mine = match send {
            Ok(b) => Verdict::Count(b.len() as u64),
            Err(r) => Verdict::Refused(r),
        };
        let mut all = if self.is_master() { vec![0u8; 16 * n] } else { Vec::new() };
        self.pmgr.gather(&mine.encode(), &mut all, 0).map_err(|e| coll_err("gatherv", e))?;
        let mut verdict = [0u8; 16];
        let mut counts = Vec::new();
        if self.is_master() {
            let v = (|| {
                let mut total = 0u64;
                for rec in all.chunks_exact(16) {
                    match Verdict::decode(rec) {
                        Verdict::Count(c) => {
                            counts.push(c as usize);
                            total = total.saturating_add(c);
                        }
                        refused => return refused,
                    }
                }
                if total > MAX_COLL as u64 {
                    Verdict::Refused(Refusal::Over { total })
                } else if !can_receive {
                    Verdict::Refused(Refusal::NoResult { member: 0 })
                } else {
                    Verdict::Count(total)
                }
            })();
            verdict = v.encode();
        }
        self.pmgr.bcast(&mut verdict, 0).map_err(|e| coll_err("gatherv", e))?;
        let total = match Verdict::decode(&verdict) {
            Verdict::Count(t) => t as usize,
            Verdict::Refused(r) => return Err(Error::new(Code::EArg, r.text("gatherv"))),
        };
        let mut data = if self.is_master() { vec![0u8; total] } else { Vec::new() };
        let send = match send {
            Ok(b) => b,
            Err(_) => &[],
        };
        self.pmgr.gatherv(send, &mut data, 0).map_err(|e| coll_err("gatherv", e))?;
        Ok(self.is_master().then_some(Gathered { data, counts }))
    }

    /// The master's `send` holds `counts[i]` bytes for member i, in rank order (the sum at
    /// most [`MAX_COLL`]); every member gets its bytes. Other members' `send` and `counts`
    /// are ignored.
    pub fn scatterv(&mut self, send: &[u8], counts: &[usize]) -> Result<Vec<u8>> {
        let n = self.size() as usize;
        let total = counts.iter().fold(0u64, |t, &c| t.saturating_add(c as u64));
        let send = if !self.is_master() {
            Ok((send, counts))
        } else if counts.len() != n {
            Err(Refusal::Counts { got: counts.len() as u64 })
        } else if total > MAX_COLL as u64 {
            Err(Refusal::Over { total })
        } else if (send.len() as u64) < total {
            Err(Refusal::NoBuffer { member: 0 })
        } else {
            Ok((send, counts))
        };
        self.scatterv_with(send, true)
    }

    /// [`Member::scatterv`] for a caller whose arguments may be unusable (the C API): the
    /// master's `send` is its bytes and counts (checked: [`check_counts`]) or what is wrong
    /// with them, and then every member returns the same `EArg`; `can_receive`: whether this
    /// member has a place for its bytes (if not, it takes part, drops them and returns
    /// `EArg`: the others are not affected).
    ///
    /// Rounds: a scatter of each member's count (or the master's refusal), then the bytes
    /// (libi's SCATTERV).
    pub fn scatterv_with(
        &mut self,
        send: std::result::Result<(&[u8], &[usize]), Refusal>,
        can_receive: bool,
    ) -> Result<Vec<u8>> {
        let n = self.size() as usize;
        let mut heads = Vec::new();
        if self.is_master() {
            for i in 0..n {
                let v = match send {
                    Ok((_, counts)) => Verdict::Count(counts.get(i).copied().unwrap_or(0) as u64),
                    Err(r) => Verdict::Refused(r),
                };
                heads.extend_from_slice(&v.encode());
            }
        }
        let mut mine = [0u8; 16];
        self.pmgr.scatter(&heads, &mut mine, 0).map_err(|e| coll_err("scatterv", e))?;
        let count = match Verdict::decode(&mine) {
            Verdict::Count(c) => c as usize,
            Verdict::Refused(r) => return Err(Error::new(Code::EArg, r.text("scatterv"))),
        };
        let mut data = vec![0u8; count];
        let (bytes, counts) = match send {
            Ok((b, c)) if self.is_master() => (b, c),
            _ => (&[][..], &[][..]),
        };
        self.pmgr.scatterv(bytes, counts, &mut data, 0).map_err(|e| coll_err("scatterv", e))?;
        if !can_receive {
            let member = self.rank();
            return Err(Error::new(Code::EArg, Refusal::NoResult { member }.text("scatterv")));
        }
        Ok(data)
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

/// What [`Member::gatherv`] gives the master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gathered {
    /// Every member's bytes, in rank order.
    pub data: Vec<u8>,
    /// Each member's count.
    pub counts: Vec<usize>,
}

/// Why a variable-size collective does not go ahead: every member returns `EArg` with
/// [`Refusal::text`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A negative count: member `member`'s own (gatherv) or the master's for it (scatterv).
    Negative { member: u32, count: i64 },
    /// Member `member` gave no buffer (NULL) for its bytes.
    NoBuffer { member: u32 },
    /// Member `member` gave no place (NULL) for the result.
    NoResult { member: u32 },
    /// The master gave no counts (NULL), or not one per member.
    Counts { got: u64 },
    /// More than [`MAX_COLL`] bytes in all.
    Over { total: u64 },
}

impl Refusal {
    /// The one-line message of call `call` ("gatherv", "scatterv").
    pub fn text(&self, call: &str) -> String {
        match *self {
            Refusal::Negative { member, count } if call == "scatterv" => {
                format!("{call}: the master's count for member {member} is negative ({count})")
            }
            Refusal::Negative { member, count } => {
                format!("{call}: member {member} gave a negative count ({count})")
            }
            Refusal::NoBuffer { member } => {
                format!("{call}: member {member} gave no buffer for its bytes (NULL)")
            }
            Refusal::NoResult { member } => {
                format!("{call}: member {member} gave no place for the result (NULL)")
            }
            Refusal::Counts { got } => {
                format!("{call}: the master gave {got} counts, one per member needed")
            }
            Refusal::Over { total } => format!("{call}: {total} bytes in all, over {}", limit()),
        }
    }
}

/// The master's counts for a scatterv (C ints, any sign): as sizes with their total, or why
/// they cannot be used.
pub fn check_counts(counts: &[i64]) -> std::result::Result<(Vec<usize>, usize), Refusal> {
    let mut total = 0u64;
    let mut out = Vec::with_capacity(counts.len());
    for (i, &c) in counts.iter().enumerate() {
        let Ok(u) = u64::try_from(c) else {
            return Err(Refusal::Negative { member: i as u32, count: c });
        };
        total = total.saturating_add(u);
        out.push(u as usize);
    }
    if total > MAX_COLL as u64 {
        return Err(Refusal::Over { total });
    }
    Ok((out, total as usize))
}

/// One member's record in the size rounds of gatherv/scatterv: 16 bytes, kind (u32), member
/// (u32), value (i64), little-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Count(u64),
    Refused(Refusal),
}

impl Verdict {
    fn encode(&self) -> [u8; 16] {
        let (kind, member, value): (u32, u32, i64) = match *self {
            Verdict::Count(c) => (0, 0, c as i64),
            Verdict::Refused(Refusal::Negative { member, count }) => (1, member, count),
            Verdict::Refused(Refusal::NoBuffer { member }) => (2, member, 0),
            Verdict::Refused(Refusal::NoResult { member }) => (3, member, 0),
            Verdict::Refused(Refusal::Counts { got }) => (4, 0, got as i64),
            Verdict::Refused(Refusal::Over { total }) => (5, 0, total as i64),
        };
        let mut b = [0u8; 16];
        b[..4].copy_from_slice(&kind.to_le_bytes());
        b[4..8].copy_from_slice(&member.to_le_bytes());
        b[8..].copy_from_slice(&value.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Verdict {
        let word = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        if b.len() < 16 {
            return Verdict::Refused(Refusal::Counts { got: 0 });
        }
        let (kind, member) = (word(0), word(4));
        let mut v = [0u8; 8];
        v.copy_from_slice(&b[8..16]);
        let value = i64::from_le_bytes(v);
        match kind {
            0 => Verdict::Count(value.max(0) as u64),
            1 => Verdict::Refused(Refusal::Negative { member, count: value }),
            2 => Verdict::Refused(Refusal::NoBuffer { member }),
            3 => Verdict::Refused(Refusal::NoResult { member }),
            4 => Verdict::Refused(Refusal::Counts { got: value.max(0) as u64 }),
            _ => Verdict::Refused(Refusal::Over { total: value.max(0) as u64 }),
        }
    }
}

/// "the limit of N bytes (256 MiB) for one collective".
fn limit() -> String {
    format!("the limit of {MAX_COLL} bytes ({} MiB) for one collective", MAX_COLL >> 20)
}

/// A payload of `len` bytes within [`MAX_COLL`], or `EArg`.
pub fn check_len(call: &str, len: usize) -> Result<()> {
    if len > MAX_COLL {
        return Err(Error::new(Code::EArg, format!("{call}: {len} bytes, over {}", limit())));
    }
    Ok(())
}

/// A failed collective, in the session's words (the PMGR client's are not the user's).
fn coll_err(call: &str, e: pmgr::client::Error) -> Error {
    use pmgr::client::Error as P;
    match e {
        P::InvalidArg(m) => Error::new(Code::EArg, format!("{call}: {m}")),
        P::NotOpen => Error::new(
            Code::EIo,
            format!("{call}: the connection to this node's agent was lost by an earlier call"),
        ),
        P::Io(e) => Error::new(
            Code::EIo,
            format!("{call}: the connection to this node's agent failed: {e}"),
        ),
        P::Env(m) => Error::new(Code::EInit, format!("{call}: bad session environment: {m}")),
        P::NoServer | P::Connect { .. } => {
            Error::new(Code::EIo, format!("{call}: cannot reach this node's agent"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_roundtrip() {
        for v in [
            Verdict::Count(0),
            Verdict::Count(MAX_COLL as u64),
            Verdict::Refused(Refusal::Negative { member: 3, count: -7 }),
            Verdict::Refused(Refusal::NoBuffer { member: 1 }),
            Verdict::Refused(Refusal::NoResult { member: 0 }),
            Verdict::Refused(Refusal::Counts { got: 2 }),
            Verdict::Refused(Refusal::Over { total: 1 << 40 }),
        ] {
            assert_eq!(Verdict::decode(&v.encode()), v);
        }
    }

    #[test]
    fn counts_and_texts() {
        assert_eq!(check_counts(&[1, 0, 5]), Ok((vec![1, 0, 5], 6)));
        assert_eq!(check_counts(&[1, -2]), Err(Refusal::Negative { member: 1, count: -2 }));
        let over = check_counts(&[i32::MAX as i64; 2]);
        assert_eq!(over, Err(Refusal::Over { total: 2 * i32::MAX as u64 }));
        assert_eq!(
            Refusal::Over { total: 300 << 20 }.text("gatherv"),
            "gatherv: 314572800 bytes in all, over the limit of 268435456 bytes (256 MiB) for \
             one collective"
        );
        assert!(!coll_err("gather", pmgr::client::Error::InvalidArg("x".into()))
            .message
            .contains("PMGR"));
        assert_eq!(check_len("broadcast", MAX_COLL), Ok(()));
        assert_eq!(check_len("broadcast", MAX_COLL + 1).map_err(|e| e.code), Err(Code::EArg));
    }
}

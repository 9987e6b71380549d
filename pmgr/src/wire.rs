//! PMGR_COLLECTIVE protocol version 8: per-connection server state machine over bytes (no I/O).
//!
//! Spec: `docs/spec/pmgr-wire.md` §3. Every integer is a native-endian 4-byte C `int`.
//!
//! # Usage (driver side)
//!
//! ```text
//! conn = ServerConn::new(nprocs)
//! on bytes:  conn.feed(&bytes, &mut events)      // Hello, Packet, Close, Abort, Error
//! on EOF:    conn.eof(&mut events)
//! on Packet: hand it to the collective engine; when the collective completed and the reply
//!            (if any) was written, call conn.op_done(&mut events) to parse the next packet.
//! read only while conn.wants_read() (bounded buffering / TCP back-pressure).
//! ```
//!
//! # Decisions
//!
//! * One collective in flight per connection: after a [`ConnEvent::Packet`] the connection
//!   parses nothing more until [`ServerConn::op_done`]. A client that is not answered (a
//!   GATHER non-root) may already send its next packet; those bytes stay buffered (at most
//!   [`PIPELINE_SLACK`] bytes beyond one packet, see [`ServerConn::wants_read`]).
//! * `OPEN` (opcode 0, `op, rank`) is documented as unused by the reference; it is consumed
//!   and ignored (no event, no reply).
//! * `CLOSE` emits [`ConnEvent::Close`]; bytes after it are an error. `ABORT` (opcode 2)
//!   emits [`ConnEvent::Abort`]; later input is ignored. After an `Error` all input is
//!   ignored (the connection is dead).
//! * Sizes: a negative size or root outside `0..nprocs` is an error; a per-rank size of 0 is
//!   accepted (v1.0_7 clients never send it). Any single packet's payload and any reply
//!   must stay within the connection's byte limit (default [`DEFAULT_MAX_BYTES`], never above
//!   `i32::MAX`, since clients compute `N*sz` in `int`): for BCAST that is `sz` (what every
//!   rank gets), for the others `N*sz` (what the root sends or gets, or every rank gets).
//! * Payloads are not copied once parsed: a packet's `data` is a slice of what was read.
//! * Two opcodes are libi's own, for LIBI's variable-size collectives (libi's client sends
//!   them, pmgr_collective's never does): `GATHERV` (`op, root, len`, then `len` bytes; the
//!   root gets every rank's bytes in rank order) and `SCATTERV` (`op, root`; the root adds
//!   `N` counts, then their sum in bytes; rank i gets count i bytes).
//! * The listening port also receives abort records (§3.6), whose first int may look like
//!   version 8. [`ServerConn::could_be_abort`] / [`ServerConn::into_abort`] let the driver
//!   re-read such a connection as an [`AbortConn`] (e.g. on a second `Hello` for a rank that
//!   already has a connection, or an `Error` before the first packet).

use bytes::{Buf, Bytes, BytesMut};
use serde::{Deserialize, Serialize};

/// Protocol version sent by v8 clients (`PMGR_COLLECTIVE`).
pub const PMGR_COLLECTIVE: i32 = 8;

/// Opcodes (§3.3).
pub mod opcode {
    pub const OPEN: i32 = 0;
    pub const CLOSE: i32 = 1;
    pub const ABORT: i32 = 2;
    pub const BARRIER: i32 = 3;
    pub const BCAST: i32 = 4;
    pub const GATHER: i32 = 5;
    pub const SCATTER: i32 = 6;
    pub const ALLGATHER: i32 = 7;
    pub const ALLTOALL: i32 = 8;
    /// libi's: a gather of a different size per rank (LIBI's `gatherv`).
    pub const GATHERV: i32 = 64;
    /// libi's: a scatter of a different size per rank (LIBI's `scatterv`).
    pub const SCATTERV: i32 = 65;
}

/// Default limit on one packet's payload and on one reply (256 MiB).
pub const DEFAULT_MAX_BYTES: usize = 256 << 20;
/// Largest limit a connection accepts (clients compute sizes in C `int`).
pub const MAX_BYTES_CAP: usize = i32::MAX as usize;
/// Bytes a connection buffers beyond the packet it is parsing while a collective is in flight.
pub const PIPELINE_SLACK: usize = 64 << 10;
/// Longest abort message kept (longer ones are cut, marked with `+`).
pub const ABORT_MSG_KEEP: usize = 1024;
/// Largest abort message length field accepted as such.
pub const ABORT_MSG_MAX: usize = 64 << 10;

/// A PMGR operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Op {
    Close,
    Abort,
    Barrier,
    Bcast,
    Gather,
    Scatter,
    Allgather,
    Alltoall,
    Gatherv,
    Scatterv,
}

impl Op {
    /// The wire opcode.
    pub fn code(self) -> i32 {
        match self {
            Op::Close => opcode::CLOSE,
            Op::Abort => opcode::ABORT,
            Op::Barrier => opcode::BARRIER,
            Op::Bcast => opcode::BCAST,
            Op::Gather => opcode::GATHER,
            Op::Scatter => opcode::SCATTER,
            Op::Allgather => opcode::ALLGATHER,
            Op::Alltoall => opcode::ALLTOALL,
            Op::Gatherv => opcode::GATHERV,
            Op::Scatterv => opcode::SCATTERV,
        }
    }

    /// Name as in the C constants, without the `PMGR_` prefix.
    pub fn name(self) -> &'static str {
        match self {
            Op::Close => "CLOSE",
            Op::Abort => "ABORT",
            Op::Barrier => "BARRIER",
            Op::Bcast => "BCAST",
            Op::Gather => "GATHER",
            Op::Scatter => "SCATTER",
            Op::Allgather => "ALLGATHER",
            Op::Alltoall => "ALLTOALL",
            Op::Gatherv => "GATHERV",
            Op::Scatterv => "SCATTERV",
        }
    }

    /// Whether the op carries a root rank.
    pub fn has_root(self) -> bool {
        matches!(self, Op::Bcast | Op::Gather | Op::Scatter | Op::Gatherv | Op::Scatterv)
    }

    /// Whether the op carries a per-rank size.
    pub fn has_size(self) -> bool {
        matches!(self, Op::Bcast | Op::Gather | Op::Scatter | Op::Allgather | Op::Alltoall)
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One client → server packet. `data` is what this rank sent: `sz` bytes for GATHER and
/// ALLGATHER, `N*sz` for ALLTOALL, `sz` (BCAST) or `N*sz` (SCATTER) at the root and empty
/// elsewhere; GATHERV: this rank's bytes; SCATTERV: at the root, `counts` (one per rank) and
/// their sum in bytes, elsewhere nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Packet {
    Close,
    Abort { code: i32 },
    Barrier,
    Bcast { root: u32, sz: u32, data: Bytes },
    Gather { root: u32, sz: u32, data: Bytes },
    Scatter { root: u32, sz: u32, data: Bytes },
    Allgather { sz: u32, data: Bytes },
    Alltoall { sz: u32, data: Bytes },
    Gatherv { root: u32, data: Bytes },
    Scatterv { root: u32, counts: Vec<u32>, data: Bytes },
}

impl Packet {
    pub fn op(&self) -> Op {
        match self {
            Packet::Close => Op::Close,
            Packet::Abort { .. } => Op::Abort,
            Packet::Barrier => Op::Barrier,
            Packet::Bcast { .. } => Op::Bcast,
            Packet::Gather { .. } => Op::Gather,
            Packet::Scatter { .. } => Op::Scatter,
            Packet::Allgather { .. } => Op::Allgather,
            Packet::Alltoall { .. } => Op::Alltoall,
            Packet::Gatherv { .. } => Op::Gatherv,
            Packet::Scatterv { .. } => Op::Scatterv,
        }
    }

    /// Root rank (0 for ops without one).
    pub fn root(&self) -> u32 {
        match self {
            Packet::Bcast { root, .. }
            | Packet::Gather { root, .. }
            | Packet::Scatter { root, .. }
            | Packet::Gatherv { root, .. }
            | Packet::Scatterv { root, .. } => *root,
            _ => 0,
        }
    }

    /// Per-rank size (0 for ops without one).
    pub fn sz(&self) -> u32 {
        match self {
            Packet::Bcast { sz, .. }
            | Packet::Gather { sz, .. }
            | Packet::Scatter { sz, .. }
            | Packet::Allgather { sz, .. }
            | Packet::Alltoall { sz, .. } => *sz,
            _ => 0,
        }
    }

    pub fn data(&self) -> &[u8] {
        match self {
            Packet::Bcast { data, .. }
            | Packet::Gather { data, .. }
            | Packet::Scatter { data, .. }
            | Packet::Allgather { data, .. }
            | Packet::Alltoall { data, .. }
            | Packet::Gatherv { data, .. }
            | Packet::Scatterv { data, .. } => data,
            _ => &[],
        }
    }

    /// The payload's place, for ops that have one.
    fn data_mut(&mut self) -> Option<&mut Bytes> {
        match self {
            Packet::Bcast { data, .. }
            | Packet::Gather { data, .. }
            | Packet::Scatter { data, .. }
            | Packet::Allgather { data, .. }
            | Packet::Alltoall { data, .. }
            | Packet::Gatherv { data, .. }
            | Packet::Scatterv { data, .. } => Some(data),
            _ => None,
        }
    }

    pub fn into_data(mut self) -> Bytes {
        self.data_mut().map(std::mem::take).unwrap_or_default()
    }

    /// The same packet carrying `data` instead (for ops with a payload).
    fn with_data(mut self, new: Bytes) -> Packet {
        if let Some(d) = self.data_mut() {
            *d = new;
        }
        self
    }

    /// Client → server bytes of this packet (the client library and tests use this).
    /// Sizes/roots beyond `i32::MAX` are the caller's bug; they are clamped, never panic.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(12 + self.data().len());
        put_int(&mut v, self.op().code());
        match self {
            Packet::Close | Packet::Barrier => {}
            Packet::Abort { code } => put_int(&mut v, *code),
            Packet::Bcast { root, sz, data }
            | Packet::Gather { root, sz, data }
            | Packet::Scatter { root, sz, data } => {
                put_int(&mut v, clamp(*root));
                put_int(&mut v, clamp(*sz));
                v.extend_from_slice(data);
            }
            Packet::Allgather { sz, data } | Packet::Alltoall { sz, data } => {
                put_int(&mut v, clamp(*sz));
                v.extend_from_slice(data);
            }
            Packet::Gatherv { root, data } => {
                put_int(&mut v, clamp(*root));
                put_int(&mut v, i32::try_from(data.len()).unwrap_or(i32::MAX));
                v.extend_from_slice(data);
            }
            Packet::Scatterv { root, counts, data } => {
                put_int(&mut v, clamp(*root));
                for &c in counts {
                    put_int(&mut v, clamp(c));
                }
                v.extend_from_slice(data);
            }
        }
        v
    }
}

fn clamp(x: u32) -> i32 {
    i32::try_from(x).unwrap_or(i32::MAX)
}

/// Append a native-endian C `int`.
pub fn put_int(v: &mut Vec<u8>, x: i32) {
    v.extend_from_slice(&x.to_ne_bytes());
}

/// Read a native-endian C `int` at `at`, if there are 4 bytes.
pub fn get_int(b: &[u8], at: usize) -> Option<i32> {
    let s = b.get(at..at.checked_add(4)?)?;
    let a: [u8; 4] = s.try_into().ok()?;
    Some(i32::from_ne_bytes(a))
}

/// The 8-byte v8 handshake a client sends after connecting.
pub fn encode_hello(rank: i32) -> Vec<u8> {
    let mut v = Vec::with_capacity(8);
    put_int(&mut v, PMGR_COLLECTIVE);
    put_int(&mut v, rank);
    v
}

/// The abort record a client sends on a fresh connection (§3.6): code, rank, len, message
/// with its NUL (`len` = message bytes + 1).
pub fn encode_abort_record(code: i32, rank: i32, msg: &[u8]) -> Vec<u8> {
    let msg = &msg[..msg.iter().position(|&b| b == 0).unwrap_or(msg.len())];
    let msg = &msg[..msg.len().min(ABORT_MSG_MAX - 1)];
    let mut v = Vec::with_capacity(13 + msg.len());
    put_int(&mut v, code);
    put_int(&mut v, rank);
    put_int(&mut v, clamp(msg.len() as u32 + 1));
    v.extend_from_slice(msg);
    v.push(0);
    v
}

/// Reply to BARRIER: one int, the opcode echoed (clients ignore its value).
pub fn reply_barrier() -> Vec<u8> {
    opcode::BARRIER.to_ne_bytes().to_vec()
}

/// Reply to BCAST, for every rank including the root: the root's `sz` bytes.
pub fn reply_bcast(data: &[u8]) -> Vec<u8> {
    data.to_vec()
}

/// Reply to GATHER, for the root only: `N*sz` bytes in rank order.
pub fn reply_gather(all: &[u8]) -> Vec<u8> {
    all.to_vec()
}

/// Reply to SCATTER, for every rank: its own `sz` block.
pub fn reply_scatter(block: &[u8]) -> Vec<u8> {
    block.to_vec()
}

/// Reply to ALLGATHER, for every rank: `N*sz` bytes in rank order.
pub fn reply_allgather(all: &[u8]) -> Vec<u8> {
    all.to_vec()
}

/// Reply to ALLTOALL for one rank: `N*sz` bytes, block s from rank s.
pub fn reply_alltoall(blocks: &[u8]) -> Vec<u8> {
    blocks.to_vec()
}

/// What a connection reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnEvent {
    /// Handshake done: version is always [`PMGR_COLLECTIVE`], rank is in `0..nprocs`.
    Hello { version: i32, rank: u32 },
    /// A collective (BARRIER..ALLTOALL; never `Close`/`Abort`, which have their own events).
    /// Nothing more is parsed until [`ServerConn::op_done`].
    Packet(Packet),
    /// `PMGR_CLOSE`: the rank is done; the server closes the connection.
    Close,
    /// `PMGR_ABORT` on the collective connection.
    Abort { code: i32 },
    /// Protocol violation; the connection is dead (the job should fail).
    Error(String),
}

impl ConnEvent {
    /// The packet the collective engine takes for this event (`Close` and `Abort` included).
    pub fn to_packet(&self) -> Option<Packet> {
        match self {
            ConnEvent::Packet(p) => Some(p.clone()),
            ConnEvent::Close => Some(Packet::Close),
            ConnEvent::Abort { code } => Some(Packet::Abort { code: *code }),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Handshake,
    Ready,
    Waiting,
    Closed,
    Aborted,
    Failed,
}

/// Server side of one rank's v8 collective connection.
#[derive(Debug)]
pub struct ServerConn {
    nprocs: u32,
    max_bytes: usize,
    rank: Option<u32>,
    state: State,
    /// Unparsed input (a packet's payload is split off it, not copied).
    buf: BytesMut,
    /// Handshake bytes consumed (kept for [`ServerConn::into_abort`]).
    prefix: Vec<u8>,
    /// Any Packet/Close/Abort emitted yet.
    spoke: bool,
    /// The peer closed its end (while a collective was in flight: handled at `op_done`).
    eof: bool,
}

impl ServerConn {
    /// A connection for a job of `nprocs` ranks with the default byte limit.
    pub fn new(nprocs: u32) -> ServerConn {
        ServerConn::with_max_bytes(nprocs, DEFAULT_MAX_BYTES)
    }

    /// As [`ServerConn::new`], with a limit on one packet's payload and on one reply
    /// (clamped to [`MAX_BYTES_CAP`]).
    pub fn with_max_bytes(nprocs: u32, max_bytes: usize) -> ServerConn {
        ServerConn {
            nprocs,
            max_bytes: max_bytes.min(MAX_BYTES_CAP),
            rank: None,
            state: State::Handshake,
            buf: BytesMut::new(),
            prefix: Vec::new(),
            spoke: false,
            eof: false,
        }
    }

    /// The rank, once the handshake is done.
    pub fn rank(&self) -> Option<u32> {
        self.rank
    }

    /// A collective packet was emitted and [`ServerConn::op_done`] not yet called.
    pub fn in_collective(&self) -> bool {
        self.state == State::Waiting
    }

    /// Closed by `CLOSE`, aborted, or failed: no more events will come.
    pub fn is_finished(&self) -> bool {
        matches!(self.state, State::Closed | State::Aborted | State::Failed)
    }

    /// Whether the driver should read more input now. False while a collective is in flight
    /// and [`PIPELINE_SLACK`] bytes are already buffered, and once the connection is dead.
    pub fn wants_read(&self) -> bool {
        match self.state {
            State::Handshake | State::Ready | State::Closed => true,
            State::Waiting => self.buf.len() < PIPELINE_SLACK,
            State::Aborted | State::Failed => false,
        }
    }

    /// Bytes buffered and not yet parsed.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// True until the first Packet/Close/Abort: the connection might be an abort record
    /// (§3.6, spec §8.4) and can be re-read with [`ServerConn::into_abort`].
    pub fn could_be_abort(&self) -> bool {
        !self.spoke
    }

    /// Re-read everything this connection received as an abort record.
    pub fn into_abort(self, out: &mut Vec<AbortEvent>) -> AbortConn {
        let mut a = AbortConn::new();
        let mut all = self.prefix;
        all.extend_from_slice(&self.buf);
        a.feed(&all, out);
        a
    }

    fn fail(&mut self, msg: String, out: &mut Vec<ConnEvent>) {
        self.state = State::Failed;
        self.buf = BytesMut::new();
        out.push(ConnEvent::Error(msg));
    }

    fn who(&self) -> String {
        match self.rank {
            Some(r) => format!("rank {r}"),
            None => "unidentified connection".to_string(),
        }
    }

    /// Feed bytes read from the socket.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<ConnEvent>) {
        match self.state {
            State::Aborted | State::Failed => return,
            State::Closed => {
                if !bytes.is_empty() {
                    let m = format!("{}: {} bytes after PMGR_CLOSE", self.who(), bytes.len());
                    self.fail(m, out);
                }
                return;
            }
            _ => {}
        }
        // One packet (header, SCATTERV's counts, payload) plus slack for a driver that reads
        // in chunks and for pipelined packets of a client that is not answered.
        let hard_cap = self
            .max_bytes
            .saturating_add(16 + 4 * self.nprocs as usize)
            .saturating_add(2 * PIPELINE_SLACK);
        if self.buf.len().saturating_add(bytes.len()) > hard_cap {
            let m = format!(
                "{}: more than {} bytes of unprocessed input (client ignores the protocol)",
                self.who(),
                hard_cap
            );
            self.fail(m, out);
            return;
        }
        self.buf.extend_from_slice(bytes);
        self.parse(out);
    }

    /// The peer closed its end. While a collective is in flight the bytes it sent after that
    /// packet (its next requests, typically `CLOSE`) are only parsed once the collective is
    /// done, so the EOF is judged then (in [`ServerConn::op_done`]): a client may send its
    /// non-root GATHER and its CLOSE and exit before the other ranks arrive.
    pub fn eof(&mut self, out: &mut Vec<ConnEvent>) {
        self.eof = true;
        match self.state {
            State::Closed | State::Aborted | State::Failed | State::Waiting => {}
            State::Handshake => {
                let m =
                    format!("connection closed during the handshake ({} bytes)", self.buf.len());
                self.fail(m, out);
            }
            State::Ready => {
                let m = if self.buf.is_empty() {
                    format!("{} closed its connection without PMGR_CLOSE", self.who())
                } else {
                    format!(
                        "{} closed its connection in the middle of a packet ({} bytes)",
                        self.who(),
                        self.buf.len()
                    )
                };
                // A rank that sent its packet and then died: the collective cannot finish.
                self.fail(m, out);
            }
        }
    }

    /// Has the peer closed its end?
    pub fn at_eof(&self) -> bool {
        self.eof
    }

    /// Did the client send `CLOSE`: parsed already, or (while a collective is in flight)
    /// waiting in the buffer as the last of complete packets?
    pub fn sent_close(&self) -> bool {
        match self.state {
            State::Closed => true,
            State::Waiting => {
                let mut at = 0;
                while at < self.buf.len() {
                    match self.parse_packet_in(&self.buf[at..]) {
                        Ok(Parsed::Packet { ev: Some(ConnEvent::Close), used, .. }) => {
                            return at + used == self.buf.len()
                        }
                        Ok(Parsed::Packet { used, .. }) => at += used,
                        Ok(Parsed::More(_)) | Err(_) => return false,
                    }
                }
                false
            }
            _ => false,
        }
    }

    /// The collective of the last [`ConnEvent::Packet`] is complete (its reply, if any, has
    /// been queued): parse what the client sent meanwhile.
    pub fn op_done(&mut self, out: &mut Vec<ConnEvent>) {
        if self.state == State::Waiting {
            self.state = State::Ready;
            self.parse(out);
            if self.eof {
                self.eof(out);
            }
        }
    }

    fn parse(&mut self, out: &mut Vec<ConnEvent>) {
        loop {
            match self.state {
                State::Handshake => {
                    let Some(version) = get_int(&self.buf, 0) else { return };
                    if version != PMGR_COLLECTIVE {
                        let m = format!(
                            "unsupported PMGR protocol version {version} (only {PMGR_COLLECTIVE} is spoken)"
                        );
                        self.fail_keep(m, out);
                        return;
                    }
                    let Some(rank) = get_int(&self.buf, 4) else { return };
                    match u32::try_from(rank) {
                        Ok(r) if r < self.nprocs => {
                            self.prefix.extend_from_slice(&self.buf[..8]);
                            self.buf.advance(8);
                            self.rank = Some(r);
                            self.state = State::Ready;
                            out.push(ConnEvent::Hello { version, rank: r });
                        }
                        _ => {
                            let m = format!(
                                "PMGR handshake with rank {rank} out of range (job has {} ranks)",
                                self.nprocs
                            );
                            self.fail_keep(m, out);
                            return;
                        }
                    }
                }
                State::Ready => match self.parse_packet_in(&self.buf) {
                    Ok(Parsed::More(total)) => {
                        // Room for the whole packet at once, not by doubling as it comes.
                        if let Some(t) = total {
                            self.buf.reserve(t.saturating_sub(self.buf.len()));
                        }
                        return;
                    }
                    Ok(Parsed::Packet { ev, used, head }) => {
                        let mut packet = self.buf.split_to(used);
                        let data = packet.split_off(head.min(used)).freeze();
                        let ev = match ev {
                            Some(ConnEvent::Packet(p)) => {
                                Some(ConnEvent::Packet(p.with_data(data)))
                            }
                            ev => ev,
                        };
                        match ev {
                            None => {}
                            Some(ConnEvent::Close) => {
                                self.spoke = true;
                                self.state = State::Closed;
                                out.push(ConnEvent::Close);
                                if !self.buf.is_empty() {
                                    let m = format!(
                                        "{}: {} bytes after PMGR_CLOSE",
                                        self.who(),
                                        self.buf.len()
                                    );
                                    self.fail(m, out);
                                }
                                return;
                            }
                            Some(ev @ ConnEvent::Abort { .. }) => {
                                self.spoke = true;
                                self.state = State::Aborted;
                                self.buf = BytesMut::new();
                                out.push(ev);
                                return;
                            }
                            Some(ev) => {
                                self.spoke = true;
                                self.state = State::Waiting;
                                out.push(ev);
                            }
                        }
                    }
                    Err(m) => {
                        let m = format!("{}: {m}", self.who());
                        if self.spoke {
                            self.fail(m, out);
                        } else {
                            self.fail_keep(m, out);
                        }
                        return;
                    }
                },
                State::Waiting | State::Closed | State::Aborted | State::Failed => return,
            }
        }
    }

    /// Fail but keep the input (for [`ServerConn::into_abort`]).
    fn fail_keep(&mut self, msg: String, out: &mut Vec<ConnEvent>) {
        self.state = State::Failed;
        out.push(ConnEvent::Error(msg));
    }

    fn size(&self, sz: i32, what: &str) -> Result<u32, String> {
        let sz = u32::try_from(sz).map_err(|_| format!("{what}: negative size {sz}"))?;
        if sz as usize > self.max_bytes {
            return Err(format!("{what}: size {sz} exceeds the limit of {} bytes", self.max_bytes));
        }
        Ok(sz)
    }

    /// `N*sz` within the limit.
    fn times_n(&self, sz: u32, what: &str) -> Result<usize, String> {
        (sz as usize).checked_mul(self.nprocs as usize).filter(|&t| t <= self.max_bytes).ok_or_else(
            || {
                format!(
                    "{what}: {} ranks x {sz} bytes exceeds the limit of {} bytes",
                    self.nprocs, self.max_bytes
                )
            },
        )
    }

    fn root(&self, root: i32, what: &str) -> Result<u32, String> {
        match u32::try_from(root) {
            Ok(r) if r < self.nprocs => Ok(r),
            _ => Err(format!("{what}: root {root} out of range (job has {} ranks)", self.nprocs)),
        }
    }

    /// One packet from the front of `buf`: its event (payload still empty: `buf[head..used]`
    /// is the payload), or how many bytes it needs; the event `None` = consumed silently
    /// (OPEN).
    fn parse_packet_in(&self, buf: &[u8]) -> Result<Parsed, String> {
        let more = |total: usize| Ok(Parsed::More(Some(total)));
        let Some(op) = get_int(buf, 0) else { return Ok(Parsed::More(None)) };
        let me = self.rank.unwrap_or(u32::MAX);
        let done = |ev: Option<ConnEvent>, head: usize, len: usize| {
            let used = head + len;
            if buf.len() < used {
                more(used)
            } else {
                Ok(Parsed::Packet { ev, used, head })
            }
        };
        let ev = |p: Packet| Some(ConnEvent::Packet(p));
        let empty = Bytes::new;
        let (Some(a), b) = (get_int(buf, 4), get_int(buf, 8)) else {
            return match op {
                opcode::CLOSE => done(Some(ConnEvent::Close), 4, 0),
                opcode::BARRIER => done(ev(Packet::Barrier), 4, 0),
                opcode::OPEN | opcode::ABORT => more(8),
                opcode::ALLGATHER | opcode::ALLTOALL => more(8),
                opcode::BCAST
                | opcode::GATHER
                | opcode::SCATTER
                | opcode::GATHERV
                | opcode::SCATTERV => more(12),
                other => Err(format!("unknown PMGR opcode {other}")),
            };
        };
        match op {
            opcode::OPEN => done(None, 8, 0),
            opcode::CLOSE => done(Some(ConnEvent::Close), 4, 0),
            opcode::ABORT => done(Some(ConnEvent::Abort { code: a }), 8, 0),
            opcode::BARRIER => done(ev(Packet::Barrier), 4, 0),
            opcode::BCAST | opcode::GATHER | opcode::SCATTER => {
                let name = match op {
                    opcode::BCAST => "BCAST",
                    opcode::GATHER => "GATHER",
                    _ => "SCATTER",
                };
                let root = self.root(a, name)?;
                let Some(sz) = b else { return more(12) };
                let sz = self.size(sz, name)?;
                // Every rank receives at least sz bytes; GATHER's root and SCATTER's send N*sz.
                let len = match op {
                    opcode::BCAST if me == root => sz as usize,
                    opcode::BCAST => 0,
                    opcode::GATHER => {
                        self.times_n(sz, name)?;
                        sz as usize
                    }
                    _ if me == root => self.times_n(sz, name)?,
                    _ => {
                        self.times_n(sz, name)?;
                        0
                    }
                };
                let p = match op {
                    opcode::BCAST => Packet::Bcast { root, sz, data: empty() },
                    opcode::GATHER => Packet::Gather { root, sz, data: empty() },
                    _ => Packet::Scatter { root, sz, data: empty() },
                };
                done(ev(p), 12, len)
            }
            opcode::ALLGATHER | opcode::ALLTOALL => {
                let name = if op == opcode::ALLGATHER { "ALLGATHER" } else { "ALLTOALL" };
                let sz = self.size(a, name)?;
                let n_sz = self.times_n(sz, name)?;
                if op == opcode::ALLGATHER {
                    done(ev(Packet::Allgather { sz, data: empty() }), 8, sz as usize)
                } else {
                    done(ev(Packet::Alltoall { sz, data: empty() }), 8, n_sz)
                }
            }
            opcode::GATHERV => {
                let root = self.root(a, "GATHERV")?;
                let Some(len) = b else { return more(12) };
                let len = self.size(len, "GATHERV")?;
                done(ev(Packet::Gatherv { root, data: empty() }), 12, len as usize)
            }
            opcode::SCATTERV => {
                let root = self.root(a, "SCATTERV")?;
                if me != root {
                    return done(
                        ev(Packet::Scatterv { root, counts: Vec::new(), data: empty() }),
                        8,
                        0,
                    );
                }
                let n = self.nprocs as usize;
                let head = 8 + 4 * n;
                if buf.len() < head {
                    return more(head);
                }
                let mut counts = Vec::with_capacity(n);
                let mut total = 0usize;
                for i in 0..n {
                    let c = get_int(buf, 8 + 4 * i).unwrap_or(0);
                    let c = u32::try_from(c)
                        .map_err(|_| format!("SCATTERV: negative count {c} for rank {i}"))?;
                    total = total.saturating_add(c as usize);
                    counts.push(c);
                }
                if total > self.max_bytes {
                    return Err(format!(
                        "SCATTERV: {total} bytes in all exceeds the limit of {} bytes",
                        self.max_bytes
                    ));
                }
                done(ev(Packet::Scatterv { root, counts, data: empty() }), head, total)
            }
            other => Err(format!("unknown PMGR opcode {other}")),
        }
    }
}

/// What [`ServerConn`] found at the front of its input.
enum Parsed {
    /// Not a whole packet yet; its length once known.
    More(Option<usize>),
    /// A packet of `used` bytes whose payload starts at `head`.
    Packet { ev: Option<ConnEvent>, used: usize, head: usize },
}

/// An abort record received on the server port (§3.6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AbortRecord {
    /// First int: `>= 0` = the peer ("destination") rank involved, negative = user code.
    /// `None` for the legacy forms (nothing, or only the sender's rank).
    pub code: Option<i32>,
    /// The sender's rank as it claims it (not range-checked).
    pub rank: Option<i32>,
    /// The message's bytes up to its NUL, cut to [`ABORT_MSG_KEEP`] bytes (a trailing `+`
    /// marks a cut). Untrusted bytes: escape them before printing.
    pub message: Vec<u8>,
}

/// What an [`AbortConn`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AbortEvent {
    /// A complete (or, at EOF, partial/legacy) record: the job must be aborted.
    Record(AbortRecord),
}

/// Parser for the out-of-band abort record: `int code, int rank, int len, len bytes`.
/// At EOF a shorter record is reported as far as it got (1 int = legacy "sender rank only",
/// 0 bytes = legacy "connect and close"). Exactly one [`AbortEvent::Record`] is emitted.
#[derive(Debug, Default)]
pub struct AbortConn {
    buf: Vec<u8>,
    done: bool,
}

impl AbortConn {
    pub fn new() -> AbortConn {
        AbortConn::default()
    }

    /// Whether the record is complete (later input is ignored; the driver may close).
    pub fn is_done(&self) -> bool {
        self.done
    }

    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<AbortEvent>) {
        if self.done {
            return;
        }
        let room = (12 + ABORT_MSG_MAX).saturating_sub(self.buf.len());
        self.buf.extend_from_slice(&bytes[..bytes.len().min(room)]);
        let (Some(code), Some(rank), Some(len)) =
            (get_int(&self.buf, 0), get_int(&self.buf, 4), get_int(&self.buf, 8))
        else {
            return;
        };
        match usize::try_from(len) {
            Ok(l) if l <= ABORT_MSG_MAX => {
                if self.buf.len() >= 12 + l {
                    let m = clean_message(&self.buf[12..12 + l]);
                    self.finish(Some(code), Some(rank), m, out);
                }
            }
            _ => {
                let m = format!("(invalid abort message length {len})").into_bytes();
                self.finish(Some(code), Some(rank), m, out);
            }
        }
    }

    pub fn eof(&mut self, out: &mut Vec<AbortEvent>) {
        if self.done {
            return;
        }
        let b = &self.buf;
        let (code, rank) = match (get_int(b, 0), get_int(b, 4)) {
            (None, _) => (None, None),
            (Some(src), None) => (None, Some(src)),
            (Some(c), Some(r)) => (Some(c), Some(r)),
        };
        let msg = if b.len() > 12 { clean_message(&b[12..]) } else { Vec::new() };
        self.finish(code, rank, msg, out);
    }

    fn finish(
        &mut self,
        code: Option<i32>,
        rank: Option<i32>,
        message: Vec<u8>,
        out: &mut Vec<AbortEvent>,
    ) {
        self.done = true;
        self.buf = Vec::new();
        out.push(AbortEvent::Record(AbortRecord { code, rank, message }));
    }
}

fn clean_message(b: &[u8]) -> Vec<u8> {
    let b = &b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())];
    let cut = b.len() > ABORT_MSG_KEEP;
    let mut m = b[..b.len().min(ABORT_MSG_KEEP)].to_vec();
    if cut {
        m.push(b'+');
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(xs: &[i32]) -> Vec<u8> {
        let mut v = Vec::new();
        for &x in xs {
            put_int(&mut v, x);
        }
        v
    }

    fn run(n: u32, input: &[u8]) -> (ServerConn, Vec<ConnEvent>) {
        let mut c = ServerConn::new(n);
        let mut out = Vec::new();
        c.feed(input, &mut out);
        (c, out)
    }

    #[test]
    fn handshake_and_barrier_bytewise() {
        let mut input = encode_hello(2);
        input.extend(Packet::Barrier.encode());
        let mut c = ServerConn::new(4);
        let mut out = Vec::new();
        for b in &input {
            c.feed(std::slice::from_ref(b), &mut out);
        }
        assert_eq!(
            out,
            vec![ConnEvent::Hello { version: 8, rank: 2 }, ConnEvent::Packet(Packet::Barrier)]
        );
        assert!(c.in_collective());
        assert_eq!(reply_barrier(), ints(&[3]));
    }

    #[test]
    fn every_op_roundtrips_and_pipelines() {
        let n = 3;
        let me = 1;
        let pk = vec![
            Packet::Barrier,
            Packet::Bcast { root: 1, sz: 2, data: vec![1, 2].into() },
            Packet::Bcast { root: 0, sz: 2, data: vec![].into() },
            Packet::Gather { root: 0, sz: 3, data: vec![7, 8, 9].into() },
            Packet::Scatter { root: 1, sz: 1, data: vec![4, 5, 6].into() },
            Packet::Scatter { root: 2, sz: 1, data: vec![].into() },
            Packet::Allgather { sz: 2, data: vec![1, 1].into() },
            Packet::Alltoall { sz: 1, data: vec![9, 8, 7].into() },
            Packet::Gatherv { root: 0, data: vec![1, 2, 3, 4, 5].into() },
            Packet::Gatherv { root: 2, data: Bytes::new() },
            Packet::Scatterv { root: 1, counts: vec![1, 0, 2], data: vec![4, 5, 6].into() },
            Packet::Scatterv { root: 2, counts: vec![], data: Bytes::new() },
        ];
        let mut input = encode_hello(me);
        input.extend(ints(&[opcode::OPEN, me]));
        for p in &pk {
            input.extend(p.encode());
        }
        input.extend(ints(&[opcode::CLOSE]));
        let (mut c, mut out) = run(n, &input);
        assert_eq!(out.len(), 2);
        for p in &pk {
            assert_eq!(out.last(), Some(&ConnEvent::Packet(p.clone())));
            out.clear();
            c.op_done(&mut out);
        }
        assert_eq!(out, vec![ConnEvent::Close]);
        assert!(c.is_finished());
    }

    /// A broadcast's limit is its payload; the others' the N*sz a rank sends or gets; the
    /// variable-size ops' their total.
    #[test]
    fn limits_per_op() {
        let first = |input: Vec<u8>| {
            let mut c = ServerConn::with_max_bytes(4, 100);
            let mut out = Vec::new();
            c.feed(&encode_hello(0), &mut out);
            c.feed(&input, &mut out);
            out.pop()
        };
        let bcast = Packet::Bcast { root: 0, sz: 100, data: vec![7; 100].into() };
        assert_eq!(first(bcast.encode()), Some(ConnEvent::Packet(bcast)));
        let e = first(ints(&[opcode::BCAST, 0, 101]));
        assert!(matches!(e, Some(ConnEvent::Error(m)) if m.contains("size 101 exceeds")));
        for op in [opcode::GATHER, opcode::SCATTER] {
            let e = first(ints(&[op, 1, 26]));
            assert!(
                matches!(&e, Some(ConnEvent::Error(m)) if m.contains("4 ranks x 26 bytes")),
                "{e:?}"
            );
        }
        let e = first(ints(&[opcode::SCATTERV, 0, 50, 50, 0, 1]));
        assert!(matches!(&e, Some(ConnEvent::Error(m)) if m.contains("101 bytes in all")), "{e:?}");
        let e = first(ints(&[opcode::SCATTERV, 0, 5, -1, 0, 1]));
        assert!(
            matches!(&e, Some(ConnEvent::Error(m)) if m.contains("negative count -1")),
            "{e:?}"
        );
        let e = first(ints(&[opcode::GATHERV, 0, 101]));
        assert!(matches!(&e, Some(ConnEvent::Error(m)) if m.contains("size 101 exceeds")), "{e:?}");
    }

    #[test]
    fn errors() {
        let cases: Vec<(u32, Vec<i32>, &str)> = vec![
            (2, vec![9, 0], "version 9"),
            (2, vec![8, 2], "rank 2 out of range"),
            (2, vec![8, -1], "rank -1 out of range"),
            (2, vec![8, 0, 42], "opcode 42"),
            (2, vec![8, 0, -7], "opcode -7"),
            (2, vec![8, 0, 4, 2, 1], "root 2"),
            (2, vec![8, 0, 5, -1, 1], "root -1"),
            (2, vec![8, 0, 5, 0, -4], "negative size"),
            (2, vec![8, 0, 7, i32::MAX], "exceeds"),
            (4, vec![8, 0, 8, 1 << 28], "exceeds"),
        ];
        for (n, xs, want) in cases {
            let (c, out) = run(n, &ints(&xs));
            match out.last() {
                Some(ConnEvent::Error(m)) => assert!(m.contains(want), "{m} !~ {want}"),
                o => panic!("{xs:?}: {o:?}"),
            }
            assert!(c.is_finished());
            assert!(!c.wants_read());
        }
        let (mut c, mut out) = run(2, &ints(&[8, 0, 1, 3]));
        assert!(matches!(out.last(), Some(ConnEvent::Error(m)) if m.contains("after PMGR_CLOSE")));
        out.clear();
        c.feed(&[1], &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn eof_classification() {
        let (mut c, mut out) = run(2, &ints(&[8, 1, 5, 0]));
        c.eof(&mut out);
        assert!(matches!(out.last(), Some(ConnEvent::Error(m)) if m.contains("middle")));
        let (mut c, mut out) = run(2, &ints(&[8, 1, 1]));
        c.eof(&mut out);
        assert_eq!(out.last(), Some(&ConnEvent::Close));
        let (mut c, mut out) = run(2, &ints(&[8, 1, 2, -5]));
        assert_eq!(out.last(), Some(&ConnEvent::Abort { code: -5 }));
        c.eof(&mut out);
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn eof_behind_a_collective_is_judged_when_it_completes() {
        // A non-root GATHER (no reply), CLOSE, EOF: all before the gather completed.
        let mut input = ints(&[8, 1]);
        input.extend(Packet::Gather { root: 0, sz: 2, data: vec![1, 2].into() }.encode());
        input.extend(ints(&[opcode::CLOSE]));
        let (mut c, mut out) = run(2, &input);
        assert!(c.in_collective() && c.sent_close());
        c.eof(&mut out);
        assert!(c.at_eof() && !matches!(out.last(), Some(ConnEvent::Error(_))));
        out.clear();
        c.op_done(&mut out);
        assert_eq!(out, vec![ConnEvent::Close]);
        // The same without CLOSE: the EOF fails the connection once the gather is done.
        let mut input = ints(&[8, 1]);
        input.extend(Packet::Gather { root: 0, sz: 2, data: vec![1, 2].into() }.encode());
        let (mut c, mut out) = run(2, &input);
        assert!(!c.sent_close());
        c.eof(&mut out);
        assert!(!matches!(out.last(), Some(ConnEvent::Error(_))));
        c.op_done(&mut out);
        assert!(
            matches!(out.last(), Some(ConnEvent::Error(m)) if m.contains("without PMGR_CLOSE"))
        );
        // A barrier then a partial packet: not a close.
        let mut input = ints(&[8, 1, opcode::BARRIER, opcode::ALLGATHER]);
        input.extend([0u8; 2]);
        let (c, _) = run(2, &input);
        assert!(c.in_collective() && !c.sent_close());
        let (c, _) = run(2, &ints(&[8, 1, opcode::BARRIER, opcode::BARRIER, opcode::CLOSE]));
        assert!(c.sent_close());
    }

    #[test]
    fn abort_records() {
        let mut a = AbortConn::new();
        let mut out = Vec::new();
        let rec = encode_abort_record(-3, 2, b"boom\nnow");
        for b in &rec {
            a.feed(std::slice::from_ref(b), &mut out);
        }
        a.eof(&mut out);
        assert_eq!(
            out,
            vec![AbortEvent::Record(AbortRecord {
                code: Some(-3),
                rank: Some(2),
                message: b"boom\nnow".to_vec()
            })]
        );
        let legacy = |b: &[u8]| {
            let mut a = AbortConn::new();
            let mut out = Vec::new();
            a.feed(b, &mut out);
            a.eof(&mut out);
            out
        };
        assert_eq!(
            legacy(&ints(&[5])),
            vec![AbortEvent::Record(AbortRecord { code: None, rank: Some(5), message: vec![] })]
        );
        assert_eq!(
            legacy(&[]),
            vec![AbortEvent::Record(AbortRecord { code: None, rank: None, message: vec![] })]
        );
        let out = legacy(&ints(&[1, 2, -9]));
        assert!(matches!(&out[0], AbortEvent::Record(r) if r.message.starts_with(b"(invalid")));
        let mut big = ints(&[1, 2, 5000]);
        big.extend(vec![b'x'; 5000]);
        let out = legacy(&big);
        assert!(matches!(&out[0], AbortEvent::Record(r) if r.message.len() == ABORT_MSG_KEEP + 1));
    }

    #[test]
    fn abort_record_on_collective_port() {
        // code 8 looks like the version; the driver sees a duplicate Hello and re-reads.
        let rec = encode_abort_record(8, 1, b"x");
        let (c, out) = run(4, &rec);
        assert_eq!(out[0], ConnEvent::Hello { version: 8, rank: 1 });
        assert!(c.could_be_abort());
        let mut aout = Vec::new();
        let mut a = c.into_abort(&mut aout);
        a.eof(&mut aout);
        assert_eq!(
            aout,
            vec![AbortEvent::Record(AbortRecord {
                code: Some(8),
                rank: Some(1),
                message: b"x".to_vec()
            })]
        );
        // Negative code: version error, then re-read.
        let (c, out) = run(4, &encode_abort_record(-1, 3, b"bye"));
        assert!(matches!(out[0], ConnEvent::Error(_)));
        let mut aout = Vec::new();
        c.into_abort(&mut aout);
        assert!(matches!(&aout[0], AbortEvent::Record(r) if r.message == b"bye"));
    }

    #[test]
    fn bounded_pipelining() {
        let mut c = ServerConn::with_max_bytes(2, 1024);
        let mut out = Vec::new();
        c.feed(&encode_hello(1), &mut out);
        c.feed(&Packet::Barrier.encode(), &mut out);
        assert!(c.in_collective());
        let g = Packet::Gather { root: 0, sz: 4, data: vec![0; 4].into() }.encode();
        let mut fed = 0;
        while c.wants_read() {
            c.feed(&g, &mut out);
            fed += 1;
        }
        assert!(fed > 1 && c.buffered() >= PIPELINE_SLACK);
        assert!(!matches!(out.last(), Some(ConnEvent::Error(_))));
        let junk = vec![0u8; 4 * PIPELINE_SLACK];
        c.feed(&junk, &mut out);
        assert!(matches!(out.last(), Some(ConnEvent::Error(_))));
    }

    proptest::proptest! {
        #[test]
        fn never_panics(n in 0u32..6, chunks in proptest::collection::vec(
            proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40), 0..12),
            prefix in proptest::bool::ANY) {
            let mut c = ServerConn::with_max_bytes(n, 4096);
            let mut out = Vec::new();
            if prefix { c.feed(&encode_hello(0), &mut out); }
            let mut a = AbortConn::new();
            let mut aout = Vec::new();
            for ch in &chunks {
                c.feed(ch, &mut out);
                c.op_done(&mut out);
                a.feed(ch, &mut aout);
            }
            c.eof(&mut out);
            a.eof(&mut aout);
            proptest::prop_assert_eq!(aout.len(), 1);
        }
    }
}

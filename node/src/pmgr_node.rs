//! The PMGR collective server of one node, pure (the driver owns the sockets): the local
//! ranks' v8 connections (`pmgr::wire::ServerConn`), and the node's part of the current
//! collective over the NLA tree (`pmgr::collective`): every local rank and every child
//! subtree contributes, one `PmgrUp` goes to the parent, the root resolves the collective and
//! the outcome comes back down, restricted at each node to what its subtree needs.
//!
//! Every connection reaches this state machine authenticated: the driver found which local
//! rank's process holds its other end (see `peer.rs`), its *owner*. The handshake must name
//! that rank; what a connection does is the owner's doing.
//!
//! Aborts: an `ABORT` opcode or an abort record on the same port (a connection that arrives
//! for a rank that already has one, or does not look like a handshake) fails the job with the
//! rank and its code. A mismatch between ranks fails the job naming both — after a short
//! grace, because a v1.0_7 client that aborts first sends `CLOSE` (a mismatch mid-collective)
//! and only then its abort record, which should win.

use libi::msg::Msg;
use libi::text::escape;
use pmgr::collective::{resolve, Outcome, Partial};
use pmgr::wire::{AbortConn, AbortEvent, ConnEvent, ServerConn};
use std::collections::HashMap;

/// What the node core must do for PMGR.
#[derive(Debug, PartialEq)]
pub enum PmgrEffect {
    /// Write these bytes on connection `conn`.
    Write(u64, Vec<u8>),
    /// Close connection `conn`.
    Close(u64),
    /// Send up the tree.
    Up(Msg),
    /// Send to child `idx`.
    ToChild(usize, Msg),
    /// A rank aborted: (rank, exit status, message).
    Abort(u32, i32, String),
    /// The job must fail with this message, after a grace period in which an abort record
    /// may still arrive.
    FailSoon(String),
}

/// Longest abort message passed on (escaped).
const ABORT_MESSAGE_MAX: usize = 1024;

enum Conn {
    Server(Box<ServerConn>),
    Abort(AbortConn),
    Done,
}

/// One connection: what it is, which local rank's process holds it, whether it reached EOF.
struct Entry {
    conn: Conn,
    owner: u32,
    eof: bool,
}

impl Entry {
    /// Could this connection still say something that decides how its owner's exit is
    /// judged (a `CLOSE`, an abort)?
    fn undecided(&self) -> bool {
        !self.eof
            && match &self.conn {
                Conn::Server(s) => !s.is_finished() && !s.sent_close(),
                Conn::Abort(a) => !a.is_done(),
                Conn::Done => false,
            }
    }
}

pub struct PmgrNode {
    nprocs: u32,
    is_root: bool,
    local: Vec<u32>,
    /// Ranks of each child's subtree.
    child_ranks: Vec<Vec<u32>>,
    conns: HashMap<u64, Entry>,
    rank_conn: HashMap<u32, u64>,
    /// This subtree's contributions to the current collective.
    partial: Partial,
    local_in: usize,
    children_in: Vec<bool>,
    /// Ranks that sent CLOSE (and so may exit).
    closed: Vec<u32>,
    aborted: bool,
}

impl PmgrNode {
    pub fn new(nprocs: u32, is_root: bool, local: Vec<u32>, child_ranks: Vec<Vec<u32>>) -> Self {
        let n = child_ranks.len();
        PmgrNode {
            nprocs,
            is_root,
            local,
            child_ranks,
            conns: HashMap::new(),
            rank_conn: HashMap::new(),
            partial: Partial::new(nprocs),
            local_in: 0,
            children_in: vec![false; n],
            closed: Vec::new(),
            aborted: false,
        }
    }

    /// Did local rank `rank` connect and not say CLOSE (parsed, or received behind a
    /// collective still in flight)? Its exit then fails the job.
    pub fn open_rank(&self, rank: u32) -> bool {
        let Some(conn) = self.rank_conn.get(&rank) else { return false };
        let sent_close = matches!(self.conns.get(conn), Some(Entry { conn: Conn::Server(s), .. }) if s.sent_close());
        !self.closed.contains(&rank) && !sent_close
    }

    /// Might a connection of local rank `rank` still say something that decides how its
    /// exit is judged? (Not once each of them reached EOF, closed, aborted or failed.)
    pub fn undecided(&self, rank: u32) -> bool {
        self.conns.values().any(|e| e.owner == rank && e.undecided())
    }

    /// A connection was accepted and authenticated as held by local rank `owner`.
    pub fn connected(&mut self, conn: u64, owner: u32) {
        let server = Conn::Server(Box::new(ServerConn::new(self.nprocs)));
        self.conns.insert(conn, Entry { conn: server, owner, eof: false });
    }

    fn set(&mut self, conn: u64, c: Conn) {
        if let Some(e) = self.conns.get_mut(&conn) {
            e.conn = c;
        }
    }

    /// Bytes from connection `conn`.
    pub fn data(&mut self, conn: u64, bytes: &[u8], fx: &mut Vec<PmgrEffect>) {
        let mut events = Vec::new();
        match self.conns.get_mut(&conn).map(|e| &mut e.conn) {
            Some(Conn::Server(s)) => s.feed(bytes, &mut events),
            Some(Conn::Abort(a)) => {
                let mut ab = Vec::new();
                a.feed(bytes, &mut ab);
                self.abort_events(conn, ab, fx);
                return;
            }
            _ => return,
        }
        self.server_events(conn, events, fx);
    }

    /// Connection `conn` reached EOF.
    pub fn eof(&mut self, conn: u64, fx: &mut Vec<PmgrEffect>) {
        let mut events = Vec::new();
        if let Some(e) = self.conns.get_mut(&conn) {
            e.eof = true;
        }
        match self.conns.get_mut(&conn).map(|e| &mut e.conn) {
            Some(Conn::Server(s)) => s.eof(&mut events),
            Some(Conn::Abort(a)) => {
                let mut ab = Vec::new();
                a.eof(&mut ab);
                self.abort_events(conn, ab, fx);
                return;
            }
            _ => return,
        }
        self.server_events(conn, events, fx);
    }

    fn abort_events(&mut self, conn: u64, events: Vec<AbortEvent>, fx: &mut Vec<PmgrEffect>) {
        for AbortEvent::Record(r) in events {
            self.set(conn, Conn::Done);
            fx.push(PmgrEffect::Close(conn));
            // Who sent it is who holds the connection, whatever rank the record names.
            let rank = self.rank_of(conn);
            let msg = if r.message.is_empty() {
                String::new()
            } else {
                format!(": {}", escape(&r.message, ABORT_MESSAGE_MAX))
            };
            let called = |what: String| format!("called pmgr_abort ({what}){msg}");
            // MVAPICH negates user codes; a non-negative code names the peer involved.
            let (status, text) = match r.code {
                Some(c) if c < 0 => (c.unsigned_abs().min(255) as i32, called(format!("code {c}"))),
                // No rank of the job: not an abort record at all, but most likely the
                // handshake of another protocol version (MVAPICH-1's v5 sends 5 first).
                Some(c) if c as u32 >= self.nprocs => (
                    1,
                    format!(
                        "sent neither a PMGR handshake nor an abort record (first int {c}, \
                         no rank of this {}-rank job; an unsupported protocol version? this \
                         server speaks version {})",
                        self.nprocs,
                        pmgr::wire::PMGR_COLLECTIVE
                    ),
                ),
                Some(c) => (1, called(format!("peer rank {c}"))),
                None => (1, called("no code".to_string())),
            };
            self.aborted = true;
            fx.push(PmgrEffect::Abort(rank, status, text));
        }
    }

    fn server_events(&mut self, conn: u64, events: Vec<ConnEvent>, fx: &mut Vec<PmgrEffect>) {
        for ev in events {
            match ev {
                ConnEvent::Hello { rank, .. } => {
                    let owner = self.rank_of(conn);
                    if self.rank_conn.contains_key(&owner) {
                        // A second connection of a rank: an abort record.
                        self.make_abort_conn(conn, fx);
                        return;
                    }
                    if rank != owner || !self.local.contains(&rank) {
                        self.set(conn, Conn::Done);
                        fx.push(PmgrEffect::Close(conn));
                        fx.push(PmgrEffect::FailSoon(format!(
                            "PMGR: rank {owner} connected as rank {rank}"
                        )));
                        return;
                    }
                    self.rank_conn.insert(rank, conn);
                }
                ConnEvent::Abort { code } => {
                    let rank = self.rank_of(conn);
                    self.aborted = true;
                    let status = if code < 0 { code.unsigned_abs().min(255) as i32 } else { 1 };
                    fx.push(PmgrEffect::Abort(
                        rank,
                        status,
                        format!("sent PMGR_ABORT (code {code})"),
                    ));
                }
                ev @ (ConnEvent::Packet(_) | ConnEvent::Close) => {
                    let rank = self.rank_of(conn);
                    if matches!(ev, ConnEvent::Close) {
                        self.closed.push(rank);
                    }
                    let Some(packet) = ev.to_packet() else { continue };
                    match self.partial.add(rank, packet) {
                        Ok(()) => {
                            self.local_in += 1;
                            self.maybe_up(fx);
                        }
                        Err(m) => fx.push(PmgrEffect::FailSoon(m.to_string())),
                    }
                }
                ConnEvent::Error(e) => {
                    let could = matches!(self.conns.get(&conn), Some(Entry { conn: Conn::Server(s), .. }) if s.could_be_abort());
                    if could && !self.rank_conn.values().any(|c| *c == conn) {
                        self.make_abort_conn(conn, fx);
                        return;
                    }
                    fx.push(PmgrEffect::FailSoon(format!("PMGR: {e}")));
                }
            }
        }
    }

    fn make_abort_conn(&mut self, conn: u64, fx: &mut Vec<PmgrEffect>) {
        let Some(e) = self.conns.get_mut(&conn) else { return };
        if let Conn::Server(s) = std::mem::replace(&mut e.conn, Conn::Done) {
            let mut ab = Vec::new();
            e.conn = Conn::Abort(s.into_abort(&mut ab));
            self.abort_events(conn, ab, fx);
        }
    }

    /// The local rank holding connection `conn`.
    fn rank_of(&self, conn: u64) -> u32 {
        self.conns.get(&conn).map(|e| e.owner).unwrap_or(u32::MAX)
    }

    /// A child's partial for the current collective.
    pub fn child_up(&mut self, idx: usize, partial: Partial, fx: &mut Vec<PmgrEffect>) {
        if idx >= self.children_in.len() || self.children_in[idx] {
            fx.push(PmgrEffect::FailSoon(format!("PMGR: child {idx} sent two contributions")));
            return;
        }
        self.children_in[idx] = true;
        if let Err(m) = self.partial.merge(partial) {
            fx.push(PmgrEffect::FailSoon(m.to_string()));
            return;
        }
        self.maybe_up(fx);
    }

    fn maybe_up(&mut self, fx: &mut Vec<PmgrEffect>) {
        if self.aborted
            || self.local_in < self.local.len()
            || !self.children_in.iter().all(|c| *c)
            || (self.local.is_empty() && self.children_in.is_empty())
        {
            return;
        }
        let partial = std::mem::replace(&mut self.partial, Partial::new(self.nprocs));
        self.local_in = 0;
        self.children_in.iter_mut().for_each(|c| *c = false);
        if self.is_root {
            match resolve(partial, self.nprocs) {
                Ok(outcome) => self.down(outcome, fx),
                Err(m) => fx.push(PmgrEffect::FailSoon(m.to_string())),
            }
        } else {
            fx.push(PmgrEffect::Up(Msg::PmgrUp(Box::new(partial))));
        }
    }

    /// The outcome of the current collective (from the parent, or resolved here).
    pub fn down(&mut self, outcome: Outcome, fx: &mut Vec<PmgrEffect>) {
        if let Outcome::Aborted { rank, code } = outcome {
            self.aborted = true;
            let status = if code < 0 { code.unsigned_abs().min(255) as i32 } else { 1 };
            fx.push(PmgrEffect::Abort(rank, status, format!("sent PMGR_ABORT (code {code})")));
            return;
        }
        for (idx, ranks) in self.child_ranks.iter().enumerate() {
            fx.push(PmgrEffect::ToChild(idx, Msg::PmgrDown(Box::new(outcome.restrict(ranks)))));
        }
        let closed = matches!(outcome, Outcome::Closed);
        for rank in self.local.clone() {
            let Some(&conn) = self.rank_conn.get(&rank) else { continue };
            if closed {
                self.set(conn, Conn::Done);
                fx.push(PmgrEffect::Close(conn));
                continue;
            }
            if let Some(bytes) = outcome.reply_for(rank) {
                fx.push(PmgrEffect::Write(conn, bytes));
            }
            // The connection may already hold the rank's next request.
            let mut events = Vec::new();
            if let Some(Entry { conn: Conn::Server(s), .. }) = self.conns.get_mut(&conn) {
                s.op_done(&mut events);
            }
            self.server_events(conn, events, fx);
        }
    }
}

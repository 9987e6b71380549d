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
//! Big payloads stream (issue 52): a payload over [`INLINE_MAX`] bytes (or beyond
//! [`INLINE_BUDGET`] in one message) travels in parts of at most `PMGR_CHUNK` bytes
//! (`Msg::PmgrUpPart` / `PmgrDownPart`) ahead of the `PmgrUp` / `PmgrDown` that closes the
//! collective on that link. Going up, a node passes a rank's parts on as they come (a leaf
//! sends a local rank's as soon as its packet is in) and the root keeps them until the
//! rank's `PmgrUp` arrives; going down, a node writes each part to the ranks it is for and
//! passes it on to the child whose subtree holds them, as it comes. No collective comes near
//! the frame limit, and none waits for a whole payload at every level of the tree.
//!
//! Aborts: an `ABORT` opcode or an abort record on the same port (a connection that arrives
//! for a rank that already has one, or does not look like a handshake) fails the job with the
//! rank and its code. A mismatch between ranks fails the job naming both — after a short
//! grace, because a v1.0_7 client that aborts first sends `CLOSE` (a mismatch mid-collective)
//! and only then its abort record, which should win.

use bytes::Bytes;
use libi::msg::{Msg, PMGR_CHUNK};
use libi::text::escape;
use pmgr::collective::{resolve, Data, Outcome, Partial, Target};
use pmgr::wire::{AbortConn, AbortEvent, ConnEvent, ServerConn, DEFAULT_MAX_BYTES};
use std::collections::HashMap;

/// What the node core must do for PMGR.
#[derive(Debug, PartialEq)]
pub enum PmgrEffect {
    /// Write these bytes on connection `conn`.
    Write(u64, Bytes),
    /// Close connection `conn`.
    Close(u64),
    /// Send up the tree.
    Up(Msg),
    /// Send to child `idx`.
    ToChild(usize, Msg),
    /// Send to every child (encoded once).
    ToChildren(Msg),
    /// A rank aborted: (rank, exit status, message).
    Abort(u32, i32, String),
    /// The job must fail with this message, after a grace period in which an abort record
    /// may still arrive.
    FailSoon(String),
}

/// Longest abort message passed on (escaped).
const ABORT_MESSAGE_MAX: usize = 1024;

/// A payload up to this size travels inside the `PmgrUp` / `PmgrDown`; a bigger one goes
/// ahead in parts.
pub const INLINE_MAX: usize = 64 << 10;
/// Most payload bytes one `PmgrUp` / `PmgrDown` carries inside (many small ones: a gather
/// from many ranks); the others go ahead in parts.
pub const INLINE_BUDGET: usize = 16 << 20;

/// Where a rank of the subtree is.
#[derive(Clone, Copy, PartialEq)]
enum Place {
    Local,
    Child(usize),
}

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
    /// This node resolves the collectives (see [`PmgrNode::new`]).
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
    /// Where each rank of the subtree is (made when a part first needs it).
    places: Option<HashMap<u32, Place>>,
    /// At the root: payloads that came ahead in parts, by rank, until the rank's `PmgrUp`.
    ahead: HashMap<u32, Data>,
    /// Parts of at most this many bytes; inside a message, payloads up to `inline_max`, at
    /// most `budget` in all.
    chunk: usize,
    inline_max: usize,
    budget: usize,
}

impl PmgrNode {
    /// The node of `local` ranks whose children's subtrees hold `child_ranks`. It resolves
    /// the collectives if it is the tree's root, or if its subtree holds every rank of the
    /// job (one node under the front end, the top of a chain): above it nothing would be
    /// added, and a big payload would only go up to the front end to come back down.
    pub fn new(nprocs: u32, is_root: bool, local: Vec<u32>, child_ranks: Vec<Vec<u32>>) -> Self {
        let n = child_ranks.len();
        let held = local.len() + child_ranks.iter().map(Vec::len).sum::<usize>();
        let holds_all = nprocs > 0 && held == nprocs as usize;
        PmgrNode {
            nprocs,
            is_root: is_root || holds_all,
            local,
            child_ranks,
            conns: HashMap::new(),
            rank_conn: HashMap::new(),
            partial: Partial::new(nprocs),
            local_in: 0,
            children_in: vec![false; n],
            closed: Vec::new(),
            aborted: false,
            places: None,
            ahead: HashMap::new(),
            chunk: PMGR_CHUNK,
            inline_max: INLINE_MAX,
            budget: INLINE_BUDGET,
        }
    }

    /// Parts of at most `bytes` bytes (tests make it small): payloads above it (or above
    /// [`INLINE_MAX`]) go in parts, at most 16 parts' worth inside one message.
    pub fn set_chunk(&mut self, bytes: usize) {
        self.chunk = bytes.max(1);
        self.inline_max = INLINE_MAX.min(self.chunk);
        self.budget = INLINE_BUDGET.min(self.chunk.saturating_mul(16));
    }

    /// Where rank `rank` is in this subtree, if it is.
    fn place(&mut self, rank: u32) -> Option<Place> {
        let places = self.places.get_or_insert_with(|| {
            let mut m: HashMap<u32, Place> =
                self.local.iter().map(|&r| (r, Place::Local)).collect();
            for (idx, ranks) in self.child_ranks.iter().enumerate() {
                m.extend(ranks.iter().map(|&r| (r, Place::Child(idx))));
            }
            m
        });
        places.get(&rank).copied()
    }

    /// `data` of `rank` up the tree, in parts.
    fn parts_up(&self, rank: u32, data: &Data, fx: &mut Vec<PmgrEffect>) {
        for c in data.chunks(self.chunk) {
            fx.push(PmgrEffect::Up(Msg::PmgrUpPart { rank, data: c }));
        }
    }

    /// Take out of `partial` what does not go inside its `PmgrUp` (see [`INLINE_BUDGET`]).
    fn take_big(&self, partial: &mut Partial) -> Vec<(u32, Data)> {
        let (max, budget) = (self.inline_max, self.budget);
        let mut inside = 0usize;
        partial.take_data(|_, d| {
            let big = d.len() > max || inside + d.len() > budget;
            if !big {
                inside += d.len();
            }
            big
        })
    }

    /// Take out of `outcome` what does not go inside its `PmgrDown`.
    fn take_big_down(&self, outcome: &mut Outcome) -> Vec<(Target, Data)> {
        let (max, budget) = (self.inline_max, self.budget);
        let mut inside = 0usize;
        outcome.take_data(|d| {
            let big = d.len() > max || inside + d.len() > budget;
            if !big {
                inside += d.len();
            }
            big
        })
    }

    /// Part of `rank`'s payload from child `idx`: passed up, or at the root kept until the
    /// rank's contribution comes.
    pub fn up_part(&mut self, idx: usize, rank: u32, data: Bytes, fx: &mut Vec<PmgrEffect>) {
        if self.aborted {
            return;
        }
        if self.place(rank) != Some(Place::Child(idx)) {
            let m = format!("PMGR: child {idx} sent data of rank {rank}, not of its subtree");
            fx.push(PmgrEffect::FailSoon(m));
            return;
        }
        if !self.is_root {
            fx.push(PmgrEffect::Up(Msg::PmgrUpPart { rank, data }));
            return;
        }
        let have = self.ahead.entry(rank).or_default();
        if have.len() + data.len() > DEFAULT_MAX_BYTES {
            fx.push(PmgrEffect::FailSoon(format!(
                "PMGR: rank {rank} sent more than {DEFAULT_MAX_BYTES} bytes for one collective"
            )));
            self.ahead.remove(&rank);
            return;
        }
        have.push(data);
    }

    /// Part of the current collective's result from the parent: to the ranks it is for, as
    /// it comes.
    pub fn down_part(&mut self, to: Target, data: Bytes, fx: &mut Vec<PmgrEffect>) {
        if self.aborted || data.is_empty() {
            return;
        }
        match to {
            Target::All => {
                if !self.child_ranks.is_empty() {
                    fx.push(PmgrEffect::ToChildren(Msg::PmgrDownPart { to, data: data.clone() }));
                }
                for rank in &self.local {
                    if let Some(&conn) = self.rank_conn.get(rank) {
                        fx.push(PmgrEffect::Write(conn, data.clone()));
                    }
                }
            }
            Target::Rank(r) => match self.place(r) {
                Some(Place::Local) => {
                    if let Some(&conn) = self.rank_conn.get(&r) {
                        fx.push(PmgrEffect::Write(conn, data));
                    }
                }
                Some(Place::Child(idx)) => {
                    fx.push(PmgrEffect::ToChild(idx, Msg::PmgrDownPart { to, data }))
                }
                None => fx.push(PmgrEffect::FailSoon(format!(
                    "PMGR: the parent sent data for rank {r}, not of this subtree"
                ))),
            },
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
                            // A big payload goes up at once, in parts (not at the root).
                            if !self.is_root {
                                let max = self.inline_max;
                                for (r, d) in
                                    self.partial.take_data(|r, d| r == rank && d.len() > max)
                                {
                                    self.parts_up(r, &d, fx);
                                }
                            }
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
    pub fn child_up(&mut self, idx: usize, mut partial: Partial, fx: &mut Vec<PmgrEffect>) {
        if idx >= self.children_in.len() || self.children_in[idx] {
            fx.push(PmgrEffect::FailSoon(format!("PMGR: child {idx} sent two contributions")));
            return;
        }
        self.children_in[idx] = true;
        // What came ahead in parts goes in front of what the contribution carries.
        if self.is_root && !self.ahead.is_empty() {
            let ranks: Vec<u32> = partial.ranks().collect();
            for r in ranks {
                if let Some(d) = self.ahead.remove(&r) {
                    partial.prepend_data(r, d);
                }
            }
        }
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
        let mut partial = std::mem::replace(&mut self.partial, Partial::new(self.nprocs));
        self.local_in = 0;
        self.children_in.iter_mut().for_each(|c| *c = false);
        if self.is_root {
            if let Some(&rank) = self.ahead.keys().min() {
                self.ahead.clear();
                let m = format!("PMGR: data of rank {rank} came without its contribution");
                fx.push(PmgrEffect::FailSoon(m));
                return;
            }
            match resolve(partial, self.nprocs) {
                Ok(outcome) => self.down(outcome, fx),
                Err(m) => fx.push(PmgrEffect::FailSoon(m.to_string())),
            }
        } else {
            for (rank, d) in self.take_big(&mut partial) {
                self.parts_up(rank, &d, fx);
            }
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
        // To the children: big payloads ahead in parts, then the rest inside the PmgrDown.
        if matches!(outcome, Outcome::Bcast { .. } | Outcome::Allgather { .. }) {
            // The same for every child: encoded once.
            if !self.child_ranks.is_empty() {
                let mut rest = outcome.clone();
                for (to, d) in self.take_big_down(&mut rest) {
                    for c in d.chunks(self.chunk) {
                        fx.push(PmgrEffect::ToChildren(Msg::PmgrDownPart { to, data: c }));
                    }
                }
                fx.push(PmgrEffect::ToChildren(Msg::PmgrDown(Box::new(rest))));
            }
        } else {
            for (idx, ranks) in self.child_ranks.iter().enumerate() {
                let mut rest = outcome.restrict(ranks);
                for (to, d) in self.take_big_down(&mut rest) {
                    for c in d.chunks(self.chunk) {
                        fx.push(PmgrEffect::ToChild(idx, Msg::PmgrDownPart { to, data: c }));
                    }
                }
                fx.push(PmgrEffect::ToChild(idx, Msg::PmgrDown(Box::new(rest))));
            }
        }
        let closed = matches!(outcome, Outcome::Closed);
        for rank in self.local.clone() {
            let Some(&conn) = self.rank_conn.get(&rank) else { continue };
            if closed {
                self.set(conn, Conn::Done);
                fx.push(PmgrEffect::Close(conn));
                continue;
            }
            // (What came ahead in parts was written already.)
            for piece in outcome.reply_data(rank).iter().flat_map(Data::pieces) {
                fx.push(PmgrEffect::Write(conn, piece.clone()));
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

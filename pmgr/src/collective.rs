//! One PMGR collective combined over a tree of partial aggregates (pure, serde-serializable).
//!
//! ```text
//! leaf NLA:   p = Partial::new(n); p.add(rank, packet)? for each local rank
//! inner NLA:  p.merge(child_partial)? for each child          -> send p up
//! root:       outcome = resolve(p, n)?  (when p.is_complete() or p.aborted().is_some())
//! downwards:  outcome.restrict(&ranks_of_child_subtree)       -> send to that child
//! every NLA:  outcome.reply_for(rank) -> bytes to write to that rank's socket (None: write
//!             nothing), then ServerConn::op_done (Closed: close the sockets; Aborted: fail)
//! ```
//!
//! Every rank must agree on op, root and size (§3.5); a disagreement, a duplicate or a
//! wrongly sized payload is a [`Mismatch`], whose message is meant for the job's failure
//! line. An `ABORT` (opcode 2) from any rank wins over everything else: the partial records it
//! and [`resolve`] returns [`Outcome::Aborted`] without waiting for the other ranks.
//!
//! Payloads are [`Data`]: the pieces they arrived in, joined and sliced without copying. A
//! sender may take big payloads out of a partial or an outcome ([`Partial::take_data`],
//! [`Outcome::take_data`]) to send them separately, in parts; the receiver puts them back
//! in front ([`Partial::prepend_data`]) or, going down, writes them to the ranks as they come
//! (each part is for one rank or for every rank of the subtree: [`Target`]).

use std::collections::BTreeMap;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::wire::{self, Op, Packet};

/// Largest reply any rank may get (`N*sz`): clients compute sizes in C `int`.
pub const MAX_REPLY: u64 = i32::MAX as u64;

/// Bytes kept as the pieces they came in: a rank's contribution, the parts of a collective
/// that crossed the tree. Joined, sliced and cloned without copying the payload. Equality is
/// by content; on the wire it is one byte string.
#[derive(Clone, Default)]
pub struct Data {
    pieces: Vec<Bytes>,
    len: usize,
}

/// Pieces shorter than this are copied together when payloads are joined ([`Data::join`]):
/// a gather of many small contributions gives one buffer, not a piece per rank.
const SMALL_PIECE: usize = 4 << 10;

impl Data {
    pub fn new() -> Data {
        Data::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The pieces, in order (none empty).
    pub fn pieces(&self) -> &[Bytes] {
        &self.pieces
    }

    /// Append a piece (an empty one is dropped).
    pub fn push(&mut self, b: Bytes) {
        if !b.is_empty() {
            self.len += b.len();
            self.pieces.push(b);
        }
    }

    /// Append `other`'s pieces.
    pub fn append(&mut self, other: Data) {
        for p in other.pieces {
            self.push(p);
        }
    }

    /// `len` bytes from `start` (as many as there are).
    pub fn slice(&self, start: usize, len: usize) -> Data {
        let mut out = Data::new();
        let (mut skip, mut want) = (start, len);
        for p in &self.pieces {
            if want == 0 {
                break;
            }
            if skip >= p.len() {
                skip -= p.len();
                continue;
            }
            let take = (p.len() - skip).min(want);
            out.push(p.slice(skip..skip + take));
            skip = 0;
            want -= take;
        }
        out
    }

    /// The payload in pieces of at most `max` bytes (slices of this one's pieces).
    pub fn chunks(&self, max: usize) -> Vec<Bytes> {
        let max = max.max(1);
        let mut out = Vec::new();
        for p in &self.pieces {
            let mut at = 0;
            while at < p.len() {
                let end = p.len().min(at + max);
                out.push(p.slice(at..end));
                at = end;
            }
        }
        out
    }

    /// One contiguous copy.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        for p in &self.pieces {
            v.extend_from_slice(p);
        }
        v
    }

    /// The concatenation of `parts`: big pieces as they are, runs of small ones copied into
    /// one buffer.
    pub fn join(parts: impl IntoIterator<Item = Data>) -> Data {
        let mut out = Data::new();
        let mut small: Vec<u8> = Vec::new();
        for d in parts {
            for p in d.pieces {
                if p.len() < SMALL_PIECE {
                    small.extend_from_slice(&p);
                } else {
                    if !small.is_empty() {
                        out.push(Bytes::from(std::mem::take(&mut small)));
                    }
                    out.push(p);
                }
            }
        }
        out.push(Bytes::from(small));
        out
    }
}

impl From<Bytes> for Data {
    fn from(b: Bytes) -> Data {
        let mut d = Data::new();
        d.push(b);
        d
    }
}

impl From<Vec<u8>> for Data {
    fn from(v: Vec<u8>) -> Data {
        Data::from(Bytes::from(v))
    }
}

impl From<&[u8]> for Data {
    fn from(v: &[u8]) -> Data {
        Data::from(Bytes::copy_from_slice(v))
    }
}

impl PartialEq for Data {
    fn eq(&self, other: &Data) -> bool {
        self.len == other.len && self.pieces.iter().flatten().eq(other.pieces.iter().flatten())
    }
}

impl Eq for Data {}

impl std::fmt::Debug for Data {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.len <= 32 {
            write!(f, "Data({:?})", self.to_vec())
        } else {
            write!(f, "Data({} bytes in {} pieces)", self.len, self.pieces.len())
        }
    }
}

impl Serialize for Data {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.pieces.as_slice() {
            [] => s.serialize_bytes(&[]),
            [one] => s.serialize_bytes(one),
            _ => s.serialize_bytes(&self.to_vec()),
        }
    }
}

impl<'de> Deserialize<'de> for Data {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Data, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Data;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Data, E> {
                Ok(Data::from(v))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Data, E> {
                Ok(Data::from(v))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Data, A::Error> {
                let mut v = Vec::new();
                while let Some(b) = a.next_element::<u8>()? {
                    v.push(b);
                }
                Ok(Data::from(v))
            }
        }
        d.deserialize_bytes(V)
    }
}

/// Who a part of an outcome's payload is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Target {
    /// Every rank of the subtree (BCAST, ALLGATHER).
    All,
    /// One rank (GATHER's root, a SCATTER block, an ALLTOALL row).
    Rank(u32),
}

/// Which field of a packet disagreed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Field {
    Op,
    Root,
    Size,
}

impl std::fmt::Display for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Field::Op => "operation",
            Field::Root => "root",
            Field::Size => "size",
        })
    }
}

/// Why a collective cannot complete. The job fails with its message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum Mismatch {
    #[error("PMGR collective mismatch: rank {rank} called {got_desc} but rank {reference} called {expected_desc} (different {field})")]
    Field {
        /// The first rank found to differ.
        rank: u32,
        /// A rank it was compared with.
        reference: u32,
        field: Field,
        got_desc: String,
        expected_desc: String,
    },
    #[error("PMGR: rank {rank} contributed twice to one collective")]
    Duplicate { rank: u32 },
    #[error("PMGR: rank {rank} out of range (job has {nprocs} ranks)")]
    RankOutOfRange { rank: u32, nprocs: u32 },
    #[error("PMGR: rank {rank} sent {got} bytes of {op} data, expected {expected}")]
    BadLength { rank: u32, op: Op, got: u64, expected: u64 },
    #[error("PMGR: {op} of {sz} bytes per rank over {nprocs} ranks is too large")]
    TooLarge { op: Op, sz: u32, nprocs: u32 },
    #[error("PMGR: {op} of {total} bytes in all is too large")]
    TooMuch { op: Op, total: u64 },
    #[error("PMGR: rank {rank}'s {op} gives {got} counts for a job of {nprocs} ranks")]
    Counts { rank: u32, op: Op, got: u64, nprocs: u32 },
    #[error("PMGR: partials of jobs with {ours} and {theirs} ranks cannot be combined")]
    Nprocs { ours: u32, theirs: u32 },
    #[error("PMGR: collective incomplete: {have} of {nprocs} ranks contributed (rank {first_missing} missing)")]
    Incomplete { have: u32, nprocs: u32, first_missing: u32 },
}

/// Op, root and per-rank size of the collective (root and size 0 where the op has none;
/// size 0 for GATHERV and SCATTERV, whose sizes are per rank).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    pub op: Op,
    pub root: u32,
    pub sz: u32,
}

impl Header {
    fn of(p: &Packet) -> Header {
        let op = p.op();
        Header {
            op,
            root: if op.has_root() { p.root() } else { 0 },
            sz: if op.has_size() { p.sz() } else { 0 },
        }
    }

    /// E.g. `GATHER(root 0, 8 bytes)`.
    pub fn describe(&self) -> String {
        match self.op {
            op if op.has_root() && op.has_size() => {
                format!("{op}(root {}, {} bytes)", self.root, self.sz)
            }
            op if op.has_root() => format!("{op}(root {})", self.root),
            op if op.has_size() => format!("{op}({} bytes)", self.sz),
            op => op.name().to_string(),
        }
    }

    /// First field where `other` differs.
    fn diff(&self, other: &Header) -> Option<Field> {
        if self.op != other.op {
            Some(Field::Op)
        } else if self.root != other.root {
            Some(Field::Root)
        } else if self.sz != other.sz {
            Some(Field::Size)
        } else {
            None
        }
    }

    /// Bytes a rank's packet must carry (`None` for GATHERV and SCATTERV: any, checked
    /// apart).
    fn data_len(&self, rank: u32, nprocs: u32) -> Option<u64> {
        let sz = u64::from(self.sz);
        let n_sz = sz * u64::from(nprocs);
        Some(match self.op {
            Op::Close | Op::Abort | Op::Barrier => 0,
            Op::Bcast if rank == self.root => sz,
            Op::Scatter if rank == self.root => n_sz,
            Op::Bcast | Op::Scatter => 0,
            Op::Gather | Op::Allgather => sz,
            Op::Alltoall => n_sz,
            Op::Gatherv | Op::Scatterv => return None,
        })
    }
}

/// What one NLA knows of the current collective: the contributions of the ranks below it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partial {
    nprocs: u32,
    header: Option<Header>,
    /// Each rank's payload (SCATTERV's root: its counts, 4 bytes each little-endian, then
    /// its payload).
    contributions: BTreeMap<u32, Data>,
    /// Lowest rank that sent ABORT, and its code.
    aborted: Option<(u32, i32)>,
}

impl Partial {
    /// An empty partial for a job of `nprocs` ranks.
    pub fn new(nprocs: u32) -> Partial {
        Partial { nprocs, header: None, contributions: BTreeMap::new(), aborted: None }
    }

    pub fn nprocs(&self) -> u32 {
        self.nprocs
    }

    /// Op/root/size agreed so far (None while empty or abort-only).
    pub fn header(&self) -> Option<Header> {
        self.header
    }

    /// Number of ranks that contributed (ABORT not counted).
    pub fn len(&self) -> u32 {
        self.contributions.len() as u32
    }

    pub fn is_empty(&self) -> bool {
        self.contributions.is_empty() && self.aborted.is_none()
    }

    /// Ranks that contributed, ascending.
    pub fn ranks(&self) -> impl Iterator<Item = u32> + '_ {
        self.contributions.keys().copied()
    }

    pub fn contains(&self, rank: u32) -> bool {
        self.contributions.contains_key(&rank)
    }

    /// All `nprocs` ranks contributed.
    pub fn is_complete(&self) -> bool {
        self.contributions.len() as u64 == u64::from(self.nprocs)
    }

    /// `(rank, code)` of the lowest rank that sent ABORT.
    pub fn aborted(&self) -> Option<(u32, i32)> {
        self.aborted
    }

    /// Whether the root can resolve now.
    pub fn ready(&self) -> bool {
        self.is_complete() || self.aborted.is_some()
    }

    /// Payload bytes held (all contributions).
    pub fn data_len(&self) -> usize {
        self.contributions.values().map(Data::len).sum()
    }

    fn note_abort(&mut self, rank: u32, code: i32) {
        match self.aborted {
            Some((r, _)) if r <= rank => {}
            _ => self.aborted = Some((rank, code)),
        }
    }

    /// Add one rank's packet.
    pub fn add(&mut self, rank: u32, packet: Packet) -> Result<(), Mismatch> {
        if rank >= self.nprocs {
            return Err(Mismatch::RankOutOfRange { rank, nprocs: self.nprocs });
        }
        if let Packet::Abort { code } = packet {
            self.note_abort(rank, code);
            return Ok(());
        }
        if self.contributions.contains_key(&rank) {
            return Err(Mismatch::Duplicate { rank });
        }
        let h = Header::of(&packet);
        if h.op.has_root() && h.root >= self.nprocs {
            return Err(Mismatch::RankOutOfRange { rank: h.root, nprocs: self.nprocs });
        }
        check_size(&h, self.nprocs)?;
        let got = packet.data().len() as u64;
        match h.data_len(rank, self.nprocs) {
            Some(expected) if got != expected => {
                return Err(Mismatch::BadLength { rank, op: h.op, got, expected });
            }
            Some(_) => {}
            None => check_vsize(&packet, rank, self.nprocs)?,
        }
        if let Some(mine) = self.header {
            if let Some(field) = mine.diff(&h) {
                let reference = self.contributions.keys().next().copied().unwrap_or(rank);
                return Err(Mismatch::Field {
                    rank,
                    reference,
                    field,
                    got_desc: h.describe(),
                    expected_desc: mine.describe(),
                });
            }
        } else {
            self.header = Some(h);
        }
        let data = match packet {
            Packet::Scatterv { counts, data, .. } if !counts.is_empty() => {
                let mut d =
                    Data::from(counts.iter().flat_map(|c| c.to_le_bytes()).collect::<Vec<u8>>());
                d.push(data);
                d
            }
            p => Data::from(p.into_data()),
        };
        self.contributions.insert(rank, data);
        Ok(())
    }

    /// Take out the payloads `pick` chooses, in rank order (their ranks stay, with no
    /// payload): to be sent apart and put back with [`Partial::prepend_data`].
    pub fn take_data(&mut self, mut pick: impl FnMut(u32, &Data) -> bool) -> Vec<(u32, Data)> {
        let mut out = Vec::new();
        for (&r, d) in self.contributions.iter_mut() {
            if !d.is_empty() && pick(r, d) {
                out.push((r, std::mem::take(d)));
            }
        }
        out
    }

    /// Put `data` (sent apart) in front of `rank`'s payload; false if `rank` did not
    /// contribute.
    pub fn prepend_data(&mut self, rank: u32, mut data: Data) -> bool {
        match self.contributions.get_mut(&rank) {
            Some(d) => {
                data.append(std::mem::take(d));
                *d = data;
                true
            }
            None => false,
        }
    }

    /// Combine with another subtree's partial (order does not matter).
    pub fn merge(&mut self, other: Partial) -> Result<(), Mismatch> {
        if other.nprocs != self.nprocs {
            return Err(Mismatch::Nprocs { ours: self.nprocs, theirs: other.nprocs });
        }
        // `other` may come off the network: its ranks must be in range too.
        if let Some(&rank) = other.contributions.keys().next_back().filter(|&&r| r >= self.nprocs) {
            return Err(Mismatch::RankOutOfRange { rank, nprocs: self.nprocs });
        }
        if let Some((r, c)) = other.aborted {
            self.note_abort(r, c);
        }
        let Some(theirs) = other.header else { return Ok(()) };
        match self.header {
            None => self.header = Some(theirs),
            Some(mine) => {
                if let Some(field) = mine.diff(&theirs) {
                    let a = self.contributions.keys().next().copied().unwrap_or(0);
                    let b = other.contributions.keys().next().copied().unwrap_or(0);
                    // The lower rank is the reference; name the other as differing.
                    let (rank, reference, got, exp) =
                        if b > a { (b, a, theirs, mine) } else { (a, b, mine, theirs) };
                    return Err(Mismatch::Field {
                        rank,
                        reference,
                        field,
                        got_desc: got.describe(),
                        expected_desc: exp.describe(),
                    });
                }
            }
        }
        if let Some(&dup) = other.contributions.keys().find(|r| self.contributions.contains_key(r))
        {
            return Err(Mismatch::Duplicate { rank: dup });
        }
        let mut theirs_map = other.contributions;
        if theirs_map.len() > self.contributions.len() {
            std::mem::swap(&mut theirs_map, &mut self.contributions);
        }
        self.contributions.extend(theirs_map);
        Ok(())
    }
}

fn check_size(h: &Header, nprocs: u32) -> Result<(), Mismatch> {
    let too = Mismatch::TooLarge { op: h.op, sz: h.sz, nprocs };
    let n_sz = u64::from(h.sz) * u64::from(nprocs);
    // BCAST: every rank gets the root's sz bytes; the others, up to N*sz.
    let most = if h.op == Op::Bcast { u64::from(h.sz) } else { n_sz };
    if h.op.has_size() && most > MAX_REPLY {
        return Err(too);
    }
    Ok(())
}

/// The lengths of a GATHERV or SCATTERV packet: one rank's, or the root's counts and total.
fn check_vsize(p: &Packet, rank: u32, nprocs: u32) -> Result<(), Mismatch> {
    let op = p.op();
    match p {
        Packet::Gatherv { data, .. } if data.len() as u64 > MAX_REPLY => {
            Err(Mismatch::TooMuch { op, total: data.len() as u64 })
        }
        Packet::Scatterv { root, counts, data } => {
            let (want, total) = if rank == *root {
                (u64::from(nprocs), counts.iter().map(|&c| u64::from(c)).sum::<u64>())
            } else {
                (0, 0)
            };
            if counts.len() as u64 != want {
                return Err(Mismatch::Counts { rank, op, got: counts.len() as u64, nprocs });
            }
            if total > MAX_REPLY {
                return Err(Mismatch::TooMuch { op, total });
            }
            let got = data.len() as u64;
            if got != total {
                return Err(Mismatch::BadLength { rank, op, got, expected: total });
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The result of one collective, possibly restricted to a subtree's ranks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// Every rank sent CLOSE: close every connection.
    Closed,
    /// A rank sent ABORT on its collective connection: fail the job.
    Aborted { rank: u32, code: i32 },
    /// Every rank gets one int.
    Barrier,
    /// Every rank gets `data` (the root's `sz` bytes).
    Bcast { data: Data },
    /// The root gets `data` (`N*sz`; GATHERV: every rank's, in rank order); `None` in
    /// subtrees without the root.
    Gather { root: u32, data: Option<Data> },
    /// Rank r gets `blocks[r]` (SCATTER and SCATTERV).
    Scatter { blocks: BTreeMap<u32, Data> },
    /// Every rank gets `data` (`N*sz`).
    Allgather { data: Data },
    /// Rank r gets `blocks[r]` (`N*sz`).
    Alltoall { blocks: BTreeMap<u32, Data> },
}

/// Complete the collective at the tree root (all `nprocs` ranks contributed, or one aborted).
pub fn resolve(partial: Partial, nprocs: u32) -> Result<Outcome, Mismatch> {
    if partial.nprocs != nprocs {
        return Err(Mismatch::Nprocs { ours: nprocs, theirs: partial.nprocs });
    }
    if let Some((rank, code)) = partial.aborted {
        return Ok(Outcome::Aborted { rank, code });
    }
    if !partial.is_complete() {
        let first_missing =
            (0..nprocs).find(|r| !partial.contributions.contains_key(r)).unwrap_or(0);
        return Err(Mismatch::Incomplete { have: partial.len(), nprocs, first_missing });
    }
    if let Some(&rank) = partial.contributions.keys().next_back().filter(|&&r| r >= nprocs) {
        return Err(Mismatch::RankOutOfRange { rank, nprocs });
    }
    let Some(h) = partial.header else {
        if nprocs == 0 {
            return Ok(Outcome::Barrier);
        }
        // Contributions without a header: only a forged/corrupt partial looks like this.
        return Err(Mismatch::Incomplete { have: 0, nprocs, first_missing: 0 });
    };
    check_size(&h, nprocs)?;
    let sz = h.sz as usize;
    let n = nprocs as usize;
    let bad = |rank: u32, got: usize, expected: u64| Mismatch::BadLength {
        rank,
        op: h.op,
        got: got as u64,
        expected,
    };
    let expect = |rank: u32| h.data_len(rank, nprocs).unwrap_or(0);
    let mut c = partial.contributions;
    // Every contribution of the length its op wants (payloads sent apart may have come
    // short or long).
    for (&r, d) in &c {
        if h.data_len(r, nprocs).is_some_and(|want| d.len() as u64 != want) {
            return Err(bad(r, d.len(), expect(r)));
        }
    }
    Ok(match h.op {
        Op::Close => Outcome::Closed,
        Op::Barrier => Outcome::Barrier,
        Op::Abort => Outcome::Barrier, // never stored as a header
        Op::Bcast => Outcome::Bcast { data: c.remove(&h.root).unwrap_or_default() },
        Op::Gather => Outcome::Gather { root: h.root, data: Some(Data::join(c.into_values())) },
        Op::Allgather => Outcome::Allgather { data: Data::join(c.into_values()) },
        Op::Gatherv => {
            let total: u64 = c.values().map(|d| d.len() as u64).sum();
            if total > MAX_REPLY {
                return Err(Mismatch::TooMuch { op: h.op, total });
            }
            Outcome::Gather { root: h.root, data: Some(Data::join(c.into_values())) }
        }
        Op::Scatter => {
            let src = c.remove(&h.root).unwrap_or_default();
            let blocks = (0..nprocs).map(|r| (r, src.slice(r as usize * sz, sz))).collect();
            Outcome::Scatter { blocks }
        }
        Op::Scatterv => {
            let src = c.remove(&h.root).unwrap_or_default();
            let head = src.slice(0, 4 * n).to_vec();
            let counts: Vec<usize> = head
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
                .collect();
            let total: usize = counts.iter().sum();
            if counts.len() != n || src.len() != 4 * n + total {
                let got = src.len().saturating_sub(4 * n);
                return Err(bad(h.root, got, total as u64));
            }
            let mut at = 4 * n;
            let mut blocks = BTreeMap::new();
            for (r, len) in counts.into_iter().enumerate() {
                blocks.insert(r as u32, src.slice(at, len));
                at += len;
            }
            Outcome::Scatter { blocks }
        }
        Op::Alltoall => {
            let mut blocks = BTreeMap::new();
            for i in 0..n {
                let row = Data::join(c.values().map(|d| d.slice(i * sz, sz)));
                blocks.insert(i as u32, row);
            }
            Outcome::Alltoall { blocks }
        }
    })
}

impl Outcome {
    /// The op this outcome completes (GATHER for GATHERV, SCATTER for SCATTERV).
    pub fn op(&self) -> Op {
        match self {
            Outcome::Closed => Op::Close,
            Outcome::Aborted { .. } => Op::Abort,
            Outcome::Barrier => Op::Barrier,
            Outcome::Bcast { .. } => Op::Bcast,
            Outcome::Gather { .. } => Op::Gather,
            Outcome::Scatter { .. } => Op::Scatter,
            Outcome::Allgather { .. } => Op::Allgather,
            Outcome::Alltoall { .. } => Op::Alltoall,
        }
    }

    /// Closed or Aborted: no further collectives on these connections.
    pub fn is_final(&self) -> bool {
        matches!(self, Outcome::Closed | Outcome::Aborted { .. })
    }

    /// Only what the subtree holding `ranks` needs.
    pub fn restrict(&self, ranks: &[u32]) -> Outcome {
        let pick = |blocks: &BTreeMap<u32, Data>| {
            ranks.iter().filter_map(|r| Some((*r, blocks.get(r)?.clone()))).collect()
        };
        match self {
            Outcome::Gather { root, data } => Outcome::Gather {
                root: *root,
                data: if ranks.contains(root) { data.clone() } else { None },
            },
            Outcome::Scatter { blocks } => Outcome::Scatter { blocks: pick(blocks) },
            Outcome::Alltoall { blocks } => Outcome::Alltoall { blocks: pick(blocks) },
            other => other.clone(),
        }
    }

    /// Take out the payloads `pick` chooses, with whom each is for (what stays in the
    /// outcome is the rest of each rank's reply: nothing, for a payload taken out).
    pub fn take_data(&mut self, mut pick: impl FnMut(&Data) -> bool) -> Vec<(Target, Data)> {
        let mut out = Vec::new();
        let mut one = |t: Target, d: &mut Data| {
            if !d.is_empty() && pick(d) {
                out.push((t, std::mem::take(d)));
            }
        };
        match self {
            Outcome::Bcast { data } | Outcome::Allgather { data } => one(Target::All, data),
            Outcome::Gather { root, data: Some(d) } => one(Target::Rank(*root), d),
            Outcome::Scatter { blocks } | Outcome::Alltoall { blocks } => {
                for (&r, d) in blocks.iter_mut() {
                    one(Target::Rank(r), d);
                }
            }
            _ => {}
        }
        out
    }

    /// What to write to `rank`'s socket, as pieces, or `None` when it gets no reply.
    pub fn reply_data(&self, rank: u32) -> Option<Data> {
        match self {
            Outcome::Closed | Outcome::Aborted { .. } => None,
            Outcome::Barrier => Some(Data::from(wire::reply_barrier())),
            Outcome::Bcast { data } | Outcome::Allgather { data } => Some(data.clone()),
            Outcome::Gather { root, data } if *root == rank => data.clone(),
            Outcome::Gather { .. } => None,
            Outcome::Scatter { blocks } | Outcome::Alltoall { blocks } => {
                blocks.get(&rank).cloned()
            }
        }
    }

    /// Exactly the bytes to write to `rank`'s socket, or `None` when it gets no reply.
    pub fn reply_for(&self, rank: u32) -> Option<Vec<u8>> {
        self.reply_data(rank).map(|d| d.to_vec())
    }
}

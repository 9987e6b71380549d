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

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::wire::{self, Op, Packet};

/// Largest reply any rank may get (`N*sz`): clients compute sizes in C `int`.
pub const MAX_REPLY: u64 = i32::MAX as u64;

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
    #[error("PMGR: partials of jobs with {ours} and {theirs} ranks cannot be combined")]
    Nprocs { ours: u32, theirs: u32 },
    #[error("PMGR: collective incomplete: {have} of {nprocs} ranks contributed (rank {first_missing} missing)")]
    Incomplete { have: u32, nprocs: u32, first_missing: u32 },
}

/// Op, root and per-rank size of the collective (root and size 0 where the op has none).
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
            op if op.has_root() => format!("{op}(root {}, {} bytes)", self.root, self.sz),
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

    /// Bytes a rank's packet must carry.
    fn data_len(&self, rank: u32, nprocs: u32) -> Option<u64> {
        let sz = u64::from(self.sz);
        let n_sz = sz.checked_mul(u64::from(nprocs))?;
        Some(match self.op {
            Op::Close | Op::Abort | Op::Barrier => 0,
            Op::Bcast if rank == self.root => sz,
            Op::Scatter if rank == self.root => n_sz,
            Op::Bcast | Op::Scatter => 0,
            Op::Gather | Op::Allgather => sz,
            Op::Alltoall => n_sz,
        })
    }
}

/// One rank's contribution: its payload (empty for ops or ranks that send none).
pub type Contribution = Vec<u8>;

/// What one NLA knows of the current collective: the contributions of the ranks below it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partial {
    nprocs: u32,
    header: Option<Header>,
    contributions: BTreeMap<u32, Contribution>,
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
        let expected = h.data_len(rank, self.nprocs).ok_or(Mismatch::TooLarge {
            op: h.op,
            sz: h.sz,
            nprocs: self.nprocs,
        })?;
        let got = packet.data().len() as u64;
        if got != expected {
            return Err(Mismatch::BadLength { rank, op: h.op, got, expected });
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
        self.contributions.insert(rank, packet.into_data());
        Ok(())
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
    let n_sz = u64::from(h.sz).checked_mul(u64::from(nprocs)).ok_or(too.clone())?;
    if h.op.has_size() && n_sz > MAX_REPLY {
        return Err(too);
    }
    Ok(())
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
    Bcast { data: Vec<u8> },
    /// The root gets `data` (`N*sz`); `None` in subtrees without the root.
    Gather { root: u32, data: Option<Vec<u8>> },
    /// Rank r gets `blocks[r]`.
    Scatter { blocks: BTreeMap<u32, Vec<u8>> },
    /// Every rank gets `data` (`N*sz`).
    Allgather { data: Vec<u8> },
    /// Rank r gets `blocks[r]` (`N*sz`).
    Alltoall { blocks: BTreeMap<u32, Vec<u8>> },
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
    let too = || Mismatch::TooLarge { op: h.op, sz: h.sz, nprocs };
    let bad = |rank: u32, got: usize| Mismatch::BadLength {
        rank,
        op: h.op,
        got: got as u64,
        expected: h.data_len(rank, nprocs).unwrap_or(0),
    };
    let c = partial.contributions;
    let concat = || -> Result<Vec<u8>, Mismatch> {
        let mut all = Vec::with_capacity(sz.checked_mul(n).ok_or_else(too)?);
        for (&r, d) in &c {
            if d.len() != sz {
                return Err(bad(r, d.len()));
            }
            all.extend_from_slice(d);
        }
        Ok(all)
    };
    Ok(match h.op {
        Op::Close => Outcome::Closed,
        Op::Barrier => Outcome::Barrier,
        Op::Abort => Outcome::Barrier, // never stored as a header
        Op::Bcast => {
            let data = c.get(&h.root).cloned().unwrap_or_default();
            if data.len() != sz {
                return Err(bad(h.root, data.len()));
            }
            Outcome::Bcast { data }
        }
        Op::Gather => Outcome::Gather { root: h.root, data: Some(concat()?) },
        Op::Allgather => Outcome::Allgather { data: concat()? },
        Op::Scatter => {
            let src = c.get(&h.root).map(Vec::as_slice).unwrap_or(&[]);
            if Some(src.len()) != sz.checked_mul(n) {
                return Err(bad(h.root, src.len()));
            }
            let blocks = (0..nprocs)
                .map(|r| (r, block(src, r as usize, sz).to_vec()))
                .collect::<BTreeMap<_, _>>();
            Outcome::Scatter { blocks }
        }
        Op::Alltoall => {
            let row = sz.checked_mul(n).ok_or_else(too)?;
            sz.checked_mul(n).and_then(|x| x.checked_mul(n)).ok_or_else(too)?;
            for (&r, d) in &c {
                if d.len() != row {
                    return Err(bad(r, d.len()));
                }
            }
            let mut blocks = BTreeMap::new();
            for i in 0..n {
                let mut out = Vec::with_capacity(row);
                for d in c.values() {
                    out.extend_from_slice(block(d, i, sz));
                }
                blocks.insert(i as u32, out);
            }
            Outcome::Alltoall { blocks }
        }
    })
}

/// Block `i` of size `sz` (empty if out of bounds; lengths were checked before).
fn block(d: &[u8], i: usize, sz: usize) -> &[u8] {
    i.checked_mul(sz)
        .and_then(|a| Some((a, a.checked_add(sz)?)))
        .and_then(|(a, b)| d.get(a..b))
        .unwrap_or(&[])
}

impl Outcome {
    /// The op this outcome completes.
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
        let pick = |blocks: &BTreeMap<u32, Vec<u8>>| {
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

    /// Exactly the bytes to write to `rank`'s socket, or `None` when it gets no reply.
    pub fn reply_for(&self, rank: u32) -> Option<Vec<u8>> {
        match self {
            Outcome::Closed | Outcome::Aborted { .. } => None,
            Outcome::Barrier => Some(wire::reply_barrier()),
            Outcome::Bcast { data } => Some(wire::reply_bcast(data)),
            Outcome::Gather { root, data } if *root == rank => {
                data.as_deref().map(wire::reply_gather)
            }
            Outcome::Gather { .. } => None,
            Outcome::Scatter { blocks } => blocks.get(&rank).map(|b| wire::reply_scatter(b)),
            Outcome::Allgather { data } => Some(wire::reply_allgather(data)),
            Outcome::Alltoall { blocks } => blocks.get(&rank).map(|b| wire::reply_alltoall(b)),
        }
    }
}

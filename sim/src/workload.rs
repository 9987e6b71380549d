//! What the simulated ranks say: a PMI-1 conversation replayed from a `.pmitrace` file
//! (recorded from a real MPICH rank, see `sim/workloads/README.md`), with placeholders
//! filled in per rank; or PMGR operations, or PMIx calls (recorded from Open MPI 5's
//! ranks, what their node's PMIx server asks of the agent).
//!
//! ```text
//! # comment
//! > cmd=put kvsname={kvsname} key=P{rank}-bc value={fill:64}   send; wait for the answer
//! >peers cmd=get kvsname={kvsname} key=P{peer}-bc              for every other rank
//! >local …                                                     for every other rank of the node
//! >leaders …                                                   for the first rank of every other node
//! < cmd=get_result rc=0 …                                      the answer (only its cmd= is checked)
//! >pmgr allgather size=16                                      a PMGR collective, answer checked
//! ?rank=0,!spawned > mcmd=spawn nprocs=3 execname=self …       a spawn (one field per line)
//! >pmix fence collect=ompi5                                    a PMIx call (see [`PmixOp`])
//! ```

/// Which ranks a request line is repeated for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repeat {
    Once,
    Peers,
    Local,
    Leaders,
    /// MPICH 4's allgather over node-shared memory: with `L` ranks on the node and local
    /// index `l`, ranks `l*c .. min(size, (l+1)*c)` where `c = ceil(size / L)`.
    Slice,
}

use std::collections::HashMap;

/// A condition on the rank's place in the job (`?cond,...` before a line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cond {
    Leader,
    LocalGt1,
    SizeGt1,
    NodesGt1,
    SizeGtNodes,
    /// The rank is this one (`rank=N`).
    Rank(u32),
    /// The rank's process group was spawned by another (`spawned`).
    Spawned,
}

/// A PMGR operation of a simulated rank (`>pmgr …`, see `sim/workloads/README.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PmgrOp {
    /// Connect and say hello (version 8, rank).
    Open,
    /// `PMGR_CLOSE`, then close the connection.
    Close,
    /// `PMGR_ABORT` with this code (no answer; the job fails).
    Abort(i32),
    Barrier,
    Bcast {
        root: u32,
        size: u32,
    },
    Gather {
        root: u32,
        size: u32,
    },
    Scatter {
        root: u32,
        size: u32,
    },
    Allgather {
        size: u32,
    },
    Alltoall {
        size: u32,
    },
}

/// A PMGR line: the operation and the seed of the data each rank contributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PmgrStep {
    pub op: PmgrOp,
    pub seed: u32,
}

/// What a simulated rank asks of its node's PMIx server (`>pmix …`, see
/// `sim/workloads/README.md`). The server is the simulator's model of `libi-pmix` with
/// libpmix: it turns its local ranks' calls into the companion's messages to the agent's core
/// (`FromCompanion`), as libpmix calls its host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PmixOp {
    /// `PMIx_Init`: the rank connects to its node's server (the agent hears
    /// `ClientConnected`); the server answers the rank itself.
    Init,
    /// `PMIx_Fence` over the whole job: once every local rank entered it, one `Fence` per
    /// node. `Some(law)`: with data (`PMIX_COLLECT_DATA`), the node's blob as large as the
    /// law says for its ranks; `None`: without (an empty blob).
    Fence(Option<BlobLaw>),
    /// `PMIx_Finalize`: `ClientFinalized`, which the agent answers.
    Finalize,
}

/// How large a node's fence blob is (its PMIx server's contribution to a fence with data).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlobLaw {
    /// Open MPI 5's modex (`collect=ompi5`), recorded with `bench/pmix-record.sh` (Open MPI
    /// 5.0.11 with pml ob1, btl self,sm,tcp on one interface; OpenPMIx 4.2 server): with
    /// the node's ranks `r` (their number `c`) and `V = Σ leb(r)` (a rank packed as a
    /// LEB128 varint: 1 byte below 128, 2 below 16384, ...), the payload is
    /// `X = 23 + 51c + V` on the node of rank 0 (whose rank also puts the PML's name),
    /// `X = 2 + 51 + V` on another node with one rank, `X = 18 + 40c + V` with several (the
    /// key is packed once for all of them); the blob is `1 + leb(X) + X` bytes.
    Ompi5,
    /// `collect=PER[+BASE]`: `PER` bytes per local rank plus `BASE` per node.
    Linear { per: u32, base: u32 },
}

/// Bytes of `x` as a LEB128 varint.
fn leb(x: u64) -> u64 {
    u64::from((64 - x.leading_zeros()).max(1).div_ceil(7))
}

/// `Σ leb(r)` for `r` in `first .. first + count`.
fn leb_sum(first: u32, count: u32) -> u64 {
    let (a, b) = (u64::from(first), u64::from(first) + u64::from(count));
    // Each rank has one byte, and one more per threshold it reaches.
    let above = |t: u64| b.saturating_sub(a.max(t));
    u64::from(count) + [1u64 << 7, 1 << 14, 1 << 21, 1 << 28].iter().map(|&t| above(t)).sum::<u64>()
}

impl BlobLaw {
    /// The blob of a node running `count` consecutive ranks from `first` (ranks of the
    /// job); 0 for a node without ranks (it has no server).
    pub fn size(&self, first: u32, count: u32) -> u64 {
        self.size_of(count, first == 0 && count > 0, leb_sum(first, count))
    }

    /// [`Self::size`] of a node whose ranks are `ranks` (in any order).
    pub fn size_of_ranks(&self, ranks: &[u32]) -> u64 {
        let v = ranks.iter().map(|&r| leb(u64::from(r))).sum();
        self.size_of(ranks.len() as u32, ranks.contains(&0), v)
    }

    /// `count` ranks, rank 0 among them or not, their ranks' varints `v` bytes in all.
    fn size_of(&self, count: u32, rank0: bool, v: u64) -> u64 {
        let c = u64::from(count);
        if c == 0 {
            return 0;
        }
        match *self {
            BlobLaw::Linear { per, base } => u64::from(base) + u64::from(per) * c,
            BlobLaw::Ompi5 => {
                let x = match (rank0, c) {
                    (true, _) => 23 + 51 * c + v,
                    (false, 1) => 2 + 51 + v,
                    (false, _) => 18 + 40 * c + v,
                };
                1 + leb(x) + x
            }
        }
    }
}

/// `>pmix init|finalize|fence [collect=ompi5|collect=PER[+BASE]]`.
fn parse_pmix(req: &str) -> Result<PmixOp, String> {
    let mut words = req.split_whitespace();
    let name = words.next().unwrap_or("");
    let mut law = None;
    for w in words {
        let v = match w.split_once('=') {
            Some(("collect", v)) if name == "fence" => v,
            _ => return Err(format!("pmix {name}: unexpected '{w}'")),
        };
        let bad = || format!("pmix fence: bad collect '{v}' (ompi5, PER or PER+BASE)");
        law = Some(match v {
            "ompi5" => BlobLaw::Ompi5,
            _ => {
                let (per, base) = v.split_once('+').unwrap_or((v, "0"));
                let num = |x: &str| x.parse::<u32>().map_err(|_| bad());
                BlobLaw::Linear { per: num(per)?, base: num(base)? }
            }
        });
    }
    match name {
        "init" => Ok(PmixOp::Init),
        "finalize" => Ok(PmixOp::Finalize),
        "fence" => Ok(PmixOp::Fence(law)),
        _ => Err(format!("unknown pmix call '{name}' (init, fence, finalize)")),
    }
}

/// One piece of a request template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Rank,
    Size,
    Kvsname,
    Appnum,
    Peer,
    Node,
    Leader,
    Fill(usize),
}

/// One request line of a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub repeat: Repeat,
    pieces: Vec<Piece>,
    /// The `cmd=` of the expected answer, if the trace gives one.
    pub expect: Option<String>,
    /// The expected answer's template, when it says which `value=` must come back (rendered
    /// for the peer: a `get` of another rank's key returns what that rank put).
    answer: Option<Vec<Piece>>,
    /// No answer comes (`abort`).
    pub one_way: bool,
    /// A PMI-2 frame rather than a PMI-1 line.
    pub pmi2: bool,
    /// The answer must carry a non-zero `rc` (a key nobody set).
    pub expect_fail: bool,
    /// Any `rc` will do (`rc=*`: a key the process manager may or may not set).
    pub any_rc: bool,
    /// Played only when every condition holds (`bool`: negated).
    when: Vec<(Cond, bool)>,
    /// A PMGR operation instead of a PMI request (`>pmgr`).
    pub pmgr: Option<PmgrStep>,
    /// A PMIx call instead of a PMI request (`>pmix`).
    pub pmix: Option<PmixOp>,
}

impl Step {
    /// A step that is not a PMI request: a PMGR operation (no PMI answer; the PMGR answer
    /// is checked apart) or a PMIx call (answered by the node's PMIx server).
    fn call(when: Vec<(Cond, bool)>, pmgr: Option<PmgrStep>, pmix: Option<PmixOp>) -> Step {
        Step {
            pmi2: false,
            repeat: Repeat::Once,
            pieces: Vec::new(),
            expect: None,
            answer: None,
            one_way: pmgr.is_some(),
            expect_fail: false,
            any_rc: false,
            when,
            pmgr,
            pmix,
        }
    }
}

/// A parsed workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    pub name: String,
    pub steps: Vec<Step>,
    /// Requests that do not depend on the rank (only on the kvsname), rendered for
    /// `fixed_kvsname`.
    fixed: Vec<Option<Vec<u8>>>,
    fixed_kvsname: String,
}

/// A step a rank plays: its index, its fence epoch, and for a put its key and value length.
type PlayedStep = (usize, u32, Option<(String, usize)>);

/// What one fence epoch of a job puts into the KVS ([`Trace::kvs_use`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EpochUse {
    /// Pairs put in the epoch, job-wide, and their key and value bytes.
    pub pairs: u64,
    pub key_bytes: u64,
    pub value_bytes: u64,
    /// Distinct keys of the epoch, put on other nodes, that one node's ranks get.
    pub fetched: u64,
}

/// Where a rank stands in the job, for placeholders.
#[derive(Debug, Clone, Copy)]
pub struct Who<'a> {
    pub rank: u32,
    pub size: u32,
    pub node: u32,
    pub kvsname: &'a str,
    /// Ranks of this rank's node: `first..first+count`.
    pub local_first: u32,
    pub local_count: u32,
    /// Ranks per node when every node has the same number (for `>leaders`).
    pub ppn: u32,
    /// Nodes of the job.
    pub nodes: u32,
    /// The rank's process group was spawned (`MPI_Comm_spawn`).
    pub spawned: bool,
}

/// The built-in workloads (their files are compiled in).
pub const BUILTIN: &[(&str, &str)] = &[
    ("mpich-init", include_str!("../workloads/mpich4-init.pmitrace")),
    ("mpich5-init", include_str!("../workloads/mpich5-init.pmitrace")),
    ("exchange", include_str!("../workloads/exchange.pmitrace")),
    ("fence", include_str!("../workloads/fence.pmitrace")),
    ("pmi2", include_str!("../workloads/pmi2.pmitrace")),
    ("pmgr", include_str!("../workloads/pmgr.pmitrace")),
    ("spawn", include_str!("../workloads/spawn.pmitrace")),
    ("libi-microbench", include_str!("../workloads/libi-microbench.pmitrace")),
    ("ompi5-init", include_str!("../workloads/ompi5-init.pmitrace")),
];

/// A workload that cannot be read or does not parse (one line).
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// Neither a built-in workload nor a file that can be read: the name, and why.
    #[error("workload '{name}': {error} (built-in: {})", builtin_names())]
    Read { name: String, error: std::io::Error },
    /// A line that does not parse: the workload, the line's number, and why.
    #[error("{name}:{line}: {why}")]
    Line { name: String, line: usize, why: String },
    /// A workload without a request: its name.
    #[error("{0}: no request in the workload")]
    Empty(String),
}

/// The built-in workloads' names, for a message.
fn builtin_names() -> String {
    BUILTIN.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

impl Trace {
    /// A built-in workload by name, or a `.pmitrace` file.
    pub fn load(name: &str) -> Result<Trace, TraceError> {
        if let Some((n, text)) = BUILTIN.iter().find(|(n, _)| *n == name) {
            return Trace::parse(n, text);
        }
        let text = std::fs::read_to_string(name)
            .map_err(|error| TraceError::Read { name: name.to_string(), error })?;
        Trace::parse(name, &text)
    }

    pub fn parse(name: &str, text: &str) -> Result<Trace, TraceError> {
        let mut steps: Vec<Step> = Vec::new();
        for (no, line) in text.lines().enumerate() {
            let at = |why: String| TraceError::Line { name: name.to_string(), line: no + 1, why };
            let line = line.trim_end();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(ans) = line.strip_prefix("< ") {
                let cmd = fields(ans.as_bytes())
                    .find_map(|w| w.strip_prefix("cmd="))
                    .ok_or_else(|| at("an answer without cmd=".into()))?;
                match steps.last_mut() {
                    Some(s) if s.expect.is_none() => {
                        s.expect = Some(cmd.to_string());
                        let rc = fields(ans.as_bytes()).find_map(|w| w.strip_prefix("rc="));
                        s.any_rc = rc == Some("*");
                        s.expect_fail = rc.is_some_and(|rc| rc != "0" && rc != "*");
                        if fields(ans.as_bytes()).any(|w| w.starts_with("value=")) {
                            s.answer = Some(template(ans).map_err(at)?);
                        }
                    }
                    _ => return Err(at("an answer without a request before it".into())),
                }
                continue;
            }
            let (when, line) = match line.strip_prefix('?') {
                Some(rest) => {
                    let (conds, rest) = rest
                        .split_once(' ')
                        .ok_or_else(|| at(format!("a condition without a line: '{line}'")))?;
                    let when = conds
                        .split(',')
                        .map(|c| {
                            let (neg, c) = match c.strip_prefix('!') {
                                Some(c) => (true, c),
                                None => (false, c),
                            };
                            let cond = match c {
                                _ if c.starts_with("rank=") => match c[5..].parse() {
                                    Ok(r) => Cond::Rank(r),
                                    Err(_) => return Err(at(format!("bad condition '{c}'"))),
                                },
                                "spawned" => Cond::Spawned,
                                "leader" => Cond::Leader,
                                "local>1" => Cond::LocalGt1,
                                "size>1" => Cond::SizeGt1,
                                "nodes>1" => Cond::NodesGt1,
                                "size>nodes" => Cond::SizeGtNodes,
                                _ => return Err(at(format!("unknown condition '{c}'"))),
                            };
                            Ok((cond, neg))
                        })
                        .collect::<Result<Vec<_>, TraceError>>()?;
                    (when, rest)
                }
                None => (Vec::new(), line),
            };
            if line.starts_with('<') {
                return Err(at("a condition belongs on the request line, not the answer".into()));
            }
            let (tag, req) = line
                .split_once(' ')
                .filter(|(t, _)| t.starts_with('>'))
                .ok_or_else(|| at(format!("expected '> request' or '< answer', got '{line}'")))?;
            // A PMGR operation or a PMIx call rather than a PMI request.
            let call = match tag {
                ">pmgr" => Some((Some(parse_pmgr(req).map_err(at)?), None)),
                ">pmix" => Some((None, Some(parse_pmix(req).map_err(at)?))),
                _ => None,
            };
            if let Some((pmgr, pmix)) = call {
                steps.push(Step::call(when, pmgr, pmix));
                continue;
            }
            // `>2…`: a PMI-2 frame (6-byte length header, `;`-separated body, no newline).
            let (pmi2, tag) = match tag.strip_prefix(">2") {
                Some(rest) => (true, format!(">{rest}")),
                None => (false, tag.to_string()),
            };
            let repeat = match tag.as_str() {
                ">" => Repeat::Once,
                ">peers" => Repeat::Peers,
                ">local" => Repeat::Local,
                ">leaders" => Repeat::Leaders,
                ">slice" => Repeat::Slice,
                t => return Err(at(format!("unknown request tag '{t}'"))),
            };
            let pieces = template(req).map_err(at)?;
            if repeat != Repeat::Once && !pieces.contains(&Piece::Peer) {
                return Err(at(format!("'{tag}' repeats a request that has no {{peer}}")));
            }
            let one_way = req.contains("cmd=abort");
            steps.push(Step {
                pmi2,
                repeat,
                pieces,
                expect: None,
                answer: None,
                one_way,
                expect_fail: false,
                any_rc: false,
                when,
                pmgr: None,
                pmix: None,
            });
        }
        if steps.is_empty() {
            return Err(TraceError::Empty(name.to_string()));
        }
        let fixed = vec![None; steps.len()];
        Ok(Trace { name: name.to_string(), steps, fixed, fixed_kvsname: String::new() })
    }

    /// Render once the requests that are the same for every rank of a job named `kvsname`.
    pub fn fix_for(mut self, kvsname: &str) -> Trace {
        let who = Who {
            rank: 0,
            size: 1,
            node: 0,
            kvsname,
            local_first: 0,
            local_count: 1,
            ppn: 1,
            nodes: 1,
            spawned: false,
        };
        self.fixed = (0..self.steps.len())
            .map(|i| {
                let st = &self.steps[i];
                let constant = st.repeat == Repeat::Once
                    && st.pmgr.is_none()
                    && st.pmix.is_none()
                    && st.pieces.iter().all(|p| matches!(p, Piece::Text(_) | Piece::Kvsname));
                constant.then(|| self.render(i, &who, 0, 0))
            })
            .collect();
        self.fixed_kvsname = kvsname.to_string();
        self
    }

    /// Whether the workload has `>slice` lines (see [`Self::without_slices`]).
    pub fn has_slices(&self) -> bool {
        self.steps.iter().any(|s| s.repeat == Repeat::Slice)
    }

    /// The same workload without its `>slice` lines (MPICH 4's allgather of business
    /// cards, which makes every node fetch every card: nodes × ranks gets in all).
    pub fn without_slices(mut self) -> Trace {
        let keep: Vec<bool> = self.steps.iter().map(|s| s.repeat != Repeat::Slice).collect();
        let mut it = keep.iter();
        self.steps.retain(|_| *it.next().unwrap_or(&true));
        let mut it = keep.iter();
        self.fixed.retain(|_| *it.next().unwrap_or(&true));
        self.name.push_str("-noslice");
        self
    }

    /// The peers step `step` is repeated for, for rank `who`, as an iterator count and an
    /// indexer (so that nothing per peer is stored).
    pub fn peer_count(&self, step: usize, who: &Who) -> u32 {
        if !self.plays(step, who) {
            return 0;
        }
        match self.steps[step].repeat {
            Repeat::Slice => {
                let (l, c) = slice(who);
                who.size.min(l * c + c).saturating_sub(l * c)
            }
            Repeat::Once => 1,
            Repeat::Peers => who.size.saturating_sub(1),
            Repeat::Local => who.local_count.saturating_sub(1),
            Repeat::Leaders => (who.size.div_ceil(who.ppn.max(1))).saturating_sub(1),
        }
    }

    /// Whether rank `who` plays step `step` (every condition of the line holds).
    fn plays(&self, step: usize, who: &Who) -> bool {
        let holds = |c: Cond| match c {
            Cond::Leader => who.rank == who.local_first,
            Cond::LocalGt1 => who.local_count > 1,
            Cond::SizeGt1 => who.size > 1,
            Cond::NodesGt1 => who.nodes > 1,
            Cond::SizeGtNodes => who.size > who.nodes,
            Cond::Rank(r) => who.rank == r,
            Cond::Spawned => who.spawned,
        };
        self.steps[step].when.iter().all(|&(c, neg)| holds(c) != neg)
    }

    /// The steps rank `who` plays, each with its fence epoch (the fences it entered before)
    /// and, for a put, its key and value.
    fn kvs_steps(&self, who: &Who) -> Vec<PlayedStep> {
        let mut out = Vec::new();
        let mut epoch = 0u32;
        for step in 0..self.steps.len() {
            let st = &self.steps[step];
            if st.pmgr.is_some() || st.pmix.is_some() || !self.plays(step, who) {
                continue;
            }
            let line = self.render(step, who, who.rank, 0);
            let field = |name: &str| fields(&line).find_map(|w| w.strip_prefix(name));
            let put = match field("cmd=") {
                Some("barrier_in" | "kvs-fence") => {
                    epoch += 1;
                    continue;
                }
                Some("put" | "kvs-put") => {
                    field("key=").map(|k| (k.to_string(), field("value=").map_or(0, str::len)))
                }
                _ => None,
            };
            out.push((step, epoch, put));
        }
        out
    }

    /// What the ranks of a job of `nodes` × `ppn` put into the KVS and fetch from other
    /// nodes, per fence epoch (for the memory estimate, [`crate::memory`]). Every node
    /// but the first plays as the second does; the first may differ (`?rank=0`). Fetched:
    /// the distinct keys of other nodes that one node's ranks get between them
    /// (`>peers`, `>slice`, `>leaders`), whoever of them put it.
    pub fn kvs_use(&self, nodes: u32, ppn: u32) -> Vec<EpochUse> {
        let size = nodes.saturating_mul(ppn);
        let who = |rank: u32| {
            let node = rank / ppn.max(1);
            Who {
                rank,
                size,
                node,
                kvsname: "kvs",
                local_first: node * ppn,
                local_count: ppn,
                ppn,
                nodes,
                spawned: false,
            }
        };
        let mut epochs: Vec<EpochUse> = Vec::new();
        let at = |epochs: &mut Vec<EpochUse>, e: u32| {
            let e = e as usize;
            if epochs.len() <= e {
                epochs.resize(e + 1, EpochUse::default());
            }
            e
        };
        let mut reps = vec![(1u64, 0..ppn.min(size))];
        if nodes > 1 {
            reps.push((u64::from(nodes - 1), ppn..2 * ppn));
        }
        for (weight, ranks) in reps {
            for r in ranks {
                for (_, epoch, put) in self.kvs_steps(&who(r)) {
                    if let Some((key, value)) = put {
                        let e = at(&mut epochs, epoch);
                        epochs[e].pairs += weight;
                        epochs[e].key_bytes += weight * key.len() as u64;
                        epochs[e].value_bytes += weight * value as u64;
                    }
                }
            }
        }
        if nodes < 2 {
            return epochs;
        }
        // The keys node 0's leader and one other rank of it put (what others fetch of them).
        let puts = |r: u32| -> HashMap<String, (usize, u32)> {
            (self.kvs_steps(&who(r)).into_iter())
                .filter_map(|(step, epoch, put)| put.map(|(k, _)| (k, (step, epoch))))
                .collect()
        };
        let (leader, other) = (puts(0), if ppn > 1 { puts(1) } else { HashMap::new() });
        let remote = u64::from(nodes - 1);
        // The most keys of each put step one node fetches.
        let mut fetched: HashMap<usize, (u32, u64)> = HashMap::new();
        for r in ppn..2 * ppn {
            let w = who(r);
            for (step, _, _) in self.kvs_steps(&w) {
                let repeat = self.steps[step].repeat;
                if matches!(repeat, Repeat::Once | Repeat::Local) {
                    continue;
                }
                let key_for = |peer: u32| {
                    let line = self.render(step, &w, peer, 0);
                    let key = fields(&line).find_map(|f| f.strip_prefix("key="));
                    key.map(str::to_string)
                };
                let hit = |m: &HashMap<String, (usize, u32)>, peer| {
                    key_for(peer).and_then(|k| m.get(&k).copied())
                };
                let (by_leaders, by_others) = (hit(&leader, 0), hit(&other, 1));
                let by_others = by_others.filter(|_| repeat != Repeat::Leaders);
                let n = by_leaders.map_or(0, |_| remote)
                    + by_others.map_or(0, |_| remote * u64::from(ppn - 1));
                if let Some((s, e)) = by_leaders.or(by_others) {
                    let f = fetched.entry(s).or_insert((e, 0));
                    f.1 = f.1.max(n);
                }
            }
        }
        for (_, (epoch, n)) in fetched {
            let e = at(&mut epochs, epoch);
            epochs[e].fetched += n;
        }
        epochs
    }

    /// The `i`-th peer of step `step` for `who`.
    pub fn peer(&self, step: usize, i: u32, who: &Who) -> u32 {
        match self.steps[step].repeat {
            Repeat::Slice => slice(who).0 * slice(who).1 + i,
            Repeat::Once => who.rank,
            Repeat::Peers => (who.rank + 1 + i) % who.size.max(1),
            Repeat::Local => {
                let off = who.rank - who.local_first;
                who.local_first + (off + 1 + i) % who.local_count.max(1)
            }
            Repeat::Leaders => {
                let nodes = who.size.div_ceil(who.ppn.max(1));
                ((who.node + 1 + i) % nodes) * who.ppn.max(1)
            }
        }
    }

    /// The `value=` the answer to step `step` (asked of `peer`) must carry, if the trace
    /// says.
    pub fn expected_value(&self, step: usize, who: &Who, peer: u32) -> Option<String> {
        let pieces = self.steps[step].answer.as_ref()?;
        let as_peer = Who { rank: peer, ..*who };
        let line = String::from_utf8(fill(pieces, &as_peer, peer, 0)).ok()?;
        let value = fields(line.as_bytes()).find_map(|w| w.strip_prefix("value="))?;
        Some(value.to_string())
    }

    /// The request of step `step` for `who` and `peer` (rendered once per trace when it is
    /// the same for every rank), into `out` (replacing what it held): the simulator renders
    /// each request when it arrives, into one buffer, instead of holding millions in its queue.
    pub fn request_into(&self, step: usize, who: &Who, peer: u32, out: &mut Vec<u8>) {
        match &self.fixed[step] {
            Some(b) => {
                out.clear();
                out.extend_from_slice(b);
            }
            None => self.render_into(step, who, peer, 0, out),
        }
    }

    /// Whether any line speaks PMGR (the job then serves it).
    pub fn uses_pmgr(&self) -> bool {
        self.steps.iter().any(|s| s.pmgr.is_some())
    }

    /// Whether any line speaks PMIx (the job is then a PMIx job: each node with ranks has
    /// a PMIx server).
    pub fn uses_pmix(&self) -> bool {
        self.steps.iter().any(|s| s.pmix.is_some())
    }

    /// The blob laws of the fences with data, in order (for the memory estimate).
    pub fn pmix_blobs(&self) -> Vec<BlobLaw> {
        let laws = self.steps.iter().filter_map(|s| match s.pmix {
            Some(PmixOp::Fence(law)) => law,
            _ => None,
        });
        laws.collect()
    }

    /// The request line (with its newline) of step `step` for `who` and `peer`. A PMI-1
    /// `mcmd=` block (a spawn) is sent one field per line.
    pub fn render(&self, step: usize, who: &Who, peer: u32, appnum: u32) -> Vec<u8> {
        let mut out = Vec::new();
        self.render_into(step, who, peer, appnum, &mut out);
        out
    }

    /// [`Self::render`] into `out` (replacing what it held).
    pub fn render_into(&self, step: usize, who: &Who, peer: u32, appnum: u32, out: &mut Vec<u8>) {
        out.clear();
        fill_into(&self.steps[step].pieces, who, peer, appnum, out);
        if !self.steps[step].pmi2 && out.starts_with(b"mcmd=") {
            out.iter_mut().filter(|b| **b == b' ').for_each(|b| *b = b'\n');
        }
        if self.steps[step].pmi2 {
            let head = format!("{:<6}", out.len());
            out.splice(0..0, head.into_bytes());
        } else {
            out.push(b'\n');
        }
    }
}

/// This rank's local index and the slice length of `>slice`.
fn slice(who: &Who) -> (u32, u32) {
    (who.rank - who.local_first, who.size.div_ceil(who.local_count.max(1)))
}

/// A template with its placeholders filled in.
fn fill(pieces: &[Piece], who: &Who, peer: u32, appnum: u32) -> Vec<u8> {
    let mut out = Vec::new();
    fill_into(pieces, who, peer, appnum, &mut out);
    out
}

/// [`fill`], appended to `out`.
fn fill_into(pieces: &[Piece], who: &Who, peer: u32, appnum: u32, out: &mut Vec<u8>) {
    use std::io::Write as _;
    for p in pieces {
        // Writes to a vector do not fail.
        let _ = match p {
            Piece::Text(t) => out.write_all(t.as_bytes()),
            Piece::Rank => write!(out, "{}", who.rank),
            Piece::Size => write!(out, "{}", who.size),
            Piece::Kvsname => out.write_all(who.kvsname.as_bytes()),
            Piece::Appnum => write!(out, "{appnum}"),
            Piece::Peer => write!(out, "{peer}"),
            Piece::Leader => write!(out, "{}", who.local_first),
            Piece::Node => write!(out, "{}", who.node),
            Piece::Fill(n) => {
                // As the replay client (tests/programs/pmi_replay.c) fills them.
                const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
                out.extend((0..*n).map(|i| DIGITS[(i + who.rank as usize) % 36]));
                Ok(())
            }
        };
    }
}

/// `>pmgr OP [root=N] [size=N] [seed=N] [code=N]`.
fn parse_pmgr(req: &str) -> Result<PmgrStep, String> {
    let mut words = req.split_whitespace();
    let name = words.next().unwrap_or("");
    let (mut root, mut size, mut seed, mut code) = (None, None, 0u32, None);
    for w in words {
        let (k, v) = w.split_once('=').ok_or_else(|| format!("pmgr: '{w}' is not key=value"))?;
        let bad = || format!("pmgr: bad {k} '{v}'");
        match k {
            "root" => root = Some(v.parse::<u32>().map_err(|_| bad())?),
            "size" => size = Some(v.parse::<u32>().ok().filter(|n| *n > 0).ok_or_else(bad)?),
            "seed" => seed = v.parse::<u32>().map_err(|_| bad())?,
            "code" => code = Some(v.parse::<i32>().map_err(|_| bad())?),
            _ => return Err(format!("pmgr: unknown field '{k}'")),
        }
    }
    let need_size = || size.ok_or_else(|| format!("pmgr {name}: size=N missing"));
    let root_size = || Ok::<_, String>((root.unwrap_or(0), need_size()?));
    let op = match name {
        "open" => PmgrOp::Open,
        "close" => PmgrOp::Close,
        "abort" => PmgrOp::Abort(code.unwrap_or(-1)),
        "barrier" => PmgrOp::Barrier,
        "bcast" => root_size().map(|(root, size)| PmgrOp::Bcast { root, size })?,
        "gather" => root_size().map(|(root, size)| PmgrOp::Gather { root, size })?,
        "scatter" => root_size().map(|(root, size)| PmgrOp::Scatter { root, size })?,
        "allgather" => PmgrOp::Allgather { size: need_size()? },
        "alltoall" => PmgrOp::Alltoall { size: need_size()? },
        _ => return Err(format!("unknown pmgr operation '{name}'")),
    };
    Ok(PmgrStep { op, seed })
}

/// The `len` bytes rank `rank` contributes to its collective number `coll` (counted from 0
/// per rank) of a line with seed `seed`: a hash of all four and the byte's offset, so that a
/// block from another rank, another collective or another place is told apart.
pub fn pmgr_data(rank: u32, coll: u32, seed: u32, len: usize) -> Vec<u8> {
    pmgr_data_at(rank, coll, seed, 0, len)
}

/// Bytes `from .. from + len` of what [`pmgr_data`] gives (without making the bytes before).
pub fn pmgr_data_at(rank: u32, coll: u32, seed: u32, from: usize, len: usize) -> Vec<u8> {
    let base = (u64::from(rank) << 32 | u64::from(coll)) ^ (u64::from(seed) << 16).rotate_left(7);
    let word = |i: u64| {
        // splitmix64 of (base, i)
        let mut z = base.wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)).to_le_bytes()
    };
    let mut out = Vec::with_capacity(len);
    let mut at = from;
    while out.len() < len {
        let (i, skip) = (at / 8, at % 8);
        let take = (len - out.len()).min(8 - skip);
        out.extend_from_slice(&word(i as u64)[skip..skip + take]);
        at += take;
    }
    out
}

/// What rank `rank` of `size` sends for `op` (collective number `coll`, seed `seed`), and
/// whether an answer comes back to it.
pub fn pmgr_request(op: PmgrOp, rank: u32, size: u32, coll: u32, seed: u32) -> (Vec<u8>, bool) {
    use pmgr::wire::Packet;
    let n = size as usize;
    let data = |len: usize| pmgr_data(rank, coll, seed, len);
    let packet = match op {
        PmgrOp::Open => return (pmgr::wire::encode_hello(rank as i32), false),
        PmgrOp::Close => Packet::Close,
        PmgrOp::Abort(code) => Packet::Abort { code },
        PmgrOp::Barrier => Packet::Barrier,
        PmgrOp::Bcast { root, size: sz } => {
            let data = if rank == root { data(sz as usize) } else { Vec::new() };
            Packet::Bcast { root, sz, data: data.into() }
        }
        PmgrOp::Gather { root, size: sz } => {
            Packet::Gather { root, sz, data: data(sz as usize).into() }
        }
        PmgrOp::Scatter { root, size: sz } => {
            let data = if rank == root { data(n * sz as usize) } else { Vec::new() };
            Packet::Scatter { root, sz, data: data.into() }
        }
        PmgrOp::Allgather { size: sz } => Packet::Allgather { sz, data: data(sz as usize).into() },
        PmgrOp::Alltoall { size: sz } => {
            Packet::Alltoall { sz, data: data(n * sz as usize).into() }
        }
    };
    let answered = match op {
        PmgrOp::Open | PmgrOp::Close | PmgrOp::Abort(_) => false,
        PmgrOp::Gather { root, .. } => rank == root,
        _ => true,
    };
    (packet.encode(), answered)
}

/// What rank `rank` of `size` must receive for `op` by PMGR's semantics (§3.4 of
/// `docs/spec/pmgr-wire.md`), computed from every rank's contribution; `None` for a barrier
/// (4 bytes, value ignored) and ops without an answer.
pub fn pmgr_expected(op: PmgrOp, rank: u32, size: u32, coll: u32, seed: u32) -> Option<Vec<u8>> {
    let of = |r: u32, len: u32| pmgr_data(r, coll, seed, len as usize);
    // Block `i` (of `sz` bytes) of what rank `r` contributes.
    let block = |r: u32, i: u32, sz: u32| {
        pmgr_data_at(r, coll, seed, i as usize * sz as usize, sz as usize)
    };
    Some(match op {
        PmgrOp::Bcast { root, size: sz } => of(root, sz),
        PmgrOp::Gather { size: sz, .. } | PmgrOp::Allgather { size: sz } => {
            (0..size).flat_map(|r| of(r, sz)).collect()
        }
        PmgrOp::Scatter { root, size: sz } => block(root, rank, sz),
        PmgrOp::Alltoall { size: sz } => (0..size).flat_map(|s| block(s, rank, sz)).collect(),
        _ => return None,
    })
}

fn template(req: &str) -> Result<Vec<Piece>, String> {
    let mut out = Vec::new();
    let mut rest = req;
    while let Some(open) = rest.find('{') {
        if open > 0 {
            out.push(Piece::Text(rest[..open].to_string()));
        }
        let close = rest[open..]
            .find('}')
            .map(|c| open + c)
            .ok_or_else(|| format!("unclosed '{{' in '{req}'"))?;
        let name = &rest[open + 1..close];
        out.push(match name {
            "rank" => Piece::Rank,
            "size" => Piece::Size,
            "kvsname" => Piece::Kvsname,
            "appnum" => Piece::Appnum,
            "peer" => Piece::Peer,
            "node" => Piece::Node,
            "leader" => Piece::Leader,
            f => match f.strip_prefix("fill:").map(str::parse::<usize>) {
                Some(Ok(n)) if n <= 1 << 20 => Piece::Fill(n),
                _ => return Err(format!("unknown placeholder '{{{name}}}'")),
            },
        });
        rest = &rest[close + 1..];
    }
    if !rest.is_empty() {
        out.push(Piece::Text(rest.to_string()));
    }
    Ok(out)
}

/// The `key=value` fields of an answer (a PMI-1 line or a PMI-2 frame's body).
fn fields(bytes: &[u8]) -> impl Iterator<Item = &str> {
    std::str::from_utf8(bytes).unwrap_or("").split(|c: char| c.is_whitespace() || c == ';')
}

/// The `cmd=` of an answer line.
pub fn answer_cmd(bytes: &[u8]) -> Option<&str> {
    fields(bytes).find_map(|w| w.strip_prefix("cmd="))
}

/// The `value=` of an answer line.
pub fn answer_value(bytes: &[u8]) -> Option<&str> {
    fields(bytes).find_map(|w| w.strip_prefix("value="))
}

/// The `rc=` of an answer line (absent counts as 0).
pub fn answer_rc(bytes: &[u8]) -> i32 {
    fields(bytes).find_map(|w| w.strip_prefix("rc=")).and_then(|v| v.parse().ok()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(rank: u32) -> Who<'static> {
        Who {
            rank,
            size: 8,
            node: rank / 2,
            kvsname: "kvs_1",
            local_first: rank / 2 * 2,
            local_count: 2,
            ppn: 2,
            nodes: 4,
            spawned: false,
        }
    }

    /// MPICH 4's slices cover every rank once per node; conditions pick lines per rank.
    #[test]
    fn slices_and_conditions() {
        let t = Trace::parse(
            "t",
            "?leader > cmd=put key=b{rank} value=x\n?!leader,size>nodes > cmd=get key=b{leader}\n>slice cmd=get key=c{peer}\n",
        )
        .expect("parse");
        let mut got = Vec::new();
        for r in [2u32, 3] {
            let w = who(r);
            assert_eq!(t.peer_count(0, &w), u32::from(r == 2));
            assert_eq!(t.peer_count(1, &w), u32::from(r == 3));
            got.extend((0..t.peer_count(2, &w)).map(|i| t.peer(2, i, &w)));
        }
        assert_eq!(got, (0..8).collect::<Vec<_>>());
        assert_eq!(t.render(1, &who(3), 3, 0), b"cmd=get key=b2\n".to_vec());
        assert!(Trace::parse("t", "?bogus > cmd=x\n").is_err());
    }

    #[test]
    fn placeholders_and_repeats() {
        let t = Trace::parse(
            "t",
            "# x\n> cmd=put kvsname={kvsname} key=k{rank} value={fill:3}\n< cmd=put_result rc=0\n>peers cmd=get kvsname={kvsname} key=k{peer}\n>leaders cmd=get kvsname={kvsname} key=k{peer}\n>local cmd=get kvsname={kvsname} key=k{peer}\n",
        )
        .expect("parse");
        assert_eq!(t.steps.len(), 4);
        assert_eq!(t.steps[0].expect.as_deref(), Some("put_result"));
        let w = who(3);
        assert_eq!(t.render(0, &w, 3, 0), b"cmd=put kvsname=kvs_1 key=k3 value=345\n".to_vec());
        assert_eq!(t.peer_count(1, &w), 7);
        let peers: Vec<u32> = (0..7).map(|i| t.peer(1, i, &w)).collect();
        assert_eq!(peers, vec![4, 5, 6, 7, 0, 1, 2]);
        let leaders: Vec<u32> = (0..t.peer_count(2, &w)).map(|i| t.peer(2, i, &w)).collect();
        assert_eq!(leaders, vec![4, 6, 0]);
        let local: Vec<u32> = (0..t.peer_count(3, &w)).map(|i| t.peer(3, i, &w)).collect();
        assert_eq!(local, vec![2]);
    }

    #[test]
    fn bad_traces_are_errors() {
        assert!(Trace::parse("t", "").is_err());
        assert!(Trace::parse("t", "< cmd=x\n").is_err());
        assert!(Trace::parse("t", ">peers cmd=get key=k{rank}\n").is_err());
        assert!(Trace::parse("t", "> cmd=get key={nope}\n").is_err());
        assert!(Trace::parse("t", "> cmd=get key={rank\n").is_err());
        assert!(Trace::parse("t", ">x cmd=get\n").is_err());
        for bad in [">pmix frob\n", ">pmix fence collect=x\n", ">pmix init collect=ompi5\n"] {
            assert!(Trace::parse("t", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn pmix_lines() {
        let t = Trace::parse(
            "x",
            ">pmix init\n>pmix fence collect=ompi5\n>pmix fence collect=40+8\n>pmix fence\n>pmix finalize\n",
        )
        .expect("parse");
        assert!(t.uses_pmix() && !t.uses_pmgr());
        let ops: Vec<_> = t.steps.iter().map(|s| s.pmix).collect();
        let linear = BlobLaw::Linear { per: 40, base: 8 };
        assert_eq!(
            ops,
            [
                Some(PmixOp::Init),
                Some(PmixOp::Fence(Some(BlobLaw::Ompi5))),
                Some(PmixOp::Fence(Some(linear))),
                Some(PmixOp::Fence(None)),
                Some(PmixOp::Finalize)
            ]
        );
        assert_eq!(t.pmix_blobs(), [BlobLaw::Ompi5, linear]);
        assert!(t.kvs_use(4, 2).iter().all(|e| e.pairs == 0));
        assert_eq!((leb(0), leb(127), leb(128), leb(16383), leb(16384)), (1, 1, 2, 2, 3));
        assert_eq!(leb_sum(100, 50), 28 + 2 * 22);
    }

    /// PMGR lines parse, and the expected answers follow PMGR's semantics.
    #[test]
    fn pmgr_lines_and_semantics() {
        let t = Trace::parse(
            "p",
            ">pmgr open\n?rank=1 >pmgr bcast root=1 size=4 seed=3\n>pmgr alltoall size=2\n>pmgr close\n",
        )
        .expect("parse");
        assert!(t.uses_pmgr());
        assert_eq!(t.steps[0].pmgr.map(|p| p.op), Some(PmgrOp::Open));
        assert_eq!(
            t.steps[1].pmgr,
            Some(PmgrStep { op: PmgrOp::Bcast { root: 1, size: 4 }, seed: 3 })
        );
        assert_eq!(t.peer_count(1, &who(1)), 1);
        assert_eq!(t.peer_count(1, &who(2)), 0);
        for bad in
            [">pmgr bcast\n", ">pmgr frob\n", ">pmgr allgather size=0\n", ">pmgr barrier x=1\n"]
        {
            assert!(Trace::parse("p", bad).is_err(), "{bad}");
        }
        // Different ranks, collectives and seeds contribute different bytes.
        let d = |r, c, s| pmgr_data(r, c, s, 16);
        assert_ne!(d(0, 0, 0), d(1, 0, 0));
        assert_ne!(d(0, 0, 0), d(0, 1, 0));
        assert_ne!(d(0, 0, 0), d(0, 0, 1));
        assert_eq!(pmgr_data(5, 2, 0, 9).len(), 9);
        for (from, len) in [(0, 3), (3, 9), (8, 8), (13, 20)] {
            assert_eq!(pmgr_data_at(5, 2, 1, from, len), pmgr_data(5, 2, 1, 40)[from..from + len]);
        }
        // alltoall over 3 ranks: rank 1 gets block 1 of ranks 0, 1, 2 in order.
        let a = PmgrOp::Alltoall { size: 2 };
        let got = pmgr_expected(a, 1, 3, 4, 0).expect("answered");
        let want: Vec<u8> = (0..3).flat_map(|s| pmgr_data(s, 4, 0, 6)[2..4].to_vec()).collect();
        assert_eq!(got, want);
        // scatter: block `rank` of the root's buffer; gather answers the root only.
        let sc = PmgrOp::Scatter { root: 2, size: 3 };
        assert_eq!(pmgr_expected(sc, 1, 4, 0, 0), Some(pmgr_data(2, 0, 0, 12)[3..6].to_vec()));
        assert!(!pmgr_request(PmgrOp::Gather { root: 0, size: 1 }, 1, 2, 0, 0).1);
        assert!(pmgr_request(PmgrOp::Gather { root: 0, size: 1 }, 0, 2, 0, 0).1);
        assert_eq!(pmgr_expected(PmgrOp::Barrier, 0, 2, 0, 0), None);
    }

    #[test]
    fn spawn_blocks_go_one_field_per_line() {
        let t = Trace::parse("s", "?spawned > mcmd=spawn nprocs=2 execname=self endcmd\n")
            .expect("parse");
        assert_eq!(t.render(0, &who(0), 0, 0), b"mcmd=spawn\nnprocs=2\nexecname=self\nendcmd\n");
        assert_eq!(t.peer_count(0, &who(0)), 0);
        assert_eq!(t.peer_count(0, &Who { spawned: true, ..who(0) }), 1);
    }

    #[test]
    fn builtins_parse() {
        for (n, _) in BUILTIN {
            Trace::load(n).expect(n);
        }
    }
}

//! Messages on the NLA tree (front end <-> NLA <-> NLA), and their framing.
//!
//! Transport: a TCP stream of frames, each a 4-byte big-endian length followed by a kind
//! byte: 0, then a postcard encoding of one [`Msg`]; or 1, then a rank's output (rank as a
//! big-endian u32, stream byte 0/1, the bytes); or 2 / 3, then a part of a PMGR collective's
//! payload going up / down (a rank as a big-endian u32, `u32::MAX` for every rank, then the
//! bytes). The decoder hands the bytes of kinds 1-3 on without copying.
//! [`codec`] gives a tokio-util codec for it. The first frame a child
//! sends is [`Msg::Hello`] carrying the per-job secret; a parent drops a connection whose first
//! frame is anything else or carries the wrong secret.

use crate::job::{NodeSetup, RankEnd, SpawnRequest};
use crate::report::NodeReport;
use bytes::{Buf, Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use tokio_util::codec::{Decoder, Encoder};

/// Largest frame sent or accepted. Fence data travels in parts of at most [`FENCE_CHUNK`]
/// bytes, so no KVS exchange comes near it; a frame above it is an error on both sides (the
/// sender's is reported, never dropped).
pub const MAX_FRAME: usize = 256 << 20;

/// Bytes of `Output` a node may have sent up a tree link and not had acknowledged.
pub const OUTPUT_WINDOW: u64 = 1 << 20;
/// Bytes of stdin the front end keeps in flight towards rank 0.
pub const STDIN_WINDOW: u64 = 256 << 10;

/// Most bytes of fence data (keys and values, each pair counted with [`PAIR_OVERHEAD`]) in
/// one tree message: a fence carrying more is sent as [`Msg::FenceInPart`]s /
/// [`Msg::FenceOutPart`]s followed by the `FenceIn` / `FenceOut` that closes it.
pub const FENCE_CHUNK: usize = 4 << 20;

/// Most payload bytes of one [`Msg::PmgrUpPart`] / [`Msg::PmgrDownPart`]: a PMGR collective
/// streams its big payloads over the tree in such parts, ahead of the `PmgrUp` / `PmgrDown`
/// that closes it, so that no collective comes near [`MAX_FRAME`], and each node passes a
/// part on as it comes.
pub const PMGR_CHUNK: usize = 1 << 20;

/// What a pair (or a stale key) costs in a chunk beyond its bytes: postcard's length
/// prefixes, rounded up.
pub const PAIR_OVERHEAD: usize = 8;

/// A KVS value as nodes hold and pass it: bytes, as a rank put them (a PMI-1 value need not
/// be UTF-8: Hydra keeps such values as they are, and so do we); shared, so that a pair
/// stored in a node's KVS and sent on to its children (a pushed release goes to every
/// child) is one allocation, not one per copy.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Value(std::sync::Arc<[u8]>);

impl std::ops::Deref for Value {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl From<&[u8]> for Value {
    fn from(b: &[u8]) -> Value {
        Value(b.into())
    }
}

impl From<Vec<u8>> for Value {
    fn from(b: Vec<u8>) -> Value {
        Value(b.into())
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value(s.as_bytes().into())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::from(s.into_bytes())
    }
}

impl std::fmt::Debug for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "\"{}\"", self.0.escape_ascii())
    }
}

impl Serialize for Value {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Value;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Value, E> {
                Ok(Value::from(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
                Ok(Value::from(v))
            }
        }
        d.deserialize_bytes(V)
    }
}

/// A KVS key as held and passed on: shared like [`Value`], so the node's map, its pending
/// list and the fence data it sends up hold one allocation of each key, not a copy each
/// (on the wire it is a plain string).
pub type Key = std::sync::Arc<str>;

/// Decoding fence pairs: each key and value straight into its shared allocation (serde's `Arc<str>`
/// goes through a `String`: two allocations and two copies a key). The wire format is
/// serde's for `Vec<(String, Bytes)>`.
mod pairs {
    use super::{Key, Value};
    use serde::de::{Deserializer, SeqAccess, Visitor};
    use serde::Deserialize;
    use std::fmt;

    /// Pairs allocated ahead from a length the peer announced (a pair takes at least two
    /// bytes of a frame, so a lying length cannot make us allocate much more than a frame).
    const AHEAD: usize = 1 << 14;

    struct KeyIn(Key);

    impl<'de> Deserialize<'de> for KeyIn {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<KeyIn, D::Error> {
            struct V;
            impl Visitor<'_> for V {
                type Value = KeyIn;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a string")
                }
                fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<KeyIn, E> {
                    Ok(KeyIn(Key::from(v)))
                }
            }
            d.deserialize_str(V)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(Key, Value)>, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Vec<(Key, Value)>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a sequence of pairs")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(AHEAD));
                while let Some((KeyIn(k), v)) = seq.next_element::<(KeyIn, Value)>()? {
                    out.push((k, v));
                }
                Ok(out)
            }
        }
        d.deserialize_seq(V)
    }
}

/// The bytes a pair takes in a fence chunk.
pub fn pair_cost(key: &str, value: &[u8]) -> usize {
    key.len() + value.len() + PAIR_OVERHEAD
}

/// The rank of a subtree that put the most KVS data so far (keys plus values; a key put
/// again counts once), and how much. `bytes == 0`: nobody put anything. Carried up with the
/// fence so that the node that finds the job over its KVS limit can name a rank.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvsTop {
    pub rank: u32,
    pub bytes: u64,
}

impl KvsTop {
    /// The larger of two (the lower rank on a tie, for stable messages).
    pub fn max(self, other: KvsTop) -> KvsTop {
        if (other.bytes, std::cmp::Reverse(other.rank)) > (self.bytes, std::cmp::Reverse(self.rank))
        {
            other
        } else {
            self
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    /// `stdout` or `stderr`.
    pub fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Msg {
    // ---- child -> parent ----
    /// First frame of every tree connection.
    Hello { node: u32, secret: String, host: String, pid: u32 },
    /// First frame of an NLA started by a resource manager's step (srun), sent to the front
    /// end: "I run on `host` and listen for my own children at `listen`". The front end
    /// answers with `Setup` (it is the NLA's parent) or `Redirect`.
    Join { host: String, secret: String, listen: String, pid: u32 },
    /// Whole lines from one rank, each ending in a newline (a line longer than the line cap
    /// is cut into pieces, each ended with one; so is a last line without one). Output is
    /// flow-controlled per tree link: a node has at most [`OUTPUT_WINDOW`] bytes of `Output`
    /// not yet acknowledged by its parent (`OutputAck`).
    /// On the wire an `Output` is a frame of its own kind (see [`MsgCodec`]): its bytes are
    /// never copied by the decoder.
    Output { rank: u32, stream: Stream, data: Bytes },
    /// The node holding rank 0 wrote `bytes` bytes of stdin to it (routed up to the front
    /// end, which keeps at most [`STDIN_WINDOW`] bytes of stdin in flight).
    StdinAck { bytes: u64 },
    /// A rank ended. `host` names where.
    RankEnded { rank: u32, host: String, end: RankEnd },
    /// Ranks of the sender's subtree that ended cleanly (exit 0 after finalize) or by the
    /// teardown's SIGTERM/SIGKILL, per node: `(node, clean, killed)`. Sent once, when the
    /// subtree has no rank left (see `JobCommon::each_end`).
    RanksDone { ends: Vec<(u32, u32, u32)> },
    /// A rank called abort.
    Abort { rank: u32, host: String, code: i32, message: Option<String> },
    /// Pairs put in this subtree during fence `epoch`, sent before the subtree entered it
    /// (each part at most [`FENCE_CHUNK`] bytes): a big fence streams up as its pairs are
    /// put, and is merged part by part. `top`: the subtree's biggest KVS contributor so far.
    FenceInPart {
        epoch: u64,
        #[serde(deserialize_with = "pairs::deserialize")]
        pairs: Vec<(Key, Value)>,
        top: KvsTop,
    },
    /// Every rank below this subtree entered fence `epoch`; `pairs` are the pairs put since
    /// the previous fence (merged over the subtree, a key once) that no `FenceInPart` carried
    /// (at most [`FENCE_CHUNK`] bytes). `top` as in `FenceInPart`.
    FenceIn {
        epoch: u64,
        #[serde(deserialize_with = "pairs::deserialize")]
        pairs: Vec<(Key, Value)>,
        top: KvsTop,
    },
    /// A key missed in this subtree's caches: look it up further up.
    Get { key: String },
    /// PMIx fence `seq` of the job (its `seq`-th, counted from 0 by every node alike): every
    /// PMIx server of this subtree entered it; `blob` is the concatenation of their
    /// contributions (empty when the fence collects no data).
    PmixFenceIn {
        seq: u64,
        #[serde(with = "serde_bytes")]
        blob: Vec<u8>,
    },
    /// A node could not do its job (launch failure, protocol failure): fail the whole job.
    Fatal { host: String, message: String, status: i32 },
    /// A whole subtree is gone (its NLA could not be started or its connection broke):
    /// `ranks` ranks will never report their end.
    SubtreeLost { host: String, ranks: u32, message: String },
    /// Every NLA of the sender's subtree (`nodes` of them) is up and has started its ranks
    /// (`ranks` in all): one message per node per launch, sent when its subtree is up (at
    /// the root: passed to the front end as it comes).
    SubtreeUp { nodes: u32, ranks: u32 },
    /// An NLA's launch report (only with `--report`), sent before it exits.
    Report(Box<NodeReport>),
    /// This subtree's contributions to the current PMGR collective (a rank's payload may have
    /// gone ahead in `PmgrUpPart`s: it goes in front of what this carries for the rank).
    PmgrUp(Box<pmgr::collective::Partial>),
    /// A name-service request (`publish_name`/`unpublish_name`/`lookup_name`), answered by
    /// the front end, which holds the job-wide table. `req` is unique in the job.
    Name { req: u64, op: NameOp },
    /// A rank's `spawn`, answered by the front end once the new ranks run (or failed to
    /// start). `req` is unique in the job.
    Spawn { req: u64, spawn: Box<SpawnRequest> },

    // ---- parent -> child ----
    /// The child's part of the job.
    Setup(Box<NodeSetup>),
    /// Answer to `Join`: you are `node`; connect to your parent at `parent` (with `Hello`).
    Redirect { node: u32, parent: String },
    /// Part of fence `epoch`'s release, ahead of its `FenceOut` (each part at most
    /// [`FENCE_CHUNK`] bytes): pushed pairs, or stale keys, as in `FenceOut`.
    FenceOutPart {
        epoch: u64,
        #[serde(deserialize_with = "pairs::deserialize")]
        pairs: Vec<(Key, Value)>,
        stale: Vec<String>,
    },
    /// Fence `epoch` completed everywhere. `pushed`: the `pairs` of this message and of the
    /// `FenceOutPart`s before it are all pairs put in that epoch; otherwise there are no
    /// pairs, they stay up the tree and missing keys are fetched with `Get`. `stale`: keys
    /// overwritten in this epoch that caches must drop (also split over the parts).
    FenceOut {
        epoch: u64,
        pushed: bool,
        #[serde(deserialize_with = "pairs::deserialize")]
        pairs: Vec<(Key, Value)>,
        stale: Vec<String>,
    },
    /// A name lookup that waits until the name is published (PMIx's `PMIX_WAIT`: Open MPI's
    /// connect/accept exchange), answered with [`Msg::NameResult`]. With `-nameserver` it
    /// does not wait.
    NameWait { req: u64, service: String },
    /// A rank of a PMIx job died before `PMIx_Finalize` (killed, or exited): every server of
    /// the job tells its ranks (`PMIx_Notify_event`, `code`), which lets Open MPI's fault
    /// tolerance fail what waits on it. Goes up to the node whose subtree holds the job, and
    /// from there down to every node.
    PmixLost { rank: u32, host: String, code: i32, exit_code: Option<i32> },
    /// A PMIx direct modex: a server of process group `from` (its kvsname) wants the data of
    /// `rank` of namespace `nspace` (`u32::MAX - 1`, PMIx's wildcard: that namespace's
    /// job-level data). Routed to the node that runs the rank, through the front end when it
    /// is another group's; `req` is unique in `from` (the asking node's id in the high bits).
    PmixDmodex { from: String, req: u64, nspace: String, rank: u32 },
    /// The answer to a [`Msg::PmixDmodex`], routed back the way it came.
    PmixDmodexData {
        from: String,
        req: u64,
        status: i32,
        #[serde(with = "serde_bytes")]
        blob: Vec<u8>,
    },
    /// A PMIx connect (or disconnect) of the participants `procs` (namespace, rank; PMIx's
    /// wildcard rank for a whole namespace), identified by `key`: `count` of them, this
    /// node's, entered; `sizes` are the sizes of the sender's own namespace (for wildcards).
    /// Goes up to the front end, which counts every group's.
    /// A PMIx group construct goes the same way (`ctxid`: its members asked for a context
    /// id, which the front end assigns).
    PmixConnect {
        key: String,
        procs: Vec<(String, u32)>,
        count: u32,
        sizes: Vec<(String, u32)>,
        ctxid: bool,
        /// A fence's contribution (empty for the others).
        #[serde(with = "serde_bytes")]
        blob: Vec<u8>,
    },
    /// Every participant of connect `key` entered (`status` 0), or it cannot complete:
    /// passed down every node of each group taking part, with the context id assigned to a
    /// group construct that asked for one.
    /// `jobs`: every PMIx group taking part, for the servers that do not know them yet.
    PmixConnectDone {
        key: String,
        status: i32,
        ctxid: Option<u64>,
        jobs: Vec<crate::job::PmixPeer>,
        /// A fence's result: the concatenation of every server's contribution.
        #[serde(with = "serde_bytes")]
        blob: Vec<u8>,
    },
    /// PMIx fence `seq` completed: `blob` is the concatenation of every server's
    /// contribution, for each server to unpack.
    PmixFenceOut {
        seq: u64,
        #[serde(with = "serde_bytes")]
        blob: Vec<u8>,
    },
    /// Answer to `Get` (`None`: not found anywhere). The key is shared like a pair's: every
    /// node that caches the answer holds the one allocation of the node that had it (on the
    /// wire it is a plain string).
    GetResult { key: Key, value: Option<Value> },
    /// The outcome of the current PMGR collective, restricted to the receiver's subtree
    /// (what `PmgrDownPart`s carried is not in it again).
    PmgrDown(Box<pmgr::collective::Outcome>),
    /// Answer to `Name`: `ok` (publish/unpublish) and the port (lookup).
    NameResult { req: u64, ok: bool, port: Option<String> },
    /// Answer to `Spawn`: `rc` 0 when every new rank started (`jobid`: the new job's
    /// kvsname); otherwise the spawn failed and nothing of it runs.
    SpawnResult { req: u64, rc: i32, jobid: Option<String> },
    /// Bytes for rank 0's stdin; an empty `data` means EOF.
    Stdin {
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// The parent has passed on (or, at the front end, written out) `bytes` bytes of this
    /// node's `Output`: that much more may be sent.
    OutputAck { bytes: u64 },
    /// Deliver this signal to every rank (SIGINT/SIGTERM/SIGUSR1/SIGUSR2 forwarding).
    Signal { signal: i32 },
    /// Tear the job down: TERM, then KILL after the grace period.
    Kill,
    /// For NLA `target` (routed down the tree): start an NLA of a spawned process group on
    /// your host, named `host`, joining the front end at `front_end`.
    StartNla { target: u32, host: String, front_end: String },
    /// Every NLA: report your ranks' pids (for a tool: the MPIR process table, `--proctable`).
    /// Answered with one `ProcTable` per subtree, once the node and all its children did.
    ProcTableReq { req: u64 },
    /// This subtree's ranks, per node: the node's host and its ranks' (rank, app, pid); a
    /// pid of 0 is a rank that did not start or is not ours (a singleton).
    ProcTable { req: u64, nodes: Vec<ProcNode> },

    // ---- PMGR payload parts (last: the variants before keep their numbers) ----
    // child -> parent
    /// Part of `rank`'s payload for the current PMGR collective (at most [`PMGR_CHUNK`]
    /// bytes), ahead of the `PmgrUp` that carries the rank; passed up as it comes. On the wire
    /// a frame of its own kind: its bytes are never copied by the decoder.
    PmgrUpPart { rank: u32, data: Bytes },
    // parent -> child
    /// Part of the current PMGR collective's result (at most [`PMGR_CHUNK`] bytes) for one
    /// rank or every rank of the subtree (`to`), ahead of the `PmgrDown`: the receiver writes
    /// it to its ranks and passes it down as it comes. A frame of its own kind, like
    /// `PmgrUpPart`.
    PmgrDownPart { to: pmgr::collective::Target, data: Bytes },
}

/// One node's part of a process table (see [`Msg::ProcTable`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcNode {
    pub host: String,
    /// (rank, app index, pid)
    pub ranks: Vec<(u32, u32, i32)>,
}

/// A name-service operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum NameOp {
    Publish { service: String, port: String },
    Unpublish { service: String },
    Lookup { service: String },
}

/// Error encoding or decoding a frame.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("malformed tree message: {0}")]
    Decode(#[from] postcard::Error),
    #[error("a tree message of {} is over the frame limit of {}", crate::job::human_bytes(*.bytes as u64), crate::job::human_bytes(*.max as u64))]
    TooLarge { bytes: usize, max: usize },
    #[error("malformed tree message: {0}")]
    Kind(String),
}

/// Frame codec: length-delimited frames of two kinds (see the module's documentation).
#[derive(Debug)]
pub struct MsgCodec {
    max: usize,
}

/// The tree's codec: frames up to [`MAX_FRAME`].
pub fn codec() -> MsgCodec {
    codec_with_max(MAX_FRAME)
}

/// A codec with another frame limit (tests).
pub fn codec_with_max(max: usize) -> MsgCodec {
    MsgCodec { max }
}

/// Bytes of a frame's length prefix.
const HEAD: usize = 4;
/// A frame's first byte: what follows is a postcard-encoded [`Msg`] …
const KIND_MSG: u8 = 0;
/// … or rank output: the rank (u32, big-endian), the stream (0 stdout, 1 stderr), the bytes.
const KIND_OUTPUT: u8 = 1;
/// Kind, rank and stream of an output frame.
const OUTPUT_HEAD: usize = 6;
/// … or part of a PMGR payload going up (`PmgrUpPart`) …
const KIND_PMGR_UP: u8 = 2;
/// … or down (`PmgrDownPart`): the rank (u32, big-endian; [`ALL_RANKS`] for every rank),
/// the bytes.
const KIND_PMGR_DOWN: u8 = 3;
/// Kind and rank of a PMGR part frame.
const PART_HEAD: usize = 5;
/// The rank of a `PmgrDownPart` for every rank.
const ALL_RANKS: u32 = u32::MAX;
/// Bytes of a frame's head before an output frame's bytes: [`MsgCodec::output_head`].
pub const OUTPUT_FRAME_HEAD: usize = HEAD + OUTPUT_HEAD;
/// The room a tree connection's read buffer is given when it has little left (see
/// `MsgCodec::room`).
const READ_ROOM: usize = 64 << 10;

impl Decoder for MsgCodec {
    type Item = Msg;
    type Error = CodecError;
    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Msg>, CodecError> {
        let Some(head) = src.get(..HEAD) else {
            self.room(src, HEAD - src.len());
            return Ok(None);
        };
        let bytes = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        if bytes > self.max {
            return Err(CodecError::TooLarge { bytes, max: self.max });
        }
        if src.len() < HEAD + bytes {
            // Room for what is announced, as it arrives (a peer's length alone does not
            // make us allocate a whole frame).
            self.room(src, (HEAD + bytes - src.len()).min(1 << 20));
            return Ok(None);
        }
        src.advance(HEAD);
        let frame = src.split_to(bytes);
        match frame.first() {
            Some(&KIND_MSG) => Ok(Some(postcard::from_bytes(&frame[1..])?)),
            Some(&KIND_OUTPUT) if frame.len() >= OUTPUT_HEAD => {
                let rank = u32::from_be_bytes([frame[1], frame[2], frame[3], frame[4]]);
                let stream = match frame[5] {
                    0 => Stream::Stdout,
                    1 => Stream::Stderr,
                    s => return Err(CodecError::Kind(format!("output stream {s}"))),
                };
                let data = frame.freeze().slice(OUTPUT_HEAD..);
                Ok(Some(Msg::Output { rank, stream, data }))
            }
            Some(&k @ (KIND_PMGR_UP | KIND_PMGR_DOWN)) if frame.len() >= PART_HEAD => {
                let rank = u32::from_be_bytes([frame[1], frame[2], frame[3], frame[4]]);
                let data = frame.freeze().slice(PART_HEAD..);
                Ok(Some(if k == KIND_PMGR_UP {
                    Msg::PmgrUpPart { rank, data }
                } else {
                    use pmgr::collective::Target;
                    let to = if rank == ALL_RANKS { Target::All } else { Target::Rank(rank) };
                    Msg::PmgrDownPart { to, data }
                }))
            }
            Some(&k) => Err(CodecError::Kind(format!("frame kind {k}"))),
            None => Err(CodecError::Kind("empty frame".into())),
        }
    }
}

impl Encoder<Msg> for MsgCodec {
    type Error = CodecError;
    fn encode(&mut self, item: Msg, dst: &mut BytesMut) -> Result<(), CodecError> {
        self.encode_ref(&item, dst)
    }
}

impl MsgCodec {
    /// Accept frames of up to `max` bytes from now on.
    pub fn set_max_frame(&mut self, max: usize) {
        self.max = max;
    }

    /// The head of an output frame (length, kind, rank, stream) whose `len` bytes of output
    /// follow it: written apart from them (a vectored write), the bytes are not copied. An
    /// error, as [`MsgCodec::encode_ref`]'s, when the frame would be over the limit.
    pub fn output_head(
        &self,
        rank: u32,
        stream: Stream,
        len: usize,
    ) -> Result<[u8; OUTPUT_FRAME_HEAD], CodecError> {
        let bytes = OUTPUT_HEAD + len;
        let Some(n) = u32::try_from(bytes).ok().filter(|_| bytes <= self.max) else {
            return Err(CodecError::TooLarge { bytes, max: self.max });
        };
        let mut h = [0u8; OUTPUT_FRAME_HEAD];
        h[..HEAD].copy_from_slice(&n.to_be_bytes());
        h[HEAD] = KIND_OUTPUT;
        h[HEAD + 1..HEAD + 5].copy_from_slice(&rank.to_be_bytes());
        h[HEAD + 5] = stream as u8;
        Ok(h)
    }

    /// Make room in `src` for the next read: at least `need` bytes (what the frame being
    /// read still lacks). A read buffer with little room left gets [`READ_ROOM`] (or the
    /// frame limit, if lower: a connection not authenticated yet gets no more than its
    /// first frame may take): the reads that fill it are as large as what has arrived, not
    /// as the end of a frame or the buffer's remnant, and the frames decoded from it are
    /// slices of it, not copies.
    fn room(&self, src: &mut BytesMut, need: usize) {
        let min = READ_ROOM.min(self.max);
        if src.capacity() - src.len() < need.max(min / 4) {
            src.reserve(need.max(min));
        }
    }

    /// Encode without taking ownership (for broadcasting one message to many children). The
    /// message is serialized straight into `dst` behind its length (one copy of its bytes).
    /// A message over the frame limit is an error and leaves `dst` as it was.
    pub fn encode_ref(&mut self, item: &Msg, dst: &mut BytesMut) -> Result<(), CodecError> {
        if let Msg::Output { rank, stream, data } = item {
            let head = self.output_head(*rank, *stream, data.len())?;
            dst.reserve(head.len() + data.len());
            dst.extend_from_slice(&head);
            dst.extend_from_slice(data);
            return Ok(());
        }
        let start = dst.len();
        dst.extend_from_slice(&[0; HEAD]);
        if let Some((kind, rank, data)) = pmgr_part(item) {
            dst.reserve(PART_HEAD + data.len());
            dst.extend_from_slice(&[kind]);
            dst.extend_from_slice(&rank.to_be_bytes());
            dst.extend_from_slice(data);
        } else {
            dst.extend_from_slice(&[KIND_MSG]);
            if let Err(e) = postcard::serialize_with_flavor(item, Extend(dst)) {
                dst.truncate(start);
                return Err(e.into());
            }
        }
        let bytes = dst.len() - start - HEAD;
        let Some(len) = u32::try_from(bytes).ok().filter(|_| bytes <= self.max) else {
            dst.truncate(start);
            return Err(CodecError::TooLarge { bytes, max: self.max });
        };
        dst[start..start + HEAD].copy_from_slice(&len.to_be_bytes());
        Ok(())
    }
}

/// Bytes `msg` takes on a tree link (length prefix and kind byte included), without
/// encoding it: what the simulator charges a link for a message.
pub fn wire_size(msg: &Msg) -> usize {
    match msg {
        Msg::Output { data, .. } => HEAD + OUTPUT_HEAD + data.len(),
        Msg::PmgrUpPart { data, .. } | Msg::PmgrDownPart { data, .. } => {
            HEAD + PART_HEAD + data.len()
        }
        m => HEAD + 1 + postcard::experimental::serialized_size(m).unwrap_or(0),
    }
}

/// Kind, rank and bytes of a PMGR part (a frame of its own kind).
fn pmgr_part(m: &Msg) -> Option<(u8, u32, &Bytes)> {
    use pmgr::collective::Target;
    match m {
        Msg::PmgrUpPart { rank, data } => Some((KIND_PMGR_UP, *rank, data)),
        Msg::PmgrDownPart { to, data } => {
            let rank = match to {
                Target::All => ALL_RANKS,
                Target::Rank(r) => *r,
            };
            Some((KIND_PMGR_DOWN, rank, data))
        }
        _ => None,
    }
}

/// Postcard output appended to a `BytesMut`, slices copied whole.
struct Extend<'a>(&'a mut BytesMut);

impl postcard::ser_flavors::Flavor for Extend<'_> {
    type Output = ();

    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        self.0.extend_from_slice(data);
        Ok(())
    }

    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        self.0.extend_from_slice(&[data]);
        Ok(())
    }

    fn finalize(self) -> postcard::Result<()> {
        Ok(())
    }
}

/// Compare two secrets in constant time (length leaks, content does not).
pub fn secret_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_frames() {
        let mut c = codec();
        let mut buf = BytesMut::new();
        let msgs = vec![
            Msg::Hello { node: 3, secret: "abc".into(), host: "h".into(), pid: 9 },
            Msg::FenceIn {
                epoch: 2,
                pairs: vec![("k".into(), "v".into())],
                top: KvsTop { rank: 1, bytes: 2 },
            },
            Msg::Output { rank: 1, stream: Stream::Stderr, data: Bytes::from_static(b"x\n") },
            Msg::Kill,
            Msg::PmgrUpPart { rank: 7, data: Bytes::from_static(b"up") },
            Msg::PmgrDownPart {
                to: pmgr::collective::Target::All,
                data: Bytes::from_static(b"all"),
            },
            Msg::PmgrDownPart {
                to: pmgr::collective::Target::Rank(3),
                data: Bytes::from_static(b""),
            },
        ];
        for m in &msgs {
            c.encode_ref(m, &mut buf).expect("encode");
        }
        let mut got = Vec::new();
        while let Some(m) = c.decode(&mut buf).expect("decode") {
            got.push(m);
        }
        assert_eq!(got, msgs);
    }

    /// Frames arrive in pieces of any size: each decodes once it is whole, never before.
    #[test]
    fn frames_split_anywhere() {
        let mut c = codec();
        let mut wire = BytesMut::new();
        let msgs = vec![
            Msg::Output { rank: 1, stream: Stream::Stdout, data: vec![b'y'; 70_000].into() },
            Msg::Kill,
            Msg::FenceInPart {
                epoch: 1,
                pairs: vec![("k".into(), "v".repeat(300).into())],
                top: KvsTop::default(),
            },
        ];
        for m in &msgs {
            c.encode_ref(m, &mut wire).expect("encode");
        }
        for piece in [1, 3, 4, 5, 4096, 100_000] {
            let mut buf = BytesMut::new();
            let mut got = Vec::new();
            for chunk in wire.chunks(piece) {
                buf.extend_from_slice(chunk);
                while let Some(m) = c.decode(&mut buf).expect("decode") {
                    got.push(m);
                }
            }
            assert_eq!(got, msgs, "pieces of {piece}");
            assert!(buf.is_empty());
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let mut c = codec();
        let mut buf = BytesMut::from(&[0u8, 0, 0, 3, 0xff, 0xff, 0xff][..]);
        assert!(c.decode(&mut buf).is_err());
        let mut buf = BytesMut::from(&[0xffu8, 0xff, 0xff, 0xff][..]);
        assert!(c.decode(&mut buf).is_err());
    }

    /// A message over the frame limit is an error on both sides, never a silent drop, and
    /// the encoder leaves its buffer usable.
    #[test]
    fn oversized_frames_are_errors() {
        let big = Msg::Output { rank: 0, stream: Stream::Stdout, data: vec![b'x'; 2000].into() };
        let mut small = codec_with_max(1000);
        let mut buf = BytesMut::new();
        let e = small.encode_ref(&big, &mut buf).expect_err("too large");
        assert!(matches!(e, CodecError::TooLarge { max: 1000, .. }), "{e}");
        assert!(e.to_string().contains("over the frame limit of 1000 B"), "{e}");
        assert!(buf.is_empty());
        small.encode_ref(&Msg::Kill, &mut buf).expect("a small one still goes");
        let mut c = codec();
        let mut wire = BytesMut::new();
        c.encode_ref(&big, &mut wire).expect("encode");
        let e = small.decode(&mut wire).expect_err("too large");
        assert!(matches!(e, CodecError::TooLarge { max: 1000, .. }), "{e}");
    }

    #[test]
    fn kvs_top_order() {
        let a = KvsTop { rank: 3, bytes: 10 };
        let b = KvsTop { rank: 1, bytes: 10 };
        let c = KvsTop { rank: 7, bytes: 11 };
        assert_eq!(a.max(b), b);
        assert_eq!(b.max(a), b);
        assert_eq!(a.max(c), c);
        assert_eq!(KvsTop::default().max(a), a);
    }

    #[test]
    fn secrets() {
        assert!(secret_eq("abcd", "abcd"));
        assert!(!secret_eq("abcd", "abce"));
        assert!(!secret_eq("abcd", "abc"));
    }
}

#[cfg(test)]
mod fuzz {
    use super::*;
    use crate::job::{AppSpec, JobCommon, LauncherKind, LauncherSpec, NodePlan, RankSlot};
    use proptest::prelude::*;

    /// Generated inputs: `LIBI_FUZZ_CASES` (default 25 000; the long run sets 1 000 000).
    fn fuzz_cases() -> u32 {
        std::env::var("LIBI_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(25_000)
    }

    fn text() -> impl Strategy<Value = String> + Clone {
        "[ -~]{0,12}"
    }

    fn pairs() -> impl Strategy<Value = Vec<(super::Key, super::Value)>> {
        let key = || text().prop_map(std::sync::Arc::<str>::from);
        // Values are bytes, UTF-8 or not.
        let value = || {
            prop_oneof![
                text().prop_map(super::Value::from),
                proptest::collection::vec(any::<u8>(), 0..16).prop_map(super::Value::from),
            ]
        };
        proptest::collection::vec((key(), value()), 0..4)
    }

    fn msg() -> impl Strategy<Value = Msg> {
        prop_oneof![
            (any::<u32>(), text(), text(), any::<u32>())
                .prop_map(|(node, secret, host, pid)| Msg::Hello { node, secret, host, pid }),
            (any::<u32>(), proptest::collection::vec(any::<u8>(), 0..32)).prop_map(
                |(rank, data)| Msg::Output { rank, stream: Stream::Stdout, data: data.into() }
            ),
            (any::<u64>(), pairs(), any::<u32>(), any::<u64>()).prop_map(
                |(epoch, pairs, rank, bytes)| Msg::FenceIn {
                    epoch,
                    pairs,
                    top: KvsTop { rank, bytes }
                }
            ),
            (any::<u64>(), pairs(), any::<u32>(), any::<u64>()).prop_map(
                |(epoch, pairs, rank, bytes)| Msg::FenceInPart {
                    epoch,
                    pairs,
                    top: KvsTop { rank, bytes }
                }
            ),
            (any::<u64>(), pairs(), proptest::collection::vec(text(), 0..3))
                .prop_map(|(epoch, pairs, stale)| Msg::FenceOutPart { epoch, pairs, stale }),
            (any::<u64>(), any::<bool>(), pairs(), proptest::collection::vec(text(), 0..3))
                .prop_map(|(epoch, pushed, pairs, stale)| Msg::FenceOut {
                    epoch,
                    pushed,
                    pairs,
                    stale
                }),
            text().prop_map(|key| Msg::Get { key }),
            (text(), proptest::option::of(text())).prop_map(|(key, value)| Msg::GetResult {
                key: key.into(),
                value: value.map(Into::into),
            }),
            (text(), any::<u32>(), text()).prop_map(|(host, ranks, message)| Msg::SubtreeLost {
                host,
                ranks,
                message
            }),
            any::<i32>().prop_map(|signal| Msg::Signal { signal }),
            Just(Msg::Kill),
            (any::<u64>(), proptest::collection::vec(any::<u8>(), 0..32))
                .prop_map(|(seq, blob)| Msg::PmixFenceIn { seq, blob }),
            (any::<u32>(), text(), any::<i32>(), proptest::option::of(any::<i32>())).prop_map(
                |(rank, host, code, exit_code)| Msg::PmixLost { rank, host, code, exit_code }
            ),
            (any::<u64>(), proptest::collection::vec(any::<u8>(), 0..32))
                .prop_map(|(seq, blob)| Msg::PmixFenceOut { seq, blob }),
            (any::<u32>(), proptest::collection::vec(any::<u8>(), 0..32))
                .prop_map(|(rank, data)| Msg::PmgrUpPart { rank, data: data.into() }),
            (0..u32::MAX, proptest::collection::vec(any::<u8>(), 0..32)).prop_map(
                |(rank, data)| Msg::PmgrDownPart {
                    to: pmgr::collective::Target::Rank(rank),
                    data: data.into()
                }
            ),
            (any::<u32>(), text()).prop_map(|(rank, host)| Msg::RankEnded {
                rank,
                host,
                end: RankEnd::Exited { code: 3, clean_pmi: true }
            }),
            (text(), text()).prop_map(|(host, exe)| Msg::Setup(Box::new(NodeSetup {
                job: JobCommon {
                    size: 2,
                    universe_size: 2,
                    kvsname: "k".into(),
                    preput: vec![],
                    apps: vec![AppSpec {
                        exe,
                        args: vec![],
                        nprocs: 2,
                        env: vec![],
                        wdir: None,
                        agent_env: false,
                        raw_env: vec![],
                    }],
                    launcher: LauncherSpec::new(LauncherKind::Ssh, "/x"),
                    kill_grace_ms: 1,
                    launch_timeout_ms: 1,
                    launch_batch: None,
                    kvs_push_max: 1,
                    kvs_max: 1 << 30,
                    report: false,
                    pmgr: None,
                    verbose: false,
                    binding: libi_binding::Binding {
                        bind: libi_binding::parse_bind("user:0+2,1").unwrap(),
                        map: None,
                        mem: Some(libi_binding::parse_membind("interleave:0,2-3").unwrap()),
                        hosts: vec![("n2".into(), libi_binding::parse_bind("gpu:2").unwrap())],
                        report: true,
                    },
                    spawned_by: None,
                    singleton: None,
                    each_end: false,
                    staged: Vec::new(),
                    gpus: crate::job::GpuSplit { devices: Some(2), subdevs: None },
                    pmix: Some(crate::job::PmixJob {
                        nodes: vec![("n1".into(), vec![0, 2]), ("n2".into(), vec![1])],
                        parent: Some(("kvs_1".into(), 3)),
                    }),
                },
                plan: NodePlan {
                    node: 1,
                    host,
                    ranks: vec![RankSlot { rank: 0, app: 0 }],
                    children: vec![],
                },
            }))),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::with_cases(fuzz_cases()) })]

        /// Arbitrary bytes on a tree connection: an error or a message, never a panic, and
        /// never more than one frame's worth of buffering.
        #[test]
        fn decoder_never_panics(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut c = codec();
            let mut buf = BytesMut::from(&data[..]);
            while let Ok(Some(_)) = c.decode(&mut buf) {}
        }

        /// Valid frames with garbage after them: the frames decode, the garbage errors.
        #[test]
        fn frames_then_garbage(m in msg(), tail in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut c = codec();
            let mut buf = BytesMut::new();
            c.encode_ref(&m, &mut buf).expect("encode");
            buf.extend_from_slice(&tail);
            let first = c.decode(&mut buf).expect("first frame decodes");
            prop_assert_eq!(first, Some(m));
            while let Ok(Some(_)) = c.decode(&mut buf) {}
        }
    }
}

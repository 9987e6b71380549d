//! Messages on the NLA tree (front end <-> NLA <-> NLA), and their framing.
//!
//! Transport: a TCP stream of frames, each a 4-byte big-endian length followed by a postcard
//! encoding of one [`Msg`]. [`codec`] gives a tokio-util codec for it. The first frame a child
//! sends is [`Msg::Hello`] carrying the per-job secret; a parent drops a connection whose first
//! frame is anything else or carries the wrong secret.

use crate::job::{NodeSetup, RankEnd, SpawnRequest};
use crate::report::NodeReport;
use bytes::BytesMut;
use serde::{Deserialize, Serialize};
use tokio_util::codec::{Decoder, Encoder, LengthDelimitedCodec};

/// Largest frame accepted (a fence carrying a big KVS can be large).
pub const MAX_FRAME: usize = 256 << 20;

/// Bytes of `Output` a node may have sent up a tree link and not had acknowledged.
pub const OUTPUT_WINDOW: u64 = 1 << 20;
/// Bytes of stdin the front end keeps in flight towards rank 0.
pub const STDIN_WINDOW: u64 = 256 << 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Stream {
    Stdout,
    Stderr,
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
    Output {
        rank: u32,
        stream: Stream,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// The node holding rank 0 wrote `bytes` bytes of stdin to it (routed up to the front
    /// end, which keeps at most [`STDIN_WINDOW`] bytes of stdin in flight).
    StdinAck { bytes: u64 },
    /// A rank ended. `host` names where.
    RankEnded { rank: u32, host: String, end: RankEnd },
    /// A rank called abort.
    Abort { rank: u32, host: String, code: i32, message: Option<String> },
    /// Every rank below this subtree entered fence `epoch`; `pairs` are the pairs put since
    /// the previous fence, merged over the subtree.
    FenceIn { epoch: u64, pairs: Vec<(String, String)> },
    /// A key missed in this subtree's caches: look it up further up.
    Get { key: String },
    /// A node could not do its job (launch failure, protocol failure): fail the whole job.
    Fatal { host: String, message: String, status: i32 },
    /// A whole subtree is gone (its NLA could not be started or its connection broke):
    /// `ranks` ranks will never report their end.
    SubtreeLost { host: String, ranks: u32, message: String },
    /// An NLA has started its ranks.
    NodeUp { node: u32, host: String, ranks: u32 },
    /// An NLA's launch report (only with `--report`), sent before it exits.
    Report(Box<NodeReport>),
    /// This subtree's contributions to the current PMGR collective.
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
    /// Fence `epoch` completed everywhere. `pushed`: `pairs` are all pairs put in that
    /// epoch; otherwise `pairs` is empty, the pairs stay up the tree and missing keys are
    /// fetched with `Get`. `stale`: keys overwritten in this epoch that caches must drop.
    FenceOut { epoch: u64, pushed: bool, pairs: Vec<(String, String)>, stale: Vec<String> },
    /// Answer to `Get` (`None`: not found anywhere).
    GetResult { key: String, value: Option<String> },
    /// The outcome of the current PMGR collective, restricted to the receiver's subtree.
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
}

/// A name-service operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum NameOp {
    Publish { service: String, port: String },
    Unpublish { service: String },
    Lookup { service: String },
}

/// Error decoding a frame.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("malformed tree message: {0}")]
    Decode(#[from] postcard::Error),
}

/// Frame codec: length-delimited postcard.
#[derive(Debug)]
pub struct MsgCodec {
    inner: LengthDelimitedCodec,
}

pub fn codec() -> MsgCodec {
    MsgCodec { inner: LengthDelimitedCodec::builder().max_frame_length(MAX_FRAME).new_codec() }
}

impl Decoder for MsgCodec {
    type Item = Msg;
    type Error = CodecError;
    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Msg>, CodecError> {
        match self.inner.decode(src)? {
            Some(frame) => Ok(Some(postcard::from_bytes(&frame)?)),
            None => Ok(None),
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
    /// Encode without taking ownership (for broadcasting one message to many children). The
    /// message is serialized straight into `dst` behind its length (one copy of its bytes).
    pub fn encode_ref(&mut self, item: &Msg, dst: &mut BytesMut) -> Result<(), CodecError> {
        let start = dst.len();
        dst.extend_from_slice(&[0; 4]);
        if let Err(e) = postcard::serialize_with_flavor(item, Extend(dst)) {
            dst.truncate(start);
            return Err(e.into());
        }
        let len = dst.len() - start - 4;
        if len > MAX_FRAME {
            dst.truncate(start);
            let m = format!("a {len}-byte message is over the {MAX_FRAME}-byte frame limit");
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, m).into());
        }
        dst[start..start + 4].copy_from_slice(&(len as u32).to_be_bytes());
        Ok(())
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
            Msg::FenceIn { epoch: 2, pairs: vec![("k".into(), "v".into())] },
            Msg::Output { rank: 1, stream: Stream::Stderr, data: b"x\n".to_vec() },
            Msg::Kill,
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

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let mut c = codec();
        let mut buf = BytesMut::from(&[0u8, 0, 0, 3, 0xff, 0xff, 0xff][..]);
        assert!(c.decode(&mut buf).is_err());
        let mut buf = BytesMut::from(&[0xffu8, 0xff, 0xff, 0xff][..]);
        assert!(c.decode(&mut buf).is_err());
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

    fn pairs() -> impl Strategy<Value = Vec<(String, String)>> {
        proptest::collection::vec((text(), text()), 0..4)
    }

    fn msg() -> impl Strategy<Value = Msg> {
        prop_oneof![
            (any::<u32>(), text(), text(), any::<u32>())
                .prop_map(|(node, secret, host, pid)| Msg::Hello { node, secret, host, pid }),
            (any::<u32>(), proptest::collection::vec(any::<u8>(), 0..32))
                .prop_map(|(rank, data)| { Msg::Output { rank, stream: Stream::Stdout, data } }),
            (any::<u64>(), pairs()).prop_map(|(epoch, pairs)| Msg::FenceIn { epoch, pairs }),
            (any::<u64>(), any::<bool>(), pairs(), proptest::collection::vec(text(), 0..3))
                .prop_map(|(epoch, pushed, pairs, stale)| Msg::FenceOut {
                    epoch,
                    pushed,
                    pairs,
                    stale
                }),
            text().prop_map(|key| Msg::Get { key }),
            (text(), proptest::option::of(text()))
                .prop_map(|(key, value)| Msg::GetResult { key, value }),
            (text(), any::<u32>(), text()).prop_map(|(host, ranks, message)| Msg::SubtreeLost {
                host,
                ranks,
                message
            }),
            any::<i32>().prop_map(|signal| Msg::Signal { signal }),
            Just(Msg::Kill),
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
                    apps: vec![AppSpec { exe, args: vec![], nprocs: 2, env: vec![], wdir: None }],
                    launcher: LauncherSpec {
                        kind: LauncherKind::Ssh,
                        exec: None,
                        nla_path: "/x".into()
                    },
                    kill_grace_ms: 1,
                    launch_timeout_ms: 1,
                    launch_batch: None,
                    kvs_push_max: 1,
                    report: false,
                    pmgr: None,
                    verbose: false,
                    spawned_by: None,
                    singleton: None,
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

//! Messages on the NLA tree (front end <-> NLA <-> NLA), and their framing.
//!
//! Transport: a TCP stream of frames, each a 4-byte big-endian length followed by a postcard
//! encoding of one [`Msg`]. [`codec`] gives a tokio-util codec for it. The first frame a child
//! sends is [`Msg::Hello`] carrying the per-job secret; a parent drops a connection whose first
//! frame is anything else or carries the wrong secret.

use crate::job::{NodeSetup, RankEnd};
use crate::report::NodeReport;
use bytes::{Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use tokio_util::codec::{Decoder, Encoder, LengthDelimitedCodec};

/// Largest frame accepted (a fence carrying a big KVS can be large).
pub const MAX_FRAME: usize = 256 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Stream {
    Stdout,
    Stderr,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Msg {
    // ---- child -> parent ----
    /// First frame of every tree connection.
    Hello {
        node: u32,
        secret: String,
        host: String,
        pid: u32,
    },
    /// Whole lines (a partial line only at end of stream) from one rank.
    Output {
        rank: u32,
        stream: Stream,
        data: Vec<u8>,
    },
    /// A rank ended. `host` names where.
    RankEnded {
        rank: u32,
        host: String,
        end: RankEnd,
    },
    /// A rank called abort.
    Abort {
        rank: u32,
        host: String,
        code: i32,
        message: Option<String>,
    },
    /// Every rank below this subtree entered fence `epoch`; `pairs` are the pairs put since
    /// the previous fence, merged over the subtree.
    FenceIn {
        epoch: u64,
        pairs: Vec<(String, String)>,
    },
    /// A key missed in this subtree's caches: look it up further up.
    Get { key: String },
    /// A node could not do its job (launch failure, protocol failure): fail the whole job.
    Fatal {
        host: String,
        message: String,
        status: i32,
    },
    /// A whole subtree is gone (its NLA could not be started or its connection broke):
    /// `ranks` ranks will never report their end.
    SubtreeLost {
        host: String,
        ranks: u32,
        message: String,
    },
    /// An NLA has started its ranks.
    NodeUp { node: u32, host: String, ranks: u32 },
    /// An NLA's launch report (only with `--report`), sent before it exits.
    Report(Box<NodeReport>),

    // ---- parent -> child ----
    /// The child's part of the job.
    Setup(Box<NodeSetup>),
    /// Fence `epoch` completed everywhere. `pushed`: `pairs` are all pairs put in that
    /// epoch; otherwise `pairs` is empty, the pairs stay up the tree and missing keys are
    /// fetched with `Get`. `stale`: keys overwritten in this epoch that caches must drop.
    FenceOut {
        epoch: u64,
        pushed: bool,
        pairs: Vec<(String, String)>,
        stale: Vec<String>,
    },
    /// Answer to `Get` (`None`: not found anywhere).
    GetResult { key: String, value: Option<String> },
    /// Bytes for rank 0's stdin; an empty `data` means EOF.
    Stdin { data: Vec<u8> },
    /// Deliver this signal to every rank (SIGINT/SIGTERM/SIGUSR1/SIGUSR2 forwarding).
    Signal { signal: i32 },
    /// Tear the job down: TERM, then KILL after the grace period.
    Kill,
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
    MsgCodec {
        inner: LengthDelimitedCodec::builder()
            .max_frame_length(MAX_FRAME)
            .new_codec(),
    }
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
    /// Encode without taking ownership (for broadcasting one message to many children).
    pub fn encode_ref(&mut self, item: &Msg, dst: &mut BytesMut) -> Result<(), CodecError> {
        let bytes = postcard::to_stdvec(item)?;
        self.inner.encode(Bytes::from(bytes), dst)?;
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
            Msg::Hello {
                node: 3,
                secret: "abc".into(),
                host: "h".into(),
                pid: 9,
            },
            Msg::FenceIn {
                epoch: 2,
                pairs: vec![("k".into(), "v".into())],
            },
            Msg::Output {
                rank: 1,
                stream: Stream::Stderr,
                data: b"x\n".to_vec(),
            },
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

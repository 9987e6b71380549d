//! Framing on the agent–companion socketpair: each message is a 4-byte big-endian length
//! followed by that many bytes of postcard (the encoding of one [`crate::proto`] message).
//! A frame above [`MAX_FRAME`] is an error on both sides.

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::io::{Read, Write};

/// Largest frame sent or accepted (fence blobs of big jobs travel in one frame).
pub const MAX_FRAME: usize = 256 << 20;

/// Bytes of the length prefix.
const HEAD: usize = 4;

/// Error encoding, decoding or moving a frame.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("malformed companion message: {0}")]
    Decode(#[from] postcard::Error),
    #[error("a companion message of {0} bytes is over the frame limit")]
    TooLarge(usize),
    #[error("the peer closed the connection in the middle of a frame")]
    Truncated,
}

/// One message as a frame.
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, FrameError> {
    let mut out = vec![0u8; HEAD];
    let mut out = postcard::to_extend(msg, std::mem::take(&mut out))?;
    let len = out.len() - HEAD;
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    out[..HEAD].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(out)
}

/// Writes one message (blocking).
pub fn write_frame<W: Write, T: Serialize>(w: &mut W, msg: &T) -> Result<(), FrameError> {
    w.write_all(&encode(msg)?)?;
    Ok(())
}

/// Reads one message (blocking); `None` at a clean EOF (between frames).
pub fn read_frame<R: Read, T: DeserializeOwned>(r: &mut R) -> Result<Option<T>, FrameError> {
    let mut head = [0u8; HEAD];
    let mut got = 0;
    while got < HEAD {
        match r.read(&mut head[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(FrameError::Truncated),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let len = u32::from_be_bytes(head) as usize;
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => FrameError::Truncated,
        _ => FrameError::Io(e),
    })?;
    Ok(Some(postcard::from_bytes(&body)?))
}

/// Frames out of a byte stream read in pieces (a non-blocking reader): push what was read,
/// then take the whole messages.
#[derive(Debug, Default)]
pub struct FrameReader {
    buf: Vec<u8>,
    /// Bytes of `buf` already consumed.
    start: usize,
}

impl FrameReader {
    pub fn new() -> FrameReader {
        FrameReader::default()
    }

    /// Appends bytes read from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole message, if one is there.
    pub fn next_frame<T: DeserializeOwned>(&mut self) -> Result<Option<T>, FrameError> {
        let avail = &self.buf[self.start..];
        let Some(head) = avail.get(..HEAD) else { return Ok(None) };
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        if len > MAX_FRAME {
            return Err(FrameError::TooLarge(len));
        }
        let Some(body) = avail.get(HEAD..HEAD + len) else { return Ok(None) };
        let msg = postcard::from_bytes(body)?;
        self.start += HEAD + len;
        if self.start > (1 << 16) && self.start * 2 > self.buf.len() {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        Ok(Some(msg))
    }

    /// Bytes of an incomplete frame held (non-zero at EOF: the peer stopped mid-frame).
    pub fn pending(&self) -> usize {
        self.buf.len() - self.start
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{FromCompanion, Proc, ToCompanion};

    #[test]
    fn round_trip_blocking_and_in_pieces() {
        let msgs = vec![
            FromCompanion::Ready { pid: 7, version: "4.2.2".into(), tmpdir: "/tmp/x".into() },
            FromCompanion::Fence {
                id: 3,
                procs: vec![Proc { nspace: "kvs_1".into(), rank: crate::proto::RANK_WILDCARD }],
                collect: true,
                timeout: None,
                blob: (0..=255u8).collect(),
            },
            FromCompanion::Bye,
        ];
        let mut wire = Vec::new();
        for m in &msgs {
            write_frame(&mut wire, m).unwrap();
        }
        let mut r = &wire[..];
        for m in &msgs {
            assert_eq!(read_frame::<_, FromCompanion>(&mut r).unwrap().as_ref(), Some(m));
        }
        assert!(read_frame::<_, FromCompanion>(&mut r).unwrap().is_none());

        let mut fr = FrameReader::new();
        let mut got = Vec::new();
        for b in wire.chunks(5) {
            fr.push(b);
            while let Some(m) = fr.next_frame::<FromCompanion>().unwrap() {
                got.push(m);
            }
        }
        assert_eq!(got, msgs);
        assert_eq!(fr.pending(), 0);
    }

    #[test]
    fn truncated_and_oversized_frames_are_errors() {
        let mut wire = encode(&ToCompanion::Finalize).unwrap();
        wire.pop();
        let mut r = &wire[..];
        assert!(matches!(read_frame::<_, ToCompanion>(&mut r), Err(FrameError::Truncated)));
        let huge = ((MAX_FRAME + 1) as u32).to_be_bytes();
        let mut fr = FrameReader::new();
        fr.push(&huge);
        assert!(matches!(fr.next_frame::<ToCompanion>(), Err(FrameError::TooLarge(_))));
        // Garbage of the right length is a decode error, not a panic.
        let mut fr = FrameReader::new();
        fr.push(&[0, 0, 0, 2, 0xff, 0xff]);
        assert!(matches!(fr.next_frame::<ToCompanion>(), Err(FrameError::Decode(_))));
    }
}

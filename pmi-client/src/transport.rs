//! The client end of `PMI_FD` (shared by libpmi and libpmi2): blocking writes, PMI-1 lines
//! and PMI-2 frames read with a carry-over buffer. No panicking paths.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::FromRawFd;

use pmi_wire::v2;

/// Longest PMI-1 reply line accepted.
const MAX_LINE: usize = 1 << 20;

/// The connection to the process manager: the `PMI_FD` socket plus the bytes read past the
/// last reply (a reply may arrive in pieces, or two in one read).
pub struct Transport {
    file: File,
    buf: Vec<u8>,
}

fn err(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_owned())
}

impl Transport {
    /// `Ok(None)` when `PMI_FD` is not set (singleton); an error when it is set but unusable.
    pub fn from_env() -> io::Result<Option<Transport>> {
        let Ok(v) = std::env::var("PMI_FD") else { return Ok(None) };
        let fd: i32 = v.trim().parse().map_err(|_| err("PMI_FD is not a number"))?;
        if fd < 0 {
            return Err(err("PMI_FD is negative"));
        }
        // SAFETY: the launcher handed us this descriptor for our exclusive use; from now on
        // the Transport owns it and closes it when dropped (after finalize).
        let file = unsafe { File::from_raw_fd(fd) };
        Ok(Some(Transport { file, buf: Vec::new() }))
    }

    /// Write one whole request (PMI-1 line or PMI-2 frame).
    pub fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all(bytes)
    }

    fn fill(&mut self) -> io::Result<()> {
        let mut chunk = [0u8; 4096];
        loop {
            match self.file.read(&mut chunk) {
                Ok(0) => {
                    return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "PMI server closed"))
                }
                Ok(n) => {
                    self.buf.extend_from_slice(chunk.get(..n).unwrap_or(&[]));
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// One PMI-1 reply line, with its `\n`.
    pub fn read_line(&mut self) -> io::Result<Vec<u8>> {
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let rest = self.buf.split_off(i + 1);
                return Ok(std::mem::replace(&mut self.buf, rest));
            }
            if self.buf.len() > MAX_LINE {
                return Err(err("PMI reply line too long"));
            }
            self.fill()?;
        }
    }

    /// One PMI-2 frame's body.
    pub fn read_frame(&mut self) -> io::Result<Vec<u8>> {
        loop {
            let split = v2::split_frame(&self.buf).map_err(|e| err(&e.to_string()))?;
            if let Some((body, used)) = split {
                let body = body.to_vec();
                self.buf.drain(..used);
                return Ok(body);
            }
            self.fill()?;
        }
    }
}

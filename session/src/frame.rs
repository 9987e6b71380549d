//! Frames on the master ↔ front end connection: a 4-byte big-endian length, then the bytes.

use std::io::{self, Read, Write};

pub fn write(w: &mut impl Write, data: &[u8]) -> io::Result<()> {
    let len = u32::try_from(data.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame too long"))?;
    w.write_all(&len.to_be_bytes())?;
    w.write_all(data)?;
    w.flush()
}

/// The next frame, `None` at a clean end of stream; a frame over `max` bytes is an error
/// (nothing of it is buffered).
pub fn read(r: &mut impl Read, max: usize) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes (at most {max})"),
        ));
    }
    let mut data = vec![0u8; len];
    r.read_exact(&mut data)?;
    Ok(Some(data))
}

//! Hydra's outside name server (`hydra_nameserver`, `mpiexec -nameserver HOST[:PORT]`): the
//! address and the wire format of its requests and answers, without I/O. The wire format is
//! described in `docs/spec/hydra-nameserver.md`; the front end's driver does the connecting.

use crate::msg::NameOp;

/// The port `hydra_nameserver` listens on when not told otherwise.
pub const DEFAULT_PORT: u16 = 6392;

/// The longest answer we take from a name server (a port name is at most
/// `MPI_MAX_PORT_NAME`, 256 bytes in MPICH; a published value is a PMI value).
pub const ANSWER_MAX: usize = 64 * 1024;

/// A name server's address: `HOST[:PORT]`, `[V6ADDR]` or `[V6ADDR]:PORT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    pub host: String,
    pub port: u16,
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// `-nameserver`'s value that is not an address: the value, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("-nameserver {value}: {why} (expected HOST or HOST:PORT)")]
pub struct AddressError {
    pub value: String,
    pub why: AddressFault,
}

/// What is wrong with a name server's address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressFault {
    #[error("no closing ']'")]
    NoClosingBracket,
    #[error("junk after ']'")]
    AfterBracket,
    #[error("no host name")]
    NoHost,
    /// The port is not a number in 1..65535: the text.
    #[error("'{0}' is not a port number")]
    Port(String),
}

/// A name server's request or answer that cannot be sent or understood (one line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// A word of a request that holds a NUL or is too long.
    #[error("cannot send '{}' to a name server", .0.escape_debug())]
    Unsendable(String),
    /// An answer's length out of bounds.
    #[error("an answer of {0} bytes is not a name server's")]
    Length(i32),
    #[error("an answer that is not text")]
    NotText,
    #[error("an answer with a NUL inside")]
    Nul,
    /// An answer to a publish or unpublish that is neither `SUCCESS` nor `FAILURE`.
    #[error("an unknown answer '{}'", .0.escape_debug())]
    Unknown(String),
}

/// Parse `-nameserver`'s value.
pub fn parse_address(s: &str) -> Result<Address, AddressError> {
    let bad = |why: AddressFault| Err(AddressError { value: s.to_string(), why });
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let Some((host, after)) = rest.split_once(']') else {
            return bad(AddressFault::NoClosingBracket);
        };
        match after {
            "" => (host, None),
            _ => match after.strip_prefix(':') {
                Some(p) => (host, Some(p)),
                None => return bad(AddressFault::AfterBracket),
            },
        }
    } else {
        match s.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return bad(AddressFault::NoHost);
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => return bad(AddressFault::Port(p.to_string())),
        },
    };
    Ok(Address { host: host.to_string(), port })
}

/// A request as the name server reads it: a count of strings, then each string as its length
/// with its terminating NUL and its bytes with that NUL; integers are 4-byte, in this host's
/// byte order (the server reads them so, whatever machine it runs on). An error if a string
/// holds a NUL (the server would cut it there).
pub fn encode_request(op: &NameOp) -> Result<Vec<u8>, WireError> {
    let words: Vec<&str> = match op {
        NameOp::Publish { service, port } => vec!["PUBLISH", service, port],
        NameOp::Unpublish { service } => vec!["UNPUBLISH", service],
        NameOp::Lookup { service } => vec!["LOOKUP", service],
    };
    let mut out = Vec::new();
    out.extend_from_slice(&(words.len() as i32).to_ne_bytes());
    for w in words {
        if w.contains('\0') || w.len() >= ANSWER_MAX {
            return Err(WireError::Unsendable(w.to_string()));
        }
        out.extend_from_slice(&((w.len() + 1) as i32).to_ne_bytes());
        out.extend_from_slice(w.as_bytes());
        out.push(0);
    }
    Ok(out)
}

/// The answer's length, from its 4-byte header: an error if it is out of bounds (a server
/// that is not a name server, or a hostile one).
pub fn answer_len(header: [u8; 4]) -> Result<usize, WireError> {
    let len = i32::from_ne_bytes(header);
    match usize::try_from(len) {
        Ok(n) if n <= ANSWER_MAX => Ok(n),
        _ => Err(WireError::Length(len)),
    }
}

/// What an answer of `body` (the bytes after the length) means for `op`: whether it succeeded
/// and, for a lookup, the value. Publish and unpublish answer `SUCCESS` or `FAILURE`; a lookup
/// answers the value, or an empty string for an unknown name.
pub fn decode_answer(op: &NameOp, body: &[u8]) -> Result<(bool, Option<String>), WireError> {
    let text = body.strip_suffix(&[0]).unwrap_or(body);
    let text = std::str::from_utf8(text).map_err(|_| WireError::NotText)?;
    if text.contains('\0') {
        return Err(WireError::Nul);
    }
    Ok(match op {
        NameOp::Lookup { .. } if text.is_empty() => (false, None),
        NameOp::Lookup { .. } => (true, Some(text.to_string())),
        _ => match text {
            "SUCCESS" => (true, None),
            "FAILURE" => (false, None),
            other => return Err(WireError::Unknown(other.to_string())),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup() -> NameOp {
        NameOp::Lookup { service: "svc".into() }
    }

    #[test]
    fn addresses() {
        let a = |h: &str, p| Address { host: h.into(), port: p };
        assert_eq!(parse_address("n1"), Ok(a("n1", DEFAULT_PORT)));
        assert_eq!(parse_address("n1:7000"), Ok(a("n1", 7000)));
        assert_eq!(parse_address("10.0.0.1:1"), Ok(a("10.0.0.1", 1)));
        assert_eq!(parse_address("[::1]"), Ok(a("::1", DEFAULT_PORT)));
        assert_eq!(parse_address("[fe80::1]:9"), Ok(a("fe80::1", 9)));
        assert_eq!(a("::1", 9).to_string(), "[::1]:9");
        assert_eq!(a("n1", 9).to_string(), "n1:9");
        for bad in
            ["", ":7000", "n1:", "n1:0", "n1:70000", "n1:+7", "n1:x", "[::1", "[::1]x", "a b"]
        {
            let e = parse_address(bad).unwrap_err().to_string();
            assert!(e.starts_with(&format!("-nameserver {bad}: ")), "{e}");
        }
    }

    #[test]
    fn requests_as_the_server_reads_them() {
        let op = NameOp::Publish { service: "svc".into(), port: "tag#0$".into() };
        let mut want = Vec::new();
        for part in [&3i32.to_ne_bytes()[..], &8i32.to_ne_bytes(), b"PUBLISH\0"] {
            want.extend_from_slice(part);
        }
        for part in [&4i32.to_ne_bytes()[..], b"svc\0", &7i32.to_ne_bytes(), b"tag#0$\0"] {
            want.extend_from_slice(part);
        }
        assert_eq!(encode_request(&op).unwrap(), want);
        let un = encode_request(&NameOp::Unpublish { service: "s".into() }).unwrap();
        assert_eq!(un.len(), 4 + 4 + 10 + 4 + 2);
        assert!(encode_request(&NameOp::Lookup { service: "a\0b".into() }).is_err());
    }

    #[test]
    fn answers() {
        let publish = NameOp::Publish { service: "s".into(), port: "p".into() };
        assert_eq!(decode_answer(&publish, b"SUCCESS\0"), Ok((true, None)));
        assert_eq!(decode_answer(&publish, b"FAILURE\0"), Ok((false, None)));
        assert!(decode_answer(&publish, b"MAYBE\0").is_err());
        assert_eq!(decode_answer(&lookup(), b"tcp://x:1\0"), Ok((true, Some("tcp://x:1".into()))));
        assert_eq!(decode_answer(&lookup(), b"\0"), Ok((false, None)));
        assert_eq!(decode_answer(&lookup(), b""), Ok((false, None)));
        assert!(decode_answer(&lookup(), b"a\0b\0").is_err());
        assert!(decode_answer(&lookup(), &[0xff, 0]).is_err());
        assert_eq!(answer_len(8i32.to_ne_bytes()), Ok(8));
        assert!(answer_len((-1i32).to_ne_bytes()).is_err());
        assert!(answer_len(((ANSWER_MAX + 1) as i32).to_ne_bytes()).is_err());
    }
}

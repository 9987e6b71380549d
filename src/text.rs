//! Text that came from outside (a rank's abort message, a peer's bytes) made safe to print on
//! a terminal.

/// `bytes` as one printable line of at most about `max` bytes: printable characters (UTF-8
/// included) as they are; control characters (newlines, escape sequences, bells), Unicode
/// format characters (bidirectional overrides, zero-width characters), invalid UTF-8 and the
/// backslash itself as `\xNN` per byte (so the original bytes can be read back). What does
/// not fit is replaced by ` [+N bytes]`.
pub fn escape(bytes: &[u8], max: usize) -> String {
    let mut out = String::new();
    let mut used = 0;
    let mut push = |out: &mut String, piece: &str, len: usize| -> bool {
        if out.len() + piece.len() > max {
            return false;
        }
        out.push_str(piece);
        used += len;
        true
    };
    'chunks: for chunk in bytes.utf8_chunks() {
        let mut buf = [0u8; 4];
        for c in chunk.valid().chars() {
            let ok = if shown(c) {
                push(&mut out, c.encode_utf8(&mut buf), c.len_utf8())
            } else {
                let hex: String = c.encode_utf8(&mut buf).bytes().map(hex_byte).collect();
                push(&mut out, &hex, c.len_utf8())
            };
            if !ok {
                break 'chunks;
            }
        }
        for &b in chunk.invalid() {
            if !push(&mut out, &hex_byte(b), 1) {
                break 'chunks;
            }
        }
    }
    if used < bytes.len() {
        out.push_str(&format!(" [+{} bytes]", bytes.len() - used));
    }
    out
}

fn hex_byte(b: u8) -> String {
    format!("\\x{b:02x}")
}

/// Printed as itself: not a control character, not the backslash, not an invisible format
/// character (category Cf: U+00AD, U+0600–U+0605, U+061C, U+06DD, U+070F, U+180E, U+200B–U+200F,
/// U+202A–U+202E, U+2060–U+2064, U+2066–U+206F, U+FEFF, U+FFF9–U+FFFB), not a line or
/// paragraph separator.
fn shown(c: char) -> bool {
    !(c.is_control()
        || c == '\\'
        || matches!(c,
            '\u{ad}'
            | '\u{600}'..='\u{605}'
            | '\u{61c}'
            | '\u{6dd}'
            | '\u{70f}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}'
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}'))
}

/// The bytes behind an [`escape`]d text without its ` [+N bytes]` tail: each `\xNN` is the
/// byte NN; everything else is itself.
pub fn unescape(text: &str) -> Vec<u8> {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b.get(i + 2..i + 4).and_then(|h| std::str::from_utf8(h).ok());
        match (b[i], b.get(i + 1), hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'\\', Some(b'x'), Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (c, ..) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{escape, unescape};

    #[test]
    fn unescape_gives_the_bytes_back() {
        for b in [&b"nl\nsleep"[..], b"a\x1b[2Jb\\x41", b"\xff\xfe ok", "d\u{e9}j\u{e0}".as_bytes()]
        {
            assert_eq!(unescape(&escape(b, usize::MAX)), b);
        }
        assert_eq!(unescape("plain \\q \\x4"), b"plain \\q \\x4");
    }

    #[test]
    fn printable_text_is_kept() {
        assert_eq!(
            escape(b"rank 3 gives up: out of memory", 1024),
            "rank 3 gives up: out of memory"
        );
        assert_eq!(escape("désolé ✓".as_bytes(), 1024), "désolé ✓");
    }

    #[test]
    fn control_and_invalid_bytes_are_escaped() {
        assert_eq!(escape(b"a\x1b[2Jb\x07\n", 1024), "a\\x1b[2Jb\\x07\\x0a");
        assert_eq!(escape(b"\xff\xfe ok", 1024), "\\xff\\xfe ok");
        assert_eq!(escape(b"back\\slash", 1024), "back\\x5cslash");
        assert_eq!(escape("x\u{202e}y".as_bytes(), 1024), "x\\xe2\\x80\\xaey");
        assert_eq!(escape(b"\x9b", 1024), "\\x9b");
        assert_eq!(escape("\u{9b}".as_bytes(), 1024), "\\xc2\\x9b");
    }

    #[test]
    fn length_is_capped() {
        let s = escape(&[b'x'; 5000], 1024);
        assert!(s.starts_with(&"x".repeat(1024)) && s.ends_with(" [+3976 bytes]"), "{s}");
        let s = escape(&[0u8; 5000], 1024);
        assert!(s.len() < 1024 + 20 && s.ends_with(" [+4744 bytes]"), "{s}");
    }
}

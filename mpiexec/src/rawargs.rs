//! Arguments that are not UTF-8. Our options are parsed as text, but a program's arguments
//! and the values of `-genv`/`-env` may be any bytes, as under Hydra, which passes them on.
//! So may `-wdir`/`-gwdir`. Each such argument (on the command line, or a word of a
//! `-configfile`) stands in as a marker no real argument holds while the command line is
//! parsed; after parsing, a marker found where bytes may go becomes the argument's bytes
//! again, and one found anywhere else (another option's value, a program's name, a
//! variable's name) is refused by name: [`RawArgs::restore`] looks through every text the
//! parsed command line holds, as [`Strings`](crate::cli::Strings) hands them over, field
//! by field.

use crate::cli::{CommandLine, Strings as _};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt as _;

/// An argument that is not UTF-8 where text must be: what it was and how it looks.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "{what} ('{shown}') is not valid UTF-8 (only a program's arguments, environment values and \
     working directories may not be)"
)]
pub struct NotUtf8 {
    /// "argument 4", "word 3 of configfile 'f'".
    what: String,
    /// The argument, lossily.
    shown: String,
}

/// The arguments that are not UTF-8, and the markers standing for them.
pub struct RawArgs {
    /// What every marker holds (after a private-use character): unique to this process.
    tag: String,
    args: Vec<RawArg>,
}

struct RawArg {
    /// What it is, for a message: "argument 4", "word 3 of configfile 'f'".
    what: String,
    /// What stands for it while the command line is parsed.
    stand_in: String,
    whole: OsString,
    /// What follows its first `=`, when what precedes that is text (`-env NAME=VALUE`
    /// splits at the `=` as parsed).
    after_eq: Option<OsString>,
}

impl Default for RawArgs {
    fn default() -> Self {
        RawArgs { tag: format!("libi-raw-argument-{}-", std::process::id()), args: Vec::new() }
    }
}

impl RawArgs {
    /// Our command line as text, with the arguments that are not UTF-8 standing in.
    pub fn command_line(argv: impl Iterator<Item = OsString>) -> (Vec<String>, RawArgs) {
        let mut raw = RawArgs::default();
        let argv = argv
            .enumerate()
            .map(|(i, a)| {
                a.into_string().unwrap_or_else(|a| raw.stand_in(a, format!("argument {}", i + 1)))
            })
            .collect();
        (argv, raw)
    }

    /// The text that stands for `whole` (not UTF-8) while the command line is parsed.
    pub fn stand_in(&mut self, whole: OsString, what: String) -> String {
        let marker = self.marker(self.args.len());
        let bytes = whole.as_bytes();
        let split = bytes.iter().position(|&b| b == b'=').and_then(|eq| {
            let name = std::str::from_utf8(&bytes[..eq]).ok()?;
            Some((name.to_string(), OsStr::from_bytes(&bytes[eq + 1..]).to_os_string()))
        });
        let (stand_in, after_eq) = match split {
            Some((name, value)) => (format!("{name}={marker}"), Some(value)),
            None => (marker, None),
        };
        self.args.push(RawArg { what, stand_in: stand_in.clone(), whole, after_eq });
        stand_in
    }

    fn marker(&self, i: usize) -> String {
        format!("\u{E000}{}{i}.", self.tag)
    }

    /// `text` with every marker shown as its argument (lossily).
    pub fn lossy(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (i, a) in self.args.iter().enumerate() {
            out = out.replace(&a.stand_in, &a.whole.to_string_lossy());
            let rest = a.after_eq.as_ref().unwrap_or(&a.whole);
            out = out.replace(&self.marker(i), &rest.to_string_lossy());
        }
        out
    }

    /// Put the arguments back where bytes may go; refuse one found elsewhere.
    pub fn restore(&self, cl: &mut CommandLine) -> Result<(), NotUtf8> {
        if self.args.is_empty() {
            return Ok(());
        }
        // A whole argument (a program's) by its stand-in, or the value split from
        // `NAME=VALUE` by its marker.
        let mut bytes: std::collections::HashMap<String, &OsString> =
            std::collections::HashMap::new();
        for (i, a) in self.args.iter().enumerate() {
            bytes.insert(a.stand_in.clone(), &a.whole);
            if let Some(value) = &a.after_eq {
                bytes.insert(self.marker(i), value);
            }
        }
        let put_back = |v: &mut OsString| {
            if let Some(b) = v.to_str().and_then(|t| bytes.get(t)) {
                *v = (*b).clone();
            }
        };
        for (_, v) in &mut cl.global.genv {
            put_back(v);
        }
        cl.global.gwdir.iter_mut().for_each(put_back);
        for e in &mut cl.execs {
            e.args.iter_mut().for_each(put_back);
            e.env.iter_mut().for_each(|(_, v)| put_back(v));
            e.wdir.iter_mut().for_each(put_back);
        }
        // Anything else that holds a marker: each text the command line holds, in the order
        // of its fields (the first found is named).
        let mut refused = None;
        cl.strings(&mut |text| {
            if refused.is_none() {
                refused = self.refusal_in(text);
            }
        });
        match refused {
            None => Ok(()),
            Some(m) => Err(m),
        }
    }

    /// The error for the first argument whose marker `text` holds, if any (one pass over
    /// `text`, however many arguments there are).
    pub fn refusal(&self, text: &str) -> Option<NotUtf8> {
        self.refusal_in(text.as_ref())
    }

    /// [`RawArgs::refusal`] of text that need not be UTF-8.
    fn refusal_in(&self, text: &OsStr) -> Option<NotUtf8> {
        let text = text.as_bytes();
        let tag = self.tag.as_bytes();
        let a = memchr::memmem::find_iter(text, tag).find_map(|at| {
            let rest = &text[at + tag.len()..];
            let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
            if rest[digits..].starts_with(b".") {
                self.args.get(std::str::from_utf8(&rest[..digits]).ok()?.parse::<usize>().ok()?)
            } else {
                None
            }
        })?;
        Some(NotUtf8 { what: a.what.clone(), shown: a.whole.to_string_lossy().into_owned() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{parse_with_defaults, CliError, IGNORED, LONG};

    /// Parse `argv` as `main` does, then restore: the command line, or the one-line error.
    fn run(argv: &[OsString]) -> (RawArgs, Result<CommandLine, String>) {
        let (text, mut raw) = RawArgs::command_line(argv.iter().cloned());
        let r = match parse_with_defaults(None, &text, &mut raw) {
            Ok(mut cl) => raw.restore(&mut cl).map(|()| cl).map_err(|e| e.to_string()),
            Err(CliError::Usage(m)) => {
                Err(raw.refusal(&m).map_or_else(|| raw.lossy(&m), |e| e.to_string()))
            }
            Err(e) => Err(format!("{e:?}")),
        };
        (raw, r)
    }

    fn os(b: &[u8]) -> OsString {
        OsStr::from_bytes(b).to_os_string()
    }

    /// Every option, with values that are not UTF-8 (whole words, `-opt=VALUE`, and
    /// `NAME=VALUE` words): the command line is refused, or each value is put back as bytes
    /// where bytes may go. Never is a marker left behind: the parsed command line's Debug
    /// text (only the witness here) holds none after a restore that succeeded. An option
    /// whose value lands in a field that [`Strings`](crate::cli::Strings) does not visit
    /// fails here.
    #[test]
    fn no_marker_is_left_behind_by_any_option() {
        let options =
            (LONG.iter().map(|&(n, _, k)| (n, k))).chain(IGNORED.iter().map(|&(n, k, _)| (n, k)));
        let mut restored = 0;
        for (name, nvals) in options.filter(|&(_, k)| k > 0) {
            let value = |i: usize| os(format!("v{i}\u{E000}").as_bytes()).into_encoded_bytes();
            let raw_value = |i: usize| {
                let mut v = value(i);
                v.push(0xff);
                os(&v)
            };
            let mut lines: Vec<Vec<OsString>> = Vec::new();
            // -opt RAW RAW... prog
            lines.push(
                std::iter::once(OsString::from(format!("-{name}")))
                    .chain((0..nvals).map(raw_value))
                    .chain([OsString::from("prog")])
                    .collect(),
            );
            // -opt=RAW RAW... prog
            let mut first = format!("-{name}=").into_bytes();
            first.extend(raw_value(0).as_bytes());
            lines.push(
                std::iter::once(os(&first))
                    .chain((1..nvals).map(raw_value))
                    .chain([OsString::from("prog")])
                    .collect(),
            );
            // -opt N=RAW RAW... prog (for -genv and -env, the pair in one word)
            let mut pair = b"N=".to_vec();
            pair.extend(raw_value(0).as_bytes());
            lines.push(
                [OsString::from(format!("-{name}")), os(&pair)]
                    .into_iter()
                    .chain((2..nvals).map(raw_value))
                    .chain([OsString::from("prog")])
                    .collect(),
            );
            for line in lines {
                let (raw, r) = run(&line);
                match r {
                    Ok(cl) => {
                        restored += 1;
                        let debug = format!("{cl:?}");
                        assert!(!debug.contains(&raw.tag), "{line:?}: a marker is left: {debug}");
                    }
                    Err(m) => assert!(!m.contains(&raw.tag), "{line:?}: {m}"),
                }
            }
        }
        // -wdir and -gwdir in all three forms, -genv and -env as a pair in one word.
        assert_eq!(restored, 8);
    }

    /// What each field that may hold bytes gets, and the refusal of a value elsewhere: the
    /// first in the order of the fields is named.
    #[test]
    fn bytes_where_bytes_may_go_and_refusals_by_name() {
        let line = |words: &[&[u8]]| words.iter().map(|w| os(w)).collect::<Vec<_>>();
        let (_, r) = run(&line(&[
            b"-genv",
            b"G",
            b"g\xff",
            b"-gwdir",
            b"/g\xff",
            b"-n",
            b"1",
            b"-env",
            b"E=e\xff",
            b"-wdir=/w\xff",
            b"prog",
            b"a\xff",
        ]));
        let cl = r.expect("restored");
        assert_eq!(cl.global.genv, [("G".into(), os(b"g\xff"))]);
        assert_eq!(cl.global.gwdir, Some(os(b"/g\xff")));
        let e = &cl.execs[0];
        assert_eq!(e.env, [("E".into(), os(b"e\xff"))]);
        assert_eq!((e.wdir.clone(), e.args.clone()), (Some(os(b"/w\xff")), vec![os(b"a\xff")]));
        let refused = |what: &str| {
            format!(
                "{what} is not valid UTF-8 (only a program's arguments, environment values and \
                 working directories may not be)"
            )
        };
        for (words, want) in [
            (&[&b"-hosts"[..], b"h\xff", b"-n", b"1", b"x"][..], "argument 2 ('h\u{FFFD}')"),
            (&[b"-n", b"1", b"p\xff"], "argument 3 ('p\u{FFFD}')"),
            (&[b"-n", b"1", b"-env", b"N\xff", b"v", b"x"], "argument 4 ('N\u{FFFD}')"),
            (&[b"-topolib", b"t\xff", b"-n", b"1", b"x"], "argument 2 ('t\u{FFFD}')"),
            (&[b"-prepend-pattern", b"%r\xff", b"x"], "argument 2 ('%r\u{FFFD}')"),
            (&[b"-nameserver", b"n\xff", b"x"], "argument 2 ('n\u{FFFD}')"),
            (&[b"-genvlist", b"A,\xff", b"x"], "argument 2 ('A,\u{FFFD}')"),
            // Two: the one in the earlier field (the host list before the program).
            (&[b"-n", b"1", b"-hosts", b"h\xff", b"p\xfe"], "argument 4 ('h\u{FFFD}')"),
            (&[b"-n", b"1", b"p\xfe", b":", b"-f", b"f\xff", b"y"], "argument 6 ('f\u{FFFD}')"),
        ] {
            let (_, r) = run(&line(words));
            assert_eq!(r.expect_err(want), refused(want), "{words:?}");
        }
    }
}

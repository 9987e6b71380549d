//! Arguments that are not UTF-8. Our options are parsed as text, but a program's arguments
//! and the values of `-genv`/`-env` may be any bytes, as under Hydra, which passes them on.
//! So may `-wdir`/`-gwdir`. Each such argument (on the command line, or a word of a
//! `-configfile`) stands in as a marker no real argument holds while the command line is
//! parsed; after parsing, a marker found where bytes may go becomes the argument's bytes
//! again, and one found anywhere else (another option's value, a program's name, a
//! variable's name) is refused by name.

use crate::cli::CommandLine;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt as _;

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
    pub fn restore(&self, cl: &mut CommandLine) -> Result<(), String> {
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
        // Anything else that holds a marker (it shows in the parsed command line's text).
        match self.refusal(&format!("{cl:?}")) {
            None => Ok(()),
            Some(m) => Err(m),
        }
    }

    /// The error for the first argument whose marker `text` holds, if any (one pass over
    /// `text`, however many arguments there are).
    pub fn refusal(&self, text: &str) -> Option<String> {
        let a = text.match_indices(&self.tag).find_map(|(at, _)| {
            let rest = &text[at + self.tag.len()..];
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if rest[digits..].starts_with('.') {
                self.args.get(rest[..digits].parse::<usize>().ok()?)
            } else {
                None
            }
        })?;
        Some(format!(
            "{} ('{}') is not valid UTF-8 (only a program's arguments, environment values and \
             working directories may not be)",
            a.what,
            a.whole.to_string_lossy()
        ))
    }
}

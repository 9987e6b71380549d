//! Command lines kept in files: `-configfile FILE` (one segment per line) and Hydra's file of
//! default options (`$HYDRA_CONFIG_FILE`, `~/.mpiexec.hydra.conf`).

use super::{usage, CliError};
use crate::rawargs::RawArgs;

/// Split a `-configfile` into argument words: one segment per non-comment line; a line
/// ending in `\` goes on with the next (as Hydra 5 reads it). Words are split at ASCII
/// blanks, and a word that is not UTF-8 stands in as `raw` says (Hydra passes its bytes on).
pub(super) fn configfile_args(path: &str, raw: &mut RawArgs) -> Result<Vec<String>, CliError> {
    let bytes = libi::hosts::read_bytes(path)
        .map_err(|e| usage(format!("cannot read configfile '{path}': {e}")))?;
    let mut lines: Vec<Vec<u8>> = Vec::new();
    let mut cur = Vec::new();
    for line in bytes.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        match line.trim_ascii_end().strip_suffix(b"\\") {
            Some(part) => {
                cur.extend_from_slice(part);
                cur.push(b' ');
            }
            None => {
                cur.extend_from_slice(line);
                lines.push(std::mem::take(&mut cur));
            }
        }
    }
    if !cur.is_empty() {
        lines.push(cur);
    }
    let mut words = Vec::new();
    let mut n = 0;
    for line in &lines {
        let line = line.split(|&b| b == b'#').next().unwrap_or(b"").trim_ascii();
        if line.is_empty() {
            continue;
        }
        if !words.is_empty() {
            words.push(":".to_string());
        }
        for w in line.split(u8::is_ascii_whitespace).filter(|w| !w.is_empty()) {
            n += 1;
            words.push(match std::str::from_utf8(w) {
                Ok(w) => w.to_string(),
                Err(_) => {
                    use std::os::unix::ffi::OsStrExt as _;
                    let w = std::ffi::OsStr::from_bytes(w).to_os_string();
                    raw.stand_in(w, format!("word {n} of configfile '{path}'"))
                }
            });
        }
    }
    if words.is_empty() {
        return Err(usage(format!("configfile '{path}' names no program")));
    }
    Ok(words)
}

/// `HYDRA_CONFIG_FILE` names a file that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("HYDRA_CONFIG_FILE: cannot read '{path}': {source}")]
pub struct DefaultsError {
    path: String,
    source: std::io::Error,
}

/// The path of Hydra's file of default options and its words.
pub type DefaultOptions = (String, Vec<String>);

/// Hydra's file of default options: `$HYDRA_CONFIG_FILE`, else `~/.mpiexec.hydra.conf` if
/// there is one. Its path and words (whitespace-separated, `#` to the end of a line is a
/// comment, as Hydra reads it), or `None`. A `HYDRA_CONFIG_FILE` that cannot be read is an
/// error (Hydra ignores it silently); a `~/.mpiexec.hydra.conf` that cannot be read (a
/// `$HOME` of another user's, say) is as good as absent, as for Hydra, with a note for `-v`
/// (the second value). `get` looks a variable up.
pub fn defaults_file(
    get: &dyn Fn(&str) -> Option<String>,
) -> Result<(Option<DefaultOptions>, Option<String>), DefaultsError> {
    let (path, must) = match get("HYDRA_CONFIG_FILE").filter(|v| !v.trim().is_empty()) {
        Some(p) => (p, true),
        None => match get("HOME").filter(|h| !h.is_empty()) {
            Some(h) => (format!("{}/.mpiexec.hydra.conf", h.trim_end_matches('/')), false),
            None => return Ok((None, None)),
        },
    };
    let text = match libi::hosts::read_text(&path) {
        Ok(t) => t,
        Err(e) if !must && e.kind() == std::io::ErrorKind::NotFound => return Ok((None, None)),
        Err(source) if must => return Err(DefaultsError { path, source }),
        Err(e) => {
            return Ok((None, Some(format!("no default options: cannot read '{path}': {e}"))))
        }
    };
    let words = text
        .lines()
        .flat_map(|l| l.split('#').next().unwrap_or("").split_whitespace())
        .map(str::to_string)
        .collect();
    Ok((Some((path, words)), None))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::parse_with_defaults;
    use crate::cli::testing::p;

    #[test]
    fn configfile() {
        let dir = std::env::temp_dir().join(format!("libi-cf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let f = dir.join("cf");
        std::fs::write(&f, "# comment\n-n 2 a x\n\n-n 1 b # trailing\n").expect("write");
        let c = p(&format!("-l -configfile {}", f.display())).expect("parse");
        assert_eq!(c.execs.len(), 2);
        assert_eq!(c.execs[0].args, vec!["x"]);
        assert_eq!(c.execs[1].prog, "b");
        assert!(c.global.label);
        assert!(matches!(p("-configfile /nonexistent/x"), Err(CliError::Usage(_))));
        // A line ending in a backslash goes on with the next (Hydra 5).
        std::fs::write(&f, "-n 2 -env X 1 a c \\\n  d\n-n 1 b\n").expect("write");
        let c = p(&format!("-configfile {}", f.display())).expect("parse");
        assert_eq!((c.execs.len(), c.execs[0].args.clone()), (2, vec!["c".into(), "d".into()]));
        // A configfile that names a configfile (itself, here) is refused, not read forever.
        std::fs::write(&f, format!("-configfile {}\n", f.display())).expect("write");
        match p(&format!("-configfile {}", f.display())) {
            Err(CliError::Usage(m)) => assert!(m.contains("names a configfile"), "{m}"),
            other => panic!("{:?}", other.map(|c| c.execs.len())),
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn defaults_file_goes_first_and_the_command_line_wins() {
        let words = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        let file = words("-genv A file -ppn 2 -l");
        let argv = words("-genv A cmd -ppn 3 -n 1 prog");
        let c =
            parse_with_defaults(Some(("f", &file)), &argv, &mut RawArgs::default()).expect("parse");
        assert_eq!(c.global.genv, vec![("A".into(), "file".into()), ("A".into(), "cmd".into())]);
        assert_eq!(c.global.ppn, Some(3));
        assert!(c.global.label);
        assert_eq!(c.execs.len(), 1);
        // MPMD segments count from the command line's first.
        let argv = words("-n 1 a : -n 2");
        match parse_with_defaults(Some(("f", &file)), &argv, &mut RawArgs::default()) {
            Err(CliError::Usage(m)) => assert_eq!(m, "segment 2 names no program"),
            other => panic!("{other:?}"),
        }
        for (text, what) in [
            ("-n 2", "f: -n, -env, -wdir and -configfile belong on the command line"),
            ("-genv A b prog", "f: 'prog' is not an option"),
            ("-rankmap x", "f: -rankmap: 'x' is not a node index"),
            ("-what", "f: unrecognized option '-what'"),
        ] {
            match parse_with_defaults(
                Some(("f", &words(text))),
                &words("prog"),
                &mut RawArgs::default(),
            ) {
                Err(CliError::Usage(m)) => assert!(m.starts_with(what), "{text}: {m}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        // Reading it: HYDRA_CONFIG_FILE, else ~/.mpiexec.hydra.conf if there is one.
        let dir = std::env::temp_dir().join(format!("libi-conf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let home = dir.to_string_lossy().into_owned();
        let env = |vars: Vec<(&'static str, String)>| {
            move |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
        };
        assert_eq!(
            defaults_file(&env(vec![("HOME", home.clone())])).expect("absent"),
            (None, None)
        );
        // One that cannot be read (here a directory; another user's $HOME, as in `su`
        // without `-`): absent, with a note.
        std::fs::create_dir_all(dir.join(".mpiexec.hydra.conf")).expect("mkdir");
        let (none, note) = defaults_file(&env(vec![("HOME", home.clone())])).expect("absent");
        assert_eq!(none, None);
        assert!(note.expect("a note").starts_with("no default options: cannot read '"));
        std::fs::remove_dir(dir.join(".mpiexec.hydra.conf")).expect("rmdir");
        std::fs::write(dir.join(".mpiexec.hydra.conf"), "-l # x\n\n -ppn 2\n").expect("write");
        let (path, w) =
            defaults_file(&env(vec![("HOME", home.clone())])).expect("read").0.expect("file");
        assert_eq!((path.ends_with("/.mpiexec.hydra.conf"), w), (true, words("-l -ppn 2")));
        let other = dir.join("other").to_string_lossy().into_owned();
        let e = defaults_file(&env(vec![("HOME", home), ("HYDRA_CONFIG_FILE", other)]));
        assert!(e.expect_err("missing").to_string().starts_with("HYDRA_CONFIG_FILE: cannot read"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

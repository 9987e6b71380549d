//! Hydra's spellings: every name an option goes by ([`LONG`]: one or two dashes, aliases,
//! short names, `-opt=value`), the Hydra options accepted and ignored ([`IGNORED`]), their
//! turning into clap's spelling ([`normalise`]), one option's help (`-OPTION -h`), and one
//! segment parsed ([`parse_segment`]).

use super::schema::Segment;
use super::{usage, CliError};
use clap::Parser;

/// The options by their Hydra names (plus aliases and short names): the name clap knows them
/// by, and how many values follow them (to find where the program starts).
pub(crate) const LONG: &[(&str, &str, usize)] = &[
    ("np", "np", 1),
    ("genv", "genv", 2),
    ("genvlist", "genvlist", 1),
    ("genvnone", "genvnone", 0),
    ("genvall", "genvall", 0),
    ("env", "env", 2),
    ("envlist", "envlist", 1),
    ("envnone", "envnone", 0),
    ("envall", "envall", 0),
    ("wdir", "wdir", 1),
    ("gwdir", "gwdir", 1),
    ("prepend-rank", "prepend-rank", 0),
    ("configfile", "configfile", 1),
    ("prepend-pattern", "prepend-pattern", 1),
    ("outfile-pattern", "outfile-pattern", 1),
    ("errfile-pattern", "errfile-pattern", 1),
    ("rmk", "rmk", 1),
    ("pmi", "pmi", 1),
    ("info", "info", 0),
    ("proctable", "proctable", 1),
    ("job-launcher", "job-launcher", 1),
    ("disable-auto-cleanup", "disable-auto-cleanup", 0),
    ("enable-auto-cleanup", "enable-auto-cleanup", 0),
    ("verbose", "verbose", 0),
    ("tree", "tree", 1),
    ("launch-model", "launch-model", 1),
    ("usize", "usize", 1),
    ("nla-path", "nla-path", 1),
    ("hostfile", "hostfile", 1),
    ("machinefile", "hostfile", 1),
    ("hosts", "hosts", 1),
    ("host", "hosts", 1),
    ("ppn", "ppn", 1),
    ("launcher", "launcher", 1),
    ("launcher-exec", "launcher-exec", 1),
    ("bootstrap", "launcher", 1),
    ("bootstrap-exec", "launcher-exec", 1),
    ("localhost", "localhost", 1),
    ("iface", "iface", 1),
    ("report", "report", 1),
    ("launch-timeout", "launch-timeout", 1),
    ("launch-batch", "launch-batch", 1),
    ("max-conn", "max-conn", 1),
    ("pmgr", "pmgr", 0),
    ("end-on-stdin-eof", "end-on-stdin-eof", 0),
    ("bcast", "bcast", 0),
    ("kvs-push-max", "kvs-push-max", 1),
    ("kvs-max", "kvs-max", 1),
    ("bind-to", "bind-to", 1),
    ("map-by", "map-by", 1),
    ("membind", "membind", 1),
    ("order-nodes", "order-nodes", 1),
    ("gpus-per-proc", "gpus-per-proc", 1),
    ("gpu-subdevs-per-proc", "gpu-subdevs-per-proc", 1),
    ("print-all-exitcodes", "print-all-exitcodes", 0),
    ("skip-launch-node", "skip-launch-node", 0),
    ("hybrid-hosts", "hybrid-hosts", 0),
    ("rankmap", "rankmap", 1),
    ("memory-alloc-kinds", "memory-alloc-kinds", 1),
    ("nameserver", "nameserver", 1),
    ("pmi_args", "pmi-args", 4),
    ("man", "man", 0),
    ("help", "help", 0),
    ("version", "version", 0),
    ("n", "np", 1),
    ("f", "hostfile", 1),
    ("l", "prepend-rank", 0),
    ("v", "verbose", 0),
    ("h", "help", 0),
    ("V", "version", 0),
];

/// Hydra options for parts of Hydra's own machinery that libi has no counterpart of, which
/// change nothing a job does: accepted and ignored (a note under `-v`). How many values each
/// takes (as Hydra 5), and why it is ignored.
pub(crate) const IGNORED: &[(&str, usize, &str)] = &[
    ("enable-x", 0, "libi never forwards X"),
    ("disable-x", 0, "libi never forwards X"),
    ("demux", 1, "Hydra's demux engine; libi has its own event loop"),
    ("topolib", 1, "Hydra's topology library; libi reads the topology from sysfs"),
    ("profile", 0, "Hydra's count of PMI calls"),
    ("disable-hostname-propagation", 0, "ranks get PMI_HOSTNAME, as from Hydra 5 either way"),
    ("enable-hostname-propagation", 0, "ranks get PMI_HOSTNAME, as from Hydra 5 either way"),
    ("pmi-port", 0, "Hydra's PMI_PORT model; ranks reach PMI over PMI_FD, as Hydra's default"),
];

/// Turn Hydra spellings into clap's (`-genv` → `--genv`); reject unknown options by name.
///
/// As Hydra: an option may have one or two dashes (`-np`, `--np`, `--n`), and its first value
/// may follow an `=` (`-n=2`, `--hosts=a:2`, `-genv=NAME VALUE`); `-genv`/`-env` also take one
/// `NAME=VALUE` word (`-genv NAME=VALUE`, `-genv=NAME=VALUE`). Splitting at `=` happens only
/// for a known option, and never after the program name. Unlike Hydra (which makes the value
/// a word of its own, so that `-l=1` runs a program named `1`), a value given to an option
/// that takes none, or an empty one (`-n=`), is an error.
fn normalise(seg: &[String]) -> Result<(Vec<String>, Vec<String>), CliError> {
    let mut out = vec!["libi-mpiexec".to_string()];
    let mut notes = Vec::new();
    let mut i = 0;
    while i < seg.len() {
        let t = &seg[i];
        if !t.starts_with('-') || t == "-" {
            out.extend(seg[i..].iter().cloned());
            break;
        }
        let body = t.trim_start_matches('-');
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (body, None),
        };
        let (canon, nvals, ignored) = match (
            LONG.iter().find(|(n, _, _)| *n == name),
            IGNORED.iter().find(|o| o.0 == name),
        ) {
            (Some(&(_, canon, nvals)), _) => (canon, nvals, None),
            (None, Some(&(_, nvals, why))) => ("", nvals, Some(why)),
            (None, None) => return Err(usage(format!("unrecognized option '{t}'"))),
        };
        let shown = format!("-{name}");
        // As Hydra: `-OPTION -h` (or `-help`, `--help`) describes that option.
        if inline.is_none() && seg.get(i + 1).is_some_and(|w| HELP_WORDS.contains(&w.as_str())) {
            return Err(CliError::Info(option_help(&shown, canon, ignored)));
        }
        // The option's values: the inline one, then the words after it.
        let mut vals: Vec<String> = Vec::with_capacity(nvals);
        match inline {
            Some(_) if nvals == 0 => {
                return Err(usage(format!("option '{shown}' takes no value, got '{t}'")))
            }
            Some("") => return Err(usage(format!("option '{shown}' has an empty value in '{t}'"))),
            Some(v) => vals.push(v.to_string()),
            None => {}
        }
        // `-genv NAME=VALUE`: the pair in one word.
        if matches!(canon, "genv" | "env") {
            let first = match vals.first() {
                Some(v) => Some(v.clone()),
                None => seg.get(i + 1).cloned(),
            };
            if let Some((k, v)) = first.as_deref().and_then(|w| w.split_once('=')) {
                if k.is_empty() {
                    return Err(usage(format!("option '{shown}': no variable name in '{k}={v}'")));
                }
                if inline.is_none() {
                    i += 1;
                }
                vals = vec![k.to_string(), v.to_string()];
            }
        }
        while vals.len() < nvals {
            i += 1;
            match seg.get(i) {
                Some(v) => vals.push(v.clone()),
                None => return Err(usage(format!("option '{shown}' needs {nvals} value(s)"))),
            }
        }
        if let Some(why) = ignored {
            if name == "demux" && !matches!(vals[0].as_str(), "poll" | "select") {
                return Err(usage(format!(
                    "-demux: unknown engine '{}' (Hydra's: poll select)",
                    vals[0]
                )));
            }
            let given = std::iter::once(format!("-{name}")).chain(vals).collect::<Vec<_>>();
            notes.push(format!("{}: ignored ({why})", given.join(" ")));
        } else if nvals == 1 {
            // One word, so that a value starting with '-' stays a value.
            out.push(format!("--{canon}={}", vals[0]));
        } else {
            out.push(format!("--{canon}"));
            out.extend(vals);
        }
        i += 1;
    }
    Ok((out, notes))
}

/// The words after an option that ask for its description instead of giving its value.
const HELP_WORDS: [&str; 3] = ["-h", "-help", "--help"];

/// One option's description (`-OPTION -h`): its help text as `--help` shows it, or, for a
/// Hydra option libi ignores, why.
fn option_help(shown: &str, canon: &str, ignored: Option<&str>) -> String {
    use clap::CommandFactory;
    let text = match ignored {
        Some(why) => format!("accepted and ignored by libi ({why})"),
        None => Segment::command()
            .get_arguments()
            .find(|a| a.get_long() == Some(canon))
            .and_then(|a| a.get_long_help().or(a.get_help()).map(|h| h.to_string()))
            .unwrap_or_else(|| "see libi-mpiexec --help".into()),
    };
    format!("\n{shown}: {text}\n\n")
}

pub(super) fn parse_segment(seg: &[String]) -> Result<Segment, CliError> {
    let (argv, notes) = normalise(seg)?;
    let segment = Segment::try_parse_from(argv).map_err(|e| match e.kind() {
        clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
            CliError::Info(e.to_string())
        }
        _ => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            usage(first.trim_start_matches("error: ").to_string())
        }
    })?;
    Ok(Segment { notes, ..segment })
}

#[cfg(test)]
mod tests {
    use crate::cli::testing::{p, usage_error};
    use crate::cli::CliError;
    use libi::job::LauncherKind;

    #[test]
    fn hydra_spellings() {
        let c = p("-np 4 -genv A 1 -genv B 2 -l -wdir /tmp prog -x --y").expect("parse");
        assert_eq!(c.execs.len(), 1);
        let e = &c.execs[0];
        assert_eq!(e.n, Some(4));
        assert_eq!(e.prog, "prog");
        assert_eq!(e.args, vec!["-x", "--y"]);
        assert_eq!(e.wdir.as_deref(), Some("/tmp".as_ref()));
        assert!(c.global.label);
        assert_eq!(c.global.genv, vec![("A".into(), "1".into()), ("B".into(), "2".into())]);
    }

    #[test]
    fn inline_values_and_double_dashes() {
        // Hydra 5 takes every one of these.
        for line in ["-n=2 x", "-np=2 x", "--n 2 x", "--np=2 x", "--n=2 x", "---n 2 x"] {
            assert_eq!(p(line).expect(line).execs[0].n, Some(2), "{line}");
        }
        let c = p("-hosts=vm:2 -ppn=1 -bind-to=core --map-by=socket -wdir=/w x -n=3 y=z")
            .expect("parse");
        assert_eq!(c.global.hosts.as_deref(), Some("vm:2"));
        assert_eq!(p("-f=hf x").expect("-f=").global.hostfile.as_deref(), Some("hf"));
        assert_eq!(c.global.ppn, Some(1));
        assert_eq!(c.global.binding.bind.to_string(), "core");
        assert!(c.global.map_given);
        // Program arguments are never touched.
        assert_eq!(c.execs[0].args, vec!["-n=3", "y=z"]);
        assert_eq!(c.execs[0].wdir.as_deref(), Some("/w".as_ref()));
        // -genv=NAME VALUE, -genv NAME=VALUE, -genv=NAME=VALUE (split at the first '=').
        let c = p("-genv=A 1 -genv B=2 --genv=C=3=4 -genv D= -env=E 5 -env F=6 x").expect("parse");
        let pairs = |v: &[(&str, &str)]| -> Vec<(String, std::ffi::OsString)> {
            v.iter().map(|(a, b)| (a.to_string(), b.into())).collect()
        };
        assert_eq!(c.global.genv, pairs(&[("A", "1"), ("B", "2"), ("C", "3=4"), ("D", "")]));
        assert_eq!(c.execs[0].env, pairs(&[("E", "5"), ("F", "6")]));
        // A value containing '-' stays a value; the value of a single-value option may hold '='.
        let c = p("-wdir=-odd -prepend-pattern=a=%r x").expect("parse");
        assert_eq!(c.execs[0].wdir.as_deref(), Some("-odd".as_ref()));
        assert!(c.global.prepend_pattern.is_some());
        // Flags take no value (Hydra would run a program named "1"); empty values; unknown
        // names are refused whole.
        for (line, what) in [
            ("-l=1 x", "option '-l' takes no value, got '-l=1'"),
            ("-n= 1 x", "option '-n' has an empty value in '-n='"),
            ("-bogus=1 x", "unrecognized option '-bogus=1'"),
            ("-n=2x x", "invalid value '2x'"),
            ("-genv==1 x", "option '-genv': no variable name in '=1'"),
            ("-genv=A", "option '-genv' needs 2 value(s)"),
        ] {
            usage_error(line, what);
        }
    }

    #[test]
    fn hydra_aliases_and_machinery_options() {
        let c = p("-host a:2 -bootstrap rsh -bootstrap-exec /x/rsh -enable-auto-cleanup x")
            .expect("parse");
        assert_eq!(c.global.hosts.as_deref(), Some("a:2"));
        assert_eq!(c.global.launcher, Some(LauncherKind::Rsh));
        assert_eq!(c.global.launcher_exec.as_deref(), Some("/x/rsh"));
        assert!(!c.global.disable_auto_cleanup);
        assert!(c.global.notes.is_empty());
        // Ignored, with a note each; their values are consumed (as Hydra 5 takes them).
        let c = p("-enable-x -disable-x -demux poll -topolib=hwloc -profile \
                   -disable-hostname-propagation -enable-hostname-propagation -pmi-port -n 2 x a")
        .expect("parse");
        assert_eq!(c.execs[0].n, Some(2));
        assert_eq!(
            (c.execs[0].prog.as_str(), c.execs[0].args.as_slice()),
            ("x", &["a".into()][..])
        );
        assert_eq!(c.global.notes.len(), 8, "{:?}", c.global.notes);
        assert_eq!(
            c.global.notes[2],
            "-demux poll: ignored (Hydra's demux engine; libi has its own event loop)"
        );
        assert_eq!(c.global.notes[3], "-topolib hwloc: ignored (Hydra's topology library; libi reads the topology from sysfs)");
        assert!(p("-demux select x").is_ok());
        let ns = |line: &str| p(line).expect("parse").global.nameserver.map(|a| a.to_string());
        assert_eq!(ns("-nameserver n9 x"), Some("n9:6392".into()));
        assert_eq!(ns("--nameserver=n9:7000 x"), Some("n9:7000".into()));
        assert_eq!(ns("x"), None);
        for (line, what) in [
            ("-demux epoll x", "-demux: unknown engine 'epoll' (Hydra's: poll select)"),
            ("-membind core x", "-membind: unknown policy 'core' (expected none, firsttouch, "),
            ("-membind bind:0-x x", "-membind bind:0-x: 'x' is not a NUMA node number"),
            ("-order-nodes=sideways x", "-order-nodes: expected ascending or descending, got"),
            ("-order-nodes", "option '-order-nodes' needs 1 value(s)"),
            ("-nameserver h:0 x", "-nameserver h:0: '0' is not a port number"),
            ("-nameserver= x", "empty value"),
            ("-enable-x=1 x", "option '-enable-x' takes no value"),
            ("-demux", "option '-demux' needs 1 value(s)"),
            ("-enable-auto-cleanup -disable-auto-cleanup x", "contradict"),
        ] {
            usage_error(line, what);
        }
    }

    #[test]
    fn errors_name_the_option() {
        match p("-bogus 3 x") {
            Err(CliError::Usage(m)) => assert!(m.contains("-bogus"), "{m}"),
            other => panic!("{other:?}"),
        }
        match p("-n 0 x") {
            Err(CliError::Usage(m)) => assert!(m.contains("-n"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(p("-n 2"), Err(CliError::Usage(_))));
        assert!(matches!(p("-genv A"), Err(CliError::Usage(_))));
        assert!(matches!(p("--help"), Err(CliError::Info(_))));
        // Hydra's `-OPTION -h`: that option's description, for options with and without
        // values, ignored ones too; not for a word after the option's value.
        for (line, want) in [
            ("-n -h", "\n-n: Number of processes"),
            ("--np --help", "\n-np: Number of processes"),
            ("-bind-to -help", "\n-bind-to: Bind each rank"),
            ("-l -h", "\n-l: "),
            ("-demux -h", "\n-demux: accepted and ignored by libi (Hydra's demux engine"),
        ] {
            match p(line) {
                Err(CliError::Info(t)) => assert!(t.starts_with(want), "{line}: {t}"),
                other => panic!("{line}: {other:?}"),
            }
        }
        assert!(matches!(p("-n=2 -h"), Err(CliError::Info(t)) if t.contains("Usage")));
    }
}

//! The manual page `libi-mpiexec.1`, made from the parser's own option table: the options
//! clap knows ([`Segment`], in `cli/schema.rs`: value names and help text, as `--help`
//! prints them), the Hydra spellings that [`LONG`] maps onto each (`-n`, `-np`; `-f`,
//! `-hostfile`, `-machinefile`), and the Hydra options that [`IGNORED`] accepts (both in
//! `cli/hydra.rs`). `libi-mpiexec --man` prints it;
//! `docs/libi-mpiexec.1` is that output, and `tests/docs.rs` fails when the two differ.
//!
//! Regenerate: `cargo run -p libi-mpiexec -- --man > docs/libi-mpiexec.1`.

use crate::cli::{Segment, IGNORED, LONG};
use clap::CommandFactory;

/// The page, in roff (`man ./docs/libi-mpiexec.1` renders it).
pub fn page() -> String {
    let mut cmd = Segment::command();
    cmd.build();
    let mut r = Roff::default();
    r.line(&format!(
        ".TH LIBI\\-MPIEXEC 1 \"\" \"libi\\-mpiexec {}\" \"User Commands\"",
        env!("CARGO_PKG_VERSION")
    ));
    // Left-aligned, no hyphenation: option names and values stay whole.
    r.line(".ad l");
    r.line(".nh");
    r.section("NAME");
    let about = cmd.get_about().map(|a| a.to_string()).unwrap_or_default();
    r.text(&format!("libi-mpiexec - {}", lower_first(&about)));

    r.section("SYNOPSIS");
    let usage = cmd.render_usage().to_string();
    let usage = usage.trim().trim_start_matches("Usage:").trim();
    let args = usage.strip_prefix("libi-mpiexec").unwrap_or(usage);
    r.line(&format!("\\fBlibi\\-mpiexec\\fR{}", esc(args)));

    r.section("DESCRIPTION");
    for p in DESCRIPTION {
        r.paragraph(p);
    }

    r.section("OPTIONS");
    for arg in cmd.get_arguments().filter(|a| !a.is_hide_set() && !a.is_positional()) {
        let Some(canon) = arg.get_long() else { continue };
        let values: Vec<String> = match arg.get_value_names() {
            Some(v) if arg.get_action().takes_values() => {
                v.iter().map(|n| format!("\\fI{}\\fR", esc(n))).collect()
            }
            _ => Vec::new(),
        };
        let spelled: Vec<String> = spellings(canon)
            .into_iter()
            .map(|name| {
                let mut s = format!("\\fB\\-{}\\fR", esc(name));
                for v in &values {
                    s.push(' ');
                    s.push_str(v);
                }
                s
            })
            .collect();
        let help = arg.get_long_help().or(arg.get_help()).map(|h| h.to_string());
        r.item(&spelled.join(", "), help.as_deref().unwrap_or(""));
    }

    r.section("HYDRA OPTIONS ACCEPTED AND IGNORED");
    r.paragraph(
        "These options name parts of Hydra that libi has no counterpart of and change nothing \
         a job does; each is accepted, and -v prints one line for it.",
    );
    for (name, nvals, why) in IGNORED {
        let values = " \\fIVALUE\\fR".repeat(*nvals);
        r.item(&format!("\\fB\\-{}\\fR{values}", esc(name)), why);
    }

    for (title, items) in SECTIONS {
        r.section(title);
        for (head, text) in *items {
            if head.is_empty() {
                r.paragraph(text);
            } else {
                r.item(&format!("\\fB{}\\fR", esc(head)), text);
            }
        }
    }
    r.out
}

/// A name's spellings as the parser accepts them, one dash each: the one-letter ones first,
/// then the name clap knows it by, then Hydra's aliases, in the table's order.
fn spellings(canon: &str) -> Vec<&'static str> {
    let of = LONG.iter().filter(|(_, c, _)| *c == canon).map(|(n, _, _)| *n);
    let mut names: Vec<&str> = of.clone().filter(|n| n.len() == 1).collect();
    names.extend(of.clone().filter(|n| *n == canon));
    names.extend(of.filter(|n| n.len() > 1 && *n != canon));
    names
}

fn lower_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => String::new(),
    }
}

/// Text for roff: backslashes and minus signs escaped (`\-` is the ASCII minus, so that an
/// option copied from the page is the option); the help text's Markdown backticks dropped.
fn esc(s: &str) -> String {
    s.replace('\\', "\\e").replace('-', "\\-").replace('`', "")
}

/// The page being written.
#[derive(Default)]
struct Roff {
    out: String,
}

impl Roff {
    fn line(&mut self, l: &str) {
        self.out.push_str(l);
        self.out.push('\n');
    }

    /// Running text (escaped); a line that would start with a control character is guarded.
    fn text(&mut self, t: &str) {
        let e = esc(t);
        if e.starts_with('.') || e.starts_with('\'') {
            self.out.push_str("\\&");
        }
        self.line(&e);
    }

    fn section(&mut self, title: &str) {
        self.line(&format!(".SH \"{title}\""));
    }

    fn paragraph(&mut self, t: &str) {
        self.line(".PP");
        self.text(t);
    }

    /// A tagged paragraph: `head` is roff already, `t` plain text.
    fn item(&mut self, head: &str, t: &str) {
        self.line(".TP");
        self.line(head);
        self.text(t);
    }
}

const DESCRIPTION: &[&str] = &[
    "libi-mpiexec starts parallel jobs, MPI programs built with a stock MPICH or any program, \
     and serves the process-management protocols (PMI-1, PMI-2, and with --pmgr PMGR) that MPI \
     libraries speak. It is meant as a drop-in for Hydra's mpiexec: the common Hydra options \
     mean the same thing. It starts one node agent, libi-nla, per host (found next to \
     libi-mpiexec unless --nla-path or -hybrid-hosts says otherwise); the agents start each \
     other along a launch tree and connect back to their parents.",
    "Segments separated by ':' are the executables of one job (MPMD): they share one \
     MPI_COMM_WORLD, and appnum is the segment's index. Global options may appear in any \
     segment; local ones (-n, -env, -envlist, -envnone, -envall, -wdir) apply to their own.",
    "Spellings, as in Hydra 5: every option takes one or two dashes, and its first value may \
     follow an '=' (-n=2, -hosts=a:2); -genv and -env also take NAME=VALUE as one word. Words \
     after the program name are never read as options. -OPTION -h prints that option's \
     description.",
];

/// The sections after the options: (title, [(tag, text)]); an empty tag is a paragraph.
const SECTIONS: &[(&str, &[(&str, &str)])] = &[
    (
        "ENVIRONMENT",
        &[
            (
                "MPIEXEC_TIMEOUT=S",
                "Kill the job after S seconds (fractions allowed); the job then ends with \
                 status 124. 0 and negative values mean no timeout.",
            ),
            (
                "MPIR_CVAR_CH3_PORT_RANGE=MIN:MAX, MPIEXEC_PORT_RANGE, MPIEXEC_PORTRANGE",
                "Every port libi listens on is taken from this range (MPICH's and Hydra 5's \
                 aliases of the first are read too).",
            ),
            (
                "HYDRA_HOST_FILE, HYDRA_LAUNCHER, HYDRA_LAUNCHER_EXEC, HYDRA_RMK, \
                 HYDRA_BINDING, HYDRA_MAPPING, HYDRA_MEMBIND, HYDRA_IFACE, HYDRA_DEBUG=1, \
                 HYDRA_ENV=all, HYDRA_LAUNCHER_SSH_LIMIT=N",
                "Hydra's equivalents of -f, -launcher, -launcher-exec, -rmk, -bind-to, \
                 -map-by, -membind, -iface, -v, -genvall and --launch-batch, used where the \
                 command line leaves the setting unset.",
            ),
            (
                "HYDRA_TOPO_DEBUG=1, HYDRA_LAUNCHER_EXTRA_ARGS, HYDRA_PROXY_RETRY_COUNT=N, \
                 HYDRA_LAUNCHER_AUTOFORK=0",
                "Each rank's binding line; extra words for ssh, rsh or srun; the agents' \
                 retries of their connection to their parent; no local start of hosts that \
                 are this machine.",
            ),
            ("HYDRA_CONFIG_FILE", "The defaults file, instead of ~/.mpiexec.hydra.conf."),
            ("LIBI_LOG", "The filter of -v: level and target=level directives."),
            (
                "",
                "A bad value of any of these is a one-line error, exit 2. The full list, and \
                 what each rank finds in its environment, is in docs/environment.md.",
            ),
        ],
    ),
    (
        "EXIT STATUS",
        &[
            ("0", "Every rank exited 0."),
            ("N", "A rank exited with code N, or called MPI_Abort with N."),
            ("128 + S", "A rank was killed by signal S (139 for SIGSEGV)."),
            (
                "1",
                "A rank exited 0 between MPI_Init and MPI_Finalize, closed its PMI connection \
                 before finalize, sent malformed PMI input or stopped reading its PMI \
                 replies, or the job's ranks put more KVS data than --kvs-max.",
            ),
            ("2", "A bad command line, option value or environment variable."),
            ("124", "MPIEXEC_TIMEOUT expired."),
            ("126, 127", "The program is not executable, or not found."),
            ("141", "Our stdout or stderr was closed by its reader."),
            ("143", "libi-mpiexec got SIGTERM (the job ends when its ranks do)."),
            (
                "255",
                "An agent could not start, connect or was lost; a rank could not be started \
                 for want of resources; output was lost.",
            ),
            (
                "",
                "Several failed ranks combine as under mpiexec.hydra; docs/output.md has the \
                 rules.",
            ),
        ],
    ),
    (
        "FILES",
        &[(
            "~/.mpiexec.hydra.conf",
            "Hydra's file of default options (or $HYDRA_CONFIG_FILE): global options taken \
             before the command line's, so the command line wins.",
        )],
    ),
    (
        "EXAMPLES",
        &[
            ("libi-mpiexec -n 8 ./mpi_app arg1", "8 ranks on this machine."),
            ("libi-mpiexec -l -n 2 ./a : -n 4 ./b", "MPMD, each output line prefixed."),
            ("libi-mpiexec -f hosts.txt -n 64 ./mpi_app", "Over ssh, one agent per host."),
            ("salloc -N 4 -n 64 libi-mpiexec ./mpi_app", "Inside Slurm: hosts and launcher found."),
        ],
    ),
    (
        "SEE ALSO",
        &[(
            "",
            "mpiexec.hydra(1). In libi's source tree: README.md, and docs/README.md, the index \
             of the reference (options, environment, output and exit status, limits, failures, \
             security, many nodes, binding, tools, the simulator). This page is generated \
             from the parser's option table by libi-mpiexec --man.",
        )],
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shown_option_is_spelled_as_the_parser_accepts_it() {
        let mut cmd = Segment::command();
        cmd.build();
        for arg in cmd.get_arguments().filter(|a| !a.is_hide_set() && !a.is_positional()) {
            let canon = arg.get_long().expect("every option has a long name");
            assert!(!spellings(canon).is_empty(), "--{canon} has no entry in LONG");
        }
        assert_eq!(spellings("np"), ["n", "np"]);
        assert_eq!(spellings("hostfile"), ["f", "hostfile", "machinefile"]);
        assert_eq!(spellings("pmi-args"), ["pmi_args"]);
    }

    #[test]
    fn page_is_ascii_roff() {
        let p = page();
        assert!(p.is_ascii());
        assert!(p.starts_with(".TH LIBI\\-MPIEXEC 1 "));
        assert!(p.contains("\\fB\\-machinefile\\fR \\fIFILE\\fR"));
        assert!(p.contains("\\fB\\-demux\\fR \\fIVALUE\\fR"));
        assert!(p.contains("\n\\fB\\-genvnone\\fR\n"), "a flag shows no value");
        for line in p.lines().filter(|l| !l.starts_with('.')) {
            assert!(!line.starts_with('\''), "{line}");
        }
    }
}

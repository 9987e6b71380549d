//! Hydra-compatible command line: `libi-mpiexec [global opts] [local opts] prog args [: [local
//! opts] prog2 args ...]`, single-dash long options (`-genv`, `-np`), `-configfile`.
//!
//! Each `:`-separated segment is normalised (`-genv` → `--genv`; an unknown `-xyz` is an
//! error naming it) and parsed by clap; global options may appear in any segment (as in
//! Hydra), local ones apply to their segment.
//!
//! By job: `schema` holds the options as clap parses one segment ([`Segment`], whose doc
//! comments are `--help`'s text and the man page's) and their value parsers; `hydra` the
//! names Hydra knows them by ([`LONG`]), the Hydra options accepted and ignored
//! ([`IGNORED`]), the turning of Hydra's spellings into clap's and `-OPTION -h`;
//! `configfile` reads `-configfile` and the defaults file ([`defaults_file`]); `merge` makes
//! the segments one [`CommandLine`] ([`parse_with_defaults`]); `env` applies the `HYDRA_*`
//! variables ([`apply_env`]) and reads `MPIEXEC_TIMEOUT` ([`mpiexec_timeout`]). This module
//! holds what they make: the parsed command line ([`CommandLine`], [`Global`], [`Exec`]),
//! the text it holds field by field ([`Strings`], where `crate::rawargs` looks for arguments
//! that are not UTF-8), and what parsing can end in instead ([`CliError`]). The variables'
//! errors are `env::EnvError`, the defaults file's `configfile::DefaultsError`.

mod configfile;
mod env;
mod hydra;
mod merge;
mod schema;

pub use configfile::defaults_file;
pub use env::{apply_env, mpiexec_timeout};
pub(crate) use hydra::{IGNORED, LONG};
pub use merge::parse_with_defaults;
pub use schema::{PmiKind, Rmk, Segment};

use crate::stdio::{Pattern, Piece};
use libi::job::LauncherKind;
use libi::tree::{LaunchModel, Shape};
use std::ffi::OsStr;

/// Global settings after merging all segments.
#[derive(Debug, Clone, Default)]
pub struct Global {
    /// `-genv` pairs: a value need not be UTF-8 (see `crate::rawargs`).
    pub genv: Vec<(String, std::ffi::OsString)>,
    pub genv_mode: EnvMode,
    /// `-gwdir`: bytes, as a program's arguments (see `crate::rawargs`).
    pub gwdir: Option<std::ffi::OsString>,
    pub label: bool,
    pub prepend_pattern: Option<Pattern>,
    pub outfile_pattern: Option<Pattern>,
    pub errfile_pattern: Option<Pattern>,
    pub rmk: Option<Rmk>,
    /// `-pmi`: `None` is `auto`.
    pub pmi: Option<PmiKind>,
    pub disable_auto_cleanup: bool,
    pub verbose: bool,
    pub tree: Option<Shape>,
    pub launch_model: Option<LaunchModel>,
    pub usize: Option<i32>,
    pub nla_path: Option<String>,
    pub hostfile: Option<String>,
    /// The hostfile is `HYDRA_HOST_FILE`'s (its errors name the variable).
    pub hostfile_from_env: bool,
    pub hosts: Option<String>,
    pub ppn: Option<u32>,
    pub launcher: Option<LauncherKind>,
    pub launcher_exec: Option<String>,
    pub localhost: Option<String>,
    pub iface: Option<String>,
    pub report: Option<String>,
    pub kvs_push_max: Option<u64>,
    pub kvs_max: Option<u64>,
    pub max_conn: Option<usize>,
    pub launch_timeout: Option<f64>,
    pub pmgr: bool,
    /// `--end-on-stdin-eof`: our stdin's end of file ends the job.
    pub end_on_stdin_eof: bool,
    /// `--bcast`: stage the executables.
    pub bcast: bool,
    pub launch_batch: Option<u32>,
    /// `-bind-to` / `-map-by`.
    pub binding: libi_binding::Binding,
    /// Whether `-bind-to` / `-map-by` were given (else `HYDRA_BINDING` / `HYDRA_MAPPING`).
    pub bind_given: bool,
    pub map_given: bool,
    /// Whether `-membind` was given (else `HYDRA_MEMBIND`).
    pub membind_given: bool,
    /// `-order-nodes`: sort the host list by slots.
    pub order_nodes: Option<libi::hosts::NodeOrder>,
    /// `-gpus-per-proc` / `-gpu-subdevs-per-proc`.
    pub gpus: libi::job::GpuSplit,
    pub print_all_exitcodes: bool,
    /// `-pmi_args PORT IFACE KEY PID`: the port of the singleton to serve.
    pub singleton_port: Option<u16>,
    /// `-skip-launch-node`: no rank on this machine.
    pub skip_launch_node: bool,
    /// `-hybrid-hosts`: remote NLAs are found on their own PATH.
    pub hybrid_hosts: bool,
    /// `-rankmap`: the node (host list index) of each rank of the job.
    pub rankmap: Option<Vec<u32>>,
    /// `-memory-alloc-kinds`: published to the ranks as `PMI_mpi_memory_alloc_kinds`.
    pub memory_alloc_kinds: Option<String>,
    /// `-nameserver`: the outside name server.
    pub nameserver: Option<libi::nameserver::Address>,
    /// `HYDRA_LAUNCHER_EXTRA_ARGS`: words for ssh, rsh or srun.
    pub launcher_extra_args: Vec<String>,
    /// `HYDRA_PROXY_RETRY_COUNT`: the NLAs' retries of their connection to the parent.
    pub connect_retries: Option<u32>,
    /// One line for each ignored Hydra option (see [`IGNORED`]), printed under `-v`.
    pub notes: Vec<String>,
}

/// Which variables of the front end's environment a rank inherits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum EnvMode {
    #[default]
    All,
    None,
    List(Vec<String>),
}

/// One executable of the job.
#[derive(Debug, Clone)]
pub struct Exec {
    pub n: Option<u32>,
    /// `-env` pairs: a value need not be UTF-8 (see `crate::rawargs`).
    pub env: Vec<(String, std::ffi::OsString)>,
    pub env_mode: Option<EnvMode>,
    /// `-wdir`: bytes, as a program's arguments (see `crate::rawargs`).
    pub wdir: Option<std::ffi::OsString>,
    pub prog: String,
    /// Its arguments: not UTF-8 where the command line's were not (see `crate::rawargs`).
    pub args: Vec<std::ffi::OsString>,
}

/// The parsed command line.
#[derive(Debug, Clone)]
pub struct CommandLine {
    pub global: Global,
    pub execs: Vec<Exec>,
}

/// The text a parsed command line holds that came from the user, field by field: option
/// values, names of programs and variables, their values and arguments, host lists,
/// patterns, the notes of ignored options (which quote their values). `crate::rawargs`
/// looks in it for what stands in for arguments that are not UTF-8. Each impl takes its
/// struct apart whole, so that a new field does not compile until it is visited or said to
/// hold no text; `rawargs`'s tests give every option a value that is not UTF-8 and fail
/// for a field left unvisited.
pub trait Strings {
    /// Call `f` on each piece of text, fields in the order of their declaration.
    fn strings(&self, f: &mut dyn FnMut(&OsStr));
}

/// Each of `texts`, to `f`.
fn each<'a, T: AsRef<OsStr> + ?Sized + 'a>(
    texts: impl IntoIterator<Item = &'a T>,
    f: &mut dyn FnMut(&OsStr),
) {
    texts.into_iter().for_each(|t| f(t.as_ref()));
}

impl Strings for Pattern {
    fn strings(&self, f: &mut dyn FnMut(&OsStr)) {
        for piece in &self.0 {
            match piece {
                Piece::Text(t) => f(t.as_ref()),
                Piece::Rank | Piece::Group | Piece::Host | Piece::Node | Piece::Seconds => {}
            }
        }
    }
}

impl Strings for EnvMode {
    fn strings(&self, f: &mut dyn FnMut(&OsStr)) {
        match self {
            EnvMode::All | EnvMode::None => {}
            EnvMode::List(names) => each(names, f),
        }
    }
}

impl Strings for Global {
    fn strings(&self, f: &mut dyn FnMut(&OsStr)) {
        // No `..`: a new field must be named here.
        let Global {
            genv,
            genv_mode,
            gwdir,
            label: _,
            prepend_pattern,
            outfile_pattern,
            errfile_pattern,
            rmk: _,
            pmi: _,
            disable_auto_cleanup: _,
            verbose: _,
            tree: _,
            launch_model: _,
            usize: _,
            nla_path,
            hostfile,
            hostfile_from_env: _,
            hosts,
            ppn: _,
            launcher: _,
            launcher_exec,
            localhost,
            iface,
            report,
            kvs_push_max: _,
            kvs_max: _,
            max_conn: _,
            launch_timeout: _,
            pmgr: _,
            end_on_stdin_eof: _,
            bcast: _,
            launch_batch: _,
            binding,
            bind_given: _,
            map_given: _,
            membind_given: _,
            order_nodes: _,
            gpus: _,
            print_all_exitcodes: _,
            singleton_port: _,
            skip_launch_node: _,
            hybrid_hosts: _,
            rankmap: _,
            memory_alloc_kinds,
            nameserver,
            launcher_extra_args,
            connect_retries: _,
            notes,
        } = self;
        for (name, value) in genv {
            f(name.as_ref());
            f(value);
        }
        genv_mode.strings(f);
        each(gwdir, f);
        for p in [prepend_pattern, outfile_pattern, errfile_pattern].into_iter().flatten() {
            p.strings(f);
        }
        each(nla_path, f);
        each(hostfile, f);
        each(hosts, f);
        each(launcher_exec, f);
        each(localhost, f);
        each(iface, f);
        each(report, f);
        // Its cpu, object and memory-node specs are numbers and names of its own; a
        // hostfile's hosts come later (in the plan), but are text.
        each(binding.hosts.iter().map(|(host, _)| host), f);
        each(memory_alloc_kinds, f);
        each(nameserver.iter().map(|a| &a.host), f);
        each(launcher_extra_args, f);
        each(notes, f);
    }
}

impl Strings for Exec {
    fn strings(&self, f: &mut dyn FnMut(&OsStr)) {
        let Exec { n: _, env, env_mode, wdir, prog, args } = self;
        for (name, value) in env {
            f(name.as_ref());
            f(value);
        }
        env_mode.iter().for_each(|m| m.strings(f));
        each(wdir, f);
        f(prog.as_ref());
        each(args, f);
    }
}

impl Strings for CommandLine {
    fn strings(&self, f: &mut dyn FnMut(&OsStr)) {
        let CommandLine { global, execs } = self;
        global.strings(f);
        execs.iter().for_each(|e| e.strings(f));
    }
}

/// What parsing ended in.
#[derive(Debug)]
pub enum CliError {
    /// A one-line usage error (exit 2).
    Usage(String),
    /// `--help`/`--version`: print this and exit 0.
    Info(String),
    /// `--proctable PID`: ask that job for its process table.
    ProcTable(u32),
    /// `--job-launcher PID`: ask that job how it starts its agents.
    JobLauncher(u32),
}

fn usage(m: impl std::fmt::Display) -> CliError {
    CliError::Usage(m.to_string())
}

/// Parse `argv` (without the program name).
#[cfg(test)]
pub fn parse(argv: &[String]) -> Result<CommandLine, CliError> {
    parse_with_defaults(None, argv, &mut crate::rawargs::RawArgs::default())
}

/// What the tests of the submodules share.
#[cfg(test)]
mod testing {
    use super::*;

    pub(super) fn p(s: &str) -> Result<CommandLine, CliError> {
        parse(&s.split_whitespace().map(str::to_string).collect::<Vec<_>>())
    }

    /// `line` is a usage error whose message contains `what`.
    pub(super) fn usage_error(line: &str, what: &str) {
        match p(line) {
            Err(CliError::Usage(m)) => assert!(m.contains(what), "{line}: {m}"),
            other => panic!("{line}: {other:?}"),
        }
    }
}

//! Hydra-compatible command line: `libi-mpiexec [global opts] [local opts] prog args [: [local
//! opts] prog2 args ...]`, single-dash long options (`-genv`, `-np`), `-configfile`.
//!
//! Each `:`-separated segment is normalised (`-genv` → `--genv`; an unknown `-xyz` is an
//! error naming it) and parsed by clap; global options may appear in any segment (as in
//! Hydra), local ones apply to their segment.

// The options' doc comments are their `--help` text, brackets and all (`[:PORT]`), not
// rustdoc links.
#![allow(rustdoc::broken_intra_doc_links)]

use crate::rawargs::RawArgs;
use crate::stdio::Pattern;
use clap::Parser;
use libi::job::LauncherKind;
use libi::tree::{LaunchModel, Shape};

/// Options as clap sees one segment.
#[derive(Parser, Debug, Default, Clone)]
#[command(
    name = "libi-mpiexec",
    version,
    about = "Start a parallel job (MPI or not) through libi's Node Launch Agents",
    override_usage = "libi-mpiexec [options] prog [args] [: [options] prog2 [args] ...]"
)]
pub struct Segment {
    /// Number of processes of this executable [-np] (default: the host list's slots; 1
    /// without one)
    #[arg(short = 'n', long = "np", value_name = "N")]
    pub n: Option<i64>,
    /// Set NAME=VALUE for all ranks (global)
    #[arg(long = "genv", num_args = 2, value_names = ["NAME", "VALUE"], action = clap::ArgAction::Append)]
    pub genv: Vec<String>,
    /// Pass only these variables of the current environment (global)
    #[arg(long = "genvlist", value_name = "A,B,...")]
    pub genvlist: Option<String>,
    /// Pass no variable of the current environment (global)
    #[arg(long = "genvnone")]
    pub genvnone: bool,
    /// Pass the whole current environment (global; the default)
    #[arg(long = "genvall")]
    pub genvall: bool,
    /// Set NAME=VALUE for the ranks of this executable
    #[arg(long = "env", num_args = 2, value_names = ["NAME", "VALUE"], action = clap::ArgAction::Append)]
    pub env: Vec<String>,
    /// Pass only these variables to this executable
    #[arg(long = "envlist", value_name = "A,B,...")]
    pub envlist: Option<String>,
    /// Pass no variable of the current environment to this executable
    #[arg(long = "envnone")]
    pub envnone: bool,
    /// Pass the whole current environment to this executable
    #[arg(long = "envall")]
    pub envall: bool,
    /// Working directory of this executable's ranks
    #[arg(long = "wdir", value_name = "DIR")]
    pub wdir: Option<String>,
    /// Working directory of all ranks (global)
    #[arg(long = "gwdir", value_name = "DIR")]
    pub gwdir: Option<String>,
    /// Prefix every output line with "[rank] " [-prepend-rank]
    #[arg(short = 'l', long = "prepend-rank")]
    pub label: bool,
    /// Prefix every output line with PAT: %r rank, %g process group, %h host, %p node index,
    /// %t seconds since the job started, %% a percent sign (`-l` is "[%r] ")
    #[arg(long = "prepend-pattern", value_name = "PAT")]
    pub prepend_pattern: Option<Pattern>,
    /// Write each rank's stdout to the file PAT names (fields as -prepend-pattern)
    #[arg(long = "outfile-pattern", value_name = "PAT")]
    pub outfile_pattern: Option<Pattern>,
    /// Write each rank's stderr to the file PAT names (fields as -prepend-pattern)
    #[arg(long = "errfile-pattern", value_name = "PAT")]
    pub errfile_pattern: Option<Pattern>,
    /// Where the hosts come from when none are given: pbs ($PBS_NODEFILE), lsf
    /// ($LSB_MCPU_HOSTS), slurm (the allocation) or user (this machine); default: detected
    #[arg(long = "rmk", value_name = "NAME")]
    pub rmk: Option<Rmk>,
    /// A failed rank does not end the other ranks (they run to their end)
    #[arg(long = "disable-auto-cleanup")]
    pub disable_auto_cleanup: bool,
    /// Print the version, launchers, resource managers and features, then exit
    #[arg(long = "info")]
    pub info: bool,
    /// Print the process table (rank host pid executable) of the job that the running
    /// libi-mpiexec with this pid runs, then exit (for tools: attach next to a job)
    #[arg(long = "proctable", value_name = "PID")]
    pub proctable: Option<u32>,
    /// Print how the running libi-mpiexec with this pid starts its agents (kind, exec,
    /// extra words), then exit (for tools: start daemons on the job's hosts the same way)
    #[arg(long = "job-launcher", value_name = "PID")]
    pub job_launcher: Option<u32>,
    /// Read the command line from FILE (one `:`-segment per line, # comments)
    #[arg(long = "configfile", value_name = "FILE")]
    pub configfile: Option<String>,
    /// Verbose tracing of the front end and the NLAs [-verbose]
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,
    /// Launch tree shape: greedy | kary:K | binomial | flat | chain
    #[arg(long = "tree", value_name = "SHAPE")]
    pub tree: Option<Shape>,
    /// Launch model constants "SEQ,REM" in seconds (for the greedy tree and reports), with
    /// ",cores=C,cpu=W" for launches that share C cores, ",accept=A" for the parent's time per
    /// hello and ",hold=1" for held setups
    #[arg(long = "launch-model", value_name = "SEQ,REM[,cores=C,cpu=W][,accept=A][,hold=1]")]
    pub launch_model: Option<LaunchModel>,
    /// Universe size: N (spawns beyond N running processes fail), SYSTEM (the host list's
    /// slots; 1 without one) or INFINITE; default: unknown, as Hydra
    #[arg(long = "usize", value_name = "N", value_parser = parse_usize)]
    pub usize: Option<i32>,
    /// Path of the libi-nla binary on every node (default: next to libi-mpiexec)
    #[arg(long = "nla-path", value_name = "PATH")]
    pub nla_path: Option<String>,
    /// Host file: one `host` or `host:N` per line, # comments [-hostfile, -machinefile]
    #[arg(short = 'f', long = "hostfile", value_name = "FILE")]
    pub hostfile: Option<String>,
    /// Hosts: `h1:2,h2` (slots default to 1) [-host]
    #[arg(long = "hosts", value_name = "H[:N],...")]
    pub hosts: Option<String>,
    /// Processes per host (overrides the host list's slots)
    #[arg(long = "ppn", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub ppn: Option<u32>,
    /// How NLAs start NLAs: ssh | rsh | fork | slurm (default: fork without a host list, ssh
    /// with one, slurm inside a Slurm allocation) [-bootstrap]
    #[arg(long = "launcher", value_name = "NAME")]
    pub launcher: Option<LauncherKind>,
    /// The ssh/rsh program to use [-bootstrap-exec]
    #[arg(long = "launcher-exec", value_name = "PATH")]
    pub launcher_exec: Option<String>,
    /// Address the NLAs connect back to (default: this host's address on the route to them)
    #[arg(long = "localhost", value_name = "ADDR")]
    pub localhost: Option<String>,
    /// Network interface whose address the NLAs connect back to
    #[arg(long = "iface", value_name = "IF")]
    pub iface: Option<String>,
    /// Serve PMGR collectives (pmgr_collective v8, MVAPICH-1): export MPIRUN_* to the ranks
    #[arg(long = "pmgr")]
    pub pmgr: bool,
    /// Our stdin is a life line from the program that started us (a LIBI session front
    /// end): its end of file ends the job, as SIGTERM does; it is not rank 0's stdin
    #[arg(long = "end-on-stdin-eof")]
    pub end_on_stdin_eof: bool,
    /// Send each executable down the tree once; every node runs it from node-local storage
    #[arg(long = "bcast")]
    pub bcast: bool,
    /// Most connections any process of the NLA tree holds (children + parent; default 128)
    #[arg(long = "max-conn", value_name = "N", value_parser = clap::value_parser!(u32).range(3..))]
    pub max_conn: Option<u32>,
    /// Each parent launches this many children at a time, the next batch once they connected
    #[arg(long = "launch-batch", value_name = "B", value_parser = clap::value_parser!(u32).range(1..))]
    pub launch_batch: Option<u32>,
    /// Seconds a child NLA may take to connect back before its launch failed (default 60)
    #[arg(long = "launch-timeout", value_name = "SECS")]
    pub launch_timeout: Option<f64>,
    /// Write a launch report (JSON) to FILE
    #[arg(long = "report", value_name = "FILE")]
    pub report: Option<String>,
    /// Largest fence (bytes of new pairs) pushed down the tree whole; larger ones stay up
    /// and gets climb the tree (default 16 MiB)
    #[arg(long = "kvs-push-max", value_name = "BYTES", value_parser = libi::job::parse_bytes)]
    pub kvs_push_max: Option<u64>,
    /// Most KVS data (keys plus values) the job's ranks may put; beyond it the job fails
    /// naming a rank (default 1G; K/M/G suffixes)
    #[arg(long = "kvs-max", value_name = "BYTES", value_parser = libi::job::parse_bytes)]
    pub kvs_max: Option<u64>,
    /// Bind each rank to cpus: none | rr | user:0+1,2 | hwthread | core | l1cache | l2cache |
    /// l3cache | numa | socket | machine, objects optionally :N (N of them per rank)
    #[arg(long = "bind-to", value_name = "SPEC")]
    pub bind_to: Option<String>,
    /// Deal the binding objects round-robin over these objects (default: the binding's)
    #[arg(long = "map-by", value_name = "OBJ[:N]")]
    pub map_by: Option<String>,
    /// Memory policy of each rank: firsttouch | nexttouch (sets nothing) | bind[:NODES] |
    /// interleave[:NODES] (default NODES: the NUMA nodes of the rank's cpus)
    #[arg(long = "membind", value_name = "POLICY")]
    pub membind: Option<String>,
    /// Sort the hosts by their slot count before placing ranks: ascending | descending
    /// (hosts with as many slots keep their order)
    #[arg(long = "order-nodes", value_name = "ORDER")]
    pub order_nodes: Option<String>,
    /// GPUs per rank: local rank i sees devices i*N to i*N+N-1 of its node's list (0: none;
    /// auto, the default: sets nothing)
    #[arg(long = "gpus-per-proc", value_name = "N|auto")]
    pub gpus_per_proc: Option<String>,
    /// As -gpus-per-proc, over GPU sub-devices (Level Zero tiles); wins over -gpus-per-proc
    #[arg(long = "gpu-subdevs-per-proc", value_name = "N|auto")]
    pub gpu_subdevs_per_proc: Option<String>,
    /// Print every rank's wait status when the job ends, one line per host (as Hydra)
    #[arg(long = "print-all-exitcodes")]
    pub print_all_exitcodes: bool,
    /// Singleton init: serve PMI to the MPI process listening on PORT (started by MPICH's
    /// MPI_Init as `mpiexec -pmi_args PORT IFACE KEY PID`, not by hand)
    #[arg(long = "pmi-args", num_args = 4, value_names = ["PORT", "IFACE", "KEY", "PID"])]
    pub pmi_args: Vec<String>,
    /// Hydra's default: a failed rank ends the others (the opposite of -disable-auto-cleanup)
    #[arg(long = "enable-auto-cleanup")]
    pub enable_auto_cleanup: bool,
    /// Run no rank on this machine: hosts of the list that are this machine are left out
    #[arg(long = "skip-launch-node")]
    pub skip_launch_node: bool,
    /// Hosts do not share paths: remote NLAs are started as `libi-nla` from their PATH
    #[arg(long = "hybrid-hosts")]
    pub hybrid_hosts: bool,
    /// Node of each rank: "n0,n1,..." (indices into the host list, repeated for more ranks)
    /// or a PMI process mapping "(vector,(start,nodes,ranks),...)"
    #[arg(long = "rankmap", value_name = "MAP")]
    pub rankmap: Option<String>,
    /// Memory allocation kinds the ranks request (MPI 4.1 `mpi_memory_alloc_kinds`)
    #[arg(long = "memory-alloc-kinds", value_name = "KINDS")]
    pub memory_alloc_kinds: Option<String>,
    /// Publish and look up names on Hydra's outside name server (hydra_nameserver) at
    /// HOST[:PORT] (default port 6392), so separate jobs find each other's ports
    #[arg(long = "nameserver", value_name = "HOST[:PORT]")]
    pub nameserver: Option<String>,
    /// Print the manual page (roff) made from this option table, then exit (regenerates
    /// docs/libi-mpiexec.1)
    #[arg(long = "man", hide = true)]
    pub man: bool,
    /// Hydra options given that name parts of Hydra libi has no counterpart of (ignored):
    /// one note each for `-v`.
    #[arg(skip)]
    pub notes: Vec<String>,
    /// Program and its arguments
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "PROG ARGS")]
    pub command: Vec<String>,
}

/// `-usize`: a positive number, `SYSTEM` (0: the slots of the host list) or `INFINITE` (-1).
fn parse_usize(s: &str) -> Result<i32, String> {
    match s.to_ascii_uppercase().as_str() {
        "SYSTEM" => Ok(0),
        "INFINITE" => Ok(-1),
        _ => match s.parse::<i32>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("expected a positive number, SYSTEM or INFINITE, got '{s}'")),
        },
    }
}

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

/// Hydra's resource management kernels we know: where the host list comes from when none
/// is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rmk {
    /// This machine alone (no resource manager).
    User,
    Slurm,
    /// PBS/Torque: `$PBS_NODEFILE`, one line per slot.
    Pbs,
    /// LSF: `$LSB_MCPU_HOSTS`, "host1 n1 host2 n2 ...".
    Lsf,
}

impl std::str::FromStr for Rmk {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "user" => Ok(Rmk::User),
            "slurm" => Ok(Rmk::Slurm),
            "pbs" => Ok(Rmk::Pbs),
            "lsf" => Ok(Rmk::Lsf),
            _ => Err(format!("unknown resource manager '{s}' (known: user slurm pbs lsf)")),
        }
    }
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

fn usage(m: impl Into<String>) -> CliError {
    CliError::Usage(m.into())
}

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

fn parse_segment(seg: &[String]) -> Result<Segment, CliError> {
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

fn pairs(v: &[String]) -> Vec<(String, std::ffi::OsString)> {
    v.chunks(2).filter(|c| c.len() == 2).map(|c| (c[0].clone(), c[1].clone().into())).collect()
}

/// Most entries a `-rankmap` may spell out (one period of its cycle).
const RANKMAP_MAX: usize = 1 << 22;

/// `-rankmap`: the node (index into the host list) of ranks 0, 1, ...: either a comma list
/// (`1,0,1`) or a PMI process mapping (`(vector,(0,2,1),(1,1,2))`: blocks of `nodes`
/// consecutive nodes from `start`, `ranks` ranks each, as MPICH's `PMI_process_mapping`
/// reads). Ranks past its end repeat it (rank r goes where rank r mod len does), as the
/// process mapping's blocks repeat.
fn parse_rankmap(s: &str) -> Result<Vec<u32>, String> {
    let bad = |why: &str| format!("-rankmap: {why} in '{s}'");
    let num = |w: &str| {
        w.trim().parse::<u32>().map_err(|_| bad(&format!("'{}' is not a node index", w.trim())))
    };
    let t = s.trim();
    let mut map = Vec::new();
    if let Some(body) = t.strip_prefix('(') {
        let body = body
            .strip_suffix(')')
            .and_then(|b| b.trim_start().strip_prefix("vector"))
            .ok_or_else(|| bad("expected (vector,(start,nodes,ranks),...)"))?;
        let mut rest = body.trim_start();
        while !rest.is_empty() {
            let after =
                rest.strip_prefix(',').map(str::trim_start).ok_or_else(|| bad("expected ','"))?;
            let inner = after.strip_prefix('(').ok_or_else(|| bad("expected '('"))?;
            let (block, tail) = inner.split_once(')').ok_or_else(|| bad("unclosed block"))?;
            let v: Vec<u32> = block.split(',').map(num).collect::<Result<_, _>>()?;
            let [start, nodes, ranks] = v[..] else {
                return Err(bad(&format!("block ({block}) is not (start,nodes,ranks)")));
            };
            if nodes == 0 || ranks == 0 {
                return Err(bad(&format!("block ({block}) places no rank")));
            }
            for node in start..start.saturating_add(nodes) {
                if map.len() + ranks as usize > RANKMAP_MAX {
                    return Err(bad("too many entries"));
                }
                map.extend(std::iter::repeat_n(node, ranks as usize));
            }
            rest = tail.trim_start();
        }
    } else {
        for w in t.split(',') {
            map.push(num(w)?);
            if map.len() > RANKMAP_MAX {
                return Err(bad("too many entries"));
            }
        }
    }
    if map.is_empty() {
        return Err(bad("no rank is placed"));
    }
    Ok(map)
}

fn list(s: &str) -> Vec<String> {
    s.split(',').filter(|x| !x.is_empty()).map(str::to_string).collect()
}

/// Split a `-configfile` into argument words: one segment per non-comment line; a line
/// ending in `\` goes on with the next (as Hydra 5 reads it). Words are split at ASCII
/// blanks, and a word that is not UTF-8 stands in as `raw` says (Hydra passes its bytes on).
fn configfile_args(path: &str, raw: &mut RawArgs) -> Result<Vec<String>, CliError> {
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

/// Merge the global options of one segment into `global` (later segments win).
fn merge_global(
    global: &mut Global,
    enable_auto_cleanup: &mut bool,
    s: &Segment,
) -> Result<(), CliError> {
    global.genv.extend(pairs(&s.genv));
    if s.genvnone {
        global.genv_mode = EnvMode::None;
    }
    if s.genvall {
        global.genv_mode = EnvMode::All;
    }
    if let Some(l) = &s.genvlist {
        global.genv_mode = EnvMode::List(list(l));
    }
    global.gwdir = s.gwdir.clone().map(Into::into).or(global.gwdir.take());
    global.label |= s.label;
    global.prepend_pattern = s.prepend_pattern.clone().or(global.prepend_pattern.take());
    global.outfile_pattern = s.outfile_pattern.clone().or(global.outfile_pattern.take());
    global.errfile_pattern = s.errfile_pattern.clone().or(global.errfile_pattern.take());
    global.rmk = s.rmk.or(global.rmk.take());
    global.disable_auto_cleanup |= s.disable_auto_cleanup;
    *enable_auto_cleanup |= s.enable_auto_cleanup;
    global.notes.extend(s.notes.iter().cloned());
    if s.info {
        return Err(CliError::Info(crate::info_text()));
    }
    if s.man {
        return Err(CliError::Info(crate::man::page()));
    }
    if let Some(pid) = s.proctable {
        return Err(CliError::ProcTable(pid));
    }
    if let Some(pid) = s.job_launcher {
        return Err(CliError::JobLauncher(pid));
    }
    global.verbose |= s.verbose;
    global.tree = s.tree.clone().or(global.tree.take());
    global.launch_model = s.launch_model.or(global.launch_model.take());
    global.usize = s.usize.or(global.usize.take());
    global.nla_path = s.nla_path.clone().or(global.nla_path.take());
    global.hostfile = s.hostfile.clone().or(global.hostfile.take());
    global.hosts = s.hosts.clone().or(global.hosts.take());
    global.ppn = s.ppn.or(global.ppn.take());
    global.launcher = s.launcher.or(global.launcher.take());
    global.launcher_exec = s.launcher_exec.clone().or(global.launcher_exec.take());
    global.localhost = s.localhost.clone().or(global.localhost.take());
    global.iface = s.iface.clone().or(global.iface.take());
    global.report = s.report.clone().or(global.report.take());
    global.kvs_push_max = s.kvs_push_max.or(global.kvs_push_max.take());
    global.kvs_max = s.kvs_max.or(global.kvs_max.take());
    global.max_conn = s.max_conn.map(|c| c as usize).or(global.max_conn.take());
    global.launch_timeout = s.launch_timeout.or(global.launch_timeout.take());
    global.pmgr |= s.pmgr;
    global.end_on_stdin_eof |= s.end_on_stdin_eof;
    global.bcast |= s.bcast;
    global.launch_batch = s.launch_batch.or(global.launch_batch.take());
    if let Some(b) = &s.bind_to {
        global.binding.bind = libi_binding::parse_bind(b).map_err(usage)?;
        global.bind_given = true;
    }
    if let Some(m) = &s.map_by {
        global.binding.map = Some(libi_binding::parse_map(m).map_err(usage)?);
        global.map_given = true;
    }
    if let Some(m) = &s.membind {
        global.binding.mem = libi_binding::parse_membind_or_none(m).map_err(usage)?;
        global.membind_given = true;
    }
    if let Some(o) = &s.order_nodes {
        global.order_nodes = Some(o.parse().map_err(usage)?);
    }
    if let Some(v) = &s.gpus_per_proc {
        global.gpus.devices = per_proc("-gpus-per-proc", v)?;
    }
    if let Some(v) = &s.gpu_subdevs_per_proc {
        global.gpus.subdevs = per_proc("-gpu-subdevs-per-proc", v)?;
    }
    global.print_all_exitcodes |= s.print_all_exitcodes;
    global.skip_launch_node |= s.skip_launch_node;
    global.hybrid_hosts |= s.hybrid_hosts;
    if let Some(m) = &s.rankmap {
        global.rankmap = Some(parse_rankmap(m).map_err(usage)?);
    }
    if let Some(k) = &s.memory_alloc_kinds {
        if k.trim().is_empty() || k.contains(char::is_whitespace) {
            return Err(usage(format!(
                "-memory-alloc-kinds: expected a comma-separated list of kinds, got '{k}'"
            )));
        }
        global.memory_alloc_kinds = Some(k.clone());
    }
    if let Some(a) = &s.nameserver {
        global.nameserver = Some(libi::nameserver::parse_address(a).map_err(usage)?);
    }
    if let Some(port) = s.pmi_args.first() {
        match port.parse::<u16>() {
            Ok(p) if p > 0 => global.singleton_port = Some(p),
            _ => return Err(usage(format!("-pmi_args: bad port '{port}'"))),
        }
    }
    if let Some(t) = s.launch_timeout {
        if !(t.is_finite() && t > 0.0) {
            return Err(usage(format!(
                "--launch-timeout must be a positive number of seconds, got {t}"
            )));
        }
    }
    Ok(())
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
) -> Result<(Option<DefaultOptions>, Option<String>), String> {
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
        Err(e) if must => return Err(format!("HYDRA_CONFIG_FILE: cannot read '{path}': {e}")),
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

/// The value of `-gpus-per-proc` / `-gpu-subdevs-per-proc` (option `name`): `auto` (`None`)
/// or a count, 0 included.
fn per_proc(name: &str, v: &str) -> Result<Option<u32>, CliError> {
    if v == "auto" {
        return Ok(None);
    }
    match v.parse::<u32>() {
        Ok(n) if v.bytes().all(|b| b.is_ascii_digit()) => Ok(Some(n)),
        _ => Err(usage(format!("{name}: expected auto or a number (0 or more), got '{v}'"))),
    }
}

/// Parse `argv` (without the program name).
#[cfg(test)]
pub fn parse(argv: &[String]) -> Result<CommandLine, CliError> {
    parse_with_defaults(None, argv, &mut RawArgs::default())
}

/// Parse `argv` after the global options of a defaults file (see [`defaults_file`]): its
/// path and words. The command line wins over the file: its settings come later.
pub fn parse_with_defaults(
    defaults: Option<(&str, &[String])>,
    argv: &[String],
    raw: &mut RawArgs,
) -> Result<CommandLine, CliError> {
    if argv.is_empty() {
        return Err(usage("no program given (try --help)"));
    }
    let mut global = Global::default();
    let mut execs = Vec::new();
    let mut enable_auto_cleanup = false;
    let mut segments: Vec<Vec<String>> = argv.split(|a| a == ":").map(|s| s.to_vec()).collect();
    if let Some((path, words)) = defaults {
        let in_file = |m: String| usage(format!("{path}: {m}"));
        let s = parse_segment(words).map_err(|e| match e {
            CliError::Usage(m) => in_file(m),
            other => other,
        })?;
        if let Some(w) = s.command.first() {
            return Err(in_file(format!(
                "'{w}' is not an option (the file holds global options only)"
            )));
        }
        if s.n.is_some() || !s.env.is_empty() || s.wdir.is_some() || s.configfile.is_some() {
            return Err(in_file(
                "-n, -env, -wdir and -configfile belong on the command line".into(),
            ));
        }
        // The file's settings first: the command line's, merged after them, win.
        segments.insert(0, words.to_vec());
    }
    let first = usize::from(defaults.is_some());
    let mut idx = 0;
    // Hydra takes one host list and one -ppn per command line: a second one (in another
    // segment, or -f with -hosts) is refused rather than silently preferred. The defaults
    // file's are overridden by the command line's, as its other options are.
    let (mut host_list_given, mut ppn_given) = (false, false);
    // The configfile each segment came from, if any: a configfile may not name another (a
    // file naming itself would be read forever); Hydra refuses nesting too.
    let mut from_file: Vec<Option<String>> = vec![None; segments.len()];
    // One environment mode per command line (-genvall/-genvnone/-genvlist) and per program
    // (-envall/-envnone/-envlist): Hydra refuses a second ("duplicate setting") rather than
    // letting one silently win.
    let mut genv_mode: Option<&str> = None;
    while idx < segments.len() {
        let s = parse_segment(&segments[idx])?;
        let modes = |all: bool, none: bool, list: bool, names: [&'static str; 3]| {
            [all, none, list].into_iter().zip(names).filter(|(on, _)| *on).map(|(_, n)| n)
        };
        let mut local =
            modes(s.envall, s.envnone, s.envlist.is_some(), ["-envall", "-envnone", "-envlist"]);
        if let (Some(a), Some(b)) = (local.next(), local.next()) {
            return Err(usage(format!("{a} and {b} contradict: give one")));
        }
        if idx >= first {
            let names = ["-genvall", "-genvnone", "-genvlist"];
            for m in modes(s.genvall, s.genvnone, s.genvlist.is_some(), names) {
                if let Some(before) = genv_mode.replace(m) {
                    return Err(usage(format!(
                        "{before} and {m} contradict: give one (for the whole command line)"
                    )));
                }
            }
        }
        if s.hosts.is_some() && s.hostfile.is_some() {
            return Err(usage("-f and -hosts both give a host list: give one"));
        }
        if idx >= first {
            if s.hosts.is_some() || s.hostfile.is_some() {
                if host_list_given {
                    return Err(usage(
                        "a host list (-f or -hosts) is given twice: one host list serves the \
                         whole command line",
                    ));
                }
                host_list_given = true;
            }
            if s.ppn.is_some() {
                if ppn_given {
                    return Err(usage("-ppn is given twice: it applies to the whole command line"));
                }
                ppn_given = true;
            }
        }
        if let Some(cf) = &s.configfile {
            if let Some(outer) = &from_file[idx] {
                return Err(usage(format!(
                    "configfile '{outer}' names a configfile ('{cf}'): a configfile holds \
                     programs and their options, not another configfile"
                )));
            }
            let words = configfile_args(cf, raw)?;
            let more: Vec<Vec<String>> = words.split(|a| a == ":").map(|s| s.to_vec()).collect();
            from_file.splice(idx + 1..idx + 1, vec![Some(cf.clone()); more.len()]);
            // The configfile's segments stand where the option was; options given next to
            // it stay global.
            segments.splice(idx + 1..idx + 1, more);
            if !s.command.is_empty() {
                return Err(usage("-configfile cannot be combined with a program"));
            }
        }
        let merged = merge_global(&mut global, &mut enable_auto_cleanup, &s);
        match (merged, defaults) {
            (Err(CliError::Usage(m)), Some((path, _))) if idx < first => {
                return Err(usage(format!("{path}: {m}")))
            }
            (r, _) => r?,
        }
        if s.command.is_empty() {
            if s.configfile.is_none() && idx >= first {
                let nth = idx + 1 - first;
                if s.n.is_some() || !s.env.is_empty() || s.wdir.is_some() {
                    return Err(usage(format!("segment {nth} names no program")));
                }
                if segments.len() - first > 1 {
                    return Err(usage(format!("segment {nth} names no program")));
                }
            }
            idx += 1;
            continue;
        }
        let n = match s.n {
            None => None,
            Some(n) if n >= 1 && n <= u32::MAX as i64 => Some(n as u32),
            Some(n) => {
                return Err(usage(format!("-n must be a positive number of processes, got {n}")))
            }
        };
        let env_mode = if s.envnone {
            Some(EnvMode::None)
        } else if let Some(l) = &s.envlist {
            Some(EnvMode::List(list(l)))
        } else if s.envall {
            Some(EnvMode::All)
        } else {
            None
        };
        execs.push(Exec {
            n,
            env: pairs(&s.env),
            env_mode,
            wdir: s.wdir.clone().map(Into::into),
            prog: s.command[0].clone(),
            args: s.command[1..].iter().map(Into::into).collect(),
        });
        idx += 1;
    }
    if enable_auto_cleanup && global.disable_auto_cleanup {
        // Hydra refuses the pair too ("duplicate setting").
        return Err(usage("-enable-auto-cleanup and -disable-auto-cleanup contradict: give one"));
    }
    if global.label && global.prepend_pattern.is_some() {
        return Err(usage("-l and -prepend-pattern both set the output prefix: give one"));
    }
    match (global.singleton_port, execs.is_empty()) {
        (None, true) => return Err(usage("no program given (try --help)")),
        (Some(_), false) => return Err(usage("-pmi_args cannot be combined with a program")),
        _ => {}
    }
    Ok(CommandLine { global, execs })
}

/// The most `HYDRA_PROXY_RETRY_COUNT` asks of an NLA (a bigger count is taken as this).
const MAX_CONNECT_RETRIES: i64 = 100;

/// Hydra's environment equivalents of options, for what the command line left unset
/// (options win): `HYDRA_HOST_FILE`, `HYDRA_LAUNCHER` (or its older name `HYDRA_BOOTSTRAP`),
/// `HYDRA_LAUNCHER_EXEC` (`HYDRA_BOOTSTRAP_EXEC`), `HYDRA_RMK`, `HYDRA_BINDING`,
/// `HYDRA_MAPPING`, `HYDRA_MEMBIND`, `HYDRA_IFACE`, `HYDRA_DEBUG`, `HYDRA_TOPO_DEBUG`,
/// `HYDRA_ENV=all`, `HYDRA_LAUNCHER_EXTRA_ARGS`, `HYDRA_LAUNCHER_SSH_LIMIT`,
/// `HYDRA_PROXY_RETRY_COUNT`. `get` looks a variable
/// up (empty counts as unset).
pub fn apply_env(g: &mut Global, get: &dyn Fn(&str) -> Option<String>) -> Result<(), String> {
    let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
    // The first of `names` that is set: its name and value.
    let first = |names: &[&'static str]| names.iter().find_map(|&n| get(n).map(|v| (n, v)));
    if g.hosts.is_none() && g.hostfile.is_none() {
        g.hostfile = get("HYDRA_HOST_FILE");
        g.hostfile_from_env = g.hostfile.is_some();
    }
    if g.launcher.is_none() {
        if let Some((name, v)) = first(&["HYDRA_LAUNCHER", "HYDRA_BOOTSTRAP"]) {
            g.launcher = Some(v.trim().parse().map_err(|e| format!("{name}: {e}"))?);
        }
    }
    if g.launcher_exec.is_none() {
        g.launcher_exec = first(&["HYDRA_LAUNCHER_EXEC", "HYDRA_BOOTSTRAP_EXEC"]).map(|(_, v)| v);
    }
    // Hydra splits it at whitespace (no quoting) and puts the words before the host.
    if let Some(v) = get("HYDRA_LAUNCHER_EXTRA_ARGS") {
        g.launcher_extra_args = v.split_whitespace().map(str::to_string).collect();
    }
    // Hydra passes it to each proxy (`--retries`), which tries its connection to mpiexec
    // that many more times. A negative count means no retry (Hydra takes -1 too). At most
    // 100 (~20 s of tries): an NLA whose parent is gone for good should not linger longer.
    if let Some(v) = get("HYDRA_PROXY_RETRY_COUNT") {
        match v.trim().parse::<i64>() {
            Ok(n) => g.connect_retries = Some(n.clamp(0, MAX_CONNECT_RETRIES) as u32),
            Err(_) => return Err(format!("HYDRA_PROXY_RETRY_COUNT: expected a number, got '{v}'")),
        }
    }
    // Hydra's cap on ssh launches in flight: each launching NLA's batch.
    if g.launch_batch.is_none() {
        if let Some(v) = get("HYDRA_LAUNCHER_SSH_LIMIT") {
            match v.trim().parse::<u32>() {
                Ok(n) if n > 0 => g.launch_batch = Some(n),
                _ => {
                    return Err(format!(
                        "HYDRA_LAUNCHER_SSH_LIMIT: expected a positive number, got '{v}'"
                    ))
                }
            }
        }
    }
    if g.rmk.is_none() {
        if let Some(v) = get("HYDRA_RMK") {
            g.rmk = Some(v.trim().parse().map_err(|e| format!("HYDRA_RMK: {e}"))?);
        }
    }
    if !g.bind_given {
        if let Some(v) = get("HYDRA_BINDING") {
            g.binding.bind =
                libi_binding::parse_bind(v.trim()).map_err(|e| format!("HYDRA_BINDING: {e}"))?;
        }
    }
    if !g.map_given {
        if let Some(v) = get("HYDRA_MAPPING") {
            g.binding.map =
                Some(libi_binding::parse_map(v.trim()).map_err(|e| format!("HYDRA_MAPPING: {e}"))?);
        }
    }
    if !g.membind_given {
        if let Some(v) = get("HYDRA_MEMBIND") {
            g.binding.mem = libi_binding::parse_membind_or_none(v.trim())
                .map_err(|e| format!("HYDRA_MEMBIND: {e}"))?;
        }
    }
    if g.binding.mem == Some(libi_binding::MemBind::NextTouch) {
        g.notes.push("-membind nexttouch: nothing set (Linux has no next-touch policy)".into());
    }
    if g.iface.is_none() && g.localhost.is_none() {
        g.iface = get("HYDRA_IFACE").map(|v| v.trim().to_string());
    }
    // Booleans as Hydra reads them; -v on the command line wins.
    let boolean = |name: &str| -> Result<bool, String> {
        let Some(v) = get(name) else { return Ok(false) };
        match v.trim().to_ascii_lowercase().as_str() {
            "1" | "yes" | "true" | "on" => Ok(true),
            "0" | "no" | "false" | "off" => Ok(false),
            _ => Err(format!("{name}: expected a boolean (1/0, yes/no), got '{v}'")),
        }
    };
    g.verbose |= boolean("HYDRA_DEBUG")?;
    // Each rank's binding, one line each, as -v shows it (Hydra: "process N binding: ...").
    g.binding.report |= boolean("HYDRA_TOPO_DEBUG")?;
    if let Some(v) = get("HYDRA_ENV") {
        // Hydra knows one value; passing everything is our default anyway, and an explicit
        // -genvnone/-genvlist wins.
        if v.trim() != "all" {
            return Err(format!("HYDRA_ENV: expected 'all', got '{v}'"));
        }
    }
    // -bind-to and -map-by (or their variables) go together.
    g.binding.check()
}

/// `MPIEXEC_TIMEOUT` (unset or empty: none): seconds, fractions allowed (`1.5`); as Hydra,
/// 0 and negative values (Hydra's `-1`) mean no timeout. Anything else (`abc`, `2x`, `1e3`) is
/// an error, where Hydra warns and runs without a timeout. (Hydra 5 runs `0` to the end and
/// then exits 255.)
pub fn mpiexec_timeout(v: Option<&str>) -> Result<Option<std::time::Duration>, String> {
    let Some(t) = v.map(str::trim).filter(|t| !t.is_empty()) else { return Ok(None) };
    let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
    let (whole, frac) = digits.split_once('.').unwrap_or((digits, ""));
    let decimal = !(whole.is_empty() && frac.is_empty())
        && whole.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit());
    let secs: f64 = match t.parse() {
        Ok(s) if decimal => s,
        _ => {
            return Err(format!(
                "MPIEXEC_TIMEOUT must be a number of seconds (0 or -1: none), got '{t}'"
            ))
        }
    };
    // Beyond what a Duration holds: never.
    Ok((secs > 0.0).then(|| std::time::Duration::try_from_secs_f64(secs).ok()).flatten())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<CommandLine, CliError> {
        parse(&s.split_whitespace().map(str::to_string).collect::<Vec<_>>())
    }

    /// `line` is a usage error whose message contains `what`.
    fn usage_error(line: &str, what: &str) {
        match p(line) {
            Err(CliError::Usage(m)) => assert!(m.contains(what), "{line}: {m}"),
            other => panic!("{line}: {other:?}"),
        }
    }

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
    fn timeout_values() {
        use std::time::Duration;
        for (v, t) in [
            (None, None),
            (Some(""), None),
            (Some(" 0 "), None),
            (Some("-1"), None),
            (Some("-2.5"), None),
            (Some("0.0"), None),
            (Some("30"), Some(Duration::from_secs(30))),
            (Some("+2"), Some(Duration::from_secs(2))),
            (Some("1.5"), Some(Duration::from_millis(1500))),
            (Some(".25"), Some(Duration::from_millis(250))),
        ] {
            assert_eq!(mpiexec_timeout(v), Ok(t), "{v:?}");
        }
        assert_eq!(mpiexec_timeout(Some(&"9".repeat(400))), Ok(None));
        for bad in ["abc", "2x", "1e3", "inf", "NaN", ".", "-", "1.2.3", "1 2"] {
            let e = mpiexec_timeout(Some(bad)).expect_err(bad);
            assert_eq!(
                e,
                format!("MPIEXEC_TIMEOUT must be a number of seconds (0 or -1: none), got '{bad}'")
            );
        }
    }

    #[test]
    fn mpmd_segments_and_local_env() {
        let c = p("-n 1 -env X 1 a : -n 2 -envnone b arg").expect("parse");
        assert_eq!(c.execs.len(), 2);
        assert_eq!(c.execs[0].env, vec![("X".into(), "1".into())]);
        assert_eq!(c.execs[1].n, Some(2));
        assert_eq!(c.execs[1].env_mode, Some(EnvMode::None));
        assert_eq!(c.execs[1].args, vec!["arg"]);
    }

    #[test]
    fn global_env_modes() {
        let c = p("-genvlist A,B -n 1 x").expect("parse");
        assert_eq!(c.global.genv_mode, EnvMode::List(vec!["A".into(), "B".into()]));
        let c = p("-genvnone -n 1 x").expect("parse");
        assert_eq!(c.global.genv_mode, EnvMode::None);
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

    #[test]
    fn tree_options() {
        let c = p("--tree kary:4 --launch-model 0.01,0.2 -n 1 x").expect("parse");
        assert_eq!(c.global.tree, Some(Shape::Kary(4)));
        let c = p("-tree flat -n 1 x").expect("parse");
        assert_eq!(c.global.tree, Some(Shape::Flat));
        assert!(matches!(p("--tree nope -n 1 x"), Err(CliError::Usage(_))));
    }

    #[test]
    fn kvs_options() {
        let c = p("--kvs-max 64K -kvs-push-max 2M -n 1 x").expect("parse");
        assert_eq!(c.global.kvs_max, Some(64 << 10));
        assert_eq!(c.global.kvs_push_max, Some(2 << 20));
        let c = p("--kvs-max 1073741824 x").expect("parse");
        assert_eq!(c.global.kvs_max, Some(1 << 30));
        assert!(matches!(p("--kvs-max 1.5G x"), Err(CliError::Usage(_))));
        assert!(matches!(p("--kvs-max x"), Err(CliError::Usage(_))));
    }

    #[test]
    fn host_options() {
        let c = p("-f hf -ppn 2 -launcher ssh -launcher-exec /x/ssh -localhost 10.0.0.1 -n 4 x")
            .expect("parse");
        assert_eq!(c.global.hostfile.as_deref(), Some("hf"));
        assert_eq!(c.global.ppn, Some(2));
        assert_eq!(c.global.launcher, Some(LauncherKind::Ssh));
        assert_eq!(c.global.launcher_exec.as_deref(), Some("/x/ssh"));
        assert_eq!(c.global.localhost.as_deref(), Some("10.0.0.1"));
        let c = p("-machinefile m x").expect("parse");
        assert_eq!(c.global.hostfile.as_deref(), Some("m"));
        let c = p("-hosts a:2,b x").expect("parse");
        assert_eq!(c.global.hosts.as_deref(), Some("a:2,b"));
        // One host list and one -ppn per command line, as Hydra.
        usage_error("-machinefile m -hosts a:2,b x", "-f and -hosts both give a host list");
        usage_error("-n 1 -hosts a x : -n 1 -f b y", "a host list (-f or -hosts) is given twice");
        usage_error("-ppn 1 -n 1 x : -ppn 2 -n 1 y", "-ppn is given twice");
        let c = p("-hosts a -ppn 2 -n 1 x : -n 1 y").expect("parse");
        assert_eq!((c.global.hosts.as_deref(), c.global.ppn), (Some("a"), Some(2)));
        assert!(matches!(p("-launcher telnet x"), Err(CliError::Usage(_))));
        assert!(matches!(p("-ppn 0 x"), Err(CliError::Usage(_))));
        let c = p("--report=r.json x").expect("parse");
        assert_eq!(c.global.report.as_deref(), Some("r.json"));
    }

    #[test]
    fn binding_options() {
        use libi_binding::{BindTo, Object};
        let c = p("-bind-to core:2 -map-by socket -n 2 a : -n 1 b").unwrap();
        assert_eq!(c.global.binding.bind.to_string(), "core:2");
        assert_eq!(c.global.binding.map.map(|m| m.obj), Some(Object::Socket));
        let c = p("-n 2 a : -bind-to user:0+1,1 b").unwrap();
        assert!(matches!(c.global.binding.bind, BindTo::User(ref e) if e.len() == 2));
        assert_eq!(p("a").unwrap().global.binding.bind, BindTo::None);
        match p("-bind-to bogus a") {
            Err(CliError::Usage(m)) => assert!(m.starts_with("-bind-to: unknown object 'bogus'")),
            other => panic!("{other:?}"),
        }
        assert!(matches!(p("-map-by rr a"), Err(CliError::Usage(_))));
    }

    #[test]
    fn membind_and_order_nodes() {
        use libi::hosts::NodeOrder;
        use libi_binding::MemBind;
        let g = |line: &str| p(line).expect(line).global;
        assert_eq!(g("a").binding.mem, None);
        assert_eq!(g("-membind firsttouch a").binding.mem, Some(MemBind::FirstTouch));
        let b = g("-membind=bind:0,2-3 -bind-to core a").binding;
        assert_eq!(b.mem.map(|m| m.to_string()).as_deref(), Some("bind:0,2-3"));
        assert_eq!(b.bind.to_string(), "core");
        assert_eq!(
            g("-n 1 a : -membind interleave b").binding.mem,
            Some(MemBind::Interleave(None))
        );
        assert!(g("-membind bind a").membind_given);
        // `none`, as Hydra scripts say it: nothing set, and HYDRA_MEMBIND not read either.
        let none = g("-membind none a");
        assert_eq!((none.binding.mem, none.membind_given), (None, true));
        assert_eq!(g("a").order_nodes, None);
        assert_eq!(g("-order-nodes descending a").order_nodes, Some(NodeOrder::Descending));
        assert_eq!(g("--order-nodes=ASCENDING a").order_nodes, Some(NodeOrder::Ascending));
        // nexttouch: accepted, a note under -v.
        let mut n = g("-membind nexttouch a");
        apply_env(&mut n, &|_| None).expect("env");
        assert_eq!(n.binding.mem, Some(MemBind::NextTouch));
        assert_eq!(n.notes, ["-membind nexttouch: nothing set (Linux has no next-touch policy)"]);
    }

    #[test]
    fn gpu_options() {
        use libi::job::GpuSplit;
        let g = |line: &str| p(line).expect(line).global.gpus;
        assert_eq!(g("a"), GpuSplit::default());
        assert_eq!(g("-gpus-per-proc 2 a"), GpuSplit { devices: Some(2), subdevs: None });
        assert_eq!(g("-gpus-per-proc=0 a"), GpuSplit { devices: Some(0), subdevs: None });
        assert_eq!(g("-gpus-per-proc 2 -n 1 a : -gpus-per-proc auto b"), GpuSplit::default());
        // Global: given in any segment; the last one wins.
        let both = g("-n 1 a : --gpu-subdevs-per-proc 3 -gpus-per-proc 1 b");
        assert_eq!(both, GpuSplit { devices: Some(1), subdevs: Some(3) });
        for v in ["-1", "x", "2x", "+2", "1.5", "AUTO", "99999999999"] {
            usage_error(
                &format!("-gpus-per-proc {v} a"),
                &format!("-gpus-per-proc: expected auto or a number (0 or more), got '{v}'"),
            );
        }
        usage_error("-gpu-subdevs-per-proc x a", "-gpu-subdevs-per-proc: expected auto");
        usage_error("-gpus-per-proc", "option '-gpus-per-proc' needs 1 value(s)");
    }

    #[test]
    fn output_patterns() {
        use crate::stdio::Piece;
        let c =
            p("-prepend-pattern <%r:%g@%h/%p+%t>%% -outfile-pattern o.%r -errfile-pattern e.%r x")
                .expect("parse");
        let pp = c.global.prepend_pattern.expect("prepend");
        assert_eq!(pp.expand(1, 7, "n2", 3, 12), "<7:1@n2/3+12>%");
        assert_eq!(
            c.global.outfile_pattern.expect("out").0,
            vec![Piece::Text("o.".into()), Piece::Rank]
        );
        assert!(c.global.errfile_pattern.is_some());
        for bad in ["-prepend-pattern %x x", "-outfile-pattern o% x", "-l -prepend-pattern [%r] x"]
        {
            assert!(matches!(p(bad), Err(CliError::Usage(_))), "{bad}");
        }
    }

    #[test]
    fn rmk_and_info() {
        assert_eq!(p("-rmk pbs x").expect("parse").global.rmk, Some(Rmk::Pbs));
        assert_eq!(p("-rmk LSF x").expect("parse").global.rmk, Some(Rmk::Lsf));
        assert_eq!(p("-rmk user x").expect("parse").global.rmk, Some(Rmk::User));
        assert!(matches!(p("-rmk cobalt x"), Err(CliError::Usage(_))));
        assert!(p("-disable-auto-cleanup x").expect("parse").global.disable_auto_cleanup);
        assert!(!p("x").expect("parse").global.disable_auto_cleanup);
        match p("-info") {
            Err(CliError::Info(t)) => assert!(t.contains("Launchers") && t.contains("pbs"), "{t}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn hydra_environment() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        let vars: &'static [(&str, &str)] = &[
            ("HYDRA_HOST_FILE", "/hf"),
            ("HYDRA_LAUNCHER", "fork"),
            ("HYDRA_LAUNCHER_EXEC", "/x/ssh"),
            ("HYDRA_RMK", "pbs"),
            ("HYDRA_ENV", "all"),
            ("HYDRA_LAUNCHER_EXTRA_ARGS", " -p 2222\t-o  A=b "),
        ];
        let mut g = p("x").expect("parse").global;
        apply_env(&mut g, &env(vars)).expect("env");
        assert_eq!(g.launcher_extra_args, ["-p", "2222", "-o", "A=b"]);
        assert_eq!(g.hostfile.as_deref(), Some("/hf"));
        assert_eq!(g.launcher, Some(LauncherKind::Fork));
        assert_eq!(g.launcher_exec.as_deref(), Some("/x/ssh"));
        assert_eq!(g.rmk, Some(Rmk::Pbs));
        // Options win.
        let mut g =
            p("-hosts a -launcher ssh -launcher-exec /y -rmk user x").expect("parse").global;
        apply_env(&mut g, &env(vars)).expect("env");
        assert_eq!((g.hostfile, g.hosts.as_deref()), (None, Some("a")));
        assert_eq!(g.launcher, Some(LauncherKind::Ssh));
        assert_eq!(g.launcher_exec.as_deref(), Some("/y"));
        assert_eq!(g.rmk, Some(Rmk::User));
        let mut g = p("x").expect("parse").global;
        assert!(apply_env(&mut g, &env(&[("HYDRA_LAUNCHER", "telnet")])).is_err());
        assert!(apply_env(&mut g, &env(&[("HYDRA_ENV", "none")])).is_err());
        // The older names, binding, mapping, interface, debug.
        let older: &'static [(&str, &str)] = &[
            ("HYDRA_BOOTSTRAP", "rsh"),
            ("HYDRA_BOOTSTRAP_EXEC", "/x/rsh"),
            ("HYDRA_BINDING", "core:2"),
            ("HYDRA_MAPPING", "socket"),
            ("HYDRA_IFACE", "eth7"),
            ("HYDRA_DEBUG", "1"),
            ("HYDRA_TOPO_DEBUG", "yes"),
        ];
        let mut g = p("x").expect("parse").global;
        assert!(!g.binding.report);
        apply_env(&mut g, &env(older)).expect("env");
        assert!(g.binding.report);
        assert!(apply_env(&mut g, &env(&[("HYDRA_TOPO_DEBUG", "x")])).is_err());
        assert_eq!(g.launcher, Some(LauncherKind::Rsh));
        assert_eq!(g.launcher_exec.as_deref(), Some("/x/rsh"));
        assert_eq!(g.binding.bind.to_string(), "core:2");
        assert_eq!(g.binding.map.map(|m| m.obj), Some(libi_binding::Object::Socket));
        assert_eq!(g.iface.as_deref(), Some("eth7"));
        assert!(g.verbose);
        // HYDRA_LAUNCHER before HYDRA_BOOTSTRAP; options before both; -bind-to none too.
        let mut g = p("x").expect("parse").global;
        apply_env(&mut g, &env(&[("HYDRA_LAUNCHER", "fork"), ("HYDRA_BOOTSTRAP", "rsh")]))
            .expect("env");
        assert_eq!(g.launcher, Some(LauncherKind::Fork));
        let mut g = p("-bind-to none -map-by core -iface lo x").expect("parse").global;
        apply_env(&mut g, &env(older)).expect("env");
        assert_eq!(g.binding.bind, libi_binding::BindTo::None);
        assert_eq!(g.binding.map.map(|m| m.obj), Some(libi_binding::Object::Core));
        assert_eq!(g.iface.as_deref(), Some("lo"));
        // HYDRA_MEMBIND when -membind is not given.
        let membind: &'static [(&str, &str)] = &[("HYDRA_MEMBIND", " interleave:1 ")];
        let mut g = p("x").expect("parse").global;
        apply_env(&mut g, &env(membind)).expect("env");
        assert_eq!(g.binding.mem.map(|m| m.to_string()).as_deref(), Some("interleave:1"));
        let mut g = p("-membind firsttouch x").expect("parse").global;
        apply_env(&mut g, &env(membind)).expect("env");
        assert_eq!(g.binding.mem, Some(libi_binding::MemBind::FirstTouch));
        for bad in [
            ("HYDRA_BINDING", "bogus"),
            ("HYDRA_MAPPING", "rr"),
            ("HYDRA_DEBUG", "maybe"),
            ("HYDRA_MEMBIND", "bind:x"),
        ] {
            let mut g = p("x").expect("parse").global;
            let e = apply_env(&mut g, &env(Box::leak(Box::new([bad])))).expect_err(bad.0);
            assert!(e.starts_with(bad.0), "{e}");
        }
    }

    #[test]
    fn hydra_launcher_ssh_limit_and_proxy_retry_count() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        let mut g = p("x").expect("parse").global;
        apply_env(&mut g, &env(&[("HYDRA_LAUNCHER_SSH_LIMIT", "8")])).expect("env");
        assert_eq!(g.launch_batch, Some(8));
        let mut g = p("--launch-batch 2 x").expect("parse").global;
        apply_env(&mut g, &env(&[("HYDRA_LAUNCHER_SSH_LIMIT", "8")])).expect("env");
        assert_eq!(g.launch_batch, Some(2));
        for (v, want) in [("3", 3), (" 0 ", 0), ("-1", 0), ("5000", 100)] {
            let mut g = p("x").expect("parse").global;
            let vars = Box::leak(Box::new([("HYDRA_PROXY_RETRY_COUNT", v)]));
            apply_env(&mut g, &env(vars)).expect(v);
            assert_eq!(g.connect_retries, Some(want), "{v}");
        }
        let mut g = p("x").expect("parse").global;
        let e = apply_env(&mut g, &env(&[("HYDRA_PROXY_RETRY_COUNT", "ten")])).expect_err("ten");
        assert_eq!(e, "HYDRA_PROXY_RETRY_COUNT: expected a number, got 'ten'");
        for bad in ["0", "x", "-3"] {
            let mut g = p("x").expect("parse").global;
            let vars = Box::leak(Box::new([("HYDRA_LAUNCHER_SSH_LIMIT", bad)]));
            let e = apply_env(&mut g, &env(vars)).expect_err(bad);
            assert!(e.starts_with("HYDRA_LAUNCHER_SSH_LIMIT"), "{e}");
        }
    }

    #[test]
    fn singleton_and_exitcodes() {
        let c = p("-pmi_args 4711 default_interface default_key 99").expect("parse");
        assert_eq!(c.global.singleton_port, Some(4711));
        assert!(c.execs.is_empty());
        assert!(matches!(p("-pmi_args 0 a b 1"), Err(CliError::Usage(_))));
        assert!(matches!(p("-pmi_args 12 a b"), Err(CliError::Usage(_))));
        assert!(matches!(p("-pmi_args 12 a b 1 prog"), Err(CliError::Usage(_))));
        let c = p("-print-all-exitcodes -n 2 x").expect("parse");
        assert!(c.global.print_all_exitcodes);
    }

    /// Two environment modes contradict (Hydra: "duplicate setting"): refused, whichever
    /// the order, globally across segments and per program.
    #[test]
    fn environment_modes_contradict() {
        for (line, want) in [
            ("-genvall -genvnone -n 1 x", "-genvall and -genvnone contradict"),
            ("-genvnone -genvlist A -n 1 x", "-genvnone and -genvlist contradict"),
            ("-genvnone -n 1 x : -genvall -n 1 y", "-genvnone and -genvall contradict"),
            ("-n 1 -envall -envnone x", "-envall and -envnone contradict"),
            ("-n 1 -envlist A -envnone x", "-envnone and -envlist contradict"),
        ] {
            match p(line) {
                Err(CliError::Usage(m)) => assert!(m.contains(want), "{line}: {m}"),
                other => panic!("{line}: {:?}", other.map(|c| c.execs.len())),
            }
        }
        // One mode per program is fine, different in each.
        assert!(p("-n 1 -envnone x : -n 1 -envall y").is_ok());
    }

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
    fn hydra5_placement_options() {
        let c = p("-skip-launch-node -hybrid-hosts -rankmap 1,0,1 -n 2 x").expect("parse");
        assert!(c.global.skip_launch_node && c.global.hybrid_hosts);
        assert_eq!(c.global.rankmap, Some(vec![1, 0, 1]));
        let c = p("-rankmap (vector,(0,2,1),(1,1,2)) -n 4 x").expect("parse");
        assert_eq!(c.global.rankmap, Some(vec![0, 1, 1, 1]));
        assert_eq!(parse_rankmap(" ( vector , (3,1,2) ) "), Ok(vec![3, 3]));
        for (bad, what) in [
            ("-rankmap 1,,2 x", "'' is not a node index"),
            ("-rankmap -1 x", "'-1' is not a node index"),
            ("-rankmap (vector) x", "no rank is placed"),
            ("-rankmap (vector,(0,1,1) x", "unclosed block"),
            ("-rankmap (vector,(0,1,1,1)) x", "is not (start,nodes,ranks)"),
            ("-rankmap (vector,(0,4294967295,4294967295)) x", "too many entries"),
            (
                "-rankmap (vector,(0,4294967295,0),(0,1,1)) x",
                "block (0,4294967295,0) places no rank",
            ),
            ("-rankmap (vector,(0,0,1)) x", "block (0,0,1) places no rank"),
            ("-rankmap (list,(0,1,1)) x", "expected (vector"),
        ] {
            usage_error(bad, what);
        }
        let c = p("-memory-alloc-kinds mpi:alloc_mem,cuda:device -n 1 x").expect("parse");
        assert_eq!(c.global.memory_alloc_kinds.as_deref(), Some("mpi:alloc_mem,cuda:device"));
        usage_error("-memory-alloc-kinds= x", "empty value");
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
        assert_eq!(defaults_file(&env(vec![("HOME", home.clone())])), Ok((None, None)));
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
        assert!(e.expect_err("missing").starts_with("HYDRA_CONFIG_FILE: cannot read"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

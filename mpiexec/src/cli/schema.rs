//! The option schema: [`Segment`], the options of one `:`-separated segment as clap parses
//! them (each option's doc comment is its `--help` text and its entry in the man page), with
//! the value parsers only the command line has (`-usize`, [`Rmk`]).

// The options' doc comments are their `--help` text, brackets and all (`[:PORT]`), not
// rustdoc links.
#![allow(rustdoc::broken_intra_doc_links)]

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
    /// What the ranks' MPI library may speak to us: pmi1 or pmi2 (PMI-1/PMI-2 only), pmix
    /// (PMIx as well, from a PMIx server on each node: Open MPI 5), auto (PMIx as well when a
    /// program links a PMIx client; the default)
    #[arg(long = "pmi", value_name = "KIND")]
    pub pmi: Option<PmiKind>,
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

/// `-pmi`: which process-management interfaces the ranks are served. PMI-1 and PMI-2 are
/// always served (on `PMI_FD`; the rank's library picks); PMIx is served as well for `pmix`,
/// and for `auto` when a program links a PMIx client (`crate::pmix_detect`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PmiKind {
    Pmi1,
    Pmi2,
    Pmix,
    #[default]
    Auto,
}

impl std::str::FromStr for PmiKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "pmi1" => Ok(PmiKind::Pmi1),
            "pmi2" => Ok(PmiKind::Pmi2),
            "pmix" => Ok(PmiKind::Pmix),
            "auto" => Ok(PmiKind::Auto),
            _ => Err(format!("unknown PMI '{s}' (known: pmi1 pmi2 pmix auto)")),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::testing::p;
    use crate::cli::CliError;

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
        assert_eq!(p("-pmi pmix x").expect("parse").global.pmi, Some(PmiKind::Pmix));
        assert_eq!(p("--pmi PMI2 x").expect("parse").global.pmi, Some(PmiKind::Pmi2));
        assert_eq!(p("x").expect("parse").global.pmi, None);
        assert!(matches!(p("-pmi ucx x"), Err(CliError::Usage(_))));
        assert!(p("-disable-auto-cleanup x").expect("parse").global.disable_auto_cleanup);
        assert!(!p("x").expect("parse").global.disable_auto_cleanup);
        match p("-info") {
            Err(CliError::Info(t)) => assert!(t.contains("Launchers") && t.contains("pbs"), "{t}"),
            other => panic!("{other:?}"),
        }
    }
}

//! What things cost in virtual time. Every figure is in seconds (or bytes per second) and
//! has a default measured on this project's machines (see `bench/results.md` §8, "Validation:
//! simulated against measured", and `libi-sim calibrate`).

use serde::{Deserialize, Serialize};

/// The cost model of a simulated cluster.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Costs {
    /// Parent-side cost of one child launch (the launch model's `SEQ`): the parent's launch
    /// lane is busy this long per child.
    pub seq: f64,
    /// From the start of a child's launch until its NLA's hello reaches the parent (the
    /// launch model's `REM`).
    pub rem: f64,
    /// Concurrent launch lanes per parent (`c`).
    pub slots: u32,
    /// One-way latency of a tree link.
    pub latency: f64,
    /// Bandwidth of a tree link, each direction, bytes per second.
    pub bandwidth: f64,
    /// CPU time a node spends per tree message it handles, and per byte of it (decoded,
    /// stored, passed on).
    pub cpu_msg: f64,
    pub cpu_byte: f64,
    /// CPU time a node spends per PMI request of a local rank (a text line read, parsed,
    /// answered; its answer's write costs `cpu_send` of this).
    pub cpu_pmi: f64,
    /// CPU time a node spends sending a message (a tree message, or a PMI answer to a
    /// rank), as a fraction of what handling it costs the receiver (`cpu_msg + cpu_byte ×
    /// bytes`). The node's event loop is busy that long after the handling that sent it, and
    /// the messages of one handling leave one after the other (the driver writes to a child
    /// and waits for the write before the next: a fence release goes out child by child).
    /// 0: sending is free.
    pub cpu_send: f64,
    /// Launches and rank starts run on the node's event loop (1), as the current driver does
    /// (`Children::launch_all`, then `Ranks::start`, then the loop): nothing else is handled
    /// meanwhile, so a child's hello (and so its setup) waits until its parent has launched
    /// every child and started every rank. 0: a launch lane of its own (a thread), the loop
    /// handles hellos, tree messages and PMI meanwhile.
    pub loop_launch: bool,
    /// CPU time an NLA spends starting one rank (fork/exec, pipes, binding).
    pub fork: f64,
    /// From a rank's start to its first PMI request (exec, dynamic loading, library init).
    pub rank_start: f64,
    /// A rank's own time between an answer and its next request.
    pub rank_step: f64,
    /// One-way latency of a rank's PMI socket.
    pub pmi_latency: f64,
    /// From a rank's last answer (finalize) to its exit being seen by its NLA.
    pub rank_exit: f64,
    /// From a teardown's SIGTERM to the rank's exit being seen.
    pub kill_delay: f64,
    /// Cores shared by every simulated node and rank (0: each node has CPUs of its own).
    /// The validation runs use the machine's cores: every agent runs on one host there.
    /// They are shared as the kernel's fair scheduler does, approximated by processor
    /// sharing: each process with CPU work to do (an agent's event loop, a rank, a starting
    /// process) runs at `min(1, cores / runnable)` of a core.
    pub cores: u32,
    /// From the front end's start to its first launch (planning, listening).
    pub fe_start: f64,
    /// Relative jitter (uniform ±) applied to `rem`, `rank_start` and `rank_exit`, drawn
    /// from the run's seed.
    pub jitter: f64,
    /// PMIx jobs: one message between an agent and its PMIx companion (`libi-pmix`), each
    /// way, besides `cpu_byte` per byte of it: libpmix's upcall posted to the companion's
    /// main thread, a postcard frame over the socketpair, the agent's reader task (and back:
    /// the completion called, libpmix's thread shift). An estimate (nothing measures the hop
    /// alone yet); MPI_Init of 2 ranks, 4 fences, takes 23–46 ms under the companion's test
    /// agent (`docs/spec/pmix-companion.md` §8), so the hop is far below that.
    #[serde(default = "default_pmix_hop")]
    pub pmix_hop: f64,
    /// PMIx jobs: an agent with ranks starts its companion and registers the job with it
    /// before its first rank starts, its event loop waiting (`PMIx_server_init`, the
    /// namespace, one client per rank). Measured 25–130 ms for the start alone on this
    /// project's VM in a debug build (`docs/spec/pmix-companion.md` §8); 30 ms by default,
    /// an estimate for a release build.
    #[serde(default = "default_pmix_start")]
    pub pmix_start: f64,
}

fn default_pmix_hop() -> f64 {
    Costs::default().pmix_hop
}

fn default_pmix_start() -> f64 {
    Costs::default().pmix_start
}

impl Default for Costs {
    /// Fork-launcher figures of this 2-core VM (`bench/sim-validate.sh`): an NLA starts in
    /// about 3 ms and connects back over a Unix socket; a rank of the replay client starts
    /// in about 1 ms.
    fn default() -> Self {
        Costs {
            seq: 0.0012,
            rem: 0.004,
            slots: 1,
            latency: 20e-6,
            bandwidth: 1.0e9,
            cpu_msg: 4e-6,
            cpu_byte: 1e-9,
            cpu_pmi: 4e-6,
            cpu_send: 0.0,
            loop_launch: false,
            fork: 0.00035,
            rank_start: 0.0012,
            rank_step: 5e-6,
            pmi_latency: 5e-6,
            rank_exit: 0.0004,
            kill_delay: 0.001,
            cores: 0,
            fe_start: 0.0,
            jitter: 0.0,
            pmix_hop: 30e-6,
            pmix_start: 0.03,
        }
    }
}

impl Costs {
    /// Every agent and rank on this project's 2-core VM, fork launcher: the costs fitted by
    /// `bench/sim-calibrate.py` to the real runs of `bench/sim-validate.sh` (the validation
    /// table of `bench/results.md`). The 2 cores are processor-shared by every agent and
    /// rank, and launches and rank starts block the agent's event loop, as the driver does
    /// (`loop_launch`). The CPU figures are per process sharing 2 cores, which is why they
    /// differ from [`Costs::default`].
    pub fn this_vm() -> Self {
        Costs {
            cores: 2,
            loop_launch: true,
            fe_start: 0.000249,
            seq: 1.17e-6,
            rem: 0.0015,
            fork: 0.00072,
            rank_start: 0.0003,
            cpu_msg: 4e-5,
            cpu_pmi: 2.4e-5,
            cpu_byte: 2.47e-8,
            cpu_send: 1.4,
            rank_step: 2.83e-6,
            rank_exit: 0.00125,
            ..Costs::default()
        }
    }

    /// Figures for `ssh` across a LAN, as the launch model's defaults (SEQ 7 ms, REM 0.3 s).
    pub fn ssh_lan() -> Self {
        Costs { seq: 0.007, rem: 0.30, latency: 50e-6, bandwidth: 1.25e9, ..Costs::default() }
    }

    /// The launch model these costs imply (for the tree builder and the prediction).
    pub fn launch_model(&self, batch: Option<u32>) -> libi::tree::LaunchModel {
        libi::tree::LaunchModel::new(self.seq, self.rem).with_slots(self.slots).with_batch(batch)
    }

    /// Every figure by name, as [`Self::set`] takes them (booleans as 0/1).
    pub fn figures(&self) -> Vec<(&'static str, f64)> {
        vec![
            ("seq", self.seq),
            ("rem", self.rem),
            ("slots", f64::from(self.slots)),
            ("latency", self.latency),
            ("bandwidth", self.bandwidth),
            ("cpu_msg", self.cpu_msg),
            ("cpu_byte", self.cpu_byte),
            ("cpu_pmi", self.cpu_pmi),
            ("cpu_send", self.cpu_send),
            ("loop_launch", if self.loop_launch { 1.0 } else { 0.0 }),
            ("fork", self.fork),
            ("rank_start", self.rank_start),
            ("rank_step", self.rank_step),
            ("pmi_latency", self.pmi_latency),
            ("rank_exit", self.rank_exit),
            ("kill_delay", self.kill_delay),
            ("cores", f64::from(self.cores)),
            ("fe_start", self.fe_start),
            ("jitter", self.jitter),
            ("pmix_hop", self.pmix_hop),
            ("pmix_start", self.pmix_start),
        ]
    }

    /// A cost file (`--costs FILE`, written by `libi-sim calibrate`): `name = value` lines
    /// (the names of `--cost`), `#` comments and blank lines. Figures it does not name keep
    /// [`Costs::default`]'s values.
    pub fn parse_file(text: &str) -> Result<Costs, (usize, CostError)> {
        let mut costs = Costs::default();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let (k, v) =
                line.split_once('=').ok_or_else(|| (i + 1, CostError::Syntax(line.to_string())))?;
            costs.set(k.trim(), v.trim()).map_err(|e| (i + 1, e))?;
        }
        Ok(costs)
    }

    /// [`Self::parse_file`] of the file at `path`; the error is one line naming the file
    /// and, for a bad line, its number.
    pub fn load(path: &str) -> Result<Costs, CostFileError> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| CostFileError::Read { path: path.to_string(), error })?;
        Costs::parse_file(&text).map_err(|(line, error)| CostFileError::Line {
            path: path.to_string(),
            line,
            error,
        })
    }

    /// These costs as a cost file, after `header` (each of its lines made a comment).
    pub fn to_file(&self, header: &str) -> String {
        let mut out = String::new();
        for l in header.lines() {
            out.push_str(&format!("# {l}\n").replace("# \n", "#\n"));
        }
        for (k, v) in self.figures() {
            out.push_str(&format!("{k} = {v}\n"));
        }
        out
    }

    /// Set one figure by name (`--cost name=value`).
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), CostError> {
        // The name and the value, for an error.
        let n = || (name.to_string(), value.to_string());
        let v: f64 = value.parse().map_err(|_| {
            let (name, value) = n();
            CostError::NotANumber { name, value }
        })?;
        if !(v.is_finite() && v >= 0.0) {
            let (name, value) = n();
            return Err(CostError::OutOfRange { name, value });
        }
        match name {
            "seq" => self.seq = v,
            "rem" => self.rem = v,
            "slots" => self.slots = (v as u32).max(1),
            "latency" => self.latency = v,
            "bandwidth" if v > 0.0 => self.bandwidth = v,
            "cpu_msg" => self.cpu_msg = v,
            "cpu_byte" => self.cpu_byte = v,
            "cpu_send" => self.cpu_send = v,
            "cpu_pmi" => self.cpu_pmi = v,
            "loop_launch" if v == 0.0 || v == 1.0 => self.loop_launch = v == 1.0,
            "fork" => self.fork = v,
            "rank_start" => self.rank_start = v,
            "rank_step" => self.rank_step = v,
            "pmi_latency" => self.pmi_latency = v,
            "rank_exit" => self.rank_exit = v,
            "kill_delay" => self.kill_delay = v,
            "jitter" if v < 1.0 => self.jitter = v,
            "cores" => self.cores = v as u32,
            "fe_start" => self.fe_start = v,
            "pmix_hop" => self.pmix_hop = v,
            "pmix_start" => self.pmix_start = v,
            _ => {
                let (name, value) = n();
                return Err(CostError::Unknown { name, value });
            }
        }
        Ok(())
    }
}

/// A cost that cannot be set, or a cost file's line that does not parse (one line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CostError {
    /// The value is not a number.
    #[error("cost {name}: '{value}' is not a number")]
    NotANumber { name: String, value: String },
    /// The value is negative, or not finite.
    #[error("cost {name}: {value} must be a finite number >= 0")]
    OutOfRange { name: String, value: String },
    /// A name no cost has, or a value that cost does not take.
    #[error("unknown or invalid cost '{name}={value}'")]
    Unknown { name: String, value: String },
    /// A cost file's line that is not `name = value`.
    #[error("'{0}': expected name = value")]
    Syntax(String),
}

/// A cost file that cannot be read or does not parse: its path (one line).
#[derive(Debug, thiserror::Error)]
pub enum CostFileError {
    #[error("cost file {path}: {error}")]
    Read { path: String, error: std::io::Error },
    /// A line that does not parse: its number, and why.
    #[error("cost file {path}:{line}: {error}")]
    Line { path: String, line: usize, error: CostError },
}

/// Virtual time: nanoseconds since the job started.
pub type Time = u64;

/// Seconds to virtual time.
pub fn ns(s: f64) -> Time {
    (s * 1e9).round().max(0.0) as Time
}

/// Virtual time to seconds.
pub fn secs(t: Time) -> f64 {
    t as f64 / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_files_round_trip_and_name_the_bad_line() {
        let c = Costs { seq: 0.000123, cores: 2, loop_launch: true, ..Costs::this_vm() };
        let text = c.to_file("fitted here\n\nby a test");
        assert!(text.starts_with("# fitted here\n#\n# by a test\n"), "{text}");
        assert_eq!(Costs::parse_file(&text), Ok(c));
        // Unnamed figures keep the defaults; comments after a value are allowed.
        let d = Costs::parse_file("rem = 0.5 # half a second\n\n").expect("parses");
        assert_eq!(d, Costs { rem: 0.5, ..Costs::default() });
        let bad = |t: &str| Costs::parse_file(t).expect_err(t);
        assert_eq!(bad("seq = 1\nrem 2\n").0, 2);
        assert_eq!(bad("seq = 1\n\nwarp = 9\n").0, 3);
        assert!(bad("fork = -1").1.to_string().contains("fork"));
        assert!(bad("fork = x").1.to_string().contains("not a number"));
    }
}

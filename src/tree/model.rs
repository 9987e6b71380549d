//! The launch model: two constants per machine room, plus two optional extensions.
//!
//! # The base model (Goehner et al.)
//!
//! * `REM` — from the instant a parent starts launching a child until that child can itself
//!   launch (remote-shell connect + exec + connect back);
//! * `SEQ` — the gap a parent needs between two successive launches (the parent-side cost of
//!   one launch: fork + exec of the remote-shell client, its share of the handshake).
//!
//! With children numbered i = 1, 2, … in launch order:
//!
//! ```text
//! launch(root)    = 0
//! launch(child_i) = launch(parent) + SEQ*(i-1) + REM
//! launch(T)       = max over all nodes of launch(node)
//! ```
//!
//! # Concurrent launches (`slots = c`, default 1)
//!
//! Read the base model as: *each launch occupies the parent for `SEQ`* (that is what makes
//! launch i+1 start exactly `SEQ` after launch i), and the child then comes up on its own,
//! `REM` after its launch started. A parent with `c` slots has `c` launch lanes (e.g. cores
//! running remote-shell clients); a launch occupies one lane for `SEQ`, and the parent's
//! i-th launch (0-based here) starts at `max(start(i-1), time a lane frees)`. All lanes are
//! free at `launch(parent)`, so launches go out in groups of `c`:
//!
//! ```text
//! start(i) = launch(parent) + SEQ * floor(i / c)          (i = 0, 1, …)
//! launch(child) = start(i) + REM
//! ```
//!
//! With `c = 1` this is exactly the base formula. (The other reading — "a launch holds a slot
//! for its whole `REM`" — cannot be the paper's model: with one slot it would space launches
//! `max(SEQ, REM)` apart, not `SEQ`. Limiting how many children are connecting back at once
//! is what batching, below, models.)
//!
//! # Batching (`batch = Some(b)`, default `None`)
//!
//! Charm++-style multi-level startup: a parent launches its children in batches of `b`
//! (within a batch the lane rule above applies, starting with all lanes free), then waits
//! until every child of the batch has connected back — that is, until the *last* child of the
//! batch is up, `REM` after its launch started — and only then starts the next batch. The
//! parent's own `SEQ` gap after that last launch still applies (it matters only when
//! `REM < SEQ`), so batching never makes a launch earlier than without it:
//!
//! ```text
//! start(first of batch j+1) = start(last of batch j) + max(SEQ, REM)
//! ```
//!
//! # Shared cores (`cores = C`, `cpu = W`)
//!
//! The base model gives every launch the same `REM` whatever else is going on: right when
//! every host has CPUs of its own and the launches of different parents do not compete.
//! When the hosts share CPUs — every "host" a namespace on one machine, or hosts that are
//! VMs on one box — a remote start is mostly CPU (the remote shell's key exchange on both
//! ends, the shell, the NLA's start), and `k` of them at once take turns on `C` cores.
//! This extension makes that explicit:
//!
//! * `REM = W + (REM − W)`: `W` seconds of CPU work on the shared cores (remote-shell client
//!   and server, exec and start of the NLA), then a fixed delay `REM − W` that uses no CPU
//!   (round trips, timers);
//! * a parent's `SEQ` per launch is CPU work on the shared cores too (its launch lane);
//! * the CPU work in progress is processor-shared, as the kernel's fair scheduler does:
//!   with `k` jobs running, each advances at `min(1, C / k)` of a core.
//!
//! Alone on the machine a launch still takes `REM` and launches go out `SEQ` apart, so with
//! one launch in flight this is the base model; with many, every one of them slows down, so
//! the shape that keeps the cores busy from the start wins, and no shape can beat the total
//! CPU work divided by `C`. `cores = 0` (the default) is the base model: nothing shared.
//! [`evaluate`] then runs an event-driven processor-sharing evaluation (O(n log n)).
//! Slots and batches keep their meaning (a new group of `c` starts once every lane of the
//! previous one is done; a new batch once the lanes are done and the batch is connected).
//!
//! # Held setups (`hold`)
//!
//! The paper's model lets a child launch the moment it is up. The NLA driver does not: it
//! launches its children, forks its ranks and only then runs the loop that reads the
//! children's hellos and sends them their setups. So a child that connects while its
//! parent is still launching starts its own launches only when the parent's last launch
//! is out (with batches: the batch's). `hold = true` models that; it matters when a
//! parent's launches take longer than `REM` (wide trees, or `SEQ` stretched by load).
//!
//! # The parent's loop (`accept = A`)
//!
//! A parent's hellos are read, authenticated and answered with the setup by its one event
//! loop, one after the other. `accept = A` gives each that much CPU work (shared like any
//! other when cores are shared): a child counts as connected when its parent's loop is done
//! with its hello, so children that connect at once queue up, and a wide fan-out costs its
//! parent `A` per child on top of `SEQ`.
//!
//! # Exact arithmetic path
//!
//! Launch times are computed incrementally, the same way by [`evaluate`] and by the greedy
//! builder: `launch(child_0) = launch(parent) + REM` and
//! `launch(child_{i+1}) = launch(child_i) + delta(i)` where `delta(i)` is one of `0`, `SEQ` or
//! `max(SEQ, REM)` (see [`LaunchModel::sibling_gap`]). Every tree position therefore has one
//! well-defined floating-point cost, and greedy's total is never above any other tree's, not
//! even by one ulp.

use std::fmt;
use std::str::FromStr;

use super::Tree;

/// The launch model of one machine room. See the [module docs](self) for the exact rules.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LaunchModel {
    /// Seconds between two successive launches by the same parent (per lane).
    pub seq: f64,
    /// Seconds from the start of a child's launch until that child can launch its own.
    pub rem: f64,
    /// Concurrent launch lanes per parent (`c`); 1 is the paper's model. 0 is treated as 1.
    pub slots: u32,
    /// Launch children in batches of `b`, waiting for each batch to connect back.
    /// `None` (or `Some(0)`) means no batching.
    pub batch: Option<u32>,
    /// Cores shared by every launch (`C`, see the module docs); 0: every host has CPUs of
    /// its own (the base model).
    pub cores: f64,
    /// Of `REM`, the seconds of CPU work a remote start does on the shared cores (`W`, at
    /// most `REM`); used only when `cores > 0`.
    pub cpu: f64,
    /// A child that connected while its parent was still launching gets its setup (and so
    /// starts its own launches) only once the parent's launches are out — what the driver
    /// does: an NLA launches its children, forks its ranks, and only then runs the loop that
    /// answers hellos. `false`: the paper's model (a child launches as soon as it is up).
    pub hold: bool,
    /// Seconds of CPU the parent spends on each child's hello (authenticate it, answer with
    /// the setup) in its one loop, one hello after the other; 0: free (the paper's model).
    /// Part of `REM` for a parent's first child, on top of it for later ones that queue.
    pub accept: f64,
}

/// What a sibling-to-sibling step costs, as a kind (the greedy builder keeps one FIFO queue
/// per kind, since every key in such a queue is "time of a placed node + the same constant").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gap {
    /// The next launch goes out in the same group of `c` (same start time).
    Zero,
    /// The next launch waits for a lane: `SEQ`.
    Seq,
    /// The next launch starts a new batch: `max(SEQ, REM)`.
    Batch,
}

impl LaunchModel {
    /// Defaults for `ssh` on a LAN.
    ///
    /// * `SEQ = 0.007 s`: the parent-side cost of one launch — fork + exec of the `ssh` client
    ///   and getting its connection under way — is a few milliseconds; 7 ms is the value
    ///   measured for the issue's example pair.
    /// * `REM = 0.30 s`: `ssh` connect + key exchange + authentication + exec of the NLA +
    ///   its connect-back costs about 0.15–0.45 s on a LAN; it measured 0.25–0.44 s into
    ///   local namespaces on this project's machines. 0.30 s sits in the middle of both
    ///   ranges (the issue's 0.172 s is a fast, warmed-up LAN). The greedy tree is not very
    ///   sensitive to the exact figure: what shapes it is the ratio `REM/SEQ` (≈ 43 here).
    /// * One launch lane, no batching: the paper's model.
    pub const DEFAULT: LaunchModel = LaunchModel::new(0.007, 0.30);

    /// The paper's model with the given constants (one lane, no batching).
    pub const fn new(seq: f64, rem: f64) -> Self {
        LaunchModel {
            seq,
            rem,
            slots: 1,
            batch: None,
            cores: 0.0,
            cpu: 0.0,
            hold: false,
            accept: 0.0,
        }
    }

    /// The same model with setups held until the parent's launches are out (`hold`).
    pub fn with_hold(mut self, hold: bool) -> Self {
        self.hold = hold;
        self
    }

    /// The same model with `accept` seconds of the parent's loop per child's hello.
    pub fn with_accept(mut self, accept: f64) -> Self {
        self.accept = accept;
        self
    }

    /// True when the model needs the event-driven evaluation (shared cores, `hold` or
    /// `accept`).
    pub fn is_event_driven(&self) -> bool {
        self.is_shared() || self.hold || self.accept > 0.0
    }

    /// The same model on `cores` shared cores, each remote start doing `cpu` seconds of CPU
    /// work on them (see the module docs; `cores = 0` turns sharing off).
    pub fn with_shared(mut self, cores: f64, cpu: f64) -> Self {
        self.cores = cores;
        self.cpu = cpu;
        self
    }

    /// True when launches share cores (`cores > 0`).
    pub fn is_shared(&self) -> bool {
        self.cores > 0.0
    }

    /// The same model with `c` concurrent launch lanes per parent.
    pub fn with_slots(mut self, slots: u32) -> Self {
        self.slots = slots;
        self
    }

    /// The same model with batches of `b` children (`None` for no batching).
    pub fn with_batch(mut self, batch: Option<u32>) -> Self {
        self.batch = batch;
        self
    }

    /// Checks that both times are finite and non-negative, `slots >= 1` and `batch != Some(0)`.
    /// The builders and the evaluator do not require this (they clamp `slots`/`batch`), but a
    /// negative or NaN time makes the model meaningless.
    pub fn validate(&self) -> Result<(), ModelError> {
        check_time("SEQ", self.seq)?;
        check_time("REM", self.rem)?;
        if self.slots == 0 {
            return Err(ModelError::NoSlots);
        }
        if self.batch == Some(0) {
            return Err(ModelError::EmptyBatch);
        }
        check_time("cores", self.cores)?;
        check_time("cpu", self.cpu)?;
        check_time("accept", self.accept)?;
        if self.cpu > self.rem {
            return Err(ModelError::CpuAboveRem { cpu: self.cpu, rem: self.rem });
        }
        Ok(())
    }

    /// Effective lane count (`slots`, with 0 read as 1).
    pub(crate) fn lanes(&self) -> u64 {
        u64::from(self.slots.max(1))
    }

    /// Effective batch size (`None` / `Some(0)` read as unbounded).
    pub(crate) fn batch_len(&self) -> Option<u64> {
        match self.batch {
            Some(b) if b > 0 => Some(u64::from(b)),
            _ => None,
        }
    }

    /// The gap between a parent's launch number `i` (0-based) and launch number `i + 1`.
    #[inline]
    pub(crate) fn gap_kind(&self, i: u64) -> Gap {
        if self.is_plain() {
            return Gap::Seq;
        }
        // Position of launch i + 1 within its batch, then within its group of `c` lanes.
        // (`rem_euclid` is `%` on u64; it avoids clippy's `is_multiple_of`, Rust >= 1.87.)
        let next = i + 1;
        let within = match self.batch_len() {
            Some(b) => match next.rem_euclid(b) {
                0 => return Gap::Batch,
                w => w,
            },
            None => next,
        };
        match within.rem_euclid(self.lanes()) {
            0 => Gap::Seq,
            _ => Gap::Zero,
        }
    }

    /// True for the paper's model (one lane, no batching): every sibling gap is `SEQ`.
    #[inline]
    pub(crate) fn is_plain(&self) -> bool {
        self.slots <= 1 && self.batch_len().is_none()
    }

    /// The value of a [`Gap`].
    pub(crate) fn gap_value(&self, gap: Gap) -> f64 {
        match gap {
            Gap::Zero => 0.0,
            Gap::Seq => self.seq,
            Gap::Batch => self.seq.max(self.rem),
        }
    }

    /// Seconds between the launch times of a parent's children number `i` and `i + 1`
    /// (0-based, in launch order).
    pub fn sibling_gap(&self, i: u64) -> f64 {
        self.gap_value(self.gap_kind(i))
    }
}

impl Default for LaunchModel {
    fn default() -> Self {
        LaunchModel::DEFAULT
    }
}

/// A launch model that does not parse or is not meaningful (one line).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// A time (`SEQ`, `REM`, `cores`, `cpu`, `accept`) that is NaN or infinite.
    #[error("{what} must be a finite number of seconds, got {value}")]
    NotFinite { what: &'static str, value: f64 },
    /// A negative time.
    #[error("{what} must not be negative, got {value}")]
    Negative { what: &'static str, value: f64 },
    /// A time that is not a number: the text.
    #[error("{what} must be a number of seconds, got '{text}'")]
    NotANumber { what: &'static str, text: String },
    #[error("slots must be at least 1")]
    NoSlots,
    #[error("batch size must be at least 1")]
    EmptyBatch,
    /// `cpu`, the CPU part of `REM`, above `REM`.
    #[error("cpu ({cpu}) must not exceed REM ({rem})")]
    CpuAboveRem { cpu: f64, rem: f64 },
    /// Not `SEQ,REM`: the text.
    #[error(
        "launch model must be SEQ,REM in seconds (e.g. 0.007,0.172), got '{}'",
        .0.escape_debug()
    )]
    Syntax(String),
    /// Something after `SEQ,REM` that is none of the extensions: the text.
    #[error(
        "launch model: expected cores=C, cpu=W, accept=A or hold=0|1 after SEQ,REM, got '{}'",
        .0.escape_debug()
    )]
    Extension(String),
    /// A parsed model that is not meaningful (`cpu` above `REM`).
    #[error("launch model: {0}")]
    Parsed(Box<ModelError>),
}

fn check_time(what: &'static str, value: f64) -> Result<(), ModelError> {
    if !value.is_finite() {
        return Err(ModelError::NotFinite { what, value });
    }
    if value < 0.0 {
        return Err(ModelError::Negative { what, value });
    }
    Ok(())
}

/// Parses a time in seconds for `what`.
pub(crate) fn parse_time(what: &'static str, s: &str) -> Result<f64, ModelError> {
    let text = s.trim();
    let value: f64 =
        text.parse().map_err(|_| ModelError::NotANumber { what, text: text.to_string() })?;
    check_time(what, value)?;
    Ok(value)
}

impl FromStr for LaunchModel {
    type Err = ModelError;

    /// Parses `"SEQ,REM"` in seconds, e.g. `"0.007,0.172"` (one lane, no batching),
    /// optionally followed by `,cores=C,cpu=W` (shared cores) and `,hold=1` (see the
    /// module docs).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut parts = s.split(',');
        let (Some(seq), Some(rem)) = (parts.next(), parts.next()) else {
            return Err(ModelError::Syntax(s.to_string()));
        };
        let mut m = LaunchModel::new(parse_time("SEQ", seq)?, parse_time("REM", rem)?);
        for extra in parts {
            match extra.trim().split_once('=') {
                Some(("cores", v)) => m.cores = parse_time("cores", v)?,
                Some(("cpu", v)) => m.cpu = parse_time("cpu", v)?,
                Some(("accept", v)) => m.accept = parse_time("accept", v)?,
                Some(("hold", "1")) => m.hold = true,
                Some(("hold", "0")) => m.hold = false,
                _ => return Err(ModelError::Extension(extra.to_string())),
            }
        }
        if m.cpu > m.rem {
            let cpu_above_rem = ModelError::CpuAboveRem { cpu: m.cpu, rem: m.rem };
            return Err(ModelError::Parsed(Box::new(cpu_above_rem)));
        }
        Ok(m)
    }
}

impl fmt::Display for LaunchModel {
    /// `SEQ,REM` (with `,cores=C,cpu=W` when cores are shared, `,hold=1`; parsable by
    /// `FromStr`), then
    /// `slots=c` / `batch=b` when not the defaults.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{},{}", self.seq, self.rem)?;
        if self.is_shared() {
            write!(f, ",cores={},cpu={}", self.cores, self.cpu)?;
        }
        if self.accept > 0.0 {
            write!(f, ",accept={}", self.accept)?;
        }
        if self.hold {
            write!(f, ",hold=1")?;
        }
        if self.slots != 1 {
            write!(f, " slots={}", self.slots)?;
        }
        if let Some(b) = self.batch {
            write!(f, " batch={b}")?;
        }
        Ok(())
    }
}

/// The modeled launch time of every node of a tree.
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluation {
    /// `times[v]`: seconds from the start until node `v` can launch (the root's is 0).
    pub times: Vec<f64>,
    /// The launch time of the whole tree: the largest of `times` (0 for an empty tree).
    pub total: f64,
}

/// Evaluates the launch model on any tree: per-node launch times and their maximum.
pub fn evaluate(tree: &Tree, model: &LaunchModel) -> Evaluation {
    if model.is_event_driven() {
        return super::shared::evaluate(tree, model);
    }
    let n = tree.len();
    let mut times = vec![0.0f64; n];
    let mut total = 0.0f64;
    let plain = model.is_plain();
    let mut visit = |p: usize| {
        let kids = tree.children(p);
        let Some((&last, rest)) = kids.split_last() else {
            return;
        };
        let mut t = times[p] + model.rem;
        if plain {
            for &c in rest {
                times[c] = t;
                t += model.seq;
            }
        } else {
            for (i, &c) in rest.iter().enumerate() {
                times[c] = t;
                t += model.sibling_gap(i as u64);
            }
        }
        times[last] = t;
        // A parent's children have nondecreasing times: the last one is the largest.
        if t > total {
            total = t;
        }
    };
    match tree.topo_order() {
        Some(order) => order.iter().for_each(|&p| visit(p as usize)),
        None => (0..n).for_each(&mut visit),
    }
    Evaluation { times, total }
}

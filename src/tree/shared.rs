//! The launch model evaluated event by event: on shared cores (every launch's CPU work
//! shares `cores` CPUs by processor sharing), with setups held until the parent's launches
//! are out (`hold`), and/or with hellos handled one at a time by the parent (`accept`); see
//! the [model docs](super::model).
//!
//! An event-driven evaluation in O(n log n): the CPU jobs in progress all run at the same
//! rate, `min(1, cores / jobs)`, so the service every job has received since it started is
//! the same for all of them. The evaluator keeps that service as one virtual clock `v`
//! (advanced by `rate × elapsed`); a job of work `w` started when the clock read `v0` ends
//! when it reads `v0 + w`, so one min-heap of end tags holds every job, and only its head
//! matters. Fixed delays (the non-CPU part of `REM`) sit in a second heap of wall times.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::model::{Evaluation, LaunchModel};
use super::Tree;

/// What happens when a job or a delay ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Then {
    /// Parent `p`'s launch lane finished the parent-side work of its `i`-th launch (0-based).
    LaneDone { p: u32, i: u32 },
    /// Child `c`'s remote start finished its CPU work; its delay follows.
    StartCpuDone { c: u32 },
    /// Child `c`'s hello reached its parent, whose loop handles hellos one at a time.
    Hello { c: u32 },
    /// Child `c` connected back: it can launch its own children.
    Up { c: u32 },
}

/// An f64 >= 0 as a totally ordered key (the bits of non-negative floats order as they do).
fn key(t: f64) -> u64 {
    t.max(0.0).to_bits()
}

/// Per-parent launch state.
#[derive(Clone, Copy, Default)]
struct Parent {
    /// Next child to launch (index into its children).
    next: u32,
    /// Launch lanes busy with parent-side work.
    busy: u32,
    /// Children of the current batch not connected yet.
    pending: u32,
    /// Launches of the current batch started so far.
    in_batch: u32,
    /// The loop is handling a hello (`accept > 0`).
    in_hello: bool,
}

struct Sim<'a> {
    tree: &'a Tree,
    /// Children that connected while their parent was still launching (`hold`).
    waiting: Vec<Vec<u32>>,
    /// Hellos waiting for their parent's loop (`accept > 0`).
    hellos: Vec<std::collections::VecDeque<u32>>,
    m: &'a LaunchModel,
    lanes: u32,
    batch: Option<u32>,
    delay: f64,
    cores: f64,
    now: f64,
    /// Service per job since the start (see the module docs).
    v: f64,
    /// CPU jobs: (end tag, sequence, what then).
    jobs: BinaryHeap<Reverse<(u64, u64, Then)>>,
    /// Delays: (wall end, sequence, what then).
    timers: BinaryHeap<Reverse<(u64, u64, Then)>>,
    seq_no: u64,
    parents: Vec<Parent>,
    times: Vec<f64>,
}

impl Sim<'_> {
    fn rate(&self) -> f64 {
        (self.cores / self.jobs.len().max(1) as f64).min(1.0)
    }

    fn job(&mut self, work: f64, then: Then) {
        self.seq_no += 1;
        self.jobs.push(Reverse((key(self.v + work.max(0.0)), self.seq_no, then)));
    }

    fn timer(&mut self, after: f64, then: Then) {
        self.seq_no += 1;
        self.timers.push(Reverse((key(self.now + after.max(0.0)), self.seq_no, then)));
    }

    /// Is `p` done launching for now (every launch of it, or of its batch, out)? Its loop
    /// then handles its children's hellos.
    fn idle(&self, p: usize) -> bool {
        let st = self.parents[p];
        st.busy == 0
            && (st.next as usize >= self.tree.children(p).len()
                || self.batch.is_some_and(|b| st.in_batch >= b))
    }

    /// Node `p` can launch: start as many launches as its lanes (and batch) allow; once it
    /// is idle, the children that connected meanwhile get their setups.
    fn pump(&mut self, p: usize) {
        self.launch(p);
        if self.m.hold && self.idle(p) && !self.waiting[p].is_empty() {
            for c in std::mem::take(&mut self.waiting[p]) {
                self.pump(c as usize);
            }
        }
    }

    fn launch(&mut self, p: usize) {
        let kids = self.tree.children(p);
        loop {
            let st = self.parents[p];
            if st.next as usize >= kids.len() || st.busy >= self.lanes {
                return;
            }
            if let Some(b) = self.batch {
                if st.in_batch >= b {
                    // The next batch waits for the lanes and for every child of this one.
                    if st.busy > 0 || st.pending > 0 {
                        return;
                    }
                    self.parents[p].in_batch = 0;
                }
            }
            let i = st.next;
            let c = kids[i as usize] as u32;
            let st = &mut self.parents[p];
            st.next += 1;
            st.busy += 1;
            st.pending += 1;
            st.in_batch += 1;
            // The parent-side work on a lane, and the child's start, both from now.
            self.job(self.m.seq, Then::LaneDone { p: p as u32, i });
            self.job(self.m.cpu.min(self.m.rem), Then::StartCpuDone { c });
            // With c lanes, launches go out in groups of c: the next waits for a free lane
            // unless the group is not full yet.
        }
    }

    fn handle(&mut self, then: Then) {
        match then {
            Then::LaneDone { p, .. } => {
                let p = p as usize;
                self.parents[p].busy -= 1;
                // Groups of c: the lanes free together (same work, same start), and the next
                // group starts once every lane of this one is free.
                if self.parents[p].busy == 0 {
                    self.pump(p);
                }
            }
            Then::StartCpuDone { c } => {
                let then = if self.m.accept > 0.0 { Then::Hello { c } } else { Then::Up { c } };
                self.timer(self.delay, then)
            }
            Then::Hello { c } => {
                let Some(p) = self.tree.parent(c as usize) else { return };
                self.hellos[p].push_back(c);
                self.next_hello(p);
            }
            Then::Up { c } => {
                let c = c as usize;
                self.times[c] = self.now;
                if self.m.accept > 0.0 {
                    if let Some(p) = self.tree.parent(c) {
                        self.parents[p].in_hello = false;
                        self.next_hello(p);
                    }
                }
                if let Some(p) = self.tree.parent(c) {
                    self.parents[p].pending -= 1;
                    // Its hello waits until the parent's launches are out (decided before
                    // the parent goes on: the driver sends the setup, then the next batch).
                    let held = self.m.hold && !self.idle(p);
                    if held {
                        self.waiting[p].push(c as u32);
                    }
                    if self.parents[p].busy == 0 {
                        self.pump(p);
                    }
                    if held {
                        return;
                    }
                }
                self.pump(c);
            }
        }
    }

    /// `p`'s loop takes the next hello, if it is free: `accept` of CPU, then the child is up.
    fn next_hello(&mut self, p: usize) {
        if self.parents[p].in_hello {
            return;
        }
        if let Some(c) = self.hellos[p].pop_front() {
            self.parents[p].in_hello = true;
            self.job(self.m.accept, Then::Up { c });
        }
    }

    fn run(&mut self) {
        self.pump(0);
        loop {
            let rate = self.rate();
            let job_at = self.jobs.peek().map(|Reverse((tag, _, _))| {
                self.now + (f64::from_bits(*tag) - self.v).max(0.0) / rate
            });
            let timer_at = self.timers.peek().map(|Reverse((t, _, _))| f64::from_bits(*t));
            let (at, from_jobs) = match (job_at, timer_at) {
                (None, None) => return,
                (Some(j), None) => (j, true),
                (None, Some(t)) => (t, false),
                // On a tie the delay ends first (it changes no rate).
                (Some(j), Some(t)) => {
                    if t <= j {
                        (t, false)
                    } else {
                        (j, true)
                    }
                }
            };
            let at = at.max(self.now);
            if !self.jobs.is_empty() {
                self.v += (at - self.now) * rate;
            }
            self.now = at;
            let then = if from_jobs {
                let Some(Reverse((tag, _, then))) = self.jobs.pop() else { return };
                // Exactly at its end (rounding of `v` must not leave it a hair short).
                self.v = self.v.max(f64::from_bits(tag));
                then
            } else {
                let Some(Reverse((_, _, then))) = self.timers.pop() else { return };
                then
            };
            self.handle(then);
        }
    }
}

/// Evaluates `model` on `tree` event by event: the modeled time at which every node
/// connected (the root's is 0), and the largest. Without shared cores every job runs at
/// full speed.
pub(crate) fn evaluate(tree: &Tree, model: &LaunchModel) -> Evaluation {
    let n = tree.len();
    let mut sim = Sim {
        tree,
        waiting: if model.hold { vec![Vec::new(); n] } else { Vec::new() },
        hellos: if model.accept > 0.0 {
            vec![std::collections::VecDeque::new(); n]
        } else {
            Vec::new()
        },
        m: model,
        lanes: model.slots.max(1),
        batch: model.batch.filter(|&b| b > 0),
        delay: (model.rem - model.cpu).max(0.0),
        cores: if model.is_shared() { model.cores } else { f64::INFINITY },
        now: 0.0,
        v: 0.0,
        jobs: BinaryHeap::new(),
        timers: BinaryHeap::new(),
        seq_no: 0,
        parents: vec![Parent::default(); n],
        times: vec![0.0; n],
    };
    if n > 1 {
        sim.run();
    }
    let total = sim.times.iter().copied().fold(0.0, f64::max);
    Evaluation { times: sim.times, total }
}

//! The deadlines of a node's rank streams: each local rank's PMI socket (a reply it does not
//! read) and its stdout and stderr (a line without its newline, the drain after its exit).
//!
//! The rank reactor ([`crate::io::rankio`]) owns the descriptors and tells this table what
//! happened to them, with the time of the driver's turn: a reply queued or written, bytes
//! read (and whether a line is left held), a stream out of budget or resumed, the process's
//! exit, a stream's end. The table says when it next wants to be woken
//! ([`RankStreams::poll_timeout`]) and, at [`RankStreams::handle_timeout`], what each
//! deadline that passed means ([`Due`]); the two facts it cannot know (bytes waiting in a
//! pipe, a rank at work) it asks of the driver then ([`Probe`]).
//!
//! The policy:
//! * **Stall**: a reply that does not fit the socket is queued; if the rank reads none of
//!   it for [`STALL_LIMIT`] (counted from the last byte written), it is stalled.
//! * **Partial line**: a line begun and not ended goes up as it is once the rank has written
//!   nothing more for [`PARTIAL_FLUSH`] and none of its processes is at work; one at work
//!   keeps it waiting, [`PARTIAL_MAX_WAIT`] at most from when the line began.
//! * **Drain**: after the rank's exit, a stream still open (held by a child of the rank) is
//!   given up once silent for [`OUTPUT_DRAIN`]. A stream out of budget has no deadline: the
//!   rank is not silent, we are not reading it.

use super::node::limits::{OUTPUT_DRAIN, PARTIAL_FLUSH, PARTIAL_MAX_WAIT, STALL_LIMIT};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// After a turn that found nothing but rank output, [`GATHER_FROM`] to [`GATHER_BELOW`]
/// bytes of it (ranks writing steadily, in blocks of a few KiB, read as fast as they write
/// them: the agent woken, and the ranks waking it, for each block), the ranks' descriptors
/// are not looked at again for this long ([`gather`]): the blocks written meanwhile are
/// read together, without a wake-up each. The agent's loop serves everything else
/// meanwhile; a turn that served anything else (a PMI request, a rank's end), or read less
/// (a line now and then) or more, is not followed by a hold.
///
/// Measured (release, `-n 4 sh -c 'seq 1 10000000' | wc -l`, 15 alternating runs), when
/// this was a sleep of the whole agent: the process manager's CPU 373 -> 313 ms (Hydra
/// 327); 25 us: 312, 150 us: 320 but the wall time longer (pipes full, ranks waiting).
pub const GATHER: std::time::Duration = std::time::Duration::from_micros(50);
/// See [`GATHER`].
pub const GATHER_FROM: usize = 4 << 10;
/// See [`GATHER`].
pub const GATHER_BELOW: usize = 32 << 10;

/// Whether a turn of the rank reactor that read `out_read` bytes of rank output, and
/// served something else too (`other`: a PMI request, an end, a source left to read
/// again), is followed by a [`GATHER`] hold.
pub fn gather(out_read: usize, other: bool) -> bool {
    !other && (GATHER_FROM..GATHER_BELOW).contains(&out_read)
}

/// What a deadline that passed asks of the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// Rank `local` read none of its queued replies for [`STALL_LIMIT`]: nothing more is
    /// written to it or read from it, and the core is told.
    Stalled(usize),
    /// Stream `s` (0 stdout, 1 stderr) of rank `local` is not silent: read it again (its
    /// line keeps waiting).
    ReadAgain(usize, usize),
    /// The line held of stream `s` goes up as it is.
    FlushLine(usize, usize),
    /// Stream `s`, silent since the rank's exit for [`OUTPUT_DRAIN`], is given up: what is
    /// held goes up and the pipe is closed.
    GiveUp(usize, usize),
}

/// The facts [`RankStreams::handle_timeout`] asks of the driver, when it needs them.
pub trait Probe {
    /// Whether stream `s` of rank `local` has bytes not read yet (in its pipe, or known
    /// readable).
    fn unread(&mut self, local: usize, s: usize) -> bool;
    /// Whether rank `local`, or a process below it, is at work (running, or waiting for a
    /// CPU).
    fn busy(&mut self, local: usize) -> bool;
}

#[derive(Default)]
struct Timed {
    /// When the deadline is.
    due: Option<f64>,
    /// The time of the timer entry that is live for this source (an earlier entry may
    /// have superseded later ones, which are then skipped).
    timer_at: Option<f64>,
}

#[derive(Default)]
struct Out {
    open: bool,
    t: Timed,
    /// When the line held began waiting for its newline.
    partial_since: Option<f64>,
    /// Out of budget: not read, and no deadline.
    blocked: bool,
}

#[derive(Default)]
struct Rank {
    exited: bool,
    pmi: Timed,
    out: [Out; 2],
}

/// The deadlines of the local ranks' streams (see the module's documentation).
#[derive(Default)]
pub struct RankStreams {
    ranks: Vec<Option<Rank>>,
    /// (time in microseconds, source key): a min-heap of timer entries.
    timers: BinaryHeap<Reverse<(u64, u64)>>,
}

fn micros(t: f64) -> u64 {
    (t.max(0.0) * 1e6).round() as u64
}

/// Source key: the local rank, and 0 for its PMI socket, 1 + s for its stream s.
fn key(local: usize, src: usize) -> u64 {
    ((local as u64) << 2) | src as u64
}

fn secs(d: std::time::Duration) -> f64 {
    d.as_secs_f64()
}

impl Timed {
    /// Set the deadline to `due`, with a timer entry unless one at or before it is live.
    fn set(&mut self, due: f64, k: u64, timers: &mut BinaryHeap<Reverse<(u64, u64)>>) {
        self.due = Some(due);
        if self.timer_at.is_none_or(|t| due < t) {
            self.timer_at = Some(due);
            timers.push(Reverse((micros(due), k)));
        }
    }

    /// Whether the entry of time `t` is this source's live one (then it is taken).
    fn fired(&mut self, t: u64) -> bool {
        let live = self.timer_at.is_some_and(|a| micros(a) == t);
        if live {
            self.timer_at = None;
        }
        live
    }
}

impl RankStreams {
    /// A table for `n` local ranks, none started yet.
    pub fn new(n: usize) -> RankStreams {
        RankStreams { ranks: (0..n).map(|_| None).collect(), timers: BinaryHeap::new() }
    }

    fn rank(&mut self, local: usize) -> Option<&mut Rank> {
        self.ranks.get_mut(local).and_then(Option::as_mut)
    }

    /// Rank `local` started: its PMI socket and both streams are open.
    pub fn started(&mut self, local: usize) {
        if let Some(slot) = self.ranks.get_mut(local) {
            let mut r = Rank::default();
            r.out[0].open = true;
            r.out[1].open = true;
            *slot = Some(r);
        }
    }

    /// Rank `local` is done with (its end went to the driver): nothing of it is timed.
    pub fn removed(&mut self, local: usize) {
        if let Some(slot) = self.ranks.get_mut(local) {
            *slot = None;
        }
    }

    /// A reply for rank `local` did not fit and is queued: the stall limit runs, unless it
    /// already does.
    pub fn reply_queued(&mut self, local: usize, now: f64) {
        let Some(r) = self.ranks.get_mut(local).and_then(Option::as_mut) else { return };
        if r.pmi.due.is_none() {
            r.pmi.set(now + secs(STALL_LIMIT), key(local, 0), &mut self.timers);
        }
    }

    /// Bytes of rank `local`'s queued replies were written, some left: the limit runs
    /// again from now.
    pub fn reply_progress(&mut self, local: usize, now: f64) {
        if let Some(r) = self.rank(local) {
            // Later than the live entry: found at that entry's time, and set again then.
            r.pmi.due = Some(now + secs(STALL_LIMIT));
        }
    }

    /// Everything queued for rank `local` is written (or goes nowhere: the rank is gone):
    /// no stall limit.
    pub fn replies_done(&mut self, local: usize) {
        if let Some(r) = self.rank(local) {
            r.pmi.due = None;
        }
    }

    /// Stream `s` of rank `local` is out of budget: not read until bytes come back, and no
    /// deadline meanwhile (the held line waits for its rest; a drain does not count the
    /// wait). The read after sets one.
    pub fn out_blocked(&mut self, local: usize, s: usize) {
        if let Some(o) = self.rank(local).map(|r| &mut r.out[s]) {
            o.blocked = true;
            o.t.due = None;
        }
    }

    /// Bytes were read from stream `s` of rank `local`: `pending` bytes of a line are held
    /// after it, and `sent` says whether whole lines went up with this read.
    pub fn out_read(&mut self, local: usize, s: usize, now: f64, pending: usize, sent: bool) {
        let Some(r) = self.ranks.get_mut(local).and_then(Option::as_mut) else { return };
        let exited = r.exited;
        let o = &mut r.out[s];
        o.blocked = false;
        let k = key(local, 1 + s);
        if exited {
            // Drained: given up once silent for OUTPUT_DRAIN.
            o.t.set(now + secs(OUTPUT_DRAIN), k, &mut self.timers);
        } else if pending == 0 {
            o.t.due = None;
            o.partial_since = None;
        } else {
            let since = match o.partial_since {
                Some(t) if !sent => t,
                _ => now,
            };
            o.partial_since = Some(since);
            let due = (now + secs(PARTIAL_FLUSH)).min(since + secs(PARTIAL_MAX_WAIT));
            o.t.set(due, k, &mut self.timers);
        }
    }

    /// Bytes came back to rank `local`'s streams: those out of budget may be read again (no
    /// longer blocked: the read that finds the budget still short says so again), and after
    /// the rank's exit their drain starts now. Returns them, to be read.
    pub fn out_resumed(&mut self, local: usize, now: f64) -> Vec<usize> {
        let Some(r) = self.ranks.get_mut(local).and_then(Option::as_mut) else {
            return Vec::new();
        };
        let mut read = Vec::new();
        for (s, o) in r.out.iter_mut().enumerate().filter(|(_, o)| o.open && o.blocked) {
            o.blocked = false;
            if r.exited {
                o.t.set(now + secs(OUTPUT_DRAIN), key(local, 1 + s), &mut self.timers);
            }
            read.push(s);
        }
        read
    }

    /// Stream `s` of rank `local` ended (EOF, an error, given up).
    pub fn out_closed(&mut self, local: usize, s: usize) {
        if let Some(o) = self.rank(local).map(|r| &mut r.out[s]) {
            *o = Out::default();
        }
    }

    /// Rank `local`'s process ended: no stall limit (replies go nowhere now), and each
    /// stream still open drains for [`OUTPUT_DRAIN`] (one out of budget from when it may be
    /// read again). Returns the streams to read now (whatever is left in them).
    pub fn exited(&mut self, local: usize, now: f64) -> Vec<usize> {
        let Some(r) = self.ranks.get_mut(local).and_then(Option::as_mut) else {
            return Vec::new();
        };
        r.exited = true;
        r.pmi.due = None;
        let mut read = Vec::new();
        for (s, o) in r.out.iter_mut().enumerate().filter(|(_, o)| o.open) {
            o.partial_since = None;
            if o.blocked {
                o.t.due = None;
            } else {
                o.t.set(now + secs(OUTPUT_DRAIN), key(local, 1 + s), &mut self.timers);
                read.push(s);
            }
        }
        read
    }

    /// The earliest deadline (seconds of the driver's clock), if any.
    pub fn poll_timeout(&self) -> Option<f64> {
        self.timers.peek().map(|Reverse((t, _))| *t as f64 / 1e6)
    }

    /// Serve the deadlines passed by `now`: what each means, in the order they came due.
    pub fn handle_timeout(&mut self, now: f64, probe: &mut impl Probe) -> Vec<Due> {
        let mut out = Vec::new();
        while let Some(&Reverse((t, k))) = self.timers.peek() {
            if t > micros(now) {
                break;
            }
            self.timers.pop();
            let local = (k >> 2) as usize;
            let Some(r) = self.ranks.get_mut(local).and_then(Option::as_mut) else { continue };
            let src = (k & 3) as usize;
            if src == 0 {
                if !r.pmi.fired(t) {
                    continue;
                }
                match r.pmi.due {
                    Some(d) if micros(d) <= micros(now) => {
                        r.pmi.due = None;
                        out.push(Due::Stalled(local));
                    }
                    Some(d) => r.pmi.set(d, k, &mut self.timers),
                    None => {}
                }
                continue;
            }
            let s = src - 1;
            let exited = r.exited;
            let o = &mut r.out[s];
            if !o.t.fired(t) {
                continue;
            }
            match o.t.due {
                Some(d) if micros(d) <= micros(now) => {
                    o.t.due = None;
                    if exited {
                        // Silent since the exit: held open by a child of the rank.
                        *o = Out::default();
                        out.push(Due::GiveUp(local, s));
                    } else if probe.unread(local, s) {
                        // Not silent: more waits in the pipe (its event perhaps not taken
                        // yet). The line is not cut; the read sets its deadline again.
                        o.t.set(now + secs(PARTIAL_FLUSH), k, &mut self.timers);
                        out.push(Due::ReadAgain(local, s));
                    } else if let Some(max) = o
                        .partial_since
                        .map(|t| t + secs(PARTIAL_MAX_WAIT))
                        .filter(|&max| now < max && probe.busy(local))
                    {
                        // At work (or waiting for a CPU): the rest may be on its way.
                        o.t.set((now + secs(PARTIAL_FLUSH)).min(max), k, &mut self.timers);
                    } else {
                        o.partial_since = None;
                        out.push(Due::FlushLine(local, s));
                    }
                }
                Some(d) => o.t.set(d, k, &mut self.timers),
                None => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Literal answers to the driver's facts.
    #[derive(Default)]
    struct Facts {
        unread: bool,
        busy: bool,
        asked_busy: u32,
    }

    impl Probe for Facts {
        fn unread(&mut self, _: usize, _: usize) -> bool {
            self.unread
        }
        fn busy(&mut self, _: usize) -> bool {
            self.asked_busy += 1;
            self.busy
        }
    }

    fn one() -> RankStreams {
        let mut t = RankStreams::new(2);
        t.started(0);
        t
    }

    fn approx(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-6)
    }

    #[test]
    fn only_a_turn_of_a_little_output_and_nothing_else_is_held() {
        assert!(!gather(100, false), "a line now and then");
        assert!(gather(GATHER_FROM, false));
        assert!(gather(GATHER_BELOW - 1, false));
        assert!(!gather(GATHER_BELOW, false), "a flood: read on");
        assert!(!gather(8 << 10, true), "a PMI request served");
    }

    #[test]
    fn a_reply_not_read_for_the_limit_stalls_the_rank() {
        let mut t = one();
        t.reply_queued(0, 10.0);
        assert!(approx(t.poll_timeout(), 15.0));
        // Queued again before the limit: the limit does not restart.
        t.reply_queued(0, 12.0);
        assert_eq!(t.handle_timeout(14.9, &mut Facts::default()), vec![]);
        assert_eq!(t.handle_timeout(15.0, &mut Facts::default()), vec![Due::Stalled(0)]);
        assert_eq!(t.poll_timeout(), None);
    }

    #[test]
    fn progress_moves_the_stall_limit_and_a_written_queue_clears_it() {
        let mut t = one();
        t.reply_queued(0, 10.0);
        t.reply_progress(0, 13.0);
        // The entry at 15 s finds the limit moved to 18 s and waits for it.
        assert_eq!(t.handle_timeout(15.0, &mut Facts::default()), vec![]);
        assert!(approx(t.poll_timeout(), 18.0));
        assert_eq!(t.handle_timeout(18.0, &mut Facts::default()), vec![Due::Stalled(0)]);
        t.reply_queued(0, 20.0);
        t.replies_done(0);
        assert_eq!(t.handle_timeout(30.0, &mut Facts::default()), vec![]);
    }

    #[test]
    fn a_silent_partial_line_goes_up_after_the_flush_delay() {
        let mut t = one();
        t.out_read(0, 0, 1.0, 7, false);
        assert!(approx(t.poll_timeout(), 1.05));
        assert_eq!(t.handle_timeout(1.049, &mut Facts::default()), vec![]);
        assert_eq!(t.handle_timeout(1.05, &mut Facts::default()), vec![Due::FlushLine(0, 0)]);
        assert_eq!(t.poll_timeout(), None);
    }

    #[test]
    fn a_line_ended_meanwhile_has_no_deadline() {
        let mut t = one();
        t.out_read(0, 1, 1.0, 7, false);
        t.out_read(0, 1, 1.01, 0, true);
        assert_eq!(t.handle_timeout(5.0, &mut Facts::default()), vec![]);
    }

    #[test]
    fn a_writer_at_work_keeps_its_line_until_the_maximum_wait() {
        let mut t = one();
        t.out_read(0, 0, 1.0, 3, false);
        let mut busy = Facts { busy: true, ..Facts::default() };
        // Still at work at each flush deadline: the line waits, up to 1 s after it began.
        let mut now = 1.05;
        while now < 2.0 {
            assert_eq!(t.handle_timeout(now, &mut busy), vec![], "at {now}");
            now += 0.05;
        }
        assert!(approx(t.poll_timeout(), 2.0));
        assert_eq!(t.handle_timeout(2.0, &mut busy), vec![Due::FlushLine(0, 0)]);
        assert!(busy.asked_busy >= 19);
    }

    #[test]
    fn more_of_the_line_keeps_its_start_and_a_new_line_restarts_it() {
        let mut t = one();
        t.out_read(0, 0, 1.0, 3, false);
        // More of the same line at 1.98: the flush deadline is capped by the line's start.
        t.out_read(0, 0, 1.98, 9, false);
        let mut busy = Facts { busy: true, ..Facts::default() };
        assert_eq!(t.handle_timeout(1.99, &mut busy), vec![]);
        assert_eq!(t.handle_timeout(2.0, &mut busy), vec![Due::FlushLine(0, 0)]);
        // A read that sent whole lines starts the held rest's wait afresh.
        t.out_read(0, 0, 3.0, 3, false);
        t.out_read(0, 0, 3.5, 4, true);
        assert_eq!(t.handle_timeout(3.55, &mut busy), vec![]);
        assert!(approx(t.poll_timeout(), 3.6), "{:?}", t.poll_timeout());
    }

    #[test]
    fn bytes_waiting_in_the_pipe_are_read_before_a_line_is_cut() {
        let mut t = one();
        t.out_read(0, 0, 1.0, 3, false);
        let mut unread = Facts { unread: true, ..Facts::default() };
        assert_eq!(t.handle_timeout(1.05, &mut unread), vec![Due::ReadAgain(0, 0)]);
        assert!(approx(t.poll_timeout(), 1.1));
        assert_eq!(unread.asked_busy, 0, "a rank with bytes unread is not looked at further");
    }

    #[test]
    fn after_the_exit_an_open_stream_drains_then_is_given_up() {
        let mut t = one();
        t.out_read(0, 0, 1.0, 3, false);
        assert_eq!(t.exited(0, 1.01), vec![0, 1]);
        // The partial deadline is gone: the drain's is what counts.
        assert_eq!(t.handle_timeout(1.2, &mut Facts::default()), vec![]);
        // Output read during the drain restarts it.
        t.out_read(0, 1, 1.3, 0, true);
        assert_eq!(t.handle_timeout(1.51, &mut Facts::default()), vec![Due::GiveUp(0, 0)]);
        assert_eq!(t.handle_timeout(1.79, &mut Facts::default()), vec![]);
        assert_eq!(t.handle_timeout(1.8, &mut Facts::default()), vec![Due::GiveUp(0, 1)]);
        assert_eq!(t.poll_timeout(), None);
    }

    #[test]
    fn a_stream_out_of_budget_drains_only_once_resumed() {
        let mut t = one();
        t.out_read(0, 0, 1.0, 3, false);
        t.out_blocked(0, 0);
        // Blocked: no partial-line deadline, and the exit starts no drain for it.
        assert_eq!(t.exited(0, 2.0), vec![1]);
        t.out_closed(0, 1);
        assert_eq!(t.handle_timeout(10.0, &mut Facts::default()), vec![]);
        assert_eq!(t.out_resumed(0, 10.0), vec![0]);
        assert_eq!(t.handle_timeout(10.49, &mut Facts::default()), vec![]);
        assert_eq!(t.handle_timeout(10.5, &mut Facts::default()), vec![Due::GiveUp(0, 0)]);
    }

    #[test]
    fn a_stream_resumed_and_found_empty_drains_after_the_exit() {
        let mut t = one();
        t.out_blocked(0, 1);
        // Resumed, and the read that follows finds nothing (no out_read): not blocked any
        // more, so the exit reads it and starts its drain.
        assert_eq!(t.out_resumed(0, 1.0), vec![1]);
        assert_eq!(t.out_resumed(0, 1.0), Vec::<usize>::new());
        assert_eq!(t.exited(0, 2.0), vec![0, 1]);
        let due = t.handle_timeout(2.5, &mut Facts::default());
        assert_eq!(due, vec![Due::GiveUp(0, 0), Due::GiveUp(0, 1)]);
    }

    #[test]
    fn the_exit_ends_the_stall_limit_and_closed_streams_are_not_timed() {
        let mut t = one();
        t.reply_queued(0, 1.0);
        t.out_closed(0, 0);
        t.out_closed(0, 1);
        assert_eq!(t.exited(0, 2.0), Vec::<usize>::new());
        assert_eq!(t.handle_timeout(100.0, &mut Facts::default()), vec![]);
    }

    #[test]
    fn ranks_are_timed_apart_and_removed_ranks_not_at_all() {
        let mut t = RankStreams::new(3);
        t.started(0);
        t.started(2);
        t.reply_queued(2, 1.0);
        t.out_read(0, 1, 1.0, 1, false);
        t.reply_queued(0, 3.0);
        t.removed(0);
        let due = t.handle_timeout(10.0, &mut Facts::default());
        assert_eq!(due, vec![Due::Stalled(2)]);
        // Out of range, or not started: ignored.
        t.reply_queued(1, 1.0);
        t.reply_queued(7, 1.0);
        assert_eq!(t.handle_timeout(20.0, &mut Facts::default()), vec![]);
    }
}

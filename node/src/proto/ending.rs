//! How an agent's ranks and its loop end, as timers: the ranks that ended and are held
//! unreaped ([`HeldRanks`]), and the last sweep for PMGR input before the loop ends
//! ([`FinalSweep`]). Each says when it next wants to be woken (`poll_timeout`) and what is
//! due then (`handle_timeout(now)`); the driver performs what they decide (the `waitpid`s)
//! and reads the clock.

use crate::proto::node::limits::{PMGR_FINAL_SWEEP, ZOMBIE_HOLD};

/// Local ranks that ended and are not reaped yet: claimed still, so that their pids (and
/// process groups) cannot be reused meanwhile. They are reaped together, once every local
/// rank has ended, or [`ZOMBIE_HOLD`] after the first of them was held (the kernel drops a
/// process's `/proc` entries when it is reaped, which costs more while the rank's peers still
/// run: MPICH ranks look one another up there).
#[derive(Debug, Default)]
pub struct HeldRanks {
    pids: Vec<i32>,
    /// When the first of them has been held long enough.
    due: Option<f64>,
    /// See [`HeldRanks::set_now`].
    now: f64,
}

impl HeldRanks {
    /// The time now, on the driver's monotonic clock: what [`HeldRanks::hold`] sets the
    /// deadline from. The driver tells it once per turn of its loop.
    pub fn set_now(&mut self, now: f64) {
        self.now = now;
    }

    /// The process of a rank, `pid`, ended (it is not reaped); `last`: no other local rank
    /// still runs. Returns the pids to reap now: every one held when `last`, else none (the
    /// first held since the last reaping sets the deadline).
    pub fn hold(&mut self, pid: i32, last: bool) -> Vec<i32> {
        self.pids.push(pid);
        self.due.get_or_insert(self.now + ZOMBIE_HOLD.as_secs_f64());
        if last {
            self.release_all()
        } else {
            Vec::new()
        }
    }

    /// When the ranks held are due to be reaped, if any are held: the driver calls
    /// [`HeldRanks::handle_timeout`] then.
    pub fn poll_timeout(&self) -> Option<f64> {
        self.due
    }

    /// The pids to reap at `now`: every one held, if the deadline has come; else none.
    pub fn handle_timeout(&mut self, now: f64) -> Vec<i32> {
        self.now = now;
        if self.due.is_some_and(|d| d <= now) {
            self.release_all()
        } else {
            Vec::new()
        }
    }

    /// Every pid held, to be reaped now (the agent ends); none is held after.
    pub fn release_all(&mut self) -> Vec<i32> {
        self.due = None;
        std::mem::take(&mut self.pids)
    }
}

/// The last sweep for PMGR input. A PMGR client sends its abort record on a connection of
/// its own and may exit right after: before concluding that the job ended well, an agent that
/// serves PMGR goes on serving what its PMGR port still delivers until [`PMGR_FINAL_SWEEP`]
/// after the last local rank ended (from then, not from the subtree's end: the wait overlaps
/// the children's, and does not add up level by level in a deep tree).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FinalSweep(Sweep);

#[derive(Debug, Clone, Copy, PartialEq)]
enum Sweep {
    /// The agent serves no PMGR port: nothing to sweep.
    Off,
    /// Some local rank still runs.
    NotYet,
    /// Under way until this time.
    Until(f64),
    Over,
}

impl FinalSweep {
    /// `serving_pmgr`: the agent has a PMGR port (a PMGR job with local ranks).
    pub fn new(serving_pmgr: bool) -> Self {
        FinalSweep(if serving_pmgr { Sweep::NotYet } else { Sweep::Off })
    }

    /// Every local rank has ended (as seen at `now`): the sweep starts, the first time.
    pub fn local_ranks_ended(&mut self, now: f64) {
        if self.0 == Sweep::NotYet {
            self.0 = Sweep::Until(now + PMGR_FINAL_SWEEP.as_secs_f64());
        }
    }

    /// When the sweep under way ends: the driver calls [`FinalSweep::handle_timeout`] then.
    pub fn poll_timeout(&self) -> Option<f64> {
        match self.0 {
            Sweep::Until(at) => Some(at),
            _ => None,
        }
    }

    /// The sweep is over if its time has come at `now`.
    pub fn handle_timeout(&mut self, now: f64) {
        if matches!(self.0, Sweep::Until(at) if at <= now) {
            self.0 = Sweep::Over;
        }
    }

    /// Whether the agent's loop may end at `now` (its core having finished): no sweep is
    /// under way then.
    pub fn may_end(&self, now: f64) -> bool {
        match self.0 {
            Sweep::Until(at) => at <= now,
            Sweep::Off | Sweep::NotYet | Sweep::Over => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ZOMBIE_HOLD is 250 ms.
    #[test]
    fn the_hold_is_a_quarter_second() {
        assert_eq!(ZOMBIE_HOLD.as_secs_f64(), 0.25);
        assert_eq!(PMGR_FINAL_SWEEP.as_secs_f64(), 0.03);
    }

    /// Ranks that end while others run are held together until ZOMBIE_HOLD after the first
    /// of them, then reaped at once; the next one held starts a new hold.
    #[test]
    fn held_ranks_are_reaped_together_after_the_hold() {
        let mut h = HeldRanks::default();
        assert_eq!(h.poll_timeout(), None);
        h.set_now(10.0);
        assert!(h.hold(101, false).is_empty());
        assert_eq!(h.poll_timeout(), Some(10.25));
        h.set_now(10.2);
        assert!(h.hold(102, false).is_empty());
        assert_eq!(h.poll_timeout(), Some(10.25), "the first one held sets the deadline");
        assert!(h.handle_timeout(10.249).is_empty());
        assert_eq!(h.handle_timeout(10.25), [101, 102]);
        assert_eq!(h.poll_timeout(), None);
        assert!(h.handle_timeout(20.0).is_empty(), "reaped once");
        h.set_now(11.0);
        assert!(h.hold(103, false).is_empty());
        assert_eq!(h.poll_timeout(), Some(11.25));
        assert_eq!(h.handle_timeout(12.0), [103]);
    }

    /// The last local rank to end is reaped at once, with every one held.
    #[test]
    fn the_last_rank_reaps_every_one_held_at_once() {
        let mut h = HeldRanks::default();
        h.set_now(1.0);
        assert!(h.hold(7, false).is_empty());
        h.set_now(1.1);
        assert_eq!(h.hold(8, true), [7, 8]);
        assert_eq!(h.poll_timeout(), None);
        assert!(h.handle_timeout(5.0).is_empty());
        // A lone rank: at once too.
        h.set_now(2.0);
        assert_eq!(h.hold(9, true), [9]);
        assert_eq!(h.poll_timeout(), None);
    }

    /// At the agent's end every rank held is reaped, whatever its deadline.
    #[test]
    fn the_end_releases_every_rank_held() {
        let mut h = HeldRanks::default();
        h.set_now(3.0);
        assert!(h.hold(1, false).is_empty());
        assert!(h.hold(2, false).is_empty());
        assert_eq!(h.release_all(), [1, 2]);
        assert_eq!(h.poll_timeout(), None);
        assert!(h.release_all().is_empty());
    }

    /// Without a PMGR port the loop may end whenever its core finished.
    #[test]
    fn no_sweep_without_a_pmgr_port() {
        let mut s = FinalSweep::new(false);
        s.local_ranks_ended(5.0);
        assert_eq!(s.poll_timeout(), None);
        assert!(s.may_end(5.0));
    }

    /// With one, PMGR_FINAL_SWEEP after the last local rank ended (the first time it is
    /// seen), not a moment before; once over it asks for no more wake-ups.
    #[test]
    fn the_pmgr_sweep_runs_from_the_last_rank_end() {
        let mut s = FinalSweep::new(true);
        assert!(s.may_end(0.0), "nothing under way before the ranks end");
        assert_eq!(s.poll_timeout(), None);
        s.local_ranks_ended(2.0);
        assert_eq!(s.poll_timeout(), Some(2.03));
        s.local_ranks_ended(2.02);
        assert_eq!(s.poll_timeout(), Some(2.03), "started once");
        assert!(!s.may_end(2.0299));
        s.handle_timeout(2.0299);
        assert_eq!(s.poll_timeout(), Some(2.03));
        assert!(s.may_end(2.03));
        s.handle_timeout(2.03);
        assert_eq!(s.poll_timeout(), None, "a passed sweep wakes nobody");
        assert!(s.may_end(2.03));
        s.local_ranks_ended(9.0);
        assert_eq!(s.poll_timeout(), None, "and does not start again");
    }
}

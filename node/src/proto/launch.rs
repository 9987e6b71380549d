//! The child-launch lifecycle of a node, as a pure state machine: which child to launch
//! next (the tree's order, all at once or in batches), how long each may take to connect
//! back, what a launcher's exit means, when a child is given up and whether its launcher
//! must be killed. The driver (`tree::Children`) starts the launcher processes, holds the
//! connections and carries the decisions out; time comes in as an argument
//! ([`Launches::poll_timeout`], [`Launches::handle_timeout`]).

use std::time::Duration;

/// A child's launcher exited while its NLA was connected: the NLA normally closes its
/// connection as it exits (an ssh session that dropped leaves it to notice stdin's EOF and
/// close); if the connection is still open after this long, the NLA counts as lost.
pub const LAUNCHER_GONE_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Not launched yet.
    Waiting,
    /// Launched, not connected yet.
    Launching,
    Connected,
    /// Given up, or its connection ended.
    Gone,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Deadline {
    /// The launch timeout of a child that has not connected.
    Connect,
    /// [`LAUNCHER_GONE_WAIT`] after a connected child's launcher exited.
    Silent,
    /// The job is being torn down ([`Launches::abort`]): a child not connected is given up.
    Aborted,
}

/// A child given up: the reason, for the node core (`NodeCore::child_gone`), and whether its
/// launcher's process group must be killed (it still had ranks, or never connected).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GiveUp {
    pub idx: usize,
    pub why: String,
    pub kill_launcher: bool,
}

#[derive(Debug)]
pub struct Launches {
    state: Vec<State>,
    /// How a child's launcher ended while the child was still connected (for messages).
    launcher_end: Vec<Option<String>>,
    next: usize,
    /// Launches not settled (connected or given up), and launches the current batch still
    /// allows.
    in_batch: usize,
    batch_left: usize,
    batch: Option<usize>,
    timeout: Duration,
    /// Pending deadlines, earliest last.
    timers: Vec<(f64, usize, Deadline)>,
    /// Torn down: nothing more is launched.
    aborted: bool,
}

impl Launches {
    /// `n` children; `batch`: launch them B at a time (`launch_batch`), the next batch once
    /// every child of the previous one connected or was given up; each must connect within
    /// `timeout` of its launch.
    pub fn new(n: usize, batch: Option<u32>, timeout: Duration) -> Self {
        Launches {
            state: vec![State::Waiting; n],
            launcher_end: vec![None; n],
            next: 0,
            in_batch: 0,
            batch_left: 0,
            batch: batch.filter(|b| *b > 0).map(|b| b as usize),
            timeout,
            timers: Vec::new(),
            aborted: false,
        }
    }

    /// The job is being torn down at `now`: launch nothing more, and give up every child
    /// that has not connected (at the next [`Launches::handle_timeout`]), its launcher
    /// killed, rather than wait out its launch timeout.
    pub fn abort(&mut self, now: f64) {
        if std::mem::replace(&mut self.aborted, true) {
            return;
        }
        for idx in 0..self.state.len() {
            if matches!(self.state[idx], State::Waiting | State::Launching) {
                self.set_timer(now, idx, Deadline::Aborted);
            }
        }
    }

    fn set_timer(&mut self, at: f64, idx: usize, d: Deadline) {
        let pos = self.timers.partition_point(|(t, _, _)| *t > at);
        self.timers.insert(pos, (at, idx, d));
    }

    /// The next child to launch now (at `now`), if the batch allows one; its launch timeout
    /// starts. Call until `None`, then again after each connection or give-up.
    pub fn next_launch(&mut self, now: f64) -> Option<usize> {
        if self.aborted {
            return None;
        }
        // Children that joined before their turn (started by a resource manager) are not
        // launched.
        while self.state.get(self.next).is_some_and(|s| *s != State::Waiting) {
            self.next += 1;
        }
        if self.next >= self.state.len() {
            return None;
        }
        if let Some(b) = self.batch {
            // A batch goes out whole; the next one once every launch of it settled.
            if self.batch_left == 0 {
                if self.in_batch > 0 {
                    return None;
                }
                self.batch_left = b;
            }
            self.batch_left -= 1;
        }
        let idx = self.next;
        self.next += 1;
        self.in_batch += 1;
        self.state[idx] = State::Launching;
        self.set_timer(now + self.timeout.as_secs_f64(), idx, Deadline::Connect);
        Some(idx)
    }

    /// Child `idx`'s launch is over (connected or given up).
    fn settle(&mut self, idx: usize) {
        if self.state[idx] == State::Launching {
            self.in_batch -= 1;
        }
    }

    /// Child `idx` connected (an authenticated hello). `false`: it was given up already, or
    /// this is a second connection for it — drop the connection unread.
    pub fn connected(&mut self, idx: usize) -> bool {
        match self.state.get(idx) {
            Some(State::Launching) => {
                self.settle(idx);
                self.state[idx] = State::Connected;
                true
            }
            // A child that joined before its launch (a resource manager started it).
            Some(State::Waiting) => {
                self.state[idx] = State::Connected;
                true
            }
            _ => false,
        }
    }

    /// Has child `idx`'s launch started (or has it joined, or been given up)?
    pub fn launched(&self, idx: usize) -> bool {
        self.state.get(idx).is_some_and(|s| *s != State::Waiting)
    }

    pub fn is_connected(&self, idx: usize) -> bool {
        self.state.get(idx) == Some(&State::Connected)
    }

    /// The node is being torn down ([`Launches::abort`]).
    pub fn aborted(&self) -> bool {
        self.aborted
    }

    /// Has child `idx` connected, or been given up?
    pub fn taken(&self, idx: usize) -> bool {
        !matches!(self.state.get(idx), Some(State::Waiting | State::Launching))
    }

    pub fn is_gone(&self, idx: usize) -> bool {
        self.state.get(idx).is_none_or(|s| *s == State::Gone)
    }

    /// Give child `idx` up (`ranks_left`: its subtree's ranks that have not ended).
    pub fn give_up(&mut self, idx: usize, why: String, ranks_left: usize) -> Option<GiveUp> {
        let st = *self.state.get(idx)?;
        if st == State::Gone {
            return None;
        }
        self.settle(idx);
        self.state[idx] = State::Gone;
        // A child whose ranks all ended closes its connection as it exits: its launcher
        // exits by itself. One given up with ranks left (or never connected) is killed.
        let kill_launcher = ranks_left > 0 || st != State::Connected;
        Some(GiveUp { idx, why, kill_launcher })
    }

    /// The launcher of child `idx` could not be started.
    pub fn launch_failed(&mut self, idx: usize, error: String) -> Option<GiveUp> {
        let mut g = self.give_up(idx, error, 0)?;
        g.kill_launcher = false;
        Some(g)
    }

    /// Child `idx`'s connection ended (`why`), after its launcher's end if that came first.
    pub fn closed(&mut self, idx: usize, why: &str, ranks_left: usize) -> Option<GiveUp> {
        let why = match self.launcher_end.get(idx).cloned().flatten() {
            Some(l) => format!("{why} after {l}"),
            None => why.to_string(),
        };
        self.give_up(idx, why, ranks_left)
    }

    /// The launcher of child `idx` exited (`what`: "its launcher exited (status): stderr").
    /// Before the child connected, that is its end; after, the child gets
    /// [`LAUNCHER_GONE_WAIT`] to close its connection.
    pub fn launcher_exited(&mut self, idx: usize, what: String, now: f64) -> Option<GiveUp> {
        match *self.state.get(idx)? {
            State::Waiting | State::Launching => {
                let mut g = self.give_up(idx, format!("{what} before it connected"), 0)?;
                g.kill_launcher = false;
                Some(g)
            }
            State::Connected => {
                self.launcher_end[idx] = Some(what);
                self.set_timer(now + LAUNCHER_GONE_WAIT.as_secs_f64(), idx, Deadline::Silent);
                None
            }
            State::Gone => None,
        }
    }

    /// When the earliest deadline is due, if any.
    pub fn poll_timeout(&self) -> Option<f64> {
        self.timers.last().map(|(t, _, _)| *t)
    }

    /// The children given up at `now` (`ranks_left(idx)`: the subtree's ranks not ended).
    pub fn handle_timeout(&mut self, now: f64, ranks_left: impl Fn(usize) -> usize) -> Vec<GiveUp> {
        let mut out = Vec::new();
        while self.timers.last().is_some_and(|(t, _, _)| *t <= now) {
            let Some((_, idx, d)) = self.timers.pop() else { break };
            let why = match (d, self.state[idx]) {
                (Deadline::Connect, State::Launching) => {
                    let secs = self.timeout.as_secs_f64();
                    format!("no connection within the launch timeout ({secs} s)")
                }
                (Deadline::Aborted, State::Waiting | State::Launching) => {
                    "the job was torn down before it connected".into()
                }
                (Deadline::Silent, State::Connected) => match &self.launcher_end[idx] {
                    Some(l) => format!("{l}, and the NLA went silent"),
                    None => "the NLA went silent".into(),
                },
                _ => continue,
            };
            out.extend(self.give_up(idx, why, ranks_left(idx)));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(2);

    /// A teardown gives up every child not connected at once (its launcher killed), leaves
    /// the connected ones be, and launches nothing more.
    #[test]
    fn abort_gives_up_what_has_not_connected() {
        let mut l = Launches::new(4, Some(2), T);
        assert_eq!((l.next_launch(0.0), l.next_launch(0.0)), (Some(0), Some(1)));
        assert!(l.connected(0));
        l.abort(1.0);
        assert_eq!(l.next_launch(1.0), None, "nothing more is launched");
        assert_eq!(l.poll_timeout(), Some(1.0));
        let gone = l.handle_timeout(1.0, |_| 2);
        let why = "the job was torn down before it connected";
        let want: Vec<GiveUp> = [1, 2, 3]
            .into_iter()
            .map(|idx| GiveUp { idx, why: why.into(), kill_launcher: true })
            .collect();
        assert_eq!(gone, want);
        assert!(l.is_connected(0) && l.is_gone(1) && l.is_gone(3));
        assert_eq!(l.poll_timeout(), Some(T.as_secs_f64()), "child 1's old deadline");
        assert!(l.handle_timeout(10.0, |_| 2).is_empty());
    }

    #[test]
    fn batches_launch_after_the_previous_one_settles() {
        let mut l = Launches::new(5, Some(2), T);
        assert_eq!(
            (l.next_launch(0.0), l.next_launch(0.0), l.next_launch(0.0)),
            (Some(0), Some(1), None)
        );
        assert!(l.connected(0));
        assert_eq!(l.next_launch(0.1), None, "child 1 is still launching");
        assert!(l.launch_failed(1, "no such host".into()).is_some());
        assert_eq!(
            (l.next_launch(0.2), l.next_launch(0.2), l.next_launch(0.2)),
            (Some(2), Some(3), None)
        );
        let mut l = Launches::new(3, None, T);
        assert_eq!(
            (0..4).map(|_| l.next_launch(0.0)).collect::<Vec<_>>(),
            vec![Some(0), Some(1), Some(2), None]
        );
    }

    #[test]
    fn a_child_that_does_not_connect_is_given_up_at_its_deadline() {
        let mut l = Launches::new(2, None, T);
        l.next_launch(0.0);
        l.next_launch(0.5);
        assert!(l.connected(1));
        assert_eq!(l.poll_timeout(), Some(2.0));
        assert!(l.handle_timeout(1.9, |_| 0).is_empty());
        let g = l.handle_timeout(2.0, |_| 0);
        assert_eq!(
            g,
            vec![GiveUp {
                idx: 0,
                why: "no connection within the launch timeout (2 s)".into(),
                kill_launcher: true
            }]
        );
        // child 1's deadline passes harmlessly: it connected
        assert!(l.handle_timeout(3.0, |_| 0).is_empty());
        assert!(!l.connected(0), "too late: dropped");
        assert!(!l.connected(1), "a second hello: dropped");
    }

    #[test]
    fn launcher_exits_before_and_after_the_connection() {
        let mut l = Launches::new(2, None, T);
        l.next_launch(0.0);
        l.next_launch(0.0);
        let g = l.launcher_exited(
            0,
            "its launcher exited (exit status: 255): ssh: no route".into(),
            0.3,
        );
        assert_eq!(
            g.map(|g| (g.why, g.kill_launcher)),
            Some((
                "its launcher exited (exit status: 255): ssh: no route before it connected".into(),
                false
            ))
        );
        assert!(l.connected(1));
        assert_eq!(l.launcher_exited(1, "its launcher exited (exit status: 0)".into(), 1.0), None);
        // the NLA stays silent: lost after the wait
        let g = l.handle_timeout(11.0, |_| 3);
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].why, "its launcher exited (exit status: 0), and the NLA went silent");
        assert!(g[0].kill_launcher);
        // or its connection closes first: the message says both
        let mut l = Launches::new(1, None, T);
        l.next_launch(0.0);
        l.connected(0);
        l.launcher_exited(0, "its launcher exited (signal: 9)".into(), 1.0);
        let g = l.closed(0, "connection closed", 0).expect("given up");
        assert_eq!(g.why, "connection closed after its launcher exited (signal: 9)");
        assert!(!g.kill_launcher, "no ranks left: its launcher ends by itself");
        assert!(l.handle_timeout(20.0, |_| 0).is_empty(), "given up once");
    }
}

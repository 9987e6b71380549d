//! The tree connections' policies, without the sockets (the driver's `io::tree` holds those):
//! when a failed connection to a parent is tried again and when it is given up ([`Retry`]),
//! when a connection accepted on a tree port has waited too long for its first message
//! ([`HelloDeadlines`]), and what that message makes of it ([`first_msg`]). Times are
//! seconds on the driver's monotonic clock, passed in.

use crate::proto::node::limits::{HELLO_TIMEOUT, RETRY_WAIT, RETRY_WAIT_MAX};
use libi::msg::{secret_eq, Msg};
use std::collections::VecDeque;

/// The tries of one connection: when to make the next after one failed, and when to give
/// up. The wait before the first retry is [`RETRY_WAIT`]; it doubles at each one, up to
/// [`RETRY_WAIT_MAX`]. Given up after `retries` retries, or when the next try would not come
/// before the deadline, if there is one.
#[derive(Debug, Clone, PartialEq)]
pub struct Retry {
    retries: u32,
    /// Tries made, counting the one under way.
    tries: u32,
    /// The wait before the next try.
    wait: f64,
    deadline: Option<f64>,
}

impl Retry {
    /// The first try is under way; at most `retries` more are made.
    pub fn new(retries: u32) -> Self {
        Retry { retries, tries: 1, wait: RETRY_WAIT.as_secs_f64(), deadline: None }
    }

    /// No try starts at or after `deadline`.
    pub fn until(self, deadline: f64) -> Self {
        Retry { deadline: Some(deadline), ..self }
    }

    /// Tries made so far, counting the one under way (the error that gives up says it).
    pub fn tries(&self) -> u32 {
        self.tries
    }

    /// The try under way failed at `now`: when to make the next (`Some`, which is then
    /// under way), or `None`: give up.
    pub fn failed(&mut self, now: f64) -> Option<f64> {
        if self.tries > self.retries {
            return None;
        }
        let at = now + self.wait;
        if self.deadline.is_some_and(|d| at >= d) {
            return None;
        }
        self.wait = (2.0 * self.wait).min(RETRY_WAIT_MAX.as_secs_f64());
        self.tries += 1;
        Some(at)
    }
}

/// The hello deadlines of the connections accepted on a tree port and not authenticated yet:
/// each must have sent its first message within [`HELLO_TIMEOUT`] of being accepted, however
/// its bytes trickle in. Connections are named by the driver's tickets (`libi::preauth`'s);
/// the driver holds at most its pool's cap of them here, telling [`HelloDeadlines::done`]
/// of every one that leaves the pool otherwise (a first message read, evicted).
#[derive(Debug, Default)]
pub struct HelloDeadlines {
    /// (ticket, deadline), in the order accepted.
    pending: VecDeque<(u64, f64)>,
}

impl HelloDeadlines {
    pub fn new() -> Self {
        HelloDeadlines::default()
    }

    /// Connection `ticket` was accepted at `now`.
    pub fn accepted(&mut self, ticket: u64, now: f64) {
        self.pending.push_back((ticket, now + HELLO_TIMEOUT.as_secs_f64()));
    }

    /// Connection `ticket` waits no longer (its first message came, or it was closed).
    pub fn done(&mut self, ticket: u64) {
        self.pending.retain(|&(t, _)| t != ticket);
    }

    /// When the next connection is overdue: the driver calls
    /// [`HelloDeadlines::handle_timeout`] then.
    pub fn poll_timeout(&self) -> Option<f64> {
        self.pending.iter().map(|&(_, at)| at).reduce(f64::min)
    }

    /// The connections whose hello is overdue at `now`, in the order accepted: the driver
    /// closes them, refused for [`HelloDeadlines::why`]. They wait no longer.
    pub fn handle_timeout(&mut self, now: f64) -> Vec<u64> {
        let overdue = self.pending.iter().filter(|&&(_, at)| at <= now).map(|&(t, _)| t).collect();
        self.pending.retain(|&(_, at)| at > now);
        overdue
    }

    /// Why an overdue connection is refused (a few fixed words: refusals are summed up by
    /// reason).
    pub fn why() -> String {
        format!("no hello within {} s", HELLO_TIMEOUT.as_secs())
    }
}

/// What the first message of a connection to a listening tree port makes of it
/// ([`first_msg`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FirstMsg {
    /// A hello with the job's secret from child `idx` of this node (`host`, as it says).
    Child { idx: usize, host: String },
    /// A join with the job's secret: an NLA started by a resource manager's step, which
    /// listens at `listen` for its own children.
    Join { host: String, listen: String },
}

/// Judge the first message of a connection not authenticated yet, at a node whose children
/// are the nodes `children` (in order) and whose job's secret is `secret`: a hello or a join
/// with the secret is taken (a hello only from one of `children`); anything else is refused,
/// with the reason (a few fixed words: refusals are summed up by reason).
pub fn first_msg(msg: Msg, secret: &str, children: &[u32]) -> Result<FirstMsg, String> {
    match msg {
        Msg::Hello { node, secret: s, host, .. } => {
            if !secret_eq(&s, secret) {
                return Err("wrong job secret".into());
            }
            let idx = children
                .iter()
                .position(|c| *c == node)
                .ok_or_else(|| format!("node {node} is not a child here"))?;
            Ok(FirstMsg::Child { idx, host })
        }
        Msg::Join { host, secret: s, listen, .. } => {
            if !secret_eq(&s, secret) {
                return Err("wrong job secret".into());
            }
            Ok(FirstMsg::Join { host, listen })
        }
        _ => Err("first message is not a hello".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ten retries (the default), no deadline: waits of 10, 20, 40, 80, 160 ms, then 200 ms
    /// each; the eleventh failure gives up, eleven tries made.
    #[test]
    fn retries_back_off_then_give_up() {
        let mut r = Retry::new(10);
        let mut now = 100.0;
        let mut waits = Vec::new();
        while let Some(at) = r.failed(now) {
            waits.push(((at - now) * 1000.0).round() as u32);
            now = at + 0.5; // the next try takes half a second to fail
        }
        assert_eq!(waits, [10, 20, 40, 80, 160, 200, 200, 200, 200, 200]);
        assert_eq!(r.tries(), 11);
        assert_eq!(r.failed(now), None, "given up for good");
    }

    /// The first wait is 10 ms from the failure, on the caller's clock.
    #[test]
    fn the_next_try_is_set_from_the_failure() {
        let mut r = Retry::new(3);
        assert_eq!(r.tries(), 1);
        assert_eq!(r.failed(2.0), Some(2.01));
        assert_eq!(r.tries(), 2);
    }

    /// No retries: the first failure is final.
    #[test]
    fn no_retries_gives_up_at_once() {
        let mut r = Retry::new(0);
        assert_eq!(r.failed(5.0), None);
        assert_eq!(r.tries(), 1);
    }

    /// A deadline ends the retries when the next try would come at or after it, whatever
    /// retries are left.
    #[test]
    fn a_deadline_ends_the_retries() {
        let mut r = Retry::new(100).until(1.0);
        assert_eq!(r.failed(0.5), Some(0.51));
        assert_eq!(r.failed(0.97), Some(0.99));
        // The next wait is 40 ms: 0.97 + 0.04 is past the deadline.
        assert_eq!(r.failed(0.97), None);
        assert_eq!(r.tries(), 3);
        let mut r = Retry::new(100).until(1.0);
        assert_eq!(r.failed(0.99), None, "0.99 + 0.01 is the deadline itself");
    }

    /// A connection accepted at t=10 is overdue at 10 + HELLO_TIMEOUT, not a millisecond
    /// before; once handed out (or done) it is not again.
    #[test]
    fn a_hello_is_overdue_at_its_deadline() {
        let t = HELLO_TIMEOUT.as_secs_f64();
        let mut h = HelloDeadlines::new();
        assert_eq!(h.poll_timeout(), None);
        assert!(h.handle_timeout(1e9).is_empty());
        h.accepted(7, 10.0);
        assert_eq!(h.poll_timeout(), Some(10.0 + t));
        assert!(h.handle_timeout(10.0 + t - 0.001).is_empty());
        assert_eq!(h.poll_timeout(), Some(10.0 + t), "still waiting");
        assert_eq!(h.handle_timeout(10.0 + t), [7]);
        assert_eq!(h.poll_timeout(), None);
        assert!(h.handle_timeout(10.0 + 2.0 * t).is_empty(), "handed out once");
        assert_eq!(HelloDeadlines::why(), format!("no hello within {} s", HELLO_TIMEOUT.as_secs()));
    }

    /// Each connection has its own deadline, from its own acceptance; one whose first
    /// message came (or that was evicted) is not overdue.
    #[test]
    fn each_connection_has_its_own_deadline() {
        let t = HELLO_TIMEOUT.as_secs_f64();
        let mut h = HelloDeadlines::new();
        h.accepted(1, 10.0);
        h.accepted(2, 11.0);
        h.accepted(3, 12.0);
        h.done(1);
        assert_eq!(h.poll_timeout(), Some(11.0 + t), "the first is done: the second's");
        assert_eq!(h.handle_timeout(12.0 + t - 0.5), [2]);
        assert_eq!(h.poll_timeout(), Some(12.0 + t));
        h.accepted(4, 13.0);
        assert_eq!(h.handle_timeout(20.0 + t), [3, 4]);
        assert_eq!(h.poll_timeout(), None);
    }

    fn hello(node: u32, secret: &str) -> Msg {
        Msg::Hello { node, secret: secret.into(), host: "n7".into(), pid: 1 }
    }

    #[test]
    fn a_child_says_hello_with_the_secret() {
        let kids = [4, 7, 9];
        assert_eq!(
            first_msg(hello(7, "s3cret"), "s3cret", &kids),
            Ok(FirstMsg::Child { idx: 1, host: "n7".into() })
        );
        assert_eq!(first_msg(hello(7, "guess"), "s3cret", &kids), Err("wrong job secret".into()));
        assert_eq!(first_msg(hello(7, ""), "s3cret", &kids), Err("wrong job secret".into()));
        assert_eq!(
            first_msg(hello(5, "s3cret"), "s3cret", &kids),
            Err("node 5 is not a child here".into())
        );
    }

    #[test]
    fn a_join_needs_the_secret_only() {
        let join = |secret: &str| Msg::Join {
            host: "n2".into(),
            secret: secret.into(),
            listen: "10.0.0.2:7000".into(),
            pid: 3,
        };
        assert_eq!(
            first_msg(join("s"), "s", &[]),
            Ok(FirstMsg::Join { host: "n2".into(), listen: "10.0.0.2:7000".into() })
        );
        assert_eq!(first_msg(join("t"), "s", &[]), Err("wrong job secret".into()));
    }

    #[test]
    fn anything_else_first_is_refused() {
        for m in [Msg::Kill, Msg::OutputAck { bytes: 1 }, Msg::Signal { signal: 15 }] {
            assert_eq!(first_msg(m, "s", &[1]), Err("first message is not a hello".into()));
        }
    }
}

//! Connections accepted and not authenticated yet, on a port that anyone who can reach it
//! may connect to (the tree port under ssh/rsh/Slurm, the LIBI front end's listener).
//!
//! The policy, the same on every such port: each connection has a total deadline for its
//! authentication (set by the port, from the moment it was accepted, however its bytes
//! trickle in); at most `cap` connections wait at a time; and a new connection is never
//! refused for want of room: the one that has waited longest is evicted instead. Holding
//! slots therefore blocks no one: a real peer authenticates within a round trip of
//! connecting, so to push it out an attacker has to open `cap` connections within that
//! round trip, again for every try of the peer (which retries when it is closed before its
//! setup).

use std::collections::VecDeque;

/// The pending connections of one port, each with a handle `T` that closes it when dropped
/// or used (a socket's clone to shut down, a task's abort handle), oldest first.
#[derive(Debug)]
pub struct PreAuth<T> {
    cap: usize,
    next: u64,
    pending: VecDeque<(u64, T)>,
}

/// What [`PreAuth::admit`] gives back: the new connection's ticket, and the handle of the
/// connection evicted to make room for it, which the caller closes.
#[derive(Debug)]
pub struct Admitted<T> {
    pub ticket: u64,
    pub evicted: Option<T>,
}

impl<T> PreAuth<T> {
    /// A pool of at most `cap` (at least 1) pending connections.
    pub fn new(cap: usize) -> PreAuth<T> {
        PreAuth { cap: cap.max(1), next: 0, pending: VecDeque::new() }
    }

    /// A connection was accepted: it waits, with `handle`; when the pool was full, the
    /// oldest pending connection is taken out and returned to be closed.
    pub fn admit(&mut self, handle: T) -> Admitted<T> {
        let evicted = if self.pending.len() >= self.cap {
            self.pending.pop_front().map(|p| p.1)
        } else {
            None
        };
        let ticket = self.next;
        self.next += 1;
        self.pending.push_back((ticket, handle));
        Admitted { ticket, evicted }
    }

    /// The ticket of the connection the next [`PreAuth::admit`] evicts: the oldest pending
    /// one, when the pool is full.
    pub fn next_evicted(&self) -> Option<u64> {
        if self.pending.len() < self.cap {
            return None;
        }
        self.pending.front().map(|p| p.0)
    }

    /// The connection with this ticket authenticated or failed: it no longer waits. Returns
    /// its handle, or None if it was evicted meanwhile.
    pub fn done(&mut self, ticket: u64) -> Option<T> {
        let i = self.pending.iter().position(|p| p.0 == ticket)?;
        self.pending.remove(i).map(|p| p.1)
    }

    /// Connections waiting now.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A full pool takes every new connection and evicts the one that waited longest; a
    /// connection that is done leaves room; an evicted one is done already.
    #[test]
    fn the_oldest_makes_room() {
        let mut p = PreAuth::new(3);
        let t: Vec<u64> = (0..3).map(|i| p.admit(i).ticket).collect();
        assert_eq!(p.next_evicted(), Some(t[0]));
        let a = p.admit(10);
        assert_eq!(a.evicted, Some(0));
        assert_eq!(p.done(t[0]), None, "evicted already");
        assert_eq!(p.done(t[1]), Some(1));
        assert_eq!(p.next_evicted(), None, "room is left");
        let b = p.admit(11);
        assert_eq!(b.evicted, None, "room was left");
        assert_eq!(p.len(), 3);
        assert_eq!(p.admit(12).evicted, Some(2));
        assert_eq!(p.admit(13).evicted, Some(10));
        assert_eq!(p.done(b.ticket), Some(11));
        assert_eq!(p.len(), 2);
    }
}

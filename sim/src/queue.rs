//! The event queue: a radix heap over event times. Events are never scheduled before the
//! one being handled (time is monotone), which is what a radix heap needs; it moves each
//! entry between a few buckets (plain queues, appended and drained in order) instead of
//! sifting it through a binary heap's random memory: at 100k agents the queue holds
//! millions of entries and the binary heap was a third of the simulator's time.
//!
//! Events of one instant come out in the order they were scheduled, so every run is the
//! same: a bucket only ever receives entries in scheduling order (a push appends; a
//! redistribution empties a bucket into lower buckets, which are empty then, in order), and
//! bucket 0 (the entries at the current instant) is drained from its front. Buckets keep
//! a modest allocation when drained, so the millions of moves seldom reallocate.

use std::collections::VecDeque;

/// Entries a drained bucket keeps room for.
const KEEP: usize = 4096;

pub struct RadixQueue<V> {
    last: u64,
    buckets: Vec<VecDeque<(u64, V)>>,
    /// Bit `i`: bucket `i` holds entries.
    full: u128,
    /// Of each bucket, its earliest entry's key and index (the first of that key pushed):
    /// what the next pop returns is found without redistributing ([`Self::peek`]).
    min: Vec<(u64, usize)>,
    len: usize,
}

impl<V> Default for RadixQueue<V> {
    fn default() -> Self {
        RadixQueue {
            last: 0,
            buckets: (0..=64).map(|_| VecDeque::new()).collect(),
            full: 0,
            min: vec![(u64::MAX, 0); 65],
            len: 0,
        }
    }
}

fn bucket(k: u64, last: u64) -> usize {
    if k == last {
        0
    } else {
        64 - (k ^ last).leading_zeros() as usize
    }
}

impl<V> RadixQueue<V> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Schedule `v` at time `t`, after everything already scheduled at `t`. A time before
    /// the last one popped is taken as that one (the queue never goes back).
    pub fn push(&mut self, t: u64, v: V) {
        let k = t.max(self.last);
        self.put(bucket(k, self.last), k, v);
        self.len += 1;
    }

    fn put(&mut self, i: usize, k: u64, v: V) {
        let b = &mut self.buckets[i];
        if b.is_empty() || k < self.min[i].0 {
            self.min[i] = (k, b.len());
        }
        b.push_back((k, v));
        self.full |= 1 << i;
    }

    /// What the next [`Self::pop`] returns (unless something earlier is pushed first).
    pub fn peek(&self) -> Option<&V> {
        if self.full == 0 {
            return None;
        }
        let i = self.full.trailing_zeros() as usize;
        let at = if i == 0 { 0 } else { self.min[i].1 };
        self.buckets[i].get(at).map(|(_, v)| v)
    }

    /// The earliest entry (of those at one time, the first scheduled): its time and value.
    pub fn pop(&mut self) -> Option<(u64, V)> {
        if self.len == 0 {
            return None;
        }
        if self.full & 1 == 0 {
            let i = self.full.trailing_zeros() as usize;
            let mut items = std::mem::take(&mut self.buckets[i]);
            self.full &= !(1 << i);
            self.last = self.min[i].0;
            for (k, v) in items.drain(..) {
                self.put(bucket(k, self.last), k, v);
            }
            // Every entry went below `i`: the bucket is empty. Keep a modest allocation
            // for reuse (keeping every bucket's peak would hold several queues' worth).
            if items.capacity() <= KEEP {
                self.buckets[i] = items;
            }
        }
        let (k, v) = self.buckets[0].pop_front()?;
        if self.buckets[0].is_empty() {
            self.full &= !1;
        }
        self.len -= 1;
        Some((k, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Pops come out in (time, scheduling order) order, whatever the pushes in between,
        /// as long as nothing is scheduled before the last pop.
        #[test]
        fn pops_in_key_order(ops in proptest::collection::vec((0u64..1000, any::<bool>()), 1..400)) {
            let mut q = RadixQueue::default();
            let mut reference = std::collections::BTreeSet::new();
            let mut now = 0u64;
            for (seq, (dt, pop)) in ops.into_iter().enumerate() {
                let seq = seq as u64;
                if pop {
                    let want = reference.pop_first();
                    prop_assert_eq!(q.peek().copied(), want.map(|(_, s)| s));
                    let got = q.pop();
                    prop_assert_eq!(got, want);
                    if let Some((t, _)) = want {
                        now = t;
                    }
                } else {
                    q.push(now + dt, seq);
                    reference.insert((now + dt, seq));
                }
            }
            while let Some(want) = reference.pop_first() {
                prop_assert_eq!(q.pop(), Some(want));
            }
            prop_assert!(q.is_empty());
        }
    }
}

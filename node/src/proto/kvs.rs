//! A node's KVS: every pair the node holds — its subtree's, pairs pushed down with a fence,
//! answers fetched from up the tree — in one map, each key once, with what the fence needs to
//! know about it, and the number of bytes held (keys plus values) the KVS limit is checked on.

use libi::msg::{Key, Value};
use std::collections::HashMap;

/// The map's hasher: foldhash, seeded per map (keys come from ranks, so a fixed-seed hash
/// would let a rank make every lookup collide); several times faster than SipHash on the
/// short keys of PMI, and hashing was a tenth of an NLA's time in a fence.
type Hasher = foldhash::fast::RandomState;

/// Keys and values are shared ([`Key`], [`Value`]: no spare capacity, 8 bytes less a field
/// than `String`): the copy the pending list holds and the one a fence passes on to the
/// parent or the children is the same allocation.
#[derive(Debug)]
struct Entry {
    value: Value,
    /// Fence epoch in which this subtree last wrote the key (0: never).
    written: u64,
    /// Fetched from up the tree (a cache entry).
    cached: bool,
    /// Put here, waiting in the node's pending list to be sent up.
    pending: bool,
}

#[derive(Debug, Default)]
pub struct Kvs {
    map: HashMap<Key, Entry, Hasher>,
    bytes: u64,
}

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// Growth of the bytes held (a new pair: key plus value; a replaced value: what it grew).
    pub grew: u64,
    /// The key held a value before.
    pub replaced: bool,
    /// The key must be added to the pending list (it asked for it and was not on it).
    pub queued: bool,
}

fn size(key: &str, value: &[u8]) -> u64 {
    (key.len() + value.len()) as u64
}

impl Kvs {
    /// Keys plus values of every pair held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn get(&self, key: &str) -> Option<&[u8]> {
        self.map.get(key).map(|e| &*e.value)
    }

    /// The shared value of `key` (to pass on without a copy).
    pub fn value(&self, key: &str) -> Option<Value> {
        self.map.get(key).map(|e| e.value.clone())
    }

    /// The shared key and value of `key` (to pass both on without a copy: a get's answer).
    pub fn pair(&self, key: &str) -> Option<(Key, Value)> {
        self.map.get_key_value(key).map(|(k, e)| (k.clone(), e.value.clone()))
    }

    pub fn contains(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    /// The value was fetched from up the tree.
    pub fn is_cached(&self, key: &str) -> bool {
        self.map.get(key).is_some_and(|e| e.cached)
    }

    /// A pair put in this subtree during fence `epoch` (by a local rank, or merged from a
    /// child). `pend`: it is to be sent up with this node's fence data.
    pub fn write(&mut self, key: Key, value: Value, epoch: u64, pend: bool) -> Written {
        match self.map.get_mut(&*key) {
            Some(e) => {
                let (old, new) = (e.value.len() as u64, value.len() as u64);
                self.bytes = self.bytes - old + new;
                e.value = value;
                e.written = epoch;
                e.cached = false;
                let queued = pend && !e.pending;
                e.pending |= pend;
                Written { grew: new.saturating_sub(old), replaced: true, queued }
            }
            None => {
                let grew = size(&key, &value);
                self.bytes += grew;
                let e = Entry { value, written: epoch, cached: false, pending: pend };
                self.map.insert(key, e);
                Written { grew, replaced: false, queued: pend }
            }
        }
    }

    /// Room for a release of `n` pairs about to be stored: the map holds at least `n` pairs
    /// without growing again (never more room than that: the pairs may be held already).
    pub fn reserve(&mut self, n: usize) {
        self.map.reserve(n.saturating_sub(self.map.len()));
    }

    /// A pair that arrived with a fence release (pushed down).
    pub fn store(&mut self, key: Key, value: Value) {
        match self.map.get_mut(&*key) {
            Some(e) => {
                self.bytes = self.bytes - e.value.len() as u64 + value.len() as u64;
                e.value = value;
                e.cached = false;
            }
            None => {
                self.bytes += size(&key, &value);
                let e = Entry { value, written: 0, cached: false, pending: false };
                self.map.insert(key, e);
            }
        }
    }

    /// An answer fetched from up the tree. A value written here in the meantime is newer
    /// and stays.
    pub fn cache(&mut self, key: Key, value: Value) {
        match self.map.get_mut(&*key) {
            Some(e) if !e.cached => {}
            Some(e) => {
                self.bytes = self.bytes - e.value.len() as u64 + value.len() as u64;
                e.value = value;
            }
            None => {
                self.bytes += size(&key, &value);
                let e = Entry { value, written: 0, cached: true, pending: false };
                self.map.insert(key, e);
            }
        }
    }

    /// `key` was overwritten elsewhere during fence `epoch`: drop our copy unless this
    /// subtree wrote it in that epoch too (then ours is as new).
    pub fn drop_stale(&mut self, key: &str, epoch: u64) {
        if self.map.get(key).is_some_and(|e| e.written != epoch) {
            if let Some((k, e)) = self.map.remove_entry(key) {
                self.bytes -= size(&k, &e.value);
            }
        }
    }

    /// Take `key` off the pending list: its current value, to be sent up.
    pub fn unpend(&mut self, key: &str) -> Option<Value> {
        let e = self.map.get_mut(key)?;
        if !std::mem::replace(&mut e.pending, false) {
            return None;
        }
        Some(e.value.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_follow_every_change() {
        let mut k = Kvs::default();
        assert_eq!(
            k.write("a".into(), "123".into(), 1, true),
            Written { grew: 4, replaced: false, queued: true }
        );
        assert_eq!(k.bytes(), 4);
        // a repeated put: stored once, queued once, only growth counts
        assert_eq!(
            k.write("a".into(), "12345".into(), 1, true),
            Written { grew: 2, replaced: true, queued: false }
        );
        assert_eq!(k.write("a".into(), "1".into(), 1, true).grew, 0);
        assert_eq!((k.len(), k.bytes()), (1, 2));
        assert_eq!(k.unpend("a").as_deref(), Some(&b"1"[..]));
        assert_eq!(k.unpend("a"), None);
        let (key, value) = k.pair("a").expect("held");
        assert!(std::sync::Arc::ptr_eq(&key, &k.pair("a").expect("held").0), "the map's key");
        assert_eq!((&*key, &*value), ("a", &b"1"[..]));
        assert_eq!(k.pair("zz"), None);
        k.cache("b".into(), "xx".into());
        assert!(k.is_cached("b"));
        k.cache("a".into(), "old".into());
        assert_eq!(k.get("a"), Some(&b"1"[..]), "a local value is not replaced by a fetched one");
        assert_eq!(k.bytes(), 5);
        k.store("b".into(), "y".into());
        assert!(!k.is_cached("b"));
        k.drop_stale("a", 1);
        assert!(k.contains("a"), "written in epoch 1");
        k.drop_stale("a", 2);
        k.drop_stale("b", 2);
        assert_eq!((k.len(), k.bytes()), (0, 0));
        assert!(k.is_empty());
    }
}

//! Delayed keys: a min-heap of ready times plus a map holding each key's earliest ready time.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::collections::binary_heap::{BinaryHeap, PeekMut};
use std::hash::Hash;

use tokio::time::Instant;

/// Keys waiting for their ready time, each at most once, at the earliest time requested.
///
/// `earliest` is the truth; a heap entry is current only if its `(ready_at, seq)` matches the
/// map, otherwise it is stale (superseded by an earlier time, or already promoted) and skipped.
/// Stale entries are dropped lazily, and the heap is rebuilt when they dominate it.
#[derive(Debug)]
pub(super) struct Delayed<K> {
    heap: BinaryHeap<Entry<K>>,
    earliest: HashMap<K, (Instant, u64)>,
    next_seq: u64,
}

/// A heap entry; ordered so that the max-heap pops the smallest `(ready_at, seq)` first.
#[derive(Debug)]
struct Entry<K> {
    ready_at: Instant,
    /// Insertion order: unique, and breaks ties between equal ready times (FIFO).
    seq: u64,
    key: K,
}

impl<K> PartialEq for Entry<K> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl<K> Eq for Entry<K> {}

impl<K> PartialOrd for Entry<K> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<K> Ord for Entry<K> {
    fn cmp(&self, other: &Self) -> Ordering {
        (other.ready_at, other.seq).cmp(&(self.ready_at, self.seq))
    }
}

impl<K: Clone + Eq + Hash> Delayed<K> {
    pub(super) fn new() -> Self {
        Self {
            heap: BinaryHeap::new(),
            earliest: HashMap::new(),
            next_seq: 0,
        }
    }

    /// Number of distinct waiting keys.
    pub(super) fn len(&self) -> usize {
        self.earliest.len()
    }

    /// Schedules `key` for `ready_at` unless it already waits for an earlier or equal time.
    /// Returns whether this moved the overall next deadline earlier (waiters must re-arm).
    pub(super) fn insert(&mut self, key: K, ready_at: Instant) -> bool {
        if let Some(&(at, _)) = self.earliest.get(&key)
            && at <= ready_at
        {
            return false;
        }
        let before = self.next_deadline();
        let seq = self.next_seq;
        self.next_seq += 1;
        self.earliest.insert(key.clone(), (ready_at, seq));
        self.heap.push(Entry { ready_at, seq, key });
        if self.heap.len() > 2 * self.earliest.len() + 64 {
            self.rebuild();
        }
        before.is_none_or(|before| ready_at < before)
    }

    /// Removes and returns the next key whose ready time is at or before `now`.
    pub(super) fn pop_due(&mut self, now: Instant) -> Option<K> {
        loop {
            let top = self.heap.peek_mut()?;
            if top.ready_at > now {
                return None;
            }
            let entry = PeekMut::pop(top);
            if self.is_current(&entry) {
                self.earliest.remove(&entry.key);
                return Some(entry.key);
            }
        }
    }

    /// The earliest ready time of any waiting key.
    pub(super) fn next_deadline(&mut self) -> Option<Instant> {
        while let Some(top) = self.heap.peek() {
            if self.is_current(top) {
                return Some(top.ready_at);
            }
            self.heap.pop();
        }
        None
    }

    /// Every waiting key with its ready time.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&K, Instant)> {
        self.earliest.iter().map(|(key, &(at, _))| (key, at))
    }

    /// Drops every waiting key.
    pub(super) fn clear(&mut self) {
        self.heap.clear();
        self.earliest.clear();
    }

    fn is_current(&self, entry: &Entry<K>) -> bool {
        self.earliest
            .get(&entry.key)
            .is_some_and(|&(_, seq)| seq == entry.seq)
    }

    /// Replaces the heap with exactly the current entries.
    fn rebuild(&mut self) {
        self.heap = self
            .earliest
            .iter()
            .map(|(key, &(ready_at, seq))| Entry {
                ready_at,
                seq,
                key: key.clone(),
            })
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(base: Instant, ms: u64) -> Instant {
        base + Duration::from_millis(ms)
    }

    #[test]
    fn keys_pop_in_ready_time_order_with_ties_in_insertion_order() {
        let t = Instant::now();
        let mut d = Delayed::new();
        d.insert("c", at(t, 30));
        d.insert("a", at(t, 10));
        d.insert("b", at(t, 10));
        assert_eq!(d.next_deadline(), Some(at(t, 10)));
        assert_eq!(d.pop_due(at(t, 9)), None);
        let due: Vec<_> = std::iter::from_fn(|| d.pop_due(at(t, 30))).collect();
        assert_eq!(due, ["a", "b", "c"]);
        assert_eq!(d.len(), 0);
        assert_eq!(d.next_deadline(), None);
    }

    #[test]
    fn a_key_keeps_its_earliest_ready_time() {
        let t = Instant::now();
        let mut d = Delayed::new();
        assert!(d.insert(1, at(t, 50)), "first key sets the deadline");
        assert!(!d.insert(1, at(t, 80)), "a later time is ignored");
        assert!(d.insert(1, at(t, 20)), "an earlier time wins");
        assert_eq!(d.len(), 1);
        assert_eq!(d.next_deadline(), Some(at(t, 20)));
        assert_eq!(d.pop_due(at(t, 20)), Some(1));
        // The superseded 50 ms entry is stale and never yields the key again.
        assert_eq!(d.pop_due(at(t, 100)), None);
    }

    #[test]
    fn insert_reports_only_a_new_earliest_deadline() {
        let t = Instant::now();
        let mut d = Delayed::new();
        assert!(d.insert(1, at(t, 50)));
        assert!(!d.insert(2, at(t, 60)));
        assert!(!d.insert(3, at(t, 50)), "an equal deadline needs no re-arm");
        assert!(d.insert(4, at(t, 40)));
    }

    #[test]
    fn stale_entries_are_compacted() {
        let t = Instant::now();
        let mut d = Delayed::new();
        for i in (0..10_000).rev() {
            d.insert("k", at(t, i));
        }
        assert!(
            d.heap.len() <= 2 * d.len() + 65,
            "heap has {}",
            d.heap.len()
        );
        assert_eq!(d.next_deadline(), Some(t));
        assert_eq!(d.pop_due(t), Some("k"));
        assert_eq!(d.pop_due(at(t, 20_000)), None);
    }

    #[test]
    fn clear_drops_everything() {
        let t = Instant::now();
        let mut d = Delayed::new();
        d.insert(1, at(t, 1));
        d.clear();
        assert_eq!(d.len(), 0);
        assert_eq!(d.pop_due(at(t, 5)), None);
    }
}

//! The informer cache's indexes, each entry a bitmap of the slots
//! (`table.rs`) of the objects it holds: by owner uid, by namespace, by
//! label, and of the objects that are not `Ready`.

use roaring::RoaringBitmap;

use super::super::terms::{NotReady, Terms};
use super::HashMap;
use super::table::SlotNumber;

/// The cache's indexes: by owner uid, by namespace, by label, and of the
/// objects that are not `Ready`.
///
/// Bitmaps rather than sets of keys: a label or a namespace that every
/// object of a million carries is a few kilobytes of consecutive slot
/// numbers instead of a hash set of a million keys, each hashed as it is
/// added (most of an informer's start; docs/benchmarks/scale.md).
#[derive(Default)]
pub(super) struct Indexes {
    pub(super) by_owner: HashMap<String, RoaringBitmap>,
    pub(super) by_namespace: HashMap<Option<String>, RoaringBitmap>,
    pub(super) by_label: HashMap<(String, String), RoaringBitmap>,
    /// Objects whose `Ready` condition is not `True` (the console counts
    /// and lists them without decoding every object).
    pub(super) not_ready: HashMap<SlotNumber, NotReady>,
}

impl Indexes {
    /// Indexes the object in slot `n`, in `namespace`, as `terms` say.
    pub(super) fn add(&mut self, n: SlotNumber, namespace: &Option<String>, terms: &Terms) {
        // Looked up before an entry is made: most objects share their
        // owner, namespace and labels with others, and a key copied for
        // `entry` would be an allocation per index per object.
        for uid in &terms.owners {
            add_to(&mut self.by_owner, uid, n);
        }
        add_to(&mut self.by_namespace, namespace, n);
        for label in &terms.labels {
            add_to(&mut self.by_label, label, n);
        }
        if let Some(not_ready) = terms.not_ready {
            self.not_ready.insert(n, not_ready);
        }
    }

    /// Takes the object in slot `n` out of the entries `terms` put it in.
    pub(super) fn remove(&mut self, n: SlotNumber, namespace: &Option<String>, terms: &Terms) {
        for uid in &terms.owners {
            remove_from(&mut self.by_owner, uid, n);
        }
        remove_from(&mut self.by_namespace, namespace, n);
        for label in &terms.labels {
            remove_from(&mut self.by_label, label, n);
        }
        self.not_ready.remove(&n);
    }

    /// Takes the object in slot `n` out of every index entry, its terms
    /// unknown.
    pub(super) fn remove_everywhere(&mut self, n: SlotNumber, namespace: &Option<String>) {
        for slots in self.by_owner.values_mut().chain(self.by_label.values_mut()) {
            slots.remove(n);
        }
        self.by_owner.retain(|_, slots| !slots.is_empty());
        self.by_label.retain(|_, slots| !slots.is_empty());
        remove_from(&mut self.by_namespace, namespace, n);
        self.not_ready.remove(&n);
    }
}

/// Adds slot `n` to the index entry `entry`, made if it is the first.
fn add_to<I: std::hash::Hash + Eq + Clone>(
    index: &mut HashMap<I, RoaringBitmap>,
    entry: &I,
    n: SlotNumber,
) {
    match index.get_mut(entry) {
        Some(slots) => {
            slots.insert(n);
        }
        None => {
            index.insert(entry.clone(), RoaringBitmap::from_iter([n]));
        }
    }
}

/// Removes slot `n` from the index entry `entry`, dropping the entry once
/// empty.
fn remove_from<I: std::hash::Hash + Eq>(
    index: &mut HashMap<I, RoaringBitmap>,
    entry: &I,
    n: SlotNumber,
) {
    if let Some(slots) = index.get_mut(entry) {
        slots.remove(n);
        if slots.is_empty() {
            index.remove(entry);
        }
    }
}

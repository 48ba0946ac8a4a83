//! The informer cache's objects by key: each in a numbered slot, found
//! through a hash table of slot numbers. The indexes hold slot numbers
//! (bitmaps, `indexes.rs`), not keys: a bucket of the table is four bytes
//! (the key is read from its slot), and a saved cache, whose objects are
//! numbered as their slots, is restored without hashing a key into any
//! index (docs/benchmarks/scale.md, "Informer caches in numbered slots").

use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::HashTable;

use super::Entry;
use crate::object::ObjectKey;

/// A slot's number.
pub(super) type SlotNumber = u32;

/// Objects by key, each in a numbered slot. A removed object's slot is
/// used again by a later insert, so the slots never outnumber the most
/// objects held at once.
#[derive(Default)]
pub(super) struct Table {
    slots: Vec<Option<(Arc<ObjectKey>, Entry)>>,
    /// Slots emptied by removals, used again first.
    free: Vec<SlotNumber>,
    by_key: HashTable<SlotNumber>,
    hasher: foldhash::fast::RandomState,
}

impl Table {
    /// The table holding `objects`, each in the slot of its position;
    /// the first key found twice if one is.
    pub(super) fn of_ordered(objects: Vec<(Arc<ObjectKey>, Entry)>) -> Result<Self, ObjectKey> {
        let hasher = foldhash::fast::RandomState::default();
        let hashes = hashes_of(&objects, &hasher);
        let mut by_key = HashTable::with_capacity(objects.len());
        for (number, hash) in hashes.into_iter().enumerate() {
            let fresh = by_key
                .entry(
                    hash,
                    |&n: &SlotNumber| objects[n as usize].0 == objects[number].0,
                    |&n: &SlotNumber| hasher.hash_one(&*objects[n as usize].0),
                )
                .or_insert(number as SlotNumber);
            if *fresh.get() as usize != number {
                return Err((*objects[number].0).clone());
            }
        }
        Ok(Self {
            slots: objects.into_iter().map(Some).collect(),
            free: Vec::new(),
            by_key,
            hasher,
        })
    }

    pub(super) fn len(&self) -> usize {
        self.by_key.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Whether every slot holds an object (none removed since, or all
    /// used again): slot numbers are then positions.
    pub(super) fn is_dense(&self) -> bool {
        self.free.is_empty()
    }

    /// How many slots there are, held or free.
    pub(super) fn slot_count(&self) -> usize {
        self.slots.len()
    }

    pub(super) fn reserve(&mut self, additional: usize) {
        let slots = &self.slots;
        let hasher = &self.hasher;
        self.by_key
            .reserve(additional, |&n| hasher.hash_one(&*occupied(slots, n).0));
        self.slots
            .reserve(additional.saturating_sub(self.free.len()));
    }

    fn find(&self, key: &ObjectKey) -> Option<SlotNumber> {
        let hash = self.hasher.hash_one(key);
        self.by_key
            .find(hash, |&n| *occupied(&self.slots, n).0 == *key)
            .copied()
    }

    /// The object under `key`: its slot, its key as held, its entry.
    pub(super) fn get(&self, key: &ObjectKey) -> Option<(SlotNumber, &Arc<ObjectKey>, &Entry)> {
        let n = self.find(key)?;
        let (key, entry) = occupied(&self.slots, n);
        Some((n, key, entry))
    }

    pub(super) fn get_mut(&mut self, key: &ObjectKey) -> Option<&mut Entry> {
        self.get_slot_mut(key).map(|(_, _, entry)| entry)
    }

    /// [`Table::get`], the entry to change in place.
    pub(super) fn get_slot_mut(
        &mut self,
        key: &ObjectKey,
    ) -> Option<(SlotNumber, &Arc<ObjectKey>, &mut Entry)> {
        let n = self.find(key)?;
        let (key, entry) = self.slots[n as usize].as_mut()?;
        Some((n, key, entry))
    }

    /// The object in slot `n`, if one is there.
    pub(super) fn at(&self, n: SlotNumber) -> Option<(&Arc<ObjectKey>, &Entry)> {
        self.slots
            .get(n as usize)?
            .as_ref()
            .map(|(key, entry)| (key, entry))
    }

    /// Puts `entry` under `key`, which the table does not hold; returns
    /// its slot.
    pub(super) fn insert(&mut self, key: Arc<ObjectKey>, entry: Entry) -> SlotNumber {
        debug_assert!(self.find(&key).is_none(), "{key} is held already");
        let hash = self.hasher.hash_one(&*key);
        let n = match self.free.pop() {
            Some(n) => {
                self.slots[n as usize] = Some((key, entry));
                n
            }
            None => {
                self.slots.push(Some((key, entry)));
                SlotNumber::try_from(self.slots.len() - 1)
                    .expect("fewer than 2^32 objects of one kind")
            }
        };
        let slots = &self.slots;
        let hasher = &self.hasher;
        self.by_key
            .insert_unique(hash, n, |&m| hasher.hash_one(&*occupied(slots, m).0));
        n
    }

    /// Takes the object under `key` out: its slot, its key, its entry.
    pub(super) fn remove(
        &mut self,
        key: &ObjectKey,
    ) -> Option<(SlotNumber, Arc<ObjectKey>, Entry)> {
        let hash = self.hasher.hash_one(key);
        let slots = &self.slots;
        let (n, _) = self
            .by_key
            .find_entry(hash, |&n| *occupied(slots, n).0 == *key)
            .ok()?
            .remove();
        let (key, entry) = self.slots[n as usize].take().expect("a held slot");
        if n as usize == self.slots.len() - 1 {
            self.slots.pop();
        } else {
            self.free.push(n);
        }
        Some((n, key, entry))
    }

    /// Every object with its slot, in slot order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (SlotNumber, &Arc<ObjectKey>, &Entry)> {
        self.slots.iter().enumerate().filter_map(|(n, slot)| {
            slot.as_ref()
                .map(|(key, entry)| (n as SlotNumber, key, entry))
        })
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = &Arc<ObjectKey>> {
        self.iter().map(|(_, key, _)| key)
    }
}

/// The object in slot `n`, which the table's hash table names.
fn occupied(slots: &[Option<(Arc<ObjectKey>, Entry)>], n: SlotNumber) -> &(Arc<ObjectKey>, Entry) {
    slots[n as usize]
        .as_ref()
        .expect("the table names only held slots")
}

/// Each key's hash, on two threads for a large table (hashing is a walk
/// to each key's name; inserting is the table's own work).
fn hashes_of(
    objects: &[(Arc<ObjectKey>, Entry)],
    hasher: &foldhash::fast::RandomState,
) -> Vec<u64> {
    let hash_all = |part: &[(Arc<ObjectKey>, Entry)]| -> Vec<u64> {
        part.iter()
            .map(|(key, _)| hasher.hash_one(&**key))
            .collect()
    };
    if objects.len() < 65_536 {
        return hash_all(objects);
    }
    let (first, second) = objects.split_at(objects.len() / 2);
    std::thread::scope(|scope| {
        let second = scope.spawn(|| hash_all(second));
        let mut hashes = hash_all(first);
        hashes.extend(
            second
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
        );
        hashes
    })
}

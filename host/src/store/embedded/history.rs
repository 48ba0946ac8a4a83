//! The versions of every key since compaction, in memory: reads at a past
//! revision, the value a deletion removed, and compaction cleanup look
//! here instead of in an on-disk index.
//!
//! Kept on disk, such an index cost one more random B-tree insert per write
//! (docs/benchmarks/store.md#with-the-applier-thread-and-the-in-memory-version-index-current);
//! as etcd does with its key index,
//! it is rebuilt from the `revisions` table when the store opens. The
//! applier records a batch's versions before it commits the batch, and
//! compaction drops versions only after committing their removal, so a
//! reader whose snapshot is at revision R (above the compaction point)
//! finds every version at or below R that it can need; versions above R are
//! skipped.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use crate::store::Revision;

/// One version of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Version {
    pub revision: Revision,
    /// Whether this version is a deletion.
    pub deleted: bool,
}

/// A version in one word: its revision, negated for a deletion (every
/// revision is positive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Packed(Revision);

impl Packed {
    fn new(version: Version) -> Self {
        debug_assert!(version.revision > 0);
        Self(if version.deleted {
            -version.revision
        } else {
            version.revision
        })
    }

    fn get(self) -> Version {
        Version {
            revision: self.0.abs(),
            deleted: self.0 < 0,
        }
    }
}

/// A key's versions, oldest first. One alone (most keys, once compacted)
/// is held inline: a vector of one would cost an allocation per key.
#[derive(Debug)]
enum Versions {
    One(Packed),
    Many(Vec<Packed>),
}

impl Versions {
    fn as_slice(&self) -> &[Packed] {
        match self {
            Versions::One(one) => std::slice::from_ref(one),
            Versions::Many(many) => many,
        }
    }

    fn push(&mut self, version: Packed) {
        match self {
            Versions::One(one) => *self = Versions::Many(vec![*one, version]),
            Versions::Many(many) => many.push(version),
        }
    }

    /// The newest version at or below `revision`.
    fn at(&self, revision: Revision) -> Option<Version> {
        let versions = self.as_slice();
        let newer = versions.partition_point(|v| v.get().revision <= revision);
        newer.checked_sub(1).map(|i| versions[i].get())
    }
}

/// Key → its versions, oldest first.
#[derive(Debug, Default)]
pub(super) struct History {
    keys: BTreeMap<Arc<str>, Versions>,
    /// Versions held, over all keys.
    versions: usize,
}

impl History {
    /// Adds `key`'s version at `revision`, newer than any it has.
    pub(super) fn record(&mut self, key: &str, revision: Revision, deleted: bool) {
        let version = Packed::new(Version { revision, deleted });
        match self.keys.get_mut(key) {
            Some(versions) => {
                debug_assert!(
                    (versions.as_slice().last()).is_none_or(|v| v.get().revision < revision)
                );
                versions.push(version);
            }
            None => {
                self.keys.insert(Arc::from(key), Versions::One(version));
            }
        }
        self.versions += 1;
    }

    /// `key`'s newest version at or below `revision`.
    pub(super) fn at(&self, key: &str, revision: Revision) -> Option<Version> {
        self.keys.get(key)?.at(revision)
    }

    /// The revisions of `key`'s versions in `range`.
    pub(super) fn between<'a>(
        &'a self,
        key: &str,
        range: impl std::ops::RangeBounds<Revision> + 'a,
    ) -> impl Iterator<Item = Revision> + 'a {
        self.keys
            .get(key)
            .into_iter()
            .flat_map(Versions::as_slice)
            .map(|v| v.get().revision)
            .filter(move |r| range.contains(r))
    }

    /// The keys under `prefix` (after `after`, if given) whose newest
    /// version at or below `revision` is a put, with that version's
    /// revision, in key order; at most `limit` of them (0: no limit).
    pub(super) fn visible(
        &self,
        prefix: &str,
        after: Option<&str>,
        revision: Revision,
        limit: usize,
    ) -> Vec<(Arc<str>, Revision)> {
        let start = match after {
            Some(after) => Bound::Excluded(after),
            None => Bound::Included(prefix),
        };
        let mut found = Vec::new();
        for (key, versions) in self.keys.range::<str, _>((start, Bound::Unbounded)) {
            if !key.starts_with(prefix) {
                break;
            }
            if limit != 0 && found.len() == limit {
                break;
            }
            if let Some(version) = versions.at(revision)
                && !version.deleted
            {
                found.push((key.clone(), version.revision));
            }
        }
        found
    }

    /// Forgets `key`'s versions at `revisions` (compacted away).
    pub(super) fn forget(&mut self, key: &str, revisions: &[Revision]) {
        let Some(versions) = self.keys.get_mut(key) else {
            return;
        };
        let before = versions.as_slice().len();
        let kept: Vec<Packed> = versions
            .as_slice()
            .iter()
            .copied()
            .filter(|v| !revisions.contains(&v.get().revision))
            .collect();
        self.versions -= before - kept.len();
        match kept[..] {
            [] => {
                self.keys.remove(key);
            }
            [one] => *versions = Versions::One(one),
            _ => *versions = Versions::Many(kept),
        }
    }

    /// Versions held, over all keys.
    pub(super) fn len(&self) -> usize {
        self.versions
    }

    /// Records `key`'s version at `revision` unless the index has it or a
    /// newer one already (the changes after a saved index, some of which
    /// it may hold: `index_file`).
    pub(super) fn record_if_newer(&mut self, key: &str, revision: Revision, deleted: bool) {
        let newest = self
            .keys
            .get(key)
            .and_then(|versions| versions.as_slice().last())
            .map(|v| v.get().revision);
        if newest.is_none_or(|newest| newest < revision) {
            self.record(key, revision, deleted);
        }
    }

    /// The index as bytes (`index_file`'s body): per key, in key order,
    /// the length of the prefix it shares with the key before and the rest
    /// of it, then the number of its versions and each one (its revision,
    /// negated for a deletion), all but the key bytes as LEB128 varints
    /// (zigzag for the versions). Keys under one prefix share most of it:
    /// a million Pods' index takes about 20 MB.
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.keys.len() * 24);
        let mut previous: &[u8] = &[];
        for (key, versions) in &self.keys {
            let key = key.as_bytes();
            let shared = key.iter().zip(previous).take_while(|(a, b)| a == b).count();
            put_varint(&mut out, shared as u64);
            put_varint(&mut out, (key.len() - shared) as u64);
            out.extend_from_slice(&key[shared..]);
            let versions = versions.as_slice();
            put_varint(&mut out, versions.len() as u64);
            for version in versions {
                put_varint(&mut out, zigzag(version.0));
            }
            previous = key;
        }
        out
    }

    /// The index [`History::encode`] wrote, or what is wrong with the
    /// bytes: keys out of order or not UTF-8, a key without versions,
    /// versions out of order, bytes cut short.
    pub(super) fn decode(mut body: &[u8]) -> Result<Self, String> {
        let mut keys: Vec<(Arc<str>, Versions)> = Vec::new();
        let mut versions_held = 0usize;
        let mut key: Vec<u8> = Vec::new();
        while !body.is_empty() {
            let shared = take_varint(&mut body)? as usize;
            let rest = take_varint(&mut body)? as usize;
            if shared > key.len() || rest > body.len() {
                return Err(format!("key {} runs past its bounds", keys.len()));
            }
            key.truncate(shared);
            key.extend_from_slice(&body[..rest]);
            body = &body[rest..];
            let text = std::str::from_utf8(&key)
                .map_err(|_| format!("key {} is not UTF-8", keys.len()))?;
            if keys.last().is_some_and(|(last, _)| **last >= *text) {
                return Err(format!("key {text:?} is out of order"));
            }
            let count = take_varint(&mut body)? as usize;
            if count == 0 || count > body.len() {
                return Err(format!("key {text:?} has {count} versions"));
            }
            // Most keys have one version: read into place, no vector made
            // and dropped for each (two million of them at a million
            // objects and their events).
            let mut one = [Packed(0)];
            let mut many = Vec::new();
            let packed: &mut [Packed] = if count == 1 {
                &mut one
            } else {
                many.resize(count, Packed(0));
                &mut many
            };
            for at in 0..count {
                let version = Packed(unzigzag(take_varint(&mut body)?));
                let revision = version.get().revision;
                if revision <= 0 || (at > 0 && packed[at - 1].get().revision >= revision) {
                    return Err(format!("key {text:?} has versions out of order"));
                }
                packed[at] = version;
            }
            versions_held += count;
            let versions = if count == 1 {
                Versions::One(one[0])
            } else {
                Versions::Many(many)
            };
            keys.push((Arc::from(text), versions));
        }
        Ok(Self {
            // In key order already: built in one pass, no comparisons.
            keys: BTreeMap::from_iter(keys),
            versions: versions_held,
        })
    }
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn take_varint(bytes: &mut &[u8]) -> Result<u64, String> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = bytes.split_first().ok_or("the index is cut short")?;
        *bytes = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err("a number runs past 64 bits".into())
}

fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

fn unzigzag(value: u64) -> i64 {
    ((value >> 1) as i64) ^ -((value & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history() -> History {
        let mut history = History::default();
        history.record("/a", 1, false);
        history.record("/b", 2, false);
        history.record("/a", 3, false);
        history.record("/b", 4, true);
        history.record("/c", 5, false);
        history.record("/d/x", 6, false);
        history
    }

    fn keys(found: &[(Arc<str>, Revision)]) -> Vec<(&str, Revision)> {
        found.iter().map(|(k, r)| (&**k, *r)).collect()
    }

    #[test]
    fn a_key_reads_as_its_newest_version_at_or_below_the_revision() {
        let history = history();
        assert_eq!(history.at("/a", 0), None);
        assert_eq!(history.at("/a", 2).map(|v| v.revision), Some(1));
        assert_eq!(history.at("/a", 9).map(|v| v.revision), Some(3));
        assert_eq!(
            history.at("/b", 4),
            Some(Version {
                revision: 4,
                deleted: true
            })
        );
        assert_eq!(history.between("/a", ..3).collect::<Vec<_>>(), [1]);
        assert_eq!(history.between("/b", 2..=9).collect::<Vec<_>>(), [2, 4]);
        assert_eq!(history.len(), 6);
    }

    #[test]
    fn visible_keys_skip_deletions_and_later_versions_and_honour_prefix_after_and_limit() {
        let history = history();
        assert_eq!(
            keys(&history.visible("/", None, 3, 0)),
            [("/a", 3), ("/b", 2)]
        );
        assert_eq!(
            keys(&history.visible("/", None, 6, 0)),
            [("/a", 3), ("/c", 5), ("/d/x", 6)]
        );
        assert_eq!(keys(&history.visible("/", Some("/a"), 6, 1)), [("/c", 5)]);
        assert_eq!(keys(&history.visible("/d/", None, 6, 0)), [("/d/x", 6)]);
        assert_eq!(
            keys(&history.visible("/", None, 6, 2)),
            [("/a", 3), ("/c", 5)]
        );
    }

    #[test]
    fn a_key_with_one_version_holds_it_inline_and_a_deletion_packs_into_the_word() {
        let history = history();
        assert!(matches!(history.keys["/c"], Versions::One(_)));
        assert!(matches!(history.keys["/a"], Versions::Many(_)));
        assert_eq!(
            std::mem::size_of::<Versions>(),
            24,
            "no bigger than a vector"
        );
        let deleted = Version {
            revision: 7,
            deleted: true,
        };
        assert_eq!(Packed::new(deleted).get(), deleted);
        let mut history = history;
        history.forget("/a", &[1]);
        assert!(
            matches!(history.keys["/a"], Versions::One(_)),
            "back inline"
        );
    }

    #[test]
    fn forgotten_versions_are_gone_and_so_is_a_key_without_any() {
        let mut history = history();
        history.forget("/b", &[2, 4]);
        history.forget("/a", &[1]);
        assert_eq!(history.at("/b", 9), None);
        assert_eq!(history.at("/a", 2), None);
        assert_eq!(history.at("/a", 3).map(|v| v.revision), Some(3));
        assert_eq!(history.len(), 3);
        assert_eq!(
            keys(&history.visible("/", None, 9, 0)),
            [("/a", 3), ("/c", 5), ("/d/x", 6)]
        );
    }
}

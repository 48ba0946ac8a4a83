//! A cache that reads its objects back from the store, saved to a file
//! and restored from it at the next start, so that an informer over a
//! million objects does not list them all again (each a point read of
//! the store and a parse of its terms) before its host is ready.
//!
//! What is saved is what the cache holds: each object's key and the
//! revision of its stored version, and the indexes (owners, labels, not
//! `Ready`) as lists of object numbers, at the cache's revision. The file
//! is `setpoint-informer 1\n`, a header (the revision, the number of
//! objects, a stamp, the body's length, the CRC-32 of all that and the
//! body) and the body. It is
//! trusted only whole and for this store (see [`Saved::check`]); anything
//! else is named and the informer lists as before.

use std::path::Path;
use std::sync::Arc;

use roaring::RoaringBitmap;

use super::super::terms::NotReady;
use super::table::{SlotNumber, Table};
use super::{Cache, Entry, HashMap, Source, Text};
use crate::object::ObjectKey;

/// The file's first line: its format. A change to what the indexes hold
/// of an object (`terms.rs`) is a new format: a file of the old one would
/// restore indexes that a list would no longer build.
const MAGIC: &[u8] = b"setpoint-informer 1\n";

/// The header after [`MAGIC`]: revision, objects, stamp revision, stamp
/// CRC, body length, body CRC.
const HEADER: usize = 8 + 8 + 8 + 4 + 8 + 4;

/// A cache's content as saved, read back and checked whole.
pub(in crate::informer) struct Saved {
    /// The revision the cache reflected.
    pub revision: i64,
    objects: Vec<(Arc<ObjectKey>, i64)>,
    owners: Vec<(String, Vec<u32>)>,
    labels: Vec<((String, String), Vec<u32>)>,
    not_ready: Vec<(u32, NotReady)>,
    /// The newest stored version among the objects, and the CRC-32 of its
    /// stored bytes: the store must still hold exactly that.
    stamp: (i64, u32),
    stamp_key: Option<Arc<ObjectKey>>,
}

impl Cache {
    /// The cache as a file's bytes, saved as of `revision` (its own, or
    /// later if every change of its kind up to there is in it), if every
    /// object is in the store (none held here, [`Cache::held`]) and the
    /// store holds a version to stamp the file with; `None` otherwise
    /// (save later).
    pub(in crate::informer) fn saved_bytes(&self, revision: i64) -> Option<Vec<u8>> {
        let at = revision.max(self.revision);
        let source = self.source.as_ref()?;
        if self.held != 0 {
            return None;
        }
        // An object's number in the file is its slot's, unless removals
        // left slots free: then its place among the held ones.
        let renumbered: Option<Vec<u32>> = (!self.objects.is_dense()).then(|| {
            let mut numbers = vec![u32::MAX; self.objects.slot_count()];
            for (number, (n, _, _)) in self.objects.iter().enumerate() {
                numbers[n as usize] = number as u32;
            }
            numbers
        });
        let number = |n: SlotNumber| match &renumbered {
            Some(numbers) => numbers[n as usize],
            None => n,
        };
        let mut body = Vec::with_capacity(self.objects.len() * 24);
        put_str(&mut body, &source.kind().api_version());
        put_str(&mut body, &source.kind().kind);
        put_u64(&mut body, self.objects.len() as u64);
        let mut newest: Option<(&ObjectKey, i64)> = None;
        for (_, key, entry) in self.objects.iter() {
            let Text::Stored(revision) = entry.text else {
                return None;
            };
            // A stored entry's version is its revision (`Cache::shed`);
            // anything else would not be restored as it was.
            if entry.version.as_ref().and_then(super::Version::revision) != Some(revision) {
                return None;
            }
            match &key.namespace {
                Some(namespace) => {
                    body.push(1);
                    put_str(&mut body, namespace);
                }
                None => body.push(0),
            }
            put_str(&mut body, &key.name);
            put_u64(&mut body, u64::try_from(revision).ok()?);
            if newest.is_none_or(|(_, newest)| revision > newest) {
                newest = Some((key, revision));
            }
        }
        put_u64(&mut body, self.indexes.by_owner.len() as u64);
        for (uid, slots) in &self.indexes.by_owner {
            put_str(&mut body, uid);
            put_numbers(&mut body, slots, number);
        }
        put_u64(&mut body, self.indexes.by_label.len() as u64);
        for ((name, value), slots) in &self.indexes.by_label {
            put_str(&mut body, name);
            put_str(&mut body, value);
            put_numbers(&mut body, slots, number);
        }
        put_u64(&mut body, self.indexes.not_ready.len() as u64);
        for (n, not_ready) in &self.indexes.not_ready {
            put_u64(&mut body, u64::from(number(*n)));
            body.push(u8::from(not_ready.failed) | u8::from(not_ready.hot_loop) << 1);
            match not_ready.since_unix_ms {
                Some(ms) => {
                    body.push(1);
                    body.extend_from_slice(&ms.to_le_bytes());
                }
                None => body.push(0),
            }
        }
        let stamp = match newest {
            Some((key, revision)) => {
                let stored = source.read(key, revision)?;
                (revision, crc32fast::hash(&stored.value))
            }
            None => (0, 0),
        };
        let mut file = Vec::with_capacity(MAGIC.len() + HEADER + body.len());
        file.extend_from_slice(MAGIC);
        file.extend_from_slice(&at.to_le_bytes());
        file.extend_from_slice(&(self.objects.len() as u64).to_le_bytes());
        file.extend_from_slice(&stamp.0.to_le_bytes());
        file.extend_from_slice(&stamp.1.to_le_bytes());
        file.extend_from_slice(&(body.len() as u64).to_le_bytes());
        let crc = checksum(&file[MAGIC.len()..], &body);
        file.extend_from_slice(&crc.to_le_bytes());
        file.extend_from_slice(&body);
        Some(file)
    }

    /// A cache reading from `source`, holding what `saved` holds, each
    /// object in the slot of its number; why not if the file names an
    /// object twice. Only the table hashes keys; the indexes are bitmaps of
    /// the numbers the file holds.
    pub(in crate::informer) fn restored(source: Source, saved: Saved) -> Result<Self, String> {
        let Saved {
            revision,
            objects,
            owners,
            labels,
            not_ready,
            ..
        } = saved;
        let slots_of = |mut numbers: Vec<u32>| -> RoaringBitmap {
            // Saved in order; sorted anyway, as a bitmap is made fastest
            // from sorted numbers (a repeated number is the same member).
            numbers.sort_unstable();
            numbers.dedup();
            RoaringBitmap::from_sorted_iter(numbers).expect("sorted, without repeats")
        };
        let started = std::time::Instant::now();
        let mut by_namespace: HashMap<Option<String>, RoaringBitmap> = HashMap::default();
        // Objects of one namespace usually come together: a run of them
        // is one bitmap, merged into its namespace's when the run ends.
        let mut run: Option<(&Option<String>, RoaringBitmap)> = None;
        for (n, (key, _)) in (0..).zip(&objects) {
            match &mut run {
                Some((namespace, slots)) if **namespace == key.namespace => {
                    // `n` rises along the file: appended, not searched for.
                    slots.try_push(n).expect("numbers rise");
                }
                _ => {
                    if let Some((namespace, slots)) = run.take() {
                        *by_namespace.entry(namespace.clone()).or_default() |= slots;
                    }
                    run = Some((&key.namespace, RoaringBitmap::from_iter([n])));
                }
            }
        }
        if let Some((namespace, slots)) = run {
            *by_namespace.entry(namespace.clone()).or_default() |= slots;
        }
        let by_owner: HashMap<String, RoaringBitmap> = owners
            .into_iter()
            .map(|(uid, numbers)| (uid, slots_of(numbers)))
            .collect();
        let by_label: HashMap<(String, String), RoaringBitmap> = labels
            .into_iter()
            .map(|(label, numbers)| (label, slots_of(numbers)))
            .collect();
        let not_ready: HashMap<SlotNumber, NotReady> = not_ready.into_iter().collect();
        let indexes_took = started.elapsed();
        let entries = objects
            .into_iter()
            .map(|(key, revision)| {
                let version = Some(super::Version::Revision(revision));
                (key, Entry::new(Text::Stored(revision), version))
            })
            .collect();
        let table = Table::of_ordered(entries).map_err(|key| format!("it names {key} twice"))?;
        tracing::debug!(
            ?indexes_took,
            table_took = ?started.elapsed() - indexes_took,
            "informer's saved cache built: the indexes, the table"
        );
        let mut cache = Cache::reading_from(source);
        cache.revision = revision;
        cache.objects = table;
        cache.indexes.by_namespace = by_namespace;
        cache.indexes.by_owner = by_owner;
        cache.indexes.by_label = by_label;
        cache.indexes.not_ready = not_ready;
        Ok(cache)
    }
}

impl Saved {
    /// Reads a saved cache of `source`'s kind from `bytes`; why not if it
    /// is not one whole.
    pub(in crate::informer) fn read(bytes: &[u8], source: &Source) -> Result<Self, String> {
        let rest = bytes
            .strip_prefix(MAGIC)
            .ok_or("not a saved informer cache of this format")?;
        if rest.len() < HEADER {
            return Err(format!("cut short: {} bytes", bytes.len()));
        }
        let (header, body) = rest.split_at(HEADER);
        let i64_at =
            |at: usize| i64::from_le_bytes(header[at..at + 8].try_into().expect("8 bytes"));
        let u32_at =
            |at: usize| u32::from_le_bytes(header[at..at + 4].try_into().expect("4 bytes"));
        let revision = i64_at(0);
        let count = i64_at(8) as u64;
        let stamp = (i64_at(16), u32_at(24));
        let body_len = i64_at(28) as u64;
        let body_crc = u32_at(36);
        if body.len() as u64 != body_len {
            return Err(format!(
                "its body is {} bytes, its header says {body_len}",
                body.len()
            ));
        }
        if checksum(&header[..HEADER - 4], body) != body_crc {
            return Err("it fails its CRC-32".into());
        }
        let mut reader = Reader { bytes: body };
        let (api_version, kind) = (reader.str()?, reader.str()?);
        if api_version != source.kind().api_version() || kind != source.kind().kind {
            return Err(format!("it holds {api_version} {kind}, not this kind"));
        }
        let objects_len = reader.u64()?;
        if objects_len != count || count > u64::from(u32::MAX) {
            return Err(format!(
                "it counts {count} objects in its header, {objects_len} in its body"
            ));
        }
        let mut objects = Vec::with_capacity(count as usize);
        let mut stamp_key = None;
        for _ in 0..count {
            let namespace = match reader.byte()? {
                0 => None,
                1 => Some(reader.str()?.to_owned()),
                other => return Err(format!("a namespace marked {other}")),
            };
            let name = reader.str()?.to_owned();
            let text = i64::try_from(reader.u64()?).map_err(|_| "a revision out of range")?;
            if text > revision {
                return Err(format!(
                    "an object at {text}, after its revision {revision}"
                ));
            }
            let key = Arc::new(ObjectKey { namespace, name });
            if text == stamp.0 {
                stamp_key = Some(key.clone());
            }
            objects.push((key, text));
        }
        let numbers = |reader: &mut Reader| -> Result<Vec<u32>, String> {
            let len = reader.u64()?;
            (0..len)
                .map(|_| {
                    let n = reader.u64()?;
                    if n >= count {
                        return Err(format!("object number {n} of {count}"));
                    }
                    Ok(n as u32)
                })
                .collect()
        };
        let owners = (0..reader.u64()?)
            .map(|_| Ok((reader.str()?.to_owned(), numbers(&mut reader)?)))
            .collect::<Result<Vec<_>, String>>()?;
        let labels = (0..reader.u64()?)
            .map(|_| {
                let label = (reader.str()?.to_owned(), reader.str()?.to_owned());
                Ok((label, numbers(&mut reader)?))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let not_ready = (0..reader.u64()?)
            .map(|_| {
                let n = reader.u64()?;
                if n >= count {
                    return Err(format!("object number {n} of {count}"));
                }
                let flags = reader.byte()?;
                let since_unix_ms = match reader.byte()? {
                    0 => None,
                    1 => Some(i64::from_le_bytes(
                        reader.take(8)?.try_into().expect("8 bytes"),
                    )),
                    other => return Err(format!("a time marked {other}")),
                };
                let not_ready = NotReady {
                    failed: flags & 1 != 0,
                    hot_loop: flags & 2 != 0,
                    since_unix_ms,
                };
                Ok((n as u32, not_ready))
            })
            .collect::<Result<Vec<_>, String>>()?;
        if !reader.bytes.is_empty() {
            return Err(format!("{} bytes after its end", reader.bytes.len()));
        }
        if count > 0 && stamp_key.is_none() {
            return Err(format!("no object at its stamp's revision {}", stamp.0));
        }
        Ok(Self {
            revision,
            objects,
            owners,
            labels,
            not_ready,
            stamp,
            stamp_key,
        })
    }

    /// Whether `source`'s store is the one this was saved from, at or
    /// after its revision: the newest version it names is still stored,
    /// byte for byte (a store restored from a backup, or another store's
    /// directory, fails this). Why not, if not.
    pub(in crate::informer) fn check(&self, source: &Source) -> Result<(), String> {
        if self.revision > source.readable() {
            return Err(format!(
                "saved at revision {}, after the store's {}",
                self.revision,
                source.readable()
            ));
        }
        let Some(key) = &self.stamp_key else {
            return Ok(());
        };
        match source.read(key, self.stamp.0) {
            Some(stored) if crc32fast::hash(&stored.value) == self.stamp.1 => Ok(()),
            Some(_) => Err(format!(
                "{key} at revision {} is not what it saved",
                self.stamp.0
            )),
            None => Err(format!(
                "the store no longer holds {key} at revision {}",
                self.stamp.0
            )),
        }
    }

    /// How many objects it holds.
    pub(in crate::informer) fn len(&self) -> usize {
        self.objects.len()
    }
}

/// The CRC-32 of a file's header (but the CRC) and body.
fn checksum(header: &[u8], body: &[u8]) -> u32 {
    let mut crc = crc32fast::Hasher::new();
    crc.update(header);
    crc.update(body);
    crc.finalize()
}

/// Writes `bytes` to `path` whole or not at all: beside it, synced, then
/// renamed over it and the directory synced.
pub(in crate::informer) fn write_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    crate::files::replace(path, &path.with_extension("new"), bytes)
}

fn put_u64(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn put_str(out: &mut Vec<u8>, text: &str) {
    put_u64(out, text.len() as u64);
    out.extend_from_slice(text.as_bytes());
}

fn put_numbers(out: &mut Vec<u8>, slots: &RoaringBitmap, number: impl Fn(SlotNumber) -> u32) {
    put_u64(out, slots.len());
    for n in slots {
        put_u64(out, u64::from(number(n)));
    }
}

/// Reads a body's varints and strings, failing on a cut.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], String> {
        if self.bytes.len() < len {
            return Err("its body is cut short".into());
        }
        let (taken, rest) = self.bytes.split_at(len);
        self.bytes = rest;
        Ok(taken)
    }

    fn byte(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u64(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.byte()?;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("a number too long".into())
    }

    fn str(&mut self) -> Result<&'a str, String> {
        let len = usize::try_from(self.u64()?).map_err(|_| "a length out of range")?;
        std::str::from_utf8(self.take(len)?).map_err(|_| "text that is not UTF-8".into())
    }
}

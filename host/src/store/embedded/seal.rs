//! The seal a clean close leaves beside the database, `store.redb.seal`:
//! the file's length and a CRC-32 of each MiB of it, taken once the
//! database is closed. An open that finds the file matching its seal byte
//! for byte knows it is exactly the file the close left, and skips redb's
//! integrity check, which walks every reachable page twice (what that
//! costs and what the seal costs instead: docs/benchmarks/scale.md, "A
//! clean stop leaves a seal").
//!
//! The seal is what lets a start after a clean stop be quick without
//! trusting the file blindly: every byte is still read and checked, in large
//! sequential reads on every core instead of a page-by-page walk. A seal
//! that is missing, damaged, or that the file does not match sends the open
//! to the full check, as before, and the log names what differed; damage
//! is then refused by the check as it always was (or, in space no page
//! uses, is harmless and named).
//!
//! The seal is removed, and the removal made durable, before the database
//! is opened for writing: a seal never outlives the bytes it describes, and
//! the open after a crash always runs the full check. It is written beside
//! (`store.redb.seal.new`), synced and renamed into place, the directory
//! synced, so a crash while sealing leaves no seal (a leftover `.new` is
//! removed at the next open) or a whole one.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// The seal's file in the data directory.
pub(super) const FILE: &str = "store.redb.seal";

/// Where a new seal is written before it is renamed over [`FILE`].
pub(super) const NEW_FILE: &str = "store.redb.seal.new";

/// The first line: the format.
const MAGIC: &[u8] = b"setpoint-seal 1\n";

/// Bytes covered by one CRC. Small enough that a damaged chunk is named
/// closely, large enough that the seal of a 4 GB file is 16 KB.
const CHUNK: u64 = 1 << 20;

/// Chunks a reading thread takes at a time.
const CHUNKS_PER_TAKE: u64 = 8;

/// Reading threads at most (the reads are from the page cache or the disk,
/// CRC-32 runs at several GB/s a core).
const MAX_THREADS: usize = 4;

/// A database file's length and the CRC-32 of each [`CHUNK`] of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Seal {
    len: u64,
    crcs: Vec<u32>,
}

/// What an open finds beside the database.
#[derive(Debug)]
pub(super) enum Found {
    /// No seal: the store was never closed cleanly, or was opened since.
    Missing,
    /// The file is byte for byte what the close sealed.
    Matches,
    /// A seal that cannot be trusted or that the file does not match, and
    /// why.
    Mismatch(String),
}

impl Seal {
    /// Reads `file` whole and takes its seal.
    pub(super) fn take(file: &Path) -> io::Result<Seal> {
        let file = File::open(file)?;
        let len = file.metadata()?.len();
        let count = chunk_count(len);
        let crcs: Vec<AtomicU32> = (0..count).map(|_| AtomicU32::new(0)).collect();
        read_chunks(&file, len, |index, bytes| {
            crcs[index as usize].store(crc32fast::hash(bytes), Ordering::Relaxed);
            true
        })?;
        Ok(Seal {
            len,
            crcs: crcs.into_iter().map(AtomicU32::into_inner).collect(),
        })
    }

    /// The first chunk of `file` that differs from this seal, or `None`
    /// if every byte matches. Stops at the first difference it finds.
    fn first_difference(&self, file: &Path) -> io::Result<Option<String>> {
        let file = File::open(file)?;
        let len = file.metadata()?.len();
        if len != self.len {
            return Ok(Some(format!(
                "it is {len} bytes long, the file closed was {}",
                self.len
            )));
        }
        let first = AtomicU64::new(u64::MAX);
        read_chunks(&file, len, |index, bytes| {
            if crc32fast::hash(bytes) == self.crcs[index as usize] {
                true
            } else {
                first.fetch_min(index, Ordering::Relaxed);
                false
            }
        })?;
        let first = first.into_inner();
        Ok((first != u64::MAX).then(|| {
            let start = first * CHUNK;
            format!(
                "its bytes {start}..{} differ from the file closed",
                (start + CHUNK).min(len)
            )
        }))
    }

    /// The seal's file contents.
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(MAGIC.len() + 16 + 4 * self.crcs.len() + 4);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&CHUNK.to_le_bytes());
        for crc in &self.crcs {
            out.extend_from_slice(&crc.to_le_bytes());
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// The seal in `bytes`, or what is wrong with them.
    fn decode(bytes: &[u8]) -> Result<Seal, String> {
        let Some(body) = bytes.strip_prefix(MAGIC) else {
            return Err("it does not start as a seal of this format".into());
        };
        let whole_len = bytes.len();
        if body.len() < 20 || (body.len() - 20) % 4 != 0 {
            return Err(format!("it is {whole_len} bytes long, which no seal is"));
        }
        let (sealed, crc) = bytes.split_at(whole_len - 4);
        if crc32fast::hash(sealed) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
            return Err("its CRC-32 does not match its contents".into());
        }
        let len = u64::from_le_bytes(body[..8].try_into().expect("8 bytes"));
        let chunk = u64::from_le_bytes(body[8..16].try_into().expect("8 bytes"));
        if chunk != CHUNK {
            return Err(format!("it is in chunks of {chunk} bytes, not {CHUNK}"));
        }
        let crcs: Vec<u32> = body[16..body.len() - 4]
            .chunks_exact(4)
            .map(|crc| u32::from_le_bytes(crc.try_into().expect("4 bytes")))
            .collect();
        if crcs.len() as u64 != chunk_count(len) {
            return Err(format!(
                "it holds {} CRCs for a file of {len} bytes",
                crcs.len()
            ));
        }
        Ok(Seal { len, crcs })
    }

    /// Writes the seal into `dir`: beside, synced, renamed into place, the
    /// directory synced.
    pub(super) fn write(&self, dir: &Path) -> io::Result<()> {
        crate::files::replace(&dir.join(FILE), &dir.join(NEW_FILE), &self.encode())
    }
}

/// Whether the database `file` in `dir` matches the seal beside it.
pub(super) fn check(dir: &Path, file: &Path) -> Found {
    let path = dir.join(FILE);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Found::Missing,
        Err(err) => return Found::Mismatch(format!("the seal cannot be read ({err})")),
    };
    let seal = match Seal::decode(&bytes) {
        Ok(seal) => seal,
        Err(why) => return Found::Mismatch(format!("the seal is damaged: {why}")),
    };
    match seal.first_difference(file) {
        Ok(None) => Found::Matches,
        Ok(Some(difference)) => Found::Mismatch(format!(
            "{} does not match its seal: {difference}",
            file.display()
        )),
        Err(err) => Found::Mismatch(format!("{} cannot be read ({err})", file.display())),
    }
}

/// Removes the seal and any half-written one from `dir`, durably: from
/// here on the file may change.
pub(super) fn remove(dir: &Path) -> io::Result<()> {
    let mut removed = false;
    for name in [FILE, NEW_FILE] {
        match std::fs::remove_file(dir.join(name)) {
            Ok(()) => removed = true,
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => return Err(err),
        }
    }
    if removed {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

fn chunk_count(len: u64) -> u64 {
    len.div_ceil(CHUNK)
}

/// Reads `file` (`len` bytes) a [`CHUNK`] at a time on up to
/// [`MAX_THREADS`] threads, calling `each(index, bytes)` for every chunk;
/// stops early once `each` returns false.
fn read_chunks(file: &File, len: u64, each: impl Fn(u64, &[u8]) -> bool + Sync) -> io::Result<()> {
    let count = chunk_count(len);
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(MAX_THREADS)
        .min(usize::try_from(count.div_ceil(CHUNKS_PER_TAKE)).unwrap_or(usize::MAX))
        .max(1);
    let next = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let read = || -> io::Result<()> {
        let mut buffer = vec![0u8; CHUNK as usize];
        while !stop.load(Ordering::Relaxed) {
            let first = next.fetch_add(CHUNKS_PER_TAKE, Ordering::Relaxed);
            if first >= count {
                break;
            }
            for index in first..(first + CHUNKS_PER_TAKE).min(count) {
                let start = index * CHUNK;
                let bytes = &mut buffer[..(len - start).min(CHUNK) as usize];
                if let Err(err) = file.read_exact_at(bytes, start) {
                    stop.store(true, Ordering::Relaxed);
                    return Err(err);
                }
                if !each(index, bytes) {
                    stop.store(true, Ordering::Relaxed);
                    return Ok(());
                }
            }
        }
        Ok(())
    };
    std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads).map(|_| scope.spawn(read)).collect();
        let mut result = read();
        for helper in helpers {
            let joined = helper.join().unwrap_or_else(|_| {
                Err(io::Error::other("a thread reading the database panicked"))
            });
            result = result.and(joined);
        }
        result
    })
}

#[cfg(test)]
mod tests;

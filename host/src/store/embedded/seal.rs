//! The seal of the database file, `store.redb.seal`, and the journal of
//! what was written since (`seal/journal.rs`): together they let an open,
//! after a clean stop or a crash alike, verify every byte that cannot have
//! changed by reading the file in large sequential reads on every core,
//! instead of redb's integrity check, which walks every reachable page
//! twice (what each costs: docs/benchmarks/scale.md, "A seal kept at every
//! checkpoint").
//!
//! The seal holds the file's length and a CRC-32 of each [`BLOCK`] of it,
//! as of the start of its *generation*. Before redb writes a block for the
//! first time in a generation, the block is recorded in the journal
//! (`store.redb.journal.0` and `.1`, by the generation's parity) with that
//! generation; a length change records the blocks between the two ends.
//! After each checkpoint (redb's durable, two-phase commit) a thread of the
//! store starts a new generation and seals again: it recomputes the CRCs of
//! the blocks recorded since the last seal, writes the new seal beside,
//! syncs it and renames it into place.
//!
//! An open reads the seal and the journal records of its generation and
//! later. Every block no such record names must match its CRC; the blocks
//! the records name are what was written after the seal was taken: pages
//! of commits after the last checkpoint, which redb's recovery never reads
//! (they were free in the last durable commit), and, if the crash came
//! between a checkpoint and its seal, that checkpoint's pages, which its
//! two-phase commit synced before it was made current. A block that
//! differs and that no record names, a seal or a journal record that is
//! damaged, or a length the records do not explain, sends the open to the
//! full check, and the log names what differed; damage is then refused by
//! the check as it always was.
//!
//! Records are written (not synced) before the data: after a process
//! crash the operating system holds both, in that order. After a power
//! loss a record may be lost while its data is not; the block then differs
//! unexplained, which is the full check again, never a block trusted that
//! should not be. Before the open writes anything, it seals the file as it
//! found it (the blocks the journal named, or every block after a full
//! check) and empties the journal.

mod journal;

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub(super) use journal::Sealer;

/// The seal's file in the data directory.
pub(super) const FILE: &str = "store.redb.seal";

/// Where a new seal is written before it is renamed over [`FILE`].
pub(super) const NEW_FILE: &str = "store.redb.seal.new";

/// The first line: the format.
const MAGIC: &[u8] = b"setpoint-seal 2\n";

/// Bytes covered by one CRC and named by one journal record: small enough
/// that the blocks a crash leaves unverified are few, large enough that
/// the seal of a 4 GB file is 256 KB.
pub(super) const BLOCK: u64 = 64 << 10;

/// Bytes a reading thread reads at a time.
const READ: u64 = 1 << 20;

/// Reading threads at most (the reads are from the page cache or the disk,
/// CRC-32 runs at several GB/s a core).
const MAX_THREADS: usize = 4;

/// A database file's length and the CRC-32 of each [`BLOCK`] of it, as of
/// the start of `generation`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Seal {
    generation: u64,
    len: u64,
    crcs: Vec<u32>,
}

/// What an open finds beside the database.
#[derive(Debug)]
pub(super) enum Found {
    /// No seal: the store was never opened by this build, or sealing
    /// failed.
    Missing,
    /// Every block the journal does not name matches the seal.
    Matches(Verified),
    /// A seal or journal that cannot be trusted, or a block that differs
    /// unexplained, and why.
    Mismatch(String),
}

/// A file found as sealed: its seal, and the blocks written since, which
/// were not verified.
#[derive(Debug)]
pub(super) struct Verified {
    seal: Seal,
    written: Blocks,
    /// The highest generation the journal holds records of.
    last_generation: u64,
}

impl Verified {
    /// Blocks written after the seal was taken (not verified).
    pub(super) fn written(&self) -> u64 {
        self.written.count()
    }
}

impl Seal {
    /// A seal of `len` bytes whose CRCs are all still to be taken.
    fn empty(generation: u64, len: u64) -> Seal {
        Seal {
            generation,
            len,
            crcs: vec![0; usize::try_from(block_count(len)).expect("blocks fit in memory")],
        }
    }

    /// This seal with the CRCs of the blocks in `only` (every block if
    /// `None`) read again from `file`. A block the file is now too short
    /// for keeps the CRC of what is left of it: such a block is named by
    /// the journal, which is what makes it unverified.
    fn updated(mut self, file: &Path, only: Option<&Blocks>) -> io::Result<Seal> {
        let handle = File::open(file)?;
        let crcs: Vec<std::sync::atomic::AtomicU32> = self
            .crcs
            .iter()
            .map(|&crc| std::sync::atomic::AtomicU32::new(crc))
            .collect();
        read_blocks(&handle, self.len, only, |index, bytes| {
            crcs[index as usize].store(crc32fast::hash(bytes), Ordering::Relaxed);
            true
        })?;
        self.crcs = crcs.into_iter().map(|crc| crc.into_inner()).collect();
        Ok(self)
    }

    /// This seal for a file now `len` bytes long, of `generation`: the
    /// blocks past either end are to be taken again (the journal names
    /// them).
    fn resized(&self, generation: u64, len: u64) -> Seal {
        let mut crcs = self.crcs.clone();
        crcs.resize(
            usize::try_from(block_count(len)).expect("blocks fit in memory"),
            0,
        );
        Seal {
            generation,
            len,
            crcs,
        }
    }

    /// The first block of `file` that differs from this seal and that
    /// `written` does not name, or `None`. Stops at the first difference
    /// it finds.
    fn first_difference(&self, file: &Path, written: &Blocks) -> io::Result<Option<String>> {
        let handle = File::open(file)?;
        let len = handle.metadata()?.len();
        if len != self.len {
            // Only growth or a cut the journal recorded: every block
            // between the two ends is named.
            let (low, high) = (len.min(self.len), len.max(self.len));
            let unexplained =
                (low / BLOCK..block_count(high)).find(|&block| !written.contains(block));
            if let Some(block) = unexplained {
                return Ok(Some(format!(
                    "it is {len} bytes long, the seal says {} and the journal does not say \
                     why (block at {} not written since)",
                    self.len,
                    block * BLOCK
                )));
            }
        }
        let first = AtomicU64::new(u64::MAX);
        let checked_len = len.min(self.len);
        let unwritten = written.complement(block_count(checked_len));
        read_blocks(&handle, checked_len, Some(&unwritten), |index, bytes| {
            if crc32fast::hash(bytes) == self.crcs[index as usize] {
                true
            } else {
                first.fetch_min(index, Ordering::Relaxed);
                false
            }
        })?;
        let first = first.into_inner();
        Ok((first != u64::MAX).then(|| {
            let start = first * BLOCK;
            format!(
                "its bytes {start}..{} differ from the seal, and were not written since",
                (start + BLOCK).min(len)
            )
        }))
    }

    /// The seal's file contents.
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(MAGIC.len() + 24 + 4 * self.crcs.len() + 4);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.generation.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&BLOCK.to_le_bytes());
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
        if body.len() < 28 || (body.len() - 28) % 4 != 0 {
            return Err(format!("it is {whole_len} bytes long, which no seal is"));
        }
        let (sealed, crc) = bytes.split_at(whole_len - 4);
        if crc32fast::hash(sealed) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
            return Err("its CRC-32 does not match its contents".into());
        }
        let word = |at: usize| u64::from_le_bytes(body[at..at + 8].try_into().expect("8 bytes"));
        let (generation, len, block) = (word(0), word(8), word(16));
        if block != BLOCK {
            return Err(format!("it is in blocks of {block} bytes, not {BLOCK}"));
        }
        let crcs: Vec<u32> = body[24..body.len() - 4]
            .chunks_exact(4)
            .map(|crc| u32::from_le_bytes(crc.try_into().expect("4 bytes")))
            .collect();
        if crcs.len() as u64 != block_count(len) {
            return Err(format!(
                "it holds {} CRCs for a file of {len} bytes",
                crcs.len()
            ));
        }
        Ok(Seal {
            generation,
            len,
            crcs,
        })
    }

    /// Writes the seal into `dir`: beside, synced, renamed into place, the
    /// directory synced.
    fn write(&self, dir: &Path) -> io::Result<()> {
        crate::files::replace(&dir.join(FILE), &dir.join(NEW_FILE), &self.encode())
    }
}

/// Whether the database `file` in `dir` matches the seal beside it, but
/// for the blocks its journal names.
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
    let (written, last_generation) = match journal::read(dir, seal.generation) {
        Ok(read) => read,
        Err(why) => return Found::Mismatch(why),
    };
    match seal.first_difference(file, &written) {
        Ok(None) => Found::Matches(Verified {
            seal,
            written,
            last_generation,
        }),
        Ok(Some(difference)) => Found::Mismatch(format!(
            "{} does not match its seal: {difference}",
            file.display()
        )),
        Err(err) => Found::Mismatch(format!("{} cannot be read ({err})", file.display())),
    }
}

fn block_count(len: u64) -> u64 {
    len.div_ceil(BLOCK)
}

/// A set of blocks, by index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Blocks {
    words: Vec<u64>,
}

impl Blocks {
    /// Adds `block`; whether it was new.
    fn insert(&mut self, block: u64) -> bool {
        let (word, bit) = ((block / 64) as usize, block % 64);
        if word >= self.words.len() {
            self.words.resize(word + 1, 0);
        }
        let new = self.words[word] & (1 << bit) == 0;
        self.words[word] |= 1 << bit;
        new
    }

    fn contains(&self, block: u64) -> bool {
        self.words
            .get((block / 64) as usize)
            .is_some_and(|word| word & (1 << (block % 64)) != 0)
    }

    fn union(&mut self, other: &Blocks) {
        if other.words.len() > self.words.len() {
            self.words.resize(other.words.len(), 0);
        }
        for (mine, theirs) in self.words.iter_mut().zip(&other.words) {
            *mine |= theirs;
        }
    }

    fn count(&self) -> u64 {
        self.words.iter().map(|w| u64::from(w.count_ones())).sum()
    }

    /// The blocks below `count` not in this set.
    fn complement(&self, count: u64) -> Blocks {
        let mut out = Blocks {
            words: vec![u64::MAX; count.div_ceil(64) as usize],
        };
        for (theirs, mine) in out.words.iter_mut().zip(&self.words) {
            *theirs &= !mine;
        }
        if !count.is_multiple_of(64)
            && let Some(last) = out.words.last_mut()
        {
            *last &= (1 << (count % 64)) - 1;
        }
        out
    }
}

/// Reads the first `len` bytes of `file` on up to [`MAX_THREADS`] threads,
/// [`READ`] bytes at a time, calling `each(index, bytes)` for every
/// [`BLOCK`] in `only` (every block if `None`); stops early once `each`
/// returns false. Bytes past the file's end are left out of the last
/// block.
fn read_blocks(
    file: &File,
    len: u64,
    only: Option<&Blocks>,
    each: impl Fn(u64, &[u8]) -> bool + Sync,
) -> io::Result<()> {
    let per_read = READ / BLOCK;
    let count = block_count(len);
    let reads = count.div_ceil(per_read);
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(MAX_THREADS)
        .min(usize::try_from(reads).unwrap_or(usize::MAX))
        .max(1);
    let wanted = |block: u64| only.is_none_or(|only| only.contains(block));
    let next = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let read = || -> io::Result<()> {
        let mut buffer = vec![0u8; READ as usize];
        while !stop.load(Ordering::Relaxed) {
            let at = next.fetch_add(1, Ordering::Relaxed);
            if at >= reads {
                break;
            }
            let blocks = at * per_read..((at + 1) * per_read).min(count);
            // Read only the span of wanted blocks in this stretch.
            let (Some(first), Some(last)) = (
                blocks.clone().find(|&b| wanted(b)),
                blocks.clone().rev().find(|&b| wanted(b)),
            ) else {
                continue;
            };
            let start = first * BLOCK;
            let end = ((last + 1) * BLOCK).min(len);
            let bytes = &mut buffer[..(end - start) as usize];
            let got = read_up_to(file, bytes, start)?;
            for block in first..=last {
                if !wanted(block) {
                    continue;
                }
                let from = ((block - first) * BLOCK) as usize;
                let to = (from + BLOCK as usize).min(got);
                if !each(block, &bytes[from.min(to)..to]) {
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
        if result.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        for helper in helpers {
            let joined = helper.join().unwrap_or_else(|_| {
                Err(io::Error::other("a thread reading the database panicked"))
            });
            result = result.and(joined);
        }
        result
    })
}

/// Reads into `out` from `offset` until it is full or the file ends;
/// returns the bytes read.
fn read_up_to(file: &File, out: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut got = 0;
    while got < out.len() {
        match file.read_at(&mut out[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests;

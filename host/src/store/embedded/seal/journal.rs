//! The journal of blocks written since the seal, and the [`Sealer`] that
//! records each write in it and seals the file again after every
//! checkpoint (what the two promise each other: `seal.rs`).
//!
//! A record is 24 bytes: the generation (u64 LE), the first block (u64
//! LE), the number of blocks (u32 LE) and a CRC-32 of those 20 bytes.
//! Generation `g` appends to `store.redb.journal.{g % 2}`; once the seal of
//! generation `g` is on disk, the records of `g - 1` and before are stale,
//! so the next generation, `g + 1`, empties the other file before it
//! appends.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use super::{BLOCK, Blocks, FILE, Found, NEW_FILE, Seal, block_count};

/// The journal's two files, by a generation's parity.
pub(in crate::store::embedded) const FILES: [&str; 2] =
    ["store.redb.journal.0", "store.redb.journal.1"];

const RECORD: usize = 24;

fn encode(generation: u64, first: u64, count: u32) -> [u8; RECORD] {
    let mut record = [0u8; RECORD];
    record[..8].copy_from_slice(&generation.to_le_bytes());
    record[8..16].copy_from_slice(&first.to_le_bytes());
    record[16..20].copy_from_slice(&count.to_le_bytes());
    let crc = crc32fast::hash(&record[..20]);
    record[20..].copy_from_slice(&crc.to_le_bytes());
    record
}

/// The blocks the journal in `dir` names with `generation` or later, and
/// the latest generation it holds; or what is wrong with it.
pub(super) fn read(dir: &Path, generation: u64) -> Result<(Blocks, u64), String> {
    let mut written = Blocks::default();
    let mut last = 0;
    for name in FILES {
        let bytes = match std::fs::read(dir.join(name)) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
            Err(err) => return Err(format!("the journal {name} cannot be read ({err})")),
        };
        if bytes.len() % RECORD != 0 {
            return Err(format!(
                "the journal {name} is damaged: {} bytes is not a whole number of records",
                bytes.len()
            ));
        }
        for (n, record) in bytes.chunks_exact(RECORD).enumerate() {
            let crc = u32::from_le_bytes(record[20..].try_into().expect("4 bytes"));
            if crc32fast::hash(&record[..20]) != crc {
                return Err(format!(
                    "the journal {name} is damaged: record {n} fails its CRC-32"
                ));
            }
            let record_generation = u64::from_le_bytes(record[..8].try_into().expect("8 bytes"));
            let first = u64::from_le_bytes(record[8..16].try_into().expect("8 bytes"));
            let count = u32::from_le_bytes(record[16..20].try_into().expect("4 bytes"));
            last = last.max(record_generation);
            if record_generation >= generation {
                for block in first..first.saturating_add(u64::from(count)) {
                    written.insert(block);
                }
            }
        }
    }
    Ok((written, last))
}

/// Keeps the seal of the open database current: the database file's
/// backend makes every write and length change through it
/// ([`Sealer::write`], [`Sealer::set_len`]), which records it first; the applier asks for a new
/// seal after every checkpoint ([`Sealer::request`]), which a thread of its
/// own takes; the close seals once more after the database is closed
/// ([`Sealer::finish`]).
#[derive(Debug)]
pub(in crate::store::embedded) struct Sealer {
    dir: PathBuf,
    file: PathBuf,
    state: Mutex<State>,
    /// Wakes the sealing thread.
    wake: Condvar,
    /// One seal at a time.
    sealing: Mutex<()>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Debug)]
struct State {
    /// The generation writes are recorded under.
    generation: u64,
    journals: [File; 2],
    /// Where each journal file ends.
    ends: [u64; 2],
    /// Blocks recorded in this generation (recorded once each).
    recorded: Blocks,
    /// Blocks of earlier generations whose seal failed.
    unsealed: Blocks,
    /// The length the database last set.
    len: u64,
    /// The seal on disk; `None` once there is none to keep current.
    seal: Option<Seal>,
    /// The seal of the previous generation is on disk, so the records of
    /// the one before are stale.
    previous_sealed: bool,
    /// Writes are recorded (false once the journal failed: there is then
    /// no seal on disk, until the next seal of every block).
    journaling: bool,
    /// A seal is asked for.
    wanted: bool,
    stopping: bool,
}

impl Sealer {
    /// Seals the database `file` in `dir` as the open found it, before it
    /// is opened for writing: the blocks `found` says were written since
    /// its seal, or every block if it did not match; then empties the
    /// journal, so that records start anew.
    pub(in crate::store::embedded) fn open(
        dir: &Path,
        file: &Path,
        found: Found,
    ) -> io::Result<Arc<Sealer>> {
        for name in [FILES[0], FILES[1], NEW_FILE] {
            match std::fs::remove_file(dir.join(name)) {
                Ok(()) => {}
                Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                Err(err) => return Err(err),
            }
        }
        let journals = [
            open_journal(&dir.join(FILES[0]))?,
            open_journal(&dir.join(FILES[1]))?,
        ];
        // Emptied durably before the new seal names a generation the old
        // records might share.
        File::open(dir)?.sync_all()?;
        let len = std::fs::metadata(file)?.len();
        let seal = match found {
            Found::Matches(verified) => {
                let generation = verified.seal.generation.max(verified.last_generation) + 1;
                verified
                    .seal
                    .resized(generation, len)
                    .updated(file, Some(&verified.written))?
            }
            Found::Missing | Found::Mismatch(_) => Seal::empty(1, len).updated(file, None)?,
        };
        seal.write(dir)?;
        Ok(Arc::new(Sealer {
            dir: dir.to_path_buf(),
            file: file.to_path_buf(),
            state: Mutex::new(State {
                generation: seal.generation,
                journals,
                ends: [0, 0],
                recorded: Blocks::default(),
                unsealed: Blocks::default(),
                len,
                seal: Some(seal),
                previous_sealed: true,
                journaling: true,
                wanted: false,
                stopping: false,
            }),
            wake: Condvar::new(),
            sealing: Mutex::new(()),
            thread: Mutex::new(None),
        }))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts the thread that seals when asked.
    pub(in crate::store::embedded) fn start(self: &Arc<Self>) -> io::Result<()> {
        let sealer = self.clone();
        let thread = std::thread::Builder::new()
            .name("store-sealer".into())
            .spawn(move || {
                loop {
                    {
                        let mut state = sealer.state();
                        while !state.wanted && !state.stopping {
                            state = sealer
                                .wake
                                .wait(state)
                                .unwrap_or_else(PoisonError::into_inner);
                        }
                        if state.stopping {
                            return;
                        }
                        state.wanted = false;
                    }
                    sealer.seal();
                    // Seals follow checkpoints, seconds apart at the
                    // least: give its buffers back at once.
                    crate::memory::release();
                }
            })?;
        *self.thread.lock().unwrap_or_else(PoisonError::into_inner) = Some(thread);
        Ok(())
    }

    /// Asks for a new seal (after a checkpoint); returns at once.
    pub(in crate::store::embedded) fn request(&self) {
        self.state().wanted = true;
        self.wake.notify_one();
    }

    /// Records that `len` bytes at `offset` are about to be written, then
    /// writes them with `write`. Under the state's lock: a new generation
    /// does not start between the record and the write, which would leave
    /// the write unrecorded in the generation it lands in.
    pub(in crate::store::embedded) fn write<T>(
        &self,
        offset: u64,
        len: usize,
        write: impl FnOnce() -> io::Result<T>,
    ) -> io::Result<T> {
        let mut state = self.state();
        if len > 0 {
            let end = offset + len as u64;
            self.record_blocks(&mut state, offset / BLOCK, block_count(end))?;
        }
        write()
    }

    /// Records that the file is about to be `len` bytes long, then sets
    /// it with `set_len` (under the lock, as [`Sealer::write`]).
    pub(in crate::store::embedded) fn set_len<T>(
        &self,
        len: u64,
        set_len: impl FnOnce() -> io::Result<T>,
    ) -> io::Result<T> {
        let mut state = self.state();
        let old = state.len;
        if old != len {
            self.record_blocks(&mut state, old.min(len) / BLOCK, block_count(old.max(len)))?;
        }
        state.len = len;
        set_len()
    }

    /// Records the blocks `first..end` not yet recorded in this generation.
    fn record_blocks(&self, state: &mut State, first: u64, end: u64) -> io::Result<()> {
        if !state.journaling {
            return Ok(());
        }
        let generation = state.generation;
        let mut records = Vec::new();
        let mut run: Option<(u64, u32)> = None;
        for block in first..end {
            if state.recorded.insert(block) {
                match &mut run {
                    Some((start, count)) if *start + u64::from(*count) == block => *count += 1,
                    _ => {
                        if let Some((start, count)) = run.take() {
                            records.extend_from_slice(&encode(generation, start, count));
                        }
                        run = Some((block, 1));
                    }
                }
            }
        }
        if let Some((start, count)) = run {
            records.extend_from_slice(&encode(generation, start, count));
        }
        if records.is_empty() {
            return Ok(());
        }
        let parity = (generation % 2) as usize;
        let at = state.ends[parity];
        match state.journals[parity].write_all_at(&records, at) {
            Ok(()) => {
                state.ends[parity] = at + records.len() as u64;
                Ok(())
            }
            Err(err) => {
                // The write must not happen unrecorded under a seal: no
                // seal then, until the next seal of every block.
                tracing::warn!(file = %self.file.display(), %err, "the store's journal failed: the file is unsealed until the next checkpoint");
                remove_seal(&self.dir)?;
                state.journaling = false;
                state.seal = None;
                Ok(())
            }
        }
    }

    /// Seals the file as it is now: starts a new generation, takes the
    /// CRCs of the blocks recorded since the last seal (of every block if
    /// there is none), writes the seal. Writes may go on meanwhile: they
    /// are recorded under the new generation. A failure is logged; the
    /// blocks are then taken again by the next seal.
    fn seal(&self) {
        let _one = self.sealing.lock().unwrap_or_else(PoisonError::into_inner);
        let (generation, base, written, len) = {
            let mut state = self.state();
            let generation = state.generation + 1;
            let parity = (generation % 2) as usize;
            if state.previous_sealed {
                // Stale: the records of two generations ago.
                if state.journals[parity].set_len(0).is_ok() {
                    state.ends[parity] = 0;
                }
            }
            state.generation = generation;
            let mut written = std::mem::take(&mut state.recorded);
            written.union(&std::mem::take(&mut state.unsealed));
            let base = if state.journaling {
                state.seal.clone()
            } else {
                state.journaling = true;
                None
            };
            (generation, base, written, state.len)
        };
        let result = match &base {
            Some(base) => base
                .resized(generation, len)
                .updated(&self.file, Some(&written)),
            None => Seal::empty(generation, len).updated(&self.file, None),
        }
        .and_then(|seal| seal.write(&self.dir).map(|()| seal));
        let mut state = self.state();
        match result {
            Ok(seal) => {
                state.seal = Some(seal);
                state.previous_sealed = true;
            }
            Err(err) => {
                tracing::warn!(file = %self.file.display(), %err, "sealing the store's file failed: an open after a crash checks the blocks written since the last seal in full");
                state.unsealed.union(&written);
                if base.is_none() {
                    state.seal = None;
                }
                state.previous_sealed = false;
            }
        }
    }

    /// After the database is closed: stops the sealing thread and, if the
    /// database holds every write, seals the file as closed; otherwise
    /// removes the seal, so that the next open checks every page.
    pub(in crate::store::embedded) fn finish(&self, holds_every_write: bool) {
        self.state().stopping = true;
        self.wake.notify_one();
        if let Some(thread) = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = thread.join();
        }
        if holds_every_write {
            self.seal();
        } else if let Err(err) = remove_seal(&self.dir) {
            tracing::warn!(file = %self.file.display(), %err, "removing the seal of a store closed with its log kept failed");
        }
    }
}

fn open_journal(path: &Path) -> io::Result<File> {
    File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
}

/// Removes the seal from `dir`, durably.
fn remove_seal(dir: &Path) -> io::Result<()> {
    match std::fs::remove_file(dir.join(FILE)) {
        Ok(()) => File::open(dir)?.sync_all(),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err),
    }
}

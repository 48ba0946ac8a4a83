//! The database file with room reserved on disk ahead of redb's writes, so
//! that a full disk shows up as a refused write instead of a failed commit.
//!
//! Why: redb treats any failed write or sync as fatal for the open
//! database (every later read and write then fails with `PreviousIo`), and
//! a full disk fails its writes: a durable commit writes into the parts of
//! the file the store grew meanwhile, which are holes until written. Here
//! the file's blocks are reserved (`fallocate`) when it grows, plus
//! [`HEADROOM`] beyond its end for the growth of the next commits, so redb
//! writes only where room is already taken. When room cannot be reserved
//! the growth still happens (as a hole) and [`Room`] says the disk is
//! full: the writer then refuses new writes, checkpoints wait, and once a
//! retry reserves everything up to the end again, writes resume. A file
//! system that cannot reserve (`fallocate` unsupported) gets plain growth
//! and no such protection.

use std::fs::File;
use std::io;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};

use super::seal::Sealer;
use super::wal::{is_no_space, reserve};

/// Room reserved beyond the file's end: more than one commit grows it by.
const HEADROOM: u64 = 8 << 20;

/// How far the database file has room reserved, shared by the file (which
/// reserves as it grows) and the writer (which refuses writes while room
/// is short).
#[derive(Debug, Default)]
pub(super) struct Room {
    /// Bytes from the start of the file whose room is reserved.
    reserved: AtomicU64,
    /// The file system cannot reserve: nothing to track.
    unsupported: AtomicBool,
    /// Why room is short, while it is.
    short: Mutex<Option<String>>,
    /// The same, for the writer's check before every batch.
    is_short: AtomicBool,
}

impl Room {
    /// Why the database file lacks room, while it does.
    pub(super) fn short(&self) -> Option<String> {
        if !self.is_short.load(Ordering::Acquire) {
            return None;
        }
        self.short
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_short(&self, why: Option<String>) {
        let mut short = self.short.lock().unwrap_or_else(PoisonError::into_inner);
        self.is_short.store(why.is_some(), Ordering::Release);
        *short = why;
    }

    /// Reserves room in `file` up to `len` plus [`HEADROOM`]; on a full
    /// disk, notes that room is short (and returns the error).
    fn reserve_up_to(&self, file: &File, len: u64, path: &str) -> io::Result<()> {
        if self.unsupported.load(Ordering::Acquire) {
            return Ok(());
        }
        let from = self.reserved.load(Ordering::Acquire).min(len);
        let to = len + HEADROOM;
        match reserve(file, from, to - from, true) {
            Ok(()) => {
                self.reserved.store(to, Ordering::Release);
                self.set_short(None);
                Ok(())
            }
            Err(err) if is_no_space(&err) => {
                // At least what the file holds, if that fits.
                if reserve(file, from, len.saturating_sub(from), true).is_ok() {
                    self.reserved.fetch_max(len, Ordering::AcqRel);
                }
                self.set_short(Some(format!(
                    "no room to grow the database file {path} to {len} bytes: {err}"
                )));
                Err(err)
            }
            Err(err) => {
                tracing::warn!(file = path, error = %err, "reserving room for the database file failed; it grows without");
                self.unsupported.store(true, Ordering::Release);
                Ok(())
            }
        }
    }
}

/// The database file: redb's own file backend, with room reserved as it
/// grows, and every write and length change recorded for the seal
/// (`seal.rs`) before it is made.
#[derive(Debug)]
pub(super) struct RoomyFile {
    inner: FileBackend,
    sealer: Arc<Sealer>,
    /// The same open file, for `fallocate` (never for locks or a second
    /// database).
    file: File,
    room: Arc<Room>,
    path: String,
}

impl RoomyFile {
    /// Wraps `file` (the database, opened for reading and writing) and
    /// reserves room up to its end and beyond. A disk too full for that
    /// only leaves `room` short.
    pub(super) fn new(
        file: File,
        room: Arc<Room>,
        sealer: Arc<Sealer>,
        path: &std::path::Path,
    ) -> io::Result<Self> {
        let handle = file.try_clone()?;
        let len = file.metadata()?.len();
        let path = path.display().to_string();
        let _ = room.reserve_up_to(&handle, len, &path);
        Ok(Self {
            inner: FileBackend::new(file).map_err(io::Error::other)?,
            sealer,
            file: handle,
            room,
            path,
        })
    }
}

/// After the disk was full: reserves room up to the database file's end
/// again. `Ok` once there is.
pub(super) fn retry(room: &Room, path: &std::path::Path) -> io::Result<()> {
    if room.short().is_none() {
        return Ok(());
    }
    let file = File::options().read(true).write(true).open(path)?;
    let len = file.metadata()?.len();
    room.reserve_up_to(&file, len, &path.display().to_string())
}

impl StorageBackend for RoomyFile {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.inner.read(offset, out)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        if len > self.room.reserved.load(Ordering::Acquire) {
            // Growing without room leaves a hole (and the writer refusing
            // writes); failing here would fail the database for good.
            let _ = self.room.reserve_up_to(&self.file, len, &self.path);
        } else {
            // Shrinking gives back the room past the new end.
            self.room.reserved.fetch_min(len, Ordering::AcqRel);
        }
        self.sealer.set_len(len, || self.inner.set_len(len))
    }

    fn sync_data(&self) -> io::Result<()> {
        self.inner.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.sealer
            .write(offset, data.len(), || self.inner.write(offset, data))
    }

    fn close(&self) -> io::Result<()> {
        self.inner.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.inner.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.query_lock_range(start, end)
    }
}

//! The log's I/O seam: every file operation the log's writing side does
//! (create, allocate, write, sync, rename, remove), behind a trait, so that
//! tests put a faulty file system in its place and fail one operation at an
//! exact point, as redb's crash tests do with its storage backend.
//!
//! [`Disk`] is the real one. The log is generic over the seam (static
//! dispatch): the write path makes the same two calls per batch (a write
//! and a sync) as it did on [`File`] directly. Reading the log at open is
//! not behind the seam; it only reads.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// The file-system operations of the log's writing side.
pub(in crate::store::embedded) trait LogIo:
    Send + Sync + 'static
{
    /// An open segment file.
    type File: LogFile;

    /// Creates `path` (emptying it if it exists), for reading and writing.
    fn create(&self, path: &Path) -> io::Result<Self::File>;

    /// Renames `from` to `to`, replacing `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;

    /// Makes the directory's entries (creations, renames, removals) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;

    /// Removes `path`.
    fn remove(&self, path: &Path) -> io::Result<()>;
}

/// An open segment file.
pub(in crate::store::embedded) trait LogFile: Send + 'static {
    /// Writes all of `bytes` at `offset`.
    fn write_at(&mut self, bytes: &[u8], offset: u64) -> io::Result<()>;

    /// Gives the file `len` bytes, reserved on disk where the file system
    /// can (so that writes inside them cannot run out of space); a file
    /// system that cannot reserve gets a file of that length without.
    fn allocate(&mut self, len: u64) -> io::Result<()>;

    /// Makes the written data durable (`fdatasync`).
    fn sync_data(&mut self) -> io::Result<()>;

    /// Makes the data and the file's length durable (`fsync`).
    fn sync_all(&mut self) -> io::Result<()>;
}

/// The real file system.
#[derive(Debug, Clone, Copy, Default)]
pub(in crate::store::embedded) struct Disk;

impl LogIo for Disk {
    type File = File;

    fn create(&self, path: &Path) -> io::Result<File> {
        File::options()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }
}

impl LogFile for File {
    fn write_at(&mut self, bytes: &[u8], offset: u64) -> io::Result<()> {
        self.write_all_at(bytes, offset)
    }

    fn allocate(&mut self, len: u64) -> io::Result<()> {
        reserve(self, 0, len, false)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        File::sync_data(self)
    }

    fn sync_all(&mut self) -> io::Result<()> {
        File::sync_all(self)
    }
}

/// Reserves `len` bytes of `file` from `offset` on disk (`fallocate`),
/// beyond its end too when `keep_size` (the file's length then stays).
/// Where the file system cannot reserve, the file only gets its length
/// (unless `keep_size`, where nothing is done). Running out of space is an
/// error either way.
pub(in crate::store::embedded) fn reserve(
    file: &File,
    offset: u64,
    len: u64,
    keep_size: bool,
) -> io::Result<()> {
    let flags = if keep_size {
        rustix::fs::FallocateFlags::KEEP_SIZE
    } else {
        rustix::fs::FallocateFlags::empty()
    };
    match rustix::fs::fallocate(file, flags, offset, len) {
        Ok(()) => Ok(()),
        Err(err) if is_unsupported(err) => {
            if !keep_size && file.metadata()?.len() < offset + len {
                file.set_len(offset + len)?;
            }
            Ok(())
        }
        Err(err) => Err(err.into()),
    }
}

/// Whether `fallocate` failed because the file system does not do it.
fn is_unsupported(err: rustix::io::Errno) -> bool {
    use rustix::io::Errno;
    [Errno::OPNOTSUPP, Errno::NOSYS, Errno::INVAL].contains(&err)
}

/// Whether `err` says the disk (or the user's quota) is full.
pub(in crate::store::embedded) fn is_no_space(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::StorageFull
        || err.kind() == io::ErrorKind::QuotaExceeded
        || matches!(
            err.raw_os_error(),
            Some(code) if code == rustix::io::Errno::NOSPC.raw_os_error()
                || code == rustix::io::Errno::DQUOT.raw_os_error()
        )
}

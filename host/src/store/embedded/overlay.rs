//! A copy-on-write view of a database file for redb: reads come from the
//! file, writes stay in memory. Opening a database through it lets redb run
//! its full integrity check (and any repair it would do) without changing a
//! byte on disk, so damage is reported before anything is written.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::{Mutex, MutexGuard};

/// Granularity of the in-memory copies.
const CHUNK: u64 = 4096;

/// A read-only file plus an in-memory layer of everything written to it.
#[derive(Debug)]
pub(super) struct Overlay {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    file: File,
    /// Bytes of the file still visible (shrinking hides the rest for good).
    file_len: u64,
    /// The length redb sees.
    len: u64,
    /// Chunks written, by chunk index.
    chunks: BTreeMap<u64, Box<[u8]>>,
}

impl Overlay {
    /// Wraps a file opened for reading only.
    pub(super) fn new(file: File) -> io::Result<Self> {
        let len = file.metadata()?.len();
        Ok(Self {
            inner: Mutex::new(Inner {
                file,
                file_len: len,
                len,
                chunks: BTreeMap::new(),
            }),
        })
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Inner {
    /// Reads `out.len()` bytes at `offset` from the file, zeros past its
    /// visible end.
    fn read_file(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        if offset >= self.file_len {
            out.fill(0);
            return Ok(());
        }
        let available = usize::try_from(self.file_len - offset).unwrap_or(usize::MAX);
        let n = out.len().min(available);
        out[n..].fill(0);
        self.file.read_exact_at(&mut out[..n], offset)
    }

    /// The chunk `index`, copied into the overlay if it was not yet.
    fn chunk_mut(&mut self, index: u64) -> io::Result<&mut [u8]> {
        if !self.chunks.contains_key(&index) {
            let mut data = vec![0; CHUNK as usize].into_boxed_slice();
            self.read_file(index * CHUNK, &mut data)?;
            self.chunks.insert(index, data);
        }
        Ok(self.chunks.get_mut(&index).expect("chunk inserted above"))
    }
}

impl redb::StorageBackend for Overlay {
    fn len(&self) -> io::Result<u64> {
        Ok(self.inner().len)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let inner = self.inner();
        let end = offset + out.len() as u64;
        if end > inner.len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "read of {offset}..{end} past the end of the file ({})",
                    inner.len
                ),
            ));
        }
        // Most reads touch no chunk written (a check writes little): one
        // read of the file then, not one per chunk.
        let written = inner
            .chunks
            .range(offset / CHUNK..end.div_ceil(CHUNK))
            .next()
            .is_some();
        if !written {
            return inner.read_file(offset, out);
        }
        let mut pos = offset;
        while pos < end {
            let index = pos / CHUNK;
            let within = (pos % CHUNK) as usize;
            let n = ((CHUNK - pos % CHUNK).min(end - pos)) as usize;
            let dest = &mut out[(pos - offset) as usize..][..n];
            match inner.chunks.get(&index) {
                Some(chunk) => dest.copy_from_slice(&chunk[within..within + n]),
                None => inner.read_file(pos, dest)?,
            }
            pos += n as u64;
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut inner = self.inner();
        if len < inner.len {
            inner.file_len = inner.file_len.min(len);
            let first_gone = len.div_ceil(CHUNK);
            inner.chunks.split_off(&first_gone);
            if !len.is_multiple_of(CHUNK)
                && let Some(last) = inner.chunks.get_mut(&(len / CHUNK))
            {
                last[(len % CHUNK) as usize..].fill(0);
            }
        }
        inner.len = len;
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut inner = self.inner();
        let end = offset + data.len() as u64;
        let mut pos = offset;
        while pos < end {
            let within = (pos % CHUNK) as usize;
            let n = ((CHUNK - pos % CHUNK).min(end - pos)) as usize;
            let chunk = inner.chunk_mut(pos / CHUNK)?;
            chunk[within..within + n].copy_from_slice(&data[(pos - offset) as usize..][..n]);
            pos += n as u64;
        }
        inner.len = inner.len.max(end);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Seek, SeekFrom, Write};

    use redb::StorageBackend;

    use super::*;

    #[test]
    fn writes_stay_in_memory_and_reads_see_them() {
        let mut tmp = tempfile::tempfile().unwrap();
        tmp.write_all(&[1u8; 10_000]).unwrap();
        let overlay = Overlay::new(tmp.try_clone().unwrap()).unwrap();
        overlay.write(4090, &[2; 20]).unwrap();
        let mut out = [0u8; 30];
        overlay.read(4080, &mut out).unwrap();
        assert_eq!(&out[..10], &[1; 10]);
        assert_eq!(&out[10..], &[2; 20]);
        overlay.set_len(4095).unwrap();
        overlay.set_len(9000).unwrap();
        let mut out = [9u8; 10];
        overlay.read(4090, &mut out).unwrap();
        assert_eq!(out, [2, 2, 2, 2, 2, 0, 0, 0, 0, 0]);
        assert!(overlay.read(8995, &mut [0; 10]).is_err());
        // The file itself is unchanged.
        let mut on_disk = Vec::new();
        tmp.seek(SeekFrom::Start(0)).unwrap();
        tmp.read_to_end(&mut on_disk).unwrap();
        assert_eq!(on_disk, vec![1u8; 10_000]);
    }
}

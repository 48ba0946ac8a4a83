//! Files the host writes whole or not at all: the version index, the
//! store's seal, the informers' saved caches and the controllers'
//! checkpoints all replace their last copy the same way.

use std::io::{self, Write};
use std::path::Path;

/// Writes `bytes` to `path` whole or not at all: to `beside` first,
/// synced, then renamed over `path` and the directory synced, so a crash
/// leaves the old file or the new one (and perhaps a partial `beside`,
/// which the next write replaces). Creates the directory if needed.
pub(crate) fn replace(path: &Path, beside: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut file = std::fs::File::create(beside)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(beside, path)?;
    std::fs::File::open(dir)?.sync_all()
}

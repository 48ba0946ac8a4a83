//! Watching the plugins directory: a debounced `notify` watcher that turns
//! bursts of file events (truncate, write, rename, editor temporaries) into
//! one "look again" signal. What changed is not trusted from the events: the
//! host rescans the directory and compares each file with what it runs,
//! which handles atomic renames, partial writes and missed events alike.

use std::path::Path;
use std::time::Duration;

use notify_debouncer_full::notify::{RecommendedWatcher, RecursiveMode};
use notify_debouncer_full::{DebounceEventResult, Debouncer, RecommendedCache, new_debouncer};
use tokio::sync::mpsc;

/// How long the directory must be quiet before the host looks again.
pub const DEBOUNCE: Duration = Duration::from_millis(200);

/// A running watcher; dropping it stops watching.
pub struct DirWatcher {
    _debouncer: Debouncer<RecommendedWatcher, RecommendedCache>,
}

/// Why the directory cannot be watched.
#[derive(Debug, thiserror::Error)]
#[error("cannot watch {path}: {detail}")]
pub struct WatchError {
    /// The directory.
    pub path: std::path::PathBuf,
    /// The watcher's error.
    pub detail: String,
}

/// Watch `dir` (not recursively). Each message on the returned channel means
/// "something in the directory changed; rescan it". Messages are coalesced:
/// at most one is pending at a time.
pub fn watch_dir(dir: &Path) -> Result<(DirWatcher, mpsc::Receiver<()>), WatchError> {
    let (tx, rx) = mpsc::channel(1);
    let handler = move |result: DebounceEventResult| {
        match result {
            Ok(events) if events.is_empty() => return,
            Ok(_) => {}
            Err(errors) => {
                // Rescan anyway: the events may have been lost.
                for err in errors {
                    tracing::warn!(%err, "plugins directory watcher error");
                }
            }
        }
        // Full means a rescan is already pending, which covers this change.
        let _ = tx.try_send(());
    };
    let error = |e: notify_debouncer_full::notify::Error| WatchError {
        path: dir.to_owned(),
        detail: e.to_string(),
    };
    let mut debouncer = new_debouncer(DEBOUNCE, None, handler).map_err(error)?;
    debouncer
        .watch(dir, RecursiveMode::NonRecursive)
        .map_err(error)?;
    Ok((
        DirWatcher {
            _debouncer: debouncer,
        },
        rx,
    ))
}

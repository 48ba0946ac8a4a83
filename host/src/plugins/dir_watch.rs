//! Watching the plugins directory: one "look again" signal for each burst
//! of changes. With the `notify` feature (the `setpoint` binary has it), a
//! debounced `notify` watcher turns the OS's file events (truncate, write,
//! rename, editor temporaries) into the signal; without it (an embedder's
//! default build, which then needs no file-event library), the directory's
//! listing is compared every [`POLL`]. What changed is never trusted from
//! the signal: the host rescans the directory and compares each file with
//! what it runs, which handles atomic renames, partial writes and missed
//! events alike.

use std::path::Path;
use std::time::Duration;

#[cfg(feature = "notify")]
use notify_debouncer_full::notify::{RecommendedWatcher, RecursiveMode};
#[cfg(feature = "notify")]
use notify_debouncer_full::{DebounceEventResult, Debouncer, RecommendedCache, new_debouncer};
use tokio::sync::mpsc;

/// How long the directory must be quiet before the host looks again.
pub const DEBOUNCE: Duration = Duration::from_millis(200);

/// How often the directory's listing is compared without the `notify`
/// feature.
pub const POLL: Duration = Duration::from_millis(500);

/// A running watcher; dropping it stops watching.
pub struct DirWatcher {
    #[cfg(feature = "notify")]
    _debouncer: Option<Debouncer<RecommendedWatcher, RecommendedCache>>,
    poller: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for DirWatcher {
    fn drop(&mut self) {
        if let Some(poller) = &self.poller {
            poller.abort();
        }
    }
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
#[cfg(feature = "notify")]
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
            _debouncer: Some(debouncer),
            poller: None,
        },
        rx,
    ))
}

/// Watch `dir` (not recursively). Each message on the returned channel means
/// "something in the directory changed; rescan it". Messages are coalesced:
/// at most one is pending at a time. Without the `notify` feature this is
/// [`poll_dir`]. Must be called inside a tokio runtime.
#[cfg(not(feature = "notify"))]
pub fn watch_dir(dir: &Path) -> Result<(DirWatcher, mpsc::Receiver<()>), WatchError> {
    poll_dir(dir)
}

/// Watch `dir` (not recursively) by comparing its listing (names, sizes,
/// modification times) every [`POLL`]; messages as for [`watch_dir`]. Must
/// be called inside a tokio runtime.
pub fn poll_dir(dir: &Path) -> Result<(DirWatcher, mpsc::Receiver<()>), WatchError> {
    let (tx, rx) = mpsc::channel(1);
    let listing =
        |dir: &Path| -> std::io::Result<Vec<(std::ffi::OsString, u64, std::time::SystemTime)>> {
            let mut entries = Vec::new();
            for entry in std::fs::read_dir(dir)? {
                let entry = entry?;
                let meta = entry.metadata()?;
                entries.push((entry.file_name(), meta.len(), meta.modified()?));
            }
            entries.sort();
            Ok(entries)
        };
    let mut last = listing(dir).map_err(|e| WatchError {
        path: dir.to_owned(),
        detail: e.to_string(),
    })?;
    let dir = dir.to_owned();
    let poller = tokio::spawn(async move {
        let mut tick = tokio::time::interval(POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let dir = dir.clone();
            let now = tokio::task::spawn_blocking(move || listing(&dir)).await;
            match now {
                Ok(Ok(now)) if now != last => {
                    last = now;
                    // Full means a rescan is already pending.
                    let _ = tx.try_send(());
                }
                Ok(Ok(_)) => {}
                Ok(Err(err)) => tracing::warn!(%err, "cannot list the plugins directory"),
                Err(_) => return,
            }
            if tx.is_closed() {
                return;
            }
        }
    });
    Ok((
        DirWatcher {
            #[cfg(feature = "notify")]
            _debouncer: None,
            poller: Some(poller),
        },
        rx,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_file_written_into_the_directory_is_signalled_by_polling() {
        let dir = tempfile::tempdir().unwrap();
        let (watcher, mut changes) = poll_dir(dir.path()).unwrap();
        std::fs::write(dir.path().join("a.wasm"), b"x").unwrap();
        tokio::time::timeout(Duration::from_secs(10), changes.recv())
            .await
            .expect("signalled")
            .expect("open");
        drop(watcher);
        assert!(
            tokio::time::timeout(Duration::from_secs(10), changes.recv())
                .await
                .expect("closed once the watcher is dropped")
                .is_none()
        );
    }
}

//! When an informer over the embedded store saves its cache and how it
//! starts from the saved one (the file's format is `cache/saved.rs`).
//!
//! At start, instead of listing every object, the informer reads the
//! cache it saved, checks it against the store, and catches up with the
//! store's changes since its revision (its history, as a controller
//! resuming from its checkpoint does); the watch follows from there. What
//! it then holds is what a list at that revision would have given, and
//! its handlers are told it as they are told a first list. A file that is
//! missing, damaged, of another store or kind, or older than the store's
//! compaction is named in the log and the informer lists.
//!
//! A cache of at least [`SAVE_FROM`] objects is saved once no change of
//! its kind has come for [`QUIET`] (a save holds the cache while it is
//! encoded, so it waits for a pause rather than stall a busy watch), at
//! most once every [`BETWEEN_SAVES`], written beside the last file, synced
//! and renamed over it. A kind never quiet is not saved: its next start
//! lists, as it always did. A file is saved at the revision the informer
//! has delivered through ([`Informer::delivered`]), changes of other kinds
//! included, and saved again, though its kind has not changed, once the
//! store has moved [`RESAVE_BEHIND`] revisions past it: a start catches up
//! through every change after the file's revision, of any kind, and a
//! quiet kind in a busy store would otherwise have more to go through at
//! each start.
//!
//! [`Informer::delivered`]: super::Informer::delivered
//!
//! The history a saved cache catches up from is held back from the
//! compactor ([`Api::hold_history`], from each save and from a start that
//! read the file), within the compactor's bound: a host killed a while
//! after its last save still starts from its file instead of listing.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::Inner;
use super::cache::{Cache, Listed, Saved, Source, read_terms, saved};
use crate::api::Api;
use crate::object::KindInfo;
use crate::store::EventKind;

/// The fewest objects worth saving: a smaller cache lists in moments.
pub(super) const SAVE_FROM: usize = 10_000;

/// How long no change of the kind must have come before a save.
pub(super) const QUIET: Duration = Duration::from_secs(2);

/// The least time between two saves: a kind written every few seconds
/// is not written out whole every few seconds (a start catches up with
/// what changed since, from the store's history).
pub(super) const BETWEEN_SAVES: Duration = Duration::from_secs(60);

/// How far the store may move past a saved file of a kind that has not
/// changed before it is saved again: the changes a start reads through
/// (of other kinds: a quiet kind's start caught up through 89,000 of them
/// in half a second; docs/benchmarks/scale.md, "A seal kept at every
/// checkpoint").
pub(super) const RESAVE_BEHIND: i64 = 10_000;

/// The file a cache of `kind` is saved to over `api`'s store, if the
/// store keeps such files.
fn file_of(api: &Api, kind: &KindInfo) -> Option<PathBuf> {
    let dir = api.backend().version_reader()?.saved_dir()?;
    let name = format!("{}.{}", kind.api_version().replace('/', "_"), kind.kind);
    Some(dir.join(name))
}

/// The revisions a start from a saved cache stands at.
#[derive(Debug, Clone, Copy)]
pub(super) struct Restored {
    /// Where the watch goes on from: the cache is caught up to here.
    pub until: i64,
    /// The file's revision.
    pub saved: i64,
}

/// The cache saved for `inner`'s kind, caught up with the store: given to
/// `inner` as its first list. Returns where it stands, or `None` (logged)
/// if the informer must list.
pub(super) async fn restore(inner: &Arc<Inner>, api: &Api) -> Option<Restored> {
    let kind = inner.kind.clone();
    let file = file_of(api, &kind)?;
    let reader = api.backend().version_reader()?;
    let started = Instant::now();
    let source = Source::new(reader, kind.clone());
    let compacted = api.compacted_revision();
    // Read, checked and built off the async threads (a second or two at
    // a million objects).
    let read = {
        let file = file.clone();
        tokio::task::spawn_blocking(move || {
            let waited = started.elapsed();
            let saved = match std::fs::read(&file) {
                Ok(bytes) => Saved::read(&bytes, &source).and_then(|saved| {
                    saved.check(&source)?;
                    Ok(saved)
                }),
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => Err(String::new()),
                Err(err) => Err(format!("cannot be read: {err}")),
            }?;
            if saved.revision < compacted {
                return Err(format!(
                    "saved at revision {}, older than the store's compaction to {compacted}",
                    saved.revision
                ));
            }
            let objects = saved.len();
            let saved_at = saved.revision;
            let checked = started.elapsed();
            let cache = Cache::restored(source, saved)?;
            tracing::debug!(
                waited = ?waited,
                read_and_checked = ?checked - waited,
                built = ?started.elapsed() - checked,
                "informer's saved cache read"
            );
            Ok((cache, objects, saved_at))
        })
        .await
        .ok()?
    };
    let returned_at = started.elapsed();
    let (mut cache, objects, saved_at) = match read {
        Ok(read) => read,
        // Nothing saved (a new store, or a small kind): the usual list.
        Err(why) if why.is_empty() => return None,
        Err(why) => {
            tracing::warn!(kind = %kind.kind, file = %file.display(), %why, "saved informer cache not used; listing");
            return None;
        }
    };
    let until = api.current_revision().await.ok()?;
    let caught_up = match catch_up(api, &kind, &mut cache, until).await {
        Ok(changes) => changes,
        Err(why) => {
            tracing::warn!(kind = %kind.kind, %why, "saved informer cache cannot catch up; listing");
            return None;
        }
    };
    // The file stays at its revision until the next save: a start after a
    // crash before then catches up from there again.
    api.hold_history(&holder(&file), saved_at);
    let caught_up_at = started.elapsed();
    inner.tell(
        |current| {
            *current = cache;
            current.all_pending()
        },
        true,
    );
    tracing::info!(kind = %kind.kind, objects, changes = caught_up, revision = until, took = ?started.elapsed(), ?returned_at, caught_up_at = ?caught_up_at, "informer filled from its saved cache");
    Some(Restored {
        until,
        saved: saved_at,
    })
}

/// Applies to `cache` the store's changes of `kind` after its revision up
/// to `until`, from the store's history. Returns how many there were.
async fn catch_up(
    api: &Api,
    kind: &KindInfo,
    cache: &mut Cache,
    until: i64,
) -> Result<u64, String> {
    let after = cache.revision();
    if after >= until {
        return Ok(0);
    }
    let prefix = Api::prefix(kind, None);
    let mut told = 0;
    crate::store::replay_history(api.backend().as_ref(), after, until, |event| {
        if !event.kv.key.starts_with(&prefix) {
            return;
        }
        let (kind, kv) = (event.kind, event.kv);
        let listed = Listed::Stored(kv.value, kv.mod_revision);
        let Some((terms, text)) = read_terms(vec![listed]).pop() else {
            tracing::warn!(key = %kv.key, "informer skips an undecodable object");
            return;
        };
        match kind {
            EventKind::Put => {
                cache.put_text(terms, text);
            }
            EventKind::Delete => cache.catch_up_delete(&terms.key),
        }
        told += 1;
    })
    .await?;
    cache.caught_up_to(until);
    Ok(told)
}

/// The name an informer's saved cache holds store history under
/// ([`Api::hold_history`]).
pub(super) fn holder(file: &std::path::Path) -> String {
    format!("informer cache {}", file.display())
}

/// Saves an informer's cache when it is due (see the module docs); one
/// per informer, driven by its follower's progress tick.
pub(super) struct Saver {
    api: Api,
    file: Option<PathBuf>,
    /// The cache's revision at the last tick, and since when it is that.
    seen: (i64, Instant),
    /// The revision last saved (or restored from), and when.
    saved: i64,
    saved_at: Option<Instant>,
    writing: Option<tokio::task::JoinHandle<()>>,
    /// The last save failed (logged once, not at every try).
    failing: Arc<AtomicBool>,
}

impl Saver {
    /// `saved`: the revision of the file a start read, if it did.
    pub(super) fn new(api: &Api, kind: &KindInfo, saved: Option<i64>) -> Self {
        let revision = saved.unwrap_or(-1);
        Self {
            api: api.clone(),
            file: file_of(api, kind),
            seen: (revision, Instant::now()),
            saved: revision,
            saved_at: None,
            writing: None,
            failing: Arc::default(),
        }
    }

    /// Saves `inner`'s cache if it is due.
    pub(super) fn tick(&mut self, inner: &Inner) {
        let Some(file) = &self.file else { return };
        if self.writing.as_ref().is_some_and(|w| !w.is_finished()) {
            return;
        }
        let cache = inner.cache.read().unwrap_or_else(|p| p.into_inner());
        // The kind's own last change, for quiet; the file is saved at what
        // the informer delivered through, changes of other kinds included
        // (read under the cache lock, as `Informer::delivered` does).
        let changed = cache.revision();
        if changed != self.seen.0 {
            self.seen = (changed, Instant::now());
            return;
        }
        let revision = changed.max(inner.progress.load(Ordering::Acquire));
        let save_from = inner.save_from.load(Ordering::Relaxed);
        let too_soon = self.saved_at.is_some_and(|at| at.elapsed() < BETWEEN_SAVES);
        let behind = revision - self.saved;
        if (changed <= self.saved && behind < inner.resave_behind.load(Ordering::Relaxed))
            || behind <= 0
            || self.seen.1.elapsed() < QUIET
            || too_soon
            || cache.len() < save_from
        {
            return;
        }
        let Some(bytes) = cache.saved_bytes(revision) else {
            return;
        };
        drop(cache);
        (self.saved, self.saved_at) = (revision, Some(Instant::now()));
        let (file, kind) = (file.clone(), inner.kind.kind.clone());
        let failing = self.failing.clone();
        let api = self.api.clone();
        self.writing = Some(tokio::task::spawn_blocking(move || {
            match saved::write_file(&file, &bytes) {
                Ok(()) => {
                    failing.store(false, Ordering::Relaxed);
                    api.hold_history(&holder(&file), revision);
                    tracing::debug!(%kind, file = %file.display(), revision, bytes = bytes.len(), "informer cache saved");
                }
                // A full disk: the last file stands, and is still right
                // (older only: the start catches up from it).
                Err(err) if !failing.swap(true, Ordering::Relaxed) => {
                    tracing::warn!(%kind, file = %file.display(), %err, "cannot save the informer cache; the last one stands");
                }
                Err(_) => {}
            }
        }));
    }
}

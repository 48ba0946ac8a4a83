//! Watches on the embedded store: a bounded in-memory tail of recent events
//! shared by every watcher, and per-watch forwarder tasks that replay older
//! changes from the on-disk log, then follow live commits.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::Shared;
use super::schema::{Context, Entry, META, META_COMPACTED, REVISIONS, read_meta};
use crate::store::pump::{self, WATCH_BUFFER};
use crate::store::{Error, EventKind, KeyValue, Result, Revision, WatchEvent, WatchStream};

/// The most events the in-memory tail keeps.
const RECENT_EVENTS: usize = 16 * 1024;

/// The most value bytes the in-memory tail keeps. A fast path only (older
/// changes are read back from the log), so small: it stays in memory for
/// as long as no write comes, and fat values rewritten would otherwise keep
/// tens of MB after they are gone (BENCHMARKS.md, "A plugin that writes fat
/// statuses").
const RECENT_BYTES: usize = 16 << 20;

/// The newest committed events, gap-free: revisions `start + 1 ..= start + len`.
pub(super) struct Recent {
    start: Revision,
    events: VecDeque<WatchEvent>,
    bytes: usize,
}

impl Recent {
    /// An empty tail whose next event is `revision + 1`.
    pub(super) fn new(revision: Revision) -> Self {
        Self {
            start: revision,
            events: VecDeque::new(),
            bytes: 0,
        }
    }

    /// Appends the events of one commit (the next revisions, in order) and
    /// forgets the oldest ones beyond the bounds.
    pub(super) fn push(&mut self, events: Vec<WatchEvent>) {
        debug_assert_eq!(
            events.first().map(WatchEvent::revision),
            Some(self.start + self.events.len() as Revision + 1)
        );
        for event in events {
            self.bytes += event.kv.value.len();
            self.events.push_back(event);
        }
        while self.events.len() > RECENT_EVENTS || self.bytes > RECENT_BYTES {
            let Some(old) = self.events.pop_front() else {
                break;
            };
            self.bytes -= old.kv.value.len();
            self.start += 1;
        }
    }

    /// Up to `max` events after `last`, or `None` if some of them are no
    /// longer held here.
    fn after(&self, last: Revision, max: usize) -> Option<Vec<WatchEvent>> {
        if last < self.start {
            return None;
        }
        let skip = usize::try_from(last - self.start)
            .unwrap_or(usize::MAX)
            .min(self.events.len());
        Some(self.events.range(skip..).take(max).cloned().collect())
    }
}

/// Starts a forwarder streaming every change after `after`.
pub(super) fn spawn(shared: Arc<Shared>, after: Revision) -> WatchStream {
    // Subscribed before the first read, so that no commit is missed.
    let revisions = shared.revision_tx.subscribe();
    pump::spawn(after, revisions, move |last| {
        let shared = shared.clone();
        async move {
            let compacted = shared.compacted.load(Ordering::Acquire);
            if last < compacted {
                return Err(Error::Compacted {
                    requested: last,
                    compacted,
                });
            }
            let recent = shared.recent().after(last, WATCH_BUFFER);
            let events = match recent {
                Some(events) => events,
                None => {
                    // The replay reads the database, which must hold what
                    // the tail no longer does.
                    shared.caught_up().await?;
                    let shared = shared.clone();
                    tokio::task::spawn_blocking(move || replay(&shared, last, WATCH_BUFFER))
                        .await
                        .unwrap_or_else(|e| Err(Error::Unavailable(format!("watch replay: {e}"))))?
                }
            };
            if events.is_empty() && shared.is_closed() {
                return Err(shared.closed_error());
            }
            Ok(events)
        }
    })
}

/// Reads up to `max` events after `last` from disk.
fn replay(shared: &Shared, last: Revision, max: usize) -> Result<Vec<WatchEvent>> {
    let file = &shared.file;
    let txn = shared.begin_read()?;
    let meta = txn.open_table(META).ctx(file)?;
    let compacted = read_meta(&meta, META_COMPACTED, file)?;
    if last < compacted {
        return Err(Error::Compacted {
            requested: last,
            compacted,
        });
    }
    let revisions = txn.open_table(REVISIONS).ctx(file)?;
    let mut events = Vec::new();
    for entry in revisions.range((last + 1)..).ctx(file)?.take(max) {
        let (revision, stored) = entry.ctx(file)?;
        let revision = revision.value();
        let expected = last + 1 + events.len() as Revision;
        if revision != expected {
            return Err(Error::Corrupt(format!(
                "{}: the change log skips from revision {} to {revision}",
                file.display(),
                expected - 1
            )));
        }
        let entry = Entry::decode(stored.value(), revision, file)?;
        let event = if entry.value.is_some() {
            let kv = entry.to_kv(entry.key, revision, file)?;
            WatchEvent {
                kind: EventKind::Put,
                created: kv.create_revision == revision,
                kv,
            }
        } else {
            // A delete carries the key's last value.
            let key = entry.key;
            let prev = shared
                .history()
                .at(key, revision - 1)
                .filter(|version| !version.deleted)
                .ok_or_else(|| {
                    Error::Corrupt(format!(
                        "{}: the version deleted at {revision} of {key:?} is missing",
                        file.display()
                    ))
                })?
                .revision;
            let stored = revisions.get(prev).ctx(file)?.ok_or_else(|| {
                Error::Corrupt(format!(
                    "{}: revision {prev} of {key:?} is missing",
                    file.display()
                ))
            })?;
            let kv = Entry::decode(stored.value(), prev, file)?.to_kv(key, prev, file)?;
            WatchEvent {
                kind: EventKind::Delete,
                kv: KeyValue {
                    mod_revision: revision,
                    ..kv
                },
                created: false,
            }
        };
        events.push(event);
    }
    Ok(events)
}

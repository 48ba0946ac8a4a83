//! The informer's loop: a thin consumer of the [`watcher`](super::watcher)
//! that fills the cache from each list and keeps it in step with each
//! change; it stops when the last handle to the informer is gone.

use std::sync::Weak;

use super::Inner;
use super::cache::{Listed, Text, read_terms};
use super::saving::{self, Saver};
use super::terms::Terms;
use super::watcher::{Event, Watcher};
use crate::api::Api;

/// How many listed objects' texts a cache that reads objects back holds
/// at most before reading their terms.
const READ_EVERY: usize = 65_536;

/// Keeps the cache of `inner` filled until the informer is dropped.
pub(super) async fn run(inner: Weak<Inner>, api: Api) {
    let Some(kind) = inner.upgrade().map(|i| i.kind.clone()) else {
        return;
    };
    let reads_back = inner.upgrade().is_some_and(|i| i.reads_back());
    let prefix = Api::prefix(&kind, None);
    // A cache saved at the last run, caught up, stands for the first list.
    let restored = match inner.upgrade() {
        Some(inner) if reads_back => saving::restore(&inner, &api).await,
        _ => None,
    };
    let mut watcher = match restored {
        Some(restored) => Watcher::resume(&api, &prefix, restored.until),
        None => Watcher::new(&api, &prefix),
    };
    let mut saver = Saver::new(&api, &kind, restored.map(|restored| restored.saved));
    // The list as the API's JSON text, written from the stored bytes as
    // each page arrives: nothing is decoded, and only one page of stored
    // values is held beside the texts. A cache that reads objects back
    // from the store keeps only their terms: those are read every
    // `READ_EVERY` objects, so that no more texts than that are held.
    let mut listed: Vec<Listed> = Vec::new();
    let mut read: Vec<(Terms, Text)> = Vec::new();
    let mut first_list = restored.is_none();
    if restored.is_some()
        && let Some(inner) = inner.upgrade()
    {
        inner
            .restored
            .store(true, std::sync::atomic::Ordering::Relaxed);
        inner.filled();
    }
    let mut progress = tokio::time::interval(super::PROGRESS_EVERY);
    progress.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // `Watcher::next` is cancel safe: a tick loses no change.
        let event = tokio::select! {
            event = watcher.next() => event,
            _ = progress.tick() => {
                let Some(inner) = inner.upgrade() else { return };
                // Every change the watcher yielded has been handed on (the
                // loop tells handlers before it reads the next).
                if let Some(seen) = watcher.progress() {
                    inner.progress.fetch_max(seen, std::sync::atomic::Ordering::AcqRel);
                }
                if api.hub().is_stopped() {
                    // The host stops and closes the store: nothing to
                    // save or read back any more.
                    break;
                }
                inner.shed();
                saver.tick(&inner);
                continue;
            }
        };
        let Some(event) = event else { break };
        let Some(inner) = inner.upgrade() else { return };
        match event {
            Event::Init => {
                listed.clear();
                read.clear();
            }
            Event::InitApply(kv) if reads_back => {
                // Only the terms are read, from the bytes as stored.
                listed.push(Listed::Stored(kv.value, kv.mod_revision));
                if listed.len() >= READ_EVERY {
                    read.extend(read_terms(std::mem::take(&mut listed)));
                }
            }
            Event::InitApply(kv) => {
                // Room for the version spliced in, so the text is not moved again.
                let mut text = Vec::with_capacity(kv.value.len() + 40);
                match Api::write_stored(&kv, &mut text) {
                    Ok(()) => listed.push(Listed::Text(text)),
                    Err(err) => {
                        tracing::warn!(kind = %kind.kind, key = %kv.key, %err, "informer skips an undecodable object");
                    }
                }
            }
            Event::InitDone { revision } => {
                let initial = std::mem::take(&mut first_list);
                read.extend(read_terms(std::mem::take(&mut listed)));
                // The first list tells what exists, not what changed.
                inner.apply_list(std::mem::take(&mut read), revision, initial);
                inner.filled();
            }
            Event::Apply(event) => inner.apply(|cache| {
                cache
                    .upsert(event.object.clone(), event.revision)
                    .into_iter()
                    .collect()
            }),
            Event::Delete(event) => inner.apply(|cache| {
                cache
                    .remove(&event.object, event.revision)
                    .into_iter()
                    .collect()
            }),
        }
    }
    tracing::debug!(kind = %kind.kind, "informer stops: the watch hub stopped");
}

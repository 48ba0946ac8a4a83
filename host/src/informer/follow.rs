//! The informer's loop: a thin consumer of the [`watcher`](super::watcher)
//! that fills the cache from each list and keeps it in step with each
//! change; it stops when the last handle to the informer is gone.

use std::sync::Weak;

use super::watcher::{Event, Watcher};
use super::{Change, Inner};
use crate::api::Api;
use crate::store::KeyValue;

/// Keeps the cache of `inner` filled until the informer is dropped.
pub(super) async fn run(inner: Weak<Inner>, api: Api) {
    let Some(kind) = inner.upgrade().map(|i| i.kind.clone()) else {
        return;
    };
    let mut watcher = Watcher::new(&api, &Api::prefix(&kind, None));
    let mut listed: Vec<KeyValue> = Vec::new();
    let mut first_list = true;
    while let Some(event) = watcher.next().await {
        let Some(inner) = inner.upgrade() else { return };
        match event {
            Event::Init => listed.clear(),
            Event::InitApply(kv) => listed.push(kv),
            Event::InitDone { revision } => {
                let items = listed
                    .drain(..)
                    .filter_map(|kv| match Api::decode(&kv) {
                        Ok(object) => Some(object),
                        Err(err) => {
                            tracing::warn!(kind = %kind.kind, %err, "informer skips an undecodable object");
                            None
                        }
                    })
                    .collect();
                let initial = std::mem::take(&mut first_list);
                inner.apply(|cache| {
                    let changes = cache.replace(items, revision);
                    if !initial {
                        return changes;
                    }
                    // The first list tells what exists, not what changed.
                    changes
                        .into_iter()
                        .map(|c| match c {
                            Change::Applied(o) => Change::Listed(o),
                            other => other,
                        })
                        .collect()
                });
                inner
                    .lists
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                inner.synced.send_replace(true);
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

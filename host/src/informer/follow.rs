//! The informer's loop: list, then follow the watch hub from the list's
//! revision; relist when the hub answers "too old"; stop when the last
//! handle to the informer is gone.

use std::sync::Weak;

use super::Inner;
use crate::api::Api;
use crate::watch::{Error as WatchError, EventType};

/// Keeps the cache of `inner` filled until the informer is dropped.
pub(super) async fn run(inner: Weak<Inner>, api: Api) {
    let Some(kind) = inner.upgrade().map(|i| i.kind.clone()) else {
        return;
    };
    let prefix = Api::prefix(&kind, None);
    let mut first_list = true;
    loop {
        // List, then watch from the list's revision.
        let list = match api.list_texts(&kind).await {
            Ok(list) => list,
            Err(err) => {
                tracing::warn!(kind = %kind.kind, %err, "informer list failed; retrying");
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                continue;
            }
        };
        let mut subscription = match api.hub().subscribe(&prefix, list.resource_version) {
            Ok(s) => s,
            Err(err) => {
                tracing::debug!(kind = %kind.kind, %err, "informer subscribe failed; relisting");
                continue;
            }
        };
        {
            let Some(inner) = inner.upgrade() else { return };
            let initial = std::mem::take(&mut first_list);
            // The first list tells what exists, not what changed.
            inner.apply_list(list.items, list.resource_version, initial);
            inner
                .lists
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            inner.synced.send_replace(true);
        }
        loop {
            match subscription.next().await {
                Ok(event) => {
                    let Some(inner) = inner.upgrade() else { return };
                    inner.apply(|cache| {
                        let change = match event.kind {
                            EventType::Deleted => cache.remove(&event.object, event.revision),
                            EventType::Added | EventType::Modified => {
                                cache.upsert(event.object.clone(), event.revision)
                            }
                        };
                        change.into_iter().collect()
                    });
                }
                Err(WatchError::TooOldResourceVersion { .. }) => {
                    tracing::info!(kind = %kind.kind, "informer fell behind; relisting");
                    break;
                }
                Err(err) => {
                    tracing::warn!(kind = %kind.kind, %err, "informer watch ended");
                    return;
                }
            }
        }
    }
}

//! A controller's use of its checkpoint (`checkpoint`): whether it can
//! resume from one at start, catching up from it (the store's history
//! since its revision, then the keys it owed), taking one every
//! [`checkpoint::EVERY`] while it runs, and the last one as it stops.

use std::sync::Arc;

use super::checkpoint::{self, Checkpoint, Saved};
use super::triggers::Trigger;
use super::{Reconciler, Shared};
use crate::api::Api;
use crate::informer::{Change, HandlerId, Informer};
use crate::object::ObjectKey;
use crate::queue::WorkQueue;
use crate::store::EventKind;

/// The checkpoint `reconciler`'s controller can resume from, if any;
/// why not is logged.
pub(super) async fn resumable(
    api: &Api,
    checkpoint: &Checkpoint,
    reconciler: &dyn Reconciler,
) -> Option<Saved> {
    let plugin = &reconciler.manifest().name;
    let revision = match api.current_revision().await {
        Ok(revision) => revision,
        Err(err) => {
            tracing::warn!(%plugin, %err, "cannot check the checkpoint against the store; every object is queued");
            return None;
        }
    };
    let file = checkpoint.path().to_owned();
    let identity = reconciler.identity();
    let checkpoint = checkpoint.clone();
    let loaded = tokio::task::spawn_blocking(move || checkpoint.load(&identity, revision))
        .await
        .unwrap_or_else(|err| Err(err.to_string()));
    match loaded {
        Ok(Some(saved)) => Some(saved),
        Ok(None) => {
            tracing::info!(%plugin, file = %file.display(), "no checkpoint yet; every object is queued");
            None
        }
        Err(why) => {
            tracing::warn!(%plugin, %why, "checkpoint not used; every object is queued");
            None
        }
    }
}

/// Catch up from `saved` once the informers have listed: the store's
/// changes since its revision told to `triggers`, then the keys it owed
/// queued; if the history cannot say (compacted past it), every cached
/// object is told to `handlers` as a listing instead.
pub(super) async fn catch_up(
    api: &Api,
    saved: &Saved,
    triggers: &[(Informer, Trigger)],
    handlers: &[(Informer, HandlerId)],
    queue: &WorkQueue<ObjectKey>,
    plugin: &str,
) {
    let started = std::time::Instant::now();
    match replay(api, triggers, saved.revision).await {
        Ok(changes) => tracing::info!(
            plugin,
            revision = saved.revision,
            changes,
            owed = saved.owed.len(),
            took = ?started.elapsed(),
            "controller resumes from its checkpoint"
        ),
        Err(why) => {
            tracing::warn!(plugin, %why, "cannot resume from the checkpoint; every object is queued");
            for (informer, id) in handlers {
                informer.replay_to(*id);
            }
        }
    }
    saved.queue_owed(queue);
}

/// Tell `triggers` about every change of their kinds after revision
/// `after` up to the store's revision now, from the store's history, as
/// [`Change::Applied`] and [`Change::Deleted`] (with `metadata` and
/// conditions, all triggers read). Returns how many changes were told, or
/// why the history cannot say (compacted past `after`).
async fn replay(api: &Api, triggers: &[(Informer, Trigger)], after: i64) -> Result<u64, String> {
    let until = api
        .current_revision()
        .await
        .map_err(|err| format!("the store's revision: {err}"))?;
    if after >= until {
        return Ok(0);
    }
    if after < api.compacted_revision() {
        return Err(format!(
            "history is compacted to {}, past the checkpoint at {after}",
            api.compacted_revision()
        ));
    }
    let prefixes: Vec<(String, &Trigger)> = triggers
        .iter()
        .map(|(informer, trigger)| (Api::prefix(informer.kind(), None), trigger))
        .collect();
    let mut told = 0;
    let mut text = Vec::new();
    crate::store::replay_history(api.backend().as_ref(), after, until, |event| {
        let revision = event.revision();
        for (prefix, trigger) in &prefixes {
            if !event.kv.key.starts_with(prefix.as_str()) {
                continue;
            }
            text.clear();
            let head = Api::write_stored(&event.kv, &mut text)
                .ok()
                .and_then(|()| crate::object::codec::decode_head(&text).ok());
            let Some(head) = head else {
                tracing::warn!(key = %event.kv.key, revision, "replay skips an undecodable object");
                continue;
            };
            let head = Arc::new(head);
            trigger(&match event.kind {
                EventKind::Put => Change::Applied(head),
                EventKind::Delete => Change::Deleted(head),
            });
            told += 1;
        }
    })
    .await?;
    Ok(told)
}

/// Take the controller's checkpoint every [`checkpoint::EVERY`] while it
/// runs (less often while it owes many keys: [`checkpoint::periods`]),
/// when it has somewhere to keep one and anything moved.
pub(super) fn keep(shared: &Arc<Shared>) -> Option<tokio::task::JoinHandle<()>> {
    shared.checkpoint.as_ref()?;
    let shared = Arc::downgrade(shared);
    Some(tokio::spawn(async move {
        let (mut last, mut failing) = (None, false);
        let mut periods = 0;
        loop {
            tokio::time::sleep(checkpoint::EVERY).await;
            periods += 1;
            // Weak, as the sweeper: it does not keep the controller.
            let Some(taken) = shared.upgrade().map(|s| {
                (periods >= checkpoint::periods(s.queue.owed_at_least())).then(|| s.checkpoint())
            }) else {
                return;
            };
            let Some((checkpoint, saved)) = taken.flatten() else {
                continue;
            };
            periods = 0;
            if last.as_ref() == Some(&saved) {
                continue;
            }
            let file = checkpoint.path().to_owned();
            match save(checkpoint, saved.clone()).await {
                Ok(()) => {
                    if std::mem::take(&mut failing) {
                        tracing::info!(file = %file.display(), "checkpoint written again");
                    }
                    last = Some(saved);
                }
                // Once, not every second (a full disk): the last
                // checkpoint stands, which is safe.
                Err(err) if !failing => {
                    failing = true;
                    tracing::warn!(file = %file.display(), %err, "cannot write the checkpoint; the last one stands");
                }
                Err(_) => {}
            }
        }
    }))
}

/// Write a checkpoint off the async threads.
async fn save(checkpoint: Checkpoint, saved: Saved) -> std::io::Result<()> {
    tokio::task::spawn_blocking(move || checkpoint.save(&saved))
        .await
        .map_err(std::io::Error::other)?
}

/// Write a controller's last checkpoint as it stops.
pub(super) async fn save_last(checkpoint: Checkpoint, saved: Saved) {
    let file = checkpoint.path().to_owned();
    match save(checkpoint, saved).await {
        Ok(()) => tracing::debug!(file = %file.display(), "last checkpoint written"),
        Err(err) => {
            tracing::warn!(file = %file.display(), %err, "cannot write the last checkpoint; the one before stands")
        }
    }
}

impl Shared {
    /// The store revision up to which every change of the controller's
    /// kinds has queued what it queues; `None` before every informer has
    /// listed.
    fn delivered(&self) -> Option<i64> {
        std::iter::once(&self.informer)
            .chain(&self.owned_informers)
            .map(Informer::delivered)
            .min()
            .filter(|revision| *revision > 0)
    }

    /// A checkpoint now, and where it goes: the revision read first, the
    /// keys owed after.
    pub(super) fn checkpoint(&self) -> Option<(Checkpoint, Saved)> {
        let checkpoint = self.checkpoint.clone()?;
        let revision = self.delivered()?;
        let others = self
            .failures
            .keys()
            .into_iter()
            .chain(self.effects.keys())
            .chain(self.clash_watch.keys());
        let saved = Saved::take(self.reconciler().identity(), revision, &self.queue, others)?;
        Some((checkpoint, saved))
    }
}

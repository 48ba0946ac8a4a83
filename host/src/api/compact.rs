//! Compaction: forgetting store history older than a number of revisions,
//! periodically (Kubernetes compacts every five minutes). Owns when and how
//! far to compact; what compaction removes is the backend's business.
//!
//! After compaction to revision `c`, a list continuing a page taken at or
//! below `c` answers [`Error::Gone`](super::Error::Gone) (410), and so does a watch started
//! through [`Api::watch`] after a revision below `c`: the client relists.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::{Api, Result};
use crate::store::Revision;
use crate::watch::{self, Subscription};

impl Api {
    /// Compact the store's history up to and including `revision`.
    pub async fn compact(&self, revision: Revision) -> Result<()> {
        self.backend.compact(revision).await?;
        self.compacted.fetch_max(revision, Ordering::SeqCst);
        self.hub.compacted(revision);
        Ok(())
    }

    /// The revision this API last compacted the store to (0: never).
    pub fn compacted_revision(&self) -> Revision {
        self.compacted.load(Ordering::SeqCst)
    }

    /// Start a task that every `interval` compacts the store to its current
    /// revision minus `keep_revisions` (when that moved since the last
    /// compaction). Failures are logged and retried at the next tick. The
    /// task runs until the handle is aborted.
    pub fn start_compactor(&self, interval: Duration, keep_revisions: i64) -> JoinHandle<()> {
        let api = self.clone();
        let keep = keep_revisions.max(0);
        tokio::spawn(async move {
            let mut ticker =
                tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                let current = match api.current_revision().await {
                    Ok(current) => current,
                    Err(err) => {
                        tracing::warn!(%err, "compactor cannot read the current revision");
                        continue;
                    }
                };
                let target = current - keep;
                if target <= api.compacted_revision() {
                    continue;
                }
                match api.compact(target).await {
                    Ok(()) => tracing::debug!(revision = target, "store compacted"),
                    Err(err) => tracing::warn!(%err, revision = target, "compaction failed"),
                }
            }
        })
    }

    /// Subscribe to changes under `prefix` after revision `after`, refusing
    /// (as too old) a start below the last compaction, where the hub's
    /// history no longer matches what the store can list.
    pub fn watch(&self, prefix: &str, after: Revision) -> Result<Subscription, watch::Error> {
        let compacted = self.compacted_revision();
        if after < compacted {
            return Err(watch::Error::TooOldResourceVersion {
                requested: after,
                oldest: compacted,
            });
        }
        self.hub.subscribe(prefix, after)
    }
}

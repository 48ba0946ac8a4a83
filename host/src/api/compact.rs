//! Compaction: forgetting store history up to a revision, and what that
//! means for lists and watches. When to compact is the compactor's
//! (`crate::system::compactor`); what compaction removes is the backend's.
//!
//! After compaction to revision `c`, a list continuing a page taken at or
//! below `c` answers [`Error::Gone`](super::Error::Gone) (410), and so does a watch started
//! through [`Api::watch`] after a revision below `c`: the client relists.

use std::sync::atomic::Ordering;

use super::{Api, Result};
use crate::store::Revision;
use crate::watch::{self, Subscription};

impl Api {
    /// Compact the store's history up to and including `revision`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use serde_json::json;
    /// use setpoint::api::{Api, Error};
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let events = api.kinds().require("v1", "Event")?;
    /// let event = |name: &str| json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name}});
    ///
    /// api.create(&events, event("a")).await?;
    /// api.create(&events, event("b")).await?;
    /// let page = api.list(&events, &setpoint::api::ListOptions::default().with_limit(1)).await?;
    /// api.create(&events, event("c")).await?;
    /// api.compact(api.current_revision().await?).await?;
    /// let token = page.continue_token.expect("a second page");
    /// let next = api.list(&events, &setpoint::api::ListOptions::default().with_continue_token(token)).await;
    /// assert!(matches!(next, Err(Error::Gone { .. })), "a page of a compacted snapshot is gone");
    /// # Ok(()) }
    /// ```
    pub async fn compact(&self, revision: Revision) -> Result<()> {
        self.backend.compact(revision).await?;
        self.compacted.fetch_max(revision, Ordering::SeqCst);
        self.hub.compacted(revision);
        Ok(())
    }

    /// The revision this API last compacted the store to (0: never).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use serde_json::json;
    /// use setpoint::api::{Api, Error};
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let events = api.kinds().require("v1", "Event")?;
    /// let event = |name: &str| json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name}});
    ///
    /// assert_eq!(api.compacted_revision(), 0);
    /// api.create(&events, event("a")).await?;
    /// api.compact(1).await?;
    /// assert_eq!(api.compacted_revision(), 1);
    /// # Ok(()) }
    /// ```
    pub fn compacted_revision(&self) -> Revision {
        self.compacted.load(Ordering::SeqCst)
    }

    /// Asks the compactor to keep the history after `revision` for
    /// `holder` (replacing what `holder` held before): someone will read
    /// it again, as an informer whose cache is saved at `revision` catches
    /// up from there at its next start. The compactor honours holds only
    /// while they are a bounded amount of writes behind
    /// (`crate::system::compactor`); [`Api::compact`] itself ignores them.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use setpoint::{api::Api, store::MemoryBackend};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), setpoint::api::Error> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// api.hold_history("a saved cache", 7);
    /// api.hold_history("another", 5);
    /// assert_eq!(api.history_held_after(), Some(5));
    /// api.release_history("another");
    /// assert_eq!(api.history_held_after(), Some(7));
    /// # Ok(()) }
    /// ```
    pub fn hold_history(&self, holder: &str, revision: Revision) {
        self.history_holds().insert(holder.to_owned(), revision);
    }

    /// Drops what `holder` held ([`Api::hold_history`]).
    pub fn release_history(&self, holder: &str) {
        self.history_holds().remove(holder);
    }

    /// The oldest revision whose later history is held, if any.
    pub fn history_held_after(&self) -> Option<Revision> {
        self.history_holds().values().min().copied()
    }

    fn history_holds(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<String, Revision>> {
        // A map of plain values: whole even if a holder panicked.
        self.holds
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Subscribe to changes under `prefix` after revision `after`, refusing
    /// (as too old) a start below the last compaction, where the hub's
    /// history no longer matches what the store can list.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use serde_json::json;
    /// use setpoint::api::{Api, Error};
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let events = api.kinds().require("v1", "Event")?;
    /// let event = |name: &str| json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name}});
    ///
    /// let from = api.current_revision().await?;
    /// let mut changes = api.watch(&Api::prefix(&events, Some("default")), from)?;
    /// api.create(&events, event("e")).await?;
    /// assert_eq!(changes.next().await?.object["metadata"]["name"], "e");
    /// # Ok(()) }
    /// ```
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

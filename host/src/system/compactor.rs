//! The compactor: forgets store history older than a number of revisions,
//! periodically (Kubernetes compacts every five minutes). Owns when and how
//! far to compact; what compaction means for lists and watches is
//! [`Api::compact`]'s, what it removes is the backend's.

use std::time::Duration;

use tokio::task::JoinHandle;

use crate::api::Api;

/// Start a task that every `interval` compacts the store to its current
/// revision minus `keep_revisions` (when that moved since the last
/// compaction). Failures are logged and retried at the next tick. The task
/// runs until the handle is aborted.
///
/// ```
/// use std::sync::Arc;
/// use serde_json::json;
/// use setpoint::api::{Api, Error};
/// use setpoint::store::MemoryBackend;
/// use setpoint::system::compactor;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
/// let events = api.kinds().require("v1", "Event")?;
/// let event = |name: &str| json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name}});
///
/// use std::time::Duration;
/// for i in 0..5 {
///     api.create(&events, event(&format!("e{i}"))).await?;
/// }
/// let compactor = compactor::start(&api, Duration::from_millis(10), 2);
/// while api.compacted_revision() < 3 {
///     tokio::time::sleep(Duration::from_millis(5)).await;
/// }
/// compactor.abort();
/// # Ok(()) }
/// ```
pub fn start(api: &Api, interval: Duration, keep_revisions: i64) -> JoinHandle<()> {
    let api = api.clone();
    let keep = keep_revisions.max(0);
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
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

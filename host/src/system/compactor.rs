//! The compactor: forgets store history older than a number of revisions,
//! periodically (Kubernetes compacts every five minutes), and sooner when
//! the history holds more than a bound of bytes, but not past history held
//! for a reader ([`Api::hold_history`]: an informer's saved cache) while
//! that is at most [`HOLD_FACTOR`] times the bound behind. Owns when and how
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
    start_keeping(api, interval, keep_revisions, KEEP_BYTES)
}

/// The most bytes of objects written since the compaction point that the
/// store keeps as history before compacting early: a few fat objects
/// rewritten fill the disk long before [`start`]'s revisions are many.
pub const KEEP_BYTES: u64 = 64 << 20;

/// History held for a reader ([`Api::hold_history`]) is kept while at
/// most this many times `keep_bytes` of objects were written after it; past
/// that the compactor compacts anyway (the reader lists instead).
pub const HOLD_FACTOR: u64 = 4;

/// How often the bytes of history are looked at.
const BYTES_CHECK: Duration = Duration::from_secs(1);

/// [`start`], also compacting as soon as more than twice `keep_bytes` of
/// objects were written since the compaction point (as the API's watch
/// hub counts them), to where `keep_bytes` are left.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use serde_json::json;
/// use setpoint::api::Api;
/// use setpoint::store::MemoryBackend;
/// use setpoint::system::compactor;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
/// let events = api.kinds().require("v1", "Event")?;
/// let fat = "x".repeat(1 << 20);
/// let compactor = compactor::start_keeping(&api, Duration::from_secs(3600), 1_000, 2 << 20);
/// for i in 0..8 {
///     api.create(&events, json!({"apiVersion": "v1", "kind": "Event",
///         "metadata": {"name": format!("e{i}")}, "message": fat})).await?;
/// }
/// // Long before an hour, and with far fewer than 1,000 revisions.
/// while api.compacted_revision() < 5 {
///     tokio::time::sleep(Duration::from_millis(50)).await;
/// }
/// compactor.abort();
/// # Ok(()) }
/// ```
pub fn start_keeping(
    api: &Api,
    interval: Duration,
    keep_revisions: i64,
    keep_bytes: u64,
) -> JoinHandle<()> {
    let api = api.clone();
    let keep = keep_revisions.max(0);
    tokio::spawn(async move {
        let tick = interval.min(BYTES_CHECK);
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + tick, tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut due = tokio::time::Instant::now() + interval;
        loop {
            ticker.tick().await;
            let compacted = api.compacted_revision();
            let by_bytes = (api.hub().written_since(compacted) > keep_bytes.saturating_mul(2))
                .then(|| api.hub().revision_keeping(keep_bytes))
                .flatten();
            let by_revisions = tokio::time::Instant::now() >= due;
            if by_bytes.is_none() && !by_revisions {
                continue;
            }
            if by_revisions {
                due = tokio::time::Instant::now() + interval;
            }
            let current = match api.current_revision().await {
                Ok(current) => current,
                Err(err) => {
                    tracing::warn!(%err, "compactor cannot read the current revision");
                    continue;
                }
            };
            let mut target = (current - keep).max(by_bytes.unwrap_or(0)).min(current);
            if let Some(held) = api.history_held_after()
                && held < target
            {
                // Kept for whoever reads it again, while it is not too much.
                if api.hub().written_since(held) <= keep_bytes.saturating_mul(HOLD_FACTOR) {
                    target = held;
                } else {
                    tracing::debug!(
                        held,
                        target,
                        "history held is too far behind; compacting past it"
                    );
                }
            }
            if target <= api.compacted_revision() {
                continue;
            }
            match api.compact(target).await {
                Ok(()) => tracing::debug!(
                    revision = target,
                    by_bytes = by_bytes.is_some(),
                    "store compacted"
                ),
                Err(err) => tracing::warn!(%err, revision = target, "compaction failed"),
            }
        }
    })
}

//! Event expiry: deletes `v1` Events whose last occurrence is older than a
//! time to live, periodically, as kube-apiserver's `--event-ttl` (one hour)
//! does. With the per-object event budget (`controller::events`) this
//! bounds what events can hold in the store, however much a plugin emits.

use std::time::Duration;

use tokio::task::JoinHandle;

use crate::api::{Api, DeleteOptions, ListOptions};
use crate::object::{meta, time};

/// How many Events one pass reads at a time.
const PAGE: usize = 500;

/// Start a task that every `interval` deletes the Events last seen more
/// than `ttl` ago (by `lastTimestamp`, else `eventTime`, else the
/// creation time). Failures are logged and retried at the next tick. The
/// task runs until the handle is aborted.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use serde_json::json;
/// use setpoint::api::{Api, Error};
/// use setpoint::store::MemoryBackend;
/// use setpoint::system::event_expiry;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
/// let events = api.kinds().require("v1", "Event")?;
/// api.create(&events, json!({"apiVersion": "v1", "kind": "Event",
///     "metadata": {"name": "old", "namespace": "default"},
///     "lastTimestamp": "2020-01-01T00:00:00Z"})).await?;
/// let expiry = event_expiry::start(&api, Duration::from_millis(10), Duration::from_secs(3600));
/// while api.get(&events, Some("default"), "old").await.is_ok() {
///     tokio::time::sleep(Duration::from_millis(5)).await;
/// }
/// expiry.abort();
/// # Ok(()) }
/// ```
pub fn start(api: &Api, interval: Duration, ttl: Duration) -> JoinHandle<()> {
    let api = api.clone();
    tokio::spawn(async move {
        loop {
            match expire(&api, ttl).await {
                Ok(0) => {}
                Ok(deleted) => tracing::debug!(deleted, "expired events deleted"),
                Err(err) => tracing::warn!(%err, "could not expire events; will retry"),
            }
            tokio::time::sleep(interval).await;
        }
    })
}

/// Delete the Events last seen more than `ttl` ago; how many went.
pub async fn expire(api: &Api, ttl: Duration) -> Result<usize, crate::api::Error> {
    let kind = api
        .kinds()
        .by_plural("", "events")
        .expect("Event is a built-in kind");
    let cutoff = time::now_unix_ms() as i64 / 1000 - ttl.as_secs() as i64;
    let mut deleted = 0;
    let mut options = ListOptions {
        limit: PAGE,
        ..ListOptions::default()
    };
    loop {
        let page = api.list(&kind, &options).await?;
        for event in &page.items {
            let seen = ["lastTimestamp", "eventTime"]
                .iter()
                .find_map(|f| event[*f].as_str())
                .or_else(|| event["metadata"]["creationTimestamp"].as_str())
                .and_then(time::parse_unix_seconds);
            if seen.is_some_and(|seen| seen < cutoff) {
                let result = api
                    .delete(
                        &kind,
                        meta::namespace(event),
                        meta::name(event),
                        &DeleteOptions::default(),
                    )
                    .await;
                match result {
                    Ok(_) => deleted += 1,
                    Err(crate::api::Error::NotFound { .. }) => {}
                    Err(err) => return Err(err),
                }
            }
        }
        match page.continue_token {
            Some(token) => options.continue_token = Some(token),
            None => return Ok(deleted),
        }
    }
}

//! Event expiry: deletes `v1` Events whose last occurrence is older than a
//! time to live, periodically, as kube-apiserver's `--event-ttl` (one hour)
//! does. With the per-object event budget (`controller::events`) this
//! bounds what events can hold in the store, however much a plugin emits.

use std::time::Duration;

use tokio::task::JoinHandle;

use crate::api::{Api, DeleteOptions};
use crate::informer::watcher::Pager;
use crate::object::time;
use crate::store::KeyValue;

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
            let started = std::time::Instant::now();
            match expire(&api, ttl).await {
                Ok(0) => {}
                Ok(deleted) => tracing::debug!(deleted, "expired events deleted"),
                Err(err) => tracing::warn!(%err, "could not expire events; will retry"),
            }
            // A pass reads every Event: with a million of them it takes
            // seconds, and passes back to back would keep a core busy.
            tokio::time::sleep(interval.max(started.elapsed() * PASS_SHARE)).await;
        }
    })
}

/// A pass takes at most one part in this of the expiry's time.
const PASS_SHARE: u32 = 20;

/// Delete the Events last seen more than `ttl` ago; how many went. Only
/// their names and times are read from the stored text (no Event is
/// decoded whole), a page at a time at one revision.
pub async fn expire(api: &Api, ttl: Duration) -> Result<usize, crate::api::Error> {
    let kind = api
        .kinds()
        .by_plural("", "events")
        .expect("Event is a built-in kind");
    let cutoff = time::now_unix_ms() as i64 / 1000 - ttl.as_secs() as i64;
    let mut deleted = 0;
    let mut pager = Pager::new(&Api::prefix(&kind, None));
    while !pager.done() {
        for kv in pager.next_page(api.backend()).await? {
            let Some(seen) = Seen::of(&kv) else {
                continue;
            };
            if seen.at.is_none_or(|at| at >= cutoff) {
                continue;
            }
            let result = api
                .delete(
                    &kind,
                    seen.namespace.as_deref(),
                    &seen.name,
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
    Ok(deleted)
}

/// What expiry reads of a stored Event: its name and when it was last
/// seen (`lastTimestamp`, else `eventTime`, else its creation; a member
/// that is not a string counts as absent).
struct Seen {
    namespace: Option<String>,
    name: String,
    at: Option<i64>,
}

impl Seen {
    /// Read from the stored text, skipping the rest; text of another shape
    /// is decoded whole. `None` if it does not decode.
    fn of(kv: &KeyValue) -> Option<Self> {
        #[derive(serde::Deserialize)]
        struct Head {
            #[serde(rename = "lastTimestamp", default)]
            last_timestamp: Option<serde_json::Value>,
            #[serde(rename = "eventTime", default)]
            event_time: Option<serde_json::Value>,
            #[serde(default)]
            metadata: Option<Metadata>,
        }
        #[derive(serde::Deserialize)]
        struct Metadata {
            #[serde(default)]
            name: Option<serde_json::Value>,
            #[serde(default)]
            namespace: Option<serde_json::Value>,
            #[serde(rename = "creationTimestamp", default)]
            creation_timestamp: Option<serde_json::Value>,
        }
        // The whole decode resolves what the head parse refuses (a member
        // repeated), as the API reads it; the fields are then read alike.
        let head = match serde_json::from_slice::<Head>(&kv.value) {
            Ok(head) => head,
            Err(_) => serde_json::from_value(Api::decode(kv).ok()?).ok()?,
        };
        let text =
            |v: &Option<serde_json::Value>| v.as_ref().and_then(|v| v.as_str().map(str::to_owned));
        let metadata = head.metadata.as_ref();
        let times = [&head.last_timestamp, &head.event_time]
            .into_iter()
            .find_map(text)
            .or_else(|| metadata.and_then(|m| text(&m.creation_timestamp)));
        let namespace = metadata.and_then(|m| text(&m.namespace));
        let name = metadata.and_then(|m| text(&m.name)).unwrap_or_default();
        Some(Self {
            namespace,
            name,
            at: times.as_deref().and_then(time::parse_unix_seconds),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{Value, json};

    use super::*;
    use crate::store::MemoryBackend;

    fn event(namespace: &str, name: &str, times: Value) -> Value {
        let mut event = json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": namespace}, "reason": "Test"});
        for (field, value) in times.as_object().unwrap() {
            event[field] = value.clone();
        }
        event
    }

    #[tokio::test]
    async fn events_last_seen_before_the_ttl_go_and_the_rest_stay() {
        let api = Api::open(Arc::new(MemoryBackend::new())).await.unwrap();
        let events = api.kinds().require("v1", "Event").unwrap();
        let now = time::now_rfc3339();
        let old = "2020-01-01T00:00:00Z";
        let cases = [
            ("default", "old-last", json!({"lastTimestamp": old}), false),
            (
                "default",
                "recent-last",
                json!({"lastTimestamp": now}),
                true,
            ),
            (
                "other",
                "old-in-another-namespace",
                json!({"lastTimestamp": old}),
                false,
            ),
            // lastTimestamp first: a recent one keeps an old eventTime.
            (
                "default",
                "recent-last-old-time",
                json!({"lastTimestamp": now, "eventTime": old}),
                true,
            ),
            (
                "default",
                "old-event-time",
                json!({"eventTime": old}),
                false,
            ),
            // A member that is not a string counts as absent.
            (
                "default",
                "number-last-old-time",
                json!({"lastTimestamp": 5, "eventTime": old}),
                false,
            ),
            (
                "default",
                "null-last-recent-time",
                json!({"lastTimestamp": null, "eventTime": now}),
                true,
            ),
            // Neither: its creation, now.
            ("default", "no-times", json!({}), true),
        ];
        for (namespace, name, times, _) in &cases {
            api.create(&events, event(namespace, name, times.clone()))
                .await
                .unwrap();
        }
        let deleted = expire(&api, Duration::from_secs(3600)).await.unwrap();
        assert_eq!(deleted, cases.iter().filter(|c| !c.3).count());
        for (namespace, name, _, stays) in &cases {
            let found = api.get(&events, Some(namespace), name).await.is_ok();
            assert_eq!(found, *stays, "{namespace}/{name}");
        }
        assert_eq!(expire(&api, Duration::from_secs(3600)).await.unwrap(), 0);
    }

    #[test]
    fn text_the_head_parse_does_not_take_is_decoded_whole() {
        // A repeated member fails the head parse; the whole decode keeps
        // the last, as the API's decode does.
        let value = br#"{"apiVersion":"v1","kind":"Event","lastTimestamp":"2030-01-01T00:00:00Z","lastTimestamp":"2020-01-01T00:00:00Z","metadata":{"name":"e","namespace":"default"}}"#;
        let kv = KeyValue {
            key: "/registry/events/default/e".into(),
            value: value.to_vec().into(),
            create_revision: 1,
            mod_revision: 1,
        };
        let seen = Seen::of(&kv).unwrap();
        let whole = Api::decode(&kv).unwrap();
        assert_eq!(
            seen.at,
            whole["lastTimestamp"]
                .as_str()
                .and_then(time::parse_unix_seconds)
        );
        assert_eq!(
            (seen.namespace.as_deref(), seen.name.as_str()),
            (Some("default"), "e")
        );
    }
}

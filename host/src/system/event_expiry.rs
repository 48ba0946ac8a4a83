//! Event expiry: deletes `v1` Events whose last occurrence is older than a
//! time to live, as kube-apiserver's `--event-ttl` (one hour) does. With
//! the per-object event budget (`controller::events`) this bounds what
//! events can hold in the store, however much a plugin emits.
//!
//! A pass reads every Event, so passes run only when one can be due: the
//! expiry lists the Events (a pass, deleting what is past the time to
//! live), then follows their changes, keeping the earliest time of any
//! Event left or written since. It lists again only once that time is
//! past the time to live. Reading a million Events every minute was a
//! core's share for ever at idle, and fell across client LISTs
//! (docs/benchmarks/scale.md, "Quiet after the load").

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::api::{Api, DeleteOptions};
use crate::informer::watcher::{Event, Pager, Watcher};
use crate::object::{Object, time};
use crate::store::KeyValue;

/// Start a task that deletes the Events last seen more than `ttl` ago
/// (by `lastTimestamp`, else `eventTime`, else the creation time): at
/// once, then, checking every `interval`, whenever one can have expired.
/// Failures are logged and retried at the next check. The task runs until
/// the handle is aborted or the store's watch hub stops.
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
    tokio::spawn(async move { run(&api, interval, ttl).await })
}

/// A pass takes at most one part in this of the expiry's time.
const PASS_SHARE: u32 = 20;

/// Lists (a pass), follows, and lists again when an Event can be due.
async fn run(api: &Api, interval: Duration, ttl: Duration) {
    let mut watcher = Watcher::new(api, &Api::prefix(&events_kind(api), None));
    let mut pass = Pass::default();
    // The earliest time of an Event not deleted by the last pass or
    // written since: none can expire before it is past the time to live.
    let mut earliest: Option<i64> = None;
    // When to see whether a pass is due; none while one runs.
    let mut check_at: Option<Instant> = None;
    loop {
        tokio::select! {
            event = watcher.next() => match event {
                None => return,
                Some(Event::Init) => {
                    pass = Pass::default();
                    earliest = None;
                    check_at = None;
                }
                Some(Event::InitApply(kv)) => {
                    if let Some(left) = pass.visit(api, &kv, ttl).await {
                        earliest = earliest_of(earliest, Some(left));
                    }
                }
                Some(Event::InitDone { .. }) => {
                    pass.report();
                    // Back to back, passes over a million Events would keep a
                    // core busy: a pass takes at most its share of the time.
                    check_at = Some(Instant::now() + interval.max(pass.started.elapsed() * PASS_SHARE));
                }
                Some(Event::Apply(change)) => {
                    earliest = earliest_of(earliest, seen_at(&change.object));
                }
                Some(Event::Delete(_)) => {}
            },
            () = tokio::time::sleep_until(check_at.unwrap_or_else(Instant::now)), if check_at.is_some() => {
                if earliest.is_some_and(|at| at < cutoff(ttl)) {
                    watcher.relist();
                    check_at = None;
                } else {
                    check_at = Some(Instant::now() + interval);
                }
            }
        }
    }
}

fn events_kind(api: &Api) -> std::sync::Arc<crate::object::KindInfo> {
    api.kinds()
        .by_plural("", "events")
        .expect("Event is a built-in kind")
}

fn earliest_of(earliest: Option<i64>, at: Option<i64>) -> Option<i64> {
    earliest.into_iter().chain(at).min()
}

/// Events last seen before this (unix seconds) are past `ttl`.
fn cutoff(ttl: Duration) -> i64 {
    time::now_unix_ms() as i64 / 1000 - ttl.as_secs() as i64
}

/// One pass of [`run`] over the listed Events.
struct Pass {
    started: Instant,
    read: usize,
    deleted: usize,
    failed: usize,
}

impl Default for Pass {
    fn default() -> Self {
        Self {
            started: Instant::now(),
            read: 0,
            deleted: 0,
            failed: 0,
        }
    }
}

impl Pass {
    /// Deletes the listed Event if it is past `ttl`; the time of one left.
    async fn visit(&mut self, api: &Api, kv: &KeyValue, ttl: Duration) -> Option<i64> {
        self.read += 1;
        match expire_one(api, &events_kind(api), kv, cutoff(ttl)).await {
            Ok(Looked::Left(at)) => Some(at),
            Ok(Looked::Deleted) => {
                self.deleted += 1;
                None
            }
            Ok(Looked::Skipped) => None,
            Err((at, err)) => {
                // Still there and due: the next check lists again.
                if self.failed == 0 {
                    tracing::warn!(%err, key = %kv.key, "could not expire an event; will retry");
                }
                self.failed += 1;
                Some(at)
            }
        }
    }

    fn report(&self) {
        tracing::debug!(
            read = self.read,
            deleted = self.deleted,
            failed = self.failed,
            took = ?self.started.elapsed(),
            "event expiry pass"
        );
    }
}

/// When a watched Event was last seen, as [`Seen::of`] reads it from the
/// stored text.
fn seen_at(object: &Object) -> Option<i64> {
    [&object["lastTimestamp"], &object["eventTime"]]
        .into_iter()
        .find_map(Object::as_str)
        .or_else(|| object["metadata"]["creationTimestamp"].as_str())
        .and_then(time::parse_unix_seconds)
}

/// Delete the Events last seen more than `ttl` ago; how many went. Only
/// their names and times are read from the stored text (no Event is
/// decoded whole), a page at a time at one revision.
pub async fn expire(api: &Api, ttl: Duration) -> Result<usize, crate::api::Error> {
    let kind = events_kind(api);
    let cutoff = cutoff(ttl);
    let mut deleted = 0;
    let mut pager = Pager::new(&Api::prefix(&kind, None));
    while !pager.done() {
        for kv in pager.next_page(api.backend()).await? {
            match expire_one(api, &kind, &kv, cutoff).await {
                Ok(Looked::Deleted) => deleted += 1,
                Ok(Looked::Left(_) | Looked::Skipped) => {}
                Err((_, err)) => return Err(err),
            }
        }
    }
    Ok(deleted)
}

/// What [`expire_one`] found of one stored Event.
enum Looked {
    /// Not yet past the time to live: last seen then (unix seconds).
    Left(i64),
    Deleted,
    /// Undecodable, without a time, or already gone.
    Skipped,
}

/// Deletes the stored Event `kv` if it was last seen before `cutoff`
/// (unix seconds); a failed delete comes with the Event's time.
async fn expire_one(
    api: &Api,
    kind: &crate::object::KindInfo,
    kv: &KeyValue,
    cutoff: i64,
) -> Result<Looked, (i64, crate::api::Error)> {
    let Some((seen, at)) = Seen::of(kv).and_then(|seen| seen.at.map(|at| (seen, at))) else {
        return Ok(Looked::Skipped);
    };
    if at >= cutoff {
        return Ok(Looked::Left(at));
    }
    let options = DeleteOptions::default();
    match api
        .delete(kind, seen.namespace.as_deref(), &seen.name, &options)
        .await
    {
        Ok(_) => Ok(Looked::Deleted),
        Err(crate::api::Error::NotFound { .. }) => Ok(Looked::Skipped),
        Err(err) => Err((at, err)),
    }
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
    use crate::store::{Backend, MemoryBackend, Metered};

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

    /// The number of range reads `backend` has answered.
    fn ranges(backend: &Metered) -> u64 {
        backend.metrics().unwrap().snapshot()[1].latency.count
    }

    async fn until(what: &str, mut done: impl AsyncFnMut() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !done().await {
            assert!(std::time::Instant::now() < deadline, "{what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn a_pass_runs_only_once_an_event_can_be_due() {
        let backend = Arc::new(Metered::new(Arc::new(MemoryBackend::new())));
        let api = Api::open(backend.clone()).await.unwrap();
        let events = api.kinds().require("v1", "Event").unwrap();
        let now = time::now_rfc3339();
        for name in ["a", "b", "c"] {
            let fresh = event("default", name, json!({"lastTimestamp": now}));
            api.create(&events, fresh).await.unwrap();
        }
        let before = ranges(&backend);
        let expiry = start(&api, Duration::from_millis(5), Duration::from_secs(3600));
        until("the first pass", async || ranges(&backend) > before).await;
        // Checked every 5 ms, but nothing can be due for an hour: no Event
        // is read again (the pass before this read them all every check).
        tokio::time::sleep(Duration::from_millis(300)).await;
        let settled = ranges(&backend);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(ranges(&backend), settled, "no pass while nothing is due");

        // Written since with an old time (created, and one changed to it):
        // due at once, so a pass runs and deletes them, and only them.
        let old = "2020-01-01T00:00:00Z";
        let created = event("default", "old", json!({"lastTimestamp": old}));
        api.create(&events, created).await.unwrap();
        let mut changed = api.get(&events, Some("default"), "b").await.unwrap();
        changed["lastTimestamp"] = json!(old);
        api.update(&events, changed).await.unwrap();
        until("the old events expired", async || {
            let gone = |name| api.get(&events, Some("default"), name);
            gone("old").await.is_err() && gone("b").await.is_err()
        })
        .await;
        assert!(ranges(&backend) > settled, "a pass ran");
        for name in ["a", "c"] {
            api.get(&events, Some("default"), name).await.unwrap();
        }
        expiry.abort();
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

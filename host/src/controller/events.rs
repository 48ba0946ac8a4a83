//! Records Kubernetes `Event` objects (core `v1`) about an object, the way
//! `kubectl describe` reads them. Repeats of the same reason and message on
//! the same object are aggregated into one Event with a count.
//!
//! What a plugin's responses may record is bounded ([`EventBudget`]): at
//! most [`MAX_PER_RECONCILE`] events a reconcile, and per object a bucket
//! of [`OBJECT_BURST`] refilled by as many an hour (the plugin's grant's
//! `spec.limits.events` sets the burst; a reconcile may record a fifth), client-go's
//! `EventSourceObjectSpamFilter` with kube-apiserver's one-hour event time
//! to live (`system::event_expiry`) in mind: an object holds at most
//! about twice the burst of its plugin's events at any time. Past the
//! bound events are dropped, counted, and said once per reconcile in one
//! aggregated `EventsDropped` warning.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::api::{Api, Error};
use crate::contract::EventRecord;
use crate::object::{Object, meta, time};

/// Record `event` about `object`, reported by `component`.
pub async fn record(
    api: &Api,
    component: &str,
    object: &Object,
    event: &EventRecord,
) -> Result<(), Error> {
    let kind = api
        .kinds()
        .by_plural("", "events")
        .expect("Event is a built-in kind");
    let namespace = meta::namespace(object).unwrap_or("default");
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (
        meta::uid(object),
        &event.reason,
        &event.message,
        event.severity.as_str(),
    )
        .hash(&mut hasher);
    let name = format!("{}.{:016x}", meta::name(object), hasher.finish());
    let now = time::now_rfc3339();
    for _ in 0..5 {
        match api.get(&kind, Some(namespace), &name).await {
            Ok(mut existing) => {
                let count = existing["count"].as_i64().unwrap_or(1) + 1;
                existing["count"] = json!(count);
                existing["lastTimestamp"] = json!(now);
                match api.update(&kind, existing).await {
                    Err(Error::Conflict { .. }) => continue,
                    other => return other.map(|_| ()),
                }
            }
            Err(Error::NotFound { .. }) => {
                let event_object = json!({
                    "apiVersion": "v1",
                    "kind": "Event",
                    "metadata": {"name": name, "namespace": namespace},
                    "involvedObject": {
                        "apiVersion": meta::api_version(object),
                        "kind": meta::kind(object),
                        "name": meta::name(object),
                        "namespace": meta::namespace(object),
                        "uid": meta::uid(object),
                        "resourceVersion": meta::resource_version(object),
                    },
                    "reason": event.reason,
                    "message": event.message,
                    "type": event.severity.as_str(),
                    "count": 1,
                    "firstTimestamp": now,
                    "lastTimestamp": now,
                    "source": {"component": component},
                    "reportingComponent": component,
                });
                match api.create(&kind, event_object).await {
                    Err(Error::AlreadyExists { .. }) => continue,
                    other => return other.map(|_| ()),
                }
            }
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

/// The most events one reconcile records (its own and the host's about
/// the children it created or deleted); the rest are dropped.
pub const MAX_PER_RECONCILE: usize = 100;

/// Events an object may get at once from its plugin; as many more come
/// back over [`OBJECT_REFILL`].
pub const OBJECT_BURST: f64 = 500.0;

/// How long an object's event budget takes to refill completely.
pub const OBJECT_REFILL: Duration = Duration::from_secs(3600);

/// Objects whose budgets are remembered. Past it the full ones are
/// forgotten (a full bucket is what a forgotten object starts with), and if
/// more than half are still spending, all are (they start again full: a
/// bound on memory, not on a single object).
const MAX_OBJECTS: usize = 65_536;

/// The reason of the warning that says events were dropped.
pub const DROPPED_REASON: &str = "EventsDropped";

/// How many events the plugin's responses may still record, per object.
#[derive(Debug)]
pub struct EventBudget {
    buckets: Mutex<HashMap<String, Bucket>>,
    /// The per-object burst (and hourly refill) in force, as `f64` bits:
    /// [`OBJECT_BURST`] unless the plugin's grant says otherwise
    /// (`spec.limits.events`).
    burst: std::sync::atomic::AtomicU64,
}

impl Default for EventBudget {
    fn default() -> Self {
        Self {
            buckets: Mutex::default(),
            burst: std::sync::atomic::AtomicU64::new(OBJECT_BURST.to_bits()),
        }
    }
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// Its tokens at `now`, with a burst (and hourly refill) of `burst`.
    fn refilled(&self, now: Instant, burst: f64) -> f64 {
        let refill = burst / OBJECT_REFILL.as_secs_f64();
        (self.tokens + now.saturating_duration_since(self.at).as_secs_f64() * refill).min(burst)
    }
}

impl EventBudget {
    /// Take up to `wanted` events for the object `uid`; how many it may
    /// record.
    pub fn take(&self, uid: &str, wanted: usize) -> usize {
        let burst = self.burst();
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if !buckets.contains_key(uid) && buckets.len() >= MAX_OBJECTS {
            buckets.retain(|_, b| b.refilled(now, burst) < burst);
            if buckets.len() > MAX_OBJECTS / 2 {
                buckets.clear();
            }
        }
        let bucket = buckets.entry(uid.to_owned()).or_insert(Bucket {
            tokens: burst,
            at: now,
        });
        bucket.tokens = bucket.refilled(now, burst);
        bucket.at = now;
        let granted = (bucket.tokens.floor() as usize)
            .min(wanted)
            .min(per_reconcile(burst));
        bucket.tokens -= granted as f64;
        granted
    }
}

impl EventBudget {
    /// The per-object burst in force.
    pub fn burst(&self) -> f64 {
        f64::from_bits(self.burst.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Set the per-object burst (and hourly refill): the plugin's grant's
    /// `spec.limits.events`, or [`OBJECT_BURST`]. A reconcile may record a
    /// fifth of it ([`MAX_PER_RECONCILE`] by default).
    ///
    /// ```
    /// use setpoint::controller::events::EventBudget;
    ///
    /// let budget = EventBudget::default();
    /// assert_eq!(budget.take("a", 1_000), 100);
    /// budget.set_burst(5_000.0);
    /// assert_eq!(budget.take("b", 10_000), 1_000, "a fifth of the raised burst");
    /// ```
    pub fn set_burst(&self, burst: f64) {
        let burst = if burst.is_finite() && burst >= 1.0 {
            burst
        } else {
            OBJECT_BURST
        };
        self.burst
            .store(burst.to_bits(), std::sync::atomic::Ordering::Relaxed);
    }
}

/// The most events one reconcile records with a per-object burst of
/// `burst`: a fifth of it.
fn per_reconcile(burst: f64) -> usize {
    ((burst / 5.0) as usize).max(1)
}

/// The warning recorded when a reconcile's events were dropped, with a
/// per-object burst of `burst`: one message, so repeats aggregate into one
/// Event with a count.
pub fn dropped_warning(burst: f64) -> EventRecord {
    EventRecord {
        severity: crate::contract::Severity::Warning,
        reason: DROPPED_REASON.to_owned(),
        message: format!(
            "events about this object were dropped: at most {} a reconcile, and {} at once then {} an hour per object (the plugin's PluginGrant raises it: spec.limits.events; setpoint_controller_events_dropped_total)",
            per_reconcile(burst),
            burst as u64,
            burst as u64
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reconcile_records_at_most_its_share_and_an_object_its_burst() {
        let budget = EventBudget::default();
        assert_eq!(budget.take("a", 10_000), MAX_PER_RECONCILE);
        let mut total = MAX_PER_RECONCILE;
        for _ in 0..100 {
            total += budget.take("a", 10_000);
        }
        assert_eq!(
            total, OBJECT_BURST as usize,
            "then the object's burst is spent"
        );
        assert_eq!(budget.take("b", 3), 3, "another object has its own");
    }
}

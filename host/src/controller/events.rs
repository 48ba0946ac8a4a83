//! Records Kubernetes `Event` objects (core `v1`) about an object, the way
//! `kubectl describe` reads them. Repeats of the same reason and message on
//! the same object are aggregated into one Event with a count.

use std::hash::{Hash, Hasher};

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

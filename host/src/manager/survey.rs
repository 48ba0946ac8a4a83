//! What a host can tell about its objects without reading the store: the
//! objects its shared informers hold, counted per kind with how many are
//! not `Ready`, the ones that need a look (a hot loop, a long `Ready=False`),
//! the dependents of an object through the informers' owner indexes, and
//! each plugin's recent reconcile durations. The console's overview and
//! ownership tree are built from these; kinds no informer holds are not
//! counted (their objects stay in the store only).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::Value;

use crate::object::{KindInfo, Object, ObjectKey, meta};

use super::Host;

/// How many flagged objects of each sort [`Host::census`] returns.
const MAX_FLAGGED: usize = 50;

/// `Ready=False` for at least this long is called stalled.
pub const STALLED_AFTER: Duration = Duration::from_secs(60);

/// One kind's objects as the host's informers hold them.
#[derive(Debug, Clone)]
pub struct KindCount {
    /// The kind.
    pub kind: Arc<KindInfo>,
    /// Its objects, `None` when no informer holds the kind.
    pub count: Option<usize>,
    /// Of them, those whose `Ready` condition is not `True` (objects
    /// without a `Ready` condition are not counted), `None` likewise.
    pub not_ready: Option<usize>,
}

/// An object that needs a look, and why.
#[derive(Debug, Clone)]
pub struct Flagged {
    /// The object's kind.
    pub kind: Arc<KindInfo>,
    /// The object.
    pub object: Arc<Object>,
    /// Its `Ready` condition's reason.
    pub reason: String,
    /// Its `Ready` condition's message.
    pub message: String,
    /// How long `Ready` has been `False`, if its condition says since when.
    pub for_how_long: Option<Duration>,
}

/// Every kind's counts and the objects that need a look.
#[derive(Debug, Clone, Default)]
pub struct Census {
    /// Every registered kind, with counts where an informer holds it.
    pub kinds: Vec<KindCount>,
    /// Objects whose circuit breaker opened (`Ready=False`, `HotLoop`),
    /// at most 50.
    pub hot_loops: Vec<Flagged>,
    /// Other objects `Ready=False` for at least [`STALLED_AFTER`], longest
    /// first, at most 50.
    pub stalled: Vec<Flagged>,
}

/// The `Ready` condition of `object`: (status, reason, message,
/// lastTransitionTime).
pub fn ready_condition(object: &Object) -> Option<(&str, &str, &str, Option<&str>)> {
    let ready = meta::condition(object, "Ready")?;
    let text = |field: &str| ready.get(field).and_then(Value::as_str);
    Some((
        text("status").unwrap_or("Unknown"),
        text("reason").unwrap_or(""),
        text("message").unwrap_or(""),
        text("lastTransitionTime"),
    ))
}

impl Host {
    /// Count every kind's objects from the informers and find the ones
    /// that need a look, through their readiness indexes: the cost is that
    /// of the objects not `Ready`, not of all of them (no store access, no
    /// object decoded but those flagged). Kinds without an informer have no
    /// counts.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
    /// let host = setpoint::Host::builder().in_memory().build().await.unwrap();
    /// let census = host.census();
    /// assert!(census.kinds.iter().any(|k| k.kind.kind == "Event"));
    /// assert!(census.hot_loops.is_empty());
    /// host.shutdown().await;
    /// # });
    /// ```
    pub fn census(&self) -> Census {
        let now_ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let mut census = Census::default();
        let informers = &self.shared.informers;
        let mut stalled = Vec::new();
        for kind in self.shared.api.kinds().all() {
            let Some(informer) = informers.existing(&kind.group, &kind.plural) else {
                census.kinds.push(KindCount {
                    kind,
                    count: None,
                    not_ready: None,
                });
                continue;
            };
            // From the readiness index: what is not Ready is few, and
            // nothing else is decoded.
            let not_ready = informer.not_ready();
            for (key, state) in &not_ready {
                let for_how_long = state
                    .since_unix_ms
                    .map(|since| Duration::from_millis(now_ms.saturating_sub(since).max(0) as u64));
                if state.hot_loop && census.hot_loops.len() < MAX_FLAGGED {
                    if let Some(flagged) = flag(&informer, &kind, key, for_how_long) {
                        census.hot_loops.push(flagged);
                    }
                } else if !state.hot_loop
                    && state.failed
                    && for_how_long.is_some_and(|d| d >= STALLED_AFTER)
                {
                    stalled.push((for_how_long, kind.clone(), informer.clone(), key.clone()));
                }
            }
            census.kinds.push(KindCount {
                kind,
                count: Some(informer.len()),
                not_ready: Some(not_ready.len()),
            });
        }
        // Longest first; only those shown are decoded.
        stalled.sort_by_key(|(for_how_long, ..)| std::cmp::Reverse(*for_how_long));
        census.stalled = stalled
            .into_iter()
            .filter_map(|(for_how_long, kind, informer, key)| {
                flag(&informer, &kind, &key, for_how_long)
            })
            .take(MAX_FLAGGED)
            .collect();
        census
    }

    /// An object as the informer of its kind holds it, if one does.
    pub fn cached(&self, kind: &KindInfo, key: &ObjectKey) -> Option<Arc<Object>> {
        self.shared
            .informers
            .existing(&kind.group, &kind.plural)?
            .get(key)
    }

    /// The informers the host holds now, taken once to find the
    /// dependents of many objects (a tree) without looking each kind up
    /// again for each.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
    /// let host = setpoint::Host::builder().in_memory().build().await.unwrap();
    /// assert!(host.holdings().dependents("no-such-uid").is_empty());
    /// host.shutdown().await;
    /// # });
    /// ```
    pub fn holdings(&self) -> Holdings {
        Holdings(
            self.shared
                .api
                .kinds()
                .all()
                .into_iter()
                .filter_map(|kind| {
                    let informer = self.shared.informers.existing(&kind.group, &kind.plural)?;
                    Some((kind, informer))
                })
                .collect(),
        )
    }

    /// Each plugin's `q` quantile of its latest reconciles' durations (see
    /// [`crate::controller::Tally::recent_quantile`]), by plugin name.
    pub async fn reconcile_quantiles(&self, q: f64) -> HashMap<String, Duration> {
        self.shared
            .plugins
            .lock()
            .await
            .values()
            .filter_map(|entry| Some((entry.status.name.clone(), entry.tally.recent_quantile(q)?)))
            .collect()
    }

    /// What each plugin may spend, by plugin name: its per-call limits
    /// (deadline, memory, response size…) and, while it runs, the shares of
    /// call time and write bandwidth it is paced to.
    pub async fn plugin_limits(
        &self,
    ) -> HashMap<
        String,
        (
            crate::runtime::Limits,
            Option<crate::controller::PaceLimits>,
        ),
    > {
        let limits: Vec<(String, crate::runtime::Limits)> = self
            .shared
            .plugins
            .lock()
            .await
            .values()
            .filter_map(|e| Some((e.status.name.clone(), e.limits.clone()?)))
            .collect();
        let controllers = self.shared.controllers.lock().await;
        limits
            .into_iter()
            .map(|(name, limits)| {
                let pace = controllers
                    .get(&name)
                    .map(crate::controller::Controller::pace_limits);
                (name, (limits, pace))
            })
            .collect()
    }

    /// The manifests of the running reconcilers, by name.
    pub async fn manifests(&self) -> Vec<crate::contract::Manifest> {
        self.shared
            .controllers
            .lock()
            .await
            .values()
            .map(crate::controller::Controller::manifest)
            .collect()
    }
}

/// The informers a host held when [`Host::holdings`] was called.
pub struct Holdings(Vec<(Arc<KindInfo>, crate::informer::Informer)>);

impl Holdings {
    /// The held objects, of every kind, whose owner references name `uid`
    /// (through each informer's owner index), in no particular order.
    pub fn dependents(&self, uid: &str) -> Vec<(Arc<KindInfo>, Arc<Object>)> {
        self.0
            .iter()
            .flat_map(|(kind, informer)| {
                informer
                    .owned_by(uid)
                    .into_iter()
                    .map(move |object| (kind.clone(), object))
            })
            .collect()
    }
}

/// The object at `key` with its `Ready` condition's words, if it is still
/// held.
fn flag(
    informer: &crate::informer::Informer,
    kind: &Arc<KindInfo>,
    key: &ObjectKey,
    for_how_long: Option<Duration>,
) -> Option<Flagged> {
    let object = informer.get(key)?;
    let (_, reason, message, _) = ready_condition(&object)?;
    Some(Flagged {
        kind: kind.clone(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        for_how_long,
        object,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_census_counts_from_the_readiness_index_and_flags_hot_loops_and_long_failures() {
        let host = Host::builder().in_memory().build().await.unwrap();
        let api = host.api();
        api.create(
            &api.crd_kind(),
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "gadgets.test.setpoint.dev"},
                "spec": {"group": "test.setpoint.dev", "scope": "Namespaced",
                    "names": {"kind": "Gadget", "plural": "gadgets"},
                    "versions": [{"name": "v1", "served": true, "storage": true,
                        "schema": {"openAPIV3Schema": {"type": "object",
                            "x-kubernetes-preserve-unknown-fields": true}}}]}}),
        )
        .await
        .unwrap();
        let kind = api
            .kinds()
            .require("test.setpoint.dev/v1", "Gadget")
            .unwrap();
        let just_now = chrono::Utc::now().to_rfc3339();
        let gadget = |name: &str, ready: Option<(&str, &str, &str)>| {
            let mut object = json!({"apiVersion": "test.setpoint.dev/v1", "kind": "Gadget",
                "metadata": {"name": name, "namespace": "default"}});
            if let Some((status, reason, since)) = ready {
                object["status"] = json!({"conditions": [{"type": "Ready", "status": status,
                    "reason": reason, "message": format!("{name} says {reason}"),
                    "lastTransitionTime": since}]});
            }
            object
        };
        for object in [
            gadget("fine", Some(("True", "Done", "2020-01-01T00:00:00Z"))),
            gadget("plain", None),
            gadget("looping", Some(("False", "HotLoop", &just_now))),
            gadget(
                "stuck-long",
                Some(("False", "ReconcileError", "2020-01-01T00:00:00Z")),
            ),
            gadget(
                "stuck-longer",
                Some(("False", "ReconcileError", "2019-01-01T00:00:00Z")),
            ),
            gadget("failing-now", Some(("False", "ReconcileError", &just_now))),
            gadget(
                "unsure",
                Some(("Unknown", "Waiting", "2019-01-01T00:00:00Z")),
            ),
        ] {
            api.create(&kind, object).await.unwrap();
        }
        let informer = host.shared.informers.for_kind(kind.clone());
        informer.wait_synced().await;

        let census = host.census();
        let gadgets = census
            .kinds
            .iter()
            .find(|k| k.kind.kind == "Gadget")
            .unwrap();
        assert_eq!((gadgets.count, gadgets.not_ready), (Some(7), Some(5)));
        let names = |list: &[Flagged]| {
            list.iter()
                .map(|f| meta::name(&f.object).to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&census.hot_loops), ["looping"]);
        assert_eq!(census.hot_loops[0].message, "looping says HotLoop");
        assert_eq!(
            names(&census.stalled),
            ["stuck-longer", "stuck-long"],
            "False for over a minute, longest first; not Unknown, not just now"
        );
        let events = census
            .kinds
            .iter()
            .find(|k| k.kind.kind == "Event")
            .unwrap();
        assert_eq!(
            (events.count, events.not_ready),
            (None, None),
            "no informer holds events"
        );

        // The index follows changes: the looping one recovers.
        let mut looping = api.get(&kind, Some("default"), "looping").await.unwrap();
        looping["status"]["conditions"][0]["status"] = json!("True");
        let revision = api.update(&kind, looping).await.unwrap();
        let revision: i64 = meta::resource_version(&revision).unwrap().parse().unwrap();
        assert!(
            informer
                .wait_for_revision(revision, Duration::from_secs(10))
                .await
        );
        let census = host.census();
        assert!(census.hot_loops.is_empty());
        let gadgets = census
            .kinds
            .iter()
            .find(|k| k.kind.kind == "Gadget")
            .unwrap();
        assert_eq!(gadgets.not_ready, Some(4));
        drop(informer);
        host.shutdown().await;
    }
}

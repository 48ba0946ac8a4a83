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
    let conditions = object.get("status")?.get("conditions")?.as_array()?;
    let ready = conditions
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))?;
    let text = |field: &str| ready.get(field).and_then(Value::as_str);
    Some((
        text("status").unwrap_or("Unknown"),
        text("reason").unwrap_or(""),
        text("message").unwrap_or(""),
        text("lastTransitionTime"),
    ))
}

fn since(time: Option<&str>, now: SystemTime) -> Option<Duration> {
    let at = chrono::DateTime::parse_from_rfc3339(time?).ok()?;
    let at =
        SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(at.timestamp_millis()).ok()?);
    now.duration_since(at).ok()
}

impl Host {
    /// Count every kind's objects from the informers and find the ones
    /// that need a look. Reads each held object's conditions once (no
    /// store access); kinds without an informer have no counts.
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
        let now = SystemTime::now();
        let mut census = Census::default();
        let informers = &self.shared.informers;
        for kind in self.shared.api.kinds().all() {
            let Some(informer) = informers.existing(&kind.group, &kind.plural) else {
                census.kinds.push(KindCount {
                    kind,
                    count: None,
                    not_ready: None,
                });
                continue;
            };
            let objects = informer.list(None);
            let mut not_ready = 0;
            for object in &objects {
                let Some((status, reason, message, at)) = ready_condition(object) else {
                    continue;
                };
                if status == "True" {
                    continue;
                }
                not_ready += 1;
                if status != "False" {
                    continue;
                }
                let for_how_long = since(at, now);
                let flagged = || Flagged {
                    kind: kind.clone(),
                    object: object.clone(),
                    reason: reason.to_owned(),
                    message: message.to_owned(),
                    for_how_long,
                };
                if reason == "HotLoop" {
                    if census.hot_loops.len() < MAX_FLAGGED {
                        census.hot_loops.push(flagged());
                    }
                } else if for_how_long.is_some_and(|d| d >= STALLED_AFTER) {
                    census.stalled.push(flagged());
                    if census.stalled.len() > 4 * MAX_FLAGGED {
                        keep_longest(&mut census.stalled);
                    }
                }
            }
            census.kinds.push(KindCount {
                kind,
                count: Some(objects.len()),
                not_ready: Some(not_ready),
            });
        }
        keep_longest(&mut census.stalled);
        census
    }

    /// An object as the informer of its kind holds it, if one does.
    pub fn cached(&self, kind: &KindInfo, key: &ObjectKey) -> Option<Arc<Object>> {
        self.shared
            .informers
            .existing(&kind.group, &kind.plural)?
            .get(key)
    }

    /// The objects, of every kind an informer holds, whose owner
    /// references name `uid`, by kind then name.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
    /// let host = setpoint::Host::builder().in_memory().build().await.unwrap();
    /// assert!(host.dependents("no-such-uid").is_empty());
    /// host.shutdown().await;
    /// # });
    /// ```
    pub fn dependents(&self, uid: &str) -> Vec<(Arc<KindInfo>, Arc<Object>)> {
        let mut found = Vec::new();
        for kind in self.shared.api.kinds().all() {
            if let Some(informer) = self.shared.informers.existing(&kind.group, &kind.plural) {
                found.extend(
                    informer
                        .owned_by(uid)
                        .into_iter()
                        .map(|o| (kind.clone(), o)),
                );
            }
        }
        found.sort_by(|(ka, a), (kb, b)| (&ka.kind, meta::name(a)).cmp(&(&kb.kind, meta::name(b))));
        found
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

/// Keep the [`MAX_FLAGGED`] objects stalled longest.
fn keep_longest(stalled: &mut Vec<Flagged>) {
    stalled.sort_by_key(|f| std::cmp::Reverse(f.for_how_long));
    stalled.truncate(MAX_FLAGGED);
}

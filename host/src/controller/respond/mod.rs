//! Applies a reconcile [`Response`]: children diffed against what exists
//! (created or updated with the owner reference the host sets, extras
//! deleted), the status merge patch written with the resource version the
//! reconciler saw (the narrow status write, `Api::patch_status`), events
//! recorded (the response's, and `SuccessfulCreate`/`SuccessfulDelete` for
//! each child created or deleted), the finalizer removed. Anything equal to
//! what is stored is not written, so a converged object costs no writes.
//!
//! Children are applied one by one: a desired child whose name another
//! owner's object already holds is a [`Clash`], set aside while the other
//! children, the status and the events are applied; the controller reports
//! it on the object and tries again when the name frees up.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::Error;
use super::echo::Echoes;
use super::events::EventBudget;
use crate::api::{self, Api, DeleteOptions};
use crate::contract::{EventRecord, Manifest, Response, Severity};
use crate::object::{KindInfo, Object, ObjectKey, meta, patch};

/// Store revisions written, with the kind written to.
pub(crate) type Writes = Vec<(Arc<KindInfo>, i64)>;

/// Everything the applier needs about the controller.
pub(crate) struct Applier<'a> {
    pub api: &'a Api,
    pub manifest: &'a Manifest,
    pub owned_kinds: &'a [Arc<KindInfo>],
    pub kind: &'a Arc<KindInfo>,
    /// The reconciled object's key, and where the echo of its status
    /// write is dropped (see `echo`); `None` where nothing watches (a plan).
    pub echo: Option<(&'a ObjectKey, &'a Echoes)>,
    /// Store revisions this applier wrote, per kind: the next reconcile of
    /// the same key waits until the informers have seen them.
    pub written: std::sync::Mutex<Writes>,
    /// Events recorded (writes the breaker counts, with no revision to
    /// wait for).
    pub events: std::sync::atomic::AtomicUsize,
    /// Desired children that could not be created: their names belong to
    /// someone else.
    pub clashes: std::sync::Mutex<Vec<Clash>>,
    /// `SuccessfulCreate`/`SuccessfulDelete` events about the children
    /// this applier created and deleted: the host knows what it did, so a
    /// plugin need not predict it. Recorded on the parent with the
    /// response's events, or only kept here by a plan
    /// ([`Applier::keeping_events`]), which shows them instead.
    pub child_events: std::sync::Mutex<Vec<EventRecord>>,
    /// Whether child events are kept rather than recorded.
    keep_events: bool,
    /// What the plugin's events about each object may still take; `None`
    /// records all (a plan records none).
    event_budget: Option<&'a EventBudget>,
    /// Events not recorded: over the budget.
    pub events_dropped: std::sync::atomic::AtomicUsize,
    /// Whether a child was created, changed or deleted.
    pub children_moved: std::sync::atomic::AtomicBool,
    /// Bytes of the objects written (as encoded), for the plugin's pace.
    pub bytes_written: std::sync::atomic::AtomicUsize,
    /// Where the plugin's grant is read when a response wants more than
    /// [`MAX_CHILDREN`] children (it may raise the bound).
    grants: Option<&'a crate::egress::Egress>,
}

/// The most children one object may have unless its plugin's
/// `PluginGrant` says otherwise (`spec.limits.children`).
pub const MAX_CHILDREN: usize = 1_000;

/// A desired child whose name another object holds.
#[derive(Debug, Clone)]
pub(crate) struct Clash {
    /// The child's kind.
    pub kind: Arc<KindInfo>,
    /// Its namespace, for a namespaced kind.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// Who holds the name: the controller of the existing object, or that
    /// it has none.
    pub holder: String,
}

impl Clash {
    /// One line for a condition or an event.
    pub fn describe(&self) -> String {
        format!(
            "{} {:?} already exists and is {}",
            self.kind.kind, self.name, self.holder
        )
    }
}

/// Who controls `object`, in words: "controlled by Zoo \"other\"", or
/// "not controlled by this {parent_kind}" when no controller is named.
fn holder_of(object: &Object, parent_kind: &str) -> String {
    meta::owner_references(object)
        .iter()
        .find(|r| r["controller"].as_bool() == Some(true))
        .map(|r| {
            format!(
                "controlled by {} {:?}",
                r["kind"].as_str().unwrap_or("?"),
                r["name"].as_str().unwrap_or("?")
            )
        })
        .unwrap_or_else(|| format!("not controlled by this {parent_kind} (it has no controller)"))
}

impl<'a> Applier<'a> {
    /// An applier for `manifest`'s reconciler of `kind` that has written
    /// nothing yet.
    pub fn new(
        api: &'a Api,
        manifest: &'a Manifest,
        owned_kinds: &'a [Arc<KindInfo>],
        kind: &'a Arc<KindInfo>,
        echo: Option<(&'a ObjectKey, &'a Echoes)>,
    ) -> Self {
        Self {
            api,
            manifest,
            owned_kinds,
            kind,
            echo,
            written: Default::default(),
            events: Default::default(),
            clashes: Default::default(),
            child_events: Default::default(),
            keep_events: false,
            event_budget: None,
            events_dropped: Default::default(),
            children_moved: Default::default(),
            bytes_written: Default::default(),
            grants: None,
        }
    }

    /// This applier reads the plugin's `PluginGrant` from `egress` when a
    /// response wants more than [`MAX_CHILDREN`] children; without, that
    /// is the bound.
    pub fn with_grants(mut self, egress: &'a crate::egress::Egress) -> Self {
        self.grants = Some(egress);
        self
    }

    /// This applier records the events of a response only as far as
    /// `budget` lets it (`events::EventBudget`).
    pub fn with_event_budget(mut self, budget: &'a EventBudget) -> Self {
        self.event_budget = Some(budget);
        self
    }

    /// This applier keeps the events about children in
    /// [`Applier::child_events`] instead of recording them (a plan).
    pub fn keeping_events(mut self) -> Self {
        self.keep_events = true;
        self
    }

    /// Note an event about a child this applier created or deleted.
    fn child_event(&self, reason: &str, verb: &str, kind: &KindInfo, name: &str) {
        self.child_events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(EventRecord {
                severity: Severity::Normal,
                reason: reason.to_owned(),
                // Kubernetes' wording: "Created pod: web-0".
                message: format!("{verb} {}: {name}", kind.kind.to_lowercase()),
            });
    }

    /// A child was created, changed or deleted: written, and progress.
    fn wrote_child(&self, kind: &Arc<KindInfo>, child: &Object) {
        self.wrote(kind, child);
        self.children_moved
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn wrote(&self, kind: &Arc<KindInfo>, object: &Object) {
        self.wrote_bytes(kind, object, crate::object::shape::encoded_len(object));
    }

    /// [`Applier::wrote`] with the bytes written known (measuring the
    /// object again walks all of it).
    fn wrote_bytes(&self, kind: &Arc<KindInfo>, object: &Object, bytes: usize) {
        self.bytes_written
            .fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
        if let Some(rv) = meta::resource_version(object).and_then(|rv| rv.parse().ok()) {
            self.written
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((kind.clone(), rv));
        }
    }

    /// Apply `response` for `parent`, given the children the reconciler saw.
    pub async fn apply(
        &self,
        parent: &Object,
        owned: &[Arc<Object>],
        response: &Response,
    ) -> Result<(), Error> {
        if let Some(children) = &response.children {
            self.apply_children(parent, owned, children).await?;
        }
        if let Some(status_patch) = &response.status {
            self.apply_status(parent, status_patch).await?;
        }
        let child_events = if self.keep_events {
            Vec::new()
        } else {
            std::mem::take(&mut *self.child_events.lock().unwrap_or_else(|p| p.into_inner()))
        };
        let wanted = child_events.len() + response.events.len();
        let allowed = self
            .event_budget
            .map_or(wanted, |budget| budget.take(meta::uid(parent), wanted));
        let dropped = wanted - allowed;
        let burst = self
            .event_budget
            .map_or(super::events::OBJECT_BURST, EventBudget::burst);
        let warning = (dropped > 0).then(|| super::events::dropped_warning(burst));
        if dropped > 0 {
            self.events_dropped
                .fetch_add(dropped, std::sync::atomic::Ordering::Relaxed);
            tracing::debug!(plugin = %self.manifest.name, dropped, "events over the budget dropped");
        }
        // The plugin's own events first: they say why; the children's
        // creations are in the children themselves.
        let events = response
            .events
            .iter()
            .chain(child_events.iter())
            .take(allowed)
            .chain(warning.as_ref());
        for event in events {
            match super::events::record(self.api, &self.manifest.name, parent, event).await {
                Ok(()) => {
                    self.events
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                Err(err) => {
                    tracing::warn!(plugin = %self.manifest.name, %err, "could not record event");
                }
            }
        }
        Ok(())
    }

    fn child_kind(&self, child: &Object) -> Result<&Arc<KindInfo>, Error> {
        let api_version = meta::api_version(child);
        let kind = meta::kind(child);
        self.owned_kinds
            .iter()
            .find(|k| k.api_version() == api_version && k.kind == kind)
            .ok_or_else(|| {
                Error::Refused(format!(
                    "child {api_version}/{kind} {:?} is not a kind the plugin declared in `owns`",
                    meta::name(child)
                ))
            })
    }

    /// Stamp namespace and owner reference on a desired child; the
    /// reconciler's own ownerReferences are never trusted.
    fn prepare_child(
        &self,
        parent: &Object,
        kind: &KindInfo,
        mut child: Object,
    ) -> Result<Object, Error> {
        if meta::name(&child).is_empty() {
            return Err(Error::Refused(format!(
                "a desired {} child has no metadata.name",
                kind.kind
            )));
        }
        let parent_ns = meta::namespace(parent);
        let m = meta::metadata_mut(&mut child);
        if kind.namespaced {
            let ns = parent_ns.unwrap_or("default");
            if let Some(other) = m.get("namespace").and_then(Value::as_str)
                && other != ns
            {
                return Err(Error::Refused(format!(
                    "child {} {:?} is in namespace {other:?}, but children must live in their owner's namespace {ns:?}",
                    kind.kind,
                    m.get("name").and_then(Value::as_str).unwrap_or("")
                )));
            }
            m.insert("namespace".into(), json!(ns));
        }
        m.insert(
            "ownerReferences".into(),
            json!([meta::controller_reference(parent)]),
        );
        for field in [
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "deletionTimestamp",
        ] {
            m.remove(field);
        }
        if let Some(map) = child.as_object_mut() {
            map.remove("status");
        }
        Ok(child)
    }

    async fn apply_children(
        &self,
        parent: &Object,
        owned: &[Arc<Object>],
        desired: &[Object],
    ) -> Result<(), Error> {
        if desired.len() > MAX_CHILDREN {
            // Read only past the default: most responses never pay for it.
            let granted = match self.grants {
                Some(egress) => egress
                    .grant(&self.manifest.name)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|g| g.limits.children),
                None => None,
            };
            let max = granted.unwrap_or(MAX_CHILDREN);
            if desired.len() > max {
                return Err(Error::Refused(format!(
                    "the response wants {} children; an object may have at most {max} (the plugin's PluginGrant raises it: spec.limits.children)",
                    desired.len(),
                )));
            }
        }
        let mut existing: HashMap<(String, String, String), &Arc<Object>> = owned
            .iter()
            .map(|o| {
                (
                    (
                        meta::api_version(o).to_owned(),
                        meta::kind(o).to_owned(),
                        meta::name(o).to_owned(),
                    ),
                    o,
                )
            })
            .collect();
        let mut prepared = Vec::with_capacity(desired.len());
        for child in desired {
            let kind = self.child_kind(child)?.clone();
            prepared.push((
                kind.clone(),
                self.prepare_child(parent, &kind, child.clone())?,
            ));
        }
        for (kind, child) in prepared {
            let id = (
                meta::api_version(&child).to_owned(),
                meta::kind(&child).to_owned(),
                meta::name(&child).to_owned(),
            );
            match existing.remove(&id) {
                Some(current) => self.update_child_if_changed(&kind, current, &child).await?,
                None => {
                    if let Some(clash) = self.create_child(parent, &kind, child).await? {
                        self.clashes
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(clash);
                    }
                }
            }
        }
        for (_, stale) in existing {
            if meta::deletion_timestamp(stale).is_some() {
                continue;
            }
            let kind = match self.child_kind(stale) {
                Ok(k) => k,
                Err(_) => continue,
            };
            let options = DeleteOptions {
                uid: Some(meta::uid(stale).to_owned()),
                ..Default::default()
            };
            match self
                .api
                .delete(kind, meta::namespace(stale), meta::name(stale), &options)
                .await
            {
                Ok(deleted) => {
                    self.wrote_child(kind, &deleted);
                    self.child_event("SuccessfulDelete", "Deleted", kind, meta::name(stale));
                }
                Err(api::Error::NotFound { .. }) => {}
                Err(api::Error::Conflict { .. }) => {} // already replaced by a newer object
                Err(err) => return Err(err.into()),
            }
        }
        Ok(())
    }

    /// Create `child`, or update it if it exists and is ours; a name held
    /// by another object is returned as a [`Clash`].
    async fn create_child(
        &self,
        parent: &Object,
        kind: &Arc<KindInfo>,
        child: Object,
    ) -> Result<Option<Clash>, Error> {
        match self.api.create(kind, child.clone()).await {
            Ok(created) => {
                self.wrote_child(kind, &created);
                self.child_event("SuccessfulCreate", "Created", kind, meta::name(&created));
                Ok(None)
            }
            Err(api::Error::AlreadyExists { .. }) => {
                // The cache had not seen it yet, or someone else owns it.
                let live = match self
                    .api
                    .get(kind, meta::namespace(&child), meta::name(&child))
                    .await
                {
                    Ok(live) => live,
                    // Gone again meanwhile: the next reconcile creates it.
                    Err(api::Error::NotFound { .. }) => return Ok(None),
                    Err(err) => return Err(err.into()),
                };
                if meta::controller_uid(&live) != Some(meta::uid(parent)) {
                    return Ok(Some(Clash {
                        kind: kind.clone(),
                        namespace: meta::namespace(&child).map(str::to_owned),
                        name: meta::name(&child).to_owned(),
                        holder: holder_of(&live, &self.kind.kind),
                    }));
                }
                self.update_child_if_changed(kind, &Arc::new(live), &child)
                    .await
                    .map(|()| None)
            }
            Err(err) => Err(err.into()),
        }
    }

    async fn update_child_if_changed(
        &self,
        kind: &Arc<KindInfo>,
        current: &Arc<Object>,
        desired: &Object,
    ) -> Result<(), Error> {
        let mut next = (**current).clone();
        let Some(next_map) = next.as_object_mut() else {
            return Ok(());
        };
        // Desired top-level fields replace the current ones; metadata merges
        // labels and annotations so that other writers' keys survive.
        for (field, value) in desired.as_object().into_iter().flatten() {
            if field != "metadata" && field != "status" {
                next_map.insert(field.clone(), value.clone());
            }
        }
        let desired_meta = &desired["metadata"];
        let m = meta::metadata_mut(&mut next);
        for field in ["labels", "annotations"] {
            if let Some(values) = desired_meta.get(field).filter(|v| v.is_object()) {
                let target = m.entry(field).or_insert_with(|| json!({}));
                patch::merge(target, values);
            }
        }
        m.insert(
            "ownerReferences".into(),
            desired_meta["ownerReferences"].clone(),
        );
        if next == **current {
            return Ok(());
        }
        match self.api.update(kind, next).await {
            Ok(updated) => {
                self.wrote_child(kind, &updated);
                Ok(())
            }
            Err(api::Error::NotFound { .. }) => Ok(()),
            Err(err) => Err(err.into()),
        }
    }

    async fn apply_status(&self, parent: &Object, status_patch: &Value) -> Result<(), Error> {
        let kept = keep_host_conditions(parent, status_patch);
        let status_patch = kept.as_ref().unwrap_or(status_patch);
        // Patch a copy of the status alone first: a converged reconcile
        // (as often as not, the echo of its own last write) changes
        // nothing, and need not read the stored object to find that out.
        let mut status = parent.get("status").cloned().unwrap_or_else(|| json!({}));
        patch::merge(&mut status, status_patch);
        if parent
            .get("status")
            .map_or(status == json!({}), |s| *s == status)
        {
            return Ok(());
        }
        // The narrow status write: the patched status over the object the
        // reconciler saw, on its resource version (a status computed from
        // an old object must not overwrite a newer one), with no read of
        // the stored object. Its echo shows the reconciler nothing it does
        // not know: dropped.
        let writing = self.echo.map(|(key, echoes)| echoes.writing(key));
        let (updated, bytes) = self
            .api
            .write_status_seen(self.kind, parent, status)
            .await?;
        if let Some(writing) = writing {
            writing.wrote(parent, &updated);
        }
        self.wrote_bytes(self.kind, &updated, bytes);
        Ok(())
    }

    /// Add the plugin's finalizer to `object`; returns whether it wrote.
    pub async fn ensure_finalizer(&self, object: &Object, finalizer: &str) -> Result<bool, Error> {
        if meta::finalizers(object).contains(&finalizer)
            || meta::deletion_timestamp(object).is_some()
        {
            return Ok(false);
        }
        let mut next = object.clone();
        let m = meta::metadata_mut(&mut next);
        let list = m.entry("finalizers").or_insert_with(|| json!([]));
        if let Some(list) = list.as_array_mut() {
            list.push(json!(finalizer));
        }
        let updated = self.api.update(self.kind, next).await?;
        self.wrote(self.kind, &updated);
        Ok(true)
    }

    /// Remove the plugin's finalizer from the stored object named `key`
    /// (its last finalizer gone, deletion completes). Returns whether the
    /// object was still there.
    pub async fn remove_finalizer(&self, key: &ObjectKey, finalizer: &str) -> Result<bool, Error> {
        let written = self
            .api
            .modify(self.kind, key.namespace.as_deref(), &key.name, |latest| {
                if !meta::finalizers(latest).contains(&finalizer) {
                    return Ok(None);
                }
                let mut next = latest.clone();
                let m = meta::metadata_mut(&mut next);
                if let Some(list) = m.get_mut("finalizers").and_then(Value::as_array_mut) {
                    list.retain(|f| f.as_str() != Some(finalizer));
                }
                Ok(Some(api::Next::Object(next)))
            })
            .await;
        match written {
            Ok(updated) => {
                if let Some(updated) = updated {
                    self.wrote(self.kind, &updated);
                }
                Ok(true)
            }
            Err(api::Error::NotFound { .. }) => Ok(false),
            Err(err) => Err(err.into()),
        }
    }
}

/// The conditions the host sets on objects it reconciles (the children's
/// clash, the effects' rights): a plugin's status patch that sets
/// `conditions` replaces the whole list (a merge patch replaces arrays),
/// so those the host set and the patch does not mention are carried into
/// it. `None`: the patch is fine as it is.
fn keep_host_conditions(parent: &Object, status_patch: &Value) -> Option<Value> {
    let wanted = status_patch.get("conditions")?.as_array()?;
    let stored = parent
        .get("status")
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)?;
    let missing: Vec<&Value> = stored
        .iter()
        .filter(|c| {
            let kind = c.get("type").and_then(Value::as_str);
            kind.is_some_and(|k| super::conditions::HOST_CONDITIONS.contains(&k))
                && !wanted
                    .iter()
                    .any(|w| w.get("type").and_then(Value::as_str) == kind)
        })
        .collect();
    if missing.is_empty() {
        return None;
    }
    let mut patch = status_patch.clone();
    if let Some(list) = patch.get_mut("conditions").and_then(Value::as_array_mut) {
        list.extend(missing.into_iter().cloned());
    }
    Some(patch)
}

#[cfg(test)]
mod tests;

//! The cascade: write the request to the overlay, then call the
//! reconcilers on what changed and apply their responses, run the garbage
//! collector's decisions, and repeat until nothing more changes. Each
//! change is put down to its cause; what a plan cannot do (wait, or know an
//! external write's outcome) is put down as pending.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use serde_json::Value;

use super::net::{net_change, object_ref, without_bookkeeping};
use super::report::{
    Cause, ExternalRequest, ObjectRef, PendingStep, Plan, PlanError, PlannedEvent,
};
use super::view::PlanView;
use super::{Context, DeleteTarget, Document, Error, MAX_RECONCILES, MAX_RECONCILES_PER_OBJECT};
use crate::api::{self, Api, DeleteOptions, Propagation};
use crate::controller::respond::Applier;
use crate::controller::{CacheView, HttpRequest, ReconcileError, Request};
use crate::egress::{Report, Scope, rounds};
use crate::object::{Object, ObjectKey, codec, meta, patch};
use crate::store::{EventKind, OverlayBackend};
use crate::system::gc::Simulation as GcSimulation;
use crate::watch::EventType;

/// A reconcile to make: which controller (index into the targets), which
/// object.
type Work = (usize, ObjectKey);

pub(super) struct Cascade<'a> {
    context: &'a Context,
    overlay: Arc<OverlayBackend>,
    planning: Api,
    view: Arc<PlanView>,
    gc: GcSimulation,
    plan: Plan,
    /// Who changed each store key, in order; keys in the order first changed.
    causes: HashMap<String, Vec<Cause>>,
    order: Vec<String>,
    queue: VecDeque<Work>,
    queued: HashSet<Work>,
    calls: HashMap<Work, usize>,
}

/// The reconcile whose writes are being taken in: its own status write's
/// echo does not wake it again, as in the running controller.
struct Own<'o> {
    target: usize,
    key: &'o str,
    /// The object the reconcile saw, bookkeeping and status left out.
    seen: Value,
}

impl<'a> Cascade<'a> {
    pub(super) async fn new(context: &'a Context) -> Result<Self, Error> {
        let overlay = Arc::new(OverlayBackend::new(context.api.backend().clone()).await?);
        let planning = context.api.over(overlay.clone());
        let view = Arc::new(PlanView {
            planning: planning.clone(),
            overlay: overlay.clone(),
            informers: context.informers.clone(),
        });
        Ok(Self {
            context,
            gc: GcSimulation::new(planning.clone()),
            overlay,
            planning,
            view,
            plan: Plan::default(),
            causes: HashMap::new(),
            order: Vec::new(),
            queue: VecDeque::new(),
            queued: HashSet::new(),
            calls: HashMap::new(),
        })
    }

    fn error(
        &mut self,
        object: Option<ObjectRef>,
        origin: impl Into<String>,
        message: impl Into<String>,
    ) {
        self.plan.errors.push(PlanError {
            object,
            origin: origin.into(),
            message: message.into(),
        });
    }

    /// Apply each document as `setpoint apply` would; a document that
    /// cannot be applied is reported and the others are still planned.
    pub(super) async fn apply_documents(&mut self, documents: &[Document]) {
        for (i, document) in documents.iter().enumerate() {
            let origin = if document.origin.is_empty() {
                format!("object {}", i + 1)
            } else {
                document.origin.clone()
            };
            if let Err(message) = self.apply_document(&document.object).await {
                let object = document
                    .object
                    .is_object()
                    .then(|| object_ref(&document.object));
                let object = object.filter(|o| !o.kind.is_empty() && !o.name.is_empty());
                self.error(object, origin, message);
            }
            self.absorb(&Cause::Request, None).await;
        }
    }

    async fn apply_document(&mut self, object: &Value) -> Result<(), String> {
        if !object.is_object() {
            return Err("not an object".into());
        }
        let api_version = object["apiVersion"].as_str().unwrap_or("");
        let kind_name = object["kind"].as_str().unwrap_or("");
        let name = object["metadata"]["name"].as_str().unwrap_or("");
        if api_version.is_empty() || kind_name.is_empty() {
            return Err("apiVersion and kind are required".into());
        }
        if name.is_empty() {
            return Err("metadata.name is required".into());
        }
        let kind = self.planning.kinds().by_kind(api_version, kind_name).ok_or_else(|| {
            format!(
                "unknown kind {kind_name:?} in {api_version:?}: the host has no such kind (is the plugin that defines it loaded?)"
            )
        })?;
        let namespace = kind.namespaced.then(|| {
            object["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
        });
        match self.planning.get(&kind, namespace, name).await {
            Ok(live) => {
                let next = patch::applied_over(&live, object);
                self.planning.update(&kind, next).await.map(drop)
            }
            Err(api::Error::NotFound { .. }) => {
                let mut object = object.clone();
                if let Some(ns) = namespace {
                    object["metadata"]["namespace"] = Value::from(ns);
                }
                self.planning.create(&kind, object).await.map(drop)
            }
            Err(err) => Err(err),
        }
        .map_err(|e| e.to_string())
    }

    /// Delete the target as `setpoint delete` (or kubectl) would.
    pub(super) async fn delete(
        &mut self,
        target: &DeleteTarget,
        propagation: Option<Propagation>,
    ) -> Result<(), Error> {
        let kind = self
            .planning
            .kinds()
            .by_kind(&target.api_version, &target.kind)
            .ok_or_else(|| {
                Error::BadRequest(format!(
                    "unknown kind {:?} in {:?}",
                    target.kind, target.api_version
                ))
            })?;
        let namespace = kind
            .namespaced
            .then(|| target.namespace.as_deref().unwrap_or("default"));
        let options = DeleteOptions {
            propagation_policy: propagation,
            ..Default::default()
        };
        self.planning
            .delete(&kind, namespace, &target.name, &options)
            .await?;
        self.absorb(&Cause::Request, None).await;
        Ok(())
    }

    /// Take in the overlay's changes since the last call: note their
    /// cause, hand them to the collector and queue the reconciles they
    /// wake, as the informers' handlers would.
    async fn absorb(&mut self, cause: &Cause, own: Option<Own<'_>>) {
        for change in self.overlay.take_changes() {
            let key = change.kv.key.clone();
            let Ok(object) = codec::decode(&change.kv.value, change.kv.mod_revision) else {
                continue;
            };
            match self.causes.get_mut(&key) {
                Some(causes) => {
                    if causes.last() != Some(cause) {
                        causes.push(cause.clone());
                    }
                }
                None => {
                    self.order.push(key.clone());
                    self.causes.insert(key.clone(), vec![cause.clone()]);
                }
            }
            let event = match (change.kind, change.created) {
                (EventKind::Delete, _) => EventType::Deleted,
                (EventKind::Put, true) => EventType::Added,
                (EventKind::Put, false) => EventType::Modified,
            };
            if let Err(err) = self.gc.on_change(event, &key, &object).await {
                self.error(Some(object_ref(&object)), "garbage collector", err);
            }
            let echo = own.as_ref().filter(|own| {
                own.key == key
                    && event == EventType::Modified
                    && own.seen == without_bookkeeping(&object, false)
            });
            self.wake(event, &object, echo.map(|own| own.target));
        }
    }

    /// Queue what a change wakes: the controller of the object's kind, and
    /// the controller of its owner when the owner's kind owns this kind.
    fn wake(&mut self, event: EventType, object: &Object, echo_of: Option<usize>) {
        let api_version = meta::api_version(object);
        let kind = meta::kind(object);
        for (i, target) in self.context.targets.iter().enumerate() {
            if event != EventType::Deleted
                && echo_of != Some(i)
                && target.kind.api_version() == api_version
                && target.kind.kind == kind
            {
                self.enqueue((i, ObjectKey::of(object)));
            }
            if target
                .owned_kinds
                .iter()
                .any(|k| k.api_version() == api_version && k.kind == kind)
            {
                let owner_api_version = target.kind.api_version();
                for owner in meta::owner_references(object) {
                    if owner["controller"].as_bool() == Some(true)
                        && owner["kind"].as_str() == Some(target.kind.kind.as_str())
                        && owner["apiVersion"].as_str() == Some(owner_api_version.as_str())
                        && let Some(name) = owner["name"].as_str()
                    {
                        self.enqueue((i, ObjectKey::new(meta::namespace(object), name)));
                    }
                }
            }
        }
    }

    fn enqueue(&mut self, work: Work) {
        if self.queued.insert(work.clone()) {
            self.queue.push_back(work);
        }
    }

    /// Reconcile what is queued, let the collector act on what that
    /// changed, and repeat until nothing is left to do.
    pub(super) async fn run_to_fixpoint(&mut self) {
        loop {
            for failure in self.gc.settle().await {
                self.error(None, "garbage collector", failure);
            }
            self.absorb(&Cause::GarbageCollector, None).await;
            let Some(work) = self.queue.pop_front() else {
                return;
            };
            self.queued.remove(&work);
            if self.plan.reconciles >= MAX_RECONCILES {
                self.error(
                    None,
                    "plan",
                    format!(
                        "stopped after {MAX_RECONCILES} reconciler calls; the plan is incomplete"
                    ),
                );
                return;
            }
            self.reconcile(work).await;
        }
    }

    async fn reconcile(&mut self, work: Work) {
        let context = self.context;
        let (index, key) = &work;
        let target = &context.targets[*index];
        let reconciler = target.reconciler.clone();
        let manifest = reconciler.manifest();
        let kind = self
            .planning
            .kinds()
            .by_plural(&target.kind.group, &target.kind.plural)
            .unwrap_or_else(|| target.kind.clone());
        let object = match self
            .planning
            .get(&kind, key.namespace.as_deref(), &key.name)
            .await
        {
            Ok(object) => Arc::new(object),
            Err(api::Error::NotFound { .. }) => return,
            Err(err) => {
                self.error(None, manifest.name.clone(), format!("reading {key}: {err}"));
                return;
            }
        };
        let object_ref = object_ref(&object);
        let cause = Cause::Plugin {
            plugin: manifest.name.clone(),
            reconciling: object_ref.clone(),
        };
        let calls = self.calls.entry(work.clone()).or_insert(0);
        *calls += 1;
        if *calls > MAX_RECONCILES_PER_OBJECT {
            if !self.plan.cycles.contains(&object_ref) {
                self.plan.cycles.push(object_ref);
            }
            return;
        }
        let store_key = Api::key(&kind, key.namespace.as_deref(), &key.name);
        let applier = Applier::new(&self.planning, manifest, &target.owned_kinds, &kind, None);
        let deleting = meta::deletion_timestamp(&object).is_some();
        let mut finalizing = false;
        match &manifest.finalizer {
            Some(finalizer) if deleting => {
                if !meta::finalizers(&object).contains(&finalizer.as_str()) {
                    return;
                }
                finalizing = true;
            }
            Some(finalizer) => {
                let added = applier.ensure_finalizer(&object, finalizer).await;
                drop(applier);
                match added {
                    Ok(true) => {
                        let own = Own {
                            target: *index,
                            key: &store_key,
                            seen: without_bookkeeping(&object, false),
                        };
                        self.absorb(&cause, Some(own)).await;
                        return;
                    }
                    Ok(false) => {}
                    Err(err) => {
                        self.error(Some(object_ref), manifest.name.clone(), err.to_string());
                        return;
                    }
                }
            }
            None if deleting => return,
            None => {}
        }
        let owned = match self
            .view
            .owned_by(
                &target.owned_kinds,
                meta::uid(&object),
                key.namespace.as_deref(),
            )
            .await
        {
            Ok(owned) => owned,
            Err(err) => {
                self.error(Some(object_ref), manifest.name.clone(), err.to_string());
                return;
            }
        };
        let request = Request::first(object.clone(), owned, finalizing, Vec::new());
        self.plan.reconciles += 1;
        let view: Arc<dyn CacheView> = self.view.clone();
        let called = match context
            .pool
            .reconcile(&reconciler, false, &view, request, None)
            .await
        {
            Ok(called) => called,
            Err(err) => {
                self.error(Some(object_ref), manifest.name.clone(), err.to_string());
                return;
            }
        };
        let (request, response) = called;
        let response = match response {
            Ok(response) => response,
            Err(err) => {
                self.reconcile_failed(&object_ref, &manifest.name, &err);
                return;
            }
        };
        let scope = Scope {
            plugin: manifest,
            object: &object,
            key: crate::egress::recent_key(&kind.kind, key),
            deadline: tokio::time::Instant::now() + context.egress.config().reconcile_budget,
            // A plan answers a person: it waits no longer than its budget.
            wait_deadline: tokio::time::Instant::now() + context.egress.config().reconcile_budget,
            urgent: false,
            parker: crate::egress::Parker::default(),
            waited: Default::default(),
        };
        let mut report = Report::default();
        // Every read asked for, in any round, to show with its answer.
        let asked = std::sync::Mutex::new(response.observe.clone());
        let pool_call = |r: Request| {
            let (reconciler, view) = (reconciler.clone(), view.clone());
            let pool = context.pool.clone();
            let asked = &asked;
            async move {
                let called = pool.reconcile(&reconciler, false, &view, r, None).await;
                if let Ok((_, Ok(response))) = &called {
                    asked
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .extend(response.observe.iter().cloned());
                }
                called
            }
        };
        let rounds = rounds(
            &context.egress,
            &scope,
            request,
            response,
            &mut report,
            pool_call,
        )
        .await;
        let (request, mut response) = match rounds {
            Ok(done) => done,
            Err(err) => {
                self.reconcile_failed(&object_ref, &manifest.name, &err);
                return;
            }
        };
        let asked = asked.into_inner().unwrap_or_else(|p| p.into_inner());
        self.note_reads(&manifest.name, &object_ref, &request, &asked, &report);
        for event in std::mem::take(&mut response.events) {
            self.plan
                .events
                .push(PlannedEvent::recorded(&object_ref, event));
        }
        for write in &response.effects {
            self.plan.writes.push(ExternalRequest::asked(
                &manifest.name,
                &object_ref,
                write,
                None,
            ));
        }
        let pending = |reason: String| PendingStep {
            object: object_ref.clone(),
            plugin: manifest.name.clone(),
            reason,
        };
        if !response.effects.is_empty() {
            self.plan.pending.push(pending(format!(
                "reconciles again with the outcome of {} external write{}, which only the real world can give",
                response.effects.len(),
                if response.effects.len() == 1 { "" } else { "s" }
            )));
        } else if let Some(after) = response.requeue_after {
            self.plan
                .pending
                .push(pending(format!("looks again after {after:?}")));
        }
        let applier = Applier::new(&self.planning, manifest, &target.owned_kinds, &kind, None)
            .keeping_events()
            .with_grants(&self.context.egress);
        let applied = applier.apply(&object, &request.owned, &response).await;
        let child_events = std::mem::take(
            &mut *applier
                .child_events
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        // What the host records about the children it created and deleted.
        for event in child_events {
            self.plan
                .events
                .push(PlannedEvent::recorded(&object_ref, event));
        }
        let clashes =
            std::mem::take(&mut *applier.clashes.lock().unwrap_or_else(|p| p.into_inner()));
        let mut failed = None;
        if let Err(err) = applied {
            failed = Some(err.to_string());
        } else if finalizing && response.remove_finalizer {
            if !response.effects.is_empty() {
                self.plan.pending.push(pending(
                    "removes its finalizer once the external writes succeed".into(),
                ));
            } else if let Some(finalizer) = &manifest.finalizer
                && let Err(err) = applier.remove_finalizer(key, finalizer).await
            {
                failed = Some(err.to_string());
            }
        }
        drop(applier);
        for clash in clashes {
            self.error(
                Some(object_ref.clone()),
                manifest.name.clone(),
                format!("ChildNameClash: {}", clash.describe()),
            );
        }
        if let Some(message) = failed {
            self.error(
                Some(object_ref.clone()),
                manifest.name.clone(),
                format!("its response could not be applied: {message}"),
            );
        }
        let own = Own {
            target: *index,
            key: &store_key,
            seen: without_bookkeeping(&object, false),
        };
        self.absorb(&cause, Some(own)).await;
    }

    fn reconcile_failed(&mut self, object: &ObjectRef, plugin: &str, err: &ReconcileError) {
        let message = match err {
            ReconcileError::Transient(m) => format!("reconcile failed (would be retried): {m}"),
            ReconcileError::Permanent(m) => format!("reconcile failed: {m}"),
        };
        self.error(Some(object.clone()), plugin, message);
    }

    /// The reads made while planning, and the ones refused because a plan
    /// sends only safe methods.
    fn note_reads(
        &mut self,
        plugin: &str,
        object: &ObjectRef,
        request: &Request,
        asked: &[HttpRequest],
        report: &Report,
    ) {
        let mut noted = HashSet::new();
        for read in asked {
            if !noted.insert(read.id.as_str()) {
                continue;
            }
            let result = request
                .observations
                .iter()
                .find(|(id, _)| *id == read.id)
                .map(|(_, answer)| match answer {
                    Ok(r) => r.status.to_string(),
                    Err(e) => format!("{}: {}", e.kind.as_str(), e.message),
                });
            self.plan
                .observations
                .push(ExternalRequest::asked(plugin, object, read, result));
        }
        if report.refused.iter().any(|r| r.reason == "NotSentReadOnly") {
            self.plan.pending.push(PendingStep {
                object: object.clone(),
                plugin: plugin.to_owned(),
                reason: "asks for reads with methods that may change something (not GET, HEAD or OPTIONS); not sent while planning, so this reconcile saw them fail".into(),
            });
        }
    }

    /// The plan: every key the overlay changed, before and after, with its
    /// causes.
    pub(super) async fn finish(mut self) -> Result<Plan, Error> {
        for key in std::mem::take(&mut self.order) {
            let causes = self.causes.remove(&key).unwrap_or_default();
            let before = match self.overlay.base_get(&key).await? {
                Some(kv) => codec::decode(&kv.value, kv.mod_revision).ok(),
                None => None,
            };
            let after = match self.overlay.entry(&key) {
                Some(Some(kv)) => codec::decode(&kv.value, kv.mod_revision).ok(),
                _ => None,
            };
            if let Some(change) = net_change(before, after, causes) {
                self.plan.changes.push(change);
            }
        }
        Ok(self.plan)
    }
}

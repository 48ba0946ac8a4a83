//! The garbage collector's decisions: which changes queue which work, and
//! what working an item does — classify a dependent's owners and delete
//! or un-own it, finish an owner's orphan or foreground deletion. Shared by
//! the running collector (`gc`) and the plan's [`Simulation`](super::Simulation);
//! neither waiting nor retrying is decided here.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::Value;

use super::graph::{Graph, OwnerRef};
use super::{Progress, ROOT};
use crate::api::{
    Api, DeleteOptions, Error, FOREGROUND_FINALIZER, ORPHAN_FINALIZER, Propagation, Result,
};
use crate::informer::watcher::{Event, Pager};
use crate::object::{KindInfo, Object, meta};
use crate::queue::WorkQueue;
use crate::store::{KeyValue, Revision};
use crate::watch::EventType;

/// A unit of work, by uid.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Item {
    /// Decide about a dependent whose owners may be gone or going.
    Dependent(String),
    /// Progress an owner's foreground or orphan deletion.
    Owner(String),
}

/// How an owner stands, from one dependent's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OwnerState {
    Solid,
    Waiting,
    Dangling,
}

/// The owner index and the queue of work it gives rise to.
pub(super) struct Collector {
    api: Api,
    graph: Graph,
    queue: WorkQueue<Item>,
    progress: Arc<Progress>,
}

impl Collector {
    pub(super) fn new(api: Api, queue: WorkQueue<Item>, progress: Arc<Progress>) -> Self {
        Self {
            api,
            graph: Graph::default(),
            queue,
            progress,
        }
    }

    /// The queue work goes to.
    pub(super) fn queue(&self) -> &WorkQueue<Item> {
        &self.queue
    }

    /// Follow the store: a list rebuilds the index (and queues leftover
    /// work when complete); a change updates it.
    pub(super) fn on_watch_event(&mut self, event: Event) {
        match event {
            Event::Init => self.graph = Graph::default(),
            Event::InitApply(kv) => self.listed(&kv),
            Event::InitDone { .. } => self.queue_leftovers(),
            Event::Apply(event) | Event::Delete(event) => {
                self.on_event(event.kind, &event.key, &event.object);
            }
        }
    }

    /// List everything at one revision into a fresh index and queue
    /// leftover work, without a watch; returns the revision listed at.
    pub(super) async fn index(&mut self) -> std::result::Result<Revision, String> {
        self.graph = Graph::default();
        let mut pager = Pager::new(ROOT);
        while !pager.done() {
            let page = pager
                .next_page(self.api.backend())
                .await
                .map_err(|e| e.to_string())?;
            self.progress.heartbeat();
            page.iter().for_each(|kv| self.listed(kv));
        }
        self.queue_leftovers();
        Ok(pager.revision())
    }

    fn listed(&mut self, kv: &KeyValue) {
        // The graph reads only `metadata`: the rest is not decoded (a list
        // of every object is the GC's start-up cost, see
        // docs/benchmarks/scale.md#a-million-pods-2026-11-26).
        match crate::object::codec::decode_metadata(&kv.value) {
            Ok(head) => {
                self.graph.upsert(&kv.key, &head);
            }
            Err(err) => {
                tracing::warn!(key = %kv.key, %err, "garbage collector skips an undecodable object");
            }
        }
    }

    /// Queue what a complete list shows is left to do.
    fn queue_leftovers(&mut self) {
        let mut work = Vec::new();
        for (uid, node) in self.graph.nodes() {
            if node.foreground || node.orphan {
                work.push(Item::Owner(uid.clone()));
            }
            if node.owners.iter().any(|o| self.needs_attention(o)) {
                work.push(Item::Dependent(uid.clone()));
            }
        }
        work.into_iter().for_each(|item| self.queue.add(item));
    }

    /// Whether a dependent with this owner reference needs a decision.
    fn needs_attention(&self, owner: &OwnerRef) -> bool {
        self.graph
            .foreground(&owner.uid)
            .is_none_or(|foreground| foreground)
    }

    /// Update the index with one change and queue the work it causes.
    pub(super) fn on_event(&mut self, kind: EventType, key: &str, object: &Object) {
        let uid = meta::uid(object).to_owned();
        if uid.is_empty() {
            return;
        }
        if kind == EventType::Deleted {
            let gone = self.graph.remove(&uid);
            for dependent in self.graph.dependents_of(&uid) {
                self.queue.add(Item::Dependent(dependent));
            }
            if let Some(gone) = gone {
                self.requeue_foreground_owners(&gone.owners);
            }
            return;
        }
        if let Some(previous) = self.graph.upsert(key, object) {
            self.requeue_foreground_owners(&previous.owners);
        }
        // A plain object (no owners, no deletion policy) has no node and
        // nothing more to do.
        let Some(node) = self.graph.node(&uid).cloned() else {
            return;
        };
        if node.foreground || node.orphan {
            self.queue.add(Item::Owner(uid.clone()));
        }
        self.requeue_foreground_owners(&node.owners);
        if node.owners.iter().any(|o| self.needs_attention(o)) {
            self.queue.add(Item::Dependent(uid));
        }
    }

    fn requeue_foreground_owners(&self, owners: &[OwnerRef]) {
        for owner in owners {
            if self.graph.node(&owner.uid).is_some_and(|n| n.foreground) {
                self.queue.add(Item::Owner(owner.uid.clone()));
            }
        }
    }

    /// Work one item once.
    pub(super) async fn process(&mut self, item: &Item) -> Result<()> {
        self.progress.set_busy(true);
        let result = match item {
            Item::Dependent(uid) => self.process_dependent(uid).await,
            Item::Owner(uid) => self.process_owner(uid).await,
        };
        self.progress.set_busy(false);
        result
    }

    /// Read the object the index knows as `uid`, if it still exists.
    async fn live(&self, uid: &str) -> Result<Option<(Object, Arc<KindInfo>)>> {
        let Some(node) = self.graph.node(uid) else {
            return Ok(None);
        };
        let Some(kv) = self.api.backend().get(&node.key).await? else {
            return Ok(None);
        };
        let object = Api::decode(&kv)?;
        if meta::uid(&object) != uid {
            return Ok(None);
        }
        // The kind whose key this is: two definitions may name the same
        // apiVersion and kind, and the body must not send writes elsewhere.
        let Some(kind) = self.kind_of_key(&node.key) else {
            tracing::warn!(key = %node.key, "garbage collector skips an object of no registered kind");
            return Ok(None);
        };
        Ok(Some((object, kind)))
    }

    /// The registered kind stored under `key` (`/registry/{group}/{plural}/…`).
    fn kind_of_key(&self, key: &str) -> Option<Arc<KindInfo>> {
        let mut parts = key.strip_prefix(ROOT)?.split('/');
        let group = match parts.next()? {
            "core" => "",
            group => group,
        };
        self.api.kinds().by_plural(group, parts.next()?)
    }

    async fn process_dependent(&mut self, uid: &str) -> Result<()> {
        let Some((object, kind)) = self.live(uid).await? else {
            return Ok(());
        };
        if meta::deletion_timestamp(&object).is_some() {
            return Ok(());
        }
        let mut solid = false;
        let mut waiting = false;
        let mut stale = HashSet::new();
        for reference in meta::owner_references(&object) {
            match self.owner_state(reference, &object).await? {
                OwnerState::Solid => solid = true,
                OwnerState::Waiting => {
                    waiting = true;
                    stale.insert(ref_uid(reference).to_owned());
                }
                OwnerState::Dangling => {
                    stale.insert(ref_uid(reference).to_owned());
                }
            }
        }
        if stale.is_empty() {
            return Ok(());
        }
        if solid {
            return remove_owner_references(&self.api, &kind, object, &stale).await;
        }
        let propagation = if waiting && self.graph.has_dependents(uid) {
            Propagation::Foreground
        } else {
            Propagation::Background
        };
        let options = DeleteOptions {
            resource_version: meta::resource_version(&object).map(str::to_owned),
            uid: Some(uid.to_owned()),
            propagation_policy: Some(propagation),
        };
        tracing::debug!(kind = %kind.kind, name = meta::name(&object), ?propagation, "collecting a dependent");
        self.api
            .delete(
                &kind,
                meta::namespace(&object),
                meta::name(&object),
                &options,
            )
            .await
            .map(drop)
    }

    /// Classify an owner; absence is confirmed with a live read.
    async fn owner_state(&self, reference: &Value, dependent: &Object) -> Result<OwnerState> {
        let uid = ref_uid(reference);
        if let Some(foreground) = self.graph.foreground(uid) {
            return Ok(if foreground {
                OwnerState::Waiting
            } else {
                OwnerState::Solid
            });
        }
        let field = |name: &str| reference.get(name).and_then(Value::as_str).unwrap_or("");
        let Some(kind) = self.api.kinds().by_kind(field("apiVersion"), field("kind")) else {
            return Ok(OwnerState::Dangling);
        };
        let namespace = match (kind.namespaced, meta::namespace(dependent)) {
            (true, None) => return Ok(OwnerState::Dangling),
            (true, ns) => ns,
            (false, _) => None,
        };
        match self.api.get(&kind, namespace, field("name")).await {
            Ok(owner) if meta::uid(&owner) == uid => {
                let foreground = meta::deletion_timestamp(&owner).is_some()
                    && meta::finalizers(&owner).contains(&FOREGROUND_FINALIZER);
                Ok(if foreground {
                    OwnerState::Waiting
                } else {
                    OwnerState::Solid
                })
            }
            Ok(_) | Err(Error::NotFound { .. }) => Ok(OwnerState::Dangling),
            Err(err) => Err(err),
        }
    }

    async fn process_owner(&mut self, uid: &str) -> Result<()> {
        let Some((owner, kind)) = self.live(uid).await? else {
            return Ok(());
        };
        if meta::deletion_timestamp(&owner).is_none() {
            return Ok(());
        }
        let finalizers = meta::finalizers(&owner);
        if finalizers.contains(&ORPHAN_FINALIZER) {
            let only_owner: HashSet<String> = [uid.to_owned()].into();
            for dependent in self.graph.dependents_of(uid) {
                if let Some((object, dep_kind)) = self.live(&dependent).await? {
                    match remove_owner_references(&self.api, &dep_kind, object, &only_owner).await {
                        // Deleted meanwhile: nothing of it left to orphan.
                        Err(Error::NotFound { .. }) => {}
                        other => other?,
                    }
                }
                self.progress.heartbeat();
            }
            return remove_finalizer(&self.api, &kind, owner, ORPHAN_FINALIZER).await;
        }
        if finalizers.contains(&FOREGROUND_FINALIZER) {
            for dependent in self.graph.dependents_of(uid) {
                self.queue.add(Item::Dependent(dependent));
            }
            if self.graph.blocking_dependents(uid) == 0 {
                return remove_finalizer(&self.api, &kind, owner, FOREGROUND_FINALIZER).await;
            }
        }
        Ok(())
    }
}

fn ref_uid(reference: &Value) -> &str {
    reference.get("uid").and_then(Value::as_str).unwrap_or("")
}

/// Drop the owner references to `uids` from `object` (conditional on its
/// resource version).
async fn remove_owner_references(
    api: &Api,
    kind: &KindInfo,
    mut object: Object,
    uids: &HashSet<String>,
) -> Result<()> {
    let before = meta::owner_references(&object).len();
    let kept: Vec<Value> = meta::owner_references(&object)
        .iter()
        .filter(|r| !uids.contains(ref_uid(r)))
        .cloned()
        .collect();
    if kept.len() == before {
        return Ok(());
    }
    let m = meta::metadata_mut(&mut object);
    if kept.is_empty() {
        m.remove("ownerReferences");
    } else {
        m.insert("ownerReferences".into(), Value::Array(kept));
    }
    api.update(kind, object).await.map(drop)
}

/// Remove one finalizer from `object` (conditional on its resource version).
async fn remove_finalizer(
    api: &Api,
    kind: &KindInfo,
    mut object: Object,
    finalizer: &str,
) -> Result<()> {
    let kept: Vec<Value> = meta::finalizers(&object)
        .into_iter()
        .filter(|f| *f != finalizer)
        .map(Value::from)
        .collect();
    meta::metadata_mut(&mut object).insert("finalizers".into(), Value::Array(kept));
    api.update(kind, object).await.map(drop)
}

//! Which changes queue which key: a change of a reconciled object queues
//! its key (not the echo of the controller's own status write, see
//! `echo`), a change of an owned child queues its controller owner, and a
//! change to a name a desired child could not take queues the object that
//! wants it (`ClashWatch`); each at the priority its change deserves, and
//! in a cluster only the keys of shards this host holds.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::echo;
use super::respond;
use crate::api::Api;
use crate::cluster::Cluster;
use crate::informer::{Change, HandlerId, Informer};
use crate::object::{KindInfo, ObjectKey, meta};
use crate::queue::WorkQueue;

/// A trigger: what a change of one kind queues.
pub(super) type Trigger = Arc<dyn Fn(&Change) + Send + Sync>;

/// The handlers a controller registered, and the state they consult.
pub(super) struct Triggers {
    /// Removed when the controller stops.
    pub handlers: Vec<(Informer, HandlerId)>,
    /// The same handlers, for changes told by other means than their
    /// informer (a checkpoint's replay of the store's history).
    pub triggers: Vec<(Informer, Trigger)>,
    /// The controller's own status writes, whose echoes queue nothing.
    pub echoes: Arc<echo::Echoes>,
    /// Names desired children could not take.
    pub clash_watch: Arc<ClashWatch>,
}

/// Register the handlers that queue `kind`'s keys on its informer and on
/// the owned kinds' informers. Resyncs every `resync` (none: never). With
/// `changes_only`, the handlers are not told about the objects the
/// informers list (a controller resuming from its checkpoint learns what
/// changed from the store's history instead).
#[allow(clippy::too_many_arguments)]
pub(super) fn register(
    queue: &WorkQueue<ObjectKey>,
    informer: &Informer,
    owned_informers: &[Informer],
    kind: &Arc<KindInfo>,
    cluster: &Option<Cluster>,
    resync: Option<Duration>,
    turns: Arc<super::parked::Turns>,
    changes_only: bool,
) -> Triggers {
    let add = |informer: &Informer, trigger: &Trigger| {
        let trigger = trigger.clone();
        let handler = move |change: &Change| trigger(change);
        match changes_only {
            true => informer.add_handler_for_changes(handler),
            false => informer.add_handler(handler),
        }
    };
    let mut triggers: Vec<(Informer, Trigger)> = Vec::new();
    let echoes = Arc::new(echo::Echoes::new(queue.clone()));
    let clash_watch = Arc::new(ClashWatch::default());
    let mut handlers = Vec::new();
    let q = queue.clone();
    let mine = ownership_filter(cluster, kind);
    let own = echoes.clone();
    let handler: Trigger = Arc::new(move |change: &Change| {
        let key = ObjectKey::of(change.object());
        if !mine(&key) {
            return;
        }
        if let Change::Applied(object) = change
            && !own.admit(&key, object)
        {
            return;
        }
        match change {
            // Someone else changed its spec or deleted it: a turn waiting
            // on requests decided on the version before stops waiting.
            Change::Applied(object) => turns.changed(&key, object),
            Change::Deleted(_) => turns.deleted(&key),
            Change::Listed(_) => {}
        }
        enqueue(&q, change, key);
    });
    let id = add(informer, &handler);
    if let Some(period) = resync.filter(|p| !p.is_zero()) {
        informer.resync_every(id, period);
    }
    handlers.push((informer.clone(), id));
    triggers.push((informer.clone(), handler));
    for child_informer in owned_informers {
        let q = queue.clone();
        let (owner_api_version, owner_kind) = (kind.api_version(), kind.kind.clone());
        let mine = ownership_filter(cluster, kind);
        let clashes = clash_watch.clone();
        let child_kind = child_informer.kind().clone();
        let handler: Trigger = Arc::new(move |change: &Change| {
            let child = change.object();
            // A name a desired child could not take changed hands.
            if let Some(key) = clashes.waiting_for(&child_kind, child) {
                enqueue(&q, change, key);
            }
            for owner in meta::owner_references(child) {
                if owner["controller"].as_bool() == Some(true)
                    && owner["kind"].as_str() == Some(owner_kind.as_str())
                    && owner["apiVersion"].as_str() == Some(owner_api_version.as_str())
                    && let Some(name) = owner["name"].as_str()
                {
                    let key = ObjectKey::new(meta::namespace(child), name);
                    if mine(&key) {
                        enqueue(&q, change, key);
                    }
                }
            }
        });
        let id = add(child_informer, &handler);
        handlers.push((child_informer.clone(), id));
        triggers.push((child_informer.clone(), handler));
    }
    Triggers {
        handlers,
        triggers,
        echoes,
        clash_watch,
    }
}

/// The names of desired children that other objects hold, and the key of
/// the object that wants each: a change to such a name (its holder deleted,
/// say) queues that key, so a clash heals by itself.
#[derive(Default)]
pub(super) struct ClashWatch(std::sync::Mutex<HashMap<ClashedName, ObjectKey>>);

/// A child's `group/plural`, namespace and name.
type ClashedName = (String, Option<String>, String);

impl ClashWatch {
    /// `key`'s clashes are now `clashes` (none: it waits for nothing).
    pub(super) fn watch(&self, key: &ObjectKey, clashes: &[respond::Clash]) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if map.is_empty() && clashes.is_empty() {
            return;
        }
        map.retain(|_, k| k != key);
        for clash in clashes {
            map.insert(
                (
                    format!("{}/{}", clash.kind.group, clash.kind.plural),
                    clash.namespace.clone(),
                    clash.name.clone(),
                ),
                key.clone(),
            );
        }
    }

    /// Every key waiting for a name.
    pub(super) fn keys(&self) -> Vec<ObjectKey> {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.values().cloned().collect()
    }

    /// The key waiting for `object`'s name, if any.
    fn waiting_for(&self, kind: &KindInfo, object: &crate::object::Object) -> Option<ObjectKey> {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if map.is_empty() {
            return None;
        }
        map.get(&(
            format!("{}/{}", kind.group, kind.plural),
            meta::namespace(object).map(str::to_owned),
            meta::name(object).to_owned(),
        ))
        .cloned()
    }
}

/// Queue a key at the priority its change deserves.
fn enqueue(queue: &WorkQueue<ObjectKey>, change: &Change, key: ObjectKey) {
    match change {
        Change::Listed(_) => queue.add_low_priority(key),
        Change::Applied(_) | Change::Deleted(_) => queue.add(key),
    }
}

/// Whether a key of `kind` is this host's to queue: always on one host; in
/// a cluster, when this host holds the key's shard.
pub(super) fn ownership_filter(
    cluster: &Option<Cluster>,
    kind: &Arc<KindInfo>,
) -> impl Fn(&ObjectKey) -> bool + Send + Sync + 'static {
    let cluster = cluster.clone();
    let kind = kind.clone();
    move |key: &ObjectKey| {
        cluster
            .as_ref()
            .is_none_or(|c| c.owns(&Api::key(&kind, key.namespace.as_deref(), &key.name)))
    }
}

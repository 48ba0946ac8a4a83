//! What a reconciler sees while planning: the host's informer caches with
//! the plan's overlay laid over them. A key the overlay wrote or deleted
//! is answered from the overlay; everything else as the running host would
//! answer it (informers where a kind is watched, the store otherwise), so
//! planning a change to one object among a million reads no more than the
//! real reconcile would.

use std::sync::Arc;

use crate::api::{self, Api};
use crate::controller::CacheView;
use crate::controller::view::{get_from_store, list_from_store, list_target, namespace_of};
use crate::informer::Informers;
use crate::object::{KindInfo, Object, ObjectKey, codec, meta};
use crate::store::{KeyValue, OverlayBackend};

/// The informers under the overlay.
#[derive(Clone)]
pub(super) struct PlanView {
    pub(super) planning: Api,
    pub(super) overlay: Arc<OverlayBackend>,
    pub(super) informers: Informers,
}

fn decode(kv: &KeyValue) -> Option<Arc<Object>> {
    codec::decode(&kv.value, kv.mod_revision).ok().map(Arc::new)
}

impl PlanView {
    /// The objects of `kind` the overlay holds under `prefix`: keys it
    /// replaced or deleted, and the objects it holds now.
    fn overlaid(
        &self,
        kind: &KindInfo,
        namespace: Option<&str>,
    ) -> Vec<(String, Option<Arc<Object>>)> {
        self.overlay
            .entries_under(&Api::prefix(kind, namespace))
            .into_iter()
            .map(|(key, kv)| (key, kv.as_ref().and_then(decode)))
            .collect()
    }

    /// `base` (objects from the caches) with the overlay's objects of the
    /// kind laid over it, keeping those `keep` accepts.
    fn merge(
        &self,
        kind: &KindInfo,
        namespace: Option<&str>,
        base: Vec<Arc<Object>>,
        keep: impl Fn(&Object) -> bool,
    ) -> Vec<Arc<Object>> {
        let overlaid = self.overlaid(kind, namespace);
        if overlaid.is_empty() {
            return base;
        }
        let key_of = |o: &Object| Api::key(kind, meta::namespace(o), meta::name(o));
        let mut merged: Vec<Arc<Object>> = base
            .into_iter()
            .filter(|o| {
                let key = key_of(o);
                !overlaid.iter().any(|(k, _)| *k == key)
            })
            .collect();
        merged.extend(
            overlaid
                .into_iter()
                .filter_map(|(_, o)| o)
                .filter(|o| keep(o)),
        );
        merged
    }

    /// Every object of the `owned` kinds whose owner references name `uid`,
    /// as the controller's owner index would list them.
    pub(super) async fn owned_by(
        &self,
        owned: &[Arc<KindInfo>],
        uid: &str,
        namespace: Option<&str>,
    ) -> Result<Vec<Arc<Object>>, api::Error> {
        let names_owner = |o: &Object| {
            meta::owner_references(o)
                .iter()
                .any(|r| r["uid"].as_str() == Some(uid))
        };
        let mut children = Vec::new();
        for kind in owned {
            let base = match self.informers.existing(&kind.group, &kind.plural) {
                Some(informer) => informer.owned_by(uid),
                None => {
                    let options = api::ListOptions {
                        namespace: namespace.filter(|_| kind.namespaced).map(str::to_owned),
                        ..Default::default()
                    };
                    // The overlay's list already holds the overlay's objects.
                    let list = self.planning.list(kind, &options).await?;
                    children.extend(
                        list.items
                            .into_iter()
                            .filter(|o| names_owner(o))
                            .map(Arc::new),
                    );
                    continue;
                }
            };
            children.extend(self.merge(kind, None, base, names_owner));
        }
        Ok(children)
    }

    fn kind(&self, api_version: &str, kind: &str) -> Option<Arc<KindInfo>> {
        self.planning.kinds().by_kind(api_version, kind)
    }
}

impl CacheView for PlanView {
    fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Arc<Object>> {
        let info = self.kind(api_version, kind)?;
        let namespace = namespace_of(&info, namespace);
        if let Some(entry) = self.overlay.entry(&Api::key(&info, namespace, name)) {
            return entry.as_ref().and_then(decode);
        }
        if let Some(informer) = self.informers.existing(&info.group, &info.plural) {
            return informer.get(&ObjectKey::new(namespace, name));
        }
        get_from_store(&self.planning, info, namespace, name)
    }

    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: &str,
    ) -> Result<Vec<Arc<Object>>, String> {
        let (info, selector) =
            list_target(self.planning.kinds(), api_version, kind, label_selector)?;
        if let Some(informer) = self.informers.existing(&info.group, &info.plural) {
            let base = informer.list(namespace);
            return Ok(self
                .merge(&info, namespace, base, |_| true)
                .into_iter()
                .filter(|o| selector.matches(meta::labels(o)))
                .collect());
        }
        list_from_store(&self.planning, info, namespace, label_selector)
    }
}

//! The read-only view of the host's caches a reconciler gets during a
//! call (the `get-object`/`list-objects` imports): informer caches where a
//! kind is watched, the store otherwise.

use std::sync::Arc;

use crate::api::{self, Api, KindRegistry};
use crate::contract::CacheView;
use crate::informer::Informers;
use crate::object::selector::LabelSelector;
use crate::object::{KindInfo, ObjectKey, meta};

/// The plugin's read-only view: informer caches where a kind is watched,
/// the store otherwise (unless `inline`).
pub(super) struct InformerView {
    pub(super) informers: Informers,
    pub(super) api: Api,
    /// The reconciler runs on an async task, where waiting for the store
    /// would block the runtime: answer from informers only.
    pub(super) inline: bool,
}

impl CacheView for InformerView {
    fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Arc<crate::object::Object>> {
        let info = self.api.kinds().by_kind(api_version, kind)?;
        let namespace = namespace_of(&info, namespace);
        if let Some(informer) = self.informers.existing(&info.group, &info.plural) {
            return informer.get(&ObjectKey::new(namespace, name));
        }
        if self.inline {
            return None;
        }
        get_from_store(&self.api, info, namespace, name)
    }

    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: &str,
    ) -> Result<Vec<Arc<crate::object::Object>>, String> {
        let (info, selector) = list_target(self.api.kinds(), api_version, kind, label_selector)?;
        if let Some(informer) = self.informers.existing(&info.group, &info.plural) {
            return Ok(informer
                .list(namespace)
                .into_iter()
                .filter(|o| selector.matches(meta::labels(o)))
                .collect());
        }
        if self.inline {
            return Err(format!(
                "{api_version}/{kind} is not cached, and an inline reconciler reads only from \
                 informers (the kinds it reconciles and owns)"
            ));
        }
        list_from_store(&self.api, info, namespace, label_selector)
    }
}

/// Where a cache view looks for an object of `info` in `namespace`: the
/// default namespace for a namespaced kind when none is named, none for a
/// cluster-scoped one.
pub(crate) fn namespace_of<'a>(info: &KindInfo, namespace: Option<&'a str>) -> Option<&'a str> {
    info.namespaced.then(|| namespace.unwrap_or("default"))
}

/// The kind and the parsed label selector a cache view's `list` names, or
/// why it cannot list them.
pub(crate) fn list_target(
    kinds: &KindRegistry,
    api_version: &str,
    kind: &str,
    label_selector: &str,
) -> Result<(Arc<KindInfo>, LabelSelector), String> {
    let info = kinds
        .by_kind(api_version, kind)
        .ok_or_else(|| format!("unknown kind {api_version}/{kind}"))?;
    let selector = LabelSelector::parse(label_selector).map_err(|e| e.to_string())?;
    Ok((info, selector))
}

/// One object read from the store by a cache view, which is synchronous
/// and called on a reconcile thread inside the host's runtime.
pub(crate) fn get_from_store(
    api: &Api,
    info: Arc<KindInfo>,
    namespace: Option<&str>,
    name: &str,
) -> Option<Arc<crate::object::Object>> {
    let api = api.clone();
    let name = name.to_owned();
    let namespace = namespace.map(str::to_owned);
    tokio::runtime::Handle::current()
        .block_on(async move { api.get(&info, namespace.as_deref(), &name).await })
        .ok()
        .map(Arc::new)
}

/// Objects listed from the store by a cache view (see [`get_from_store`]).
pub(crate) fn list_from_store(
    api: &Api,
    info: Arc<KindInfo>,
    namespace: Option<&str>,
    label_selector: &str,
) -> Result<Vec<Arc<crate::object::Object>>, String> {
    let api = api.clone();
    let options = api::ListOptions {
        namespace: namespace.map(str::to_owned),
        label_selector: Some(label_selector.to_owned()),
        ..Default::default()
    };
    tokio::runtime::Handle::current()
        .block_on(async move { api.list(&info, &options).await })
        .map(|l| l.items.into_iter().map(Arc::new).collect())
        .map_err(|e| e.to_string())
}

//! Requeue a plugin's objects when what it may use outside changes: the
//! operator's `PluginGrant` named after it (new rights apply at once, a
//! pending request is retried as soon as it is granted, and an object whose
//! reconcile was refused for a bound the grant sets is tried again without
//! waiting for a change of its own; the plugins
//! refused for a claim are tried again, as its pins may let them in), or a Secret in
//! their namespace when the plugin uses secrets (a rotated credential is
//! used at once).

use std::sync::Arc;

use super::Shared;
use crate::egress::{GRANT_API_VERSION, GRANT_KIND};
use crate::informer::Change;
use crate::object::{Object, meta};

/// Start following grants and Secrets for the host's controllers.
pub(super) fn follow(shared: &Arc<Shared>) {
    on_change(shared, GRANT_API_VERSION, GRANT_KIND, |shared, object| {
        let plugin = meta::name(object).to_owned();
        tokio::spawn(async move {
            if let Some(controller) = shared.controllers.lock().await.get(&plugin) {
                tracing::info!(%plugin, "PluginGrant changed: requeueing the plugin's objects");
                controller.retry_all();
            }
            // Its pins (`spec.kinds`) may let a refused plugin in.
            if let Err(err) = shared.retry_refused().await {
                tracing::warn!(%err, "trying refused plugins again failed");
            }
        });
    });
    on_change(shared, "v1", "Secret", |shared, object| {
        let namespace = meta::namespace(object).map(str::to_owned);
        tokio::spawn(async move {
            for controller in shared.controllers.lock().await.values() {
                if !controller.manifest().secrets.is_empty() {
                    controller.retry_namespace(namespace.as_deref());
                }
            }
        });
    });
}

/// Call `act` for every change (not a listing) of the objects of a kind,
/// if it is registered, for as long as the host lives; its informer is
/// kept in `Shared::followed`.
fn on_change(
    shared: &Arc<Shared>,
    api_version: &str,
    kind: &str,
    act: impl Fn(Arc<Shared>, &Object) + Send + Sync + 'static,
) {
    let Some(kind) = shared.api.kinds().by_kind(api_version, kind) else {
        return;
    };
    let informer = shared.informers.for_kind(kind);
    shared
        .followed
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(informer.clone());
    let weak = Arc::downgrade(shared);
    informer.add_handler(move |change| {
        let Some(shared) = weak.upgrade() else { return };
        if !matches!(change, Change::Listed(_)) {
            act(shared, change.object());
        }
    });
}

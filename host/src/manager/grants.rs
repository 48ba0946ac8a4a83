//! Requeue a plugin's objects when what it may use outside changes: the
//! operator's `PluginGrant` named after it (new rights apply at once, and
//! a pending request is retried as soon as it is granted), or a Secret in
//! their namespace when the plugin uses secrets (a rotated credential is
//! used at once).

use std::sync::Arc;

use super::Shared;
use crate::egress::{GRANT_API_VERSION, GRANT_KIND};
use crate::informer::Change;
use crate::object::meta;

/// Start following grants and Secrets for the host's controllers.
pub(super) fn follow(shared: &Arc<Shared>) {
    let weak = Arc::downgrade(shared);
    let mut followed = shared.followed.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(kind) = shared.api.kinds().by_kind(GRANT_API_VERSION, GRANT_KIND) {
        let weak = weak.clone();
        let informer = shared.informers.for_kind(kind);
        followed.push(informer.clone());
        informer.add_handler(move |change| {
            let Some(shared) = weak.upgrade() else { return };
            if matches!(change, Change::Listed(_)) {
                return;
            }
            let plugin = meta::name(change.object()).to_owned();
            tokio::spawn(async move {
                if let Some(controller) = shared.controllers.lock().await.get(&plugin) {
                    tracing::info!(%plugin, "PluginGrant changed: requeueing the plugin's objects");
                    controller.requeue_all();
                }
            });
        });
    }
    if let Some(kind) = shared.api.kinds().by_kind("v1", "Secret") {
        let informer = shared.informers.for_kind(kind);
        followed.push(informer.clone());
        informer.add_handler(move |change| {
            let Some(shared) = weak.upgrade() else { return };
            if matches!(change, Change::Listed(_)) {
                return;
            }
            let namespace = meta::namespace(change.object()).map(str::to_owned);
            tokio::spawn(async move {
                for controller in shared.controllers.lock().await.values() {
                    if !controller.manifest().secrets.is_empty() {
                        controller.requeue_namespace(namespace.as_deref());
                    }
                }
            });
        });
    }
}

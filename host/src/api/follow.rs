//! Keeping the kind registry in step with `CustomResourceDefinition`s
//! written by anyone: another host on the same etcd registers a kind, and
//! this host serves and reconciles it too.

use tokio::task::JoinHandle;

use super::{Api, kinds};
use crate::watch::EventType;

impl Api {
    /// Start a task that follows every change to stored definitions from the
    /// current revision on, registering and removing kinds as they come and
    /// go. Writes through this API register their kinds at once anyway; the
    /// task matters when other hosts share the store. Runs until aborted.
    pub fn start_definition_follower(&self) -> JoinHandle<()> {
        let api = self.clone();
        let prefix = Self::prefix(&self.crd_kind(), None);
        tokio::spawn(async move {
            loop {
                // Relist, then follow from the list's revision: a watcher cut
                // off for lagging starts over without missing a definition.
                let crd_kind = api.crd_kind();
                let listed = match api.list(&crd_kind, &Default::default()).await {
                    Ok(list) => list,
                    Err(err) => {
                        tracing::warn!(%err, "cannot list definitions; retrying");
                        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                        continue;
                    }
                };
                for crd in &listed.items {
                    api.register_kind_of(crd);
                }
                let Ok(mut changes) = api.hub.subscribe(&prefix, listed.resource_version) else {
                    continue;
                };
                while let Ok(event) = changes.next().await {
                    match event.kind {
                        EventType::Added | EventType::Modified => {
                            api.register_kind_of(&event.object)
                        }
                        EventType::Deleted => {
                            if let Ok(info) = kinds::kind_from_crd(&event.object) {
                                api.kinds.remove(&info.group, &info.plural);
                            }
                        }
                    }
                }
            }
        })
    }

    /// Register the kind a stored definition describes, if it is valid and
    /// not registered in that form yet.
    pub(crate) fn register_kind_of(&self, crd: &crate::object::Object) {
        match kinds::kind_from_crd(crd) {
            Ok(info) => {
                if self.kinds.by_plural(&info.group, &info.plural).as_deref() != Some(&info) {
                    self.kinds.insert(info);
                }
            }
            Err(err) => tracing::warn!(%err, "stored CustomResourceDefinition ignored"),
        }
    }
}

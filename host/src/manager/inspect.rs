//! What a running host tells about itself: its plugins and controllers,
//! their queues and reconcile history, the shared informers and the
//! garbage collector's health (what `/metrics`, `setpoint plugins` and
//! `setpoint describe` show).

use crate::api;
use crate::controller::{self, Controller, ReconcileRecord};
use crate::object::ObjectKey;
use crate::plugins::PluginStatus;
use crate::system;

use super::Host;

impl Host {
    /// How the garbage collector is doing (see [`system::GcHealth`]); on a
    /// cluster it runs on the leader only, and this host's figures say so.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
    /// let host = setpoint::Host::builder().in_memory().build().await.unwrap();
    /// while host.gc_health().last_progress.is_none() {
    ///     tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    /// }
    /// assert_eq!(host.gc_health().restarts, 0);
    /// host.shutdown().await;
    /// # });
    /// ```
    pub fn gc_health(&self) -> system::GcHealth {
        self.shared.gc.health()
    }

    /// Every plugin file the host knows and its state.
    pub async fn plugins(&self) -> Vec<PluginStatus> {
        let plugins = self.shared.plugins.lock().await;
        let mut statuses: Vec<PluginStatus> = plugins
            .values()
            .map(|entry| {
                let mut status = entry.status.clone();
                let tally = entry.tally.snapshot();
                (status.reconciles, status.errors) = (tally.reconciles, tally.errors);
                status
            })
            .collect();
        // A contested claim shows on the holder too.
        let refusals: Vec<(String, String, String)> = plugins
            .values()
            .filter_map(|entry| {
                let holder = entry.refused_by.clone()?;
                let reason = match &entry.status.state {
                    crate::plugins::PluginState::Failed(reason) => reason.clone(),
                    crate::plugins::PluginState::Running => {
                        entry.status.last_error.clone().unwrap_or_default()
                    }
                };
                Some((holder, entry.status.name.clone(), reason))
            })
            .collect();
        for (holder, refused, reason) in refusals {
            if let Some(status) = statuses
                .iter_mut()
                .find(|s| s.name == holder && s.state == crate::plugins::PluginState::Running)
            {
                status.contested.push(format!(
                    "contested by plugin {refused:?}, refused: {reason}"
                ));
            }
        }
        statuses
    }

    /// Counters of the reconciler named `plugin`, if it runs.
    pub async fn controller_stats(&self, plugin: &str) -> Option<controller::Stats> {
        self.shared
            .controllers
            .lock()
            .await
            .get(plugin)
            .map(Controller::stats)
    }

    /// A snapshot of each running reconciler's workqueue metrics, by
    /// reconciler name (for `/metrics`).
    pub async fn queue_metrics(&self) -> Vec<(String, crate::queue::MetricsSnapshot)> {
        self.shared
            .controllers
            .lock()
            .await
            .iter()
            .map(|(name, c)| (name.clone(), c.queue().metrics()))
            .collect()
    }

    /// What each running reconciler's reconciles came to, by reconciler
    /// name (for `/metrics`).
    pub async fn tallies(&self) -> Vec<(String, controller::TallySnapshot)> {
        self.shared
            .controllers
            .lock()
            .await
            .iter()
            .map(|(name, c)| (name.clone(), c.tally()))
            .collect()
    }

    /// What each of the host's shared informers holds, by group and
    /// resource (for `/metrics`).
    pub fn informer_stats(&self) -> Vec<crate::informer::InformerStats> {
        self.shared.informers.stats()
    }

    /// Names of the running reconcilers.
    pub async fn reconcilers(&self) -> Vec<String> {
        self.shared
            .controllers
            .lock()
            .await
            .keys()
            .cloned()
            .collect()
    }

    /// Recent reconcile results of an object, from whichever reconciler
    /// handles its kind.
    pub async fn history(
        &self,
        api_version: &str,
        kind: &str,
        key: &ObjectKey,
    ) -> Vec<ReconcileRecord> {
        let controllers = self.shared.controllers.lock().await;
        controllers
            .values()
            .filter(|c| reconciles(c, api_version, kind))
            .flat_map(|c| c.history(key))
            .collect()
    }

    /// When the reconcile of an object in progress started, if one is (a
    /// call that does not return shows here, not in [`Host::history`]).
    pub async fn in_progress(
        &self,
        api_version: &str,
        kind: &str,
        key: &ObjectKey,
    ) -> Option<std::time::SystemTime> {
        let controllers = self.shared.controllers.lock().await;
        controllers
            .values()
            .filter(|c| reconciles(c, api_version, kind))
            .find_map(|c| c.in_progress(key))
    }

    /// The registered custom kinds (from definitions) that no running
    /// reconciler reconciles or owns, as `apiVersion Kind`: their objects
    /// are stored, and new ones accepted, but nothing acts on them (their
    /// plugin was removed, say).
    pub async fn unreconciled_kinds(&self) -> Vec<String> {
        let controllers = self.shared.controllers.lock().await;
        let reconciled: Vec<crate::object::GroupVersionKind> = controllers
            .values()
            .flat_map(|c| {
                let m = c.manifest();
                std::iter::once(m.reconciles.gvk())
                    .chain(m.owns.iter().map(crate::object::KindRef::gvk))
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut kinds: Vec<String> = self
            .shared
            .api
            .kinds()
            .all()
            .into_iter()
            .filter(|k| k.group.contains('.') && k.group != api::kinds::CRD_GROUP)
            // The host's own kind, read by the host, not by a plugin.
            .filter(|k| {
                k.api_version() != crate::egress::GRANT_API_VERSION
                    || k.kind != crate::egress::GRANT_KIND
            })
            .filter(|k| {
                !reconciled
                    .iter()
                    .any(|r| r.group == k.group && r.kind == k.kind)
            })
            .map(|k| format!("{} {}", k.api_version(), k.kind))
            .collect();
        kinds.sort();
        kinds
    }
}

/// Whether `controller` reconciles objects of `api_version` `kind`.
fn reconciles(controller: &Controller, api_version: &str, kind: &str) -> bool {
    let reconciled = &controller.manifest().reconciles;
    reconciled.api_version == api_version && reconciled.kind == kind
}

//! Native reconcilers: a plugin's [`setpoint_plugin_sdk::Reconciler`] run in
//! the host process instead of in Wasm, through exactly the JSON path a Wasm
//! plugin takes (`setpoint_plugin_sdk::wire`), so reconcile logic moves
//! between native and Wasm without a rewrite.
//!
//! ```no_run
//! # async fn example(host: &setpoint::Host) -> Result<(), setpoint::manager::Error> {
//! use std::sync::Arc;
//! use setpoint::controller::Native;
//!
//! // The replicaset example plugin, compiled into this program.
//! host.add_reconciler(Arc::new(Native::new(replicaset::ReplicaSetReconciler))).await?;
//! # Ok(()) }
//! ```
//!
//! Unlike a Wasm plugin, a native reconciler is trusted code: it runs without
//! a deadline, memory cap or sandbox.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use setpoint_plugin_sdk as sdk;

use crate::contract::{
    CacheView, EventRecord, Manifest, ReconcileError, Reconciler, Request, Response, Severity,
};
use crate::object::{KindRef, ObjectKey, codec};

/// A [`Reconciler`] running an SDK reconciler natively.
pub struct Native<R> {
    reconciler: R,
    manifest: Manifest,
}

impl<R: sdk::Reconciler> Native<R> {
    /// Wrap an SDK reconciler.
    pub fn new(reconciler: R) -> Self {
        let m = reconciler.manifest();
        let kind = |k: sdk::KindRef| KindRef::new(k.api_version, k.kind);
        let manifest = Manifest {
            name: m.name,
            version: m.version,
            reconciles: kind(m.reconciles),
            owns: m.owns.into_iter().map(kind).collect(),
            definitions: m.definitions,
            finalizer: m.finalizer,
            destinations: m.destinations,
            secrets: m.secrets,
        };
        Self {
            reconciler,
            manifest,
        }
    }
}

/// The SDK's `Host` (log, get, list) over the host's caches.
struct CacheHost {
    cache: Arc<dyn CacheView>,
    plugin: String,
    object: String,
}

impl sdk::Host for CacheHost {
    fn log(&self, level: sdk::LogLevel, message: &str) {
        let (plugin, object) = (self.plugin.as_str(), self.object.as_str());
        match level {
            sdk::LogLevel::Trace => tracing::trace!(plugin, object, "{message}"),
            sdk::LogLevel::Debug => tracing::debug!(plugin, object, "{message}"),
            sdk::LogLevel::Info => tracing::info!(plugin, object, "{message}"),
            sdk::LogLevel::Warn => tracing::warn!(plugin, object, "{message}"),
            sdk::LogLevel::Error => tracing::error!(plugin, object, "{message}"),
        }
    }

    fn get(&self, object: &sdk::ObjectRef) -> Result<Option<sdk::DynamicObject>, sdk::Error> {
        self.cache
            .get(
                &object.api_version,
                &object.kind,
                object.namespace.as_deref(),
                &object.name,
            )
            .map(|o| sdk::DynamicObject::from_value((*o).clone()))
            .transpose()
    }

    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: &str,
    ) -> Result<Vec<sdk::DynamicObject>, sdk::Error> {
        self.cache
            .list(api_version, kind, namespace, label_selector)
            .map_err(sdk::Error::permanent)?
            .into_iter()
            .map(|o| sdk::DynamicObject::from_value((*o).clone()))
            .collect()
    }
}

fn parse(what: &str, json: &str) -> Result<Value, ReconcileError> {
    serde_json::from_str(json)
        .map_err(|e| ReconcileError::Permanent(format!("{what} is not JSON: {e}")))
}

impl<R: sdk::Reconciler + Send + Sync + 'static> Reconciler for Native<R> {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn reconcile(
        &self,
        request: &Request,
        cache: &Arc<dyn CacheView>,
    ) -> Result<Response, ReconcileError> {
        let raw = sdk::wire::RawRequest {
            // Serialised by the same function as for the Wasm runtime, so
            // both paths pay the same.
            object: codec::json_text(&request.object),
            owned: request.owned.iter().map(|o| codec::json_text(o)).collect(),
            finalizing: request.finalizing,
            now_unix_ms: request.now_unix_ms,
            observations: request.observations.clone(),
            outcomes: request.outcomes.clone(),
            round: request.round,
        };
        let host = CacheHost {
            cache: cache.clone(),
            plugin: self.manifest.name.clone(),
            object: ObjectKey::of(&request.object).to_string(),
        };
        let response = sdk::wire::reconcile(&self.reconciler, raw, host).map_err(|e| {
            if e.is_permanent() {
                ReconcileError::Permanent(e.message().to_owned())
            } else {
                ReconcileError::Transient(e.message().to_owned())
            }
        })?;
        Ok(Response {
            children: response
                .children
                .map(|list| {
                    list.iter()
                        .enumerate()
                        .map(|(i, c)| parse(&format!("children[{i}]"), c))
                        .collect::<Result<Vec<_>, _>>()
                })
                .transpose()?,
            status: response.status.map(|s| parse("status", &s)).transpose()?,
            events: response
                .events
                .into_iter()
                .map(|e| EventRecord {
                    severity: match e.severity {
                        sdk::Severity::Normal => Severity::Normal,
                        sdk::Severity::Warning => Severity::Warning,
                    },
                    reason: e.reason,
                    message: e.message,
                })
                .collect(),
            requeue_after: response.requeue_after_ms.map(Duration::from_millis),
            remove_finalizer: response.remove_finalizer,
            observe: response.observe,
            effects: response.effects,
        })
    }
}

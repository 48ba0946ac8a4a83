//! `WasmPlugin`: one compiled component with its pre-instantiated template.
//! The only code that creates a wasmtime `Store`: one per call, with a
//! deadline, a memory cap and captured output.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use wasmtime::Store;

use super::Runtime;
use super::bindings::setpoint::plugin::types as wit;
use super::bindings::{Reconciler as Bindings, ReconcilerPre};
use super::error::{CallFacts, Error, classify};
use super::host_api::{HostState, WasiSetup};
use super::limits::{Limiter, Limits};
use super::long_calls::Turn;
use crate::controller::{
    self, CacheView, EventRecord, Manifest, ReconcileError, Request, Response, Severity,
};
use crate::object::KindRef;
use crate::object::codec::json_text;

/// A loaded plugin, ready to reconcile. Implements [`controller::Reconciler`].
pub struct WasmPlugin {
    runtime: Runtime,
    pre: ReconcilerPre<HostState>,
    manifest: Manifest,
    content_hash: String,
    limits: Limits,
    name: Arc<str>,
}

impl WasmPlugin {
    pub(super) fn new(
        runtime: Runtime,
        pre: ReconcilerPre<HostState>,
        content_hash: String,
        limits: Limits,
    ) -> Result<Self, Error> {
        let mut plugin = Self {
            runtime,
            pre,
            manifest: Manifest {
                name: String::new(),
                version: String::new(),
                reconciles: KindRef::new("", ""),
                owns: vec![],
                definitions: vec![],
                finalizer: None,
            },
            content_hash,
            limits,
            name: Arc::from("(loading)"),
        };
        let manifest = plugin.call(None, String::new(), 0, 0, |bindings, store| {
            bindings.call_manifest(store)
        })?;
        plugin.manifest = convert_manifest(manifest)?;
        plugin.name = Arc::from(plugin.manifest.name.as_str());
        Ok(plugin)
    }

    /// The sha256 of the component's bytes, hex.
    pub fn content_hash(&self) -> &str {
        &self.content_hash
    }

    /// The per-call limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The plugin's name, from its manifest.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Run `f` against a fresh instance with the plugin's limits. `now_unix_ms`
    /// is what the guest's wall clock reads unless the host clock is granted;
    /// `seed` seeds its random numbers.
    fn call<T>(
        &self,
        cache: Option<Arc<dyn CacheView>>,
        object: String,
        now_unix_ms: u64,
        seed: u64,
        f: impl FnOnce(&Bindings, &mut Store<HostState>) -> wasmtime::Result<T>,
    ) -> Result<T, Error> {
        let _slot = self.runtime.inner.slots.acquire();
        let state = HostState::new(
            WasiSetup {
                output_bytes: self.limits.output_bytes,
                host_clock: self.limits.host_clock,
                now_unix_ms,
                deadline: tokio::time::Instant::now() + self.limits.deadline,
                seed,
            },
            Limiter {
                memory_cap: self.limits.memory_bytes,
                memory_exceeded: false,
            },
            self.name.clone(),
            object,
            cache,
        );
        let mut store = Store::new(&self.runtime.inner.engine, state);
        store.limiter(|s| &mut s.limiter);
        // The deadline must be set before instantiation: start-up code runs
        // too. Checked at every epoch tick, where a call that runs long also
        // takes its turn for the CPU long calls share (`long_calls`).
        let deadline = std::time::Instant::now() + self.limits.deadline;
        let long_calls = self.runtime.inner.long_calls.clone();
        let mut turn = Turn::default();
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |_| {
            if std::time::Instant::now() >= deadline || !long_calls.tick(&mut turn, deadline) {
                return Err(wasmtime::Trap::Interrupt.into());
            }
            Ok(wasmtime::UpdateDeadline::Continue(1))
        });
        let fuel = self
            .runtime
            .inner
            .config
            .fuel_metering
            .then(|| self.limits.fuel.unwrap_or(u64::MAX));
        if let Some(fuel) = fuel {
            // Cannot fail: metering is on for this engine.
            let _ = store.set_fuel(fuel);
        }
        let mut instantiated = false;
        let result = self.pre.instantiate(&mut store).and_then(|bindings| {
            instantiated = true;
            f(&bindings, &mut store)
        });
        let state = store.data();
        forward_output(state);
        result.map_err(|err| {
            let memory = state
                .limiter
                .memory_exceeded
                .then_some(self.limits.memory_bytes);
            let stderr = state
                .output
                .as_ref()
                .map(|output| output.stderr.contents())
                .unwrap_or_default();
            let tail: String = String::from_utf8_lossy(&stderr)
                .trim()
                .lines()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join(" | ");
            let err = classify(
                err,
                CallFacts {
                    deadline: self.limits.deadline,
                    memory_exceeded: memory,
                    fuel,
                    stderr_tail: &tail,
                    last_error_log: state.last_error_log.as_deref(),
                    instantiated,
                },
            );
            tracing::warn!(plugin = %state.plugin, object = %state.object, error = %err, "plugin call failed");
            err
        })
    }
}

fn forward_output(state: &HostState) {
    let Some(output) = &state.output else {
        return;
    };
    for (stream, pipe) in [("stdout", &output.stdout), ("stderr", &output.stderr)] {
        let bytes = pipe.contents();
        if bytes.is_empty() {
            continue;
        }
        for line in String::from_utf8_lossy(&bytes).lines() {
            tracing::info!(plugin = %state.plugin, object = %state.object, stream, "{line}");
        }
    }
}

fn convert_manifest(m: wit::Manifest) -> Result<Manifest, Error> {
    let bad = |msg: String| Error::BadResponse(format!("manifest: {msg}"));
    if m.name.is_empty() {
        return Err(bad("name is empty".into()));
    }
    let kind = |k: wit::KindRef| KindRef::new(k.api_version, k.kind);
    let definitions = m
        .definitions
        .iter()
        .enumerate()
        .map(|(i, d)| {
            serde_json::from_str::<Value>(d)
                .map_err(|e| bad(format!("definitions[{i}] is not JSON: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let reconciles = kind(m.reconciles);
    if reconciles.api_version.is_empty() || reconciles.kind.is_empty() {
        return Err(bad("reconciles names no kind".into()));
    }
    Ok(Manifest {
        name: m.name,
        version: m.version,
        reconciles,
        owns: m.owns.into_iter().map(kind).collect(),
        definitions,
        finalizer: m.finalizer,
    })
}

fn convert_response(r: wit::Response, limit: usize) -> Result<Response, Error> {
    let size = r.children.iter().flatten().map(String::len).sum::<usize>()
        + r.status.as_ref().map_or(0, String::len)
        + r.events
            .iter()
            .map(|e| e.message.len() + e.reason.len())
            .sum::<usize>();
    if size > limit {
        return Err(Error::BadResponse(format!(
            "response is {size} bytes, over the limit of {limit} bytes"
        )));
    }
    let children = r
        .children
        .map(|list| {
            list.iter()
                .enumerate()
                .map(|(i, c)| {
                    let v: Value = serde_json::from_str(c).map_err(|e| {
                        Error::BadResponse(format!("children[{i}] is not JSON: {e}"))
                    })?;
                    if !v.is_object() {
                        return Err(Error::BadResponse(format!(
                            "children[{i}] is not a JSON object"
                        )));
                    }
                    Ok(v)
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()?;
    let status = r
        .status
        .map(|s| {
            let v: Value = serde_json::from_str(&s)
                .map_err(|e| Error::BadResponse(format!("status is not JSON: {e}")))?;
            if v.is_object() {
                Ok(v)
            } else {
                Err(Error::BadResponse(
                    "status patch is not a JSON object".into(),
                ))
            }
        })
        .transpose()?;
    Ok(Response {
        children,
        status,
        events: r
            .events
            .into_iter()
            .map(|e| EventRecord {
                severity: match e.severity {
                    wit::Severity::Normal => Severity::Normal,
                    wit::Severity::Warning => Severity::Warning,
                },
                reason: e.reason,
                message: e.message,
            })
            .collect(),
        requeue_after: r.requeue_after_ms.map(Duration::from_millis),
        remove_finalizer: r.remove_finalizer,
    })
}

impl controller::Reconciler for WasmPlugin {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn reconcile(
        &self,
        request: &Request,
        cache: &Arc<dyn CacheView>,
    ) -> Result<Response, ReconcileError> {
        let timer = self.runtime.inner.calls.start(&self.name);
        let key = crate::object::ObjectKey::of(&request.object).to_string();
        let input = wit::Request {
            object: json_text(&request.object),
            owned: request.owned.iter().map(|o| json_text(o)).collect(),
            finalizing: request.finalizing,
            now_unix_ms: request.now_unix_ms,
        };
        let seed = super::wasi_calls::seed_of(
            &key,
            crate::object::meta::resource_version(&request.object).unwrap_or_default(),
            request.now_unix_ms,
        );
        let result = self.call(
            Some(cache.clone()),
            key.clone(),
            request.now_unix_ms,
            seed,
            |bindings, store| bindings.call_reconcile(store, &input),
        );
        let result = match result {
            Ok(Ok(response)) => convert_response(response, self.limits.response_bytes)
                .inspect_err(|err| {
                    tracing::warn!(plugin = %self.name, object = %key, error = %err, "plugin response refused");
                }),
            Ok(Err(wit::ReconcileError::Transient(msg))) => {
                return Err(ReconcileError::Transient(msg));
            }
            Ok(Err(wit::ReconcileError::Permanent(msg))) => {
                return Err(ReconcileError::Permanent(msg));
            }
            Err(err) => Err(err),
        };
        // A guest fault happens again on the same input: report it on the
        // object and wait for the object (or the plugin, whose reload
        // requeues everything) to change. Anything else is retried.
        result.map_err(|err| {
            timer.fault(&err);
            if err.is_guest_fault() {
                ReconcileError::Permanent(err.to_string())
            } else {
                ReconcileError::Transient(err.to_string())
            }
        })
    }
}

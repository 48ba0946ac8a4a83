//! `WasmPlugin`: one compiled component with its pre-instantiated template.
//! The only code that creates a wasmtime `Store`: one per call, with a
//! deadline, a memory cap and captured output.

use std::sync::Arc;

use wasmtime::Store;
use wasmtime::component::InstancePre;

use super::Runtime;
use super::bindings::setpoint::plugin::types as wit;
use super::bindings::v01::{Reconciler as Bindings01, ReconcilerPre as ReconcilerPre01};
use super::bindings::{Reconciler as Bindings, ReconcilerPre};
use super::convert;
use super::error::{CallFacts, Error, classify};
use super::host_api::{HostState, PluginLog, WasiSetup};
use super::limits::{Limiter, Limits};
use super::long_calls::Turn;
use super::wit::Series;
use crate::controller::{self, CacheView, Manifest, ReconcileError, Request, Response};
use crate::object::KindRef;

/// A component's pre-instantiated template, for the series it was built
/// against.
pub(super) enum Pre {
    Current(ReconcilerPre<HostState>),
    Previous(ReconcilerPre01<HostState>),
}

/// One instance, of either series.
pub(super) enum Instance {
    Current(Bindings),
    Previous(Bindings01),
}

impl Pre {
    pub(super) fn new(pre: InstancePre<HostState>, series: Series) -> wasmtime::Result<Self> {
        Ok(match series {
            Series::Current => Self::Current(ReconcilerPre::new(pre)?),
            Series::Previous => Self::Previous(ReconcilerPre01::new(pre)?),
        })
    }

    fn instantiate(&self, store: &mut Store<HostState>) -> wasmtime::Result<Instance> {
        Ok(match self {
            Self::Current(pre) => Instance::Current(pre.instantiate(store)?),
            Self::Previous(pre) => Instance::Previous(pre.instantiate(store)?),
        })
    }
}

impl Instance {
    fn manifest(&self, store: &mut Store<HostState>) -> wasmtime::Result<wit::Manifest> {
        match self {
            Self::Current(b) => b.call_manifest(store),
            Self::Previous(b) => b.call_manifest(store).map(convert::manifest_v01),
        }
    }

    fn reconcile(
        &self,
        store: &mut Store<HostState>,
        request: wit::Request,
    ) -> wasmtime::Result<Result<wit::Response, wit::ReconcileError>> {
        match self {
            Self::Current(b) => b.call_reconcile(store, &request),
            Self::Previous(b) => b
                .call_reconcile(store, &convert::request_v01(request))
                .map(convert::result_v01),
        }
    }
}

/// A loaded plugin, ready to reconcile. Implements [`controller::Reconciler`].
pub struct WasmPlugin {
    runtime: Runtime,
    pre: Pre,
    manifest: Manifest,
    content_hash: String,
    limits: Limits,
    name: Arc<str>,
}

impl WasmPlugin {
    pub(super) fn new(
        runtime: Runtime,
        pre: Pre,
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
                destinations: vec![],
                secrets: vec![],
            },
            content_hash,
            limits,
            name: Arc::from("(loading)"),
        };
        let manifest = plugin.call(None, String::new(), 0, 0, |bindings, store| {
            bindings.manifest(store)
        })?;
        plugin.manifest = convert::manifest(manifest)?;
        plugin.name = Arc::from(plugin.manifest.name.as_str());
        if plugin.series() == Series::Previous {
            tracing::warn!(
                plugin = %plugin.name,
                "plugin built against setpoint:plugin 0.1 (deprecated series, no external effects); \
                 rebuild it with the current SDK for setpoint:plugin@{}",
                super::WIT_VERSION
            );
        }
        Ok(plugin)
    }

    /// The series of the plugin world the plugin was built against.
    pub fn series(&self) -> Series {
        match self.pre {
            Pre::Current(_) => Series::Current,
            Pre::Previous(_) => Series::Previous,
        }
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
        f: impl FnOnce(&Instance, &mut Store<HostState>) -> wasmtime::Result<T>,
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
            PluginLog {
                budget: self.runtime.inner.calls.log_budget(&self.name),
                per_second: self.limits.log_bytes_per_second,
                burst: self.limits.log_burst_bytes,
            },
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
            if state.log.admit(&state.plugin, line.len()) {
                tracing::info!(plugin = %state.plugin, object = %state.object, stream, "{line}");
            }
        }
    }
}

impl controller::Reconciler for WasmPlugin {
    fn identity(&self) -> String {
        format!("{}@sha256:{}", self.name, self.content_hash)
    }

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
        let input = convert::request(request);
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
            |bindings, store| bindings.reconcile(store, input),
        );
        let result = match result {
            Ok(Ok(response)) => convert::response(response, self.limits.response_bytes)
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

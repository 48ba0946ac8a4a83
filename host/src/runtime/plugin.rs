//! `WasmPlugin`: one compiled component with its pre-instantiated template.
//! The only code that creates a wasmtime `Store`: one per call, with a
//! deadline, a memory cap and captured output.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use wasmtime::Store;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;

use super::background::{Job, SlotGuard};
use super::bindings::setpoint::plugin::types as wit;
use super::bindings::{Reconciler as Bindings, ReconcilerPre};
use super::error::{CallFacts, Error, classify};
use super::host_api::HostState;
use super::limits::{FrozenMonotonicClock, Limiter, Limits, RequestWallClock};
use super::{EPOCH_TICK, Runtime};
use crate::controller::{
    self, CacheView, EventRecord, Manifest, ReconcileError, Request, Response, Severity,
};
use crate::object::{KindRef, Object};

/// A loaded plugin, ready to reconcile. Implements [`controller::Reconciler`].
pub struct WasmPlugin {
    core: Arc<Core>,
    manifest: Manifest,
    content_hash: String,
}

/// How a plugin's calls got their instance so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InstanceSources {
    /// Calls that took an instance prepared ahead by the background thread.
    pub prepared: u64,
    /// Calls that instantiated on their own thread (none was ready, or
    /// prepared instances are off).
    pub inline: u64,
}

/// What calls and the background thread share about one plugin.
pub(super) struct Core {
    runtime: Runtime,
    pre: ReconcilerPre<HostState>,
    limits: Limits,
    name: Arc<str>,
    /// Instances created ahead of their call; never called into.
    ready: Mutex<Vec<Prepared>>,
    /// A refill is queued for the background thread (so at most one is).
    refill_queued: AtomicBool,
    /// Preparing an instance failed: from then on every call instantiates
    /// on its own thread, where the failure is reported on the object.
    prepare_failed: AtomicBool,
    prepared_calls: AtomicU64,
    inline_calls: AtomicU64,
}

/// An instance made ahead of its call, with the pool slot it occupies.
struct Prepared {
    store: Store<HostState>,
    bindings: Bindings,
    _slot: SlotGuard,
}

/// A store after its call, on its way to be dropped. Fields drop in order:
/// the store (resetting its pool slot) before the slot is counted free.
struct Used {
    _store: Store<HostState>,
    _slot: SlotGuard,
}

impl WasmPlugin {
    pub(super) fn new(
        runtime: Runtime,
        pre: ReconcilerPre<HostState>,
        content_hash: String,
        limits: Limits,
    ) -> Result<Self, Error> {
        let mut core = Core {
            runtime,
            pre,
            limits,
            name: Arc::from("(loading)"),
            ready: Mutex::default(),
            refill_queued: AtomicBool::new(false),
            prepare_failed: AtomicBool::new(false),
            prepared_calls: AtomicU64::new(0),
            inline_calls: AtomicU64::new(0),
        };
        let manifest = core.call_inline(None, String::new(), 0, |bindings, store| {
            bindings.call_manifest(store)
        })?;
        let manifest = convert_manifest(manifest)?;
        core.name = Arc::from(manifest.name.as_str());
        let core = Arc::new(core);
        core.request_refill();
        Ok(Self {
            core,
            manifest,
            content_hash,
        })
    }

    /// The sha256 of the component's bytes, hex.
    pub fn content_hash(&self) -> &str {
        &self.content_hash
    }

    /// The per-call limits.
    pub fn limits(&self) -> &Limits {
        &self.core.limits
    }

    /// The plugin's name, from its manifest.
    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// How this plugin's calls got their instances so far.
    pub fn instance_sources(&self) -> InstanceSources {
        InstanceSources {
            prepared: self.core.prepared_calls.load(Ordering::Relaxed),
            inline: self.core.inline_calls.load(Ordering::Relaxed),
        }
    }

    /// Run `f` against a fresh instance: one prepared ahead if there is one,
    /// else one made now.
    fn call<T>(
        &self,
        cache: Option<Arc<dyn CacheView>>,
        object: String,
        now_unix_ms: u64,
        f: impl FnOnce(&Bindings, &mut Store<HostState>) -> wasmtime::Result<T>,
    ) -> Result<T, Error> {
        let core = &self.core;
        let prepared = core.ready.lock().unwrap_or_else(|p| p.into_inner()).pop();
        core.request_refill();
        let Some(Prepared {
            mut store,
            bindings,
            _slot: slot,
        }) = prepared
        else {
            core.inline_calls.fetch_add(1, Ordering::Relaxed);
            return core.call_inline(cache, object, now_unix_ms, f);
        };
        core.prepared_calls.fetch_add(1, Ordering::Relaxed);
        let state = store.data_mut();
        state.object = object;
        state.cache = cache;
        state.now_unix_ms.store(now_unix_ms, Ordering::Relaxed);
        // The deadline and fuel count from now, not from when the instance
        // was made.
        store.set_epoch_deadline(core.epoch_ticks());
        if let Some(fuel) = core.fuel() {
            // Cannot fail: metering is on for this engine.
            let _ = store.set_fuel(fuel);
        }
        let result = f(&bindings, &mut store);
        let result = core.outcome(&store, result, true);
        core.runtime.dispose(Box::new(Used {
            _store: store,
            _slot: slot,
        }));
        result
    }
}

impl Core {
    fn epoch_ticks(&self) -> u64 {
        self.limits
            .deadline
            .as_nanos()
            .div_ceil(EPOCH_TICK.as_nanos())
            .max(1) as u64
    }

    fn fuel(&self) -> Option<u64> {
        self.runtime
            .inner
            .config
            .fuel_metering
            .then(|| self.limits.fuel.unwrap_or(u64::MAX))
    }

    /// A fresh store with the plugin's limits. `now_unix_ms` is what the
    /// guest's wall clock reads unless the host clock is granted.
    fn new_store(
        &self,
        cache: Option<Arc<dyn CacheView>>,
        object: String,
        now_unix_ms: u64,
    ) -> Store<HostState> {
        let stdout = MemoryOutputPipe::new(self.limits.output_bytes);
        let stderr = MemoryOutputPipe::new(self.limits.output_bytes);
        let now = Arc::new(AtomicU64::new(now_unix_ms));
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        if !self.limits.host_clock {
            wasi.wall_clock(RequestWallClock(now.clone()))
                .monotonic_clock(FrozenMonotonicClock);
        }
        let wasi = wasi.build();
        let state = HostState {
            wasi,
            table: ResourceTable::new(),
            limiter: Limiter {
                memory_cap: self.limits.memory_bytes,
                memory_exceeded: false,
            },
            plugin: self.name.clone(),
            object,
            now_unix_ms: now,
            cache,
            stdout,
            stderr,
        };
        let mut store = Store::new(&self.runtime.inner.engine, state);
        store.limiter(|s| &mut s.limiter);
        // The deadline must be set before instantiation: start-up code runs too.
        store.set_epoch_deadline(self.epoch_ticks());
        store.epoch_deadline_trap();
        if let Some(fuel) = self.fuel() {
            // Cannot fail: metering is on for this engine.
            let _ = store.set_fuel(fuel);
        }
        store
    }

    /// Instantiate and call on this thread, waiting for a pool slot.
    fn call_inline<T>(
        &self,
        cache: Option<Arc<dyn CacheView>>,
        object: String,
        now_unix_ms: u64,
        f: impl FnOnce(&Bindings, &mut Store<HostState>) -> wasmtime::Result<T>,
    ) -> Result<T, Error> {
        let slot = self.runtime.inner.slots.acquire();
        let mut store = self.new_store(cache, object, now_unix_ms);
        let mut instantiated = false;
        let result = self.pre.instantiate(&mut store).and_then(|bindings| {
            instantiated = true;
            f(&bindings, &mut store)
        });
        let result = self.outcome(&store, result, instantiated);
        self.runtime.dispose(Box::new(Used {
            _store: store,
            _slot: slot,
        }));
        result
    }

    /// Ask the background thread to top up the prepared instances, unless
    /// they are off, preparing failed, or a request is already queued.
    fn request_refill(self: &Arc<Self>) {
        let Some(jobs) = &self.runtime.inner.jobs else {
            return;
        };
        if self.prepare_failed.load(Ordering::Relaxed)
            || self.refill_queued.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let _ = jobs.send(Job::Refill(Arc::downgrade(self)));
    }

    /// On the background thread: instantiate until the plugin has its
    /// prepared instances or the spare pool slots run out.
    pub(super) fn refill(&self) {
        self.refill_queued.store(false, Ordering::Release);
        let target = self.runtime.inner.config.prepared_instances as usize;
        while !self.prepare_failed.load(Ordering::Relaxed)
            && self.ready.lock().unwrap_or_else(|p| p.into_inner()).len() < target
        {
            let Some(slot) = self.runtime.inner.spare.try_acquire() else {
                return;
            };
            let mut store = self.new_store(None, String::new(), 0);
            match self.pre.instantiate(&mut store) {
                Ok(bindings) => {
                    self.ready
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(Prepared {
                            store,
                            bindings,
                            _slot: slot,
                        })
                }
                Err(err) => {
                    // Calls instantiate on their own thread from now on and
                    // report the failure there, on the object.
                    tracing::debug!(plugin = %self.name, error = %format!("{err:#}"), "preparing an instance failed; instantiating per call");
                    self.prepare_failed.store(true, Ordering::Relaxed);
                }
            }
        }
    }

    /// Forward the guest's output and turn a failure into an [`Error`].
    fn outcome<T>(
        &self,
        store: &Store<HostState>,
        result: wasmtime::Result<T>,
        instantiated: bool,
    ) -> Result<T, Error> {
        let state = store.data();
        forward_output(state);
        result.map_err(|err| {
            let memory = state
                .limiter
                .memory_exceeded
                .then_some(self.limits.memory_bytes);
            let stderr = String::from_utf8_lossy(&state.stderr.contents())
                .trim()
                .to_owned();
            let tail: String = stderr
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
                    fuel: self.fuel(),
                    stderr_tail: &tail,
                    instantiated,
                },
            );
            tracing::warn!(plugin = %state.plugin, object = %state.object, error = %err, "plugin call failed");
            err
        })
    }
}

/// An object as JSON text. `serde_json::to_string` writes straight into a
/// byte buffer; `Value::to_string` (`Display`) goes through a
/// `fmt::Formatter` for every token and took about twice as long on the
/// 16 KiB benchmark object.
pub(super) fn json_text(object: &Object) -> String {
    serde_json::to_string(object).expect("a JSON value serialises")
}

fn forward_output(state: &HostState) {
    for (stream, pipe) in [("stdout", &state.stdout), ("stderr", &state.stderr)] {
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
        let timer = self.core.runtime.inner.calls.start(&self.core.name);
        let key = crate::object::ObjectKey::of(&request.object).to_string();
        let input = wit::Request {
            object: json_text(&request.object),
            owned: request.owned.iter().map(|o| json_text(o)).collect(),
            finalizing: request.finalizing,
            now_unix_ms: request.now_unix_ms,
        };
        let result = self.call(
            Some(cache.clone()),
            key.clone(),
            request.now_unix_ms,
            |bindings, store| bindings.call_reconcile(store, &input),
        );
        let result = match result {
            Ok(Ok(response)) => convert_response(response, self.core.limits.response_bytes)
                .inspect_err(|err| {
                    tracing::warn!(plugin = %self.core.name, object = %key, error = %err, "plugin response refused");
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

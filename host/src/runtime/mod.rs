//! The WebAssembly runtime: the only module that imports wasmtime.
//!
//! # Sandbox guarantees
//!
//! - One [`wasmtime::Engine`] per runtime, with the component model, epoch
//!   interruption (a ticker thread advances the epoch every
//!   [`EPOCH_TICK`]) and the pooling instance allocator (falling back to
//!   on-demand allocation where the machine cannot reserve the pool).
//! - A plugin file is a component, or a core module built without WASI
//!   that carries its world's types (wrapped into a component on load,
//!   `componentize`). Its outer structure (magic number, version,
//!   complete sections) is checked before anything parses it, and a core
//!   module is validated before it is wrapped (`file_check`).
//! - A component is compiled once; every reconcile gets a fresh store and
//!   instance from a pre-instantiated template, so no state survives a call.
//! - Each call has a deadline and a memory cap ([`Limits`]); hitting either
//!   ends that call with an error for that key only.
//! - Calls that run past their first epoch tick share half the cores,
//!   taking turns tick by tick (`long_calls`), so plugins that spin slow
//!   each other down, not everyone.
//! - Guests get no preopened directories, no environment, no arguments and
//!   no network; stdout and stderr are captured and logged with the plugin's
//!   name and the object's key.
//! - Guests get no host clock unless granted ([`Limits::host_clock`]): the
//!   wall clock reads the request's time and the monotonic clock stands still.
//!   No WASI call can wait past the deadline (a sleep returns at once, or
//!   at the deadline with the host's clocks), and WASI randomness is a
//!   function of the request (`wasi_calls`).
//! - Fuel metering is optional ([`RuntimeConfig::fuel_metering`]): with it,
//!   each call gets [`Limits::fuel`] units and stops when they run out.
//! - A guest fault (deadline, memory, fuel, trap, bad response) fails that
//!   one call with a precise [`Error`]; [`Error::is_guest_fault`] tells it
//!   from host-side trouble worth retrying.
//!
//! # Compiled-code cache
//!
//! With [`RuntimeConfig::cache_dir`] set, compiled components are kept on
//! disk by wasmtime's cache, keyed by the component's bytes, the compiler
//! settings and the wasmtime version, and written atomically (temporary file,
//! then rename); a restart loads them instead of compiling again.

mod bindings;
mod componentize;
mod convert;
mod error;
mod file_check;
mod host_api;
mod limits;
mod log_budget;
mod long_calls;
mod metrics;
mod plugin;
mod slot_reset;
mod wasi_calls;
mod wit;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use wasmtime::component::{Component, Linker};
use wasmtime::{
    Cache, CacheConfig, Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig,
};

pub use error::Error;
pub use limits::Limits;
pub use metrics::PluginCallStats;
pub use plugin::WasmPlugin;
pub use wit::{ACCEPTED_WIT_VERSIONS, Series, WIT_PACKAGE, accepts_wit_version};

use host_api::HostState;

/// The WIT package version of the plugin world this host speaks; it accepts
/// plugins built against [`ACCEPTED_WIT_VERSIONS`].
pub const WIT_VERSION: &str = "0.2.0";

/// How often the epoch advances; deadlines are rounded up to this.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Settings of the runtime.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// How many plugin instances may exist at once (pool size).
    pub max_instances: u32,
    /// Default per-call limits.
    pub limits: Limits,
    /// Count fuel in every call (slower; enables [`Limits::fuel`]).
    pub fuel_metering: bool,
    /// Keep compiled components in this directory across restarts.
    pub cache_dir: Option<PathBuf>,
    /// How many calls running past their first epoch tick may compute at
    /// once, taking turns (`None`: half the machine's cores, at least one).
    /// More lets plugins that compute long use more of the machine, at the
    /// cost of their neighbours' latency (BENCHMARKS.md, "Plugins that spin").
    pub long_call_turns: Option<usize>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            max_instances: 64,
            limits: Limits::default(),
            fuel_metering: false,
            cache_dir: None,
            long_call_turns: None,
        }
    }
}

/// How often the on-disk compiled-code cache was used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Components loaded from the cache.
    pub hits: usize,
    /// Components compiled (and then written to the cache).
    pub misses: usize,
}

/// The shared engine, linker and compiled-component cache. Cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Engine,
    linker: Linker<HostState>,
    config: RuntimeConfig,
    disk_cache: Option<Cache>,
    slots: Slots,
    /// Compiled components by content hash, so the same bytes compile once.
    compiled: Mutex<HashMap<[u8; 32], Component>>,
    /// Reconcile call durations and guest faults, by plugin name.
    calls: metrics::CallMetrics,
    /// The CPU that calls running past their first tick share.
    long_calls: long_calls::LongCalls,
}

/// How calls that run long share the CPU (see [`Runtime::long_call_stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LongCallStats {
    /// How many calls past their first epoch tick may run at once.
    pub permits: usize,
    /// The most that ever ran at once.
    pub peak: usize,
}

impl Runtime {
    /// Build the engine and linker and start the epoch ticker.
    pub fn new(config: RuntimeConfig) -> Result<Self, Error> {
        let disk_cache = match &config.cache_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir).map_err(|e| Error::Cache {
                    path: dir.clone(),
                    detail: e.to_string(),
                })?;
                let mut cache_config = CacheConfig::new();
                cache_config.with_directory(dir);
                Some(Cache::new(cache_config).map_err(|e| Error::Cache {
                    path: dir.clone(),
                    detail: format!("{e:#}"),
                })?)
            }
            None => None,
        };
        let engine = match Engine::new(&engine_config(
            Some(config.max_instances),
            &config,
            &disk_cache,
        )) {
            Ok(engine) => engine,
            Err(err) => {
                tracing::warn!(%err, "pooling allocator unavailable; using on-demand instance allocation");
                Engine::new(&engine_config(None, &config, &disk_cache)).map_err(error::engine)?
            }
        };
        let mut linker = Linker::<HostState>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(error::engine)?;
        wasi_calls::link(&mut linker).map_err(error::engine)?;
        bindings::Reconciler::add_to_linker::<_, wasmtime::component::HasSelf<_>>(
            &mut linker,
            |s| s,
        )
        .map_err(error::engine)?;
        bindings::v01::Reconciler::add_to_linker::<_, wasmtime::component::HasSelf<_>>(
            &mut linker,
            |s| s,
        )
        .map_err(error::engine)?;
        start_epoch_ticker(&engine);
        Ok(Self {
            inner: Arc::new(Inner {
                engine,
                linker,
                slots: Slots::new(config.max_instances as usize),
                long_calls: match config.long_call_turns {
                    Some(turns) => long_calls::LongCalls::new(turns),
                    None => long_calls::LongCalls::for_this_machine(),
                },
                config,
                disk_cache,
                compiled: Mutex::default(),
                calls: metrics::CallMetrics::default(),
            }),
        })
    }

    /// The default per-call limits.
    pub fn limits(&self) -> &Limits {
        &self.inner.config.limits
    }

    /// Whether calls count fuel.
    pub fn fuel_metering(&self) -> bool {
        self.inner.config.fuel_metering
    }

    /// Use of the on-disk compiled-code cache since this runtime started
    /// (zero without [`RuntimeConfig::cache_dir`]).
    pub fn cache_stats(&self) -> CacheStats {
        self.inner
            .disk_cache
            .as_ref()
            .map(|c| CacheStats {
                hits: c.cache_hits(),
                misses: c.cache_misses(),
            })
            .unwrap_or_default()
    }

    /// How calls that run past their first epoch tick share the CPU: at
    /// most [`LongCallStats::permits`] (half the cores) run at once, taking
    /// turns tick by tick, so plugins that compute until their deadline
    /// slow each other down and leave the rest of the machine to calls that
    /// finish quickly.
    pub fn long_call_stats(&self) -> LongCallStats {
        LongCallStats {
            permits: self.inner.long_calls.permits(),
            peak: self.inner.long_calls.peak(),
        }
    }

    /// Each plugin's reconcile call durations and guest faults so far, by
    /// plugin name (for `/metrics`).
    pub fn plugin_call_stats(&self) -> Vec<PluginCallStats> {
        self.inner.calls.snapshot()
    }

    /// Compile (or reuse) a component, link it against the plugin world and
    /// ask it for its manifest. Blocking: call from a blocking thread.
    pub fn load(&self, bytes: &[u8], limits: Option<Limits>) -> Result<WasmPlugin, Error> {
        use sha2::Digest;
        let hash: [u8; 32] = sha2::Sha256::digest(bytes).into();
        let cached = self
            .inner
            .compiled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&hash)
            .cloned();
        let component = match cached {
            Some(component) => component,
            None => {
                let before = self.cache_stats();
                let started = std::time::Instant::now();
                // Validated before anything parses it: the componentizer
                // assumes a well-formed module (it panicked on a truncated
                // one), and wasmtime reads text too, so it reports foreign
                // bytes as bad text.
                if file_check::check(bytes)? == file_check::Shape::CoreModule {
                    wasmtime::Module::validate(&self.inner.engine, bytes).map_err(|e| {
                        Error::InvalidFile(format!("not a valid WebAssembly module: {e:#}"))
                    })?;
                }
                let bytes = componentize::to_component(bytes)?;
                let component =
                    Component::new(&self.inner.engine, &bytes).map_err(error::compile)?;
                // Only a guess while other loads run at the same time, hence
                // "unknown" when both counters moved.
                let after = self.cache_stats();
                let source = match (after.hits > before.hits, after.misses > before.misses) {
                    (true, false) => "the compiled-code cache",
                    (false, true) => "compilation (now cached)",
                    (false, false) if self.inner.disk_cache.is_none() => "compilation (no cache)",
                    _ => "unknown",
                };
                tracing::info!(
                    hash = %hex(&hash[..6]),
                    ms = started.elapsed().as_millis() as u64,
                    "component loaded from {source}"
                );
                self.inner
                    .compiled
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(hash, component.clone());
                component
            }
        };
        let pre = self
            .inner
            .linker
            .instantiate_pre(&component)
            .map_err(|e| wit::link_error(&self.inner.engine, &component, e))?;
        let pre = plugin::Pre::new(pre, wit::series_of(&self.inner.engine, &component))
            .map_err(|e| wit::link_error(&self.inner.engine, &component, e))?;
        WasmPlugin::new(
            self.clone(),
            pre,
            hex(&hash),
            limits.unwrap_or_else(|| self.inner.config.limits.clone()),
        )
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn engine_config(pool: Option<u32>, settings: &RuntimeConfig, cache: &Option<Cache>) -> Config {
    let limits = &settings.limits;
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    config.consume_fuel(settings.fuel_metering);
    // Plugins are synchronous (WASI 0.2, no component-model async): without
    // this every store sets up, and every call enters and leaves, the task
    // bookkeeping for concurrent guests (docs/benchmarks/plugins.md#branch-plugin-perf-parse-once-build-maps-in-bulk).
    config.concurrency_support(false);
    config.cache(cache.clone());
    // For profiling plugins: wasmtime writes /tmp/perf-PID.map so that
    // `perf report` names guest functions (build the plugin unstripped).
    if std::env::var_os("SETPOINT_WASM_PERFMAP").is_some() {
        config.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    if let Some(n) = pool {
        let mut pooling = PoolingAllocationConfig::new();
        pooling
            .total_component_instances(n)
            .total_memories(2 * n)
            .total_tables(4 * n)
            .total_stacks(n)
            .total_core_instances(8 * n)
            .max_memory_size(limits.memory_bytes.max(1 << 20))
            // Reset slots with memset rather than madvise, which was slower per
            // fresh instance (docs/benchmarks/plugins.md#build-and-pool-settings-from-before-these-notes-2026-11-21).
            .linear_memory_keep_resident(4 << 20)
            .table_keep_resident(64 << 10)
            // Where the kernel has PAGEMAP_SCAN (Linux 6.7+), reset only the
            // pages a call wrote instead of all of the kept-resident part:
            // a plugin with room to grow (more initial memory than it uses)
            // then costs no more to reset than one that was cut to size.
            // Not with swap on (`slot_reset`).
            .pagemap_scan(slot_reset::pagemap_scan_here());
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pooling));
    }
    config
}

fn start_epoch_ticker(engine: &Engine) {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("setpoint-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        })
        .expect("spawning the epoch ticker thread");
}

/// A counting semaphore over pool slots: an exhausted pool makes
/// instantiation fail, so callers wait for a slot instead.
///
/// `Condvar::notify_one` makes a `futex` system call even when nobody waits
/// (once per reconcile; docs/benchmarks/plugins.md#branch-plugin-perf2-cpu-per-call-and-what-did-not-help), so a freed slot
/// is only signalled when a caller is actually waiting.
struct Slots {
    state: Mutex<SlotCounts>,
    available: Condvar,
}

struct SlotCounts {
    free: usize,
    waiting: usize,
}

impl Slots {
    fn new(count: usize) -> Self {
        Self {
            state: Mutex::new(SlotCounts {
                free: count.max(1),
                waiting: 0,
            }),
            available: Condvar::new(),
        }
    }

    fn acquire(&self) -> SlotGuard<'_> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while state.free == 0 {
            state.waiting += 1;
            state = self
                .available
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
            state.waiting -= 1;
        }
        state.free -= 1;
        SlotGuard(self)
    }
}

struct SlotGuard<'a>(&'a Slots);

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        let mut state = self.0.state.lock().unwrap_or_else(|p| p.into_inner());
        state.free += 1;
        if state.waiting > 0 {
            self.0.available.notify_one();
        }
    }
}

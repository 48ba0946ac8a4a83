//! The per-call store data and the `host` imports a guest may call: `log`
//! into `tracing` with the plugin's name and object key (within the
//! plugin's log budget, `log_budget`), and read-only
//! `get`/`list` against the host's caches. The guest's WASI context is built
//! on its first WASI call, not per call: plugins built without WASI never
//! make one, and SDK plugins built with it rarely do.

use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::setpoint::plugin::{host, types};
use super::bindings::v01::setpoint::plugin::{host as host01, types as types01};
use super::limits::{FixedWallClock, FrozenMonotonicClock, Limiter};
use super::log_budget::{Admit, LogBudget};
use super::wasi_calls;
use crate::controller::CacheView;
use crate::object::codec::json_text;

/// What one store (one call) carries.
pub(super) struct HostState {
    /// Built by [`WasiView::ctx`] when the guest first calls WASI.
    wasi: Option<WasiCtx>,
    wasi_setup: WasiSetup,
    pub table: ResourceTable,
    pub limiter: Limiter,
    pub plugin: Arc<str>,
    pub object: String,
    pub cache: Option<Arc<dyn CacheView>>,
    /// The guest's stdout and stderr, once it has a WASI context.
    pub output: Option<Output>,
    /// The last message the guest logged at error level: a guest built
    /// without WASI reports its panic there (the SDK's panic hook).
    pub last_error_log: Option<String>,
    /// What the plugin may still write to the host's log.
    pub log: PluginLog,
}

/// A plugin's log budget and its rates (`Limits::log_bytes_per_second`).
pub(super) struct PluginLog {
    pub budget: Arc<LogBudget>,
    pub per_second: u64,
    pub burst: u64,
}

impl PluginLog {
    /// Whether a line of `len` bytes may be written; says so first when
    /// lines were dropped before it.
    pub fn admit(&self, plugin: &str, len: usize) -> bool {
        match self.budget.admit(len, self.per_second, self.burst) {
            Admit::Drop => false,
            Admit::Write { dropped } => {
                if dropped > 0 {
                    tracing::warn!(
                        plugin,
                        dropped,
                        "{dropped} log lines of the plugin dropped: over its log budget of {} bytes a second",
                        self.per_second
                    );
                }
                true
            }
        }
    }
}

/// What a call's WASI context is built from.
pub(super) struct WasiSetup {
    /// The most each of stdout and stderr keeps.
    pub output_bytes: usize,
    /// Whether the guest sees the host's clocks.
    pub host_clock: bool,
    /// What the wall clock reads otherwise.
    pub now_unix_ms: u64,
    /// When the call's deadline passes: a wait never lasts past it.
    pub deadline: tokio::time::Instant,
    /// Seeds the guest's random numbers (`wasi_calls::seed_of`).
    pub seed: u64,
}

/// A guest's captured stdout and stderr.
pub(super) struct Output {
    pub stdout: MemoryOutputPipe,
    pub stderr: MemoryOutputPipe,
}

impl HostState {
    pub fn new(
        wasi_setup: WasiSetup,
        limiter: Limiter,
        plugin: Arc<str>,
        object: String,
        cache: Option<Arc<dyn CacheView>>,
        log: PluginLog,
    ) -> Self {
        Self {
            log,
            wasi: None,
            wasi_setup,
            table: ResourceTable::new(),
            limiter,
            plugin,
            object,
            cache,
            output: None,
            last_error_log: None,
        }
    }
}

impl WasiSetup {
    /// No preopens, environment, arguments or network; captured output;
    /// the request's time on a clock that stands still unless granted;
    /// random numbers that are a function of the request.
    fn build(&self) -> (WasiCtx, Output) {
        let output = Output {
            stdout: MemoryOutputPipe::new(self.output_bytes),
            stderr: MemoryOutputPipe::new(self.output_bytes),
        };
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdout(output.stdout.clone())
            .stderr(output.stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        if self.host_clock {
            wasi.monotonic_clock(wasi_calls::HostMonotonic);
        } else {
            wasi.wall_clock(FixedWallClock(Duration::from_millis(self.now_unix_ms)))
                .monotonic_clock(FrozenMonotonicClock);
        }
        wasi.secure_random(wasi_calls::seeded_random(self.seed))
            .insecure_random(wasi_calls::seeded_random(!self.seed))
            .insecure_random_seed(u128::from(self.seed) << 64 | u128::from(!self.seed));
        (wasi.build(), output)
    }
}

impl HostState {
    /// What the guest's monotonic clock reads now.
    pub fn monotonic_now(&self) -> u64 {
        use wasmtime_wasi::HostMonotonicClock;
        if self.wasi_setup.host_clock {
            wasi_calls::HostMonotonic.now()
        } else {
            FrozenMonotonicClock.now()
        }
    }

    /// The call's deadline, when the guest's waits take real time (the
    /// host's clocks are granted); `None` when they end at once.
    pub fn host_clock_deadline(&self) -> Option<tokio::time::Instant> {
        self.wasi_setup
            .host_clock
            .then_some(self.wasi_setup.deadline)
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        let wasi = match &mut self.wasi {
            Some(wasi) => wasi,
            none => {
                let (wasi, output) = self.wasi_setup.build();
                self.output = Some(output);
                none.insert(wasi)
            }
        };
        WasiCtxView {
            ctx: wasi,
            table: &mut self.table,
        }
    }
}

impl types::Host for HostState {}
impl types01::Host for HostState {}

/// A plugin of the `0.1` series calls the same host functions: its types
/// are the same records under another version, converted here.
impl host01::Host for HostState {
    fn log(&mut self, level: host01::Level, message: String) -> wasmtime::Result<()> {
        let level = match level {
            host01::Level::Trace => host::Level::Trace,
            host01::Level::Debug => host::Level::Debug,
            host01::Level::Info => host::Level::Info,
            host01::Level::Warn => host::Level::Warn,
            host01::Level::Error => host::Level::Error,
        };
        host::Host::log(self, level, message)
    }

    fn get_object(&mut self, object: types01::ObjectRef) -> wasmtime::Result<Option<String>> {
        let object = types::ObjectRef {
            api_version: object.api_version,
            kind: object.kind,
            namespace: object.namespace,
            name: object.name,
        };
        host::Host::get_object(self, object)
    }

    fn list_objects(
        &mut self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        label_selector: String,
    ) -> wasmtime::Result<Result<Vec<String>, String>> {
        host::Host::list_objects(self, api_version, kind, namespace, label_selector)
    }
}

impl host::Host for HostState {
    fn log(&mut self, level: host::Level, message: String) -> wasmtime::Result<()> {
        let (plugin, object) = (&*self.plugin, self.object.as_str());
        if !self.log.admit(plugin, message.len()) {
            if level == host::Level::Error {
                self.last_error_log = Some(message);
            }
            return Ok(());
        }
        match level {
            host::Level::Trace => tracing::trace!(plugin, object, "{message}"),
            host::Level::Debug => tracing::debug!(plugin, object, "{message}"),
            host::Level::Info => tracing::info!(plugin, object, "{message}"),
            host::Level::Warn => tracing::warn!(plugin, object, "{message}"),
            host::Level::Error => {
                tracing::error!(plugin, object, "{message}");
                self.last_error_log = Some(message);
            }
        }
        Ok(())
    }

    fn get_object(&mut self, object: types::ObjectRef) -> wasmtime::Result<Option<String>> {
        let Some(cache) = &self.cache else {
            return Ok(None);
        };
        Ok(cache
            .get(
                &object.api_version,
                &object.kind,
                object.namespace.as_deref(),
                &object.name,
            )
            .map(|o| json_text(&o)))
    }

    fn list_objects(
        &mut self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        label_selector: String,
    ) -> wasmtime::Result<Result<Vec<String>, String>> {
        let Some(cache) = &self.cache else {
            return Ok(Ok(Vec::new()));
        };
        Ok(cache
            .list(&api_version, &kind, namespace.as_deref(), &label_selector)
            .map(|objects| objects.iter().map(|o| json_text(o)).collect()))
    }
}

//! The per-call store data and the `host` imports a guest may call: `log`
//! into `tracing` with the plugin's name and object key, and read-only
//! `get`/`list` against the host's caches.

use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::setpoint::plugin::{host, types};
use super::limits::Limiter;
use super::plugin::json_text;
use crate::controller::CacheView;

/// What one store (one call) carries.
pub(super) struct HostState {
    pub wasi: WasiCtx,
    pub table: ResourceTable,
    pub limiter: Limiter,
    pub plugin: Arc<str>,
    pub object: String,
    pub cache: Option<Arc<dyn CacheView>>,
    pub stdout: MemoryOutputPipe,
    pub stderr: MemoryOutputPipe,
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl types::Host for HostState {}

impl host::Host for HostState {
    fn log(&mut self, level: host::Level, message: String) -> wasmtime::Result<()> {
        let (plugin, object) = (&*self.plugin, self.object.as_str());
        match level {
            host::Level::Trace => tracing::trace!(plugin, object, "{message}"),
            host::Level::Debug => tracing::debug!(plugin, object, "{message}"),
            host::Level::Info => tracing::info!(plugin, object, "{message}"),
            host::Level::Warn => tracing::warn!(plugin, object, "{message}"),
            host::Level::Error => tracing::error!(plugin, object, "{message}"),
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

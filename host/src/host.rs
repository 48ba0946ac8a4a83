//! `Host` and `HostBuilder`: wire store → api → watch → informers →
//! controllers → plugins, start them, and shut them down. No logic of its own.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::Mutex;

use crate::api::{self, Api};
use crate::controller::{self, Controller, ReconcileRecord, Reconciler};
use crate::informer::Informers;
use crate::object::ObjectKey;
use crate::plugins::{self, PluginState, PluginStatus};
use crate::runtime::{self, Runtime, RuntimeConfig};
use crate::store::{Backend, MemoryBackend};

/// Why a host could not start or a reconciler could not be added.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The object API failed.
    #[error(transparent)]
    Api(#[from] api::Error),
    /// The Wasm runtime failed.
    #[error(transparent)]
    Runtime(#[from] runtime::Error),
    /// A controller could not start.
    #[error(transparent)]
    Controller(#[from] controller::Error),
    /// A reconciler with that name is already running.
    #[error("a reconciler named {0:?} is already running")]
    Duplicate(String),
    /// Reading the plugins directory failed.
    #[error("plugins directory {path}: {source}")]
    PluginsDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Builds a [`Host`].
///
/// ```no_run
/// # async fn example() -> Result<(), setpoint::host::Error> {
/// let host = setpoint::Host::builder().plugins_dir("plugins").build().await?;
/// host.shutdown().await;
/// # Ok(()) }
/// ```
pub struct HostBuilder {
    backend: Option<Arc<dyn Backend>>,
    plugins_dir: Option<PathBuf>,
    runtime: RuntimeConfig,
    controller: controller::Config,
}

impl HostBuilder {
    /// The store backend (default: in memory).
    pub fn backend(mut self, backend: Arc<dyn Backend>) -> Self {
        self.backend = Some(backend);
        self
    }

    /// Load every `*.wasm` in this directory at start.
    pub fn plugins_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.plugins_dir = Some(dir.into());
        self
    }

    /// Runtime settings (pool size, default limits).
    pub fn runtime(mut self, config: RuntimeConfig) -> Self {
        self.runtime = config;
        self
    }

    /// Controller settings (workers, queue backoff) for every reconciler.
    pub fn controller(mut self, config: controller::Config) -> Self {
        self.controller = config;
        self
    }

    /// Open the store, start the runtime and load the plugins.
    pub async fn build(self) -> Result<Host, Error> {
        let backend = self
            .backend
            .unwrap_or_else(|| Arc::new(MemoryBackend::new()));
        let api = Api::open(backend).await?;
        let runtime = Runtime::new(self.runtime)?;
        let background = vec![
            api.start_garbage_collector(),
            api.start_compactor(COMPACTION_INTERVAL, COMPACTION_KEEP_REVISIONS),
        ];
        let host = Host {
            background: std::sync::Mutex::new(background),
            informers: Informers::new(api.clone()),
            api,
            runtime,
            controller_config: self.controller,
            controllers: Mutex::default(),
            plugins: Mutex::default(),
        };
        if let Some(dir) = self.plugins_dir {
            host.load_plugins_dir(&dir).await?;
        }
        Ok(host)
    }
}

/// A running Setpoint host.
pub struct Host {
    api: Api,
    informers: Informers,
    runtime: Runtime,
    controller_config: controller::Config,
    controllers: Mutex<BTreeMap<String, Controller>>,
    plugins: Mutex<Vec<PluginStatus>>,
    /// The garbage collector and the compactor.
    background: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// How often old revisions are compacted (as Kubernetes does).
pub const COMPACTION_INTERVAL: std::time::Duration = std::time::Duration::from_secs(300);

/// How many revisions of history compaction keeps.
pub const COMPACTION_KEEP_REVISIONS: i64 = 10_000;

impl Host {
    /// Start building a host.
    pub fn builder() -> HostBuilder {
        HostBuilder {
            backend: None,
            plugins_dir: None,
            runtime: RuntimeConfig::default(),
            controller: controller::Config::default(),
        }
    }

    /// The object API.
    pub fn api(&self) -> &Api {
        &self.api
    }

    /// The Wasm runtime.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// Register a reconciler's CustomResourceDefinitions (those whose kind is
    /// not known yet) and start its controller.
    pub async fn add_reconciler(&self, reconciler: Arc<dyn Reconciler>) -> Result<(), Error> {
        let name = reconciler.manifest().name.clone();
        if self.controllers.lock().await.contains_key(&name) {
            return Err(Error::Duplicate(name));
        }
        self.register_definitions(reconciler.manifest()).await?;
        let controller = Controller::start(
            self.api.clone(),
            self.informers.clone(),
            reconciler,
            self.controller_config.clone(),
        )
        .await?;
        self.controllers.lock().await.insert(name, controller);
        Ok(())
    }

    async fn register_definitions(&self, manifest: &controller::Manifest) -> Result<(), Error> {
        let crd_kind = self
            .api
            .kinds()
            .by_plural(api::kinds::CRD_GROUP, "customresourcedefinitions")
            .expect("built-in kind");
        for definition in &manifest.definitions {
            let info = api::kinds::kind_from_crd(definition)?;
            if self
                .api
                .kinds()
                .by_plural(&info.group, &info.plural)
                .is_some()
            {
                continue;
            }
            match self.api.create(&crd_kind, definition.clone()).await {
                Ok(_) | Err(api::Error::AlreadyExists { .. }) => {
                    tracing::info!(plugin = %manifest.name, kind = %info.kind, "registered kind");
                }
                Err(err) => return Err(err.into()),
            }
        }
        Ok(())
    }

    /// Load every `*.wasm` of `dir`. A file that fails is recorded as failed
    /// (see [`Host::plugins`]) and does not stop the others.
    pub async fn load_plugins_dir(&self, dir: &std::path::Path) -> Result<(), Error> {
        let files = plugins::wasm_files(dir).map_err(|source| Error::PluginsDir {
            path: dir.to_owned(),
            source,
        })?;
        let mut loaded = Vec::new();
        for path in files {
            let stem = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let mut status = PluginStatus {
                path: path.clone(),
                name: stem,
                kind: None,
                version: None,
                content_hash: None,
                loaded_at: SystemTime::now(),
                state: PluginState::Running,
            };
            match plugins::load_file(&self.runtime, &path).await {
                Ok(plugin) => {
                    let m = controller::Reconciler::manifest(&*plugin);
                    status.name = m.name.clone();
                    status.kind = Some(m.reconciles.to_string());
                    status.version = Some(m.version.clone());
                    status.content_hash = Some(plugin.content_hash().to_owned());
                    if let Err(err) = self.register_definitions(m).await {
                        status.state = PluginState::Failed(err.to_string());
                    } else {
                        loaded.push((plugin, self.plugins.lock().await.len()));
                    }
                }
                Err(err) => {
                    tracing::error!(path = %path.display(), %err, "plugin failed to load");
                    status.state = PluginState::Failed(err);
                }
            }
            self.plugins.lock().await.push(status);
        }
        // Controllers start once every plugin's kinds are registered, so a
        // plugin may own a kind another plugin defines.
        for (plugin, index) in loaded {
            let name = controller::Reconciler::manifest(&*plugin).name.clone();
            if let Err(err) = self.add_reconciler(plugin).await {
                tracing::error!(plugin = %name, %err, "plugin failed to start");
                self.plugins.lock().await[index].state = PluginState::Failed(err.to_string());
            } else {
                tracing::info!(plugin = %name, "plugin running");
            }
        }
        Ok(())
    }

    /// Every plugin file the host has seen and its state.
    pub async fn plugins(&self) -> Vec<PluginStatus> {
        self.plugins.lock().await.clone()
    }

    /// Names of the running reconcilers.
    pub async fn reconcilers(&self) -> Vec<String> {
        self.controllers.lock().await.keys().cloned().collect()
    }

    /// A snapshot of each running reconciler's workqueue metrics, by
    /// reconciler name (for `/metrics`).
    pub async fn queue_metrics(&self) -> Vec<(String, crate::queue::MetricsSnapshot)> {
        self.controllers
            .lock()
            .await
            .iter()
            .map(|(name, c)| (name.clone(), c.queue().metrics()))
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
        let controllers = self.controllers.lock().await;
        controllers
            .values()
            .filter(|c| {
                c.manifest().reconciles.api_version == api_version
                    && c.manifest().reconciles.kind == kind
            })
            .flat_map(|c| c.history(key))
            .collect()
    }

    /// Queue every object of every reconciled kind again (a resync):
    /// level-triggered reconcilers repair anything a missed event left behind.
    pub async fn resync(&self) {
        for controller in self.controllers.lock().await.values() {
            controller.requeue_all();
        }
    }

    /// Stop every controller (in-flight reconciles finish) and informer.
    pub async fn shutdown(&self) {
        let controllers = std::mem::take(&mut *self.controllers.lock().await);
        for (_, controller) in controllers {
            controller.shutdown().await;
        }
        for task in std::mem::take(&mut *self.background.lock().unwrap_or_else(|p| p.into_inner()))
        {
            task.abort();
        }
        self.informers.clear();
    }
}

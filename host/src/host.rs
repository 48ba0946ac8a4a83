//! `Host` and `HostBuilder`: wire store → api → watch → informers →
//! controllers → plugins, start them, and shut them down; and keep the
//! running controllers in step with the plugins directory (hot reload).
//!
//! # What a plugin file change does
//!
//! The directory watcher ([`plugins::watch`]) only says "look again"; the
//! host then compares every `*.wasm` file (and its `NAME.toml` settings) with
//! what it runs, by size and modification time, then by content hash:
//!
//! 1. A new or changed file is read (a file still being written is skipped
//!    until its write settles), compiled and asked for its manifest on a
//!    blocking thread, while the old version keeps reconciling.
//! 2. If that fails, the old version keeps running and the failure is
//!    reported as the file's `last_error` (or as `Failed` when nothing of
//!    it runs yet).
//! 3. If it reconciles and owns the same kinds as the running version, the
//!    new version is swapped into the running controller: reconciles in
//!    flight finish on the old version, queued keys stay queued, and every
//!    object of the kind is queued again so the new logic applies to all.
//! 4. If its name or kinds changed, the old controller stops (in-flight
//!    reconciles finish) and a new one starts.
//! 5. A removed file's controller stops; its objects are left alone.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::Mutex;

use crate::api::{self, Api};
use crate::cluster::{self, Cluster};
use crate::controller::pool::CallPool;
use crate::controller::{self, Controller, ReconcileRecord, Reconciler};
use crate::informer::Informers;
use crate::object::ObjectKey;
use crate::plugins::{self, Counted, Counts, LoadedFile, PluginState, PluginStatus};
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
    /// The plugins directory cannot be watched.
    #[error(transparent)]
    Watch(#[from] plugins::watch::WatchError),
    /// Joining the cluster failed.
    #[error(transparent)]
    Cluster(#[from] cluster::Error),
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
    watch_plugins: bool,
    runtime: RuntimeConfig,
    controller: controller::Config,
    per_plugin: std::collections::HashMap<String, controller::Config>,
    reconcile_threads: Option<usize>,
    embedded_dir: Option<PathBuf>,
    etcd: Option<crate::store::EtcdConfig>,
    etcd_backend: Option<crate::store::EtcdBackend>,
    cluster: Option<cluster::Config>,
}

impl HostBuilder {
    /// The store backend (default: in memory).
    pub fn backend(mut self, backend: Arc<dyn Backend>) -> Self {
        self.backend = Some(backend);
        self
    }

    /// Keep everything in memory (the default): nothing survives the process.
    pub fn in_memory(self) -> Self {
        self.backend(Arc::new(MemoryBackend::new()))
    }

    /// The durable embedded store in `dir` (created if absent).
    pub fn embedded(mut self, dir: impl Into<PathBuf>) -> Self {
        self.embedded_dir = Some(dir.into());
        self
    }

    /// An etcd cluster.
    pub fn etcd(mut self, config: crate::store::EtcdConfig) -> Self {
        self.etcd = Some(config);
        self
    }

    /// Store objects in etcd through an existing connection.
    pub fn etcd_backend(mut self, backend: crate::store::EtcdBackend) -> Self {
        self.etcd_backend = Some(backend);
        self
    }

    /// Share the work with the other hosts on the same etcd (see
    /// [`cluster`]): needs [`HostBuilder::etcd`] or
    /// [`HostBuilder::etcd_backend`].
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), setpoint::host::Error> {
    /// use setpoint::{cluster, store::EtcdConfig};
    ///
    /// let host = setpoint::Host::builder()
    ///     .etcd(EtcdConfig { endpoints: vec!["http://127.0.0.1:2379".into()], ..Default::default() })
    ///     .cluster(cluster::Config::default())
    ///     .plugins_dir("plugins")
    ///     .build()
    ///     .await?;
    /// println!("{:?}", host.cluster().map(|c| c.status()));
    /// host.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn cluster(mut self, config: cluster::Config) -> Self {
        self.cluster = Some(config);
        self
    }

    /// Load every `*.wasm` in this directory at start (and, unless
    /// [`HostBuilder::watch_plugins`] turns it off, follow its changes).
    pub fn plugins_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.plugins_dir = Some(dir.into());
        self
    }

    /// Follow changes to the plugins directory (hot reload). Default: on.
    pub fn watch_plugins(mut self, watch: bool) -> Self {
        self.watch_plugins = watch;
        self
    }

    /// Runtime settings (pool size, default limits, fuel, compiled-code cache).
    pub fn runtime(mut self, config: RuntimeConfig) -> Self {
        self.runtime = config;
        self
    }

    /// Controller settings (workers, queue backoff) for every reconciler.
    pub fn controller(mut self, config: controller::Config) -> Self {
        self.controller = config;
        self
    }

    /// Controller settings (workers, backoff, resync, hot-loop limits) for the
    /// reconciler named `plugin`, instead of those of [`controller`](Self::controller).
    pub fn controller_for(mut self, plugin: impl Into<String>, config: controller::Config) -> Self {
        self.per_plugin.insert(plugin.into(), config);
        self
    }

    /// Threads that run reconciler calls (Wasm plugins and native
    /// reconcilers that do not run inline), shared by every controller of
    /// the host. Default: one per core. A call that finds all of them busy
    /// runs on tokio's blocking pool instead, so a plugin that computes
    /// until its deadline never holds up the others; these threads only
    /// make the common short call cheaper.
    pub fn reconcile_threads(mut self, threads: usize) -> Self {
        self.reconcile_threads = Some(threads);
        self
    }

    /// Open the store, start the runtime and load the plugins.
    pub async fn build(self) -> Result<Host, Error> {
        let etcd = match (self.etcd_backend, self.etcd) {
            (Some(backend), _) => Some(backend),
            (None, Some(config)) => Some(
                crate::store::EtcdBackend::connect(config)
                    .await
                    .map_err(api::Error::Store)?,
            ),
            (None, None) => None,
        };
        let backend: Arc<dyn Backend> = if let Some(dir) = self.embedded_dir {
            // Opening checks the whole file: keep it off the async threads.
            let store =
                tokio::task::spawn_blocking(move || crate::store::EmbeddedBackend::open(&dir))
                    .await
                    .map_err(|e| {
                        Error::Api(api::Error::Store(crate::store::Error::Unavailable(
                            e.to_string(),
                        )))
                    })?
                    .map_err(api::Error::Store)?;
            Arc::new(store)
        } else if let Some(etcd) = &etcd {
            Arc::new(etcd.clone())
        } else {
            self.backend
                .unwrap_or_else(|| Arc::new(MemoryBackend::new()))
        };
        // Timed for /metrics (setpoint_store_request_duration_seconds).
        let api = Api::open(Arc::new(crate::store::Metered::new(backend))).await?;
        let runtime = Runtime::new(self.runtime)?;
        let cluster = match (self.cluster, etcd) {
            (Some(config), Some(etcd)) => Some(Cluster::join(etcd, api.clone(), config).await?),
            (Some(_), None) => {
                return Err(cluster::Error::Settings(
                    "several hosts share work only on etcd: configure the etcd backend".into(),
                )
                .into());
            }
            (None, _) => None,
        };
        let mut background = vec![api.start_definition_follower()];
        match &cluster {
            // Cluster-wide singletons run on the leader only.
            Some(cluster) => background.push(run_while_leader(cluster, api.clone())),
            None => {
                background.push(api.start_garbage_collector());
                background
                    .push(api.start_compactor(COMPACTION_INTERVAL, COMPACTION_KEEP_REVISIONS));
            }
        }
        let host = Host {
            shared: Arc::new(Shared {
                informers: Informers::new(api.clone()),
                api,
                cluster,
                runtime,
                controller_config: self.controller,
                per_plugin: self.per_plugin,
                pool: CallPool::new(
                    self.reconcile_threads
                        .unwrap_or_else(controller::pool::default_threads),
                ),
                controllers: Mutex::default(),
                plugins: Mutex::default(),
                sync: Mutex::default(),
            }),
            background: std::sync::Mutex::new(background),
            watcher: std::sync::Mutex::default(),
        };
        if let Some(dir) = self.plugins_dir {
            if self.watch_plugins {
                // Watch before the first scan, so no change slips between.
                let (watcher, mut changes) = plugins::watch::watch_dir(&dir)?;
                host.load_plugins_dir(&dir).await?;
                let shared = host.shared.clone();
                let task = tokio::spawn(async move {
                    while changes.recv().await.is_some() {
                        if let Err(err) = shared.sync_dir(&dir).await {
                            tracing::warn!(%err, "rescanning the plugins directory failed");
                        }
                    }
                });
                host.background_tasks().push(task);
                *host.watcher.lock().unwrap_or_else(|p| p.into_inner()) = Some(watcher);
            } else {
                host.load_plugins_dir(&dir).await?;
            }
        }
        Ok(host)
    }
}

/// A running Setpoint host.
pub struct Host {
    shared: Arc<Shared>,
    /// The garbage collector, the compactor and the plugins watcher task.
    background: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    watcher: std::sync::Mutex<Option<plugins::watch::DirWatcher>>,
}

/// What the host and its plugins-directory task share.
struct Shared {
    api: Api,
    cluster: Option<Cluster>,
    informers: Informers,
    runtime: Runtime,
    controller_config: controller::Config,
    per_plugin: std::collections::HashMap<String, controller::Config>,
    /// Runs every controller's reconciler calls.
    pool: CallPool,
    controllers: Mutex<BTreeMap<String, Controller>>,
    plugins: Mutex<BTreeMap<PathBuf, PluginEntry>>,
    /// One directory sync at a time.
    sync: Mutex<()>,
}

/// What the host knows about one plugin file.
struct PluginEntry {
    status: PluginStatus,
    counts: Arc<Counts>,
    /// Size and mtime of the `.wasm` and `.toml` files last looked at.
    stamp: Stamp,
    /// The controller this file runs, by reconciler name.
    controller: Option<String>,
}

type FileStamp = Option<(u64, Option<SystemTime>)>;
type Stamp = (FileStamp, FileStamp);

fn stamp_of(path: &Path) -> Stamp {
    let one = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .filter(|m| m.is_file())
            .map(|m| (m.len(), m.modified().ok()))
    };
    (one(path), one(&plugins::PluginSettings::path_for(path)))
}

/// Run the garbage collector and the compactor while this host leads the
/// cluster, and stop them when it no longer does.
fn run_while_leader(cluster: &Cluster, api: Api) -> tokio::task::JoinHandle<()> {
    let mut leadership = cluster.leadership();
    tokio::spawn(async move {
        let mut running: Vec<tokio::task::JoinHandle<()>> = Vec::new();
        // Abort the singletons if this supervisor is aborted (shutdown).
        struct AbortOnDrop(Vec<tokio::task::JoinHandle<()>>);
        impl Drop for AbortOnDrop {
            fn drop(&mut self) {
                self.0.iter().for_each(|t| t.abort());
            }
        }
        loop {
            let leads = *leadership.borrow_and_update();
            if leads && running.is_empty() {
                tracing::info!("leading the cluster: running the garbage collector and compactor");
                running.push(api.start_garbage_collector());
                running.push(api.start_compactor(COMPACTION_INTERVAL, COMPACTION_KEEP_REVISIONS));
            } else if !leads && !running.is_empty() {
                tracing::info!("no longer leading the cluster");
                running.drain(..).for_each(|t| t.abort());
            }
            let guard = AbortOnDrop(std::mem::take(&mut running));
            let changed = leadership.changed().await;
            running = std::mem::take(&mut { guard }.0);
            if changed.is_err() {
                running.drain(..).for_each(|t| t.abort());
                return;
            }
        }
    })
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
            watch_plugins: true,
            runtime: RuntimeConfig::default(),
            controller: controller::Config::default(),
            per_plugin: std::collections::HashMap::new(),
            reconcile_threads: None,
            embedded_dir: None,
            etcd: None,
            etcd_backend: None,
            cluster: None,
        }
    }

    fn background_tasks(&self) -> std::sync::MutexGuard<'_, Vec<tokio::task::JoinHandle<()>>> {
        self.background.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The object API.
    pub fn api(&self) -> &Api {
        &self.shared.api
    }

    /// A typed client of this host's objects (see [`crate::client`]).
    pub fn client(&self) -> crate::Client {
        crate::Client::new(self.shared.api.clone())
    }

    /// This host's cluster membership, when it shares work with others.
    pub fn cluster(&self) -> Option<&Cluster> {
        self.shared.cluster.as_ref()
    }

    /// The Wasm runtime.
    pub fn runtime(&self) -> &Runtime {
        &self.shared.runtime
    }

    /// Register a reconciler's CustomResourceDefinitions (those whose kind is
    /// not known yet) and start its controller.
    pub async fn add_reconciler(&self, reconciler: Arc<dyn Reconciler>) -> Result<(), Error> {
        self.shared
            .register_definitions(reconciler.manifest())
            .await?;
        self.shared.start_controller(reconciler).await
    }

    /// Load every `*.wasm` of `dir` (and bring the running plugins of `dir`
    /// in line with it: see the module documentation). A file that fails is
    /// recorded as failed (see [`Host::plugins`]) and does not stop the
    /// others.
    pub async fn load_plugins_dir(&self, dir: &Path) -> Result<(), Error> {
        self.shared.sync_dir(dir).await
    }

    /// Every plugin file the host knows and its state.
    pub async fn plugins(&self) -> Vec<PluginStatus> {
        self.shared
            .plugins
            .lock()
            .await
            .values()
            .map(|entry| {
                let mut status = entry.status.clone();
                (status.reconciles, status.errors) = entry.counts.get();
                status
            })
            .collect()
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
            .filter(|c| {
                let m = c.manifest();
                m.reconciles.api_version == api_version && m.reconciles.kind == kind
            })
            .flat_map(|c| c.history(key))
            .collect()
    }

    /// Queue every object of every reconciled kind again (a resync):
    /// level-triggered reconcilers repair anything a missed event left behind.
    pub async fn resync(&self) {
        for controller in self.shared.controllers.lock().await.values() {
            controller.requeue_all();
        }
    }

    /// Stop watching plugins, stop every controller (in-flight reconciles
    /// finish), the reconcile threads and the informers.
    pub async fn shutdown(&self) {
        self.watcher
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        for task in std::mem::take(&mut *self.background_tasks()) {
            task.abort();
        }
        let _sync = self.shared.sync.lock().await;
        let controllers = std::mem::take(&mut *self.shared.controllers.lock().await);
        for (_, controller) in controllers {
            controller.shutdown().await;
        }
        self.shared.pool.shutdown().await;
        if let Some(cluster) = &self.shared.cluster {
            cluster.leave().await;
        }
        self.shared.informers.clear();
    }
}

/// The outcome of looking at one changed plugin file.
enum Looked {
    Gone,
    Loaded(LoadedFile),
    Failed(String),
}

impl Shared {
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
                Ok(_) => {
                    tracing::info!(plugin = %manifest.name, kind = %info.kind, "registered kind");
                }
                Err(api::Error::AlreadyExists { .. }) => {
                    // Another host (or a user) registered it first: use the
                    // stored definition, which is what everyone else uses.
                    let name = crate::object::meta::name(definition).to_owned();
                    let stored = self.api.get(&crd_kind, None, &name).await?;
                    self.api.register_kind_of(&stored);
                }
                Err(err) => return Err(err.into()),
            }
        }
        Ok(())
    }

    async fn start_controller(&self, reconciler: Arc<dyn Reconciler>) -> Result<(), Error> {
        let name = reconciler.manifest().name.clone();
        if self.controllers.lock().await.contains_key(&name) {
            return Err(Error::Duplicate(name));
        }
        let controller = Controller::start_on(
            self.api.clone(),
            self.informers.clone(),
            reconciler,
            self.per_plugin
                .get(&name)
                .unwrap_or(&self.controller_config)
                .clone(),
            self.cluster.clone(),
            self.pool.clone(),
        )
        .await?;
        self.controllers.lock().await.insert(name, controller);
        Ok(())
    }

    async fn stop_controller(&self, name: &str) {
        let controller = self.controllers.lock().await.remove(name);
        if let Some(controller) = controller {
            controller.shutdown().await;
            tracing::info!(plugin = %name, "controller stopped");
        }
    }

    /// Bring the plugins of `dir` in line with its files.
    async fn sync_dir(&self, dir: &Path) -> Result<(), Error> {
        let _sync = self.sync.lock().await;
        let files = plugins::wasm_files(dir).map_err(|source| Error::PluginsDir {
            path: dir.to_owned(),
            source,
        })?;
        let mut paths: BTreeSet<PathBuf> = files.into_iter().collect();
        {
            let known = self.plugins.lock().await;
            paths.extend(known.keys().filter(|p| p.parent() == Some(dir)).cloned());
        }
        // Look at every changed file first (compiling off the async threads)
        // and register every kind they bring, then start or swap controllers:
        // a plugin may own a kind another plugin defines.
        let mut looked = Vec::new();
        for path in paths {
            let stamp = stamp_of(&path);
            let unchanged = self
                .plugins
                .lock()
                .await
                .get(&path)
                .is_some_and(|e| e.stamp == stamp);
            if unchanged {
                continue;
            }
            let outcome = if stamp.0.is_none() {
                Looked::Gone
            } else {
                match plugins::load_file(&self.runtime, &path).await {
                    Ok(loaded) => {
                        let same = self.plugins.lock().await.get(&path).is_some_and(|e| {
                            e.controller.is_some()
                                && e.status.content_hash.as_deref()
                                    == Some(loaded.plugin.content_hash())
                                && stamp.1 == e.stamp.1
                        });
                        if same {
                            // Touched, or back to the running bytes.
                            if let Some(e) = self.plugins.lock().await.get_mut(&path) {
                                e.stamp = stamp;
                                e.status.last_error = None;
                            }
                            continue;
                        }
                        match self.register_definitions(loaded.plugin.manifest()).await {
                            Ok(()) => Looked::Loaded(loaded),
                            Err(err) => Looked::Failed(err.to_string()),
                        }
                    }
                    Err(plugins::LoadError::Unsettled(_)) => {
                        // Its write's own events bring us back.
                        tracing::debug!(path = %path.display(), "plugin file still being written");
                        continue;
                    }
                    Err(err) => Looked::Failed(err.to_string()),
                }
            };
            looked.push((path, stamp, outcome));
        }
        for (path, stamp, outcome) in looked {
            self.apply(path, stamp, outcome).await;
        }
        Ok(())
    }

    /// Act on one looked-at file.
    async fn apply(&self, path: PathBuf, stamp: Stamp, outcome: Looked) {
        // The entry stays listed (as it was) until its new state is known.
        let (running, counts) = {
            let plugins = self.plugins.lock().await;
            let existing = plugins.get(&path);
            (
                existing.and_then(|e| e.controller.clone()),
                existing.map(|e| e.counts.clone()).unwrap_or_default(),
            )
        };
        match outcome {
            Looked::Gone => {
                if let Some(name) = running {
                    self.stop_controller(&name).await;
                }
                self.plugins.lock().await.remove(&path);
                tracing::info!(path = %path.display(), "plugin file removed; its objects are left as they are");
            }
            Looked::Failed(err) => {
                tracing::error!(path = %path.display(), %err, "plugin failed to load");
                let mut plugins = self.plugins.lock().await;
                match plugins.get_mut(&path) {
                    Some(entry) if entry.controller.is_some() => {
                        tracing::warn!(path = %path.display(), "keeping the running version");
                        entry.status.last_error = Some(err);
                        entry.stamp = stamp;
                    }
                    _ => {
                        plugins.insert(
                            path.clone(),
                            PluginEntry {
                                status: failed_status(&path, err),
                                counts,
                                stamp,
                                controller: None,
                            },
                        );
                    }
                }
            }
            Looked::Loaded(loaded) => {
                let plugin = loaded.plugin;
                let manifest = plugin.manifest().clone();
                let reconciler: Arc<dyn Reconciler> =
                    Arc::new(Counted::new(plugin.clone(), counts.clone()));
                let mut swapped = false;
                if running.as_deref() == Some(manifest.name.as_str()) {
                    let controllers = self.controllers.lock().await;
                    if let Some(controller) = controllers.get(&manifest.name)
                        && controller.swap_reconciler(reconciler.clone()).is_ok()
                    {
                        controller.requeue_all();
                        swapped = true;
                    }
                }
                let result = if swapped {
                    tracing::info!(plugin = %manifest.name, version = %manifest.version, hash = %plugin.content_hash(), "plugin reloaded in place");
                    Ok(())
                } else {
                    if let Some(name) = &running {
                        self.stop_controller(name).await;
                    }
                    self.start_controller(reconciler).await.inspect(|()| {
                        tracing::info!(plugin = %manifest.name, version = %manifest.version, hash = %plugin.content_hash(), "plugin running");
                    })
                };
                let mut status = PluginStatus {
                    path: path.clone(),
                    name: manifest.name.clone(),
                    kind: Some(manifest.reconciles.to_string()),
                    version: Some(manifest.version.clone()),
                    content_hash: Some(plugin.content_hash().to_owned()),
                    loaded_at: SystemTime::now(),
                    state: PluginState::Running,
                    last_error: None,
                    reconciles: 0,
                    errors: 0,
                };
                let controller = match result {
                    Ok(()) => Some(manifest.name.clone()),
                    Err(err) => {
                        tracing::error!(plugin = %manifest.name, %err, "plugin failed to start");
                        status.state = PluginState::Failed(err.to_string());
                        None
                    }
                };
                self.plugins.lock().await.insert(
                    path,
                    PluginEntry {
                        status,
                        counts,
                        stamp,
                        controller,
                    },
                );
            }
        }
    }
}

fn failed_status(path: &Path, reason: String) -> PluginStatus {
    PluginStatus {
        path: path.to_owned(),
        name: path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
        kind: None,
        version: None,
        content_hash: None,
        loaded_at: SystemTime::now(),
        state: PluginState::Failed(reason),
        last_error: None,
        reconciles: 0,
        errors: 0,
    }
}

//! [`HostBuilder`]: the settings a [`Host`] starts with, and starting it.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::Mutex;

use crate::api::{self, Api};
#[cfg(feature = "etcd")]
use crate::cluster;
use crate::cluster::Cluster;
use crate::controller;
use crate::controller::pool::CallPool;
use crate::informer::Informers;
use crate::plugins::{self};
use crate::runtime::{Runtime, RuntimeConfig};
use crate::store::{Backend, MemoryBackend};
use crate::system;

use super::{
    CHECKPOINTS_DIR, COMPACTION_INTERVAL, COMPACTION_KEEP_REVISIONS, EVENT_EXPIRY_INTERVAL,
    EVENT_TTL, Error, Host, Shared, run_while_leader,
};

/// Builds a [`Host`].
///
/// ```no_run
/// # async fn example() -> Result<(), setpoint::manager::Error> {
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
    egress: crate::egress::EgressConfig,
    per_plugin: std::collections::HashMap<String, controller::Config>,
    reconcile_threads: Option<usize>,
    embedded_dir: Option<PathBuf>,
    checkpoints: Option<PathBuf>,
    event_ttl: std::time::Duration,
    #[cfg(feature = "etcd")]
    etcd: Option<crate::store::EtcdConfig>,
    #[cfg(feature = "etcd")]
    etcd_backend: Option<crate::store::EtcdBackend>,
    #[cfg(feature = "etcd")]
    cluster: Option<cluster::Config>,
}

impl HostBuilder {
    /// The defaults: an in-memory store, no plugins directory.
    pub(super) fn new() -> Self {
        Self {
            backend: None,
            plugins_dir: None,
            watch_plugins: true,
            runtime: RuntimeConfig::default(),
            controller: controller::Config::default(),
            egress: crate::egress::EgressConfig::default(),
            per_plugin: std::collections::HashMap::new(),
            event_ttl: EVENT_TTL,
            reconcile_threads: None,
            embedded_dir: None,
            checkpoints: None,
            #[cfg(feature = "etcd")]
            etcd: None,
            #[cfg(feature = "etcd")]
            etcd_backend: None,
            #[cfg(feature = "etcd")]
            cluster: None,
        }
    }

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

    /// Keep each plugin's controller checkpoint in `dir` (made when
    /// needed), so that a restart resumes instead of reconciling every
    /// object again (see [`controller::Checkpoint`]). The embedded store
    /// ([`embedded`](Self::embedded)) keeps them in its data directory's
    /// `checkpoints/` without being told; an embedder that opens the store
    /// itself names the directory here. Keep it with the store it belongs
    /// to: a checkpoint ahead of its store is not used, but one of another
    /// store at a lower revision cannot be told apart. Ignored in a cluster.
    ///
    /// ```
    /// use setpoint::Host;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let data = tempfile::tempdir()?;
    /// let store = setpoint::store::EmbeddedBackend::open(data.path())?;
    /// let host = Host::builder()
    ///     .backend(std::sync::Arc::new(store))
    ///     .checkpoints(data.path().join("checkpoints"))
    ///     .build()
    ///     .await?;
    /// host.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn checkpoints(mut self, dir: impl Into<PathBuf>) -> Self {
        self.checkpoints = Some(dir.into());
        self
    }

    /// An etcd cluster (feature `etcd`).
    #[cfg(feature = "etcd")]
    pub fn etcd(mut self, config: crate::store::EtcdConfig) -> Self {
        self.etcd = Some(config);
        self
    }

    /// Store objects in etcd through an existing connection (feature `etcd`).
    #[cfg(feature = "etcd")]
    pub fn etcd_backend(mut self, backend: crate::store::EtcdBackend) -> Self {
        self.etcd_backend = Some(backend);
        self
    }

    /// Share the work with the other hosts on the same etcd (see
    /// [`cluster`]): needs [`HostBuilder::etcd`] or
    /// [`HostBuilder::etcd_backend`].
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), setpoint::manager::Error> {
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
    #[cfg(feature = "etcd")]
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

    /// How long an Event is kept after it last happened. Default: an hour
    /// ([`EVENT_TTL`](super::EVENT_TTL)).
    pub fn event_ttl(mut self, ttl: std::time::Duration) -> Self {
        self.event_ttl = ttl;
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

    /// Settings of the external requests plugins ask for (timeouts, body
    /// cap, rounds, default rate and concurrency limits).
    pub fn egress(mut self, config: crate::egress::EgressConfig) -> Self {
        self.egress = config;
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
        #[cfg(feature = "etcd")]
        let etcd = match (self.etcd_backend, self.etcd) {
            (Some(backend), _) => Some(backend),
            (None, Some(config)) => Some(
                crate::store::EtcdBackend::connect(config)
                    .await
                    .map_err(api::Error::Store)?,
            ),
            (None, None) => None,
        };
        let mut opened_store = None;
        // Controllers keep their checkpoints beside the embedded store (a
        // cluster is on etcd, and its controllers keep none).
        let checkpoints = self.checkpoints.clone().or_else(|| {
            self.embedded_dir
                .as_ref()
                .map(|dir| dir.join(CHECKPOINTS_DIR))
        });
        #[cfg(feature = "etcd")]
        let checkpoints = checkpoints.filter(|_| self.cluster.is_none());
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
            let store = Arc::new(store);
            opened_store = Some(store.clone());
            store
        } else {
            #[cfg(feature = "etcd")]
            let on_etcd = etcd
                .as_ref()
                .map(|etcd| Arc::new(etcd.clone()) as Arc<dyn Backend>);
            #[cfg(not(feature = "etcd"))]
            let on_etcd: Option<Arc<dyn Backend>> = None;
            on_etcd
                .or(self.backend)
                .unwrap_or_else(|| Arc::new(MemoryBackend::new()))
        };
        // Timed for /metrics (setpoint_store_request_duration_seconds).
        let api = Api::open(Arc::new(crate::store::Metered::new(backend))).await?;
        let runtime = Runtime::new(self.runtime)?;
        #[cfg(not(feature = "etcd"))]
        let cluster: Option<Cluster> = None;
        #[cfg(feature = "etcd")]
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
        let gc = system::GarbageCollector::new(api.clone(), system::GcConfig::default());
        let mut background = vec![system::definitions::follow(&api)];
        match &cluster {
            // Cluster-wide singletons run on the leader only.
            Some(cluster) => background.push(run_while_leader(
                cluster,
                api.clone(),
                gc.clone(),
                self.event_ttl,
            )),
            None => {
                background.push(system::compactor::start(
                    &api,
                    COMPACTION_INTERVAL,
                    COMPACTION_KEEP_REVISIONS,
                ));
            }
        }
        let host = Host {
            shared: Arc::new(Shared {
                informers: Informers::new(api.clone()),
                egress: crate::egress::Egress::new(api.clone(), self.egress),
                api,
                gc,
                cluster,
                runtime,
                controller_config: self.controller,
                per_plugin: self.per_plugin,
                checkpoints,
                pool: CallPool::new(
                    self.reconcile_threads
                        .unwrap_or_else(controller::pool::default_threads),
                ),
                controllers: Mutex::default(),
                plugins: Mutex::default(),
                claims: Default::default(),
                sync: Mutex::default(),
                followed: Default::default(),
            }),
            background: std::sync::Mutex::new(background),
            watcher: std::sync::Mutex::default(),
            opened_store: std::sync::Mutex::new(opened_store),
        };
        super::grants::follow(&host.shared);
        if let Some(dir) = self.plugins_dir {
            if self.watch_plugins {
                // Watch before the first scan, so no change slips between.
                let (watcher, mut changes) = plugins::dir_watch::watch_dir(&dir)?;
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
        // The collector lists every object, and the first expiry may delete
        // thousands of Events: both wait until the plugins' controllers
        // have filled their informers, so that they do not slow the start
        // (docs/benchmarks/scale.md, "Restarts without a storm").
        if host.shared.cluster.is_none() {
            let api = host.shared.api.clone();
            let mut tasks = host.background_tasks();
            tasks.push(host.shared.gc.start());
            tasks.push(system::event_expiry::start(
                &api,
                EVENT_EXPIRY_INTERVAL,
                self.event_ttl,
            ));
        }
        Ok(host)
    }
}

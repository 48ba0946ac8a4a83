//! The manager (controller-runtime's word): `Host` and `HostBuilder` wire
//! store → api → watch → informers → system controllers → plugins'
//! controllers, start them, and shut them down. The builder is in
//! `builder.rs`; keeping the running controllers in step with the plugins
//! directory (hot reload) in `reload.rs`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::Mutex;

use crate::api::{self, Api};
use crate::cluster::{self, Cluster};
use crate::controller::pool::CallPool;
use crate::controller::{self, Controller, Reconciler};
use crate::informer::Informers;
use crate::plugins;
use crate::runtime::{self, Runtime};
use crate::system;

mod builder;
mod claims;
mod grants;
mod inspect;
mod ownership;
mod reload;
mod survey;

pub use builder::HostBuilder;
pub use claims::MAX_DEFINITIONS;
use reload::PluginEntry;
pub use survey::{Census, Flagged, Holdings, KindCount, STALLED_AFTER, ready_condition};

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
    /// Another plugin already reconciles the kind (one reconciler per kind).
    #[error(
        "plugin {plugin:?} reconciles {kind}, which is already reconciled by plugin {owner:?}; one plugin per kind (the first claimant keeps it; a PluginGrant's spec.kinds pins it to a plugin)"
    )]
    KindTaken {
        /// The refused plugin.
        plugin: String,
        /// The kind it asked for.
        kind: String,
        /// The plugin that reconciles it.
        owner: String,
    },
    /// The operator pinned the kind to another plugin (its `PluginGrant`'s
    /// `spec.kinds`).
    #[error(
        "plugin {plugin:?} reconciles {kind}, which the operator pinned to plugin {owner:?} (its PluginGrant's spec.kinds)"
    )]
    KindPinned {
        /// The refused plugin.
        plugin: String,
        /// The kind it asked for.
        kind: String,
        /// The plugin it is pinned to.
        owner: String,
    },
    /// Another plugin owns a definition of that name, and this one differs.
    #[error(
        "plugin {plugin:?} brings a definition of {definition} that differs from the one plugin {owner:?} brought; a definition has one owner"
    )]
    DefinitionTaken {
        /// The refused plugin.
        plugin: String,
        /// The definition's name (`plural.group`).
        definition: String,
        /// The plugin that owns it.
        owner: String,
    },
    /// A plugin brings more definitions than a plugin may.
    #[error(
        "plugin {plugin:?} brings {count} definitions; at most {max} are accepted",
        max = claims::MAX_DEFINITIONS
    )]
    TooManyDefinitions {
        /// The refused plugin.
        plugin: String,
        /// How many it brings.
        count: usize,
    },
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
    Watch(#[from] plugins::dir_watch::WatchError),
    /// Joining the cluster failed.
    #[error(transparent)]
    Cluster(#[from] cluster::Error),
}

impl Error {
    /// The plugin whose claim refused this one, for a refusal by claims:
    /// the refused plugin is tried again when that plugin goes.
    pub fn claimant(&self) -> Option<&str> {
        match self {
            Error::KindTaken { owner, .. }
            | Error::KindPinned { owner, .. }
            | Error::DefinitionTaken { owner, .. } => Some(owner),
            _ => None,
        }
    }
}

/// A running Setpoint host.
pub struct Host {
    shared: Arc<Shared>,
    /// The garbage collector, the compactor and the plugins watcher task.
    background: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    watcher: std::sync::Mutex<Option<plugins::dir_watch::DirWatcher>>,
    /// The embedded store the builder opened (`HostBuilder::embedded`),
    /// closed by [`Host::shutdown`]; a store the caller passed in is the
    /// caller's to close.
    opened_store: std::sync::Mutex<Option<Arc<crate::store::EmbeddedBackend>>>,
}

/// What the host and its plugins-directory task share.
struct Shared {
    api: Api,
    /// The garbage collector, for its health (it runs among `background`).
    gc: system::GarbageCollector,
    cluster: Option<Cluster>,
    informers: Informers,
    runtime: Runtime,
    /// Performs every plugin's external requests.
    egress: crate::egress::Egress,
    controller_config: controller::Config,
    per_plugin: std::collections::HashMap<String, controller::Config>,
    /// Where each plugin's controller keeps its checkpoint (a host on the
    /// embedded store, not in a cluster): `DATA/checkpoints/`.
    checkpoints: Option<PathBuf>,
    /// Runs every controller's reconciler calls.
    pool: CallPool,
    controllers: Mutex<BTreeMap<String, Controller>>,
    plugins: Mutex<BTreeMap<PathBuf, PluginEntry>>,
    /// Which plugin reconciles each kind and owns each definition.
    claims: std::sync::Mutex<claims::Claims>,
    /// One directory sync at a time.
    sync: Mutex<()>,
    /// The informers of `PluginGrant` and `Secret` that `grants` follows
    /// (an informer nobody holds stops).
    followed: std::sync::Mutex<Vec<crate::informer::Informer>>,
}

/// Run the garbage collector and the compactor while this host leads the
/// cluster, and stop them when it no longer does.
fn run_while_leader(
    cluster: &Cluster,
    api: Api,
    gc: system::GarbageCollector,
    event_ttl: std::time::Duration,
) -> tokio::task::JoinHandle<()> {
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
                running.push(gc.start());
                running.push(system::compactor::start(
                    &api,
                    COMPACTION_INTERVAL,
                    COMPACTION_KEEP_REVISIONS,
                ));
                running.push(system::event_expiry::start(
                    &api,
                    EVENT_EXPIRY_INTERVAL,
                    event_ttl,
                ));
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

/// The directory inside the embedded store's data directory where the
/// plugins' controllers keep their checkpoints.
pub const CHECKPOINTS_DIR: &str = "checkpoints";

/// A plugin's checkpoint file: its name where that is a plain file name,
/// else its name's bytes in hex (plugin names are the manifests', not
/// checked to be file names).
fn checkpoint_file(plugin: &str) -> String {
    let plain = !plugin.is_empty()
        && !plugin.starts_with('.')
        && plugin
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    match plain {
        true => plugin.to_owned(),
        false => format!(
            "x-{}",
            plugin
                .bytes()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        ),
    }
}

/// How often old revisions are compacted (as Kubernetes does).
pub const COMPACTION_INTERVAL: std::time::Duration = std::time::Duration::from_secs(300);

/// How long an Event is kept after it last happened (kube-apiserver's
/// `--event-ttl`); `HostBuilder::event_ttl` changes it.
pub const EVENT_TTL: std::time::Duration = std::time::Duration::from_secs(3600);

/// How often expired Events are looked for.
pub const EVENT_EXPIRY_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// How many revisions of history compaction keeps.
pub const COMPACTION_KEEP_REVISIONS: i64 = 10_000;

impl Host {
    /// Start building a host.
    pub fn builder() -> HostBuilder {
        HostBuilder::new()
    }

    fn background_tasks(&self) -> std::sync::MutexGuard<'_, Vec<tokio::task::JoinHandle<()>>> {
        self.background.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What applying `request` would do now: the object changes, the
    /// controllers' reaction through every level of children, the garbage
    /// collector's, and the external writes provider plugins would send,
    /// planned over an in-memory overlay of the store with the running
    /// plugins (see [`crate::plan`]). Nothing is written and no external
    /// write is sent.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
    /// use serde_json::json;
    /// use setpoint::Host;
    /// use setpoint::plan::{Action, Document, Request};
    ///
    /// let host = Host::builder().in_memory().build().await.unwrap();
    /// let before = host.api().current_revision().await.unwrap();
    /// let event = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "hello"}});
    /// let plan = host
    ///     .plan(Request::Apply(vec![Document { origin: "example".into(), object: event }]))
    ///     .await
    ///     .unwrap();
    /// assert_eq!(plan.changes_of("Event", Action::Create).len(), 1);
    /// assert_eq!(host.api().current_revision().await.unwrap(), before, "nothing written");
    /// host.shutdown().await;
    /// # });
    /// ```
    pub async fn plan(
        &self,
        request: crate::plan::Request,
    ) -> Result<crate::plan::Plan, crate::plan::Error> {
        let targets = self
            .shared
            .controllers
            .lock()
            .await
            .values()
            .map(Controller::plan_target)
            .collect();
        let context = crate::plan::Context {
            api: self.shared.api.clone(),
            informers: self.shared.informers.clone(),
            egress: self.shared.egress.read_only(),
            pool: self.shared.pool.clone(),
            targets,
        };
        crate::plan::run(&context, request).await
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

    /// The egress that performs plugins' external requests (its metrics
    /// and each object's recent requests).
    pub fn egress(&self) -> &crate::egress::Egress {
        &self.shared.egress
    }

    /// Register a reconciler's CustomResourceDefinitions (those whose kind is
    /// not known yet) and start its controller.
    ///
    /// Refused when another reconciler already reconciles its kind
    /// ([`Error::KindTaken`]), owns a definition of the same name that
    /// differs ([`Error::DefinitionTaken`]), or when it brings more than
    /// [`MAX_DEFINITIONS`] definitions.
    pub async fn add_reconciler(&self, reconciler: Arc<dyn Reconciler>) -> Result<(), Error> {
        let _sync = self.shared.sync.lock().await;
        let manifest = reconciler.manifest().clone();
        if self
            .shared
            .controllers
            .lock()
            .await
            .contains_key(&manifest.name)
        {
            return Err(Error::Duplicate(manifest.name));
        }
        let pins = ownership::pins(&self.shared.api).await;
        self.shared.claims().set_pins(pins);
        self.shared.claim(&manifest, None).await?;
        let started = self.shared.start_controller(reconciler, None).await;
        match &started {
            Ok(()) => ownership::record_claim(&self.shared.api, &manifest).await,
            Err(_) => self.shared.release(&manifest.name).await,
        }
        started
    }

    /// Load every `*.wasm` of `dir` (and bring the running plugins of `dir`
    /// in line with it: see the module documentation). A file that fails is
    /// recorded as failed (see [`Host::plugins`]) and does not stop the
    /// others.
    pub async fn load_plugins_dir(&self, dir: &Path) -> Result<(), Error> {
        self.shared.sync_dir(dir).await
    }

    /// Queue every object of every reconciled kind again (a resync):
    /// level-triggered reconcilers repair anything a missed event left behind.
    pub async fn resync(&self) {
        for controller in self.shared.controllers.lock().await.values() {
            controller.requeue_all();
        }
    }

    /// Stop watching plugins, stop every controller (in-flight reconciles
    /// finish), the reconcile threads and the informers; and close the
    /// embedded store if the builder opened it (`HostBuilder::embedded`):
    /// its final checkpoint is made and its directory lock released, so the
    /// same directory can be opened again at once.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
    /// let dir = tempfile::tempdir().unwrap();
    /// let host = setpoint::Host::builder().embedded(dir.path()).build().await.unwrap();
    /// host.shutdown().await;
    /// let again = setpoint::Host::builder().embedded(dir.path()).build().await;
    /// assert!(again.is_ok(), "the directory was released");
    /// again.unwrap().shutdown().await;
    /// # });
    /// ```
    pub async fn shutdown(&self) {
        self.watcher
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        for task in std::mem::take(&mut *self.background_tasks()) {
            task.abort();
        }
        tracing::debug!("shutdown: waiting for a plugin sync in progress");
        let _sync = self.shared.sync.lock().await;
        let controllers = std::mem::take(&mut *self.shared.controllers.lock().await);
        for (name, controller) in controllers {
            tracing::debug!(plugin = %name, "shutdown: stopping the controller");
            controller.shutdown().await;
        }
        tracing::debug!("shutdown: stopping the plugin pool");
        self.shared.pool.shutdown().await;
        tracing::debug!("shutdown: controllers stopped");
        if let Some(cluster) = &self.shared.cluster {
            cluster.leave().await;
        }
        self.shared
            .followed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.shared.informers.clear();
        // Before the caller closes the store: a closed store would read as
        // a broken watch, logged and retried.
        self.api().hub().stop();
        let opened = self
            .opened_store
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(store) = opened
            && let Err(err) = store.close().await
        {
            tracing::warn!(%err, "closing the embedded store failed");
        }
    }
}

impl Shared {
    fn claims(&self) -> std::sync::MutexGuard<'_, claims::Claims> {
        self.claims.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Check that `manifest` may claim its kind and definitions (see
    /// `claims`), register its definitions and record its claims.
    /// `replacing` is the plugin it replaces, whose claims it inherits. The
    /// pins in force are set on the claims by the caller (`set_pins`).
    async fn claim(
        &self,
        manifest: &controller::Manifest,
        replacing: Option<&str>,
    ) -> Result<(), Error> {
        let allowed = self.claims().check(manifest, replacing)?;
        for holder in &allowed.evict {
            self.evict(holder, manifest).await;
        }
        ownership::apply_definitions(&self.api, manifest, &allowed.owns).await?;
        let orphaned = self.claims().claim(manifest);
        self.remove_orphans(orphaned).await;
        Ok(())
    }

    /// Stop the running plugin `holder` and refuse it: what it held is
    /// pinned to `by`'s plugin. It is tried again when the pin goes.
    async fn evict(&self, holder: &str, by: &controller::Manifest) {
        tracing::warn!(plugin = %holder, pinned_to = %by.name, "plugin evicted: the operator pinned what it holds to another plugin");
        self.stop_controller(holder).await;
        // What it owned passes to `by`, which claims next: no orphans.
        self.claims().release(holder);
        let mut plugins = self.plugins.lock().await;
        if let Some(entry) = plugins
            .values_mut()
            .find(|e| e.controller.as_deref() == Some(holder))
        {
            entry.evicted(Error::KindPinned {
                plugin: holder.to_owned(),
                kind: by.reconciles.to_string(),
                owner: by.name.clone(),
            });
        }
    }

    /// Forget `plugin`'s claims, and deal with the definitions nobody
    /// carries any more.
    async fn release(&self, plugin: &str) {
        let orphaned = self.claims().release(plugin);
        self.remove_orphans(orphaned).await;
    }

    /// The rule for a definition whose owner went and that no running
    /// plugin carries: deleted when no object of its kind is stored (a
    /// plugin's kinds go with it), kept otherwise (objects are data; the
    /// user decides). A host in a cluster keeps it: other hosts may still
    /// run the plugin.
    async fn remove_orphans(&self, definitions: Vec<String>) {
        if self.cluster.is_some() {
            for name in definitions {
                tracing::info!(definition = %name, "definition kept: other hosts of the cluster may still run a plugin that brings it");
            }
            return;
        }
        let crd_kind = self
            .api
            .kinds()
            .by_plural(api::kinds::CRD_GROUP, "customresourcedefinitions")
            .expect("built-in kind");
        for name in definitions {
            let Ok(stored) = self.api.get(&crd_kind, None, &name).await else {
                continue;
            };
            let Ok(info) = api::kinds::kind_from_crd(&stored) else {
                continue;
            };
            let Some(kind) = self.api.kinds().by_plural(&info.group, &info.plural) else {
                continue;
            };
            let options = api::ListOptions {
                limit: 1,
                ..Default::default()
            };
            match self.api.list(&kind, &options).await {
                Ok(list) if list.items.is_empty() => {
                    match self
                        .api
                        .delete(&crd_kind, None, &name, &api::DeleteOptions::default())
                        .await
                    {
                        Ok(_) => {
                            tracing::info!(definition = %name, "definition removed with the last plugin that brought it")
                        }
                        Err(err) => {
                            tracing::warn!(definition = %name, %err, "could not remove a definition no plugin brings any more")
                        }
                    }
                }
                Ok(_) => {
                    tracing::info!(definition = %name, "definition kept: no plugin brings it any more, but objects of its kind are stored")
                }
                Err(err) => {
                    tracing::warn!(definition = %name, %err, "could not list the objects of a definition no plugin brings any more")
                }
            }
        }
    }

    /// Start a controller for `reconciler`, counting into `tally` if given.
    async fn start_controller(
        &self,
        reconciler: Arc<dyn Reconciler>,
        tally: Option<controller::Tally>,
    ) -> Result<(), Error> {
        let name = reconciler.manifest().name.clone();
        if self.controllers.lock().await.contains_key(&name) {
            return Err(Error::Duplicate(name));
        }
        let mut config = self
            .per_plugin
            .get(&name)
            .unwrap_or(&self.controller_config)
            .clone();
        config.egress.get_or_insert_with(|| self.egress.clone());
        if config.checkpoint.is_none()
            && let Some(dir) = &self.checkpoints
        {
            config.checkpoint = Some(controller::Checkpoint::at(dir.join(checkpoint_file(&name))));
        }
        if tally.is_some() {
            config.tally = tally;
        }
        let controller = Controller::start_on(
            self.api.clone(),
            self.informers.clone(),
            reconciler,
            config,
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
}

//! Keeping the running controllers in step with the plugins directory
//! (hot reload).
//!
//! # What a plugin file change does
//!
//! The directory watcher ([`plugins::dir_watch`]) only says "look again"; the
//! host then compares every `*.wasm` file (and its `NAME.toml` settings) with
//! what it runs, by size and modification time, then by content hash:
//!
//! 1. A new or changed file is read (a file still being written is skipped
//!    until its write settles), compiled and asked for its manifest on a
//!    blocking thread, while the old version keeps reconciling.
//! 2. If that fails, or the plugin claims a kind or a definition another
//!    plugin has (`claims`: one reconciler per kind, one owner per
//!    definition), the old version keeps running and the failure is
//!    reported as the file's `last_error` (or as `Failed` when nothing of
//!    it runs yet).
//! 3. If it reconciles and owns the same kinds as the running version, the
//!    new version is swapped into the running controller: reconciles in
//!    flight finish on the old version, queued keys stay queued, and every
//!    object of the kind is queued again so the new logic applies to all.
//! 4. If its name or kinds changed, the old controller stops (in-flight
//!    reconciles finish) and a new one starts.
//! 5. A removed file's controller stops; its objects are left alone. The
//!    definitions it owned pass to another plugin that carries them, or
//!    are removed when no object of their kind is stored (`claims`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use crate::controller::{self, Reconciler};
use crate::plugins::{self, LoadedFile, PluginState, PluginStatus};

use super::{Error, Shared, claims, ownership};

/// What the host knows about one plugin file.
pub(super) struct PluginEntry {
    pub(super) status: PluginStatus,
    /// This file's reconciles, kept across its reloads and handed to each
    /// controller it runs.
    pub(super) tally: controller::Tally,
    /// Size and mtime of the `.wasm` and `.toml` files last looked at.
    stamp: Stamp,
    /// The controller this file runs, by reconciler name.
    pub(super) controller: Option<String>,
    /// The plugin whose claim refused this file's plugin, if that is why
    /// it does not run: it is tried again as soon as that plugin goes.
    pub(super) refused_by: Option<String>,
    /// The per-call limits its plugin runs under (none when it failed to load).
    pub(super) limits: Option<crate::runtime::Limits>,
}

impl PluginEntry {
    /// Its plugin was stopped and refused because of `why` (a pin).
    pub(super) fn evicted(&mut self, why: Error) {
        self.refused_by = why.claimant().map(str::to_owned);
        self.status.state = PluginState::Failed(why.to_string());
        self.status.loaded_at = SystemTime::now();
        self.controller = None;
        // Looked at again by the next pass, which the pin may let in.
        self.stamp = RETRY_STAMP;
    }
}

/// A stamp no file has: the entry is looked at again by the next pass.
const RETRY_STAMP: Stamp = (Some((u64::MAX, None)), None);

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

/// The outcome of looking at one changed plugin file.
enum Looked {
    Gone,
    Loaded(LoadedFile),
    /// Why, and the plugin whose claim refused it, if that is why.
    Failed(String, Option<String>),
}

impl Shared {
    /// Bring the plugins of `dir` in line with its files. A plugin refused
    /// because of another's claim is tried again, in the same call, once
    /// that other plugin no longer runs (removed, or evicted by a pin).
    pub(super) async fn sync_dir(&self, dir: &Path) -> Result<(), Error> {
        let _sync = self.sync.lock().await;
        self.sync_dirs(&[dir.to_owned()]).await
    }

    /// Try again every plugin refused because of another's claim (the
    /// operator's pins changed).
    pub(super) async fn retry_refused(&self) -> Result<(), Error> {
        let _sync = self.sync.lock().await;
        let dirs: BTreeSet<PathBuf> = {
            let mut plugins = self.plugins.lock().await;
            plugins
                .iter_mut()
                .filter(|(_, e)| e.refused_by.is_some())
                .filter_map(|(path, e)| {
                    e.stamp = RETRY_STAMP;
                    path.parent().map(Path::to_owned)
                })
                .collect()
        };
        let dirs: Vec<PathBuf> = dirs.into_iter().collect();
        self.sync_dirs(&dirs).await
    }

    /// [`Shared::sync_dir`] for each of `dirs`, the sync lock held, until
    /// no refusal is left whose claimant went.
    async fn sync_dirs(&self, dirs: &[PathBuf]) -> Result<(), Error> {
        // Each round settles at least one claimant's going; a few suffice.
        for _ in 0..4 {
            for dir in dirs {
                self.sync_pass(dir).await?;
            }
            let running: BTreeSet<String> = self.controllers.lock().await.keys().cloned().collect();
            let mut again = false;
            for entry in self.plugins.lock().await.values_mut() {
                if entry
                    .refused_by
                    .as_ref()
                    .is_some_and(|holder| !running.contains(holder))
                {
                    entry.stamp = RETRY_STAMP;
                    again = true;
                }
            }
            if !again {
                break;
            }
        }
        Ok(())
    }

    /// One look at the files of `dir` (the sync lock held).
    async fn sync_pass(&self, dir: &Path) -> Result<(), Error> {
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
                        Looked::Loaded(loaded)
                    }
                    Err(plugins::LoadError::Unsettled(_)) => {
                        // Its write's own events bring us back.
                        tracing::debug!(path = %path.display(), "plugin file still being written");
                        continue;
                    }
                    Err(err) => Looked::Failed(err.to_string(), None),
                }
            };
            looked.push((path, stamp, outcome));
        }
        // Removed files give up their claims first; then the plugins the
        // store records as claimants or the operator pinned (`ownership`),
        // then the rest by file name, except those that yield to another
        // loaded with them (`claims`), so squatting on another plugin's kind
        // or definition never wins by the file's name.
        // Read once a pass; every claim of the pass checks against them.
        let pins = ownership::pins(&self.api).await;
        self.claims().set_pins(pins.clone());
        let mut recorded = std::collections::HashSet::new();
        for (_, _, outcome) in &looked {
            if let Looked::Loaded(l) = outcome {
                let manifest = l.plugin.manifest();
                let pinned = pins.get(&ownership::kind_key(manifest)) == Some(&manifest.name);
                if pinned || ownership::holds_recorded_claim(&self.api, manifest).await {
                    recorded.insert(manifest.name.clone());
                }
            }
        }
        let order: Vec<u8> = {
            let manifests: Vec<&controller::Manifest> = looked
                .iter()
                .filter_map(|(_, _, outcome)| match outcome {
                    Looked::Loaded(l) => Some(l.plugin.manifest()),
                    _ => None,
                })
                .collect();
            looked
                .iter()
                .map(|(_, _, outcome)| match outcome {
                    Looked::Gone => 0,
                    Looked::Loaded(l) if recorded.contains(&l.plugin.manifest().name) => 1,
                    Looked::Loaded(l) if claims::yields(l.plugin.manifest(), &manifests) => 3,
                    Looked::Loaded(_) => 2,
                    Looked::Failed(..) => 4,
                })
                .collect()
        };
        let mut ordered: Vec<(u8, _)> = order.into_iter().zip(looked).collect();
        ordered.sort_by_key(|(rank, _)| *rank);
        let looked = ordered.into_iter().map(|(_, l)| l);
        let mut claimed = Vec::with_capacity(looked.len());
        let mut names = std::collections::HashSet::new();
        for (path, stamp, mut outcome) in looked {
            let running = self
                .plugins
                .lock()
                .await
                .get(&path)
                .and_then(|e| e.controller.clone());
            match &outcome {
                Looked::Gone => {
                    self.apply(path, stamp, outcome).await;
                    continue;
                }
                Looked::Loaded(loaded) => {
                    let manifest = loaded.plugin.manifest();
                    let taken = running.as_deref() != Some(manifest.name.as_str())
                        && (names.contains(&manifest.name)
                            || self.controllers.lock().await.contains_key(&manifest.name));
                    let result = if taken {
                        Err(Error::Duplicate(manifest.name.clone()))
                    } else {
                        self.claim(manifest, running.as_deref()).await
                    };
                    match result {
                        Ok(()) => {
                            names.insert(manifest.name.clone());
                        }
                        Err(err) => {
                            let refused_by = err.claimant().map(str::to_owned);
                            outcome = Looked::Failed(err.to_string(), refused_by);
                        }
                    }
                }
                Looked::Failed(..) => {}
            }
            claimed.push((path, stamp, outcome));
        }
        let mut started = Vec::new();
        for (path, stamp, outcome) in claimed {
            if let Looked::Loaded(loaded) = &outcome {
                started.push(loaded.plugin.manifest().clone());
            }
            self.apply(path, stamp, outcome).await;
        }
        // Recorded once every plugin of the pass registered its
        // definitions: a plugin may reconcile a kind another one defines.
        let running = self
            .controllers
            .lock()
            .await
            .keys()
            .cloned()
            .collect::<BTreeSet<_>>();
        for manifest in started.iter().filter(|m| running.contains(&m.name)) {
            ownership::record_claim(&self.api, manifest).await;
        }
        Ok(())
    }

    /// Act on one looked-at file.
    async fn apply(&self, path: PathBuf, stamp: Stamp, outcome: Looked) {
        // The entry stays listed (as it was) until its new state is known.
        let (running, tally) = {
            let plugins = self.plugins.lock().await;
            let existing = plugins.get(&path);
            (
                existing.and_then(|e| e.controller.clone()),
                existing.map(|e| e.tally.clone()).unwrap_or_default(),
            )
        };
        match outcome {
            Looked::Gone => {
                if let Some(name) = running {
                    self.stop_controller(&name).await;
                    self.release(&name).await;
                }
                self.plugins.lock().await.remove(&path);
                tracing::info!(path = %path.display(), "plugin file removed; its objects are left as they are");
            }
            Looked::Failed(err, refused_by) => {
                tracing::error!(path = %path.display(), %err, "plugin failed to load");
                let mut plugins = self.plugins.lock().await;
                match plugins.get_mut(&path) {
                    Some(entry) if entry.controller.is_some() => {
                        tracing::warn!(path = %path.display(), "keeping the running version");
                        entry.status.last_error = Some(err);
                        entry.stamp = stamp;
                        entry.refused_by = refused_by;
                    }
                    _ => {
                        plugins.insert(
                            path.clone(),
                            PluginEntry {
                                status: failed_status(&path, err),
                                tally,
                                stamp,
                                controller: None,
                                refused_by,
                                limits: None,
                            },
                        );
                    }
                }
            }
            Looked::Loaded(loaded) => {
                let plugin = loaded.plugin;
                let manifest = plugin.manifest().clone();
                let reconciler: Arc<dyn Reconciler> = plugin.clone();
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
                        if name != &manifest.name {
                            self.release(name).await;
                        }
                    }
                    self.start_controller(reconciler, Some(tally.clone()))
                        .await
                        .inspect(|()| {
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
                    contested: Vec::new(),
                };
                let controller = match result {
                    Ok(()) => Some(manifest.name.clone()),
                    Err(err) => {
                        tracing::error!(plugin = %manifest.name, %err, "plugin failed to start");
                        status.state = PluginState::Failed(err.to_string());
                        self.release(&manifest.name).await;
                        None
                    }
                };
                self.plugins.lock().await.insert(
                    path,
                    PluginEntry {
                        status,
                        tally,
                        stamp,
                        controller,
                        refused_by: None,
                        limits: Some(plugin.limits().clone()),
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
        contested: Vec::new(),
    }
}

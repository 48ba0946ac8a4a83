//! The plugins directory: what the host knows about each `*.wasm` file in it
//! ([`PluginStatus`]), loading one file off the async threads
//! ([`load_file`]), per-plugin settings ([`settings`]) and the directory
//! watcher that drives hot reload ([`dir_watch`]). The manager
//! (`manager/reload.rs`) decides what a loaded file means for the running
//! controllers, and keeps each file's reconcile tally across its reloads.

pub mod dir_watch;
pub mod settings;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

pub use settings::PluginSettings;

use crate::runtime::{Runtime, WasmPlugin};

/// What became of one plugin file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginState {
    /// Loaded and reconciling.
    Running,
    /// Could not be loaded or started; nothing of it runs.
    Failed(String),
}

/// One plugin file and its state.
#[derive(Debug, Clone)]
pub struct PluginStatus {
    /// The file.
    pub path: PathBuf,
    /// The plugin's name (the file stem until the manifest is read).
    pub name: String,
    /// The reconciled kind, once known.
    pub kind: Option<String>,
    /// The plugin's version, once known.
    pub version: Option<String>,
    /// sha256 of the running version's bytes, once read.
    pub content_hash: Option<String>,
    /// When the running version was loaded (or the failure happened).
    pub loaded_at: SystemTime,
    /// Running or failed.
    pub state: PluginState,
    /// The last replacement that failed to load while an older version keeps
    /// running (cleared by the next successful load).
    pub last_error: Option<String>,
    /// Reconciles so far, across reloads of this file (see
    /// [`Tally`](crate::controller::Tally)).
    pub reconciles: u64,
    /// Of those, how many failed: the call itself, or applying its response
    /// (refused, a write that failed other than by a conflict, a child that
    /// clashed).
    pub errors: u64,
    /// What other plugins refused because this one holds it claim too:
    /// one line each (a contested kind or definition; a `PluginGrant`'s
    /// `spec.kinds` settles it).
    pub contested: Vec<String>,
}

/// The `*.wasm` files of a directory, sorted by name.
pub fn wasm_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| is_plugin_file(p) && p.is_file())
        .collect();
    files.sort();
    Ok(files)
}

/// Whether a path names a plugin file (`*.wasm`, not hidden: editors and
/// `cp --backup` write hidden temporaries beside the real file).
pub fn is_plugin_file(path: &Path) -> bool {
    path.extension().is_some_and(|x| x == "wasm")
        && path
            .file_name()
            .is_some_and(|n| !n.to_string_lossy().starts_with('.'))
}

/// A plugin file read from disk, settled and compiled.
pub struct LoadedFile {
    /// The plugin, ready to reconcile.
    pub plugin: Arc<WasmPlugin>,
    /// The settings it was loaded with.
    pub settings: PluginSettings,
}

/// Why a plugin file could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file could not be read (or is gone).
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file changed while it was read: a write is still going on.
    #[error("{0} is still being written")]
    Unsettled(PathBuf),
    /// The settings file is invalid.
    #[error(transparent)]
    Settings(#[from] settings::SettingsError),
    /// Compiling, linking or asking for the manifest failed.
    #[error(transparent)]
    Runtime(#[from] crate::runtime::Error),
}

/// Read a plugin file and its settings, and compile it on a blocking thread.
///
/// A file whose size or modification time changes while it is read is
/// refused as [`LoadError::Unsettled`], so a half-written file is never
/// mistaken for a broken plugin; the write's own events trigger another
/// attempt.
pub async fn load_file(runtime: &Runtime, path: &Path) -> Result<LoadedFile, LoadError> {
    let runtime = runtime.clone();
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        let read_error = |source| LoadError::Read {
            path: path.clone(),
            source,
        };
        let stamp = |p: &Path| std::fs::metadata(p).map(|m| (m.len(), m.modified().ok()));
        let before = stamp(&path).map_err(read_error)?;
        let bytes = std::fs::read(&path).map_err(read_error)?;
        let after = stamp(&path).map_err(read_error)?;
        if before != after || after.0 != bytes.len() as u64 {
            return Err(LoadError::Unsettled(path));
        }
        let settings = PluginSettings::read_for(&path)?;
        let limits = settings.apply(runtime.limits());
        let plugin = runtime.load(&bytes, Some(limits))?;
        Ok(LoadedFile {
            plugin: Arc::new(plugin),
            settings,
        })
    })
    .await
    .unwrap_or_else(|e| {
        Err(LoadError::Runtime(crate::runtime::Error::Engine(
            e.to_string(),
        )))
    })
}

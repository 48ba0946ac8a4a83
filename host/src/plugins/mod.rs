//! The plugins directory: every `*.wasm` file in it is compiled, asked for
//! its manifest, has its CustomResourceDefinitions registered and gets a
//! controller. A file that fails to load is reported and skipped; the others
//! still run.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use crate::runtime::{Runtime, WasmPlugin};

/// What became of one plugin file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginState {
    /// Loaded and reconciling.
    Running,
    /// Could not be loaded or started.
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
    /// sha256 of the file, once read.
    pub content_hash: Option<String>,
    /// When it was loaded.
    pub loaded_at: SystemTime,
    /// Running or failed.
    pub state: PluginState,
}

/// The `*.wasm` files of a directory, sorted by name.
pub fn wasm_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "wasm") && p.is_file())
        .collect();
    files.sort();
    Ok(files)
}

/// Compile one plugin file off the async threads.
pub async fn load_file(runtime: &Runtime, path: &Path) -> Result<Arc<WasmPlugin>, String> {
    let bytes = tokio::fs::read(path)
        .await
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let runtime = runtime.clone();
    tokio::task::spawn_blocking(move || runtime.load(&bytes, None))
        .await
        .map_err(|e| format!("loader task failed: {e}"))?
        .map(Arc::new)
        .map_err(|e| e.to_string())
}

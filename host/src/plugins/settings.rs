//! Per-plugin settings: an optional `NAME.toml` beside `NAME.wasm` that an
//! operator writes to change one plugin's limits or grant it the host clock.
//!
//! ```toml
//! deadline_ms = 250      # per-call deadline (default 1000)
//! memory_mib = 16        # linear memory cap (default 64)
//! fuel = 50_000_000      # per-call fuel, when the host meters fuel
//! response_kib = 1024    # response size cap (default 4096)
//! output_kib = 64        # captured stdout/stderr per call (default 64)
//! log_kib_per_second = 64 # what it may add to the host's log (default 64,
//!                         # a burst of 16 times that)
//! host_clock = false     # give the guest the real clocks (default false)
//! ```
//!
//! Unknown keys are an error, so a typo does not silently keep a default.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::runtime::Limits;

/// The contents of a plugin's settings file; every field is optional.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginSettings {
    /// Per-call deadline in milliseconds.
    pub deadline_ms: Option<u64>,
    /// Linear memory cap in MiB.
    pub memory_mib: Option<usize>,
    /// Fuel per call (only counted when the runtime meters fuel).
    pub fuel: Option<u64>,
    /// Response size cap in KiB.
    pub response_kib: Option<usize>,
    /// Captured stdout/stderr per call in KiB.
    pub output_kib: Option<usize>,
    /// What the plugin may add to the host's log, in KiB a second (and a
    /// burst of 16 seconds' worth).
    pub log_kib_per_second: Option<u64>,
    /// Grant the guest the host's real clocks.
    pub host_clock: Option<bool>,
}

/// Why a settings file could not be used.
#[derive(Debug, thiserror::Error)]
#[error("plugin settings {path}: {detail}")]
pub struct SettingsError {
    /// The settings file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub detail: String,
}

impl PluginSettings {
    /// The settings file of a plugin file: `NAME.toml` beside `NAME.wasm`.
    pub fn path_for(wasm: &Path) -> PathBuf {
        wasm.with_extension("toml")
    }

    /// Read the settings beside `wasm`; no file means no settings.
    pub fn read_for(wasm: &Path) -> Result<Self, SettingsError> {
        let path = Self::path_for(wasm);
        match std::fs::read_to_string(&path) {
            Ok(text) => Self::parse(&text).map_err(|detail| SettingsError { path, detail }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(SettingsError {
                path,
                detail: e.to_string(),
            }),
        }
    }

    /// Parse settings text.
    pub fn parse(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    /// The defaults with these settings applied.
    pub fn apply(&self, defaults: &Limits) -> Limits {
        let mut limits = defaults.clone();
        if let Some(ms) = self.deadline_ms {
            limits.deadline = Duration::from_millis(ms.max(1));
        }
        if let Some(mib) = self.memory_mib {
            limits.memory_bytes = mib.max(1) << 20;
        }
        if let Some(fuel) = self.fuel {
            limits.fuel = Some(fuel);
        }
        if let Some(kib) = self.response_kib {
            limits.response_bytes = kib << 10;
        }
        if let Some(kib) = self.output_kib {
            limits.output_bytes = kib << 10;
        }
        if let Some(clock) = self.host_clock {
            limits.host_clock = clock;
        }
        if let Some(kib) = self.log_kib_per_second {
            limits.log_bytes_per_second = kib.max(1) << 10;
            limits.log_burst_bytes = kib.max(1) << 14;
        }
        limits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_override_only_the_limits_they_name() {
        let settings = PluginSettings::parse("deadline_ms = 250\nmemory_mib = 16\n").unwrap();
        let limits = settings.apply(&Limits::default());
        assert_eq!(limits.deadline, Duration::from_millis(250));
        assert_eq!(limits.memory_bytes, 16 << 20);
        assert_eq!(limits.response_bytes, Limits::default().response_bytes);
        assert!(!limits.host_clock);
    }

    #[test]
    fn a_misspelt_setting_is_an_error_not_a_silent_default() {
        let err = PluginSettings::parse("deadline = 250\n").unwrap_err();
        assert!(err.contains("deadline"), "{err}");
    }
}

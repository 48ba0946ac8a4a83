//! Per-call limits of a plugin and the store limiter that enforces them.

use std::time::Duration;

/// Limits applied to every reconcile call of a plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock deadline per call, enforced by epoch interruption.
    pub deadline: Duration,
    /// Linear memory cap per instance, in bytes.
    pub memory_bytes: usize,
    /// Cap on captured stdout/stderr per call, in bytes.
    pub output_bytes: usize,
    /// What the plugin may add to the host's log (its `log` import and its
    /// stdout and stderr), in bytes per second, per plugin across its
    /// calls; lines past it are dropped and counted
    /// (`setpoint_plugin_log_lines_dropped_total`).
    pub log_bytes_per_second: u64,
    /// How much of that may come at once.
    pub log_burst_bytes: u64,
    /// Cap on the response size, in bytes.
    pub response_bytes: usize,
    /// Fuel (roughly, Wasm instructions) per call when the runtime meters
    /// fuel ([`RuntimeConfig::fuel_metering`](super::RuntimeConfig)); `None`
    /// means unlimited. Ignored when metering is off.
    pub fuel: Option<u64>,
    /// Give the guest the host's real clocks. Off by default: the guest's
    /// wall clock reads the request's `now-unix-ms` and its monotonic clock
    /// stands still, so a reconcile is a function of its request.
    pub host_clock: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(1),
            memory_bytes: 64 << 20,
            output_bytes: 64 << 10,
            log_bytes_per_second: 64 << 10,
            log_burst_bytes: 1 << 20,
            response_bytes: 4 << 20,
            fuel: None,
            host_clock: false,
        }
    }
}

/// A [`wasmtime::ResourceLimiter`] that remembers when the memory cap was hit,
/// so the failure is reported as such rather than as a generic trap.
///
/// A growth past the cap is refused the WebAssembly way (`memory.grow`
/// returns -1) rather than by trapping: a guest that can do without the
/// memory goes on (the SDK asks for some optional memory for its `manifest`
/// call), one that cannot fails, and the failure is reported as the cap
/// either way.
pub(super) struct Limiter {
    pub memory_cap: usize,
    pub memory_exceeded: bool,
}

impl wasmtime::ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_cap {
            self.memory_exceeded = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}

/// The guest's wall clock when the host clock is not granted: fixed at the
/// request's time.
pub(super) struct FixedWallClock(pub Duration);

impl wasmtime_wasi::HostWallClock for FixedWallClock {
    fn resolution(&self) -> Duration {
        Duration::from_millis(1)
    }

    fn now(&self) -> Duration {
        self.0
    }
}

/// The guest's monotonic clock when the host clock is not granted: it stands
/// still, so the guest cannot time anything.
pub(super) struct FrozenMonotonicClock;

impl wasmtime_wasi::HostMonotonicClock for FrozenMonotonicClock {
    fn resolution(&self) -> u64 {
        1_000_000
    }

    fn now(&self) -> u64 {
        0
    }
}

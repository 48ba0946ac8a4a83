//! Per-plugin reconcile call metrics: how long each Wasm reconcile call
//! takes and which guest faults end them (trap, deadline, memory, fuel,
//! malformed response), by plugin name. Kept by the [`Runtime`] for its
//! whole life, so a hot reload (a new `WasmPlugin` of the same name) keeps
//! counting into the same series. Updating them costs one map lookup under
//! a read lock and a few relaxed atomic additions per call.
//!
//! [`Runtime`]: super::Runtime

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use super::Error;
use super::log_budget::LogBudget;
use crate::metrics::Histogram;
use crate::metrics::HistogramSnapshot;

/// What one plugin's reconcile calls came to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginCallStats {
    /// The plugin's name (from its manifest).
    pub plugin: String,
    /// How long each reconcile call took, guest faults included.
    pub duration: HistogramSnapshot,
    /// Calls ended by a trap (panic, `unreachable`, stack overflow…).
    pub traps: u64,
    /// Calls that ran past their deadline.
    pub timeouts: u64,
    /// Calls that hit the memory cap.
    pub memory_exhausted: u64,
    /// Calls that ran out of fuel.
    pub fuel_exhausted: u64,
    /// Calls whose response the host could not use.
    pub bad_responses: u64,
    /// Lines of its log (the `log` import, stdout, stderr) dropped over
    /// its budget.
    pub log_lines_dropped: u64,
}

#[derive(Debug, Default)]
pub(super) struct Entry {
    duration: Histogram,
    /// Traps, timeouts, memory, fuel, bad responses.
    faults: [AtomicU64; 5],
    /// What the plugin may still write to the host's log.
    log: Arc<LogBudget>,
}

/// The registry, one entry per plugin name.
#[derive(Debug, Default)]
pub(super) struct CallMetrics {
    by_plugin: RwLock<HashMap<Arc<str>, Arc<Entry>>>,
}

impl CallMetrics {
    /// Start timing a reconcile call of `plugin`; the duration is recorded
    /// when the returned timer drops, however the call ends.
    pub(super) fn start(&self, plugin: &Arc<str>) -> CallTimer {
        CallTimer {
            entry: self.entry(plugin),
            started: Instant::now(),
        }
    }

    /// The log budget of `plugin`, shared by all its calls and versions.
    pub(super) fn log_budget(&self, plugin: &Arc<str>) -> Arc<LogBudget> {
        self.entry(plugin).log.clone()
    }

    fn entry(&self, plugin: &Arc<str>) -> Arc<Entry> {
        let found = self
            .by_plugin
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(plugin)
            .cloned();
        found.unwrap_or_else(|| {
            self.by_plugin
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .entry(plugin.clone())
                .or_default()
                .clone()
        })
    }

    /// Every plugin's numbers, by name.
    pub(super) fn snapshot(&self) -> Vec<PluginCallStats> {
        let by_plugin = self.by_plugin.read().unwrap_or_else(|p| p.into_inner());
        let mut stats: Vec<PluginCallStats> = by_plugin
            .iter()
            .map(|(plugin, e)| {
                let [traps, timeouts, memory, fuel, bad] =
                    std::array::from_fn(|i| e.faults[i].load(Ordering::Relaxed));
                PluginCallStats {
                    plugin: plugin.to_string(),
                    duration: e.duration.snapshot(),
                    traps,
                    timeouts,
                    memory_exhausted: memory,
                    fuel_exhausted: fuel,
                    bad_responses: bad,
                    log_lines_dropped: e.log.dropped_total(),
                }
            })
            .collect();
        stats.sort_by(|a, b| a.plugin.cmp(&b.plugin));
        stats
    }
}

/// Times one call (see [`CallMetrics::start`]).
pub(super) struct CallTimer {
    entry: Arc<Entry>,
    started: Instant,
}

impl CallTimer {
    /// Count the call's failure if it is a guest fault; other errors
    /// (instantiation, engine) are the host's, not the plugin's.
    pub(super) fn fault(&self, err: &Error) {
        let index = match err {
            Error::Trap(_) => 0,
            Error::DeadlineExceeded(_) => 1,
            Error::MemoryExceeded(_) => 2,
            Error::FuelExhausted(_) => 3,
            Error::BadResponse(_) => 4,
            _ => return,
        };
        self.entry.faults[index].fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for CallTimer {
    fn drop(&mut self) {
        self.entry.duration.observe(self.started.elapsed());
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn calls_are_timed_and_guest_faults_counted_per_plugin_across_timers() {
        let metrics = CallMetrics::default();
        let a: Arc<str> = Arc::from("a");
        for err in [
            Some(Error::Trap("boom".into())),
            Some(Error::DeadlineExceeded(Duration::from_secs(1))),
            Some(Error::DeadlineExceeded(Duration::from_secs(1))),
            Some(Error::Instantiate("pool".into())),
            None,
        ] {
            let timer = metrics.start(&a);
            if let Some(err) = &err {
                timer.fault(err);
            }
        }
        drop(metrics.start(&Arc::from("b")));
        let stats = metrics.snapshot();
        assert_eq!(stats.len(), 2);
        assert_eq!(
            (
                stats[0].plugin.as_str(),
                stats[0].duration.count,
                stats[0].traps,
                stats[0].timeouts,
                stats[0].bad_responses
            ),
            ("a", 5, 1, 2, 0)
        );
        assert_eq!(
            (stats[1].plugin.as_str(), stats[1].duration.count),
            ("b", 1)
        );
    }
}

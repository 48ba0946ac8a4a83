//! The host's own sections of `/metrics`: the garbage collector, the
//! shared informers, the store engine and backend, and the plugins.

use std::fmt::Write as _;

use setpoint::informer::InformerStats;
use setpoint::runtime::PluginCallStats;
use setpoint::store::metered::OperationSnapshot;
use setpoint::store::{EngineMetric, MetricKind};

use super::{escape, header, histogram};

/// The garbage collector: a stalled or lagging one is visible here (and
/// restarted by its watchdog, which counts and logs every restart).
pub(super) fn render_gc(out: &mut String, gc: &setpoint::system::GcHealth) {
    header(
        out,
        "setpoint_gc_restarts_total",
        "counter",
        "Times the garbage collector's watchdog restarted a stalled or ended collector.",
    );
    let _ = writeln!(out, "setpoint_gc_restarts_total {}", gc.restarts);
    header(
        out,
        "setpoint_gc_last_progress_timestamp_seconds",
        "gauge",
        "When the garbage collector last completed a step (0: not running).",
    );
    let last = gc
        .last_progress
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0.0, |d| d.as_secs_f64());
    let _ = writeln!(out, "setpoint_gc_last_progress_timestamp_seconds {last}");
    header(
        out,
        "setpoint_gc_pending_items",
        "gauge",
        "Garbage collection work queued and ready.",
    );
    let _ = writeln!(out, "setpoint_gc_pending_items {}", gc.pending);
    header(
        out,
        "setpoint_gc_lag_revisions",
        "gauge",
        "Store revisions the garbage collector has not handled yet.",
    );
    let _ = writeln!(out, "setpoint_gc_lag_revisions {}", gc.lag);
}

pub(super) fn render_informers(out: &mut String, informers: &[InformerStats]) {
    type Series = (
        &'static str,
        &'static str,
        &'static str,
        fn(&InformerStats) -> u64,
    );
    let series: [Series; 4] = [
        (
            "setpoint_informer_objects",
            "gauge",
            "Objects in the shared informer's cache.",
            |i| i.objects as u64,
        ),
        (
            "setpoint_informer_held_objects",
            "gauge",
            "Objects whose content the informer's cache holds itself (over the embedded store, only those just written: the rest are read back from the store).",
            |i| i.held as u64,
        ),
        (
            "setpoint_informer_handlers",
            "gauge",
            "Controllers following the shared informer.",
            |i| i.handlers as u64,
        ),
        (
            "setpoint_informer_lists_total",
            "counter",
            "Lists the informer's cache was filled from (the first, then relists).",
            |i| i.lists,
        ),
    ];
    for (name, kind, help, value) in series {
        header(out, name, kind, help);
        for informer in informers {
            let _ = writeln!(
                out,
                "{name}{{group=\"{}\",resource=\"{}\"}} {}",
                escape(&informer.group),
                escape(&informer.resource),
                value(informer)
            );
        }
    }
}

pub(super) fn render_engine(out: &mut String, engine: &[EngineMetric]) {
    for metric in engine {
        let kind = match metric.kind {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
        };
        header(out, metric.name, kind, metric.help);
        let _ = writeln!(out, "{} {}", metric.name, metric.value);
    }
}

pub(super) fn render_store(out: &mut String, store: &[OperationSnapshot]) {
    header(
        out,
        "setpoint_store_request_duration_seconds",
        "histogram",
        "Store backend request latency in seconds, by operation.",
    );
    for op in store {
        let labels = format!("operation=\"{}\"", op.operation);
        histogram(
            out,
            "setpoint_store_request_duration_seconds",
            &labels,
            &op.latency,
        );
    }
    header(
        out,
        "setpoint_store_request_errors_total",
        "counter",
        "Store backend requests that failed (not counting failed preconditions), by operation.",
    );
    for op in store {
        let _ = writeln!(
            out,
            "setpoint_store_request_errors_total{{operation=\"{}\"}} {}",
            op.operation, op.errors
        );
    }
}

pub(super) fn render_plugins(
    out: &mut String,
    plugins: &[(String, u64, u64)],
    calls: &[PluginCallStats],
) {
    type Pick = fn(&(String, u64, u64)) -> u64;
    let counters: [(&str, &str, Pick); 2] = [
        (
            "setpoint_plugin_reconciles_total",
            "Reconciles per plugin, across reloads of its file.",
            |p| p.1,
        ),
        (
            "setpoint_plugin_reconcile_errors_total",
            "Reconciles per plugin that failed (plugin errors, guest faults, responses not applied in full).",
            |p| p.2,
        ),
    ];
    for (name, help, pick) in counters {
        header(out, name, "counter", help);
        for plugin in plugins {
            let _ = writeln!(
                out,
                "{name}{{plugin=\"{}\"}} {}",
                escape(&plugin.0),
                pick(plugin)
            );
        }
    }
    header(
        out,
        "setpoint_plugin_reconcile_duration_seconds",
        "histogram",
        "Time per Wasm reconcile call, per plugin.",
    );
    for call in calls {
        let labels = format!("plugin=\"{}\"", escape(&call.plugin));
        histogram(
            out,
            "setpoint_plugin_reconcile_duration_seconds",
            &labels,
            &call.duration,
        );
    }
    header(
        out,
        "setpoint_plugin_faults_total",
        "counter",
        "Reconcile calls a guest fault ended, per plugin and fault (trap, timeout, memory, fuel, bad_response).",
    );
    for call in calls {
        let p = escape(&call.plugin);
        for (fault, n) in [
            ("trap", call.traps),
            ("timeout", call.timeouts),
            ("memory", call.memory_exhausted),
            ("fuel", call.fuel_exhausted),
            ("bad_response", call.bad_responses),
        ] {
            let _ = writeln!(
                out,
                "setpoint_plugin_faults_total{{plugin=\"{p}\",fault=\"{fault}\"}} {n}"
            );
        }
    }
    header(
        out,
        "setpoint_plugin_log_lines_dropped_total",
        "counter",
        "Lines a plugin logged (log import, stdout, stderr) dropped over its log budget, per plugin.",
    );
    for call in calls {
        let _ = writeln!(
            out,
            "setpoint_plugin_log_lines_dropped_total{{plugin=\"{}\"}} {}",
            escape(&call.plugin),
            call.log_lines_dropped
        );
    }
}

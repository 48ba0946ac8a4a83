//! `/metrics` in the Prometheus text format, with the names operators
//! already chart:
//!
//! - `workqueue_*` (client-go) from each reconciler's workqueue, labelled
//!   `name`;
//! - `controller_runtime_reconcile_total{controller,result}`,
//!   `controller_runtime_reconcile_errors_total{controller}` and
//!   `controller_runtime_reconcile_time_seconds{controller}`, from each
//!   controller's tally (`controller::Tally`, where a reconcile is counted
//!   once); as in controller-runtime, a conflict is an error;
//! - `apiserver_request_total{verb,resource,code}` and
//!   `apiserver_request_duration_seconds{verb}` for the HTTP API, and
//!   `apiserver_longrunning_requests`, `setpoint_watchers{group,resource}`
//!   and `setpoint_watches_total` for watch streams;
//! - `setpoint_informer_objects{group,resource}`,
//!   `setpoint_informer_handlers{group,resource}` and
//!   `setpoint_informer_lists_total{group,resource}` for the host's shared
//!   informers (one in-process watch per kind, whatever the number of
//!   controllers on it; a list count above 1 means it relisted);
//! - `setpoint_store_request_duration_seconds{operation}` and
//!   `setpoint_store_request_errors_total{operation}`, the store backend's
//!   operations (modelled on `etcd_request_duration_seconds`), and the
//!   store engine's own numbers (`setpoint_embedded_*`: commits, fsync
//!   wait, applier lag, in-memory versions);
//! - `setpoint_plugin_reconciles_total{plugin}` and
//!   `setpoint_plugin_reconcile_errors_total{plugin}` (what `setpoint
//!   plugins` shows: the tally of each plugin file, across its reloads,
//!   conflicts not counted as errors),
//!   `setpoint_plugin_reconcile_duration_seconds{plugin}` (each Wasm call)
//!   and `setpoint_plugin_faults_total{plugin,fault}` with `fault` one of
//!   `trap`, `timeout`, `memory`, `fuel`, `bad_response`;
//! - `setpoint_effects_requests_total{plugin,destination,class}`,
//!   `setpoint_effects_refused_total{plugin,destination,reason}` and
//!   `setpoint_effects_request_duration_seconds{plugin,destination}` for
//!   plugins' external requests (`setpoint::egress`).
//!
//! Owns the HTTP request counters and the text rendering; the workqueue,
//! the controllers' tallies, the store wrapper (`store::Metered`) and the
//! runtime own their own numbers.

mod sections;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use axum::http::header;
use axum::response::{IntoResponse, Response};

use sections::{render_engine, render_gc, render_informers, render_plugins, render_store};
use setpoint::Host;
use setpoint::controller::TallySnapshot;
use setpoint::informer::InformerStats;
use setpoint::queue::{DURATION_BUCKETS_SECONDS, HistogramSnapshot, MetricsSnapshot};
use setpoint::runtime::PluginCallStats;
use setpoint::store::EngineMetric;
use setpoint::store::metered::OperationSnapshot;

/// Upper bounds (seconds) of the request duration histogram.
const REQUEST_BUCKETS: [f64; 10] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0];

#[derive(Default)]
struct Histogram {
    buckets: [u64; REQUEST_BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// Counters of the HTTP API, shared by every request.
#[derive(Default)]
pub(super) struct RequestMetrics {
    totals: Mutex<BTreeMap<(String, String, u16), u64>>,
    durations: Mutex<BTreeMap<String, Histogram>>,
    watches_active: AtomicI64,
    watches_total: AtomicU64,
    /// Open watch streams by (group, resource); entries stay at zero once
    /// created, so the series does not vanish between watches.
    watchers: Mutex<BTreeMap<(String, String), i64>>,
}

/// Decrements the open watch gauges when the watch's body is dropped.
pub(super) struct WatchGauge {
    metrics: Arc<RequestMetrics>,
    key: (String, String),
}

impl Drop for WatchGauge {
    fn drop(&mut self) {
        self.metrics.watches_active.fetch_sub(1, Ordering::Relaxed);
        if let Some(n) = self
            .metrics
            .watchers
            .lock()
            .expect("metrics lock")
            .get_mut(&self.key)
        {
            *n -= 1;
        }
    }
}

impl RequestMetrics {
    /// Count a finished (or, for watches, started) request.
    pub(super) fn observe(&self, verb: &str, resource: &str, code: u16, took: Duration) {
        *self
            .totals
            .lock()
            .expect("metrics lock")
            .entry((verb.to_owned(), resource.to_owned(), code))
            .or_default() += 1;
        let seconds = took.as_secs_f64();
        let mut durations = self.durations.lock().expect("metrics lock");
        let h = durations.entry(verb.to_owned()).or_default();
        h.count += 1;
        h.sum += seconds;
        for (i, bound) in REQUEST_BUCKETS.iter().enumerate() {
            if seconds <= *bound {
                h.buckets[i] += 1;
            }
        }
    }

    /// A watch of `resource` in `group` started; the gauges go down when
    /// the returned value drops.
    pub(super) fn watch_started(self: &Arc<Self>, group: &str, resource: &str) -> WatchGauge {
        self.watches_active.fetch_add(1, Ordering::Relaxed);
        self.watches_total.fetch_add(1, Ordering::Relaxed);
        let key = (group.to_owned(), resource.to_owned());
        *self
            .watchers
            .lock()
            .expect("metrics lock")
            .entry(key.clone())
            .or_default() += 1;
        WatchGauge {
            metrics: self.clone(),
            key,
        }
    }
}

fn escape(label: &str) -> String {
    label
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A counter with one value per tally, labelled `label` with its owner's
/// name (a controller's, or the plugin's: the same name).
fn counter_per<V: std::fmt::Display>(
    out: &mut String,
    name: &str,
    help: &str,
    (label, tallies): (&str, &[(String, TallySnapshot)]),
    value: impl Fn(&TallySnapshot) -> V,
) {
    header(out, name, "counter", help);
    for (owner, t) in tallies {
        let _ = writeln!(out, "{name}{{{label}=\"{}\"}} {}", escape(owner), value(t));
    }
}

fn histogram(out: &mut String, name: &str, labels: &str, h: &HistogramSnapshot) {
    for (bound, count) in DURATION_BUCKETS_SECONDS.iter().zip(h.buckets) {
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {count}");
    }
    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", h.sum.as_secs_f64());
    let _ = writeln!(out, "{name}_count{{{labels}}} {}", h.count);
}

/// What the host's parts counted, read for one scrape.
#[derive(Default)]
pub(super) struct HostNumbers {
    /// Each reconciler's workqueue, by name.
    pub(super) queues: Vec<(String, MetricsSnapshot)>,
    /// Each reconciler's tally, by name.
    pub(super) tallies: Vec<(String, TallySnapshot)>,
    /// The store's operations, when the backend is metered.
    pub(super) store: Vec<OperationSnapshot>,
    /// The store engine's own numbers (the embedded store's commits, …).
    pub(super) engine: Vec<EngineMetric>,
    /// (plugin, reconciles, errors), from the plugin files' counters.
    pub(super) plugins: Vec<(String, u64, u64)>,
    /// Each plugin's call durations and guest faults, from the runtime.
    pub(super) calls: Vec<PluginCallStats>,
    /// The shared informers.
    pub(super) informers: Vec<InformerStats>,
    /// The garbage collector's progress.
    pub(super) gc: setpoint::system::GcHealth,
    /// `setpoint_effects_*`, rendered by the egress.
    pub(super) effects: String,
}

impl HostNumbers {
    async fn read(host: &Host) -> Self {
        // Several files may carry one plugin name (a failed copy, say): one
        // series per name.
        let mut plugins: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for p in host.plugins().await {
            let entry = plugins.entry(p.name).or_default();
            entry.0 += p.reconciles;
            entry.1 += p.errors;
        }
        Self {
            queues: host.queue_metrics().await,
            tallies: host.tallies().await,
            store: host
                .api()
                .backend()
                .metrics()
                .map(|m| m.snapshot())
                .unwrap_or_default(),
            engine: host.api().backend().engine_metrics(),
            plugins: plugins
                .into_iter()
                .map(|(name, (reconciles, errors))| (name, reconciles, errors))
                .collect(),
            calls: host.runtime().plugin_call_stats(),
            informers: host.informer_stats(),
            gc: host.gc_health(),
            effects: host.egress().render_metrics(),
        }
    }
}

/// Render every metric in the Prometheus text format (0.0.4).
pub(super) fn render(numbers: &HostNumbers, requests: &RequestMetrics) -> String {
    let queues = &numbers.queues;
    let tallies = &numbers.tallies;
    let mut out = String::new();
    type Gauge = (&'static str, &'static str, fn(&MetricsSnapshot) -> String);
    let gauges: [Gauge; 5] = [
        ("workqueue_depth", "Current depth of the workqueue.", |m| {
            m.depth.to_string()
        }),
        (
            "workqueue_adds_total",
            "Total number of adds handled by the workqueue.",
            |m| m.adds_total.to_string(),
        ),
        (
            "workqueue_retries_total",
            "Total number of retries handled by the workqueue.",
            |m| m.retries_total.to_string(),
        ),
        (
            "workqueue_unfinished_work_seconds",
            "Seconds of work in progress not yet observed by work_duration.",
            |m| m.unfinished_work.as_secs_f64().to_string(),
        ),
        (
            "workqueue_longest_running_processor_seconds",
            "Seconds the longest running processor has been running.",
            |m| m.longest_running_processor.as_secs_f64().to_string(),
        ),
    ];
    for (name, help, value) in gauges {
        let kind = if name.ends_with("_total") {
            "counter"
        } else {
            "gauge"
        };
        header(&mut out, name, kind, help);
        for (controller, m) in queues {
            let _ = writeln!(
                out,
                "{name}{{name=\"{}\"}} {}",
                escape(controller),
                value(m)
            );
        }
    }
    header(
        &mut out,
        "workqueue_queue_duration_seconds",
        "histogram",
        "How long a key stays in the workqueue before being requested.",
    );
    for (controller, m) in queues {
        let labels = format!("name=\"{}\"", escape(controller));
        histogram(
            &mut out,
            "workqueue_queue_duration_seconds",
            &labels,
            &m.queue_duration,
        );
    }
    header(
        &mut out,
        "workqueue_work_duration_seconds",
        "histogram",
        "How long processing a key from the workqueue takes.",
    );
    for (controller, m) in queues {
        let labels = format!("name=\"{}\"", escape(controller));
        histogram(
            &mut out,
            "workqueue_work_duration_seconds",
            &labels,
            &m.work_duration,
        );
    }

    header(
        &mut out,
        "controller_runtime_reconcile_total",
        "counter",
        "Total number of reconciliations per controller, by result.",
    );
    for (controller, t) in tallies {
        let c = escape(controller);
        let errors = t.errors + t.conflicts;
        let _ = writeln!(
            out,
            "controller_runtime_reconcile_total{{controller=\"{c}\",result=\"success\"}} {}",
            t.reconciles - errors
        );
        let _ = writeln!(
            out,
            "controller_runtime_reconcile_total{{controller=\"{c}\",result=\"error\"}} {errors}"
        );
    }
    counter_per(
        &mut out,
        "controller_runtime_reconcile_errors_total",
        "Total number of reconciliation errors per controller.",
        ("controller", tallies),
        |t| t.errors + t.conflicts,
    );
    counter_per(
        &mut out,
        "setpoint_controller_events_dropped_total",
        "Events of a controller's plugin responses not recorded: over the event budget (100 a reconcile, 500 at once then 500 an hour per object).",
        ("controller", tallies),
        |t| t.events_dropped,
    );
    header(
        &mut out,
        "setpoint_plugin_paced_total",
        "counter",
        "Turns of a plugin's keys made to wait because it was over its share of call time (cpu, default half a core) or of bytes written (writes, default 4 MiB/s); its PluginGrant raises them (spec.limits.cpu, spec.limits.writeMiBPerSecond).",
    );
    for (plugin, t) in tallies {
        let p = escape(plugin);
        for (resource, n) in [("cpu", t.paced_cpu), ("writes", t.paced_writes)] {
            let _ = writeln!(
                out,
                "setpoint_plugin_paced_total{{plugin=\"{p}\",resource=\"{resource}\"}} {n}"
            );
        }
    }
    counter_per(
        &mut out,
        "setpoint_plugin_call_cpu_seconds_total",
        "CPU time a plugin's reconcile calls took on the threads that ran them: what its share of the cores (spec.limits.cpu) is charged.",
        ("plugin", tallies),
        |t| t.call_cpu.as_secs_f64(),
    );
    counter_per(
        &mut out,
        "setpoint_plugin_written_bytes_total",
        "Bytes of objects (as stored) a plugin's responses had the store write: statuses, children, finalizers.",
        ("plugin", tallies),
        |t| t.written_bytes,
    );
    header(
        &mut out,
        "controller_runtime_reconcile_time_seconds",
        "histogram",
        "Length of time per reconciliation per controller.",
    );
    for (controller, t) in tallies {
        let labels = format!("controller=\"{}\"", escape(controller));
        histogram(
            &mut out,
            "controller_runtime_reconcile_time_seconds",
            &labels,
            &t.duration,
        );
    }

    header(
        &mut out,
        "apiserver_request_total",
        "counter",
        "Counter of API requests by verb, resource and HTTP code.",
    );
    for ((verb, resource, code), n) in requests.totals.lock().expect("metrics lock").iter() {
        let _ = writeln!(
            out,
            "apiserver_request_total{{verb=\"{}\",resource=\"{}\",code=\"{code}\"}} {n}",
            escape(verb),
            escape(resource)
        );
    }
    header(
        &mut out,
        "apiserver_request_duration_seconds",
        "histogram",
        "Response latency of API requests by verb (for watches, until the stream starts).",
    );
    for (verb, h) in requests.durations.lock().expect("metrics lock").iter() {
        let v = escape(verb);
        for (bound, count) in REQUEST_BUCKETS.iter().zip(h.buckets) {
            let _ = writeln!(
                out,
                "apiserver_request_duration_seconds_bucket{{verb=\"{v}\",le=\"{bound}\"}} {count}"
            );
        }
        let _ = writeln!(
            out,
            "apiserver_request_duration_seconds_bucket{{verb=\"{v}\",le=\"+Inf\"}} {}",
            h.count
        );
        let _ = writeln!(
            out,
            "apiserver_request_duration_seconds_sum{{verb=\"{v}\"}} {}",
            h.sum
        );
        let _ = writeln!(
            out,
            "apiserver_request_duration_seconds_count{{verb=\"{v}\"}} {}",
            h.count
        );
    }
    header(
        &mut out,
        "apiserver_longrunning_requests",
        "gauge",
        "Watch streams currently open.",
    );
    let _ = writeln!(
        out,
        "apiserver_longrunning_requests{{verb=\"WATCH\"}} {}",
        requests.watches_active.load(Ordering::Relaxed)
    );
    header(
        &mut out,
        "setpoint_watches_total",
        "counter",
        "Watch streams opened.",
    );
    let _ = writeln!(
        out,
        "setpoint_watches_total {}",
        requests.watches_total.load(Ordering::Relaxed)
    );
    header(
        &mut out,
        "setpoint_watches_closed_slow_total",
        "counter",
        "Watch streams closed because their client fell too far behind (see the watch module).",
    );
    let _ = writeln!(
        out,
        "setpoint_watches_closed_slow_total {}",
        super::watch::CLOSED_SLOW.load(Ordering::Relaxed)
    );
    header(
        &mut out,
        "setpoint_connections_closed_stalled_total",
        "counter",
        "Connections closed because their client read nothing of a response for a minute.",
    );
    let _ = writeln!(
        out,
        "setpoint_connections_closed_stalled_total {}",
        super::conn::CLOSED_STALLED.load(Ordering::Relaxed)
    );
    header(
        &mut out,
        "setpoint_watchers",
        "gauge",
        "Watch streams currently open, by group and resource.",
    );
    for ((group, resource), n) in requests.watchers.lock().expect("metrics lock").iter() {
        let _ = writeln!(
            out,
            "setpoint_watchers{{group=\"{}\",resource=\"{}\"}} {n}",
            escape(group),
            escape(resource)
        );
    }
    render_informers(&mut out, &numbers.informers);
    render_gc(&mut out, &numbers.gc);
    out.push_str(&numbers.effects);
    render_store(&mut out, &numbers.store);
    render_engine(&mut out, &numbers.engine);
    render_plugins(&mut out, &numbers.plugins, &numbers.calls);
    out
}

/// `GET /metrics`.
pub(super) async fn metrics(host: Arc<Host>, requests: Arc<RequestMetrics>) -> Response {
    let numbers = HostNumbers::read(&host).await;
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        render(&numbers, &requests),
    )
        .into_response()
}

#[cfg(test)]
mod tests;

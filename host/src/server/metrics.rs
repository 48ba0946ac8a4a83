//! `/metrics` in the Prometheus text format, with the names operators
//! already chart:
//!
//! - `workqueue_*` (client-go) from each reconciler's workqueue, labelled
//!   `name`;
//! - `controller_runtime_reconcile_total{controller,result}`,
//!   `controller_runtime_reconcile_errors_total{controller}` and
//!   `controller_runtime_reconcile_time_seconds{controller}`, derived from
//!   the same workqueue: every reconcile is one `get`…`done` of a key (its
//!   work duration), and every transient error or conflict is exactly one
//!   rate-limited re-add (a retry);
//! - `apiserver_request_total{verb,resource,code}` and
//!   `apiserver_request_duration_seconds{verb}` for the HTTP API, and
//!   `apiserver_longrunning_requests` / `setpoint_watches_total` for watch
//!   streams.
//!
//! Owns the HTTP request counters and the text rendering; the workqueue
//! owns its own metrics.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use axum::http::header;
use axum::response::{IntoResponse, Response};

use crate::Host;
use crate::queue::{DURATION_BUCKETS_SECONDS, HistogramSnapshot, MetricsSnapshot};

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
}

/// Decrements the active watch gauge when the watch's body is dropped.
pub(super) struct WatchGauge(Arc<RequestMetrics>);

impl Drop for WatchGauge {
    fn drop(&mut self) {
        self.0.watches_active.fetch_sub(1, Ordering::Relaxed);
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

    /// A watch started; the gauge goes down when the returned value drops.
    pub(super) fn watch_started(self: &Arc<Self>) -> WatchGauge {
        self.watches_active.fetch_add(1, Ordering::Relaxed);
        self.watches_total.fetch_add(1, Ordering::Relaxed);
        WatchGauge(self.clone())
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

fn histogram(out: &mut String, name: &str, labels: &str, h: &HistogramSnapshot) {
    for (bound, count) in DURATION_BUCKETS_SECONDS.iter().zip(h.buckets) {
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {count}");
    }
    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", h.sum.as_secs_f64());
    let _ = writeln!(out, "{name}_count{{{labels}}} {}", h.count);
}

/// Render every metric in the Prometheus text format (0.0.4).
pub(super) fn render(queues: &[(String, MetricsSnapshot)], requests: &RequestMetrics) -> String {
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
    for (controller, m) in queues {
        let c = escape(controller);
        let errors = m.retries_total.min(m.work_duration.count);
        let _ = writeln!(
            out,
            "controller_runtime_reconcile_total{{controller=\"{c}\",result=\"success\"}} {}",
            m.work_duration.count - errors
        );
        let _ = writeln!(
            out,
            "controller_runtime_reconcile_total{{controller=\"{c}\",result=\"error\"}} {errors}"
        );
    }
    header(
        &mut out,
        "controller_runtime_reconcile_errors_total",
        "counter",
        "Total number of reconciliation errors per controller.",
    );
    for (controller, m) in queues {
        let _ = writeln!(
            out,
            "controller_runtime_reconcile_errors_total{{controller=\"{}\"}} {}",
            escape(controller),
            m.retries_total.min(m.work_duration.count)
        );
    }
    header(
        &mut out,
        "controller_runtime_reconcile_time_seconds",
        "histogram",
        "Length of time per reconciliation per controller.",
    );
    for (controller, m) in queues {
        let labels = format!("controller=\"{}\"", escape(controller));
        histogram(
            &mut out,
            "controller_runtime_reconcile_time_seconds",
            &labels,
            &m.work_duration,
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
    out
}

/// `GET /metrics`.
pub(super) async fn metrics(host: Arc<Host>, requests: Arc<RequestMetrics>) -> Response {
    let queues = host.queue_metrics().await;
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        render(&queues, &requests),
    )
        .into_response()
}

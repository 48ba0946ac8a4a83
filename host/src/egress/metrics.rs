//! What external requests did, per plugin and destination: counts by
//! result class, refusals by reason, a latency histogram (all rendered for
//! `/metrics`), and each object's most recent requests (for `setpoint
//! describe`). URLs are recorded before secrets are put in, so nothing
//! here ever holds a secret value.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use serde::Serialize;

/// Upper bounds (seconds) of the latency histogram.
const BUCKETS: [f64; 10] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

/// How many recent requests are kept per object.
const RECENT_PER_OBJECT: usize = 20;

/// How many objects' recent requests are kept at most.
const RECENT_OBJECTS: usize = 10_000;

/// The most distinct (plugin, destination) series; beyond it destinations
/// are counted as `other`, so a plugin naming random hosts cannot grow
/// the metrics without bound.
const MAX_SERIES: usize = 1_000;

#[derive(Default)]
struct Histogram {
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

#[derive(Default)]
struct State {
    /// (plugin, destination, class) → count.
    requests: BTreeMap<(String, String, String), u64>,
    /// (plugin, destination, reason) → count.
    refused: BTreeMap<(String, String, String), u64>,
    /// (plugin, destination, `sent` | `shared`) → reads answered.
    observed: BTreeMap<(String, String, String), u64>,
    /// (plugin, destination) → writes that went in another's batch.
    batched: BTreeMap<(String, String), u64>,
    resent: BTreeMap<(String, String), u64>,
    /// (plugin, destination) → latency.
    latency: BTreeMap<(String, String), Histogram>,
    recent: HashMap<String, VecDeque<RecentRequest>>,
    recent_order: VecDeque<String>,
    refusals: VecDeque<RecentRefusal>,
}

/// How many recent refusals are kept (all plugins together).
const RECENT_REFUSALS: usize = 200;

/// One request the host did not send, as the console lists it.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RecentRefusal {
    /// When (RFC 3339).
    pub time: String,
    /// The plugin that asked.
    pub plugin: String,
    /// The object it was reconciling (`Kind/namespace/name`).
    pub object: String,
    /// The destination.
    pub destination: String,
    /// Why, as a reason word (`DestinationNotGranted`, ...).
    pub reason: String,
    /// Why, in words.
    pub message: String,
}

/// One counter of [`Metrics::counts`]: requests of a plugin to a
/// destination that ended as `outcome` (a status class such as `2xx`, an
/// error kind, or for refusals the reason).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Count {
    /// The plugin.
    pub plugin: String,
    /// The destination.
    pub destination: String,
    /// The class or reason.
    pub outcome: String,
    /// How many.
    pub count: u64,
}

/// One external request, as `setpoint describe` shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RecentRequest {
    /// When it was sent (RFC 3339).
    pub time: String,
    /// The plugin that asked.
    pub plugin: String,
    /// `observe` or `effect`.
    pub role: String,
    /// The method.
    pub method: String,
    /// The URL as the plugin wrote it, query secrets shown as `***`.
    pub url: String,
    /// The status, or the error class (`refused`, `timeout`, ...).
    pub result: String,
    /// How long it took, milliseconds.
    pub latency_ms: u64,
}

/// The counters and the recent-request log.
#[derive(Default)]
pub struct Metrics {
    state: Mutex<State>,
}

impl Metrics {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn series(state: &State, plugin: &str, destination: &str) -> String {
        let known = state
            .latency
            .contains_key(&(plugin.to_owned(), destination.to_owned()));
        if known || state.latency.len() < MAX_SERIES {
            destination.to_owned()
        } else {
            "other".to_owned()
        }
    }

    /// Count one request that was sent (`class`: `2xx`...`5xx`, or the
    /// error kind when it got no answer) and its latency.
    pub fn sent(&self, plugin: &str, destination: &str, class: &str, latency: Duration) {
        let mut state = self.state();
        let destination = Self::series(&state, plugin, destination);
        *state
            .requests
            .entry((plugin.to_owned(), destination.clone(), class.to_owned()))
            .or_default() += 1;
        let h = state
            .latency
            .entry((plugin.to_owned(), destination))
            .or_default();
        let secs = latency.as_secs_f64();
        h.count += 1;
        h.sum += secs;
        if let Some(i) = BUCKETS.iter().position(|b| secs <= *b) {
            h.buckets[i] += 1;
        }
    }

    /// Count one request that was not sent, and why.
    pub fn refused(&self, plugin: &str, destination: &str, reason: &str) {
        let mut state = self.state();
        let destination = Self::series(&state, plugin, destination);
        *state
            .refused
            .entry((plugin.to_owned(), destination.clone(), reason.to_owned()))
            .or_default() += 1;
        *state
            .requests
            .entry((plugin.to_owned(), destination, "refused".to_owned()))
            .or_default() += 1;
    }

    /// Count one read answered: `sent` (its own exchange) or `shared`
    /// (another object's identical read, in flight or fresh).
    pub fn observed(&self, plugin: &str, destination: &str, outcome: &str) {
        let mut state = self.state();
        let destination = Self::series(&state, plugin, destination);
        *state
            .observed
            .entry((plugin.to_owned(), destination, outcome.to_owned()))
            .or_default() += 1;
    }

    /// Count one write that went in another write's batch.
    pub fn batched(&self, plugin: &str, destination: &str) {
        let mut state = self.state();
        let destination = Self::series(&state, plugin, destination);
        *state
            .batched
            .entry((plugin.to_owned(), destination))
            .or_default() += 1;
    }

    /// Count a request sent once more after a 5xx that came while another
    /// request to the destination ran.
    pub fn resent(&self, plugin: &str, destination: &str) {
        let mut state = self.state();
        let destination = Self::series(&state, plugin, destination);
        *state
            .resent
            .entry((plugin.to_owned(), destination))
            .or_default() += 1;
    }

    /// Remember a request of `object` for `describe`.
    pub fn remember(&self, object: &str, request: RecentRequest) {
        let mut state = self.state();
        if !state.recent.contains_key(object) {
            if state.recent_order.len() >= RECENT_OBJECTS
                && let Some(oldest) = state.recent_order.pop_front()
            {
                state.recent.remove(&oldest);
            }
            state.recent_order.push_back(object.to_owned());
        }
        let list = state.recent.entry(object.to_owned()).or_default();
        if list.len() >= RECENT_PER_OBJECT {
            list.pop_front();
        }
        list.push_back(request);
    }

    /// The recent requests of `object` (`kind/namespace/name` as the
    /// controller names it), oldest first.
    pub fn recent(&self, object: &str) -> Vec<RecentRequest> {
        self.state()
            .recent
            .get(object)
            .map(|l| l.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Remember a refusal for the console (the latest 200 are kept).
    pub fn remember_refusal(&self, refusal: RecentRefusal) {
        let mut state = self.state();
        if state.refusals.len() >= RECENT_REFUSALS {
            state.refusals.pop_front();
        }
        state.refusals.push_back(refusal);
    }

    /// The latest refusals, oldest first.
    pub fn recent_refusals(&self) -> Vec<RecentRefusal> {
        self.state().refusals.iter().cloned().collect()
    }

    /// The request counters by result class and the refusals by reason,
    /// as `(requests, refused)`.
    pub fn counts(&self) -> (Vec<Count>, Vec<Count>) {
        let state = self.state();
        let list = |map: &BTreeMap<(String, String, String), u64>| {
            map.iter()
                .map(|((plugin, destination, outcome), count)| Count {
                    plugin: plugin.clone(),
                    destination: destination.clone(),
                    outcome: outcome.clone(),
                    count: *count,
                })
                .collect()
        };
        (list(&state.requests), list(&state.refused))
    }

    /// `setpoint_effects_*` in the Prometheus text format.
    pub fn render(&self) -> String {
        let state = self.state();
        let mut out = String::new();
        let esc = |s: &str| {
            s.replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n")
        };
        for (name, help, third, counts) in [
            (
                "setpoint_effects_requests_total",
                "External requests of plugins, by result class.",
                "class",
                &state.requests,
            ),
            (
                "setpoint_effects_refused_total",
                "External requests not sent, by reason.",
                "reason",
                &state.refused,
            ),
            (
                "setpoint_effects_observations_total",
                "Reads of plugins answered: by an exchange of their own (sent) or another object's identical one (shared).",
                "outcome",
                &state.observed,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for ((plugin, destination, value), n) in counts {
                let _ = writeln!(
                    out,
                    "{name}{{plugin=\"{}\",destination=\"{}\",{third}=\"{}\"}} {n}",
                    esc(plugin),
                    esc(destination),
                    esc(value)
                );
            }
        }
        let name = "setpoint_effects_batched_total";
        let _ = writeln!(
            out,
            "# HELP {name} Writes of plugins sent in another write's batch (one request for many).\n# TYPE {name} counter"
        );
        for ((plugin, destination), n) in &state.batched {
            let _ = writeln!(
                out,
                "{name}{{plugin=\"{}\",destination=\"{}\"}} {n}",
                esc(plugin),
                esc(destination)
            );
        }
        let name = "setpoint_effects_resent_total";
        let _ = writeln!(
            out,
            "# HELP {name} Requests sent once more after a 5xx that came while another request to the destination ran.\n# TYPE {name} counter"
        );
        for ((plugin, destination), n) in &state.resent {
            let _ = writeln!(
                out,
                "{name}{{plugin=\"{}\",destination=\"{}\"}} {n}",
                esc(plugin),
                esc(destination)
            );
        }
        out.push_str(
            "# HELP setpoint_effects_request_duration_seconds Latency of external requests sent.\n\
             # TYPE setpoint_effects_request_duration_seconds histogram\n",
        );
        for ((plugin, destination), h) in &state.latency {
            let labels = format!(
                "plugin=\"{}\",destination=\"{}\"",
                esc(plugin),
                esc(destination)
            );
            let mut cumulative = 0;
            for (bound, n) in BUCKETS.iter().zip(h.buckets) {
                cumulative += n;
                let _ = writeln!(
                    out,
                    "setpoint_effects_request_duration_seconds_bucket{{{labels},le=\"{bound}\"}} {cumulative}"
                );
            }
            let _ = writeln!(
                out,
                "setpoint_effects_request_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}\n\
                 setpoint_effects_request_duration_seconds_sum{{{labels}}} {}\n\
                 setpoint_effects_request_duration_seconds_count{{{labels}}} {}",
                h.count, h.sum, h.count
            );
        }
        out
    }
}

/// A Prometheus label value, escaped.
pub(super) fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The time now as RFC 3339, for [`RecentRequest::time`].
pub fn now_text() -> String {
    chrono::DateTime::<chrono::Utc>::from(SystemTime::now())
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_render_per_plugin_and_destination() {
        let m = Metrics::default();
        m.sent("p", "http://a:1", "2xx", Duration::from_millis(7));
        m.refused("p", "http://b:2", "DestinationNotGranted");
        m.observed("p", "http://a:1", "shared");
        let text = m.render();
        assert!(text.contains(
            "setpoint_effects_observations_total{plugin=\"p\",destination=\"http://a:1\",outcome=\"shared\"} 1"
        ));
        assert!(text.contains(
            "setpoint_effects_requests_total{plugin=\"p\",destination=\"http://a:1\",class=\"2xx\"} 1"
        ));
        assert!(text.contains(
            "setpoint_effects_refused_total{plugin=\"p\",destination=\"http://b:2\",reason=\"DestinationNotGranted\"} 1"
        ));
        assert!(text.contains(
            "setpoint_effects_request_duration_seconds_bucket{plugin=\"p\",destination=\"http://a:1\",le=\"0.01\"} 1"
        ));
    }

    #[test]
    fn recent_requests_are_bounded_per_object() {
        let m = Metrics::default();
        for i in 0..30 {
            m.remember(
                "o",
                RecentRequest {
                    time: now_text(),
                    plugin: "p".into(),
                    role: "observe".into(),
                    method: "GET".into(),
                    url: format!("http://a/{i}"),
                    result: "200".into(),
                    latency_ms: 1,
                },
            );
        }
        let recent = m.recent("o");
        assert_eq!(recent.len(), RECENT_PER_OBJECT);
        assert_eq!(recent.last().unwrap().url, "http://a/29");
    }
}

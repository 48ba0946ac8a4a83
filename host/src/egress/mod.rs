//! Egress: the host performs the external HTTP requests plugins ask for
//! (reads in `observe`, writes in `effects`), under the operator's grant.
//! A plugin never opens a socket; everything that leaves the machine goes
//! through [`Egress::observe`] and [`Egress::write`].
//!
//! For each request, in this order:
//!
//! 1. the URL must be `http`/`https` and name a destination the plugin
//!    declared in its manifest *and* the operator granted in the
//!    `PluginGrant` named after the plugin (`policy`); headers the host
//!    owns (`Host`, hop-by-hop, `Content-Length`) are refused;
//! 2. each secret it names must be declared and granted; its value is read
//!    from the `v1 Secret` in the object's namespace (`secrets`);
//! 3. a read identical to one another object made within the freshness
//!    window (or is making now) shares that exchange (`shared`);
//! 4. the request waits its turn in the plugin's fair queue: the plugin's
//!    and the destination's rates and concurrency, a `Retry-After` the
//!    destination gave and its circuit breaker (`limits`); while it waits
//!    the reconcile lets go of its worker ([`Parker`]);
//! 5. the name is resolved by the host; loopback, private, link-local and
//!    metadata addresses need a grant naming the destination exactly;
//!    the connection goes to the checked address, redirects are not
//!    followed, the body is capped, connect and total timeouts apply
//!    (`client`);
//! 6. what comes back has every secret value used masked out, and the
//!    request is counted and remembered with its URL as the plugin wrote
//!    it (`metrics`).
//!
//! A refused request is never sent: the plugin gets a `refused` answer and
//! the returned [`Report`] names it, for the object's condition and event.

mod batch;
pub mod client;
pub mod limits;
pub mod metrics;
mod parker;
pub mod policy;
mod prepare;
mod report;
mod rounds;
pub mod secrets;
mod send;
mod shared;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

pub use batch::BATCH_HEADER;
pub use limits::{DestinationState, Held, LimitsConfig};
pub use metrics::{Count, Metrics, RecentRefusal, RecentRequest};
pub use parker::Parker;
pub use policy::{Declared, Destination, GRANT_API_VERSION, GRANT_KIND, Grant};
pub use report::{Refusal, Report};
pub use rounds::recent_key;
pub(crate) use rounds::rounds;

use crate::api::Api;
use crate::contract::{Answer, HttpError, HttpErrorKind, HttpRequest, HttpResponse, Manifest};
use crate::object::{Object, meta};
use report::merge;
use secrets::Masker;

/// Settings of the host's egress.
#[derive(Debug, Clone)]
pub struct EgressConfig {
    /// Time to resolve and connect, per request.
    pub connect_timeout: Duration,
    /// Time for a whole exchange, per request (a request's own
    /// `timeout-ms` may only shorten it).
    pub request_timeout: Duration,
    /// Time for all the requests of one reconcile (every round and the
    /// writes); no request runs past it.
    pub reconcile_budget: Duration,
    /// The largest response body accepted.
    pub max_body_bytes: usize,
    /// Calls of a reconcile at most: the first and the rounds with answers.
    pub max_rounds: u32,
    /// How long a request may wait for its turn in the plugin's queue
    /// (and a read or write for the exchange it joined). Long, because a
    /// waiting reconcile costs no worker and no CPU, and each end of a wait
    /// calls the plugin again; a change of the object ends its waits at
    /// once ([`Parker::supersede`]).
    pub max_wait: Duration,
    /// Requests one response may ask for (reads and writes each).
    pub max_requests: usize,
    /// Rate, concurrency and breaker defaults.
    pub limits: LimitsConfig,
    /// How old an answer to a read may be when another object asks the
    /// same (after secrets are put in) and says nothing itself; a request's
    /// `Cache-Control: max-age=N` sets its own.
    pub observe_window: Duration,
}

impl Default for EgressConfig {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(10),
            reconcile_budget: Duration::from_secs(30),
            max_body_bytes: 1 << 20,
            max_rounds: 4,
            max_wait: Duration::from_secs(300),
            max_requests: 64,
            limits: LimitsConfig::default(),
            observe_window: Duration::from_secs(1),
        }
    }
}

/// The host's egress: policy, limits, client and metrics. Cheap to clone.
#[derive(Clone)]
pub struct Egress {
    inner: Arc<Inner>,
    /// Sends only requests that change nothing (see [`Egress::read_only`]).
    read_only: bool,
}

/// Methods a read-only egress sends: the ones HTTP defines as safe.
const SAFE_METHODS: [&str; 3] = ["GET", "HEAD", "OPTIONS"];

struct Inner {
    config: EgressConfig,
    api: Api,
    limits: limits::Limits,
    observations: Arc<shared::Observations>,
    batches: Arc<batch::Batches>,
    metrics: Metrics,
}

impl std::fmt::Debug for Egress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Egress")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// The reconcile a request belongs to.
pub struct Scope<'a> {
    /// The plugin's manifest.
    pub plugin: &'a Manifest,
    /// The reconciled object.
    pub object: &'a Object,
    /// The object's key as the controller writes it (for logs and
    /// `describe`): `kind/namespace/name`.
    pub key: String,
    /// When the reconcile's budget for requests runs out, not counting the
    /// time its requests spend waiting (for their turns, or for reads and
    /// batches they joined): that is added back ([`Scope::waited`]).
    pub deadline: Instant,
    /// How long the reconcile's requests may wait for their turns (or for
    /// reads and batches they joined).
    pub wait_deadline: Instant,
    /// Served before the destination's other waiters: the object is being
    /// deleted, and whoever deleted it waits.
    pub urgent: bool,
    /// Told when the reconcile starts waiting on the network.
    pub parker: Parker,
    /// Time the reconcile's requests spent waiting so far, in
    /// microseconds: not charged to its budget.
    pub waited: std::sync::atomic::AtomicU64,
}

impl Scope<'_> {
    /// The budget's end, the time spent waiting added back.
    fn budget_end(&self) -> Instant {
        self.deadline
            + Duration::from_micros(self.waited.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// `wait` on the network: the worker is let go ([`Parker::park`]),
    /// the time is not charged to the budget, and a change of the object
    /// ends it with a `throttled` answer, the object to be looked at again
    /// at once.
    async fn wait<T>(
        &self,
        request: &HttpRequest,
        report: &mut Report,
        wait: impl std::future::Future<Output = T>,
    ) -> Result<T, HttpError> {
        self.parker.park();
        let since = Instant::now();
        let done = self.parker.unless_superseded(request, wait).await;
        let micros = since.elapsed().as_micros().min(u128::from(u64::MAX)) as u64;
        self.waited
            .fetch_add(micros, std::sync::atomic::Ordering::Relaxed);
        if done.is_err() {
            report.hold_for(Duration::ZERO);
        }
        done
    }
}

/// One request on its way: whose, what, as a read or a write, and the
/// secrets to mask out of what comes back.
#[derive(Clone, Copy)]
struct Call<'c, 's> {
    scope: &'c Scope<'s>,
    request: &'c HttpRequest,
    /// `observe` or `effect`.
    role: &'c str,
    masker: &'c Masker,
}

/// What a plugin may use now: its declaration and the operator's grant.
struct Rights {
    declared: Declared,
    grant: Result<Option<Grant>, String>,
}

/// What a plugin declares and its grant leaves out ([`Egress::pending`]).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Pending {
    /// Each `destination http://…` or `secret name/key` declared and not
    /// granted; empty when everything declared is granted (or nothing is
    /// declared).
    pub items: Vec<String>,
    /// Whether a valid `PluginGrant` for the plugin exists.
    pub granted: bool,
}

/// `refused`: a request not sent.
fn refused(message: impl Into<String>) -> HttpError {
    HttpError {
        kind: HttpErrorKind::Refused,
        message: message.into(),
    }
}

impl Egress {
    /// Egress reading grants and secrets through `api`.
    pub fn new(api: Api, config: EgressConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                limits: limits::Limits::new(config.limits),
                observations: Arc::default(),
                batches: Arc::default(),
                config,
                api,
                metrics: Metrics::default(),
            }),
            read_only: false,
        }
    }

    /// This egress, sending only safe requests (`GET`, `HEAD`, `OPTIONS`)
    /// under the same grants, limits and metrics; any other request, and
    /// every write, is refused unsent (reason `NotSentReadOnly`). What a
    /// plan observes the outside world through: it may look, never touch.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use std::sync::Arc;
    /// use setpoint::api::Api;
    /// use setpoint::egress::{Egress, EgressConfig};
    /// use setpoint::store::MemoryBackend;
    ///
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await.unwrap();
    /// let egress = Egress::new(api, EgressConfig::default());
    /// assert!(!egress.is_read_only() && egress.read_only().is_read_only());
    /// # });
    /// ```
    pub fn read_only(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            read_only: true,
        }
    }

    /// Whether this egress sends only safe requests ([`Egress::read_only`]).
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The settings.
    pub fn config(&self) -> &EgressConfig {
        &self.inner.config
    }

    /// The counters and recent requests.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// The grant of `plugin`: `Ok(None)` when there is none, an error when
    /// its `PluginGrant` does not parse (then nothing is granted).
    pub async fn grant(&self, plugin: &str) -> Result<Option<Grant>, String> {
        let Some(kind) = self
            .inner
            .api
            .kinds()
            .by_kind(GRANT_API_VERSION, GRANT_KIND)
        else {
            return Ok(None);
        };
        match self.inner.api.get(&kind, None, plugin).await {
            Ok(object) => Grant::from_object(&object)
                .map(Some)
                .map_err(|e| format!("PluginGrant {plugin} is invalid: {e}")),
            Err(crate::api::Error::NotFound { .. }) => Ok(None),
            Err(err) => Err(format!("reading PluginGrant {plugin}: {err}")),
        }
    }

    async fn rights(&self, manifest: &Manifest) -> Rights {
        Rights {
            declared: Declared::parse(&manifest.destinations, &manifest.secrets),
            grant: self.grant(&manifest.name).await,
        }
    }

    /// What `manifest` declares that its grant does not cover, and
    /// whether it has a grant at all.
    pub async fn pending(&self, manifest: &Manifest) -> Pending {
        if manifest.destinations.is_empty() && manifest.secrets.is_empty() {
            return Pending::default();
        }
        let rights = self.rights(manifest).await;
        let (grant, granted) = match rights.grant {
            Ok(Some(grant)) => (grant, true),
            Ok(None) => (Grant::default(), false),
            Err(err) => {
                return Pending {
                    items: vec![err],
                    granted: false,
                };
            }
        };
        let mut pending: Vec<String> = rights
            .declared
            .invalid
            .iter()
            .map(|e| format!("invalid declaration {e}"))
            .collect();
        for d in &rights.declared.destinations {
            // A granted `*.x` covers a declared `a.x` and a declared `*.x`.
            if !grant.destinations.iter().any(|g| g.covers(d)) {
                pending.push(format!("destination {d}"));
            }
        }
        for (i, text) in manifest.secrets.iter().enumerate() {
            let Some(_) = rights.declared.secrets.get(i) else {
                continue;
            };
            let (name, key) = text.split_once('/').unwrap_or((text, "*"));
            if !grant
                .secrets
                .iter()
                .any(|g| g.covers_in_some_namespace(name, key))
            {
                pending.push(format!("secret {text}"));
            }
        }
        Pending {
            items: pending,
            granted,
        }
    }

    /// Perform reads, all at once (bounded by the plugin's concurrency),
    /// answering each by its id in order.
    pub async fn observe(
        &self,
        scope: &Scope<'_>,
        requests: &[HttpRequest],
        report: &mut Report,
    ) -> Vec<Answer> {
        let rights = self.rights(scope.plugin).await;
        let mut reports: Vec<Report> = requests.iter().map(|_| Report::default()).collect();
        let answers = futures_util::future::join_all(
            requests
                .iter()
                .zip(reports.iter_mut())
                .map(|(r, rep)| self.one(scope, &rights, r, "observe", rep)),
        )
        .await;
        for r in reports {
            merge(report, r);
        }
        requests.iter().map(|r| r.id.clone()).zip(answers).collect()
    }

    /// Perform writes one after another in order; after the first that
    /// fails (no answer, or status 400 or more) the rest are not sent and
    /// are answered so.
    pub async fn write(
        &self,
        scope: &Scope<'_>,
        requests: &[HttpRequest],
        report: &mut Report,
    ) -> Vec<Answer> {
        let rights = self.rights(scope.plugin).await;
        let mut answers = Vec::with_capacity(requests.len());
        let mut failed: Option<String> = None;
        for request in requests {
            let answer = match &failed {
                Some(before) => Err(HttpError {
                    kind: HttpErrorKind::Transport,
                    message: format!("not sent: the earlier write {before} failed"),
                }),
                None => self.one(scope, &rights, request, "effect", report).await,
            };
            let bad = match &answer {
                Ok(response) => response.status >= 400,
                Err(_) => true,
            };
            if bad && failed.is_none() {
                failed = Some(request.id.clone());
            }
            answers.push((request.id.clone(), answer));
        }
        answers
    }

    /// One request through every check, then the wire.
    async fn one(
        &self,
        scope: &Scope<'_>,
        rights: &Rights,
        request: &HttpRequest,
        role: &str,
        report: &mut Report,
    ) -> Result<HttpResponse, HttpError> {
        let plugin = scope.plugin.name.as_str();
        let started = std::time::Instant::now();
        let destination = Destination::parse(&request.url);
        let label = destination
            .as_ref()
            .map_or_else(|_| "invalid".to_owned(), ToString::to_string);
        let mut masker = Masker::default();
        let prepared = if self.read_only
            && (role != "observe"
                || !SAFE_METHODS.contains(&request.method.to_ascii_uppercase().as_str()))
        {
            Err((
                "NotSentReadOnly",
                format!(
                    "{} {} not sent: only safe reads (GET, HEAD, OPTIONS) are sent while planning",
                    request.method, request.url
                ),
            ))
        } else {
            self.prepare(scope, rights, request, destination, &mut masker)
                .await
        };
        let result = match prepared {
            Err((reason, message)) => {
                self.inner.metrics.refused(plugin, &label, reason);
                self.inner.metrics.remember_refusal(metrics::RecentRefusal {
                    time: metrics::now_text(),
                    plugin: plugin.to_owned(),
                    object: scope.key.to_string(),
                    destination: label.clone(),
                    reason: reason.to_owned(),
                    message: message.clone(),
                });
                tracing::warn!(plugin, object = %scope.key, method = %request.method, url = %request.url, reason, "external request refused: {message}");
                report.refused.push(Refusal {
                    destination: label.clone(),
                    reason,
                    message: message.clone(),
                });
                Err(refused(masker.text(&message)))
            }
            Ok(prepared) => {
                let call = Call {
                    scope,
                    request,
                    role,
                    masker: &masker,
                };
                self.send(&call, prepared, report).await
            }
        };
        let failed = match &result {
            Ok(r) => r.status >= 500,
            Err(e) => e.kind != HttpErrorKind::Refused,
        };
        if failed {
            report.failed_at(&label);
        }
        let outcome = match &result {
            Ok(r) => r.status.to_string(),
            Err(e) => e.kind.as_str().to_owned(),
        };
        tracing::debug!(plugin, object = %scope.key, role, method = %request.method, url = %request.url, outcome, "external request");
        self.inner.metrics.remember(
            &scope.key,
            RecentRequest {
                time: metrics::now_text(),
                plugin: plugin.to_owned(),
                role: role.to_owned(),
                method: request.method.clone(),
                url: request.url.clone(),
                result: outcome,
                latency_ms: started.elapsed().as_millis() as u64,
            },
        );
        result
    }

    /// Tells `(plugin, destination)` each time a destination's circuit
    /// breaker closes: it answers again, and the objects whose requests
    /// failed there (their reports' [`Report::failed_at`]) should be
    /// looked at now rather than at the end of their backoff.
    pub fn recovered(&self) -> tokio::sync::broadcast::Receiver<(String, String)> {
        self.inner.limits.recovered()
    }

    /// Each plugin's destinations now (breaker, queue, concurrency), for
    /// the console.
    pub fn destinations(&self) -> Vec<limits::DestinationState> {
        self.inner.limits.destinations()
    }

    /// How many requests wait for their turn, per plugin and destination.
    pub fn waiting(&self) -> Vec<(String, String, usize)> {
        self.inner.limits.waiting()
    }

    /// `setpoint_effects_*` in the Prometheus text format: the counters
    /// ([`Metrics::render`]) and the requests waiting for their turn.
    pub fn render_metrics(&self) -> String {
        use std::fmt::Write as _;
        let mut out = self.inner.metrics.render();
        let name = "setpoint_effects_waiting";
        let _ = writeln!(
            out,
            "# HELP {name} External requests waiting for their turn in the plugin's queue.\n# TYPE {name} gauge"
        );
        for (plugin, destination, n) in self.waiting() {
            let _ = writeln!(
                out,
                "{name}{{plugin=\"{}\",destination=\"{}\"}} {n}",
                metrics::escape(&plugin),
                metrics::escape(&destination)
            );
        }
        out
    }
}

/// The `Idempotency-Key` of a write: the same object, generation and
/// request id give the same key, so a server that honours it applies a
/// repeated write once.
pub fn idempotency_key(object: &Object, id: &str) -> String {
    use sha2::Digest;
    let mut hash = sha2::Sha256::new();
    hash.update(meta::uid(object).as_bytes());
    hash.update([0]);
    hash.update(meta::generation(object).to_le_bytes());
    hash.update(id.as_bytes());
    hash.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

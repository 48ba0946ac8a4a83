//! Effects at scale: the real `setpoint` binary with the `dns` provider
//! plugin keeping N `DnsRecord`s in a real PowerDNS (issue #29, "Effects
//! that hold at ten thousand objects"), loaded with `setpoint apply -f` as
//! a user would.
//!
//! `effects-scale [N] [ZONES]` (default 300 records in 1 zone) starts a
//! throw-away PowerDNS (Debian's `pdns-server` with `pdns-backend-sqlite3`,
//! on free loopback ports, SQLite in WAL mode, no caches) holding the zones
//! `z0.bench.` .. `z{ZONES-1}.bench.`, and, unless the fairness phase is
//! off, a second one holding `other.bench.`; then `setpoint serve` on a
//! fresh data directory with only `dns.wasm` in its plugins directory; it
//! creates the Secret `default/pdns-api` (the first server's API key), the
//! Secret `default/other-api` (the second's) and the `PluginGrant` `dns`
//! listing both servers' URLs and both Secrets from the start (and
//! `spec.limits`, if given), through the HTTP API, writes N `DnsRecord`s
//! (`r{i}` in zone `z{i % ZONES}.bench.`, one A record `192.0.2.X` each,
//! `resyncSeconds: 30`) to one YAML file, runs `setpoint apply -f FILE
//! --server URL`, and prints:
//!
//! - the time from the start of the apply until PowerDNS serves all N
//!   records (its API's zones polled every 250 ms, counting the A RRsets
//!   with the wanted name and contents; the time is taken when the poll
//!   that saw the last one answered), or, after `EFFECTS_TIMEOUT_S`, how
//!   many it served;
//! - the time the apply itself took (the CLI sends the objects one by
//!   one);
//! - the dns plugin's calls per record
//!   (`setpoint_plugin_reconcile_duration_seconds_count{plugin="dns"}`: a
//!   reconcile that reads is two calls) and its reconciles per record
//!   (`controller_runtime_reconcile_total{controller="dns"}`, all results)
//!   and the external requests sent per record
//!   (`setpoint_effects_requests_total{plugin="dns"}`, every class but
//!   `refused`; the refusals, `setpoint_effects_refused_total`, apart);
//! - the server's CPU seconds (user + system, `/proc/PID/stat`) from the
//!   start of the apply until all were served;
//! - then, once the dns workqueue is empty, a steady phase of
//!   `EFFECTS_STEADY_S` seconds in which nothing changes: the zone reads
//!   per zone per 30 s (`setpoint_effects_observations_total{plugin="dns",
//!   outcome="sent"}`; reads answered from another object's read count as
//!   `shared`; if the host has no such family, the requests of
//!   `setpoint_effects_requests_total` instead, which the output says),
//!   the reconciles per record per 30 s, and the server's CPU seconds;
//! - then (unless `EFFECTS_OUTAGE=0`) an outage: PowerDNS is killed (its
//!   config, data and ports kept), every record is changed (the file
//!   re-applied with `192.0.3.X`, `records-outage.yaml`), and after the
//!   apply the driver waits `EFFECTS_OUTAGE_S` seconds while the changes
//!   wait: the server's CPU over that wait as a share of one core, and the
//!   plugin calls per record and requests sent from the kill until
//!   PowerDNS is started again on the same config; then the time from its
//!   API answering again until it serves all N changed records (polled as
//!   above);
//! - then (unless `EFFECTS_FAIRNESS=0`) fairness under load: every record
//!   is changed again (`192.0.4.X`, `records-busy.yaml`); once the apply
//!   has run `EFFECTS_FAIRNESS_AFTER_S` seconds (default 10; it goes on
//!   meanwhile) or has ended, if fewer than half of the changes are served (else the
//!   output says it converged too fast and only the last figure is
//!   taken), at once (a) `other0` is created in `other.bench.` on the
//!   second PowerDNS through the HTTP API, timed until that server serves
//!   it, and (b) `r0` is deleted through the HTTP API, timed until the
//!   host no longer has the object and PowerDNS no longer has its A RRset
//!   (both looked at every 50 ms), each with how many of the busy changes
//!   were served by then; and the time from the start of the re-apply
//!   until all changes (but `r0`'s, when deleted) are served;
//! - a last line `effects-scale n=... zones=... served_s=... ...` with
//!   the same numbers, for scripts; the outage adds `outage_wait_s`,
//!   `outage_cpu_share` (0.07: 7 % of one core), `outage_calls_per_record`
//!   and `recovery_s`; fairness adds `busy_served_at_apply_end`,
//!   `other_server_s`, `deletion_s` and `busy_done_s` (`-`: not measured
//!   or not in time). A phase that does not finish within
//!   `EFFECTS_TIMEOUT_S` prints this line so far and fails, naming what
//!   was missing.
//!
//! Environment: `SETPOINT_BIN` (default `target/release/setpoint`, used
//! for both `serve` and `apply`), `EFFECTS_PLUGINS` (the directory holding
//! `dns.wasm`, default `target/wasm/wasm32-unknown-unknown/plugin`),
//! `EFFECTS_RPS`, `EFFECTS_CONCURRENCY` and `EFFECTS_CPU` (the grant's
//! `spec.limits`: `rps`, `concurrency`, `cpu`; the host's defaults when
//! unset), `EFFECTS_TIMEOUT_S` (default 600; the
//! bound of each phase), `EFFECTS_STEADY_S` (default 60),
//! `EFFECTS_OUTAGE=0` (skip the outage), `EFFECTS_OUTAGE_S` (default 30),
//! `EFFECTS_FAIRNESS=0` (skip fairness, and the second PowerDNS),
//! `EFFECTS_LOG` (the server's log filter, default `warn`; the log goes
//! to `serve.log` in the scratch directory), `EFFECTS_SERVE_ARGS` (more
//! `serve` flags), `EFFECTS_DIR` (where the scratch directory goes,
//! default the system temp dir), `EFFECTS_KEEP=1` (keep the scratch
//! directory, with the data, the manifests, `apply*.log`, `serve.log` and
//! both PowerDNS's files in `pdns/` and `pdns-other/`, and print its
//! path), `SETPOINT_PDNS_SERVER` (the `pdns_server` binary, default
//! `/usr/sbin/pdns_server`). `scripts/bench effects-scale [N] [ZONES]`
//! installs PowerDNS and builds everything first.

use std::cell::Cell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use serde_json::{Value, json};

/// The plugin under test; also its controller's and workqueue's name.
const PLUGIN: &str = "dns";
/// Where the `DnsRecord`s live in the HTTP API.
const RECORDS: &str = "/apis/dns.setpoint.dev/v1/namespaces/default/dnsrecords";
/// Where Secrets of `default` live in the HTTP API.
const SECRETS: &str = "/api/v1/namespaces/default/secrets";
/// Where `PluginGrant`s live in the HTTP API.
const GRANTS: &str = "/apis/setpoint.dev/v1/plugingrants";
/// The Secret holding PowerDNS's API key, and its key.
const SECRET_NAME: &str = "pdns-api";
const SECRET_KEY: &str = "api-key";
/// How often PowerDNS and the metrics are looked at.
const POLL: Duration = Duration::from_millis(250);
/// Where Debian's `pdns-backend-sqlite3` keeps the database schema.
const PDNS_SCHEMA: &str = "/usr/share/pdns-backend-sqlite3/schema/schema.sqlite3.sql";
/// The resync period the records ask for, and the period reads are
/// reported per.
const RESYNC_SECONDS: u64 = 30;
/// The third octet of the records' addresses (`192.0.X.0/24`) in the load
/// phase, the outage phase's re-apply and the fairness phase's re-apply:
/// each re-apply changes every record.
const LOAD_NET: u8 = 2;
const OUTAGE_NET: u8 = 3;
const BUSY_NET: u8 = 4;
/// The fairness phase's second PowerDNS: its zone, the Secret with its
/// API key (under [`SECRET_KEY`]), and the one record created there.
const OTHER_ZONE: &str = "other.bench.";
const OTHER_SECRET_NAME: &str = "other-api";
const OTHER_RECORD: &str = "other0";
const OTHER_ADDRESS: &str = "198.51.100.1";
/// How often the fairness phase's two timings look (a small zone, and one
/// object of the host; the deleted record's zone once the object is gone).
const PROBE_POLL: Duration = Duration::from_millis(50);

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A loopback port free for both UDP and TCP (PowerDNS listens on both).
fn free_port() -> anyhow::Result<u16> {
    for _ in 0..100 {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0")?;
        let port = udp.local_addr()?.port();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    bail!("no loopback port free for both UDP and TCP")
}

/// The last `lines` lines of a log file, for error messages.
fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A throw-away PowerDNS authoritative server (as `tests/support/pdns.rs`
/// runs it): its own config directory, fresh SQLite database, loopback
/// ports. It can be stopped and started again on the same config, data
/// and ports ([`PowerDns::stop`], [`PowerDns::resume`]); killed on drop.
struct PowerDns {
    /// The running server (`None` while stopped).
    child: Option<std::process::Child>,
    dir: PathBuf,
    api_url: String,
    api_key: String,
}

impl PowerDns {
    /// Create the database and configuration in `dir` and start the
    /// server; [`PowerDns::wait_ready`] waits for its API.
    fn start(dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let database = dir.join("pdns.sqlite3");
        let schema = std::fs::read(PDNS_SCHEMA).with_context(|| {
            format!(
                "{PDNS_SCHEMA} (Debian package pdns-backend-sqlite3; scripts/bench installs it)"
            )
        })?;
        let mut sqlite = std::process::Command::new("sqlite3")
            .arg(&database)
            .stdin(Stdio::piped())
            .spawn()
            .context("sqlite3 (Debian package sqlite3; scripts/bench installs it)")?;
        std::io::Write::write_all(
            &mut sqlite.stdin.take().context("sqlite3's standard input")?,
            &schema,
        )?;
        if !sqlite.wait()?.success() {
            bail!("sqlite3 failed to create the PowerDNS schema");
        }

        let (dns_port, web_port) = (free_port()?, free_port()?);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let api_key = format!("bench-key-{}-{nanos}", std::process::id());
        // No caches, as in the tests: what was written last is served.
        let config = format!(
            "launch=gsqlite3\n\
             gsqlite3-database={database}\n\
             gsqlite3-pragma-journal-mode=WAL\n\
             local-address=127.0.0.1\n\
             local-port={dns_port}\n\
             api=yes\n\
             api-key={api_key}\n\
             webserver=yes\n\
             webserver-address=127.0.0.1\n\
             webserver-port={web_port}\n\
             webserver-allow-from=127.0.0.1\n\
             daemon=no\n\
             guardian=no\n\
             socket-dir={socket_dir}\n\
             disable-syslog=yes\n\
             cache-ttl=0\n\
             negquery-cache-ttl=0\n\
             query-cache-ttl=0\n\
             zone-cache-refresh-interval=0\n\
             security-poll-suffix=\n\
             loglevel=4\n",
            database = database.display(),
            socket_dir = dir.display(),
        );
        std::fs::write(dir.join("pdns.conf"), config)?;
        let mut pdns = Self {
            child: None,
            dir: dir.to_owned(),
            api_url: format!("http://127.0.0.1:{web_port}"),
            api_key,
        };
        pdns.resume()?;
        Ok(pdns)
    }

    /// Stop the server (SIGKILL, as a crash would); the config, data and
    /// ports stay for [`PowerDns::resume`].
    fn stop(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().context("killing pdns_server")?;
            child.wait().context("waiting for pdns_server to exit")?;
        }
        Ok(())
    }

    /// Start the server (again) on its config, data and ports, its output
    /// appended to `pdns.log`; [`PowerDns::wait_ready`] waits for its API.
    fn resume(&mut self) -> anyhow::Result<()> {
        if self.child.is_some() {
            bail!("PowerDNS is running already");
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("pdns.log"))?;
        let bin = std::env::var_os("SETPOINT_PDNS_SERVER")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                let debian = PathBuf::from("/usr/sbin/pdns_server");
                if debian.exists() {
                    debian
                } else {
                    "pdns_server".into()
                }
            });
        let child = std::process::Command::new(&bin)
            .arg(format!("--config-dir={}", self.dir.display()))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| {
                format!(
                    "starting {} (Debian package pdns-server; scripts/bench installs it)",
                    bin.display()
                )
            })?;
        self.child = Some(child);
        Ok(())
    }

    /// Wait until the API answers (20 s at most).
    async fn wait_ready(&mut self, http: &reqwest::Client) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let Some(child) = self.child.as_mut() else {
                bail!("PowerDNS is stopped");
            };
            if let Some(status) = child.try_wait()? {
                bail!("pdns_server exited ({status}):\n{}", self.log_tail());
            }
            let answer = self.request(http, reqwest::Method::GET, "").send().await;
            match answer {
                Ok(r) if r.status().is_success() => return Ok(()),
                other if Instant::now() > deadline => bail!(
                    "PowerDNS did not answer within 20 s: {other:?}\n{}",
                    self.log_tail()
                ),
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    fn log_tail(&self) -> String {
        tail(&self.dir.join("pdns.log"), 20)
    }

    /// A request to the API (under `/api/v1/servers/localhost`), with the key.
    fn request(
        &self,
        http: &reqwest::Client,
        method: reqwest::Method,
        path: &str,
    ) -> reqwest::RequestBuilder {
        http.request(
            method,
            format!("{}/api/v1/servers/localhost{path}", self.api_url),
        )
        .header("X-API-Key", &self.api_key)
    }

    /// Create a native zone with nothing but its SOA.
    async fn create_zone(&self, http: &reqwest::Client, zone: &str) -> anyhow::Result<()> {
        let response = self
            .request(http, reqwest::Method::POST, "/zones")
            .json(&json!({"name": zone, "kind": "Native", "nameservers": []}))
            .send()
            .await
            .with_context(|| format!("creating zone {zone} in PowerDNS"))?;
        if response.status() != reqwest::StatusCode::CREATED {
            bail!(
                "creating zone {zone} in PowerDNS: {}: {}",
                response.status(),
                response.text().await.unwrap_or_default()
            );
        }
        Ok(())
    }

    /// The RRsets of `zone` as the API shows them (one GET of the zone).
    async fn rrsets(&self, http: &reqwest::Client, zone: &str) -> anyhow::Result<Vec<Value>> {
        let response = self
            .request(http, reqwest::Method::GET, &format!("/zones/{zone}"))
            .send()
            .await
            .with_context(|| format!("reading zone {zone} from PowerDNS"))?;
        if !response.status().is_success() {
            bail!(
                "reading zone {zone} from PowerDNS: {}: {}",
                response.status(),
                response.text().await.unwrap_or_default()
            );
        }
        let mut body: Value = response
            .json()
            .await
            .with_context(|| format!("zone {zone} from PowerDNS is not JSON"))?;
        Ok(match body["rrsets"].take() {
            Value::Array(rrsets) => rrsets,
            _ => Vec::new(),
        })
    }

    /// How many of the `wanted` records (absolute name → the one A
    /// record's content) the `zones` serve: A RRsets of that name whose
    /// enabled records are exactly the wanted content.
    async fn count_served(
        &self,
        http: &reqwest::Client,
        zones: &[String],
        wanted: &HashMap<String, String>,
    ) -> anyhow::Result<usize> {
        let mut served = 0;
        for zone in zones {
            for rrset in self.rrsets(http, zone).await? {
                if rrset["type"] != "A" {
                    continue;
                }
                let Some(want) = rrset["name"].as_str().and_then(|name| wanted.get(name)) else {
                    continue;
                };
                let contents: Vec<&str> = rrset["records"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|r| r["disabled"] != true)
                    .filter_map(|r| r["content"].as_str())
                    .collect();
                if contents == [want.as_str()] {
                    served += 1;
                }
            }
        }
        Ok(served)
    }

    /// Whether `zone` has an A RRset named `name` (absolute).
    async fn has_a_rrset(
        &self,
        http: &reqwest::Client,
        zone: &str,
        name: &str,
    ) -> anyhow::Result<bool> {
        Ok(self
            .rrsets(http, zone)
            .await?
            .iter()
            .any(|rrset| rrset["type"] == "A" && rrset["name"] == name))
    }
}

impl Drop for PowerDns {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// A running `setpoint serve`, killed on drop.
struct Server {
    child: std::process::Child,
    url: String,
    /// Clock ticks per second of `/proc/PID/stat`'s times.
    ticks_per_second: f64,
}

impl Server {
    fn start(bin: &Path, dir: &Path, port: u16) -> anyhow::Result<Self> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("serve.log"))?;
        let child = std::process::Command::new(bin)
            .arg("serve")
            .arg("--addr")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--data")
            .arg(dir.join("data"))
            .arg("--plugins")
            .arg(dir.join("plugins"))
            .args(
                std::env::var("EFFECTS_SERVE_ARGS")
                    .unwrap_or_default()
                    .split_whitespace(),
            )
            .env(
                "SETPOINT_LOG",
                std::env::var("EFFECTS_LOG").unwrap_or_else(|_| "warn".to_owned()),
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            ticks_per_second: clock_ticks_per_second(),
        })
    }

    async fn wait_ready(&mut self, http: &reqwest::Client, dir: &Path) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "setpoint serve exited ({status}):\n{}",
                    tail(&dir.join("serve.log"), 20)
                );
            }
            if let Ok(r) = http.get(format!("{}/readyz", self.url)).send().await
                && r.status().is_success()
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the server did not become ready in 2 minutes");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// CPU seconds (user + system) the server has used so far.
    fn cpu_seconds(&self) -> anyhow::Result<f64> {
        let pid = self.child.id();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .with_context(|| format!("reading /proc/{pid}/stat (has the server exited?)"))?;
        // The fields after the command name, which is in parentheses:
        // utime and stime are fields 14 and 15 (1-based), 11 and 12 here.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| -> anyhow::Result<u64> {
            fields
                .get(i)
                .and_then(|f| f.parse().ok())
                .with_context(|| format!("/proc/{pid}/stat: no CPU times in {stat:?}"))
        };
        Ok((ticks(11)? + ticks(12)?) as f64 / self.ticks_per_second)
    }

    /// The server's `/metrics` page.
    async fn metrics(&self, http: &reqwest::Client) -> anyhow::Result<Metrics> {
        let text = http
            .get(format!("{}/metrics", self.url))
            .send()
            .await
            .context("GET /metrics")?
            .error_for_status()
            .context("GET /metrics")?
            .text()
            .await?;
        Ok(Metrics(text))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `getconf CLK_TCK`, else the usual 100.
fn clock_ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.trim().parse::<f64>().ok())
        .filter(|ticks| *ticks > 0.0)
        .unwrap_or(100.0)
}

/// One scrape of `/metrics` (the Prometheus text format).
struct Metrics(String);

impl Metrics {
    /// Whether the page has the family `name` (a `# TYPE` line or a sample).
    fn has_family(&self, name: &str) -> bool {
        self.0.lines().any(|line| {
            line.strip_prefix("# TYPE ")
                .and_then(|rest| rest.split_whitespace().next())
                == Some(name)
                || sample_name(line) == Some(name)
        })
    }

    /// The sum of the samples of family `name` whose labels include every
    /// `(label, value)` of `matching` and none of `excluding`.
    fn sum(&self, name: &str, matching: &[(&str, &str)], excluding: &[(&str, &str)]) -> f64 {
        self.0
            .lines()
            .filter(|line| sample_name(line) == Some(name))
            .filter_map(|line| {
                let (labels, value) = parse_sample(line)?;
                let has = |(k, v): &(&str, &str)| labels.iter().any(|(l, x)| l == k && x == v);
                (matching.iter().all(has) && !excluding.iter().any(has)).then_some(value)
            })
            .sum()
    }

    /// The dns controller's reconciles (every result), or, if the page has
    /// no such series, the plugin's tally (`setpoint_plugin_reconciles_total`).
    fn reconciles(&self) -> f64 {
        let by_controller = [("controller", PLUGIN)];
        if self.0.lines().any(|line| {
            sample_name(line) == Some("controller_runtime_reconcile_total")
                && parse_sample(line).is_some_and(|(labels, _)| {
                    labels.iter().any(|(k, v)| k == "controller" && v == PLUGIN)
                })
        }) {
            self.sum("controller_runtime_reconcile_total", &by_controller, &[])
        } else {
            self.sum(
                "setpoint_plugin_reconciles_total",
                &[("plugin", PLUGIN)],
                &[],
            )
        }
    }

    /// Calls of the plugin's Wasm reconcile (a reconcile with a read is
    /// two: the call that asks for it and the one with its answer).
    fn calls(&self) -> f64 {
        self.sum(
            "setpoint_plugin_reconcile_duration_seconds_count",
            &[("plugin", PLUGIN)],
            &[],
        )
    }

    /// External requests the plugin sent (every class but `refused`).
    fn requests_sent(&self) -> f64 {
        self.sum(
            "setpoint_effects_requests_total",
            &[("plugin", PLUGIN)],
            &[("class", "refused")],
        )
    }

    /// External requests of the plugin the host did not send.
    fn requests_refused(&self) -> f64 {
        self.sum("setpoint_effects_refused_total", &[("plugin", PLUGIN)], &[])
    }

    /// Observations of the plugin with this `outcome` (`sent`, `shared`).
    fn observations(&self, outcome: &str) -> f64 {
        self.sum(
            OBSERVATIONS,
            &[("plugin", PLUGIN), ("outcome", outcome)],
            &[],
        )
    }

    /// Keys waiting in the dns workqueue.
    fn queue_depth(&self) -> f64 {
        self.sum("workqueue_depth", &[("name", PLUGIN)], &[])
    }
}

/// The family counting zone reads sent and shared.
const OBSERVATIONS: &str = "setpoint_effects_observations_total";

/// The metric name of a sample line (`None` for comments and blanks).
fn sample_name(line: &str) -> Option<&str> {
    if line.starts_with('#') || line.trim().is_empty() {
        return None;
    }
    let end = line.find(['{', ' ']).unwrap_or(line.len());
    Some(&line[..end])
}

/// A sample line's labels and value.
fn parse_sample(line: &str) -> Option<(Vec<(String, String)>, f64)> {
    let value = line.rsplit(' ').next()?.parse().ok()?;
    let mut labels = Vec::new();
    if let Some(open) = line.find('{') {
        let mut chars = line[open + 1..].chars();
        loop {
            let mut key = String::new();
            for c in chars.by_ref() {
                match c {
                    '=' => break,
                    '}' if key.is_empty() => return Some((labels, value)),
                    ',' | ' ' => {}
                    c => key.push(c),
                }
            }
            if chars.next() != Some('"') {
                return None;
            }
            let mut text = String::new();
            while let Some(c) = chars.next() {
                match c {
                    '"' => break,
                    '\\' => match chars.next()? {
                        'n' => text.push('\n'),
                        other => text.push(other),
                    },
                    c => text.push(c),
                }
            }
            labels.push((key, text));
        }
    }
    Some((labels, value))
}

/// The zone of record `i`, with its trailing dot.
fn zone_of(i: usize, zones: usize) -> String {
    format!("z{}.bench.", i % zones)
}

/// The A record's content of record `i` in the /24 `net` (the third
/// octet of `192.0.X.0`: [`LOAD_NET`], [`OUTAGE_NET`], [`BUSY_NET`]).
fn address_of(i: usize, net: u8) -> String {
    format!("192.0.{net}.{}", i % 254 + 1)
}

/// What PowerDNS should serve once the manifest of `net` is applied:
/// each record's absolute name → its address.
fn wanted_of(n: usize, zones: usize, net: u8) -> HashMap<String, String> {
    (0..n)
        .map(|i| (fqdn_of(i, zones), address_of(i, net)))
        .collect()
}

/// The absolute name of record `i`.
fn fqdn_of(i: usize, zones: usize) -> String {
    format!("r{i}.{}", zone_of(i, zones))
}

/// N `DnsRecord`s (addresses in the /24 `net`) as one multi-document YAML
/// manifest.
fn manifest(n: usize, zones: usize, pdns_url: &str, net: u8) -> String {
    let mut out = String::with_capacity(n * 400);
    for i in 0..n {
        out.push_str(&format!(
            "---\n\
             apiVersion: dns.setpoint.dev/v1\n\
             kind: DnsRecord\n\
             metadata:\n  name: r{i}\n  namespace: default\n\
             spec:\n  zone: \"{zone}\"\n  name: r{i}\n  type: A\n  ttl: 300\n\
             \x20 records: [\"{address}\"]\n  resyncSeconds: {RESYNC_SECONDS}\n\
             \x20 server:\n    url: \"{pdns_url}\"\n\
             \x20   apiKeySecretRef: {{name: {SECRET_NAME}, key: {SECRET_KEY}}}\n",
            zone = zone_of(i, zones),
            address = address_of(i, net),
        ));
    }
    out
}

/// DELETE `path` of the server; fails unless the server accepted it.
async fn delete(http: &reqwest::Client, server: &Server, path: &str) -> anyhow::Result<()> {
    let response = http
        .delete(format!("{}{path}", server.url))
        .send()
        .await
        .with_context(|| format!("DELETE {path}"))?;
    if !response.status().is_success() {
        bail!(
            "DELETE {path}: {}: {}",
            response.status(),
            response.text().await.unwrap_or_default()
        );
    }
    Ok(())
}

/// Whether GET `path` of the server answers 404 (200: still there).
async fn is_gone(http: &reqwest::Client, server: &Server, path: &str) -> anyhow::Result<bool> {
    let response = http
        .get(format!("{}{path}", server.url))
        .send()
        .await
        .with_context(|| format!("GET {path}"))?;
    match response.status() {
        reqwest::StatusCode::NOT_FOUND => Ok(true),
        status if status.is_success() => Ok(false),
        status => bail!(
            "GET {path}: {status}: {}",
            response.text().await.unwrap_or_default()
        ),
    }
}

/// POST `object` to `path` of the server; fails unless it was created.
async fn create(
    http: &reqwest::Client,
    server: &Server,
    path: &str,
    object: Value,
) -> anyhow::Result<()> {
    let response = http
        .post(format!("{}{path}", server.url))
        .json(&object)
        .send()
        .await
        .with_context(|| format!("POST {path}"))?;
    if !response.status().is_success() {
        bail!(
            "POST {path}: {}: {}",
            response.status(),
            response.text().await.unwrap_or_default()
        );
    }
    Ok(())
}

/// Wait until GET `path` answers 200 (30 s at most).
async fn until_present(http: &reqwest::Client, server: &Server, path: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let response = http.get(format!("{}{path}", server.url)).send().await;
        if let Ok(r) = &response
            && r.status().is_success()
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("GET {path} did not answer 200 within 30 s: {response:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A PowerDNS the plugin is granted, and the Secret (in `default`, under
/// [`SECRET_KEY`]) holding its API key.
struct Backend<'a> {
    pdns: &'a PowerDns,
    secret: &'a str,
}

/// For each backend the Secret with its API key, and one `PluginGrant`
/// for `dns` listing every backend's URL and Secret (its limits from
/// `EFFECTS_RPS`/`EFFECTS_CONCURRENCY`), through the HTTP API; returns
/// once the server shows them all and the DnsRecord kind.
async fn grant(
    http: &reqwest::Client,
    server: &Server,
    backends: &[Backend<'_>],
    limits: &Value,
) -> anyhow::Result<()> {
    until_present(http, server, RECORDS).await.context(
        "the dns plugin did not define DnsRecord (is dns.wasm in the plugins directory?)",
    )?;
    for backend in backends {
        create(
            http,
            server,
            SECRETS,
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": backend.secret, "namespace": "default"},
                   "stringData": {SECRET_KEY: backend.pdns.api_key}}),
        )
        .await?;
    }
    let destinations: Vec<&str> = backends.iter().map(|b| b.pdns.api_url.as_str()).collect();
    let secrets: Vec<String> = backends
        .iter()
        .map(|b| format!("default/{}/{SECRET_KEY}", b.secret))
        .collect();
    let mut spec = json!({"destinations": destinations, "secrets": secrets});
    if limits.as_object().is_some_and(|l| !l.is_empty()) {
        spec["limits"] = limits.clone();
    }
    create(
        http,
        server,
        GRANTS,
        json!({"apiVersion": "setpoint.dev/v1", "kind": "PluginGrant",
               "metadata": {"name": PLUGIN}, "spec": spec}),
    )
    .await?;
    for backend in backends {
        until_present(http, server, &format!("{SECRETS}/{}", backend.secret)).await?;
    }
    until_present(http, server, &format!("{GRANTS}/{PLUGIN}")).await?;
    // The host follows grants through an informer: give it a moment, so
    // that the first reconciles do not meet a grant it has not seen yet.
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok(())
}

/// The grant's `spec.limits` from the environment (empty: the defaults).
fn limits_from_env() -> anyhow::Result<Value> {
    let mut limits = serde_json::Map::new();
    if let Ok(rps) = std::env::var("EFFECTS_RPS") {
        let rps: f64 = rps.parse().context("EFFECTS_RPS must be a number")?;
        limits.insert("rps".into(), json!(rps));
    }
    if let Ok(concurrency) = std::env::var("EFFECTS_CONCURRENCY") {
        let concurrency: u64 = concurrency
            .parse()
            .context("EFFECTS_CONCURRENCY must be a whole number")?;
        limits.insert("concurrency".into(), json!(concurrency));
    }
    if let Ok(cpu) = std::env::var("EFFECTS_CPU") {
        let cpu: f64 = cpu.parse().context("EFFECTS_CPU must be a number")?;
        limits.insert("cpu".into(), json!(cpu));
    }
    Ok(Value::Object(limits))
}

/// The binary and the plugins directory (with only `dns.wasm`) in `dir`.
fn prepare(dir: &Path) -> anyhow::Result<PathBuf> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bin = std::env::var_os("SETPOINT_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target/release/setpoint"));
    if !bin.exists() {
        bail!(
            "{} not found (cargo build --release -p setpoint-cli --bin setpoint, or set SETPOINT_BIN)",
            bin.display()
        );
    }
    let built = std::env::var_os("EFFECTS_PLUGINS")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target/wasm/wasm32-unknown-unknown/plugin"));
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins)?;
    let file = format!("{PLUGIN}.wasm");
    std::fs::copy(built.join(&file), plugins.join(&file)).with_context(|| {
        format!(
            "copying {} (build the plugin first: scripts/bench effects-scale does)",
            built.join(&file).display()
        )
    })?;
    Ok(bin)
}

/// What the load phase measured.
struct Load {
    /// Records PowerDNS served at the end.
    served: usize,
    /// From the start of the apply until all were served (`None`: timed out).
    served_after: Option<Duration>,
    /// How long `setpoint apply` ran (`None`: still running at the timeout).
    apply: Option<Duration>,
    /// The dns controller's reconciles (turns).
    reconciles: f64,
    /// Calls of the plugin's Wasm (a turn with a read is two or more).
    calls: f64,
    sent: f64,
    refused: f64,
    cpu_seconds: f64,
}

/// Run `setpoint apply -f manifest` and poll PowerDNS until it serves
/// every wanted record or `timeout` passes.
#[allow(clippy::too_many_arguments)]
async fn load(
    http: &reqwest::Client,
    bin: &Path,
    dir: &Path,
    server: &Server,
    pdns: &PowerDns,
    zones: &[String],
    wanted: &HashMap<String, String>,
    timeout: Duration,
) -> anyhow::Result<Load> {
    let n = wanted.len();
    let before = server.metrics(http).await?;
    let cpu_before = server.cpu_seconds()?;
    let apply_log = dir.join("apply.log");
    let Apply {
        task: mut applying,
        started,
    } = Apply::start(bin, &dir.join("records.yaml"), &apply_log, &server.url)?;
    // When the apply exited (successfully: a failure ends the run).
    let mut applied: Option<Instant> = None;
    let deadline = started + timeout;
    let mut progress = Instant::now();
    let (served, served_at) = loop {
        if applied.is_none() && applying.is_finished() {
            let (status, at) = (&mut applying).await.context("waiting for the apply")?;
            applied = Some(applied_at(status, at, started, n, &apply_log, "apply")?);
        }
        let served = pdns.count_served(http, zones, wanted).await?;
        let now = Instant::now();
        if served == n {
            break (served, Some(now));
        }
        if now > deadline {
            break (served, None);
        }
        if progress.elapsed() >= Duration::from_secs(10) {
            eprintln!(
                "  ... {served} of {n} served after {:.0} s{}",
                started.elapsed().as_secs_f64(),
                if applied.is_some() {
                    ""
                } else {
                    " (still applying)"
                }
            );
            progress = Instant::now();
        }
        tokio::time::sleep(POLL).await;
    };
    let cpu_seconds = server.cpu_seconds()? - cpu_before;
    let after = server.metrics(http).await?;
    if applied.is_none() {
        if served_at.is_some() {
            // Everything was served before the CLI exited: wait for it, so
            // that its time is known and the steady phase starts without it.
            let (status, at) = applying.await.context("waiting for the apply")?;
            applied = Some(applied_at(status, at, started, n, &apply_log, "apply")?);
        } else {
            // Timed out: the child is killed with its task.
            applying.abort();
        }
    }
    Ok(Load {
        served,
        served_after: served_at.map(|at| at - started),
        apply: applied.map(|at| at - started),
        reconciles: after.reconciles() - before.reconciles(),
        calls: after.calls() - before.calls(),
        sent: after.requests_sent() - before.requests_sent(),
        refused: after.requests_refused() - before.requests_refused(),
        cpu_seconds,
    })
}

/// Check how an apply ended (its log's tail if it failed), print how
/// long it took (`{label}: N DnsRecords applied in ...`), and return when
/// it ended.
fn applied_at(
    status: std::io::Result<ExitStatus>,
    at: Instant,
    started: Instant,
    n: usize,
    log: &Path,
    label: &str,
) -> anyhow::Result<Instant> {
    let status = status.context("waiting for the apply")?;
    if !status.success() {
        bail!("setpoint apply failed ({status}):\n{}", tail(log, 20));
    }
    println!(
        "{label}: {n} DnsRecords applied in {:.1} s",
        (at - started).as_secs_f64()
    );
    Ok(at)
}

/// A running `setpoint apply -f`: its task ends with the CLI's exit
/// status and when it exited (the CLI is killed if the task is dropped
/// or aborted).
struct Apply {
    task: tokio::task::JoinHandle<(std::io::Result<ExitStatus>, Instant)>,
    /// When the CLI was started.
    started: Instant,
}

impl Apply {
    /// Run `bin apply -f manifest --server server_url`, its output to `log`.
    fn start(bin: &Path, manifest: &Path, log: &Path, server_url: &str) -> anyhow::Result<Self> {
        let log = std::fs::File::create(log)?;
        let started = Instant::now();
        let mut child = tokio::process::Command::new(bin)
            .arg("apply")
            .arg("-f")
            .arg(manifest)
            .arg("--server")
            .arg(server_url)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {} apply", bin.display()))?;
        let task = tokio::spawn(async move {
            let status = child.wait().await;
            (status, Instant::now())
        });
        Ok(Self { task, started })
    }

    /// Wait for the CLI to exit successfully, by `deadline` at the latest
    /// (else it is killed and this fails), and print how long it took;
    /// returns when it exited.
    async fn finish(
        self,
        deadline: Instant,
        n: usize,
        log: &Path,
        label: &str,
    ) -> anyhow::Result<Instant> {
        let Self { mut task, started } = self;
        let waited = tokio::time::timeout_at(deadline.into(), &mut task).await;
        let Ok(joined) = waited else {
            task.abort();
            bail!(
                "{label}: setpoint apply of {n} DnsRecords did not finish within {:.0} s (EFFECTS_TIMEOUT_S):\n{}",
                (deadline - started).as_secs_f64(),
                tail(log, 20)
            );
        };
        let (status, at) = joined.context("waiting for the apply")?;
        applied_at(status, at, started, n, log, label)
    }
}

/// What the steady phase measured.
struct Steady {
    /// Zone reads sent per zone per 30 s.
    reads_per_zone: f64,
    /// Where the reads were counted: `observations` or `requests`.
    source: &'static str,
    /// Reads answered from another object's read, per zone per 30 s.
    shared_per_zone: Option<f64>,
    /// Reconciles per record per 30 s.
    reconciles_per_record: f64,
    cpu_seconds: f64,
    seconds: f64,
}

/// Wait until the dns workqueue is empty (a minute at most), then measure
/// `length` with nothing changing.
async fn steady(
    http: &reqwest::Client,
    server: &Server,
    n: usize,
    zones: usize,
    length: Duration,
) -> anyhow::Result<Steady> {
    let settling = Instant::now();
    while server.metrics(http).await?.queue_depth() > 0.0 {
        if settling.elapsed() > Duration::from_secs(60) {
            eprintln!("  (the dns workqueue is still not empty after 60 s; measuring anyway)");
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    println!(
        "steady: the dns workqueue empty {:.1} s after the load phase; measuring {} s with nothing changing",
        settling.elapsed().as_secs_f64(),
        length.as_secs()
    );
    let before = server.metrics(http).await?;
    let cpu_before = server.cpu_seconds()?;
    let started = Instant::now();
    tokio::time::sleep(length).await;
    let after = server.metrics(http).await?;
    let cpu_seconds = server.cpu_seconds()? - cpu_before;
    let seconds = started.elapsed().as_secs_f64();
    let periods = seconds / RESYNC_SECONDS as f64;
    let per_zone = |count: f64| count / zones as f64 / periods;
    let (reads, source, shared) = if after.has_family(OBSERVATIONS) {
        let sent = after.observations("sent") - before.observations("sent");
        let shared = after.observations("shared") - before.observations("shared");
        (sent, "observations", Some(per_zone(shared)))
    } else {
        println!(
            "steady: /metrics has no {OBSERVATIONS}: counting setpoint_effects_requests_total instead (every request, writes too)"
        );
        (
            after.requests_sent() - before.requests_sent(),
            "requests",
            None,
        )
    };
    Ok(Steady {
        reads_per_zone: per_zone(reads),
        source,
        shared_per_zone: shared,
        reconciles_per_record: (after.reconciles() - before.reconciles()) / n as f64 / periods,
        cpu_seconds,
        seconds,
    })
}

/// What the outage phase measured.
struct Outage {
    /// The wait after the re-apply, PowerDNS still stopped.
    wait: Duration,
    /// The server's CPU seconds over that wait.
    wait_cpu_seconds: f64,
    /// Plugin calls from stopping PowerDNS until starting it again.
    calls: f64,
    /// Of those, the calls during the wait.
    wait_calls: f64,
    /// Requests sent to PowerDNS (all failing) from the stop to the start.
    sent: f64,
    /// From starting PowerDNS again until its API answered.
    restart: Duration,
    /// Changed records PowerDNS served at the end.
    served: usize,
    /// From its API answering again until it served every changed record
    /// (`None`: not within `EFFECTS_TIMEOUT_S`).
    recovered_after: Option<Duration>,
}

/// Stop PowerDNS, re-apply every record with an address in
/// [`OUTAGE_NET`], wait `length` while the changes wait, start PowerDNS
/// again and poll until it serves every changed record or `timeout`
/// passes.
#[allow(clippy::too_many_arguments)]
async fn outage(
    http: &reqwest::Client,
    bin: &Path,
    dir: &Path,
    server: &Server,
    pdns: &mut PowerDns,
    zones: &[String],
    n: usize,
    timeout: Duration,
    length: Duration,
) -> anyhow::Result<Outage> {
    let before = server.metrics(http).await?;
    pdns.stop()?;
    println!(
        "outage: PowerDNS stopped; re-applying the {n} DnsRecords with addresses 192.0.{OUTAGE_NET}.X"
    );
    let manifest_path = dir.join("records-outage.yaml");
    std::fs::write(
        &manifest_path,
        manifest(n, zones.len(), &pdns.api_url, OUTAGE_NET),
    )?;
    let log = dir.join("apply-outage.log");
    let apply = Apply::start(bin, &manifest_path, &log, &server.url)?;
    let deadline = apply.started + timeout;
    apply.finish(deadline, n, &log, "outage").await?;

    println!(
        "outage: waiting {} s with the changes waiting for PowerDNS",
        length.as_secs()
    );
    let wait_before = server.metrics(http).await?;
    let cpu_before = server.cpu_seconds()?;
    let waiting = Instant::now();
    tokio::time::sleep(length).await;
    let wait_cpu_seconds = server.cpu_seconds()? - cpu_before;
    let wait = waiting.elapsed();
    let after = server.metrics(http).await?;

    let restarting = Instant::now();
    pdns.resume()?;
    pdns.wait_ready(http).await?;
    let answering = Instant::now();
    let wanted = wanted_of(n, zones.len(), OUTAGE_NET);
    let deadline = answering + timeout;
    let mut progress = Instant::now();
    let mut served = 0;
    let recovered_at = loop {
        let failure = match pdns.count_served(http, zones, &wanted).await {
            Ok(count) => {
                served = count;
                None
            }
            // A connection pooled before the restart may fail once: look
            // again, unless it keeps failing until the deadline.
            Err(error) => Some(error),
        };
        let now = Instant::now();
        if served == n {
            break Some(now);
        }
        if now > deadline {
            if let Some(error) = failure {
                return Err(error.context("recovery: reading PowerDNS after its restart"));
            }
            break None;
        }
        if progress.elapsed() >= Duration::from_secs(10) {
            eprintln!(
                "  ... {served} of {n} changed records served {:.0} s after PowerDNS answered again",
                answering.elapsed().as_secs_f64()
            );
            progress = Instant::now();
        }
        tokio::time::sleep(POLL).await;
    };
    Ok(Outage {
        wait,
        wait_cpu_seconds,
        calls: after.calls() - before.calls(),
        wait_calls: after.calls() - wait_before.calls(),
        sent: after.requests_sent() - before.requests_sent(),
        restart: answering - restarting,
        served,
        recovered_after: recovered_at.map(|at| at - answering),
    })
}

/// What the fairness phase measured.
struct Fairness {
    /// Changes PowerDNS served when the re-apply ended.
    served_when_applied: usize,
    /// The timings taken while the queue was busy (`None`: half or more
    /// of the changes were served before they could start).
    probes: Option<Probes>,
    /// The changes waited for to the end (all but `r0` if it was deleted).
    busy: usize,
    /// Of those, served at the end.
    busy_served: usize,
    /// From the start of the re-apply until all were served (`None`: not
    /// within `EFFECTS_TIMEOUT_S`).
    busy_done_after: Option<Duration>,
}

/// The fairness phase's two timings.
struct Probes {
    /// Creating a record on the second PowerDNS until it serves it.
    other_server: Probe,
    /// Deleting `r0` until neither PowerDNS nor the host has it.
    deletion: Probe,
}

/// One timing taken while the queue was busy.
struct Probe {
    /// From the request until it took effect (`None`: not within
    /// `EFFECTS_TIMEOUT_S` of the re-apply's start).
    after: Option<Duration>,
    /// Busy changes served at that moment (at the last look).
    busy_served: usize,
}

/// Re-apply every record with an address in [`BUSY_NET`]; once the apply
/// has ended, if fewer than half of the changes are served, create a
/// record on the second PowerDNS (`other`) and delete `r0`, timing both
/// while polling the rest of the changes until all are served or
/// `timeout` (from the re-apply's start) passes.
#[allow(clippy::too_many_arguments)]
async fn fairness(
    http: &reqwest::Client,
    bin: &Path,
    dir: &Path,
    server: &Server,
    pdns: &PowerDns,
    other: &PowerDns,
    zones: &[String],
    n: usize,
    timeout: Duration,
) -> anyhow::Result<Fairness> {
    println!(
        "fairness: re-applying the {n} DnsRecords with addresses 192.0.{BUSY_NET}.X to make the queue busy"
    );
    let manifest_path = dir.join("records-busy.yaml");
    std::fs::write(
        &manifest_path,
        manifest(n, zones.len(), &pdns.api_url, BUSY_NET),
    )?;
    let log = dir.join("apply-busy.log");
    let apply = Apply::start(bin, &manifest_path, &log, &server.url)?;
    let started = apply.started;
    let deadline = started + timeout;
    // The timings start while the apply still feeds the queue
    // (EFFECTS_FAIRNESS_AFTER_S into it), or when it ends if sooner.
    let probe_at = started + Duration::from_secs(env_or("EFFECTS_FAIRNESS_AFTER_S", 10));
    let finishing = apply.finish(deadline, n, &log, "fairness");
    tokio::pin!(finishing);
    let applied = tokio::select! {
        done = &mut finishing => { done?; true }
        () = tokio::time::sleep_until(probe_at.into()) => false,
    };

    let mut wanted = wanted_of(n, zones.len(), BUSY_NET);
    let served_when_applied = pdns.count_served(http, zones, &wanted).await?;
    println!(
        "fairness: {served_when_applied} of {n} changes served {:.1} s into the re-apply{}",
        started.elapsed().as_secs_f64(),
        if applied {
            " (the apply ended)"
        } else {
            " (the apply goes on)"
        }
    );
    let busy_served = Cell::new(served_when_applied);
    let (probes, busy_done_at) = if served_when_applied * 2 < n {
        wanted.remove(&fqdn_of(0, zones.len()));
        let rest_of_apply = async {
            if !applied {
                (&mut finishing).await?;
            }
            anyhow::Ok(())
        };
        let (busy_done_at, other_server, deletion, ()) = tokio::try_join!(
            until_served(http, pdns, zones, &wanted, started, deadline, &busy_served),
            time_other_server(http, server, other, deadline, &busy_served),
            time_deletion(http, server, pdns, zones.len(), deadline, &busy_served),
            rest_of_apply,
        )?;
        let probes = Probes {
            other_server,
            deletion,
        };
        (Some(probes), busy_done_at)
    } else {
        println!(
            "fairness: half or more of the changes were served before the apply ended: converged too fast to measure; skipping the timings (more records or a lower EFFECTS_RPS keep the queue busy longer)"
        );
        if !applied {
            finishing.await?;
        }
        let done = until_served(http, pdns, zones, &wanted, started, deadline, &busy_served);
        (None, done.await?)
    };
    Ok(Fairness {
        served_when_applied,
        probes,
        busy: wanted.len(),
        busy_served: busy_served.get(),
        busy_done_after: busy_done_at.map(|at| at - started),
    })
}

/// Poll PowerDNS until it serves every `wanted` record (returns when the
/// poll that saw the last one answered) or `deadline` passes (`None`),
/// keeping the count in `progress`.
async fn until_served(
    http: &reqwest::Client,
    pdns: &PowerDns,
    zones: &[String],
    wanted: &HashMap<String, String>,
    started: Instant,
    deadline: Instant,
    progress: &Cell<usize>,
) -> anyhow::Result<Option<Instant>> {
    let mut reported = Instant::now();
    loop {
        let served = pdns.count_served(http, zones, wanted).await?;
        progress.set(served);
        let now = Instant::now();
        if served == wanted.len() {
            return Ok(Some(now));
        }
        if now > deadline {
            return Ok(None);
        }
        if reported.elapsed() >= Duration::from_secs(10) {
            eprintln!(
                "  ... {served} of {} changes served after {:.0} s",
                wanted.len(),
                started.elapsed().as_secs_f64()
            );
            reported = Instant::now();
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Create [`OTHER_RECORD`] on the second PowerDNS through the HTTP API
/// and time until that PowerDNS serves it.
async fn time_other_server(
    http: &reqwest::Client,
    server: &Server,
    other: &PowerDns,
    deadline: Instant,
    busy_served: &Cell<usize>,
) -> anyhow::Result<Probe> {
    let zones = [OTHER_ZONE.to_owned()];
    let wanted = HashMap::from([(
        format!("{OTHER_RECORD}.{OTHER_ZONE}"),
        OTHER_ADDRESS.to_owned(),
    )]);
    let record = json!({
        "apiVersion": "dns.setpoint.dev/v1", "kind": "DnsRecord",
        "metadata": {"name": OTHER_RECORD, "namespace": "default"},
        "spec": {
            "zone": OTHER_ZONE, "name": OTHER_RECORD, "type": "A", "ttl": 300,
            "records": [OTHER_ADDRESS], "resyncSeconds": RESYNC_SECONDS,
            "server": {"url": other.api_url,
                       "apiKeySecretRef": {"name": OTHER_SECRET_NAME, "key": SECRET_KEY}},
        },
    });
    let created = Instant::now();
    create(http, server, RECORDS, record).await?;
    loop {
        let served = other.count_served(http, &zones, &wanted).await? == 1;
        let now = Instant::now();
        if served || now > deadline {
            return Ok(Probe {
                after: served.then(|| now - created),
                busy_served: busy_served.get(),
            });
        }
        tokio::time::sleep(PROBE_POLL).await;
    }
}

/// Delete `r0` through the HTTP API and time until the host no longer has
/// the object and PowerDNS no longer has its A RRset.
async fn time_deletion(
    http: &reqwest::Client,
    server: &Server,
    pdns: &PowerDns,
    zone_count: usize,
    deadline: Instant,
    busy_served: &Cell<usize>,
) -> anyhow::Result<Probe> {
    let path = format!("{RECORDS}/r0");
    let (zone, fqdn) = (zone_of(0, zone_count), fqdn_of(0, zone_count));
    let deleted = Instant::now();
    delete(http, server, &path).await?;
    loop {
        // The finalizer keeps the object until the record is gone, so the
        // zone is read only once the object is.
        let gone =
            is_gone(http, server, &path).await? && !pdns.has_a_rrset(http, &zone, &fqdn).await?;
        let now = Instant::now();
        if gone || now > deadline {
            return Ok(Probe {
                after: gone.then(|| now - deleted),
                busy_served: busy_served.get(),
            });
        }
        tokio::time::sleep(PROBE_POLL).await;
    }
}

/// Seconds with `decimals` decimals, or `-` when unknown.
fn seconds_or_dash(d: Option<Duration>, decimals: usize) -> String {
    d.map_or_else(
        || "-".to_owned(),
        |d| format!("{:.*}", decimals, d.as_secs_f64()),
    )
}

/// What to run, from the environment.
struct Settings {
    /// Each phase's bound (`EFFECTS_TIMEOUT_S`).
    timeout: Duration,
    /// The steady phase's length.
    steady: Duration,
    /// The outage phase's wait (`None`: `EFFECTS_OUTAGE=0`).
    outage: Option<Duration>,
    /// Whether the fairness phase runs (`EFFECTS_FAIRNESS=0`: not).
    fairness: bool,
    /// The grant's `spec.limits`.
    limits: Value,
}

impl Settings {
    fn from_env() -> anyhow::Result<Self> {
        Ok(Self {
            timeout: Duration::from_secs(env_or("EFFECTS_TIMEOUT_S", 600u64)),
            steady: Duration::from_secs(env_or("EFFECTS_STEADY_S", 60u64)),
            outage: enabled("EFFECTS_OUTAGE")
                .then(|| Duration::from_secs(env_or("EFFECTS_OUTAGE_S", 30u64))),
            fairness: enabled("EFFECTS_FAIRNESS"),
            limits: limits_from_env()?,
        })
    }
}

/// Whether the phase switched by the variable `name` runs: unless it is `0`.
fn enabled(name: &str) -> bool {
    !matches!(std::env::var(name).as_deref().map(str::trim), Ok("0"))
}

async fn run(n: usize, zones: usize) -> anyhow::Result<()> {
    if n == 0 || zones == 0 {
        bail!("usage: effects-scale [N >= 1] [ZONES >= 1]");
    }
    let settings = Settings::from_env()?;
    let scratch = tempfile::Builder::new()
        .prefix("setpoint-effects-scale")
        .tempdir_in(
            std::env::var_os("EFFECTS_DIR").map_or_else(std::env::temp_dir, PathBuf::from),
        )?;
    let dir = scratch.path().to_owned();
    let outcome = measure(n, zones, &dir, &settings).await;
    if std::env::var_os("EFFECTS_KEEP").is_some() {
        println!("kept {}", scratch.keep().display());
    }
    outcome
}

async fn measure(n: usize, zones: usize, dir: &Path, settings: &Settings) -> anyhow::Result<()> {
    let timeout = settings.timeout;
    let limits = &settings.limits;
    let bin = prepare(dir)?;
    // Idle connections are dropped before the server's 30 s header-read
    // timeout closes them: a phase that waits 30 s (the outage) otherwise
    // sends its next request on a connection the server is closing that
    // instant ("connection reset by peer").
    let http = reqwest::Client::builder()
        .pool_idle_timeout(Duration::from_secs(20))
        .build()?;

    let mut pdns = PowerDns::start(&dir.join("pdns"))?;
    pdns.wait_ready(&http).await?;
    let zone_names: Vec<String> = (0..zones).map(|j| zone_of(j, zones)).collect();
    for zone in &zone_names {
        pdns.create_zone(&http, zone).await?;
    }
    let wanted = wanted_of(n, zones, LOAD_NET);
    std::fs::write(
        dir.join("records.yaml"),
        manifest(n, zones, &pdns.api_url, LOAD_NET),
    )?;
    // The fairness phase's second PowerDNS, granted from the start.
    let other = if settings.fairness {
        let mut other = PowerDns::start(&dir.join("pdns-other"))?;
        other.wait_ready(&http).await?;
        other.create_zone(&http, OTHER_ZONE).await?;
        Some(other)
    } else {
        None
    };

    let mut server = Server::start(&bin, dir, free_port()?)?;
    server.wait_ready(&http, dir).await?;
    {
        let mut backends = vec![Backend {
            pdns: &pdns,
            secret: SECRET_NAME,
        }];
        if let Some(other) = &other {
            backends.push(Backend {
                pdns: other,
                secret: OTHER_SECRET_NAME,
            });
        }
        grant(&http, &server, &backends, limits).await?;
    }
    let limits_text = if limits.as_object().is_some_and(|l| !l.is_empty()) {
        limits.to_string()
    } else {
        "the host's defaults".to_owned()
    };
    println!(
        "effects-scale: {n} DnsRecords in {zones} zone(s) of PowerDNS at {}, applied with `{} apply -f` (one file) to {}; {} CPUs; grant limits: {limits_text}",
        pdns.api_url,
        bin.display(),
        server.url,
        std::thread::available_parallelism().map_or(0, |p| p.get()),
    );
    if let Some(other) = &other {
        println!(
            "effects-scale: a second PowerDNS at {} (zone {OTHER_ZONE}, Secret {OTHER_SECRET_NAME}) for the fairness phase, in the grant from the start",
            other.api_url
        );
    }

    let load = load(
        &http,
        &bin,
        dir,
        &server,
        &pdns,
        &zone_names,
        &wanted,
        timeout,
    )
    .await?;
    let per_record = |x: f64| x / n as f64;
    match load.served_after {
        Some(served) => println!(
            "served: all {n} records served by PowerDNS {:.1} s after the apply started",
            served.as_secs_f64()
        ),
        None => println!(
            "served: only {} of {n} records served by PowerDNS after {} s (EFFECTS_TIMEOUT_S)",
            load.served,
            timeout.as_secs()
        ),
    }
    println!(
        "work: {:.0} dns plugin calls ({:.2} per record) in {:.0} reconciles ({:.2} per record), {:.0} requests sent to PowerDNS ({:.2} per record), {:.0} refused by the host ({:.2} per record); server CPU {:.1} s",
        load.calls,
        per_record(load.calls),
        load.reconciles,
        per_record(load.reconciles),
        load.sent,
        per_record(load.sent),
        load.refused,
        per_record(load.refused),
        load.cpu_seconds,
    );
    let mut summary = format!(
        "effects-scale n={n} zones={zones} served={} served_s={} apply_s={} calls_per_record={:.2} reconciles_per_record={:.2} sent_per_record={:.2} refused_per_record={:.2} cpu_s={:.1}",
        load.served,
        seconds_or_dash(load.served_after, 1),
        seconds_or_dash(load.apply, 1),
        per_record(load.calls),
        per_record(load.reconciles),
        per_record(load.sent),
        per_record(load.refused),
        load.cpu_seconds,
    );
    if load.served_after.is_none() {
        println!("{summary}");
        bail!("PowerDNS served {} of {n} records in time", load.served);
    }

    let steady = steady(&http, &server, n, zones, settings.steady).await?;
    println!(
        "steady: {:.2} zone reads per zone per 30 s (counted from {}){}; {:.2} reconciles per record per 30 s; server CPU {:.1} s in {:.0} s",
        steady.reads_per_zone,
        steady.source,
        steady
            .shared_per_zone
            .map(|s| format!(", {s:.1} answered from another object's read"))
            .unwrap_or_default(),
        steady.reconciles_per_record,
        steady.cpu_seconds,
        steady.seconds,
    );
    summary.push_str(&format!(
        " steady_reads_per_zone_per_30s={:.2} steady_reads_from={} steady_cpu_s={:.1}",
        steady.reads_per_zone, steady.source, steady.cpu_seconds
    ));

    if let Some(length) = settings.outage {
        let outage = outage(
            &http,
            &bin,
            dir,
            &server,
            &mut pdns,
            &zone_names,
            n,
            timeout,
            length,
        )
        .await;
        let outage = match outage {
            Ok(outage) => outage,
            Err(error) => {
                println!("{summary}");
                return Err(error);
            }
        };
        let wait_seconds = outage.wait.as_secs_f64();
        let cpu_share = outage.wait_cpu_seconds / wait_seconds;
        println!(
            "outage: server CPU {:.2} s in {:.0} s of waiting ({:.1} % of one core); {:.0} dns plugin calls ({:.2} per record, {:.0} of them in the wait) and {:.0} requests sent to PowerDNS from the stop until the restart",
            outage.wait_cpu_seconds,
            wait_seconds,
            cpu_share * 100.0,
            outage.calls,
            per_record(outage.calls),
            outage.wait_calls,
            outage.sent,
        );
        match outage.recovered_after {
            Some(recovered) => println!(
                "recovery: PowerDNS answered {:.1} s after it was started again; all {n} changed records served {:.1} s after that",
                outage.restart.as_secs_f64(),
                recovered.as_secs_f64()
            ),
            None => println!(
                "recovery: only {} of {n} changed records served by PowerDNS {} s after it answered again (EFFECTS_TIMEOUT_S)",
                outage.served,
                timeout.as_secs()
            ),
        }
        summary.push_str(&format!(
            " outage_wait_s={wait_seconds:.0} outage_cpu_share={cpu_share:.3} outage_calls_per_record={:.2} recovery_s={}",
            per_record(outage.calls),
            seconds_or_dash(outage.recovered_after, 1),
        ));
        if outage.recovered_after.is_none() {
            println!("{summary}");
            bail!(
                "recovery: PowerDNS served {} of {n} changed records within {} s of answering again",
                outage.served,
                timeout.as_secs()
            );
        }
    }

    if let Some(other) = &other {
        let fairness = fairness(
            &http,
            &bin,
            dir,
            &server,
            &pdns,
            other,
            &zone_names,
            n,
            timeout,
        )
        .await;
        let fairness = match fairness {
            Ok(fairness) => fairness,
            Err(error) => {
                println!("{summary}");
                return Err(error);
            }
        };
        let mut missing = Vec::new();
        if let Some(probes) = &fairness.probes {
            let of_busy = |probe: &Probe| {
                format!(
                    "{} of {} busy changes served by then",
                    probe.busy_served, fairness.busy
                )
            };
            match probes.other_server.after {
                Some(after) => println!(
                    "fairness: the record on the second PowerDNS served {:.2} s after it was created ({})",
                    after.as_secs_f64(),
                    of_busy(&probes.other_server)
                ),
                None => missing.push(format!(
                    "the second PowerDNS did not serve {OTHER_RECORD}.{OTHER_ZONE}"
                )),
            }
            match probes.deletion.after {
                Some(after) => println!(
                    "fairness: r0 gone from PowerDNS and the host {:.2} s after its DELETE ({})",
                    after.as_secs_f64(),
                    of_busy(&probes.deletion)
                ),
                None => missing.push("r0 was not gone from both PowerDNS and the host".to_owned()),
            }
        }
        match fairness.busy_done_after {
            Some(done) => println!(
                "fairness: all {} changes served {:.1} s after the re-apply started",
                fairness.busy,
                done.as_secs_f64()
            ),
            None => missing.push(format!(
                "PowerDNS served only {} of {} changes",
                fairness.busy_served, fairness.busy
            )),
        }
        let (other_server_s, deletion_s) = match &fairness.probes {
            Some(probes) => (
                seconds_or_dash(probes.other_server.after, 2),
                seconds_or_dash(probes.deletion.after, 2),
            ),
            None => ("-".to_owned(), "-".to_owned()),
        };
        summary.push_str(&format!(
            " busy_served_at_apply_end={} other_server_s={other_server_s} deletion_s={deletion_s} busy_done_s={}",
            fairness.served_when_applied,
            seconds_or_dash(fairness.busy_done_after, 1),
        ));
        if !missing.is_empty() {
            println!("{summary}");
            bail!(
                "fairness: within {} s of the re-apply's start (EFFECTS_TIMEOUT_S): {}",
                timeout.as_secs(),
                missing.join("; ")
            );
        }
    }
    println!("{summary}");
    drop(server);
    drop(other);
    drop(pdns);
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize, what: &str, default: usize| -> anyhow::Result<usize> {
        args.get(i).map_or(Ok(default), |a| {
            a.parse()
                .with_context(|| format!("{what} must be a whole number, not {a:?}"))
        })
    };
    let n = number(0, "N", 300)?;
    let zones = number(1, "ZONES", 1)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(n, zones))
}

//! RabbitMQ at scale: the real `setpoint` binary with the RabbitMQ provider
//! plugins (`plugins/rabbitmq`) keeping N queues, each bound to one topic
//! exchange, in one vhost of a real broker (issue #32), loaded with
//! `setpoint apply -f` as a user would.
//!
//! `rabbitmq-scale [N]` (default 1,000) starts a throw-away broker (the
//! tests' harness, `tests/support/rabbitmq.rs`: a node of its own on
//! loopback), then `setpoint serve` on a fresh data directory with the
//! seven plugins and the defaults; it creates the admin Secret and the
//! grants through the HTTP API, writes one YAML file with the Vhost
//! `bench`, the Exchange `events` and N Queues `q-i` with N Bindings
//! (`events` → `q-i`, routing key `q-i`), all with `resyncSeconds: 30`,
//! runs `setpoint apply -f FILE`, and prints:
//!
//! - the time from the start of the apply until the broker has all N
//!   queues and N bindings (its management API polled every 250 ms);
//! - the requests the host sent to the broker per object, by plugin
//!   (`setpoint_effects_requests_total`, every class but `refused`), the
//!   reads shared instead of sent (`setpoint_effects_observations_total`),
//!   and the reconciles per object;
//! - the server's CPU seconds until then;
//! - then `RABBITMQ_STEADY_S` seconds (default 60) in which nothing
//!   changes: requests to the broker per 30 s, in all and per object.
//!
//! Environment: `SETPOINT_BIN` (default `target/release/setpoint`),
//! `RABBITMQ_PLUGINS` (the directory holding `rabbitmq_*.wasm`, default
//! `target/wasm/wasm32-unknown-unknown/plugin`), `RABBITMQ_TIMEOUT_S`
//! (default 600). `scripts/bench rabbitmq [N]` builds everything first.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

#[path = "../../../support/rabbitmq.rs"]
#[allow(dead_code)]
mod rabbitmq;

use rabbitmq::{ADMIN, RabbitMq};

const PLUGINS: [&str; 7] = [
    "rabbitmq_vhost",
    "rabbitmq_queue",
    "rabbitmq_exchange",
    "rabbitmq_binding",
    "rabbitmq_user",
    "rabbitmq_permission",
    "rabbitmq_policy",
];
const VHOST: &str = "bench";

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let n: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()
        .context("N: a number of queues")?
        .unwrap_or(1000);
    // Interrupted, the run is dropped, and with it the broker and the
    // server it started (a process killed by a signal runs no destructor).
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        result = run(n) => result,
        _ = tokio::signal::ctrl_c() => bail!("interrupted"),
        _ = terminate.recv() => bail!("terminated"),
    }
}

async fn run(n: usize) -> anyhow::Result<()> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bin = std::env::var_os("SETPOINT_BIN")
        .map_or_else(|| workspace.join("target/release/setpoint"), PathBuf::from);
    let built = std::env::var_os("RABBITMQ_PLUGINS").map_or_else(
        || workspace.join("target/wasm/wasm32-unknown-unknown/plugin"),
        PathBuf::from,
    );
    let dir = tempfile::tempdir()?;
    std::fs::create_dir(dir.path().join("plugins"))?;
    for plugin in PLUGINS {
        let from = built.join(format!("{plugin}.wasm"));
        std::fs::copy(
            &from,
            dir.path().join("plugins").join(format!("{plugin}.wasm")),
        )
        .with_context(|| format!("copying {}", from.display()))?;
    }
    let broker = RabbitMq::start().await;
    let http = reqwest::Client::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut server = Server::start(&bin, dir.path(), port)?;
    server.wait_ready(&http, dir.path()).await?;
    println!(
        "rabbitmq-scale: {n} queues with a binding each in vhost {VHOST} of a RabbitMQ 3.10 on {}; {} (2 CPUs), default flags",
        broker.api_url(),
        bin.display()
    );

    post(
        &http,
        &format!("{}/api/v1/namespaces/default/secrets", server.url),
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "rabbitmq-admin", "namespace": "default"},
            "type": "kubernetes.io/basic-auth",
            "stringData": {"username": ADMIN, "password": broker.admin_password()}}),
    )
    .await?;
    for plugin in PLUGINS {
        post(
            &http,
            &format!("{}/apis/setpoint.dev/v1/plugingrants", server.url),
            json!({"apiVersion": "setpoint.dev/v1", "kind": "PluginGrant",
                "metadata": {"name": plugin.replace('_', "-")},
                "spec": {"destinations": [broker.api_url()],
                         "secrets": ["default/rabbitmq-admin/username",
                                     "default/rabbitmq-admin/password"]}}),
        )
        .await?;
    }
    let file = dir.path().join("topology.yaml");
    std::fs::write(&file, manifest(n, &broker.api_url()))?;

    let cpu_before = server.cpu_seconds()?;
    let started = Instant::now();
    let mut apply = std::process::Command::new(&bin)
        .args(["apply", "-f"])
        .arg(&file)
        .args(["--server", &server.url])
        .stdout(Stdio::null())
        .spawn()?;
    let timeout = Duration::from_secs(env_or("RABBITMQ_TIMEOUT_S", 600));
    let mut applied = None;
    let (queues, bindings) = loop {
        if applied.is_none()
            && let Some(status) = apply.try_wait()?
        {
            if !status.success() {
                bail!("setpoint apply failed: {status}");
            }
            applied = Some(started.elapsed());
        }
        let queues = count(&broker, &format!("/api/queues/{VHOST}?columns=name")).await;
        let bindings = count(
            &broker,
            &format!("/api/exchanges/{VHOST}/events/bindings/source"),
        )
        .await;
        if queues >= n && bindings >= n {
            break (queues, bindings);
        }
        if started.elapsed() > timeout {
            println!(
                "NOT CONVERGED after {} s: {queues} of {n} queues, {bindings} of {n} bindings",
                timeout.as_secs()
            );
            break (queues, bindings);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let converged = started.elapsed();
    let cpu = server.cpu_seconds()? - cpu_before;
    let _ = apply.wait();
    println!(
        "converged: {queues} queues and {bindings} bindings in RabbitMQ {:.1} s after the apply started (the apply itself took {:.1} s); server CPU {cpu:.1} s",
        converged.as_secs_f64(),
        applied.unwrap_or(converged).as_secs_f64()
    );
    let metrics = server.metrics(&http).await?;
    let objects = (2 * n + 2) as f64;
    let mut total = 0.0;
    for plugin in [
        "rabbitmq-vhost",
        "rabbitmq-exchange",
        "rabbitmq-queue",
        "rabbitmq-binding",
    ] {
        let sent = metrics.sum(
            "setpoint_effects_requests_total",
            &[("plugin", plugin)],
            &[("class", "refused")],
        );
        let shared = metrics.sum(
            "setpoint_effects_observations_total",
            &[("plugin", plugin), ("outcome", "shared")],
            &[],
        ) + 0.0;
        let reconciles = metrics.sum(
            "controller_runtime_reconcile_total",
            &[("controller", plugin)],
            &[],
        );
        let per = if plugin.ends_with("queue") || plugin.ends_with("binding") {
            n as f64
        } else {
            1.0
        };
        total += sent;
        println!(
            "  {plugin}: {sent} requests sent ({:.2} per object), {shared} reads shared, {:.2} reconciles per object",
            sent / per,
            reconciles / per
        );
    }
    println!(
        "requests to RabbitMQ until converged: {total} for {objects} objects, {:.2} per object",
        total / objects
    );

    let steady: u64 = env_or("RABBITMQ_STEADY_S", 60);
    if steady > 0 {
        let before = server.metrics(&http).await?;
        let cpu_before = server.cpu_seconds()?;
        tokio::time::sleep(Duration::from_secs(steady)).await;
        let after = server.metrics(&http).await?;
        let sent = |m: &Metrics| {
            m.sum(
                "setpoint_effects_requests_total",
                &[],
                &[("class", "refused")],
            )
        };
        let per_30s = (sent(&after) - sent(&before)) * 30.0 / steady as f64;
        println!(
            "steady, {steady} s with nothing changing: {per_30s:.0} requests to RabbitMQ per 30 s ({:.3} per object), server CPU {:.1} % of a core",
            per_30s / objects,
            (server.cpu_seconds()? - cpu_before) * 100.0 / steady as f64
        );
    }
    Ok(())
}

/// The number of items the broker's `GET path` lists (0 while it fails).
async fn count(broker: &RabbitMq, path: &str) -> usize {
    let response = broker.admin(reqwest::Method::GET, path).send().await;
    match response {
        Ok(r) if r.status().is_success() => r
            .json::<Value>()
            .await
            .ok()
            .and_then(|v| v.as_array().map(Vec::len))
            .unwrap_or(0),
        _ => 0,
    }
}

async fn post(http: &reqwest::Client, url: &str, body: Value) -> anyhow::Result<()> {
    let response = http.post(url).json(&body).send().await?;
    if !response.status().is_success() {
        bail!("POST {url}: {}", response.text().await?);
    }
    Ok(())
}

/// The Vhost, the Exchange, N Queues and N Bindings, as one YAML file.
fn manifest(n: usize, api_url: &str) -> String {
    let broker = format!("broker: {{url: \"{api_url}\", credentialsSecret: rabbitmq-admin}}");
    let mut out = format!(
        "apiVersion: rabbitmq.setpoint.dev/v1\nkind: Vhost\nmetadata: {{name: {VHOST}}}\nspec: {{{broker}, resyncSeconds: 30}}\n---\n\
         apiVersion: rabbitmq.setpoint.dev/v1\nkind: Exchange\nmetadata: {{name: events}}\nspec: {{vhost: {VHOST}, type: topic, {broker}, resyncSeconds: 30}}\n"
    );
    for i in 0..n {
        out.push_str(&format!(
            "---\napiVersion: rabbitmq.setpoint.dev/v1\nkind: Queue\nmetadata: {{name: q-{i}}}\nspec: {{vhost: {VHOST}, {broker}, resyncSeconds: 30}}\n\
             ---\napiVersion: rabbitmq.setpoint.dev/v1\nkind: Binding\nmetadata: {{name: b-{i}}}\nspec: {{vhost: {VHOST}, source: events, destination: q-{i}, routingKey: q-{i}, {broker}, resyncSeconds: 30}}\n"
        ));
    }
    out
}

/// A running `setpoint serve`, killed on drop.
struct Server {
    child: std::process::Child,
    url: String,
}

impl Server {
    fn start(bin: &Path, dir: &Path, port: u16) -> anyhow::Result<Self> {
        let log = std::fs::File::create(dir.join("serve.log"))?;
        let child = std::process::Command::new(bin)
            .arg("serve")
            .args(["--addr", &format!("127.0.0.1:{port}")])
            .arg("--data")
            .arg(dir.join("data"))
            .arg("--plugins")
            .arg(dir.join("plugins"))
            .env("SETPOINT_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
        })
    }

    async fn wait_ready(&mut self, http: &reqwest::Client, dir: &Path) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "setpoint serve exited ({status}): {}",
                    std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default()
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
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| -> anyhow::Result<f64> {
            fields
                .get(i)
                .and_then(|f| f.parse().ok())
                .with_context(|| format!("/proc/{pid}/stat: {stat:?}"))
        };
        // utime and stime, in clock ticks of 1/100 s on Linux.
        Ok((ticks(11)? + ticks(12)?) / 100.0)
    }

    async fn metrics(&self, http: &reqwest::Client) -> anyhow::Result<Metrics> {
        let text = http
            .get(format!("{}/metrics", self.url))
            .send()
            .await?
            .error_for_status()?
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

/// One scrape of `/metrics`.
struct Metrics(String);

impl Metrics {
    /// The sum of the samples of family `name` whose labels include every
    /// `(label, value)` of `matching` and none of `excluding`.
    fn sum(&self, name: &str, matching: &[(&str, &str)], excluding: &[(&str, &str)]) -> f64 {
        self.0
            .lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| {
                let end = line.find(['{', ' '])?;
                if &line[..end] != name {
                    return None;
                }
                let value: f64 = line.rsplit(' ').next()?.parse().ok()?;
                let labels = line.get(end..line.rfind(' ')?).unwrap_or_default();
                let has = |(k, v): &(&str, &str)| labels.contains(&format!("{k}=\"{v}\""));
                (matching.iter().all(has) && !excluding.iter().any(has)).then_some(value)
            })
            .sum()
    }
}

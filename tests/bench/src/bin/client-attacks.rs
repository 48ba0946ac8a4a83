//! Hostile clients against the real `setpoint` binary (issue #34): what
//! one ordinary client can make the host hold, and whether others are
//! still served meanwhile.
//!
//! `client-attacks [ATTACK…]` starts `setpoint serve` (no plugins, the
//! defaults, a fresh data directory) once per attack and prints its
//! figures. Attacks (all, in this order, when none is named):
//!
//! - `watches[:N[:WRITES[:SIZE]]]` (1000, 1000, 10240): N raw watches on
//!   ConfigMaps that never read, then WRITES ConfigMaps of SIZE bytes;
//!   peak RSS, RSS once the writes are in, how many watches the server
//!   closed, and RSS 10 s after the sockets close.
//! - `fat[:TIMES[:SIZE]]` (1000, 1.4 MB): one object of SIZE bytes replaced
//!   TIMES times; peak RSS.
//! - `managers[:N]` (10000): server-side apply on one object, each with a
//!   new `fieldManager`; per-request latency, peak RSS, the answers.
//! - `stalled[:N]` (400): N connections send a PUT's headers and one byte
//!   of a 100 kB body, then stall; meanwhile 300 GETs one after another
//!   from another connection: their answers and latency.
//! - `lists[:N[:MB]]` (200, 26): N concurrent full LISTs of about MB of
//!   ConfigMaps; peak RSS and `/healthz` latency meanwhile.
//! - `tables[:N[:MB]]` (200, 26): the same as tables (`Accept: …as=Table`,
//!   `includeObject=Object`, no `limit`).
//! - `backups[:N]` (16): N concurrent backups of a store of about 100 MB;
//!   peak RSS, and the answers.
//!
//! Environment: `SETPOINT_BIN` (default `target/release/setpoint`),
//! `ATTACK_DIR` (scratch directory's parent, default the system temp dir).
//! `scripts/bench clients` builds everything first.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The objects written: a kind the bench defines (the host has no
/// ConfigMaps), free-form.
const CONFIGMAPS: &str = "/apis/bench.setpoint.dev/v1/namespaces/default/notes";
const MB: f64 = 1e6;

/// A running `setpoint serve` on a scratch directory.
struct Server {
    child: Child,
    /// The binary's file name, as `/proc/PID/comm` shows it (cut to 15).
    comm: String,
    addr: String,
    url: String,
    _dir: tempfile::TempDir,
}

impl Server {
    async fn start(http: &reqwest::Client) -> anyhow::Result<Self> {
        let bin = PathBuf::from(
            std::env::var("SETPOINT_BIN").unwrap_or_else(|_| "target/release/setpoint".into()),
        );
        let dir = match std::env::var_os("ATTACK_DIR") {
            Some(parent) => tempfile::tempdir_in(parent)?,
            None => tempfile::tempdir()?,
        };
        std::fs::create_dir_all(dir.path().join("plugins"))?;
        let port = free_port()?;
        let addr = format!("127.0.0.1:{port}");
        let log = std::fs::File::create(dir.path().join("serve.log"))?;
        // `ATTACK_HEAP=FILE`: under heaptrack (a binary on the system
        // allocator), to see what the server holds.
        let mut command = match std::env::var_os("ATTACK_HEAP") {
            Some(profile) => {
                let mut heaptrack = Command::new("heaptrack");
                heaptrack.arg("-o").arg(profile).arg(&bin);
                heaptrack
            }
            None => Command::new(&bin),
        };
        let child = command
            .arg("serve")
            .arg("--addr")
            .arg(&addr)
            .arg("--data")
            .arg(dir.path().join("data"))
            .arg("--plugins")
            .arg(dir.path().join("plugins"))
            .env("SETPOINT_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let server = Self {
            child,
            comm: bin
                .file_name()
                .map(|n| n.to_string_lossy().chars().take(15).collect())
                .unwrap_or_default(),
            url: format!("http://{addr}"),
            addr,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(r) = http.get(format!("{}/readyz", server.url)).send().await
                && r.status().is_success()
            {
                server.define(http).await?;
                return Ok(server);
            }
            if Instant::now() > deadline {
                bail!("the server did not become ready in 60 s");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Define the `Note` kind and wait until it is served.
    async fn define(&self, http: &reqwest::Client) -> anyhow::Result<()> {
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "notes.bench.setpoint.dev"},
            "spec": {"group": "bench.setpoint.dev", "scope": "Namespaced",
                "names": {"kind": "Note", "plural": "notes", "singular": "note", "listKind": "NoteList"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}});
        let response = http
            .post(format!(
                "{}/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                self.url
            ))
            .json(&crd)
            .send()
            .await?;
        if !response.status().is_success() {
            bail!(
                "defining notes: {}: {}",
                response.status(),
                response.text().await?
            );
        }
        for _ in 0..500 {
            if http
                .get(format!("{}{CONFIGMAPS}", self.url))
                .send()
                .await?
                .status()
                .is_success()
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        bail!("notes not served 10 s after their definition")
    }

    /// The server's process id: under heaptrack, its script's child.
    fn pid(&self) -> u32 {
        let id = self.child.id();
        std::fs::read_to_string(format!("/proc/{id}/task/{id}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse::<u32>().ok())
            .find(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .is_ok_and(|comm| self.comm.starts_with(comm.trim()))
            })
            .unwrap_or(id)
    }

    fn rss(&self) -> f64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(0.0, |kb| kb * 1024.0)
    }

    /// Sample RSS every 50 ms until dropped; the peak so far on `peak()`.
    fn sample_rss(self: &Arc<Self>) -> Sampler {
        let peak = Arc::new(AtomicU64::new(self.rss() as u64));
        let (server, p) = (self.clone(), peak.clone());
        let task = tokio::spawn(async move {
            loop {
                p.fetch_max(server.rss() as u64, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        Sampler { peak, task }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let server = self.pid();
        if server != self.child.id() {
            let _ = Command::new("kill")
                .arg("-9")
                .arg(server.to_string())
                .status();
            std::thread::sleep(Duration::from_secs(5));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Sampler {
    peak: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    fn peak(&self) -> f64 {
        self.peak.load(Ordering::Relaxed) as f64
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn configmap(name: &str, size: usize) -> Value {
    json!({"apiVersion": "bench.setpoint.dev/v1", "kind": "Note",
        "metadata": {"name": name, "namespace": "default"},
        "data": {"blob": "x".repeat(size)}})
}

/// Create or replace ConfigMaps `names` of `size` bytes, `clients` at once.
async fn write_configmaps(
    http: &reqwest::Client,
    url: &str,
    names: Vec<String>,
    size: usize,
    clients: usize,
) -> anyhow::Result<()> {
    let names = Arc::new(names);
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (http, url, names, next) = (http.clone(), url.to_owned(), names.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                let Some(name) = names.get(i) else {
                    return anyhow::Ok(());
                };
                let body = configmap(name, size).to_string();
                // Create; replace what is there already.
                let mut response = http
                    .post(format!("{url}{CONFIGMAPS}"))
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await?;
                if response.status() == reqwest::StatusCode::CONFLICT {
                    response = http
                        .put(format!("{url}{CONFIGMAPS}/{name}"))
                        .header("content-type", "application/json")
                        .body(body)
                        .send()
                        .await?;
                }
                if !response.status().is_success() {
                    bail!("write {name}: {}", response.status());
                }
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}

/// One number from the server's `/metrics`.
async fn metric(http: &reqwest::Client, url: &str, name: &str) -> anyhow::Result<f64> {
    let text = http
        .get(format!("{url}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    Ok(text
        .lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN))
}

fn mb(bytes: f64) -> String {
    format!("{:.0} MB", bytes / MB)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn latencies(mut times: Vec<Duration>) -> String {
    times.sort();
    format!(
        "p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        percentile(&times, 0.5).as_secs_f64() * 1e3,
        percentile(&times, 0.99).as_secs_f64() * 1e3,
        times.last().copied().unwrap_or_default().as_secs_f64() * 1e3
    )
}

/// Whether the server has closed `socket` (EOF or reset once whatever it
/// sent is drained), reading for at most `wait`.
async fn closed_by_server(socket: &mut TcpStream, wait: Duration) -> bool {
    let mut buf = vec![0u8; 1 << 16];
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(deadline, socket.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

async fn watches(n: usize, writes: usize, size: usize) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let server = Arc::new(Server::start(&http).await?);
    let before = server.rss();
    let sampler = server.sample_rss();
    let mut sockets = Vec::new();
    for _ in 0..n {
        let mut socket = TcpStream::connect(&server.addr).await?;
        socket
            .write_all(
                format!(
                    "GET {CONFIGMAPS}?watch=true HTTP/1.1\r\nHost: {}\r\n\r\n",
                    server.addr
                )
                .as_bytes(),
            )
            .await?;
        sockets.push(socket);
    }
    let started = Instant::now();
    let names = (0..writes).map(|i| format!("cm-{i:05}")).collect();
    write_configmaps(&http, &server.url, names, size, 8).await?;
    let write_time = started.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after_writes = server.rss();
    let peak = sampler.peak();
    // Which the server closed: read what each holds, for 2 s, all at once
    // (reading does not make the server keep them).
    let checks: Vec<_> = sockets
        .into_iter()
        .map(|mut socket| {
            tokio::spawn(async move { closed_by_server(&mut socket, Duration::from_secs(2)).await })
        })
        .collect();
    let mut closed = 0;
    for check in checks {
        closed += usize::from(check.await?);
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    let after_close = server.rss();
    println!(
        "watches: after the sockets closed: {} watch streams open, {} file descriptors",
        metric(
            &http,
            &server.url,
            "apiserver_longrunning_requests{verb=\"WATCH\"}"
        )
        .await?,
        std::fs::read_dir(format!("/proc/{}/fd", server.pid()))?.count()
    );
    println!(
        "watches: {n} unread watches, {writes} writes of {size} B in {:.1} s: RSS before {}, peak {}, after the writes {}, {} s after the sockets closed {} ({:+.0} MB); {closed} of {n} watches closed by the server (read for 2 s each)",
        write_time.as_secs_f64(),
        mb(before),
        mb(peak),
        mb(after_writes),
        10,
        mb(after_close),
        (after_close - before) / MB,
    );
    Ok(())
}

async fn fat(times: usize, size: usize) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let server = Arc::new(Server::start(&http).await?);
    let before = server.rss();
    let sampler = server.sample_rss();
    let started = Instant::now();
    let names = vec!["fat".to_owned(); times];
    write_configmaps(&http, &server.url, names, size, 1).await?;
    println!(
        "fat: one object of {size} B replaced {times} times in {:.1} s: RSS before {}, peak {}, after {}",
        started.elapsed().as_secs_f64(),
        mb(before),
        mb(sampler.peak()),
        mb(server.rss())
    );
    Ok(())
}

async fn managers(n: usize) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let server = Arc::new(Server::start(&http).await?);
    let before = server.rss();
    let sampler = server.sample_rss();
    let mut times = Vec::new();
    let mut answers = std::collections::BTreeMap::<u16, usize>::new();
    let mut biggest_error = 0;
    let started = Instant::now();
    for i in 0..n {
        let body = json!({"apiVersion": "bench.setpoint.dev/v1", "kind": "Note",
            "metadata": {"name": "managed", "namespace": "default"},
            "data": {format!("key-{i}"): "value", "shared": format!("from manager {i}")}})
        .to_string();
        let t = Instant::now();
        let response = http
            .patch(format!("{}{CONFIGMAPS}/managed", server.url))
            .query(&[
                ("fieldManager", format!("manager-{i}").as_str()),
                ("force", "true"),
            ])
            .header("content-type", "application/apply-patch+yaml")
            .body(body)
            .send()
            .await?;
        let status = response.status().as_u16();
        let text = response.bytes().await?;
        times.push(t.elapsed());
        *answers.entry(status).or_default() += 1;
        if status >= 400 {
            biggest_error = biggest_error.max(text.len());
        }
        if started.elapsed() > Duration::from_secs(600) {
            println!("managers: stopped after {i} requests (10 minutes)");
            break;
        }
    }
    let object = http
        .get(format!("{}{CONFIGMAPS}/managed", server.url))
        .send()
        .await?
        .bytes()
        .await?;
    println!(
        "managers: {} applies with a new fieldManager each in {:.1} s: {}; answers {answers:?} (largest error {} B); object now {} B; RSS before {}, peak {}",
        times.len(),
        started.elapsed().as_secs_f64(),
        latencies(times),
        biggest_error,
        object.len(),
        mb(before),
        mb(sampler.peak())
    );
    Ok(())
}

async fn stalled(n: usize) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let server = Arc::new(Server::start(&http).await?);
    write_configmaps(&http, &server.url, vec!["target".into()], 100, 1).await?;
    let mut sockets = Vec::new();
    for i in 0..n {
        let mut socket = TcpStream::connect(&server.addr).await?;
        socket
            .write_all(
                format!(
                    "PUT {CONFIGMAPS}/stall-{i} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{",
                    server.addr
                )
                .as_bytes(),
            )
            .await?;
        sockets.push(socket);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let probe = reqwest::Client::new();
    let mut times = Vec::new();
    let mut answers = std::collections::BTreeMap::<u16, usize>::new();
    for _ in 0..300 {
        let t = Instant::now();
        let status = probe
            .get(format!("{}{CONFIGMAPS}/target", server.url))
            .send()
            .await?
            .status()
            .as_u16();
        times.push(t.elapsed());
        *answers.entry(status).or_default() += 1;
    }
    let mut closed = 0;
    for socket in &mut sockets {
        if closed_by_server(socket, Duration::from_millis(1)).await {
            closed += 1;
        }
    }
    println!(
        "stalled: {n} connections stalled in a 100 kB body; 300 GETs meanwhile: answers {answers:?}, {}; {closed} of {n} stalled connections closed by the server by then",
        latencies(times)
    );
    // How long the server waits on a stalled body.
    let started = Instant::now();
    let mut socket = sockets.pop().context("no socket")?;
    let cut = closed_by_server(&mut socket, Duration::from_secs(120)).await;
    println!(
        "stalled: a stalled body {} after {:.0} s",
        if cut { "was cut off" } else { "was still open" },
        started.elapsed().as_secs_f64() + 0.5
    );
    Ok(())
}

async fn lists(n: usize, megabytes: usize, as_table: bool) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let server = Arc::new(Server::start(&http).await?);
    let count = megabytes * 1000 / 10;
    let names = (0..count).map(|i| format!("item-{i:06}")).collect();
    write_configmaps(&http, &server.url, names, 10_000, 8).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = server.rss();
    let sampler = server.sample_rss();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // On a thread and runtime of its own, so that what it measures is the
    // server, not this process's own queue of LIST readers.
    let health = {
        let (url, stop) = (server.url.clone(), stop.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async move {
                let http = reqwest::Client::new();
                let mut times = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    if http.get(format!("{url}/healthz")).send().await.is_err() {
                        break;
                    }
                    times.push(t.elapsed());
                    if std::env::var_os("ATTACK_VERBOSE").is_some()
                        && t.elapsed() > Duration::from_millis(100)
                    {
                        eprintln!("  /healthz took {:.0} ms", t.elapsed().as_secs_f64() * 1e3);
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                times
            })
        })
    };
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..n {
        let (http, url) = (http.clone(), server.url.clone());
        tasks.push(tokio::spawn(async move {
            let mut request = http
                .get(format!("{url}{CONFIGMAPS}"))
                .query(&[("resourceVersion", "0")]);
            if as_table {
                // As a table with whole objects, not paged: what a client
                // that does not page gets from a `kubectl get -o wide`-like
                // request.
                request = request
                    .query(&[("includeObject", "Object")])
                    .header("accept", "application/json;as=Table;v=v1;g=meta.k8s.io");
            }
            let response = request.send().await?;
            let status = response.status().as_u16();
            let bytes = response.bytes().await?.len();
            anyhow::Ok((status, bytes))
        }));
    }
    let mut answers = std::collections::BTreeMap::<u16, usize>::new();
    let mut bytes = 0;
    for task in tasks {
        let (status, size) = task.await??;
        *answers.entry(status).or_default() += 1;
        bytes = bytes.max(size);
    }
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let health_times = health.join().expect("the health probe");
    println!(
        "{}: {n} concurrent LISTs of {} in {:.1} s: answers {answers:?}; RSS before {}, peak {}; /healthz meanwhile {}",
        if as_table { "tables" } else { "lists" },
        mb(bytes as f64),
        elapsed.as_secs_f64(),
        mb(before),
        mb(sampler.peak()),
        latencies(health_times),
    );
    Ok(())
}

async fn backups(n: usize) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let server = Arc::new(Server::start(&http).await?);
    let names = (0..10_000).map(|i| format!("item-{i:06}")).collect();
    write_configmaps(&http, &server.url, names, 10_000, 8).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = server.rss();
    let sampler = server.sample_rss();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..n {
        let (http, url) = (http.clone(), server.url.clone());
        tasks.push(tokio::spawn(async move {
            let response = http.get(format!("{url}/setpoint/v1/backup")).send().await?;
            let status = response.status().as_u16();
            let bytes = response.bytes().await?.len();
            anyhow::Ok((status, bytes))
        }));
    }
    let mut answers = std::collections::BTreeMap::<u16, usize>::new();
    let mut size = 0;
    for task in tasks {
        let (status, bytes) = task.await??;
        *answers.entry(status).or_default() += 1;
        size = size.max(bytes);
    }
    println!(
        "backups: {n} concurrent backups of {} in {:.1} s: answers {answers:?}; RSS before {}, peak {}",
        mb(size as f64),
        started.elapsed().as_secs_f64(),
        mb(before),
        mb(sampler.peak()),
    );
    Ok(())
}

fn arg(parts: &[&str], i: usize, default: usize) -> anyhow::Result<usize> {
    match parts.get(i) {
        None => Ok(default),
        Some(p) => p.parse().with_context(|| format!("not a number: {p:?}")),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut attacks: Vec<String> = std::env::args().skip(1).collect();
    if attacks.is_empty() {
        attacks = [
            "watches", "fat", "managers", "stalled", "lists", "tables", "backups",
        ]
        .map(String::from)
        .to_vec();
    }
    for attack in attacks {
        let parts: Vec<&str> = attack.split(':').collect();
        match parts[0] {
            "watches" => {
                watches(
                    arg(&parts, 1, 1000)?,
                    arg(&parts, 2, 1000)?,
                    arg(&parts, 3, 10_240)?,
                )
                .await?
            }
            "fat" => fat(arg(&parts, 1, 1000)?, arg(&parts, 2, 1_400_000)?).await?,
            "managers" => managers(arg(&parts, 1, 10_000)?).await?,
            "stalled" => stalled(arg(&parts, 1, 400)?).await?,
            "lists" => lists(arg(&parts, 1, 200)?, arg(&parts, 2, 26)?, false).await?,
            "tables" => lists(arg(&parts, 1, 200)?, arg(&parts, 2, 26)?, true).await?,
            "backups" => backups(arg(&parts, 1, 16)?).await?,
            other => bail!("unknown attack {other:?}"),
        }
    }
    Ok(())
}

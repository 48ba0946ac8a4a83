//! Scale: the real `setpoint` binary with the example plugins (replicaset,
//! podsim), loaded through its HTTP API as a user would (issue #22).
//!
//! `scale-bench [N]` (default 200,000; `SCALE_N` too) starts `setpoint
//! serve` on a fresh data directory with the defaults (no flags beyond the
//! address, the data and plugins directories, and `SCALE_SERVE_ARGS`),
//! creates N Pods of about 1 KiB through the API from 32 client tasks
//! (`SCALE_CLIENTS`), and prints:
//!
//! - the create rate;
//! - the time until every Pod is `Running`, after the last create (done
//!   when podsim has made two reconciles per Pod and its queue is idle,
//!   confirmed by a LIST showing every Pod `Running`);
//! - the server's RSS then (and its peak), per object, and after
//!   `SCALE_IDLE_SECS` (90) idle;
//! - podsim's reconciles per Pod;
//! - a full LIST (time, bytes) and a 500-item page (median of 9);
//! - restart to ready: `kill -9`, start again, time until `/readyz`
//!   answers, and the RSS and the work done after the restart.
//!
//! `scale-bench restart DIR [TIMES]` measures restarts alone on a data
//! directory a run kept (`SCALE_KEEP=1` prints it), TIMES times (default
//! 3), so that two binaries can be compared on the same data.
//!
//! Environment: `SETPOINT_BIN` (default `target/release/setpoint`),
//! `SCALE_PLUGINS` (the directory holding `replicaset.wasm` and
//! `podsim.wasm`, default `target/wasm/wasm32-unknown-unknown/plugin`),
//! `SCALE_DIR` (where the scratch directory goes, default the system temp
//! dir), `SCALE_STARTUP_MS` (the Pods' `spec.startupDelayMs`, default 0),
//! `SCALE_KEEP=1` keeps the data directory (and the server's `serve.log`,
//! whose filter `SCALE_LOG` sets: `warn` unless given). `scripts/bench scale` builds
//! everything first.
//!
//! `scale-bench console DIR [FAMILY]` times what the web console asks
//! of a host holding a kept directory's objects: it starts the server
//! there, waits until its informers hold them, applies a ReplicaSet of
//! FAMILY Pods (default 2,000) and prints the medians of 9 of the page
//! itself, the overview, the ReplicaSet's tree, a Pod's tree and the first
//! table pages of Pods (all of them, and by label).
//!
//! `SCALE_HEAP=FILE` runs the server under heaptrack (`heaptrack -o FILE`;
//! the binary must use the system allocator, as `scripts/bench heap`
//! builds it) and, instead of the restart, `kill -9`s it once the LIST is
//! measured: the allocations the profile then calls leaked are what the
//! converged server held.
//!
//! `SCALE_HEAP_DUMP=PREFIX` runs the server with jemalloc's sampling
//! profiler on (the binary built with the `heap-profile` feature, as
//! `scripts/bench heap-sampled` builds it) and, after the idle minutes,
//! has it write a profile of its heap (`PREFIX.<pid>.<seq>.m<seq>.heap`):
//! the converged server's heap, for a load of any size in one run.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

const PODS: &str = "/apis/demo.setpoint.dev/v1/namespaces/default/pods";

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A running `setpoint serve`.
struct Server {
    child: Child,
    url: String,
    /// The server's process name (`/proc/PID/comm`: its file name, cut
    /// to 15 bytes), to find it under heaptrack.
    comm: String,
}

impl Server {
    fn start(bin: &Path, dir: &Path, port: u16) -> anyhow::Result<Self> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("serve.log"))?;
        let mut command = match std::env::var_os("SCALE_HEAP") {
            Some(profile) => {
                let mut heaptrack = Command::new("heaptrack");
                heaptrack.arg("-o").arg(profile).arg(bin);
                heaptrack
            }
            None => Command::new(bin),
        };
        if let Some(prefix) = std::env::var_os("SCALE_HEAP_DUMP") {
            // One sample in about each 512 KiB allocated.
            let mut conf = std::ffi::OsString::from("prof:true,lg_prof_sample:19,prof_prefix:");
            conf.push(prefix);
            command.env("_RJEM_MALLOC_CONF", conf);
        }
        command
            .arg("serve")
            .arg("--addr")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--data")
            .arg(dir.join("data"))
            .arg("--plugins")
            .arg(dir.join("plugins"))
            .args(
                std::env::var("SCALE_SERVE_ARGS")
                    .unwrap_or_default()
                    .split_whitespace(),
            )
            .env(
                "SETPOINT_LOG",
                std::env::var("SCALE_LOG").unwrap_or_else(|_| "warn".to_owned()),
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let child = command
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let comm = bin
            .file_name()
            .map(|n| n.to_string_lossy().chars().take(15).collect())
            .unwrap_or_default();
        Ok(Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            comm,
        })
    }

    /// The server's process id: the child's, or under heaptrack (which
    /// runs it from a script) the script's child's.
    fn pid(&self) -> u32 {
        let id = self.child.id();
        if std::env::var_os("SCALE_HEAP").is_none() {
            return id;
        }
        std::fs::read_to_string(format!("/proc/{id}/task/{id}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse::<u32>().ok())
            .find(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .is_ok_and(|comm| comm.trim() == self.comm)
            })
            .unwrap_or(id)
    }

    /// `kill -9` the server alone and wait until heaptrack has written its
    /// profile: what the server held then is what the profile calls leaked.
    fn kill9_profiled(&mut self) -> anyhow::Result<()> {
        Command::new("kill")
            .arg("-9")
            .arg(self.pid().to_string())
            .status()
            .context("kill -9")?;
        self.child.wait()?;
        Ok(())
    }

    /// Resident and peak resident memory, in bytes.
    fn rss(&self) -> (u64, u64) {
        rss_pair(self.pid())
    }

    /// Process CPU time (user + system) so far.
    fn cpu(&self) -> Duration {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap_or_default();
        // Fields after the command name, which is in parentheses.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0)
        };
        // utime and stime are fields 14 and 15 (1-based), i.e. 11 and 12 here.
        Duration::from_millis((ticks(11) + ticks(12)) * 10)
    }

    fn kill9(&mut self) {
        let server = self.pid();
        if server != self.child.id() {
            let _ = Command::new("kill")
                .arg("-9")
                .arg(server.to_string())
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    async fn wait_ready(&self, http: &reqwest::Client) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            if let Ok(r) = http.get(format!("{}/readyz", self.url)).send().await
                && r.status().is_success()
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the server did not become ready in 10 minutes");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A Pod of about 1 KiB as JSON.
fn pod(i: usize, startup_ms: u64) -> Vec<u8> {
    json!({
        "apiVersion": "demo.setpoint.dev/v1", "kind": "Pod",
        "metadata": {"name": format!("pod-{i:07}"), "namespace": "default",
            "labels": {"app": "scale", "shard": format!("s{}", i % 16), "tier": "backend"},
            "annotations": {"bench.setpoint.dev/note": "x".repeat(300)}},
        "spec": {
            "startupDelayMs": startup_ms,
            "image": "registry.example.com/team/service:1.2.3",
            "containers": [{"name": "main", "image": "registry.example.com/team/service:1.2.3",
                "args": ["--port=8080", "--log-level=info", "--config=/etc/service/config.yaml"],
                "env": [{"name": "REGION", "value": "eu-west-1"}, {"name": "POD_INDEX", "value": i.to_string()},
                        {"name": "FEATURE_FLAGS", "value": "alpha,beta,gamma,delta"}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                              "limits": {"cpu": "500m", "memory": "256Mi"}}}]
        }
    })
    .to_string()
    .into_bytes()
}

/// One number from the Prometheus text `metrics`.
fn metric(metrics: &str, name_and_labels: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.starts_with(name_and_labels))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

async fn metrics(http: &reqwest::Client, url: &str) -> anyhow::Result<String> {
    Ok(http
        .get(format!("{url}/metrics"))
        .send()
        .await?
        .text()
        .await?)
}

fn podsim_reconciles(metrics: &str) -> f64 {
    metric(
        metrics,
        "setpoint_plugin_reconciles_total{plugin=\"podsim\"}",
    )
}

/// Pages through every Pod; returns how many there are and how many are
/// not `Running`.
async fn count_not_running(http: &reqwest::Client, url: &str) -> anyhow::Result<(usize, usize)> {
    let (mut total, mut not_running) = (0, 0);
    let mut next: Option<String> = None;
    loop {
        let mut request = http.get(format!("{url}{PODS}")).query(&[("limit", "5000")]);
        if let Some(token) = &next {
            request = request.query(&[("continue", token)]);
        }
        let page: Value = request.send().await?.error_for_status()?.json().await?;
        for item in page["items"].as_array().into_iter().flatten() {
            total += 1;
            if item["status"]["phase"] != "Running" {
                not_running += 1;
            }
        }
        match page["metadata"]["continue"].as_str() {
            Some(token) if !token.is_empty() => next = Some(token.to_owned()),
            _ => return Ok((total, not_running)),
        }
    }
}

/// Create `n` Pods from `clients` tasks; returns the time from the first
/// create to the last answer.
async fn create(
    http: &reqwest::Client,
    url: &str,
    n: usize,
    clients: usize,
) -> anyhow::Result<Duration> {
    let startup_ms: u64 = env_or("SCALE_STARTUP_MS", 0);
    let retries = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (http, url, retries) = (http.clone(), url.to_owned(), retries.clone());
        tasks.push(tokio::spawn(async move {
            for i in (c..n).step_by(clients) {
                let body = pod(i, startup_ms);
                loop {
                    let response = http
                        .post(format!("{url}{PODS}"))
                        .header("content-type", "application/json")
                        .body(body.clone())
                        .send()
                        .await?;
                    let status = response.status();
                    if status.is_success() {
                        break;
                    }
                    if status.as_u16() == 429 || status.is_server_error() {
                        retries.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                    bail!("create pod-{i:07}: {status}: {}", response.text().await?);
                }
            }
            anyhow::Ok(())
        }));
    }
    let mut progress = tokio::time::interval(Duration::from_secs(10));
    progress.tick().await;
    let mut waiting = std::pin::pin!(futures_join(tasks));
    loop {
        tokio::select! {
            done = &mut waiting => { done?; break; }
            _ = progress.tick() => eprintln!("  ... creating, {:.0} s", started.elapsed().as_secs_f64()),
        }
    }
    let elapsed = started.elapsed();
    let retried = retries.load(Ordering::Relaxed);
    if retried > 0 {
        eprintln!("  ({retried} creates retried after 429/5xx)");
    }
    Ok(elapsed)
}

/// Await every task, failing on the first error.
async fn futures_join(
    tasks: Vec<tokio::task::JoinHandle<anyhow::Result<()>>>,
) -> anyhow::Result<()> {
    for task in tasks {
        task.await??;
    }
    Ok(())
}

/// Wait until podsim has reconciled every Pod twice and has nothing
/// queued, then confirm with a LIST; returns when that was first true.
async fn converged(http: &reqwest::Client, url: &str, n: usize) -> anyhow::Result<(Instant, f64)> {
    let deadline = Instant::now() + Duration::from_secs(3600);
    loop {
        let text = metrics(http, url).await?;
        let reconciles = podsim_reconciles(&text);
        let depth = metric(&text, "workqueue_depth{name=\"podsim\"}");
        let at = Instant::now();
        if reconciles >= 2.0 * n as f64 && depth == 0.0 {
            let (total, not_running) = count_not_running(http, url).await?;
            if total == n && not_running == 0 {
                return Ok((at, reconciles));
            }
            eprintln!("  ... {not_running} of {total} Pods not Running yet");
        }
        if Instant::now() > deadline {
            bail!("not converged within an hour");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

/// A free loopback port.
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn prepare(dir: &Path) -> anyhow::Result<PathBuf> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bin = std::env::var_os("SETPOINT_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target/release/setpoint"));
    let built = std::env::var_os("SCALE_PLUGINS")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target/wasm/wasm32-unknown-unknown/plugin"));
    std::fs::create_dir_all(dir.join("plugins"))?;
    for plugin in ["replicaset", "podsim"] {
        let file = format!("{plugin}.wasm");
        std::fs::copy(built.join(&file), dir.join("plugins").join(&file)).with_context(|| {
            format!(
                "copying {} (build the plugins first)",
                built.join(&file).display()
            )
        })?;
    }
    Ok(bin)
}

async fn run(n: usize, clients: usize) -> anyhow::Result<()> {
    let scratch = tempfile::Builder::new()
        .prefix("setpoint-scale")
        .tempdir_in(std::env::var_os("SCALE_DIR").map_or_else(std::env::temp_dir, PathBuf::from))?;
    let dir = scratch.path().to_owned();
    let bin = prepare(&dir)?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(clients * 2)
        .build()?;
    let port = free_port()?;
    let mut server = Server::start(&bin, &dir, port)?;
    let url = server.url.clone();
    server.wait_ready(&http).await?;
    let (rss_empty, _) = server.rss();
    println!(
        "scale: {n} Pods of ~{} B through {url} from {clients} client tasks; {} ({} CPUs); plugins replicaset, podsim; serve args: {:?}",
        pod(0, 0).len(),
        bin.display(),
        std::thread::available_parallelism().map_or(0, |p| p.get()),
        std::env::var("SCALE_SERVE_ARGS").unwrap_or_default(),
    );

    let created = create(&http, &url, n, clients).await?;
    let last_create = Instant::now();
    println!(
        "create: {n} Pods in {:.1} s: {:.0} creates/s",
        created.as_secs_f64(),
        n as f64 / created.as_secs_f64()
    );
    let (at, reconciles) = converged(&http, &url, n).await?;
    let after_last = at.saturating_duration_since(last_create);
    println!(
        "converged: every Pod Running {:.1} s after the last create ({:.1} s after the first); podsim reconciles {:.0}, {:.2} per Pod",
        after_last.as_secs_f64(),
        (created + after_last).as_secs_f64(),
        reconciles,
        reconciles / n as f64,
    );
    let text = metrics(&http, &url).await?;
    let paced = |plugin: &str, resource: &str| {
        metric(
            &text,
            &format!("setpoint_plugin_paced_total{{plugin=\"{plugin}\",resource=\"{resource}\"}}"),
        )
    };
    println!(
        "paced turns (over the plugin's share): podsim cpu {:.0}, writes {:.0}; replicaset cpu {:.0}, writes {:.0}",
        paced("podsim", "cpu"),
        paced("podsim", "writes"),
        paced("replicaset", "cpu"),
        paced("replicaset", "writes"),
    );
    let (rss, peak) = server.rss();
    println!(
        "memory: RSS {:.0} MB ({:.0} B per object above the empty server's {:.0} MB; {:.0} B per object in all), peak {:.0} MB; server CPU so far {:.0} s",
        mb(rss),
        (rss.saturating_sub(rss_empty)) as f64 / n as f64,
        mb(rss_empty),
        rss as f64 / n as f64,
        mb(peak),
        server.cpu().as_secs_f64(),
    );
    // Converged, then idle: the issue's bound is on the idle host (the
    // watch hub lets go of its history after a while, the allocator
    // returns freed pages).
    let idle = Duration::from_secs(env_or("SCALE_IDLE_SECS", 90u64));
    if !idle.is_zero() {
        let started = Instant::now();
        let mut least = u64::MAX;
        while started.elapsed() < idle {
            tokio::time::sleep(Duration::from_secs(5)).await;
            least = least.min(server.rss().0);
        }
        println!(
            "idle: RSS {:.0} MB after {} s idle (least {:.0} MB); server CPU so far {:.0} s",
            mb(server.rss().0),
            idle.as_secs(),
            mb(least),
            server.cpu().as_secs_f64(),
        );
    }

    if let Some(prefix) = std::env::var_os("SCALE_HEAP_DUMP") {
        let dump = dump_heap(server.pid(), Path::new(&prefix))?;
        println!(
            "heap: sampled profile of the idle server written to {}",
            dump.display()
        );
    }

    // The server's RSS sampled every 20 ms while the LIST streams: the
    // issue's bound is on how much it grows.
    let rss_before = server.rss().0;
    let listing = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (listing, pid) = (listing.clone(), server.pid());
        std::thread::spawn(move || {
            let mut most = 0u64;
            while listing.load(Ordering::Relaxed) {
                most = most.max(rss_of(pid));
                std::thread::sleep(Duration::from_millis(20));
            }
            most
        })
    };
    let (started, cpu_before) = (Instant::now(), server.cpu());
    let streamed = stream_list(&http, &format!("{url}{PODS}")).await?;
    let list = started.elapsed();
    let list_cpu = server.cpu().saturating_sub(cpu_before);
    listing.store(false, Ordering::Relaxed);
    let rss_during = sampler.join().unwrap_or(0);
    if streamed.items != n {
        bail!("the LIST streamed {} Pods, not {n}", streamed.items);
    }
    println!(
        "list: all {n} Pods in one LIST: {:.2} s, {:.0} MB of JSON streamed, server CPU {:.2} s; server RSS {:.0} MB before, at most {:.0} MB during (+{:.0} MB)",
        list.as_secs_f64(),
        mb(streamed.bytes),
        list_cpu.as_secs_f64(),
        mb(rss_before),
        mb(rss_during),
        mb(rss_during.saturating_sub(rss_before))
    );
    let mut pages = Vec::new();
    for _ in 0..9 {
        let started = Instant::now();
        http.get(format!("{url}{PODS}"))
            .query(&[("limit", "500")])
            .send()
            .await?
            .error_for_status()?
            .bytes()
            .await?;
        pages.push(started.elapsed());
    }
    pages.sort();
    println!(
        "page: 500 Pods (limit=500): median {:.1} ms [min {:.1} .. max {:.1}]",
        pages[4].as_secs_f64() * 1e3,
        pages[0].as_secs_f64() * 1e3,
        pages[8].as_secs_f64() * 1e3
    );

    if let Some(profile) = std::env::var_os("SCALE_HEAP") {
        server.kill9_profiled()?;
        println!(
            "heap: profile written by heaptrack to {}.*; what the converged server held when killed is what it calls leaked",
            Path::new(&profile).display()
        );
    } else {
        server.kill9();
        let server = restart(&bin, &dir, port, &http).await?;
        drop(server);
    }
    if std::env::var_os("SCALE_KEEP").is_some() {
        println!("kept {}", scratch.keep().display());
    }
    Ok(())
}

/// Has the server `pid` (built with `heap-profile`) write a profile of
/// its heap on SIGUSR2, and returns the file once written whole (it ends
/// with the process's memory map, after the samples).
fn dump_heap(pid: u32, prefix: &Path) -> anyhow::Result<PathBuf> {
    let dir = prefix.parent().filter(|d| !d.as_os_str().is_empty());
    let dir = dir.unwrap_or(Path::new("."));
    let name = prefix
        .file_name()
        .context("SCALE_HEAP_DUMP names no file")?
        .to_string_lossy()
        .into_owned();
    let dumps = || -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| {
                path.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .is_some_and(|n| n.starts_with(&name) && n.ends_with(".heap"))
            })
            .collect()
    };
    let before = dumps();
    let sent = Command::new("kill")
        .arg("-USR2")
        .arg(pid.to_string())
        .status()
        .context("kill -USR2")?;
    if !sent.success() {
        bail!("kill -USR2 {pid} failed");
    }
    let started = Instant::now();
    let mut last_len = None;
    loop {
        if let Some(dump) = dumps().into_iter().find(|d| !before.contains(d))
            && let Ok(text) = std::fs::read_to_string(&dump)
            && text.contains("MAPPED_LIBRARIES")
        {
            // The map comes last; whole once the file stops growing.
            if last_len == Some(text.len()) {
                return Ok(dump);
            }
            last_len = Some(text.len());
        }
        if started.elapsed() > Duration::from_secs(120) {
            bail!(
                "no heap profile under {} within 2 minutes: is the binary built with `heap-profile`?",
                prefix.display()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// What a streamed LIST held.
struct Streamed {
    bytes: u64,
    items: usize,
}

/// Reads a LIST as a streaming client does, a chunk at a time as it
/// arrives, counting its bytes and its Pods (each item's `"kind":"Pod"`,
/// found across chunk boundaries) and checking it ends as a whole list:
/// what is timed is the server's streaming, not a client gathering 1 GB.
async fn stream_list(http: &reqwest::Client, url: &str) -> anyhow::Result<Streamed> {
    const ITEM: &[u8] = br#""kind":"Pod","metadata""#;
    let mut response = http.get(url).send().await?.error_for_status()?;
    let (mut bytes, mut items) = (0u64, 0usize);
    // The end of the previous chunk, for a mark split across two: the
    // marks that start in it are counted with the head of the next chunk,
    // the rest of which is searched where it lies (not copied: the client
    // shares the two cores with the server it times).
    let finder = memchr::memmem::Finder::new(ITEM);
    let mut carry: Vec<u8> = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        bytes += chunk.len() as u64;
        let head = (ITEM.len() - 1).min(chunk.len());
        carry.extend_from_slice(&chunk[..head]);
        items += finder.find_iter(&carry).count();
        if chunk.len() > head {
            // The carry is shorter than two marks and the head shorter
            // than one: what it held spans the boundary, counted once.
            items += finder.find_iter(&chunk).count();
            carry.clear();
            carry.extend_from_slice(&chunk[chunk.len() - head..]);
        } else {
            let keep = (ITEM.len() - 1).min(carry.len());
            carry.drain(..carry.len() - keep);
        }
    }
    if !carry.ends_with(b"\"}}") {
        bail!("the LIST ended early: …{}", String::from_utf8_lossy(&carry));
    }
    Ok(Streamed { bytes, items })
}

/// Starts the server on `dir` (left by a `kill -9`), prints the time until
/// `/readyz` answers and the RSS then, then waits until podsim is idle
/// again (its controllers' first lists queue every Pod at low priority)
/// and prints how long that took.
async fn restart(
    bin: &Path,
    dir: &Path,
    port: u16,
    http: &reqwest::Client,
) -> anyhow::Result<Server> {
    let started = Instant::now();
    let server = Server::start(bin, dir, port)?;
    let url = server.url.clone();
    server.wait_ready(http).await?;
    let ready = started.elapsed();
    let (rss_ready, peak_ready) = server.rss();
    println!(
        "restart: kill -9, then ready (/readyz) in {:.2} s; RSS then {:.0} MB, peak {:.0} MB",
        ready.as_secs_f64(),
        mb(rss_ready),
        mb(peak_ready)
    );
    let settle = Instant::now();
    let mut idle_polls = 0;
    loop {
        let text = metrics(http, &url).await?;
        let depth = metric(&text, "workqueue_depth{name=\"podsim\"}");
        let busy = metric(&text, "workqueue_unfinished_work_seconds{name=\"podsim\"}");
        idle_polls = if depth == 0.0 && busy == 0.0 {
            idle_polls + 1
        } else {
            0
        };
        if idle_polls == 3 {
            let (rss, peak) = server.rss();
            println!(
                "after restart: podsim idle {:.1} s after ready, having reconciled {:.0} Pods again; RSS {:.0} MB, peak {:.0} MB",
                settle.elapsed().as_secs_f64(),
                podsim_reconciles(&text),
                mb(rss),
                mb(peak)
            );
            // Idle past a controller checkpoint's period, so that the
            // next kill finds the controllers' work on record.
            tokio::time::sleep(Duration::from_secs(2)).await;
            break;
        }
        if settle.elapsed() > Duration::from_secs(600) {
            println!("after restart: still {depth} keys queued after 10 minutes");
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(server)
}

/// `scale-bench restart DIR [TIMES]`: restarts only, on a directory a
/// run kept (`SCALE_KEEP=1`): start the server there and let podsim go
/// idle (a first start by a build that wrote no controller checkpoint
/// reconciles every Pod), then TIMES times (default 3) `kill -9` it and
/// [`restart`] it.
async fn restarts(dir: &Path, times: usize) -> anyhow::Result<()> {
    let bin = prepare(dir)?;
    let http = reqwest::Client::new();
    let port = free_port()?;
    println!(
        "restarts: {} on {} ({times} times)",
        bin.display(),
        dir.display()
    );
    // The first start may find no controller checkpoint (a directory
    // kept by an older build): it is the first restart, and converges.
    let mut server = restart(&bin, dir, port, &http).await?;
    for _ in 0..times {
        server.kill9();
        server = restart(&bin, dir, port, &http).await?;
    }
    Ok(())
}

/// Median, min and max of 9 timed GETs of `path` (`accept` as given).
async fn timed(
    http: &reqwest::Client,
    url: &str,
    path: &str,
    accept: &str,
) -> anyhow::Result<(Duration, Duration, Duration, usize)> {
    let mut times = Vec::new();
    let mut bytes = 0;
    for _ in 0..9 {
        let started = Instant::now();
        let body = http
            .get(format!("{url}{path}"))
            .header("accept", accept)
            .send()
            .await?
            .error_for_status()
            .with_context(|| path.to_owned())?
            .bytes()
            .await?;
        times.push(started.elapsed());
        bytes = body.len();
    }
    times.sort();
    Ok((times[4], times[0], times[8], bytes))
}

/// `scale-bench console DIR [FAMILY]`: see the module doc.
async fn console(dir: &Path, family: usize) -> anyhow::Result<()> {
    let bin = prepare(dir)?;
    let http = reqwest::Client::new();
    let server = Server::start(&bin, dir, free_port()?)?;
    let url = server.url.clone();
    server.wait_ready(&http).await?;
    // Ready takes writes; the informers may still be filling.
    let started = Instant::now();
    let held = loop {
        let overview: Value = http
            .get(format!("{url}/setpoint/v1/console/overview"))
            .send()
            .await?
            .json()
            .await?;
        let pods = overview["kinds"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|k| k["kind"] == "Pod")
            .and_then(|k| k["count"].as_u64())
            .unwrap_or(0);
        let metrics = metrics(&http, &url).await?;
        if pods > 0 && metric(&metrics, "workqueue_depth{name=\"podsim\"}") == 0.0 {
            break pods;
        }
        if started.elapsed() > Duration::from_secs(900) {
            bail!("the informers did not fill in 15 minutes");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    println!(
        "console: {} holding {held} Pods; ReplicaSet of {family} Pods",
        dir.display()
    );
    let replicaset = json!({"apiVersion": "demo.setpoint.dev/v1", "kind": "ReplicaSet",
        "metadata": {"name": "family", "namespace": "default"},
        "spec": {"replicas": family, "selector": {"matchLabels": {"app": "family"}},
                 "template": {"metadata": {"labels": {"app": "family"}},
                              "spec": {"startupDelayMs": 0, "image": "nginx"}}}});
    // More children than an object may have by default (1,000): the
    // operator raises it for replicaset, as docs/operations.md says.
    let grant = json!({"apiVersion": "setpoint.dev/v1", "kind": "PluginGrant",
        "metadata": {"name": "replicaset"},
        "spec": {"limits": {"children": family.max(1_000)}}});
    let granted = http
        .post(format!("{url}/apis/setpoint.dev/v1/plugingrants"))
        .json(&grant)
        .send()
        .await?;
    if granted.status() != reqwest::StatusCode::CONFLICT {
        granted.error_for_status()?;
    }
    let rs_path = "/apis/demo.setpoint.dev/v1/namespaces/default/replicasets";
    let created = http
        .post(format!("{url}{rs_path}"))
        .json(&replicaset)
        .send()
        .await?;
    if created.status() != reqwest::StatusCode::CONFLICT {
        created.error_for_status()?;
    }
    let started = Instant::now();
    loop {
        let rs: Value = http
            .get(format!("{url}{rs_path}/family"))
            .send()
            .await?
            .json()
            .await?;
        if rs["status"]["readyReplicas"].as_u64() == Some(family as u64) {
            break;
        }
        if started.elapsed() > Duration::from_secs(600) {
            bail!(
                "the ReplicaSet was not ready in 10 minutes: {}",
                rs["status"]
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let tree = |kind: &str, name: &str| {
        format!(
            "/setpoint/v1/console/tree?apiVersion=demo.setpoint.dev/v1&kind={kind}&namespace=default&name={name}"
        )
    };
    let table = "application/json;as=Table;v=v1;g=meta.k8s.io";
    let pod = http
        .get(format!("{url}{PODS}?labelSelector=app%3Dfamily&limit=1"))
        .send()
        .await?
        .json::<Value>()
        .await?["items"][0]["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    for (what, path, accept) in [
        ("the page (/)", "/".to_owned(), "text/html"),
        (
            "overview",
            "/setpoint/v1/console/overview".to_owned(),
            "application/json",
        ),
        (
            "tree of the ReplicaSet",
            tree("ReplicaSet", "family"),
            "application/json",
        ),
        (
            "tree of one of its Pods",
            tree("Pod", &pod),
            "application/json",
        ),
        ("Pods table, first 100", format!("{PODS}?limit=100"), table),
        (
            "Pods table by label, first 100",
            format!("{PODS}?labelSelector=app%3Dfamily&limit=100"),
            table,
        ),
    ] {
        let (median, min, max, bytes) = timed(&http, &url, &path, accept).await?;
        println!(
            "console: {what}: median {:.1} ms [min {:.1} .. max {:.1}], {bytes} B",
            median.as_secs_f64() * 1e3,
            min.as_secs_f64() * 1e3,
            max.as_secs_f64() * 1e3
        );
    }
    let (rss, peak) = server.rss();
    println!("console: RSS {:.0} MB, peak {:.0} MB", mb(rss), mb(peak));
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    if args.first().map(String::as_str) == Some("console") {
        let dir = args.get(1).context("scale-bench console DIR [FAMILY]")?;
        let family = args.get(2).and_then(|t| t.parse().ok()).unwrap_or(2_000);
        return runtime.block_on(console(Path::new(dir), family));
    }
    if args.first().map(String::as_str) == Some("restart") {
        let dir = args.get(1).context("scale-bench restart DIR [TIMES]")?;
        let times = args.get(2).and_then(|t| t.parse().ok()).unwrap_or(3);
        return runtime.block_on(restarts(Path::new(dir), times));
    }
    let n = args
        .first()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| env_or("SCALE_N", 200_000usize));
    let clients = env_or("SCALE_CLIENTS", 32usize);
    runtime.block_on(run(n, clients))
}

/// Resident and peak resident memory of process `pid`, in bytes.
fn rss_pair(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Resident memory of process `pid`, in bytes.
fn rss_of(pid: u32) -> u64 {
    rss_pair(pid).0
}

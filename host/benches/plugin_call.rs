//! Cost of a reconcile through a fresh Wasm instance, against the same
//! reconcile logic compiled natively, and the time a plugin file takes from
//! being written to reconciling.
//!
//! `cargo bench -p setpoint --bench plugin_call [-- SECONDS_PER_SIZE] [--no-reload] [--only native|wasm] [--size BYTES[,BYTES...]]`
//!
//! - Reconcile throughput (1 thread) of the `replicaset` example plugin on a
//!   ReplicaSet padded to 1 KiB and 16 KiB (annotations), through
//!   `WasmPlugin` (fresh instance per call, pooling allocator) and through
//!   `controller::Native`, the adapter the host runs SDK reconcilers with
//!   natively. Both start from the same `Request` (the object as the
//!   informer cache holds it) and end with the same `Response`: the object is
//!   serialised to JSON once, the reconciler parses it once, and the
//!   response's JSON is parsed once, on either side.
//! - Each side reports wall-clock µs per call and process CPU µs per call
//!   (all threads, read after a short pause so that work left to other
//!   threads is counted; the pause is not counted as wall time).
//! - The machine this runs on is shared and noisy, so the two sides run in
//!   short alternating slices (the order flips every round) and each ratio is
//!   the median of the per-round ratios: a slow minute slows both sides of a
//!   round alike.
//! - Per-call overhead: the Wasm time per call minus the native time.
//! - It runs with the system allocator, as the library does for an embedder
//!   that chooses none. Under the `setpoint` binary's mimalloc the native
//!   side is faster and the Wasm side unchanged (the guest has its own
//!   allocator), so the ratios are higher there (docs/benchmarks/plugins.md).
//! - `--only native|wasm` runs one side alone (for `perf record`);
//!   `--size BYTES[,BYTES...]` measures only these object sizes, in this
//!   order (`--size 262144,1024`: small calls in a slot a big one used);
//!   `PLUGIN_CALL_WASM=path` measures another build of the replicaset plugin;
//!   `PLUGIN_CALL_TARGET=wasm32-wasip2` builds the plugins with WASI instead
//!   of for the SDK's default `wasm32-unknown-unknown`.
//! - Reload latency: a host watches a plugins directory; each round writes a
//!   new build of the `versioned` test plugin (a distinct custom section, so
//!   it is compiled afresh) and measures until an object's status shows the
//!   new version (median and p99, includes the watcher's debounce).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use setpoint::controller::{CacheView, Native, Reconciler, Request};
use setpoint::object::Object;
use setpoint::runtime::{Runtime, RuntimeConfig};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// The target the plugins are built for: `PLUGIN_CALL_TARGET`, by default
/// the SDK's lean `wasm32-unknown-unknown` (`wasm32-wasip2` measures a
/// plugin that imports WASI).
fn plugin_target() -> String {
    std::env::var("PLUGIN_CALL_TARGET").unwrap_or_else(|_| "wasm32-unknown-unknown".into())
}

fn built_plugins() -> PathBuf {
    let target = workspace().join("target").join("wasm");
    let plugin_target = plugin_target();
    let status = Command::new(env!("CARGO"))
        .current_dir(workspace())
        .args(["build", "--profile", "plugin", "--target", &plugin_target])
        .arg("--target-dir")
        .arg(&target)
        .args(["-p", "replicaset", "-p", "versioned", "-p", "versioned2"])
        .status()
        .expect("running cargo");
    assert!(status.success(), "building the plugins failed");
    target.join(plugin_target).join("plugin")
}

/// A ReplicaSet padded with annotations to about `size` bytes of JSON.
fn replicaset(size: usize) -> Value {
    let mut object = json!({
        "apiVersion": "demo.setpoint.dev/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web", "namespace": "default", "uid": "6f1c0d1e-0000-4000-8000-000000000001",
            "resourceVersion": "42", "generation": 3, "annotations": {}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"image": "nginx", "startupDelayMs": 0}}},
        "status": {"replicas": 1, "readyReplicas": 1, "observedGeneration": 3}
    });
    let mut i = 0;
    while object.to_string().len() < size {
        object["metadata"]["annotations"][format!("example.com/note-{i}")] = json!("x".repeat(96));
        i += 1;
    }
    object
}

struct NoCache;

impl CacheView for NoCache {
    fn get(&self, _: &str, _: &str, _: Option<&str>, _: &str) -> Option<Arc<Object>> {
        None
    }
    fn list(&self, _: &str, _: &str, _: Option<&str>, _: &str) -> Result<Vec<Arc<Object>>, String> {
        Ok(vec![])
    }
}

/// Process CPU time (all threads: the caller, the runtime's background
/// thread, the epoch ticker) and the calling thread's CPU time.
fn cpu_now() -> (Duration, Duration) {
    use rustix::time::{ClockId, clock_gettime};
    let d = |t: rustix::time::Timespec| Duration::new(t.tv_sec as u64, t.tv_nsec as u32);
    (
        d(clock_gettime(ClockId::ProcessCPUTime)),
        d(clock_gettime(ClockId::ThreadCPUTime)),
    )
}

/// One slice of one side: microseconds per call.
#[derive(Clone, Copy)]
struct Slice {
    /// Wall-clock time on the calling thread.
    wall: f64,
    /// CPU time of the whole process, background work included.
    cpu: f64,
    /// CPU time of the calling thread alone.
    thread_cpu: f64,
}

/// Time `f` for about `budget` after a warm-up. Work a call left to the
/// background thread is counted: the process CPU is read after a pause in
/// which that work finishes (the pause is not counted as wall time).
fn micros_per_call(budget: Duration, mut f: impl FnMut()) -> Slice {
    for _ in 0..100 {
        f();
    }
    settle();
    let (cpu0, thread0) = cpu_now();
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < budget {
        for _ in 0..20 {
            f();
        }
        n += 20;
    }
    let wall = start.elapsed();
    let (_, thread1) = cpu_now();
    settle();
    let (cpu1, _) = cpu_now();
    let per_call = |d: Duration| d.as_secs_f64() * 1e6 / n as f64;
    Slice {
        wall: per_call(wall),
        cpu: per_call(cpu1 - cpu0),
        thread_cpu: per_call(thread1 - thread0),
    }
}

/// Let the runtime's background thread finish what the last calls left it.
fn settle() {
    std::thread::sleep(Duration::from_millis(5));
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Every side's slices, in `rounds` rounds of `budget / rounds` each; the
/// order of the sides rotates every round.
fn compare(
    budget: Duration,
    rounds: u32,
    sides: &[&dyn Reconciler],
    request: &Request,
    cache: &Arc<dyn CacheView>,
) -> Vec<Vec<Slice>> {
    let slice = budget / (sides.len() as u32 * rounds);
    let run = |reconciler: &dyn Reconciler| {
        micros_per_call(slice, || {
            std::hint::black_box(reconciler.reconcile(request, cache).unwrap());
        })
    };
    let mut slices = vec![Vec::new(); sides.len()];
    for round in 0..rounds as usize {
        for i in 0..sides.len() {
            let side = (round + i) % sides.len();
            slices[side].push(run(sides[side]));
        }
    }
    slices
}

/// Median over rounds of the per-round ratio `a / b`, with min and max.
fn ratio(a: &[Slice], b: &[Slice], of: impl Fn(&Slice) -> f64) -> String {
    let mut ratios: Vec<f64> = a.iter().zip(b).map(|(a, b)| of(a) / of(b)).collect();
    ratios.sort_by(f64::total_cmp);
    format!(
        "{:.2}x [{:.2}..{:.2}]",
        median(ratios.clone()),
        ratios[0],
        ratios[ratios.len() - 1]
    )
}

/// Append a custom section, so the bytes (and the content hash) differ but
/// the component is the same.
fn with_custom_section(mut bytes: Vec<u8>, tag: u32) -> Vec<u8> {
    let name = b"setpoint-bench";
    let payload = tag.to_le_bytes();
    let size = 1 + name.len() + payload.len();
    bytes.push(0);
    bytes.push(size as u8);
    bytes.push(name.len() as u8);
    bytes.extend_from_slice(name);
    bytes.extend_from_slice(&payload);
    bytes
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

async fn reload_latency(plugins: &Path, rounds: u32) -> Vec<Duration> {
    let dir = tempfile::tempdir().unwrap();
    let builds = [
        (
            std::fs::read(plugins.join("versioned.wasm")).unwrap(),
            "1.0.0",
        ),
        (
            std::fs::read(plugins.join("versioned2.wasm")).unwrap(),
            "2.0.0",
        ),
    ];
    std::fs::write(dir.path().join("versioned.wasm"), &builds[0].0).unwrap();
    let host = setpoint::Host::builder()
        .plugins_dir(dir.path())
        .build()
        .await
        .unwrap();
    let api = host.api().clone();
    let kind = api
        .kinds()
        .require("test.setpoint.dev/v1", "Versioned")
        .unwrap();
    api.create(
        &kind,
        json!({"apiVersion": "test.setpoint.dev/v1", "kind": "Versioned",
            "metadata": {"name": "probe", "namespace": "default"}, "spec": {"n": 1}}),
    )
    .await
    .unwrap();
    let version_of = |object: &Value| {
        object["status"]["version"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    let mut latencies = Vec::new();
    for round in 1..=rounds {
        let (bytes, version) = &builds[round as usize % 2];
        let bytes = with_custom_section(bytes.clone(), round);
        let tmp = dir.path().join(".versioned.wasm.tmp");
        std::fs::write(&tmp, &bytes).unwrap();
        let start = Instant::now();
        std::fs::rename(&tmp, dir.path().join("versioned.wasm")).unwrap();
        loop {
            let object = api.get(&kind, Some("default"), "probe").await.unwrap();
            if version_of(&object) == *version {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "reload {round} never applied"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        latencies.push(start.elapsed());
    }
    host.shutdown().await;
    latencies
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seconds: f64 = args
        .iter()
        .enumerate()
        .find(|(i, a)| !a.starts_with('-') && (*i == 0 || !args[i - 1].starts_with("--")))
        .map(|(_, a)| a)
        .and_then(|a| a.parse().ok())
        .unwrap_or(3.0);
    let reload = !args.iter().any(|a| a == "--no-reload");
    // `--only native|wasm`: run that side alone, 1 KiB then 16 KiB,
    // for a profiler (`perf record`); prints µs per call.
    let only = args
        .iter()
        .position(|a| a == "--only")
        .map(|i| args[i + 1].clone());
    // `--size BYTES[,BYTES...]`: only these object sizes, in this order.
    let sizes: Vec<usize> = match args.iter().position(|a| a == "--size") {
        Some(i) => args[i + 1]
            .split(',')
            .map(|n| n.parse().expect("--size BYTES[,BYTES...]"))
            .collect(),
        None => vec![1024, 16 * 1024],
    };
    let budget = Duration::from_secs_f64(seconds);
    let rounds = 10;
    let plugins = built_plugins();
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    // `PLUGIN_CALL_WASM=path`: measure another build of the replicaset
    // plugin (an A/B of guest build settings).
    let component = std::env::var_os("PLUGIN_CALL_WASM")
        .map(PathBuf::from)
        .unwrap_or_else(|| plugins.join("replicaset.wasm"));
    let bytes = std::fs::read(component).unwrap();
    let wasm = runtime.load(&bytes, None).unwrap();
    let native = Native::new(replicaset::ReplicaSetReconciler);
    let cache: Arc<dyn CacheView> = Arc::new(NoCache);

    if let Some(only) = only {
        let side: &dyn Reconciler = match only.as_str() {
            "native" => &native,
            "wasm" => &wasm,
            other => panic!("--only {other}: expected native or wasm"),
        };
        for &size in &sizes {
            let request = Request {
                object: Arc::new(replicaset(size)),
                owned: vec![],
                finalizing: false,
                now_unix_ms: 1_700_000_000_000,
                observations: vec![],
                outcomes: vec![],
                round: 0,
            };
            let s = micros_per_call(budget, || {
                std::hint::black_box(side.reconcile(&request, &cache).unwrap());
            });
            println!(
                "{only} {size} B: wall {:.1} µs, cpu {:.1} µs, thread cpu {:.1} µs per call",
                s.wall, s.cpu, s.thread_cpu
            );
        }
        return;
    }
    println!(
        "plugin_call: replicaset reconcile, 1 calling thread, {seconds} s per size in {rounds} rotating rounds"
    );
    println!(
        "µs per call: wall = elapsed time; cpu = process CPU time (all threads); \
         ratios = median of per-round ratios [min..max]"
    );
    println!(
        "| object | native µs/call wall / cpu | wasm µs/call wall / cpu | ratio wall | ratio cpu | overhead µs/call (wall) | native calls/s | wasm calls/s |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for &size in &sizes {
        let object = replicaset(size);
        let actual = object.to_string().len();
        let request = Request {
            object: Arc::new(object),
            owned: vec![],
            finalizing: false,
            now_unix_ms: 1_700_000_000_000,
            observations: vec![],
            outcomes: vec![],
            round: 0,
        };
        let slices = compare(budget, rounds, &[&native, &wasm], &request, &cache);
        let (n, w) = (&slices[0], &slices[1]);
        let med = |s: &[Slice], of: fn(&Slice) -> f64| median(s.iter().map(of).collect());
        let wall = |s: &Slice| s.wall;
        let cpu = |s: &Slice| s.cpu;
        let (native_us, wasm_us) = (med(n, wall), med(w, wall));
        println!(
            "| {:.1} KiB | {native_us:.1} / {:.1} | {wasm_us:.1} / {:.1} | {} | {} | {:.1} | {:.0} | {:.0} |",
            actual as f64 / 1024.0,
            med(n, cpu),
            med(w, cpu),
            ratio(w, n, wall),
            ratio(w, n, cpu),
            wasm_us - native_us,
            1e6 / native_us,
            1e6 / wasm_us,
        );
    }
    if !reload {
        return;
    }

    let reloads = 40;
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut latencies = tokio.block_on(reload_latency(&plugins, reloads));
    latencies.sort();
    println!(
        "reload: file written -> new version reconciling, {reloads} reloads (debounce {:?}): median {:.0} ms, p99 {:.0} ms",
        setpoint::plugins::dir_watch::DEBOUNCE,
        percentile(&latencies, 0.5).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
    );
}

//! The whole reconcile loop on the durable embedded store: write → watch →
//! informer → queue → worker → reconciler → status write, for 10,000
//! objects.
//!
//! `cargo bench -p setpoint --bench loop [-- OBJECTS [WORKERS] [inline|wasm]]`.
//! The store lives in a fresh directory under `$SETPOINT_BENCH_DIR`
//! (default: the system temp dir). The reconciler writes
//! `status.observedGeneration` and `status.value` from the spec. By default
//! it is native (a `controller::Reconciler`), so this measures the host's
//! loop: it runs on the host's reconcile threads (tokio's blocking pool
//! when all are busy), as Wasm plugins do. `inline` runs it on the worker's
//! task (`Reconciler::runs_inline`, for trusted native reconcilers); `wasm`
//! computes the status in the `benchitem` Wasm plugin
//! (`tests/guests/benchitem`, built first), a fresh instance per call, as
//! every plugin dropped into `plugins/` runs (`LOOP_WASM=path` runs another
//! build of it instead, for A/B comparisons of the SDK). Phases:
//!
//! 1. **create**: 64 writer tasks create OBJECTS objects as fast as the store
//!    takes them while the controller reconciles them;
//! 2. **update**: the same writers change every object's spec once;
//! 3. **resync**: every converged object is queued again (`Host::resync`):
//!    reconciles that write nothing, the loop's own ceiling without the store.
//!
//! For each phase it reports, as the headline, the *changes converged per
//! second*: reconciles that wrote a status, from the first write until
//! every object's status shows the phase's generation. Reconciles that
//! wrote nothing are reported apart, as echoes (the controller's own status
//! writes do not queue the object again, so these should be about none).
//! Then the latency from a write's acknowledgement to the start of the
//! reconcile that first sees it (p50, p99), and the process CPU time per
//! change (all threads; steadier than throughput on a shared machine). It
//! runs with the `setpoint` binary's allocator (mimalloc).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use setpoint::controller::{
    self, CacheView, Manifest, ReconcileError, Reconciler, Request, Response,
};
use setpoint::object::{KindRef, meta};
use setpoint::runtime::{Runtime, RuntimeConfig, WasmPlugin};
use setpoint::store::EmbeddedBackend;
use setpoint::{Host, queue};

/// The `setpoint` binary's allocator (host/src/main.rs), so that this
/// measures the loop as the binary runs it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const WRITERS: usize = 64;

fn bench_dir() -> PathBuf {
    std::env::var_os("SETPOINT_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
}

/// Builds the `benchitem` plugin for `LOOP_TARGET` (by default the SDK's
/// lean `wasm32-unknown-unknown`) and returns its path, or the path in
/// `LOOP_WASM`.
fn built_benchitem() -> PathBuf {
    if let Some(path) = std::env::var_os("LOOP_WASM") {
        return PathBuf::from(path);
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let target = workspace.join("target").join("wasm");
    let plugin_target =
        std::env::var("LOOP_TARGET").unwrap_or_else(|_| "wasm32-unknown-unknown".into());
    let status = Command::new(env!("CARGO"))
        .current_dir(workspace)
        .args(["build", "--profile", "plugin", "--target", &plugin_target])
        .arg("--target-dir")
        .arg(&target)
        .args(["-p", "benchitem"])
        .status()
        .expect("running cargo");
    assert!(status.success(), "building the benchitem plugin failed");
    target
        .join(plugin_target)
        .join("plugin")
        .join("benchitem.wasm")
}

/// Write acknowledgements and first reconcile starts, per (name, generation).
#[derive(Default)]
struct Clock {
    acked: Mutex<HashMap<(String, i64), Instant>>,
    started: Mutex<HashMap<(String, i64), Instant>>,
}

struct StatusWriter {
    manifest: Manifest,
    clock: Arc<Clock>,
    calls: AtomicU64,
    writes: AtomicU64,
    inline: bool,
    /// With `wasm`: the `benchitem` plugin, which computes the same status
    /// in a fresh Wasm instance per call.
    wasm: Option<WasmPlugin>,
}

impl Reconciler for StatusWriter {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn runs_inline(&self) -> bool {
        self.inline
    }

    fn reconcile(
        &self,
        request: &Request,
        cache: &Arc<dyn CacheView>,
    ) -> Result<Response, ReconcileError> {
        let now = Instant::now();
        self.calls.fetch_add(1, Ordering::Relaxed);
        let object = &request.object;
        let generation = meta::generation(object);
        if object["status"]["observedGeneration"] != json!(generation) {
            self.writes.fetch_add(1, Ordering::Relaxed);
            self.clock
                .started
                .lock()
                .unwrap()
                .entry((meta::name(object).to_owned(), generation))
                .or_insert(now);
        }
        if let Some(wasm) = &self.wasm {
            return wasm.reconcile(request, cache);
        }
        Ok(Response {
            status: Some(
                json!({"value": object["spec"]["value"], "observedGeneration": generation}),
            ),
            ..Default::default()
        })
    }
}

/// CPU time of the whole process so far (all threads: writers, store,
/// watch, informer, workers, plugin calls).
fn process_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

async fn phase(
    name: &str,
    host: &Arc<Host>,
    reconciler: &Arc<StatusWriter>,
    clock: &Arc<Clock>,
    objects: usize,
    generation: i64,
) {
    let kind = host
        .api()
        .kinds()
        .require("bench.setpoint.dev/v1", "Item")
        .unwrap();
    let calls_before = reconciler.calls.load(Ordering::Relaxed);
    let writes_before = reconciler.writes.load(Ordering::Relaxed);
    let started = Instant::now();
    let cpu_before = process_cpu();
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (host, kind, clock) = (host.clone(), kind.clone(), clock.clone());
        writers.push(tokio::spawn(async move {
            for i in (w..objects).step_by(WRITERS) {
                let name = format!("item-{i:05}");
                let object = if generation == 1 {
                    let object = json!({"apiVersion": "bench.setpoint.dev/v1", "kind": "Item",
                        "metadata": {"name": name, "namespace": "default"},
                        "spec": {"value": 1}});
                    host.api().create(&kind, object).await.unwrap()
                } else {
                    loop {
                        let mut next = host.api().get(&kind, Some("default"), &name).await.unwrap();
                        next["spec"]["value"] = json!(generation);
                        match host.api().update(&kind, next).await {
                            Ok(updated) => break updated,
                            Err(setpoint::api::Error::Conflict { .. }) => continue,
                            Err(err) => panic!("{err}"),
                        }
                    }
                };
                let acked = Instant::now();
                clock
                    .acked
                    .lock()
                    .unwrap()
                    .insert((name, meta::generation(&object)), acked);
            }
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    let written = started.elapsed();
    // Done when every object's status shows this generation. The list is a
    // snapshot taken when it starts, so a list that shows every status
    // proves the loop had converged by then: the time, CPU and reconciles up
    // to that instant are the phase's; the list's own 30-40 ms (and the
    // echo reconciles that run meanwhile) are not.
    let (elapsed, cpu, calls, writes) = loop {
        let done = clock
            .started
            .lock()
            .unwrap()
            .keys()
            .filter(|(_, g)| *g == generation)
            .count();
        // Every object's status-writing reconcile has returned: only then
        // is the (costly) list likely to show them all.
        let status_computed =
            reconciler.writes.load(Ordering::Relaxed) - writes_before >= objects as u64;
        if done == objects && status_computed {
            let snapshot = (
                started.elapsed(),
                process_cpu() - cpu_before,
                reconciler.calls.load(Ordering::Relaxed) - calls_before,
                reconciler.writes.load(Ordering::Relaxed) - writes_before,
            );
            let list = host.api().list(&kind, &Default::default()).await.unwrap();
            if list
                .items
                .iter()
                .all(|o| o["status"]["observedGeneration"] == json!(generation))
            {
                break snapshot;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let acked = clock.acked.lock().unwrap();
    let starts = clock.started.lock().unwrap();
    let mut latencies: Vec<Duration> = starts
        .iter()
        .filter(|((_, g), _)| *g == generation)
        .filter_map(|(key, start)| {
            acked
                .get(key)
                .map(|ack| start.saturating_duration_since(*ack))
        })
        .collect();
    latencies.sort();
    println!(
        "{name:>6}: {objects} objects, writes done in {:.2}s, converged in {:.2}s: \
         {:.0} changes converged/s ({writes} reconciles wrote status; echoes apart: {} reconciles wrote nothing), \
         write-to-reconcile-start p50 {:.2?} p99 {:.2?}; process CPU {:.1} µs per change",
        written.as_secs_f64(),
        elapsed.as_secs_f64(),
        writes as f64 / elapsed.as_secs_f64(),
        calls - writes,
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.99),
        cpu.as_secs_f64() * 1e6 / writes.max(1) as f64,
    );
}

/// Queue every converged object again; done when each was reconciled once more.
async fn resync(host: &Arc<Host>, reconciler: &Arc<StatusWriter>, objects: usize) {
    let before = reconciler.calls.load(Ordering::Relaxed);
    let writes_before = reconciler.writes.load(Ordering::Relaxed);
    let started = Instant::now();
    let cpu_before = process_cpu();
    host.resync().await;
    while reconciler.calls.load(Ordering::Relaxed) - before < objects as u64 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let elapsed = started.elapsed();
    let cpu = process_cpu() - cpu_before;
    println!(
        "{:>6}: {objects} converged objects reconciled again in {:.2}s: {:.0} reconciles/s ({} wrote); \
         process CPU {:.1} µs per reconcile",
        "resync",
        elapsed.as_secs_f64(),
        objects as f64 / elapsed.as_secs_f64(),
        reconciler.writes.load(Ordering::Relaxed) - writes_before,
        cpu.as_secs_f64() * 1e6 / objects as f64,
    );
}

fn main() {
    // `inline`: the reconciler runs on the worker's task (a trusted native
    // reconciler that opts in); otherwise on the reconcile threads, as Wasm
    // plugins always do.
    let inline = std::env::args().any(|a| a == "inline");
    // `wasm`: the status is computed by the `benchitem` Wasm plugin.
    let wasm = std::env::args().any(|a| a == "wasm").then(|| {
        let bytes = std::fs::read(built_benchitem()).unwrap();
        Runtime::new(RuntimeConfig::default())
            .unwrap()
            .load(&bytes, None)
            .unwrap()
    });
    let mut args = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .filter_map(|a| a.parse::<usize>().ok());
    let objects = args.next().unwrap_or(10_000);
    let workers = args.next().unwrap_or(4);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let dir = tempfile::Builder::new()
            .prefix("setpoint-loop-bench")
            .tempdir_in(bench_dir())
            .unwrap();
        let backend = {
            let path = dir.path().to_owned();
            tokio::task::spawn_blocking(move || EmbeddedBackend::open(&path))
                .await
                .unwrap()
                .unwrap()
        };
        // A count of workers is that many, fixed, as the figures in
        // BENCHMARKS.md were taken; `0` is the default adaptive concurrency.
        let config = controller::Config {
            workers: if workers == 0 {
                controller::Config::default().workers
            } else {
                workers
            },
            concurrency: if workers == 0 {
                controller::Concurrency::Adaptive
            } else {
                controller::Concurrency::Fixed
            },
            queue: queue::Config {
                qps: f64::INFINITY,
                ..queue::Config::named("items")
            },
            resync: None,
            ..Default::default()
        };
        let host = Arc::new(
            Host::builder()
                .backend(Arc::new(backend))
                .controller(config)
                .build()
                .await
                .unwrap(),
        );
        let clock = Arc::new(Clock::default());
        let reconciler = Arc::new(StatusWriter {
            manifest: Manifest {
                name: "status-writer".into(),
                version: "1.0.0".into(),
                reconciles: KindRef::new("bench.setpoint.dev/v1", "Item"),
                owns: vec![],
                definitions: vec![benchitem::definition()],
                finalizer: None,
                destinations: vec![],
                secrets: vec![],
            },
            clock: clock.clone(),
            calls: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            inline,
            wasm,
        });
        host.add_reconciler(reconciler.clone()).await.unwrap();
        println!(
            "whole loop, embedded durable store in {}, {workers} workers, status-writing reconciler: {}, {} CPUs",
            dir.path().display(),
            if reconciler.wasm.is_some() {
                "the benchitem Wasm plugin (a fresh instance per call, on reconcile threads)"
            } else if inline {
                "native, inline"
            } else {
                "native, on reconcile threads, as Wasm plugins"
            },
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        phase("create", &host, &reconciler, &clock, objects, 1).await;
        phase("update", &host, &reconciler, &clock, objects, 2).await;
        resync(&host, &reconciler, objects).await;
        host.shutdown().await;
    });
}

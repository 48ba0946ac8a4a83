//! The reconcile loop's guarantees, with instrumented native reconcilers
//! ([`setpoint::controller::from_fn`]): coalescing, per-key exclusion, the
//! hot-loop breaker, inline reconcilers, stale statuses and finalizers
//! removed by someone else.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use setpoint::Host;
use setpoint::controller::{
    self, HotLoopConfig, Manifest, ReconcileError, Reconciler, Request, Response, from_fn,
};
use setpoint::object::{KindRef, meta};

use crate::support::eventually;

const CONVERGE: Duration = Duration::from_secs(60);

/// A CRD for the native test reconcilers: `Probe`, free-form spec and status.
fn probe_definition() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "probes.test.setpoint.dev"},
        "spec": {"group": "test.setpoint.dev", "scope": "Namespaced",
            "names": {"kind": "Probe", "plural": "probes", "singular": "probe", "listKind": "ProbeList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}
    })
}

/// The manifest of a native test reconciler of `Probe`s.
fn probe_manifest(name: &str, finalizer: Option<&str>) -> Manifest {
    let mut manifest = Manifest::new(name, "1.0.0", KindRef::new("test.setpoint.dev/v1", "Probe"));
    manifest.definitions = vec![probe_definition()];
    manifest.finalizer = finalizer.map(str::to_owned);
    manifest
}

/// What a probe reconciler (see [`host_with`]) does and saw: it records,
/// per key, how many reconciles run at once, and writes `status.seen =
/// spec.value` (or, as a hot loop, a counter that never settles, asking to
/// be called again at once).
struct Probe {
    name: String,
    hot_loop: bool,
    work: Duration,
    in_flight: Mutex<HashMap<String, usize>>,
    overlaps: AtomicUsize,
    running: AtomicUsize,
    most_running: AtomicUsize,
    calls: AtomicU64,
}

impl Probe {
    fn new(name: &str, hot_loop: bool, work: Duration) -> Arc<Self> {
        Arc::new(Self {
            name: name.to_owned(),
            hot_loop,
            work,
            in_flight: Mutex::default(),
            overlaps: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            most_running: AtomicUsize::new(0),
            calls: AtomicU64::new(0),
        })
    }
}

impl Probe {
    fn reconcile(&self, request: &Request) -> Result<Response, ReconcileError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let key = meta::name(&request.object).to_owned();
        {
            let mut in_flight = self.in_flight.lock().unwrap();
            let n = in_flight.entry(key.clone()).or_default();
            *n += 1;
            if *n > 1 {
                self.overlaps.fetch_add(1, Ordering::SeqCst);
            }
        }
        let running = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_running.fetch_max(running, Ordering::SeqCst);
        std::thread::sleep(self.work); // simulated plugin work, on a blocking thread
        self.running.fetch_sub(1, Ordering::SeqCst);
        *self.in_flight.lock().unwrap().get_mut(&key).unwrap() -= 1;
        if self.hot_loop {
            // The echo of its own status write does not call it again, so
            // it asks to be: every call writes, at one generation.
            return Ok(Response {
                status: Some(json!({"counter":
                    request.object["status"]["counter"].as_i64().unwrap_or(0) + 1})),
                requeue_after: Some(Duration::ZERO),
                ..Default::default()
            });
        }
        let status = json!({"seen": request.object["spec"]["value"],
            "observedGeneration": meta::generation(&request.object)});
        Ok(Response {
            status: Some(status),
            ..Default::default()
        })
    }
}

fn probe_object(name: &str, value: i64) -> Value {
    json!({"apiVersion": "test.setpoint.dev/v1", "kind": "Probe",
        "metadata": {"name": name, "namespace": "default"}, "spec": {"value": value}})
}

/// A host running `probe` as the reconciler of `Probe`s with `config`.
async fn host_with(probe: Arc<Probe>, config: controller::Config) -> Host {
    let host = Host::builder()
        .controller_for(probe.name.clone(), config)
        .build()
        .await
        .unwrap();
    let manifest = probe_manifest(&probe.name, None);
    host.add_reconciler(Arc::new(from_fn(manifest, move |request, _| {
        probe.reconcile(request)
    })))
    .await
    .unwrap();
    host
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_rapid_spec_changes_coalesce_into_far_fewer_reconciles_ending_on_the_last() {
    let probe = Probe::new("coalesce", false, Duration::from_millis(2));
    let host = host_with(probe.clone(), controller::Config::default()).await;
    let kind = host
        .api()
        .kinds()
        .require("test.setpoint.dev/v1", "Probe")
        .unwrap();
    host.api().create(&kind, probe_obj(0)).await.unwrap();
    for value in 1..=1000 {
        set_value(&host, &kind, "p", value).await;
    }
    let last = eventually("the last spec is reconciled", CONVERGE, || async {
        let p = host.api().get(&kind, Some("default"), "p").await.unwrap();
        if p["status"]["seen"] == 1000
            && p["status"]["observedGeneration"] == p["metadata"]["generation"]
        {
            Ok(p)
        } else {
            Err(p["status"].to_string())
        }
    })
    .await;
    let calls = probe.calls.load(Ordering::SeqCst);
    assert!(
        calls < 250,
        "1000 changes coalesced into {calls} reconciles (generation {})",
        last["metadata"]["generation"]
    );
    host.shutdown().await;
}

/// Set `spec.value`, retrying when the controller's status write got in between.
async fn set_value(host: &Host, kind: &setpoint::object::KindInfo, name: &str, value: i64) {
    loop {
        let mut next = host.api().get(kind, Some("default"), name).await.unwrap();
        next["spec"]["value"] = json!(value);
        match host.api().update(kind, next).await {
            Ok(_) => return,
            Err(setpoint::api::Error::Conflict { .. }) => continue,
            Err(err) => panic!("{err}"),
        }
    }
}

fn probe_obj(value: i64) -> Value {
    probe_object("p", value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_is_never_reconciled_by_two_workers_at_once() {
    let probe = Probe::new("exclusive", false, Duration::from_millis(1));
    let config = controller::Config {
        workers: 8,
        ..Default::default()
    };
    let host = host_with(probe.clone(), config).await;
    let kind = host
        .api()
        .kinds()
        .require("test.setpoint.dev/v1", "Probe")
        .unwrap();
    let names: Vec<String> = (0..6).map(|i| format!("k{i}")).collect();
    for name in &names {
        host.api()
            .create(&kind, probe_object(name, 0))
            .await
            .unwrap();
    }
    for value in 1..=100 {
        for name in &names {
            set_value(&host, &kind, name, value).await;
        }
    }
    for name in &names {
        eventually("every key reaches its last spec", CONVERGE, || async {
            let p = host.api().get(&kind, Some("default"), name).await.unwrap();
            if p["status"]["seen"] == 100 {
                Ok(())
            } else {
                Err(p["status"].to_string())
            }
        })
        .await;
    }
    assert_eq!(
        probe.overlaps.load(Ordering::SeqCst),
        0,
        "no key overlapped"
    );
    let stats = host.controller_stats("exclusive").await.unwrap();
    assert_eq!(stats.concurrent_reconciles_of_one_key, 0);
    assert!(
        probe.most_running.load(Ordering::SeqCst) > 1,
        "distinct keys did run in parallel"
    );
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_loop_is_stopped_reported_and_resumed_by_a_spec_change() {
    let probe = Probe::new("hotloop", true, Duration::ZERO);
    let config = controller::Config {
        hot_loop: HotLoopConfig {
            max_writes: 20,
            window: Duration::from_secs(60),
        },
        ..Default::default()
    };
    let host = host_with(probe.clone(), config).await;
    let kind = host
        .api()
        .kinds()
        .require("test.setpoint.dev/v1", "Probe")
        .unwrap();
    host.api()
        .create(&kind, probe_object("hot", 0))
        .await
        .unwrap();
    let condition = |p: &Value| {
        p["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Ready")
            .cloned()
            .unwrap_or_default()
    };
    eventually("the breaker opens", CONVERGE, || async {
        let p = host.api().get(&kind, Some("default"), "hot").await.unwrap();
        let c = condition(&p);
        if c["status"] == "False" && c["reason"] == "HotLoop" {
            Ok(())
        } else {
            Err(p["status"].to_string())
        }
    })
    .await;
    let stats = host.controller_stats("hotloop").await.unwrap();
    assert_eq!(stats.hot_loops, 1);
    let calls = probe.calls.load(Ordering::SeqCst);
    assert!(
        (21..=25).contains(&calls),
        "stopped right after the 21st writing reconcile: {calls} calls"
    );
    let events = host
        .api()
        .list(
            &host.api().kinds().by_plural("", "events").unwrap(),
            &Default::default(),
        )
        .await
        .unwrap();
    assert!(
        events
            .items
            .iter()
            .any(|e| e["reason"] == "HotLoop" && e["type"] == "Warning"),
        "a warning event says why"
    );

    set_value(&host, &kind, "hot", 1).await;
    eventually(
        "a spec change resumes it, and it trips again",
        CONVERGE,
        || async {
            let stats = host.controller_stats("hotloop").await.unwrap();
            if stats.hot_loops == 2 {
                Ok(())
            } else {
                Err(format!("{stats:?}"))
            }
        },
    )
    .await;
    let more = probe.calls.load(Ordering::SeqCst) - calls;
    assert!(
        (21..=25).contains(&more),
        "it had stopped, then ran until the next trip: {more} more calls"
    );
    host.shutdown().await;
}

/// A native reconciler that reads through its cache view (its own object,
/// and Events, which nothing caches) and writes what it saw to the status,
/// noting in `threads` every thread it ran on; `inline` says whether it
/// asks to run on the async task.
fn view_reader(
    name: &str,
    inline: bool,
    threads: Arc<Mutex<HashSet<String>>>,
) -> Arc<dyn Reconciler> {
    let reader = from_fn(probe_manifest(name, None), move |request, cache| {
        threads
            .lock()
            .unwrap()
            .insert(format!("{:?}", std::thread::current().id()));
        let own = cache
            .get(
                "test.setpoint.dev/v1",
                "Probe",
                Some("default"),
                meta::name(&request.object),
            )
            .is_some();
        let events = match cache.list("v1", "Event", Some("default"), "") {
            Ok(_) => "listed".to_owned(),
            Err(err) => err,
        };
        Ok(Response {
            status: Some(json!({"own": own, "events": events,
                "observedGeneration": meta::generation(&request.object)})),
            ..Default::default()
        })
    });
    if inline {
        Arc::new(reader.inline())
    } else {
        Arc::new(reader)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_reconciler_converges_and_reads_only_from_informers() {
    for inline in [true, false] {
        let threads: Arc<Mutex<HashSet<String>>> = Arc::default();
        let host = Host::builder().build().await.unwrap();
        host.add_reconciler(view_reader(
            &format!("reader-{inline}"),
            inline,
            threads.clone(),
        ))
        .await
        .unwrap();
        let kind = host
            .api()
            .kinds()
            .require("test.setpoint.dev/v1", "Probe")
            .unwrap();
        for i in 0..20 {
            host.api()
                .create(&kind, probe_object(&format!("p{i}"), i))
                .await
                .unwrap();
        }
        for i in 0..20 {
            let status = eventually("the probe's status is written", CONVERGE, || async {
                let p = host
                    .api()
                    .get(&kind, Some("default"), &format!("p{i}"))
                    .await
                    .unwrap();
                if p["status"]["observedGeneration"] == p["metadata"]["generation"] {
                    Ok(p["status"].clone())
                } else {
                    Err(p["status"].to_string())
                }
            })
            .await;
            assert_eq!(
                status["own"], true,
                "inline {inline}: its own kind is cached"
            );
            if inline {
                let events = status["events"].as_str().unwrap();
                assert!(
                    events.contains("v1/Event is not cached"),
                    "an inline reconciler does not wait for the store: {events}"
                );
            } else {
                assert_eq!(status["events"], "listed", "a blocking one reads the store");
            }
        }
        let threads = threads.lock().unwrap().len();
        if inline {
            assert!(
                threads <= 2,
                "inline calls run on the runtime's two workers, not on {threads} threads"
            );
        }
        host.shutdown().await;
    }
}

/// A native reconciler whose first call tells `started` and holds until
/// `go_on` says so, so that the status it returns was computed from an old
/// version (the test changes the object meanwhile); counts its calls.
fn racer(
    started: std::sync::mpsc::Sender<()>,
    go_on: std::sync::mpsc::Receiver<()>,
    calls: Arc<AtomicU64>,
) -> Arc<dyn Reconciler> {
    let first_call = Mutex::new(Some((started, go_on)));
    Arc::new(from_fn(probe_manifest("racer", None), move |request, _| {
        calls.fetch_add(1, Ordering::SeqCst);
        if let Some((started, go_on)) = first_call.lock().unwrap().take() {
            started.send(()).unwrap();
            go_on.recv().unwrap();
        }
        Ok(Response {
            status: Some(json!({"seen": request.object["spec"]["value"]})),
            ..Default::default()
        })
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_computed_from_an_old_version_conflicts_and_is_retried_quietly_on_the_new_one() {
    crate::support::logs::capture();
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let (go_on_tx, go_on_rx) = std::sync::mpsc::channel();
    let calls = Arc::new(AtomicU64::new(0));
    let host = Host::builder().build().await.unwrap();
    host.add_reconciler(racer(started_tx, go_on_rx, calls.clone()))
        .await
        .unwrap();
    let api = host.api();
    let kind = api
        .kinds()
        .require("test.setpoint.dev/v1", "Probe")
        .unwrap();
    api.create(&kind, probe_object("raced", 1)).await.unwrap();

    // While the first reconcile (of value 1) is held, the spec moves on.
    tokio::task::spawn_blocking(move || started_rx.recv().unwrap())
        .await
        .unwrap();
    set_value(&host, &kind, "raced", 2).await;
    go_on_tx.send(()).unwrap();

    eventually("the status of the new version", CONVERGE, || async {
        let object = api
            .get(&kind, Some("default"), "raced")
            .await
            .map_err(|e| e.to_string())?;
        if object["status"]["seen"] == 2 {
            Ok(())
        } else {
            Err(object.to_string())
        }
    })
    .await;
    // The stale status was never written, and the conflict is history and
    // a debug line, not a warning.
    assert!(calls.load(Ordering::SeqCst) >= 2);
    let history = host
        .history(
            "test.setpoint.dev/v1",
            "Probe",
            &setpoint::object::ObjectKey::new(Some("default"), "raced"),
        )
        .await;
    assert!(
        history.iter().any(|r| matches!(&r.outcome,
            controller::Outcome::TransientError(m) if m.contains("Operation cannot be fulfilled"))),
        "{history:?}"
    );
    let logs = crate::support::logs::lines_with;
    assert!(!logs(&["changed while it was reconciled", "default/raced"]).is_empty());
    assert!(
        logs(&["reconcile failed", "default/raced"]).is_empty(),
        "{:?}",
        logs(&["reconcile failed", "default/raced"])
    );
    host.shutdown().await;
}

/// A native reconciler with a finalizer that, when deletion starts, lets
/// the object go itself (as another actor might) through `api` before
/// answering "done"; counts its finalizing calls.
fn lets_go(api: setpoint::api::Api, finalize_calls: Arc<AtomicU64>) -> Arc<dyn Reconciler> {
    let runtime = tokio::runtime::Handle::current();
    let manifest = probe_manifest("letsgo", Some("test.setpoint.dev/letsgo"));
    Arc::new(from_fn(manifest, move |request, _| {
        if request.object["metadata"]["deletionTimestamp"].is_null() {
            return Ok(Response::default());
        }
        finalize_calls.fetch_add(1, Ordering::SeqCst);
        // Reconcilers run on the host's reconcile threads, outside the
        // async runtime, so blocking on it here is allowed.
        runtime.block_on(async {
            let kind = api
                .kinds()
                .require("test.setpoint.dev/v1", "Probe")
                .unwrap();
            let mut latest = api.get(&kind, Some("default"), "released").await.unwrap();
            latest["metadata"]["finalizers"] = json!([]);
            api.update(&kind, latest).await.unwrap();
        });
        Ok(Response {
            remove_finalizer: true,
            ..Default::default()
        })
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finalizer_someone_else_removed_first_ends_the_deletion_without_an_error() {
    crate::support::logs::capture();
    let finalize_calls = Arc::new(AtomicU64::new(0));
    let host = Host::builder().build().await.unwrap();
    host.add_reconciler(lets_go(host.api().clone(), finalize_calls.clone()))
        .await
        .unwrap();
    let api = host.api();
    let kind = api
        .kinds()
        .require("test.setpoint.dev/v1", "Probe")
        .unwrap();
    api.create(&kind, probe_object("released", 1))
        .await
        .unwrap();
    eventually("the finalizer on the object", CONVERGE, || async {
        let object = api
            .get(&kind, Some("default"), "released")
            .await
            .map_err(|e| e.to_string())?;
        if object["metadata"]["finalizers"] == json!(["test.setpoint.dev/letsgo"]) {
            Ok(())
        } else {
            Err(object.to_string())
        }
    })
    .await;

    api.delete(&kind, Some("default"), "released", &Default::default())
        .await
        .unwrap();
    eventually("the object gone", CONVERGE, || async {
        match api.get(&kind, Some("default"), "released").await {
            Err(setpoint::api::Error::NotFound { .. }) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // Once the finalizing reconcile has ended and the queue is idle, a
    // failure would have left a retry behind.
    let queue = eventually(
        "the finalizing reconcile done and the queue idle",
        CONVERGE,
        || async {
            let metrics = host.queue_metrics().await;
            let (_, queue) = metrics
                .into_iter()
                .find(|(name, _)| name == "letsgo")
                .ok_or("no queue")?;
            let idle = queue.depth == 0 && queue.delayed == 0 && queue.in_flight == 0;
            if idle && finalize_calls.load(Ordering::SeqCst) > 0 {
                Ok(queue)
            } else {
                Err(format!("{queue:?}"))
            }
        },
    )
    .await;
    assert_eq!(queue.retries_total, 0, "{queue:?}");
    assert_eq!(finalize_calls.load(Ordering::SeqCst), 1);
    let failed = crate::support::logs::lines_with(&["reconcile failed", "default/released"]);
    assert!(failed.is_empty(), "{failed:?}");
    host.shutdown().await;
}

//! Controller runtime fidelity on a real host: rollouts, stacks, finalizers
//! and garbage collection with the real Wasm plugins, checked from a watch
//! recorded while they happen; coalescing, per-key exclusion and the hot-loop
//! breaker with instrumented native reconcilers.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use setpoint::Host;
use setpoint::controller::{
    self, CacheView, HotLoopConfig, Manifest, ReconcileError, Reconciler, Request, Response,
};
use setpoint::object::{KindRef, meta};
use setpoint::watch::{Event, EventType};

use crate::support::{TestHost, eventually};

const CONVERGE: Duration = Duration::from_secs(60);

/// Every change to the demo group's objects from `revision` on, in order.
fn record(host: &Host, revision: i64) -> Arc<Mutex<Vec<Arc<Event>>>> {
    let events: Arc<Mutex<Vec<Arc<Event>>>> = Arc::default();
    let mut subscription = host
        .api()
        .hub()
        .subscribe("/registry/demo.setpoint.dev/", revision)
        .expect("subscribe");
    let sink = events.clone();
    tokio::spawn(async move {
        while let Ok(event) = subscription.next().await {
            sink.lock().unwrap().push(event);
        }
    });
    events
}

fn is_ready_pod(pod: &Value) -> bool {
    meta::deletion_timestamp(pod).is_none()
        && pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

fn deployment(replicas: u32, image: &str, surge: u32, unavailable: u32) -> Value {
    json!({
        "apiVersion": "demo.setpoint.dev/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"image": image, "startupDelayMs": 30}},
            "strategy": {"rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}
        }
    })
}

/// Change the `web` Deployment's image, retrying when a status write got in between.
async fn set_image(api: &setpoint::api::Api, kind: &setpoint::object::KindInfo, image: &str) {
    loop {
        let mut next = api.get(kind, Some("default"), "web").await.unwrap();
        next["spec"]["template"]["spec"]["image"] = json!(image);
        match api.update(kind, next).await {
            Ok(_) => return,
            Err(setpoint::api::Error::Conflict { .. }) => continue,
            Err(err) => panic!("{err}"),
        }
    }
}

/// Wait until the Deployment reports `replicas` updated, ready and available
/// Pods of its current generation, and exactly that many Pods exist.
async fn rolled_out(host: &TestHost, replicas: u32) -> Value {
    eventually("the deployment rolls out", CONVERGE, || async {
        let d = host.get("Deployment", "web").await.ok_or("no deployment")?;
        let pods = host.list("Pod").await;
        let s = &d["status"];
        let done = s["observedGeneration"] == d["metadata"]["generation"]
            && s["updatedReplicas"] == replicas
            && s["readyReplicas"] == replicas
            && s["availableReplicas"] == replicas
            && s["replicas"] == replicas
            && pods.len() == replicas as usize;
        if done {
            Ok(d)
        } else {
            Err(format!("status={s} pods={}", pods.len()))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_converges_and_the_watch_never_sees_too_many_or_too_few_pods() {
    let host = TestHost::start(&["replicaset", "podsim", "deployment"]).await;
    let kind = host.kind("Deployment");
    let api = host.host.api();
    api.create(&kind, deployment(4, "v1", 1, 1)).await.unwrap();
    rolled_out(&host, 4).await;

    let start = api.current_revision().await.unwrap();
    let mut pods: BTreeMap<String, Value> = host
        .list("Pod")
        .await
        .into_iter()
        .map(|p| (meta::name(&p).to_owned(), p))
        .collect();
    let events = record(&host.host, start);
    set_image(api, &kind, "v2").await;
    let done = rolled_out(&host, 4).await;
    let rs_names: Vec<String> = host
        .list("ReplicaSet")
        .await
        .iter()
        .filter(|rs| rs["spec"]["replicas"] == 4)
        .map(|rs| meta::name(rs).to_owned())
        .collect();
    assert_eq!(rs_names.len(), 1, "one replica set carries every pod");
    assert_eq!(done["status"]["updatedReplicas"], 4);

    // Replay the pods' history as the watch saw it.
    let (mut most, mut fewest_ready, mut steps) = (pods.len(), usize::MAX, 0);
    for event in events.lock().unwrap().iter() {
        if meta::kind(&event.object) != "Pod" {
            continue;
        }
        let name = meta::name(&event.object).to_owned();
        match event.kind {
            EventType::Deleted => pods.remove(&name),
            EventType::Added | EventType::Modified => pods.insert(name, (*event.object).clone()),
        };
        steps += 1;
        most = most.max(pods.len());
        fewest_ready = fewest_ready.min(pods.values().filter(|p| is_ready_pod(p)).count());
    }
    assert!(steps > 8, "the watch saw the rollout ({steps} pod changes)");
    assert!(
        most <= 4 + 1,
        "at most replicas + maxSurge pods, saw {most}"
    );
    assert!(
        fewest_ready >= 4 - 1,
        "at least replicas - maxUnavailable ready pods, saw {fewest_ready}"
    );
    let images: HashSet<String> = pods
        .values()
        .map(|p| p["spec"]["image"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(images, HashSet::from(["v2".to_owned()]));
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_the_template_back_scales_the_old_replica_set_up_again() {
    let host = TestHost::start(&["replicaset", "podsim", "deployment"]).await;
    let kind = host.kind("Deployment");
    let api = host.host.api();
    api.create(&kind, deployment(2, "v1", 1, 0)).await.unwrap();
    rolled_out(&host, 2).await;
    let first_uids: HashSet<String> = host
        .list("ReplicaSet")
        .await
        .iter()
        .map(|rs| meta::uid(rs).to_owned())
        .collect();
    for image in ["v2", "v1"] {
        set_image(api, &kind, image).await;
        rolled_out(&host, 2).await;
    }
    let sets = host.list("ReplicaSet").await;
    assert_eq!(sets.len(), 2, "the roll back made no third replica set");
    let serving: Vec<&Value> = sets
        .iter()
        .filter(|rs| rs["spec"]["replicas"] == 2)
        .collect();
    assert_eq!(serving.len(), 1);
    assert!(
        first_uids.contains(meta::uid(serving[0])),
        "the original replica set serves again"
    );
    host.stop().await;
}

fn stack(name: &str, resources: Value) -> Value {
    json!({
        "apiVersion": "demo.setpoint.dev/v1", "kind": "Stack",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"resources": resources}
    })
}

fn pod_resource(name: &str, depends_on: &[&str]) -> Value {
    json!({"name": name, "dependsOn": depends_on, "template": {
        "apiVersion": "demo.setpoint.dev/v1", "kind": "Pod",
        "metadata": {"labels": {"stack": "shop"}}, "spec": {"startupDelayMs": 40}}})
}

/// db ← api (a ReplicaSet of 2) ← web; cache independent.
fn shop() -> Value {
    stack(
        "shop",
        json!([
            pod_resource("web", &["api"]),
            {"name": "api", "dependsOn": ["db"], "template": {
                "apiVersion": "demo.setpoint.dev/v1", "kind": "ReplicaSet",
                "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "api"}},
                    "template": {"metadata": {"labels": {"app": "api"}},
                        "spec": {"startupDelayMs": 40}}}}},
            pod_resource("db", &[]),
            pod_resource("cache", &[]),
        ]),
    )
}

fn object_ready(object: &Value) -> bool {
    if meta::kind(object) == "ReplicaSet" {
        return object["status"]["observedGeneration"] == object["metadata"]["generation"]
            && object["status"]["readyReplicas"] == object["spec"]["replicas"];
    }
    is_ready_pod(object)
}

async fn stack_ready(host: &TestHost, name: &str) -> Value {
    eventually("the stack becomes Ready", CONVERGE, || async {
        let s = host.get("Stack", name).await.ok_or("no stack")?;
        let ready = s["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        if ready {
            Ok(s)
        } else {
            Err(s["status"].to_string())
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stack_resources_are_created_only_after_their_dependencies_are_ready() {
    let host = TestHost::start(&["replicaset", "podsim", "stack"]).await;
    let api = host.host.api();
    let events = record(&host.host, api.current_revision().await.unwrap());
    api.create(&host.kind("Stack"), shop()).await.unwrap();
    let s = stack_ready(&host, "shop").await;
    assert_eq!(s["status"]["summary"], "4/4");

    let (mut created, mut ready) = (HashMap::new(), HashMap::new());
    for event in events.lock().unwrap().iter() {
        let name = meta::name(&event.object).to_owned();
        if !name.starts_with("shop-") || meta::kind(&event.object) == "Stack" {
            continue;
        }
        if event.kind == EventType::Added {
            created.entry(name.clone()).or_insert(event.revision);
        }
        if event.kind != EventType::Deleted && object_ready(&event.object) {
            ready.entry(name).or_insert(event.revision);
        }
    }
    for (resource, dependency) in [("shop-web", "shop-api"), ("shop-api", "shop-db")] {
        assert!(
            created[resource] > ready[dependency],
            "{resource} created at {} before {dependency} was ready at {}",
            created[resource],
            ready[dependency]
        );
    }
    assert!(
        created["shop-cache"] < ready["shop-db"],
        "independent resources come up in parallel"
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependency_cycle_is_reported_as_a_permanent_error_naming_the_cycle() {
    let host = TestHost::start(&["replicaset", "podsim", "stack"]).await;
    let cyclic = stack(
        "loop",
        json!([pod_resource("a", &["b"]), pod_resource("b", &["a"])]),
    );
    host.host
        .api()
        .create(&host.kind("Stack"), cyclic)
        .await
        .unwrap();
    eventually("the cycle is reported", CONVERGE, || async {
        let s = host.get("Stack", "loop").await.ok_or("no stack")?;
        let condition = s["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Ready")
            .cloned()
            .unwrap_or_default();
        if condition["status"] == "False"
            && condition["reason"] == "ReconcileError"
            && condition["message"] == "dependency cycle: a -> b -> a"
        {
            Ok(())
        } else {
            Err(s["status"].to_string())
        }
    })
    .await;
    assert!(host.list("Pod").await.is_empty(), "nothing was created");

    // `setpoint describe` shows why: the condition, the host's reconcile
    // results and the warning event.
    let output = tokio::process::Command::new(crate::support::setpoint_bin())
        .args(["describe", "stack", "loop", "--server", &host.url])
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line = |needle: &str| {
        text.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle:?} in:\n{text}"))
            .to_owned()
    };
    assert!(line("Kind:").contains("Stack (demo.setpoint.dev/v1)"));
    assert!(line("ReconcileError  ").contains("dependency cycle: a -> b -> a"));
    assert!(line("PermanentError").contains("dependency cycle: a -> b -> a"));
    assert!(line("Warning").contains("stack"));
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stack_finalizer_holds_deletion_until_resources_are_gone_in_reverse_order() {
    let host = TestHost::start(&["replicaset", "podsim", "stack"]).await;
    let api = host.host.api();
    let kind = host.kind("Stack");
    api.create(&kind, shop()).await.unwrap();
    stack_ready(&host, "shop").await;
    let stored = host.get("Stack", "shop").await.unwrap();
    assert_eq!(
        stored["metadata"]["finalizers"],
        json!(["stack.demo.setpoint.dev/teardown"])
    );

    let events = record(&host.host, api.current_revision().await.unwrap());
    let deleting = api
        .delete(&kind, Some("default"), "shop", &Default::default())
        .await
        .unwrap();
    assert!(
        meta::deletion_timestamp(&deleting).is_some(),
        "deletion only marks the stack while the finalizer holds it"
    );
    eventually("the stack is gone", CONVERGE, || async {
        match host.get("Stack", "shop").await {
            None => Ok(()),
            Some(s) => Err(s["metadata"].to_string()),
        }
    })
    .await;
    let gone: HashMap<String, i64> = events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e.kind == EventType::Deleted)
        .map(|e| (meta::name(&e.object).to_owned(), e.revision))
        .collect();
    for child in ["shop-web", "shop-api", "shop-db", "shop-cache"] {
        assert!(gone[child] < gone["shop"], "{child} went before the stack");
    }
    assert!(gone["shop-web"] < gone["shop-api"], "web before api");
    assert!(gone["shop-api"] < gone["shop-db"], "api before db");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_deployment_s_replica_sets_and_pods_are_collected() {
    let host = TestHost::start(&["replicaset", "podsim", "deployment"]).await;
    let kind = host.kind("Deployment");
    host.host
        .api()
        .create(&kind, deployment(3, "v1", 1, 0))
        .await
        .unwrap();
    rolled_out(&host, 3).await;
    host.host
        .api()
        .delete(&kind, Some("default"), "web", &Default::default())
        .await
        .unwrap();
    eventually("the children are collected", CONVERGE, || async {
        let (sets, pods) = (host.list("ReplicaSet").await, host.list("Pod").await);
        if sets.is_empty() && pods.is_empty() {
            Ok(())
        } else {
            Err(format!("{} replica sets, {} pods", sets.len(), pods.len()))
        }
    })
    .await;
    host.stop().await;
}

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
    Manifest {
        name: name.to_owned(),
        version: "1.0.0".to_owned(),
        reconciles: KindRef::new("test.setpoint.dev/v1", "Probe"),
        owns: vec![],
        definitions: vec![probe_definition()],
        finalizer: finalizer.map(str::to_owned),
        destinations: vec![],
        secrets: vec![],
    }
}

/// A native reconciler that records, per key, how many reconciles run at
/// once, and writes `status.seen = spec.value` (or, as a hot loop, a counter
/// that never settles).
struct Probe {
    manifest: Manifest,
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
            manifest: probe_manifest(name, None),
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

impl Reconciler for Probe {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn reconcile(
        &self,
        request: &Request,
        _cache: &Arc<dyn CacheView>,
    ) -> Result<Response, ReconcileError> {
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
        let status = if self.hot_loop {
            json!({"counter": request.object["status"]["counter"].as_i64().unwrap_or(0) + 1})
        } else {
            json!({"seen": request.object["spec"]["value"],
                "observedGeneration": meta::generation(&request.object)})
        };
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

async fn host_with(probe: Arc<Probe>, config: controller::Config) -> Host {
    let host = Host::builder()
        .controller_for(probe.manifest.name.clone(), config)
        .build()
        .await
        .unwrap();
    host.add_reconciler(probe).await.unwrap();
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
/// and Events, which nothing caches) and writes what it saw to the status;
/// `inline` says whether it asks to run on the async task.
struct ViewReader {
    manifest: Manifest,
    inline: bool,
    threads: Mutex<HashSet<String>>,
}

impl Reconciler for ViewReader {
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
        self.threads
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
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_reconciler_converges_and_reads_only_from_informers() {
    for inline in [true, false] {
        let reader = Arc::new(ViewReader {
            manifest: probe_manifest(&format!("reader-{inline}"), None),
            inline,
            threads: Mutex::default(),
        });
        let host = Host::builder().build().await.unwrap();
        host.add_reconciler(reader.clone()).await.unwrap();
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
        let threads = reader.threads.lock().unwrap().len();
        if inline {
            assert!(
                threads <= 2,
                "inline calls run on the runtime's two workers, not on {threads} threads"
            );
        }
        host.shutdown().await;
    }
}

/// A native reconciler whose first call holds until the test has changed
/// the object under it, so that the status it returns was computed from an
/// old version.
struct Racer {
    manifest: Manifest,
    /// (tells the test the first call started, lets the first call go on)
    first_call: Mutex<Option<(std::sync::mpsc::Sender<()>, std::sync::mpsc::Receiver<()>)>>,
    calls: AtomicU64,
}

impl Reconciler for Racer {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn reconcile(
        &self,
        request: &Request,
        _cache: &Arc<dyn CacheView>,
    ) -> Result<Response, ReconcileError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if let Some((started, go_on)) = self.first_call.lock().unwrap().take() {
            started.send(()).unwrap();
            go_on.recv().unwrap();
        }
        Ok(Response {
            status: Some(json!({"seen": request.object["spec"]["value"]})),
            ..Default::default()
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_computed_from_an_old_version_conflicts_and_is_retried_quietly_on_the_new_one() {
    crate::support::logs::capture();
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let (go_on_tx, go_on_rx) = std::sync::mpsc::channel();
    let racer = Arc::new(Racer {
        manifest: probe_manifest("racer", None),
        first_call: Mutex::new(Some((started_tx, go_on_rx))),
        calls: AtomicU64::new(0),
    });
    let host = Host::builder().build().await.unwrap();
    host.add_reconciler(racer.clone()).await.unwrap();
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
    assert!(racer.calls.load(Ordering::SeqCst) >= 2);
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
/// the object go itself (as another actor might) before answering "done".
struct LetsGo {
    manifest: Manifest,
    api: std::sync::OnceLock<setpoint::api::Api>,
    runtime: tokio::runtime::Handle,
    finalize_calls: AtomicU64,
}

impl Reconciler for LetsGo {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn reconcile(
        &self,
        request: &Request,
        _cache: &Arc<dyn CacheView>,
    ) -> Result<Response, ReconcileError> {
        if request.object["metadata"]["deletionTimestamp"].is_null() {
            return Ok(Response::default());
        }
        self.finalize_calls.fetch_add(1, Ordering::SeqCst);
        let api = self
            .api
            .get()
            .expect("set before any object exists")
            .clone();
        // Reconcilers run on the host's reconcile threads, outside the
        // async runtime, so blocking on it here is allowed.
        self.runtime.block_on(async {
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
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finalizer_someone_else_removed_first_ends_the_deletion_without_an_error() {
    crate::support::logs::capture();
    let plugin = Arc::new(LetsGo {
        manifest: probe_manifest("letsgo", Some("test.setpoint.dev/letsgo")),
        api: std::sync::OnceLock::new(),
        runtime: tokio::runtime::Handle::current(),
        finalize_calls: AtomicU64::new(0),
    });
    let host = Host::builder().build().await.unwrap();
    plugin.api.set(host.api().clone()).ok();
    host.add_reconciler(plugin.clone()).await.unwrap();
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
            if idle && plugin.finalize_calls.load(Ordering::SeqCst) > 0 {
                Ok(queue)
            } else {
                Err(format!("{queue:?}"))
            }
        },
    )
    .await;
    assert_eq!(queue.retries_total, 0, "{queue:?}");
    assert_eq!(plugin.finalize_calls.load(Ordering::SeqCst), 1);
    let failed = crate::support::logs::lines_with(&["reconcile failed", "default/released"]);
    assert!(failed.is_empty(), "{failed:?}");
    host.shutdown().await;
}

//! Embedding Setpoint in another Rust program, through the public API only
//! (`Host`, its typed `Client`, `controller::Native`), as an outside crate
//! would: native and Wasm reconcilers cooperating on parent and child kinds
//! in both directions, two hosts in one process, watching changes as a
//! `Stream`, and a shutdown that lets in-flight reconciles finish.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use podsim::{Phase, PodSpec, PodStatus};
use replicaset::{ReplicaSetSpec, ReplicaSetStatus};
use serde_json::{Value, json};
use setpoint::client::{Patch, Resource, WatchEvent};
use setpoint::controller::Native;
use setpoint::{Client, Host};
use setpoint_plugin_sdk as sdk;

use crate::support::{plugins_dir, replicaset};

const CONVERGE: Duration = Duration::from_secs(60);
const API_VERSION: &str = "demo.setpoint.dev/v1";

type ReplicaSet = sdk::Object<ReplicaSetSpec, ReplicaSetStatus>;
type Pod = sdk::Object<PodSpec, PodStatus>;

fn replica_sets(client: &Client) -> Resource<ReplicaSet> {
    client.resource(API_VERSION, "ReplicaSet").typed()
}

fn pods(client: &Client) -> Resource<Pod> {
    client.resource(API_VERSION, "Pod").typed()
}

/// Wait until the ReplicaSet `name` has seen its latest spec and reports
/// `n` ready replicas.
async fn ready(client: &Client, name: &str, n: u32) -> ReplicaSet {
    let sets = replica_sets(client);
    let waiting = sets.wait_until(name, |rs| {
        rs.status.ready_replicas == n && rs.status.observed_generation == rs.metadata.generation
    });
    tokio::time::timeout(CONVERGE, waiting)
        .await
        .unwrap_or_else(|_| panic!("{name} did not reach {n} ready replicas"))
        .unwrap()
}

/// The pods whose controller is `owner`, by name.
async fn pods_of(client: &Client, owner: &ReplicaSet) -> BTreeMap<String, Pod> {
    pods(client)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| {
            p.metadata
                .owner_references
                .iter()
                .any(|r| r.uid == owner.metadata.uid && r.controller == Some(true))
        })
        .map(|p| (p.name().to_owned(), p))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_parent_and_a_wasm_child_cooperate_through_the_client() {
    let plugins = plugins_dir(&["podsim"]);
    let host = Host::builder()
        .plugins_dir(plugins.path())
        .build()
        .await
        .unwrap();
    // The same replicaset logic the Wasm example runs, here native.
    host.add_reconciler(Arc::new(Native::new(replicaset::ReplicaSetReconciler)))
        .await
        .unwrap();
    assert_eq!(host.reconcilers().await, ["podsim", "replicaset"]);
    let client = host.client();
    client.apply(&replicaset("web", 2, 10)).await.unwrap();
    let web = ready(&client, "web", 2).await;
    let owned = pods_of(&client, &web).await;
    assert_eq!(owned.len(), 2);
    assert!(
        owned
            .values()
            .all(|p| p.status.phase == Some(Phase::Running)),
        "the Wasm podsim started them"
    );

    // Scaling through the client: the native parent removes a child.
    replica_sets(&client)
        .patch("web", &Patch::Merge(json!({"spec": {"replicas": 1}})))
        .await
        .unwrap();
    let web = ready(&client, "web", 1).await;
    assert_eq!(pods_of(&client, &web).await.len(), 1);
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wasm_parent_and_a_native_child_cooperate_and_the_parents_deletion_collects_the_children()
{
    let plugins = plugins_dir(&["replicaset"]);
    let host = Host::builder()
        .plugins_dir(plugins.path())
        .build()
        .await
        .unwrap();
    // The Pod's node agent, native this time, beside the Wasm replicaset.
    host.add_reconciler(Arc::new(Native::new(podsim::PodSim)))
        .await
        .unwrap();
    let client = host.client();
    let from = client.current_revision().await.unwrap();
    let mut pod_changes = pods(&client).watch(from).unwrap();

    client.apply(&replicaset("api", 2, 10)).await.unwrap();
    let api = ready(&client, "api", 2).await;

    // Deleting the parent: the garbage collector removes its pods, and the
    // watch tells of each one's life from creation to deletion.
    let deletion = replica_sets(&client).delete("api").await.unwrap();
    assert!(deletion.is_removed());
    let mut phases: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    let mut deleted = 0;
    while deleted < 2 {
        let event = tokio::time::timeout(CONVERGE, pod_changes.next())
            .await
            .expect("the pods are collected")
            .expect("the watch goes on")
            .unwrap();
        let what = match &event {
            WatchEvent::Added(_) => "added",
            WatchEvent::Modified(p) if p.status.phase == Some(Phase::Running) => "running",
            WatchEvent::Modified(_) => "modified",
            WatchEvent::Deleted(_) => {
                deleted += 1;
                "deleted"
            }
        };
        let pod = event.into_object();
        assert_eq!(
            pod.metadata.owner_references[0].uid, api.metadata.uid,
            "only api's pods exist"
        );
        phases.entry(pod.name().to_owned()).or_default().push(what);
    }
    assert_eq!(phases.len(), 2, "{phases:?}");
    for (pod, seen) in &phases {
        let index = |what| seen.iter().position(|s| *s == what);
        assert_eq!(index("added"), Some(0), "{pod}: {seen:?}");
        assert!(index("running") < index("deleted"), "{pod}: {seen:?}");
        assert_eq!(seen.last(), Some(&"deleted"), "{pod}: {seen:?}");
    }
    assert!(
        pods(&client)
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_live_in_one_process_without_sharing_anything() {
    let plugins = plugins_dir(&["podsim"]);
    let a = Host::builder()
        .plugins_dir(plugins.path())
        .build()
        .await
        .unwrap();
    let b = Host::builder()
        .plugins_dir(plugins.path())
        .build()
        .await
        .unwrap();
    for host in [&a, &b] {
        host.add_reconciler(Arc::new(Native::new(replicaset::ReplicaSetReconciler)))
            .await
            .unwrap();
    }
    let (client_a, client_b) = (a.client(), b.client());
    client_a
        .apply(&replicaset("only-in-a", 1, 10))
        .await
        .unwrap();
    client_b
        .apply(&replicaset("only-in-b", 3, 10))
        .await
        .unwrap();
    ready(&client_a, "only-in-a", 1).await;
    ready(&client_b, "only-in-b", 3).await;
    let sets_a = replica_sets(&client_a);
    let sets_b = replica_sets(&client_b);
    assert!(
        sets_a.get("only-in-b").await.unwrap_err().is_not_found(),
        "a does not see b's objects"
    );
    assert!(
        sets_b.get("only-in-a").await.unwrap_err().is_not_found(),
        "b does not see a's objects"
    );
    a.shutdown().await;
    // b keeps working after a is gone.
    sets_b
        .patch("only-in-b", &Patch::Merge(json!({"spec": {"replicas": 1}})))
        .await
        .unwrap();
    let only_in_b = ready(&client_b, "only-in-b", 1).await;
    assert_eq!(pods_of(&client_b, &only_in_b).await.len(), 1);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedder_applies_watches_convergence_through_a_stream_and_shuts_down() {
    let plugins = plugins_dir(&["podsim"]);
    let host = Host::builder()
        .plugins_dir(plugins.path())
        .build()
        .await
        .unwrap();
    host.add_reconciler(Arc::new(Native::new(replicaset::ReplicaSetReconciler)))
        .await
        .unwrap();
    let client = host.client().with_field_manager("embedder");
    let sets = client.resource(API_VERSION, "ReplicaSet");
    let from = sets
        .list(&Default::default())
        .await
        .unwrap()
        .resource_version;
    let mut changes = sets.watch(from).unwrap();
    let applied = sets.apply(&replicaset("web", 1, 10)).await.unwrap();
    assert_eq!(
        applied["metadata"]["managedFields"][0]["manager"],
        "embedder"
    );

    // Follow the ReplicaSet through the stream until its status says ready.
    let mut seen = Vec::new();
    let converged = tokio::time::timeout(CONVERGE, async {
        while let Some(event) = changes.next().await {
            let event = event.unwrap();
            let object = event.object().clone();
            seen.push(object["status"]["readyReplicas"].clone());
            if object["status"]["readyReplicas"] == 1 {
                return object;
            }
        }
        panic!("the watch ended")
    })
    .await
    .expect("the stream shows the ReplicaSet ready");
    assert_eq!(seen[0], Value::Null, "first the ReplicaSet as applied");
    assert_eq!(
        changes.revision().to_string(),
        converged["metadata"]["resourceVersion"].as_str().unwrap()
    );

    host.shutdown().await;
    assert!(
        host.reconcilers().await.is_empty(),
        "shutdown stops every controller"
    );
    // Nothing reconciles any more; the store (and the client) stay usable.
    sets.apply(&replicaset("after", 1, 10)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = client
        .resource(API_VERSION, "ReplicaSet")
        .get("after")
        .await
        .unwrap();
    assert!(after.get("status").is_none(), "{after}");
}

/// A reconciler whose reconcile takes a while, marking when one starts and
/// finishes, that writes `{"done": true}` into the status.
struct Slow {
    started: Arc<tokio::sync::Notify>,
    finished: Arc<AtomicBool>,
    names: Arc<Mutex<Vec<String>>>,
}

#[derive(serde::Serialize, serde::Deserialize, Default)]
struct SlowStatus {
    #[serde(default)]
    done: bool,
}

impl sdk::Reconciler for Slow {
    type Spec = Value;
    type Status = SlowStatus;

    fn manifest(&self) -> sdk::Manifest {
        sdk::Manifest::new(
            "slow",
            "1.0.0",
            sdk::KindRef::new("test.setpoint.dev/v1", "Chore"),
        )
        .definition(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "chores.test.setpoint.dev"},
            "spec": {
                "group": "test.setpoint.dev",
                "scope": "Namespaced",
                "names": {"kind": "Chore", "plural": "chores"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                              "subresources": {"status": {}},
                              "schema": {"openAPIV3Schema": {"type": "object",
                                  "x-kubernetes-preserve-unknown-fields": true}}}]
            }
        }))
    }

    fn reconcile(
        &self,
        object: &sdk::Object<Value, SlowStatus>,
        _ctx: &sdk::Ctx,
    ) -> Result<sdk::Response<SlowStatus>, sdk::Error> {
        self.names.lock().unwrap().push(object.name().to_owned());
        self.started.notify_one();
        // Stands for slow work: native reconcilers run on a blocking thread.
        std::thread::sleep(Duration::from_millis(500));
        self.finished.store(true, Ordering::SeqCst);
        Ok(sdk::Response::new().status(SlowStatus { done: true }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_the_reconcile_in_flight_finish_and_write_its_status() {
    // One worker: a second object waits in the queue behind the first.
    let one_worker = setpoint::controller::Config {
        workers: 1,
        ..Default::default()
    };
    let host = Host::builder()
        .in_memory()
        .controller(one_worker)
        .build()
        .await
        .unwrap();
    let started = Arc::new(tokio::sync::Notify::new());
    let finished = Arc::new(AtomicBool::new(false));
    let names = Arc::new(Mutex::new(Vec::new()));
    host.add_reconciler(Arc::new(Native::new(Slow {
        started: started.clone(),
        finished: finished.clone(),
        names: names.clone(),
    })))
    .await
    .unwrap();
    let chores = host.client().resource("test.setpoint.dev/v1", "Chore");
    chores
        .create(&json!({"metadata": {"name": "first"}}))
        .await
        .unwrap();
    tokio::time::timeout(CONVERGE, started.notified())
        .await
        .expect("the reconcile starts");
    // Queued behind the one in flight: shutdown drops it.
    chores
        .create(&json!({"metadata": {"name": "second"}}))
        .await
        .unwrap();

    host.shutdown().await;
    assert!(
        finished.load(Ordering::SeqCst),
        "shutdown returned only after the reconcile in flight finished"
    );
    let first = chores.get("first").await.unwrap();
    assert_eq!(
        first["status"]["done"], true,
        "and its response was applied"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        *names.lock().unwrap(),
        ["first"],
        "no reconcile starts after shutdown"
    );
    assert!(chores.get("second").await.unwrap().get("status").is_none());
}

/// Reports `status.lastError` while `spec.fail` is set, and clears it
/// (with `Response::clear_status`) once it is not: its status type skips
/// `None`, so the merge patch alone would keep the old error.
#[derive(Default)]
struct Lamp;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct LampSpec {
    #[serde(default)]
    fail: bool,
}

#[derive(serde::Serialize, serde::Deserialize, Default, schemars::JsonSchema)]
#[serde(default, rename_all = "camelCase")]
struct LampStatus {
    #[serde(skip_serializing_if = "Option::is_none")]
    last_error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    observed_generation: Option<i64>,
}

impl sdk::Reconciler for Lamp {
    type Spec = LampSpec;
    type Status = LampStatus;

    fn manifest(&self) -> sdk::Manifest {
        let lamp = sdk::Definition::of::<LampSpec, LampStatus>(sdk::KindRef::new(
            "test.setpoint.dev/v1",
            "Lamp",
        ));
        sdk::Manifest::new("lamp", "1.0.0", lamp.kind()).define(lamp)
    }

    fn reconcile(
        &self,
        lamp: &sdk::Object<LampSpec, LampStatus>,
        _ctx: &sdk::Ctx,
    ) -> Result<sdk::Response<LampStatus>, sdk::Error> {
        let status = LampStatus {
            last_error: lamp.spec.fail.then(|| "the bulb is out".to_owned()),
            observed_generation: lamp.metadata.generation,
        };
        let response = sdk::Response::new().status(status);
        Ok(if lamp.spec.fail {
            response
        } else {
            response.clear_status("lastError")
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_field_the_plugin_clears_is_gone_from_the_stored_object() {
    let host = Host::builder().in_memory().build().await.unwrap();
    host.add_reconciler(Arc::new(Native::new(Lamp)))
        .await
        .unwrap();
    let lamps = host.client().resource("test.setpoint.dev/v1", "Lamp");
    lamps
        .create(&json!({"metadata": {"name": "hall"}, "spec": {"fail": true}}))
        .await
        .unwrap();
    let reconciled = |generation: i64| {
        lamps.wait_until("hall", move |lamp: &Value| {
            lamp["status"]["observedGeneration"] == generation
        })
    };
    let failing = tokio::time::timeout(CONVERGE, reconciled(1))
        .await
        .expect("reconciled")
        .unwrap();
    assert_eq!(failing["status"]["lastError"], "the bulb is out");

    lamps
        .patch("hall", &Patch::Merge(json!({"spec": {"fail": false}})))
        .await
        .unwrap();
    let fixed = tokio::time::timeout(CONVERGE, reconciled(2))
        .await
        .expect("reconciled again")
        .unwrap();
    assert_eq!(
        fixed["status"],
        json!({"observedGeneration": 2}),
        "lastError is gone"
    );
    host.shutdown().await;
}

/// A program that embeds the host with `HostBuilder::embedded` gets its
/// store closed by `Host::shutdown`: the final checkpoint leaves no log and
/// the directory can be opened again in the same process, with every
/// object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_the_store_the_builder_opened() {
    let dir = tempfile::tempdir().unwrap();
    let host = Host::builder().embedded(dir.path()).build().await.unwrap();
    let api = host.api();
    let events = api.kinds().require("v1", "Event").unwrap();
    api.create(
        &events,
        serde_json::json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "kept"}}),
    )
    .await
    .unwrap();
    host.shutdown().await;
    let logs: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("wal-"))
        .collect();
    assert!(logs.is_empty(), "a clean close leaves no log: {logs:?}");
    let again = Host::builder()
        .embedded(dir.path())
        .build()
        .await
        .expect("the directory was released");
    let events = again.api().kinds().require("v1", "Event").unwrap();
    again
        .api()
        .get(&events, Some("default"), "kept")
        .await
        .unwrap();
    again.shutdown().await;
}

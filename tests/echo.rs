//! A controller's own status write does not wake it again (issue #22):
//! counted with an instrumented native reconciler and with the real podsim
//! plugin; and every change by anyone else still does, one that lands right
//! after the controller's own write included.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use setpoint::Host;
use setpoint::controller::{
    self, CacheView, Manifest, ReconcileError, Reconciler, Request, Response,
};
use setpoint::object::{KindInfo, KindRef, ObjectKey, meta};

use crate::support::{TestHost, eventually};

const CONVERGE: Duration = Duration::from_secs(60);

/// Writes `status.seen = spec.value` and counts its calls per object name.
struct Mirror {
    manifest: Manifest,
    calls: Mutex<HashMap<String, u64>>,
}

impl Mirror {
    fn new() -> Arc<Self> {
        let definition = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "mirrors.test.setpoint.dev"},
            "spec": {"group": "test.setpoint.dev", "scope": "Namespaced",
                "names": {"plural": "mirrors", "singular": "mirror", "kind": "Mirror"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object",
                        "x-kubernetes-preserve-unknown-fields": true}}}]}});
        Arc::new(Self {
            manifest: Manifest {
                definitions: vec![definition],
                ..Manifest::new(
                    "mirror",
                    "1.0.0",
                    KindRef::new("test.setpoint.dev/v1", "Mirror"),
                )
            },
            calls: Mutex::default(),
        })
    }

    fn calls(&self, name: &str) -> u64 {
        self.calls.lock().unwrap().get(name).copied().unwrap_or(0)
    }
}

impl Reconciler for Mirror {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn reconcile(
        &self,
        request: &Request,
        _cache: &Arc<dyn CacheView>,
    ) -> Result<Response, ReconcileError> {
        let name = meta::name(&request.object).to_owned();
        *self.calls.lock().unwrap().entry(name).or_default() += 1;
        Ok(Response {
            status: Some(json!({"seen": request.object["spec"]["value"]})),
            ..Default::default()
        })
    }
}

/// A host with `mirror` on one worker: keys are handed out strictly in
/// the order they were queued.
async fn mirror_host(mirror: Arc<Mirror>) -> (Host, Arc<KindInfo>) {
    let host = Host::builder()
        .controller_for(
            "mirror",
            controller::Config {
                workers: 1,
                ..Default::default()
            },
        )
        .build()
        .await
        .unwrap();
    host.add_reconciler(mirror).await.unwrap();
    let kind = host
        .api()
        .kinds()
        .require("test.setpoint.dev/v1", "Mirror")
        .unwrap();
    (host, kind)
}

fn mirror(name: &str, value: i64) -> Value {
    json!({"apiVersion": "test.setpoint.dev/v1", "kind": "Mirror",
        "metadata": {"name": name, "namespace": "default"}, "spec": {"value": value}})
}

async fn seen(host: &Host, kind: &KindInfo, name: &str, value: i64) {
    eventually(&format!("{name} shows {value}"), CONVERGE, || async {
        let object = host.api().get(kind, Some("default"), name).await.unwrap();
        if object["status"]["seen"] == value {
            Ok(())
        } else {
            Err(object.to_string())
        }
    })
    .await;
}

/// Everything queued before this call has been reconciled when it returns:
/// a new object is queued behind it (the informer calls handlers in the
/// store's order) and, with one worker, reconciled after it.
async fn barrier(host: &Host, kind: &KindInfo, name: &str) {
    host.api().create(kind, mirror(name, 7)).await.unwrap();
    seen(host, kind, name, 7).await;
}

async fn change(host: &Host, kind: &KindInfo, name: &str, edit: impl Fn(&mut Value)) {
    loop {
        let mut next = host.api().get(kind, Some("default"), name).await.unwrap();
        edit(&mut next);
        match host.api().update(kind, next).await {
            Ok(_) => return,
            Err(setpoint::api::Error::Conflict { .. }) => continue,
            Err(err) => panic!("{err}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controllers_own_status_write_does_not_reconcile_the_unchanged_object_again() {
    let reconciler = Mirror::new();
    let (host, kind) = mirror_host(reconciler.clone()).await;
    host.api().create(&kind, mirror("a", 0)).await.unwrap();
    seen(&host, &kind, "a", 0).await;
    barrier(&host, &kind, "barrier-1").await;
    assert_eq!(
        reconciler.calls("a"),
        1,
        "the status write's echo was not reconciled"
    );

    change(&host, &kind, "a", |o| o["spec"]["value"] = json!(1)).await;
    seen(&host, &kind, "a", 1).await;
    barrier(&host, &kind, "barrier-2").await;
    assert_eq!(
        reconciler.calls("a"),
        2,
        "one reconcile per change, none per echo"
    );
    let stats = host.controller_stats("mirror").await.unwrap();
    assert_eq!(stats.reconciles, 4, "a twice, each barrier once: {stats:?}");
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_by_anyone_else_still_reconciles_even_right_after_the_controllers_own_write() {
    let reconciler = Mirror::new();
    let (host, kind) = mirror_host(reconciler.clone()).await;
    // Change the spec the moment the controller's status write is seen.
    let mut events = host
        .api()
        .hub()
        .subscribe("/registry/test.setpoint.dev/mirrors/", 0)
        .unwrap();
    let changed = Arc::new(AtomicBool::new(false));
    let racer = {
        let (api, kind, changed) = (host.api().clone(), kind.clone(), changed.clone());
        tokio::spawn(async move {
            while let Ok(event) = events.next().await {
                if event.object["status"]["seen"] == 0 {
                    let mut next = (*event.object).clone();
                    next["spec"]["value"] = json!(1);
                    // On top of exactly the controller's write: nothing
                    // else can land between.
                    api.update(&kind, next).await.unwrap();
                    changed.store(true, Ordering::SeqCst);
                    return;
                }
            }
        })
    };
    host.api().create(&kind, mirror("a", 0)).await.unwrap();
    racer.await.unwrap();
    assert!(changed.load(Ordering::SeqCst));
    seen(&host, &kind, "a", 1).await;
    assert_eq!(reconciler.calls("a"), 2);

    // A change outside the spec (a label) wakes it too.
    change(&host, &kind, "a", |o| {
        o["metadata"]["labels"] = json!({"x": "y"})
    })
    .await;
    eventually("the label change is reconciled", CONVERGE, || async {
        match reconciler.calls("a") {
            3 => Ok(()),
            n => Err(format!("{n} calls")),
        }
    })
    .await;
    // And a resync still reconciles a converged object.
    host.resync().await;
    eventually("the resync reconciles it", CONVERGE, || async {
        match reconciler.calls("a") {
            4 => Ok(()),
            n => Err(format!("{n} calls")),
        }
    })
    .await;
    host.shutdown().await;
}

fn pod(name: &str) -> Value {
    json!({"apiVersion": "demo.setpoint.dev/v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"startupDelayMs": 0, "image": "nginx"}})
}

async fn running(host: &TestHost, name: &str) {
    eventually(&format!("{name} runs"), CONVERGE, || async {
        match host.get("Pod", name).await {
            Some(p) if p["status"]["phase"] == "Running" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podsim_reconciles_each_pod_exactly_twice_pending_then_running() {
    let host = TestHost::start(&["podsim"]).await;
    let pods = host.kind("Pod");
    let names: Vec<String> = (0..20).map(|i| format!("p{i}")).collect();
    for name in &names {
        host.host.api().create(&pods, pod(name)).await.unwrap();
    }
    for name in &names {
        running(&host, name).await;
    }
    // Anything still queued (an echo) runs before a Pod created now is
    // even accepted, and its start is one requeue later.
    host.host.api().create(&pods, pod("last")).await.unwrap();
    running(&host, "last").await;
    let last = ObjectKey::new(Some("default"), "last");
    eventually(
        "the last Pod's reconciles are recorded",
        CONVERGE,
        || async {
            match host
                .host
                .history("demo.setpoint.dev/v1", "Pod", &last)
                .await
                .len()
            {
                2 => Ok(()),
                n => Err(format!("{n} records")),
            }
        },
    )
    .await;
    for name in names.iter().map(String::as_str).chain(["last"]) {
        let key = ObjectKey::new(Some("default"), name);
        let history = host.host.history("demo.setpoint.dev/v1", "Pod", &key).await;
        assert_eq!(history.len(), 2, "{name}: {history:?}");
    }
    host.stop().await;
}

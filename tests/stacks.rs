//! Stacks with the real Wasm plugins: resources created only after their
//! dependencies are ready, a dependency cycle reported as a permanent error,
//! and the finalizer that deletes resources in reverse order.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};
use setpoint::object::meta;
use setpoint::watch::EventType;

use crate::support::{TestHost, eventually, is_ready_pod, record};

const CONVERGE: Duration = Duration::from_secs(60);

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

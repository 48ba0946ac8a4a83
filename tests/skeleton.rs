//! The walking skeleton end to end: the `replicaset` and `podsim` plugins,
//! compiled to Wasm, converge ReplicaSets on a real host.

use std::time::Duration;

use serde_json::{Value, json};
use setpoint::controller::Outcome;
use setpoint::object::{ObjectKey, meta};

use crate::support::{TestHost, eventually, replicaset};

const CONVERGE: Duration = Duration::from_secs(60);

fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or("")
}

/// Wait until the ReplicaSet `name` has `n` owned pods, all Running, and
/// reports `readyReplicas == n`.
async fn converged(host: &TestHost, name: &str, n: usize) -> (Value, Vec<Value>) {
    eventually(
        &format!("{name} converges to {n} ready pods"),
        CONVERGE,
        || async {
            let rs = host.get("ReplicaSet", name).await.ok_or("no replicaset")?;
            let pods: Vec<Value> = host
                .list("Pod")
                .await
                .into_iter()
                .filter(|p| meta::controller_uid(p) == Some(meta::uid(&rs)))
                .collect();
            let running = pods.iter().filter(|p| phase(p) == "Running").count();
            let state = format!(
                "pods={} running={running} status={}",
                pods.len(),
                rs["status"]
            );
            if pods.len() == n
                && running == n
                && rs["status"]["readyReplicas"] == json!(n)
                && rs["status"]["replicas"] == json!(n)
                && rs["status"]["observedGeneration"] == rs["metadata"]["generation"]
            {
                Ok((rs, pods))
            } else {
                Err(state)
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicaset_of_three_gets_three_owned_running_ready_pods() {
    let host = TestHost::start(&["replicaset", "podsim"]).await;
    let rs_kind = host.kind("ReplicaSet");
    host.host
        .api()
        .create(&rs_kind, replicaset("web", 3, 50))
        .await
        .unwrap();
    let (rs, pods) = converged(&host, "web", 3).await;
    for pod in &pods {
        let owner = &meta::owner_references(pod)[0];
        assert_eq!(owner["kind"], "ReplicaSet");
        assert_eq!(owner["name"], "web");
        assert_eq!(owner["uid"], rs["metadata"]["uid"]);
        assert_eq!(
            pod["metadata"]["labels"]["app"], "web",
            "pods carry the template's labels"
        );
        assert_eq!(
            pod["spec"]["image"], "nginx",
            "pods carry the template's spec"
        );
        let ready = pod["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        assert!(
            ready,
            "pod {} is not Ready: {}",
            meta::name(pod),
            pod["status"]
        );
    }
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_down_deletes_the_extra_pods() {
    let host = TestHost::start(&["replicaset", "podsim"]).await;
    let rs_kind = host.kind("ReplicaSet");
    host.host
        .api()
        .create(&rs_kind, replicaset("web", 3, 10))
        .await
        .unwrap();
    converged(&host, "web", 3).await;
    host.host
        .api()
        .merge_patch(
            &rs_kind,
            Some("default"),
            "web",
            &json!({"spec": {"replicas": 1}}),
            false,
        )
        .await
        .unwrap();
    let (rs, pods) = converged(&host, "web", 1).await;
    assert_eq!(
        rs["metadata"]["generation"], 2,
        "a spec change bumps the generation"
    );
    assert_eq!(
        host.list("Pod").await.len(),
        1,
        "two pods were deleted: {pods:?}"
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_pod_is_recreated() {
    let host = TestHost::start(&["replicaset", "podsim"]).await;
    let api = host.host.api();
    api.create(&host.kind("ReplicaSet"), replicaset("web", 2, 10))
        .await
        .unwrap();
    let (_, pods) = converged(&host, "web", 2).await;
    let victim = pods[0].clone();
    api.delete(
        &host.kind("Pod"),
        Some("default"),
        meta::name(&victim),
        &Default::default(),
    )
    .await
    .unwrap();
    eventually("the deleted pod is recreated", CONVERGE, || async {
        match host.get("Pod", meta::name(&victim)).await {
            Some(pod) if meta::uid(&pod) != meta::uid(&victim) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    converged(&host, "web", 2).await;
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciling_a_converged_object_writes_nothing() {
    let host = TestHost::start(&["replicaset", "podsim"]).await;
    let api = host.host.api();
    api.create(&host.kind("ReplicaSet"), replicaset("web", 3, 10))
        .await
        .unwrap();
    converged(&host, "web", 3).await;
    // Let every pending reconcile (e.g. those queued by the last status write) finish.
    let key = ObjectKey::new(Some("default"), "web");
    let settled = eventually("the host goes quiet", CONVERGE, || async {
        let before = api.current_revision().await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let after = api.current_revision().await.unwrap();
        if before == after {
            Ok(after)
        } else {
            Err(format!("{before} -> {after}"))
        }
    })
    .await;
    let reconciles_before = host
        .host
        .history("demo.setpoint.dev/v1", "ReplicaSet", &key)
        .await
        .len();
    host.host.resync().await;
    eventually("the ReplicaSet is reconciled again", CONVERGE, || async {
        let history = host
            .host
            .history("demo.setpoint.dev/v1", "ReplicaSet", &key)
            .await;
        if history.len() > reconciles_before
            || history.len() == setpoint::controller::history::KEPT_PER_OBJECT
        {
            Ok(())
        } else {
            Err(format!("{} reconciles", history.len()))
        }
    })
    .await;
    // Give the pods' reconciles the same chance, then check nothing was written.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let history = host
        .host
        .history("demo.setpoint.dev/v1", "ReplicaSet", &key)
        .await;
    assert_eq!(history.last().unwrap().outcome, Outcome::Success);
    assert_eq!(
        api.current_revision().await.unwrap(),
        settled,
        "a converged object must cost no writes"
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_with_a_stale_resource_version_is_refused_with_a_conflict() {
    // Flaky objects in mode "ok" are never written by their plugin, so
    // every version change below is the test's own.
    let host = TestHost::start(&["flaky"]).await;
    let http = reqwest::Client::new();
    let url = format!(
        "{}/apis/test.setpoint.dev/v1/namespaces/default/flakies",
        host.url
    );
    let object = json!({"apiVersion": "test.setpoint.dev/v1", "kind": "Flaky",
        "metadata": {"name": "web"}, "spec": {"mode": "ok"}});
    let created: Value = http
        .post(&url)
        .json(&object)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut first = created.clone();
    first["metadata"]["labels"] = json!({"edited": "yes"});
    let response = http
        .put(format!("{url}/web"))
        .json(&first)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let revision = host.host.api().current_revision().await.unwrap();

    let mut stale = created;
    stale["metadata"]["labels"] = json!({"edited": "stale"});
    let response = http
        .put(format!("{url}/web"))
        .json(&stale)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 409);
    let status: Value = response.json().await.unwrap();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "Conflict");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("has been modified"),
        "{status}"
    );
    let kind = host
        .host
        .api()
        .kinds()
        .require("test.setpoint.dev/v1", "Flaky")
        .unwrap();
    let stored = host
        .host
        .api()
        .get(&kind, Some("default"), "web")
        .await
        .unwrap();
    assert_eq!(
        stored["metadata"]["labels"]["edited"], "yes",
        "the stale write changed nothing"
    );
    assert_eq!(host.host.api().current_revision().await.unwrap(), revision);
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_error_is_retried_with_growing_delay() {
    let host = TestHost::start(&["flaky"]).await;
    let kind = host
        .host
        .api()
        .kinds()
        .require("test.setpoint.dev/v1", "Flaky")
        .unwrap();
    host.host
        .api()
        .create(
            &kind,
            json!({"apiVersion": "test.setpoint.dev/v1", "kind": "Flaky",
            "metadata": {"name": "f", "namespace": "default"}, "spec": {"mode": "transient"}}),
        )
        .await
        .unwrap();
    let key = ObjectKey::new(Some("default"), "f");
    let history = eventually("five failed attempts", CONVERGE, || async {
        let history = host
            .host
            .history("test.setpoint.dev/v1", "Flaky", &key)
            .await;
        if history.len() >= 5 {
            Ok(history)
        } else {
            Err(format!("{history:?}"))
        }
    })
    .await;
    let delays: Vec<Duration> = history
        .iter()
        .map(|r| r.next_in.expect("a retry is scheduled"))
        .collect();
    for record in &history {
        assert!(
            matches!(&record.outcome, Outcome::TransientError(m) if m.contains("not yet")),
            "{:?}",
            record.outcome
        );
    }
    for pair in delays.windows(2) {
        assert!(pair[1] > pair[0], "retry delays must grow: {delays:?}");
    }
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_error_is_reported_on_the_object_and_not_retried() {
    let host = TestHost::start(&["flaky"]).await;
    let api = host.host.api();
    let kind = api
        .kinds()
        .require("test.setpoint.dev/v1", "Flaky")
        .unwrap();
    api.create(
        &kind,
        json!({"apiVersion": "test.setpoint.dev/v1", "kind": "Flaky",
            "metadata": {"name": "p", "namespace": "default"}, "spec": {"mode": "permanent"}}),
    )
    .await
    .unwrap();
    let object = eventually("a Ready=False condition", CONVERGE, || async {
        let object = api
            .get(&kind, Some("default"), "p")
            .await
            .map_err(|e| e.to_string())?;
        let ready = object["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Ready").cloned());
        match ready {
            Some(c) if c["status"] == "False" && c["reason"] == "ReconcileError" => Ok(object),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(
        object["status"]["conditions"][0]["message"]
            .as_str()
            .unwrap()
            .contains("cannot ever work")
    );
    let events = api
        .list(
            &api.kinds().by_plural("", "events").unwrap(),
            &setpoint::api::ListOptions {
                namespace: Some("default".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .items;
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "Warning" && e["involvedObject"]["name"] == "p"),
        "{events:?}"
    );
    let key = ObjectKey::new(Some("default"), "p");
    let history = host
        .host
        .history("test.setpoint.dev/v1", "Flaky", &key)
        .await;
    assert!(
        history.iter().all(|r| r.next_in.is_none()),
        "a permanent error schedules no retry: {history:?}"
    );

    // The host's own Ready=False write is not a change: the plugin is not
    // called again for it (the watch event of that write arrives within
    // milliseconds; half a second leaves it ample time to be handled).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let history = host
        .host
        .history("test.setpoint.dev/v1", "Flaky", &key)
        .await;
    assert_eq!(history.len(), 1, "called once: {history:?}");

    // A change to the object is, and the plugin runs (and fails) again.
    let mut changed = api.get(&kind, Some("default"), "p").await.unwrap();
    changed["metadata"]["labels"] = json!({"touched": "yes"});
    api.update(&kind, changed).await.unwrap();
    eventually("a second reconcile", CONVERGE, || async {
        let history = host
            .host
            .history("test.setpoint.dev/v1", "Flaky", &key)
            .await;
        match history.len() {
            2 => Ok(()),
            n => Err(format!("{n} reconciles: {history:?}")),
        }
    })
    .await;
    host.stop().await;
}

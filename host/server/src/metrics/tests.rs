//! Tests of the `/metrics` rendering against real hosts.

use super::*;
use setpoint::store::{Condition, EmbeddedBackend};

fn series(page: &str, name: &str) -> Option<f64> {
    page.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test]
async fn the_embedded_store_engine_numbers_are_exported() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(EmbeddedBackend::open(dir.path()).unwrap());
    let host = Host::builder()
        .backend(backend.clone())
        .build()
        .await
        .unwrap();
    let before = backend.stats().writes;
    for i in 0..3 {
        host.api()
            .backend()
            .put(&format!("/test/{i}"), b"{}".to_vec(), Condition::Any)
            .await
            .unwrap();
    }
    // A read waits until the applier holds every acknowledged write,
    // so the in-memory index counts the three versions by then.
    host.api().backend().get("/test/2").await.unwrap().unwrap();
    let page = render(&HostNumbers::read(&host).await, &RequestMetrics::default());
    assert!(page.contains("# TYPE setpoint_embedded_writes_total counter"));
    assert!(page.contains("# TYPE setpoint_embedded_unapplied_revisions gauge"));
    let writes = series(&page, "setpoint_embedded_writes_total").unwrap();
    assert_eq!(writes, (before + 3) as f64);
    assert!(series(&page, "setpoint_embedded_commits_total").unwrap() >= 1.0);
    assert!(series(&page, "setpoint_embedded_versions").unwrap() >= 3.0);
    assert!(series(&page, "setpoint_embedded_sync_wait_seconds_total").unwrap() > 0.0);
    let unapplied = series(&page, "setpoint_embedded_unapplied_revisions").unwrap();
    assert!(unapplied >= 0.0 && unapplied <= writes);
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_informers_are_exported_per_kind() {
    use setpoint::controller::Native;
    let host = Host::builder().build().await.unwrap();
    host.add_reconciler(Arc::new(Native::new(replicaset::ReplicaSetReconciler)))
        .await
        .unwrap();
    let replica_sets = host
        .api()
        .kinds()
        .require(replicaset::API_VERSION, "ReplicaSet")
        .unwrap();
    let spec = serde_json::json!({"apiVersion": replicaset::API_VERSION, "kind": "ReplicaSet",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"image": "nginx"}}}});
    host.api().create(&replica_sets, spec).await.unwrap();
    let labels =
        |resource: &str| format!("{{group=\"demo.setpoint.dev\",resource=\"{resource}\"}}");
    // The informers follow the store asynchronously: wait for the
    // ReplicaSet's two pods to reach the pods informer.
    let page = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let page = render(&HostNumbers::read(&host).await, &RequestMetrics::default());
            let pods = format!("setpoint_informer_objects{}", labels("pods"));
            if series(&page, &pods) == Some(2.0) {
                return page;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the pods informer never held both pods");
    assert!(page.contains("# TYPE setpoint_informer_lists_total counter"));
    let rs = labels("replicasets");
    assert_eq!(
        series(&page, &format!("setpoint_informer_objects{rs}")),
        Some(1.0)
    );
    assert_eq!(
        series(&page, &format!("setpoint_informer_handlers{rs}")),
        Some(1.0)
    );
    assert_eq!(
        series(&page, &format!("setpoint_informer_lists_total{rs}")),
        Some(1.0)
    );
    host.shutdown().await;
}

#[tokio::test]
async fn a_backend_without_engine_numbers_exports_none() {
    let host = Host::builder().build().await.unwrap();
    let page = render(&HostNumbers::read(&host).await, &RequestMetrics::default());
    assert!(page.contains("setpoint_store_request_duration_seconds"));
    assert!(!page.contains("setpoint_embedded_"));
    host.shutdown().await;
}

/// The `controller_runtime_reconcile_*` series count what the controller's
/// tally counted, once per reconcile: a failure, a permanent failure and a
/// success, and nothing for the echo of the successful status write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciles_are_exported_as_the_controllers_tally_counted_them() {
    use std::sync::atomic::{AtomicBool, Ordering};

    use setpoint::controller::{Manifest, ReconcileError, Response, from_fn};
    use setpoint::object::KindRef;

    let definition = serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "tallies.test.setpoint.dev"},
        "spec": {"group": "test.setpoint.dev", "scope": "Namespaced",
            "names": {"plural": "tallies", "singular": "tally", "kind": "Tally"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]}});
    let failed_once = Arc::new(AtomicBool::new(false));
    let reconciler = {
        let failed_once = failed_once.clone();
        from_fn(
            Manifest {
                definitions: vec![definition],
                ..Manifest::new(
                    "tally",
                    "1.0.0",
                    KindRef::new("test.setpoint.dev/v1", "Tally"),
                )
            },
            move |request, _| match request.object["metadata"]["name"].as_str() {
                Some("bad") => Err(ReconcileError::Permanent("bad spec".into())),
                _ if !failed_once.swap(true, Ordering::SeqCst) => {
                    Err(ReconcileError::Transient("not yet".into()))
                }
                _ => Ok(Response {
                    status: Some(serde_json::json!({"done": true})),
                    ..Default::default()
                }),
            },
        )
    };
    let host = Host::builder().build().await.unwrap();
    host.add_reconciler(Arc::new(reconciler)).await.unwrap();
    let kind = host
        .api()
        .kinds()
        .require("test.setpoint.dev/v1", "Tally")
        .unwrap();
    let object = |name: &str| {
        serde_json::json!({"apiVersion": "test.setpoint.dev/v1", "kind": "Tally",
            "metadata": {"name": name, "namespace": "default"}})
    };
    host.api().create(&kind, object("good")).await.unwrap();
    tokio::time::timeout(Duration::from_secs(20), async {
        while host
            .api()
            .get(&kind, Some("default"), "good")
            .await
            .unwrap()["status"]["done"]
            != true
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("good was never reconciled");
    host.api().create(&kind, object("bad")).await.unwrap();
    let page = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let page = render(&HostNumbers::read(&host).await, &RequestMetrics::default());
            if series(
                &page,
                r#"controller_runtime_reconcile_errors_total{controller="tally"}"#,
            ) == Some(2.0)
            {
                return page;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the permanent failure was never counted");
    // Settle: an echo of good's status write, were it reconciled, shows now.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let page_after = render(&HostNumbers::read(&host).await, &RequestMetrics::default());
    for page in [&page, &page_after] {
        let total = |result: &str| {
            series(
                page,
                &format!(
                    "controller_runtime_reconcile_total{{controller=\"tally\",result=\"{result}\"}}"
                ),
            )
        };
        assert_eq!(total("success"), Some(1.0), "{page}");
        assert_eq!(total("error"), Some(2.0), "{page}");
        assert_eq!(
            series(
                page,
                r#"controller_runtime_reconcile_time_seconds_count{controller="tally"}"#
            ),
            Some(3.0),
            "{page}"
        );
    }
    let stats = host.controller_stats("tally").await.unwrap();
    assert_eq!(stats.reconciles, 3, "{stats:?}");
    host.shutdown().await;
}

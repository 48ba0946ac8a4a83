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

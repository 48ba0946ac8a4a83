//! Embedding Setpoint in another Rust program, through the public API only:
//! a native reconciler (the replicaset example plugin compiled into the
//! program) cooperating with a Wasm one (podsim), two hosts in one process,
//! watching changes and shutting down.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use setpoint::Host;
use setpoint::controller::Native;
use setpoint::object::meta;

use crate::support::{eventually, plugins_dir, replicaset};

const CONVERGE: Duration = Duration::from_secs(60);

async fn running_pods(host: &Host, owner: &str) -> Result<Vec<Value>, String> {
    let api = host.api();
    let pods = api
        .kinds()
        .require("demo.setpoint.dev/v1", "Pod")
        .map_err(|e| e.to_string())?;
    let rs = api
        .kinds()
        .require("demo.setpoint.dev/v1", "ReplicaSet")
        .map_err(|e| e.to_string())?;
    let owner = api
        .get(&rs, Some("default"), owner)
        .await
        .map_err(|e| e.to_string())?;
    let items = api
        .list(
            &pods,
            &setpoint::api::ListOptions {
                namespace: Some("default".into()),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| e.to_string())?
        .items;
    let owned: Vec<Value> = items
        .into_iter()
        .filter(|p| meta::controller_uid(p) == Some(meta::uid(&owner)))
        .collect();
    let running = owned
        .iter()
        .filter(|p| p["status"]["phase"] == "Running")
        .count();
    if running == owned.len()
        && owner["status"]["readyReplicas"] == json!(owned.len())
        && !owned.is_empty()
    {
        Ok(owned)
    } else {
        Err(format!(
            "{running} running of {}; status {}",
            owned.len(),
            owner["status"]
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_reconciler_and_a_wasm_one_cooperate_on_parent_and_child_kinds() {
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
    let rs = host
        .api()
        .kinds()
        .require("demo.setpoint.dev/v1", "ReplicaSet")
        .unwrap();
    host.api()
        .create(&rs, replicaset("web", 2, 10))
        .await
        .unwrap();
    let pods = eventually("the native ReplicaSet's pods run", CONVERGE, || {
        running_pods(&host, "web")
    })
    .await;
    assert_eq!(pods.len(), 2);
    assert_eq!(host.reconcilers().await, ["podsim", "replicaset"]);
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
    let rs = a
        .api()
        .kinds()
        .require("demo.setpoint.dev/v1", "ReplicaSet")
        .unwrap();
    a.api()
        .create(&rs, replicaset("only-in-a", 1, 10))
        .await
        .unwrap();
    b.api()
        .create(&rs, replicaset("only-in-b", 3, 10))
        .await
        .unwrap();
    eventually("host a converges", CONVERGE, || {
        running_pods(&a, "only-in-a")
    })
    .await;
    eventually("host b converges", CONVERGE, || {
        running_pods(&b, "only-in-b")
    })
    .await;
    assert!(
        a.api()
            .get(&rs, Some("default"), "only-in-b")
            .await
            .is_err(),
        "a does not see b's objects"
    );
    assert!(
        b.api()
            .get(&rs, Some("default"), "only-in-a")
            .await
            .is_err(),
        "b does not see a's objects"
    );
    a.shutdown().await;
    // b keeps working after a is gone.
    b.api()
        .merge_patch(
            &rs,
            Some("default"),
            "only-in-b",
            &json!({"spec": {"replicas": 1}}),
            false,
        )
        .await
        .unwrap();
    eventually("host b scales down", CONVERGE, || async {
        let pods = running_pods(&b, "only-in-b").await?;
        if pods.len() == 1 {
            Ok(())
        } else {
            Err(format!("{} pods", pods.len()))
        }
    })
    .await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedder_applies_watches_convergence_and_shuts_down() {
    let plugins = plugins_dir(&["podsim"]);
    let host = Host::builder()
        .plugins_dir(plugins.path())
        .build()
        .await
        .unwrap();
    host.add_reconciler(Arc::new(Native::new(replicaset::ReplicaSetReconciler)))
        .await
        .unwrap();
    let api = host.api();
    let rs = api
        .kinds()
        .require("demo.setpoint.dev/v1", "ReplicaSet")
        .unwrap();
    let from = api.current_revision().await.unwrap();
    let mut changes = api
        .watch("/registry/demo.setpoint.dev/pods/", from)
        .unwrap();
    api.apply(&rs, replicaset("web", 1, 10), "embedder", false)
        .await
        .unwrap();
    // Follow the pod's life through the watch until it runs.
    let running = tokio::time::timeout(CONVERGE, async {
        loop {
            let event = changes.next().await.unwrap();
            if event.object["status"]["phase"] == "Running" {
                return event;
            }
        }
    })
    .await
    .expect("the watch shows the pod running");
    assert_eq!(meta::name(&running.object), "web-0");
    host.shutdown().await;
    assert!(
        host.reconcilers().await.is_empty(),
        "shutdown stops every controller"
    );
}

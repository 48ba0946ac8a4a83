//! Embedding Setpoint: a program that runs a host on the durable embedded
//! store with one native reconciler (the replicaset example, compiled in)
//! and one Wasm plugin (podsim, loaded from its `.wasm`), applies a
//! ReplicaSet through the typed client, follows its pods through a watch
//! stream until they run, and shuts the host down.
//!
//! ```sh
//! cargo build --profile plugin --target wasm32-unknown-unknown --target-dir target/wasm -p podsim
//! cargo run -p setpoint --example embed -- target/wasm/wasm32-unknown-unknown/plugin/podsim.wasm
//! ```

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use replicaset::{ReplicaSetSpec, ReplicaSetStatus};
use serde_json::json;
use setpoint::Host;
use setpoint::client::WatchEvent;
use setpoint::controller::Native;
use tokio_stream::StreamExt;

/// The ReplicaSet as the replicaset reconciler itself reads it.
type ReplicaSet = setpoint_plugin_sdk::Object<ReplicaSetSpec, ReplicaSetStatus>;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let podsim = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "target/wasm/wasm32-unknown-unknown/plugin/podsim.wasm".into());
    let data = tempfile::tempdir()?;
    let plugins = data.path().join("plugins");
    std::fs::create_dir_all(&plugins)?;
    std::fs::copy(&podsim, plugins.join("podsim.wasm")).map_err(|e| {
        anyhow::anyhow!("cannot read {podsim} ({e}); build it first (see the module docs)")
    })?;

    // A host on the durable embedded store, with the Wasm plugins directory.
    let host = Host::builder()
        .embedded(data.path().join("store"))
        .plugins_dir(&plugins)
        .build()
        .await?;
    // A native reconciler: the same code as the Wasm replicaset plugin.
    host.add_reconciler(Arc::new(Native::new(replicaset::ReplicaSetReconciler)))
        .await?;
    println!("reconcilers: {:?}", host.reconcilers().await);

    // The typed client: one handle per kind, in namespace `default`.
    let client = host.client().with_field_manager("embed-example");
    let sets = client
        .resource("demo.setpoint.dev/v1", "ReplicaSet")
        .typed::<ReplicaSet>();
    let pods = client.resource("demo.setpoint.dev/v1", "Pod");

    // Watch the pods from now on, then ask for two.
    let mut changes = pods.watch(client.current_revision().await?)?;
    sets.apply(&json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"startupDelayMs": 200}}
        }
    }))
    .await?;

    // Follow the pods until both run (podsim must be in `plugins`).
    let mut running = BTreeSet::new();
    while running.len() < 2 {
        let event = tokio::time::timeout(Duration::from_secs(30), changes.next())
            .await
            .map_err(|_| anyhow::anyhow!("no pod change for 30 s"))?
            .ok_or_else(|| anyhow::anyhow!("the watch ended"))??;
        let kind = match &event {
            WatchEvent::Added(_) => "added",
            WatchEvent::Modified(_) => "modified",
            WatchEvent::Deleted(_) => "deleted",
        };
        let pod = event.into_object();
        let name = pod["metadata"]["name"].as_str().unwrap_or("?").to_owned();
        let phase = pod["status"]["phase"].as_str().unwrap_or("-");
        println!("{kind:>8} pod/{name} {phase}");
        if phase == "Running" {
            running.insert(name);
        }
    }

    // The ReplicaSet's status catches up with its pods.
    let web = tokio::time::timeout(
        Duration::from_secs(30),
        sets.wait_until("web", |rs| rs.status.ready_replicas == 2),
    )
    .await??;
    println!(
        "ReplicaSet web: {} of {} ready",
        web.status.ready_replicas, web.spec.replicas
    );

    // Stop the controllers; reconciles in flight finish first.
    host.shutdown().await;
    Ok(())
}

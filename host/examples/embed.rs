//! Embedding Setpoint: a program that runs a host on the durable embedded
//! store with one native reconciler (the replicaset example, compiled in)
//! and one Wasm plugin (podsim, loaded from its `.wasm`), creates a
//! ReplicaSet and watches its pods converge.
//!
//! ```sh
//! cargo build --profile plugin --target wasm32-wasip2 --target-dir target/wasm -p podsim
//! cargo run -p setpoint --example embed -- target/wasm/wasm32-wasip2/plugin/podsim.wasm
//! ```

use std::sync::Arc;

use serde_json::json;
use setpoint::Host;
use setpoint::controller::Native;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let podsim = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "target/wasm/wasm32-wasip2/plugin/podsim.wasm".into());
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

    let api = host.api();
    let kind = api.kinds().require("demo.setpoint.dev/v1", "ReplicaSet")?;
    let from = api.current_revision().await?;
    let mut pods = api.watch("/registry/demo.setpoint.dev/pods/", from)?;
    api.apply(
        &kind,
        json!({
            "apiVersion": "demo.setpoint.dev/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"startupDelayMs": 200}}
            }
        }),
        "embed-example",
        false,
    )
    .await?;

    // Follow the pods until both run (podsim must be in `plugins`).
    let mut running = std::collections::BTreeSet::new();
    while running.len() < 2 {
        let event = tokio::time::timeout(std::time::Duration::from_secs(30), pods.next())
            .await
            .map_err(|_| anyhow::anyhow!("no pod change for 30 s"))??;
        let name = setpoint::object::meta::name(&event.object).to_owned();
        let phase = event.object["status"]["phase"]
            .as_str()
            .unwrap_or("-")
            .to_owned();
        println!("{:?} pod/{name} {phase}", event.kind);
        if phase == "Running" {
            running.insert(name);
        }
    }
    // The ReplicaSet's status catches up with its pods.
    loop {
        let web = api.get(&kind, Some("default"), "web").await?;
        if web["status"]["readyReplicas"] == 2 {
            println!("ReplicaSet web: {}", web["status"]);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    host.shutdown().await;
    Ok(())
}

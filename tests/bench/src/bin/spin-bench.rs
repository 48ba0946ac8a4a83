//! How long a ReplicaSet of 3 takes to become ready beside plugins that
//! compute until their deadline (issue 18, item 9: 1.7 s alone, 17 s beside
//! 19 misbehaving plugins).
//!
//! `spin-bench PLUGINS_DIR SPINNERS TURNS` (see `scripts/bench`):
//! `PLUGINS_DIR` holds `replicaset.wasm`, `podsim.wasm` and `zoo.wasm`;
//! `SPINNERS` calls of the zoo plugin spin at once (one worker each, each
//! call until its 1 s deadline, again and again); `TURNS` is how many calls
//! past their first epoch tick may compute at once (`auto`: the host's
//! default, half the cores; a large number: no turns, as before issue 18).
//! Prints one line: the time from creating the ReplicaSet until it reports
//! 3 ready replicas, on the in-memory store so the disk plays no part.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::json;
use setpoint::Host;
use setpoint::runtime::RuntimeConfig;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [source, spinners, turns] = args.as_slice() else {
        bail!("usage: spin-bench PLUGINS_DIR SPINNERS TURNS (TURNS: auto or a number)");
    };
    let spinners: usize = spinners.parse().context("SPINNERS")?;
    let long_call_turns = match turns.as_str() {
        "auto" => None,
        n => Some(n.parse().context("TURNS")?),
    };
    let dir = tempfile::tempdir()?;
    let mut plugins = vec!["replicaset", "podsim"];
    if spinners > 0 {
        plugins.push("zoo");
    }
    for name in plugins {
        let file = format!("{name}.wasm");
        std::fs::copy(
            std::path::Path::new(source).join(&file),
            dir.path().join(&file),
        )
        .with_context(|| format!("{source}/{file}"))?;
    }
    let host = Host::builder()
        .plugins_dir(dir.path())
        .runtime(RuntimeConfig {
            long_call_turns,
            ..Default::default()
        })
        .controller_for(
            "zoo",
            setpoint::controller::Config {
                workers: spinners.max(1),
                concurrency: setpoint::controller::Concurrency::Fixed,
                ..Default::default()
            },
        )
        .build()
        .await?;
    let api = host.api();
    if spinners > 0 {
        let zoo = api.kinds().require("test.setpoint.dev/v1", "Zoo")?;
        for i in 0..spinners {
            api.create(
                &zoo,
                json!({"apiVersion": "test.setpoint.dev/v1", "kind": "Zoo",
                    "metadata": {"name": format!("spin-{i}"), "namespace": "default"},
                    "spec": {"fault": "spin"}}),
            )
            .await?;
        }
        // Let every spinner get into its call.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let replicasets = api.kinds().require("demo.setpoint.dev/v1", "ReplicaSet")?;
    let started = Instant::now();
    api.create(
        &replicasets,
        json!({"apiVersion": "demo.setpoint.dev/v1", "kind": "ReplicaSet",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"startupDelayMs": 0, "image": "nginx"}}}}),
    )
    .await?;
    loop {
        let rs = api.get(&replicasets, Some("default"), "web").await?;
        if rs["status"]["readyReplicas"] == json!(3) {
            break;
        }
        if started.elapsed() > Duration::from_secs(300) {
            bail!("the replicaset was not ready after 300 s: {}", rs["status"]);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed();
    let turns = host.runtime().long_call_stats().permits;
    println!(
        "spinners {spinners:>3}  turns {turns:>4}  replicaset of 3 ready in {:>8.3} s",
        elapsed.as_secs_f64()
    );
    host.shutdown().await;
    Ok(())
}

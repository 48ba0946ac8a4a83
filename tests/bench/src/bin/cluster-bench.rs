//! Reconciles per second with one, two or three hosts sharing the work on
//! etcd (`setpoint::cluster`), or one host on the embedded store, on the same
//! machine.
//!
//! `cluster-bench embedded OBJECTS` or `cluster-bench ETCD_URL HOSTS OBJECTS`
//! (see `scripts/bench`). The hosts run in this one process (no global state
//! makes that possible), each with its own etcd connection, lease and
//! workers, and a native reconciler that writes `status` from the spec. Two
//! phases: **create** (64 writers create OBJECTS objects while the hosts
//! reconcile them) and **update** (every spec changes once); each reports
//! reconciles per second from the first write until every object's status
//! shows the phase's generation (read from the watch). Each host runs 64
//! workers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use setpoint::controller::{CacheView, Manifest, ReconcileError, Reconciler, Request, Response};
use setpoint::object::{KindRef, meta};
use setpoint::store::{EmbeddedBackend, EtcdBackend, EtcdConfig};
use setpoint::{Host, cluster};

const WRITERS: usize = 64;

fn definition() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "items.bench.setpoint.dev"},
        "spec": {"group": "bench.setpoint.dev", "scope": "Namespaced",
            "names": {"kind": "Item", "plural": "items", "singular": "item", "listKind": "ItemList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"value": {"type": "integer"}}},
                    "status": {"type": "object", "properties": {
                        "value": {"type": "integer"},
                        "observedGeneration": {"type": "integer"}}}}}}}]}
    })
}

struct StatusWriter(Manifest);

impl Reconciler for StatusWriter {
    fn manifest(&self) -> &Manifest {
        &self.0
    }

    fn reconcile(
        &self,
        request: &Request,
        _cache: &Arc<dyn CacheView>,
    ) -> Result<Response, ReconcileError> {
        let object = &request.object;
        Ok(Response {
            status: Some(json!({
                "value": object["spec"]["value"],
                "observedGeneration": meta::generation(object),
            })),
            ..Default::default()
        })
    }
}

/// Enough workers per host that the store, not the worker count, limits.
fn controller_config() -> setpoint::controller::Config {
    setpoint::controller::Config {
        workers: 64,
        ..Default::default()
    }
}

fn reconciler() -> Arc<dyn Reconciler> {
    Arc::new(StatusWriter(Manifest {
        name: "status-writer".into(),
        version: "1".into(),
        reconciles: KindRef::new("bench.setpoint.dev/v1", "Item"),
        owns: vec![],
        definitions: vec![definition()],
        finalizer: None,
        destinations: vec![],
        secrets: vec![],
    }))
}

async fn phase(name: &str, host: &Host, objects: usize, generation: i64) -> anyhow::Result<f64> {
    let kind = host
        .api()
        .kinds()
        .require("bench.setpoint.dev/v1", "Item")?;
    // Convergence is read from the watch (cheap) rather than by listing.
    let prefix = setpoint::api::Api::prefix(&kind, None);
    let mut changes = host
        .api()
        .watch(&prefix, host.api().current_revision().await?)?;
    let started = Instant::now();
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (api, kind) = (host.api().clone(), kind.clone());
        writers.push(tokio::spawn(async move {
            for i in (w..objects).step_by(WRITERS) {
                let name = format!("item-{i:05}");
                if generation == 1 {
                    let object = json!({"apiVersion": "bench.setpoint.dev/v1", "kind": "Item",
                        "metadata": {"name": name, "namespace": "default"},
                        "spec": {"value": 1}});
                    api.create(&kind, object).await?;
                } else {
                    loop {
                        let mut next = api.get(&kind, Some("default"), &name).await?;
                        next["spec"]["value"] = json!(generation);
                        match api.update(&kind, next).await {
                            Ok(_) => break,
                            Err(setpoint::api::Error::Conflict { .. }) => continue,
                            Err(err) => return Err(err),
                        }
                    }
                }
            }
            Ok(())
        }));
    }
    let mut converged = std::collections::HashSet::new();
    let mut written = None;
    while converged.len() < objects {
        let event = tokio::time::timeout(Duration::from_secs(600), changes.next())
            .await
            .context("not converged after 10 minutes")??;
        if event.object["status"]["observedGeneration"] == json!(generation) {
            converged.insert(meta::name(&event.object).to_owned());
        }
        if written.is_none() && writers.iter().all(|w| w.is_finished()) {
            written = Some(started.elapsed());
        }
    }
    for w in writers {
        w.await??;
    }
    let written = written.unwrap_or_else(|| started.elapsed());
    let elapsed = started.elapsed().as_secs_f64();
    let rate = objects as f64 / elapsed;
    println!(
        "  {name:>6}: writes done in {:.2}s, converged in {elapsed:.2}s: {rate:.0} reconciles/s",
        written.as_secs_f64()
    );
    Ok(rate)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut hosts = Vec::new();
    let _dir;
    let (label, objects) = match args.as_slice() {
        [store, objects] if store == "embedded" => {
            let dir = tempfile::tempdir_in(
                std::env::var_os("SETPOINT_BENCH_DIR")
                    .unwrap_or_else(|| std::env::temp_dir().into()),
            )?;
            let backend = EmbeddedBackend::open(dir.path())?;
            _dir = dir;
            hosts.push(
                Host::builder()
                    .backend(Arc::new(backend))
                    .controller(controller_config())
                    .build()
                    .await?,
            );
            ("embedded, 1 host".to_owned(), objects.parse::<usize>()?)
        }
        [url, count, objects] => {
            let count: usize = count.parse()?;
            // A fresh prefix per run: runs never see each other's objects.
            let prefix = format!("/bench-{}", std::process::id());
            for i in 0..count {
                let etcd = EtcdBackend::connect(EtcdConfig {
                    endpoints: vec![url.clone()],
                    prefix: prefix.clone(),
                    ..Default::default()
                })
                .await
                .with_context(|| format!("connecting to etcd at {url}"))?;
                let host = Host::builder()
                    .etcd_backend(etcd)
                    .controller(controller_config())
                    .cluster(cluster::Config {
                        host_id: format!("bench-{i}"),
                        ..Default::default()
                    })
                    .build()
                    .await?;
                hosts.push(host);
            }
            (format!("etcd, {count} host(s)"), objects.parse::<usize>()?)
        }
        _ => bail!("usage: cluster-bench embedded OBJECTS | cluster-bench ETCD_URL HOSTS OBJECTS"),
    };
    for host in &hosts {
        host.add_reconciler(reconciler()).await?;
    }
    // Wait until the hosts have divided the shards among themselves.
    let settle = Instant::now();
    while hosts.iter().any(|h| {
        h.cluster()
            .is_some_and(|c| c.status().members.len() != hosts.len())
    }) || hosts
        .iter()
        .filter_map(|h| h.cluster())
        .map(|c| c.status().held.len())
        .sum::<usize>()
        != if hosts[0].cluster().is_some() { 64 } else { 0 }
    {
        if settle.elapsed() > Duration::from_secs(60) {
            bail!("the hosts did not divide the shards within a minute");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!("{label}, {objects} objects:");
    phase("create", &hosts[0], objects, 1).await?;
    phase("update", &hosts[0], objects, 2).await?;
    for host in &hosts {
        host.shutdown().await;
    }
    Ok(())
}

//! Reconciles per second of a provider plugin against a local HTTP server,
//! and what one observation round costs: the `effector` test plugin (Wasm)
//! on an in-memory host reconciles OBJECTS objects that read nothing, then
//! OBJECTS objects that each read one URL from a loopback HTTP server (one
//! observation round: call, read, call again).
//!
//! `effects-bench PATH/effector.wasm OBJECTS` (build the plugin first:
//! `cargo build --profile plugin --target wasm32-unknown-unknown
//! --target-dir target/wasm -p effector`). Each phase creates its objects
//! from 16 writers and ends when every object's status shows the phase's
//! answer; it reports objects per second and HTTP requests served.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use setpoint::Host;
use setpoint::api::ListOptions;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const WRITERS: usize = 16;

/// A loopback server answering every request with `200 {}`; counts them.
async fn server() -> anyhow::Result<(String, Arc<AtomicUsize>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let served = Arc::new(AtomicUsize::new(0));
    let count = served.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let count = count.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 2048];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                count.fetch_add(1, Ordering::Relaxed);
                let _ = stream
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
                    )
                    .await;
            });
        }
    });
    Ok((url, served))
}

async fn phase(
    host: &Host,
    name: &str,
    objects: usize,
    spec: Value,
    done: fn(&Value) -> bool,
) -> anyhow::Result<f64> {
    let kind = host
        .api()
        .kinds()
        .require("test.setpoint.dev/v1", "Effect")?;
    let started = Instant::now();
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (api, kind, spec) = (host.api().clone(), kind.clone(), spec.clone());
        let name = name.to_owned();
        writers.push(tokio::spawn(async move {
            for i in (w..objects).step_by(WRITERS) {
                api.create(
                    &kind,
                    json!({"apiVersion": "test.setpoint.dev/v1", "kind": "Effect",
                        "metadata": {"name": format!("{name}-{i}"), "namespace": "default",
                                     "labels": {"phase": name}},
                        "spec": spec}),
                )
                .await?;
            }
            anyhow::Ok(())
        }));
    }
    for w in writers {
        w.await??;
    }
    let options = ListOptions {
        namespace: Some("default".into()),
        label_selector: Some(format!("phase={name}")),
        ..Default::default()
    };
    loop {
        let list = host.api().list(&kind, &options).await?;
        let finished = list.items.iter().filter(|o| done(o)).count();
        if finished == objects {
            return Ok(objects as f64 / started.elapsed().as_secs_f64());
        }
        if started.elapsed() > Duration::from_secs(600) {
            bail!("{name}: only {finished} of {objects} finished in 10 minutes");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, plugin, objects] = args.as_slice() else {
        bail!("usage: effects-bench PATH/effector.wasm OBJECTS");
    };
    let objects: usize = objects.parse().context("OBJECTS")?;
    let dir = tempfile::tempdir()?;
    std::fs::copy(plugin, dir.path().join("effector.wasm")).context("copying the plugin")?;
    let host = Host::builder()
        .in_memory()
        .plugins_dir(dir.path())
        .watch_plugins(false)
        .controller(setpoint::controller::Config {
            workers: 32,
            ..Default::default()
        })
        .build()
        .await?;
    let (url, served) = server().await?;
    let grants = host
        .api()
        .kinds()
        .require("setpoint.dev/v1", "PluginGrant")?;
    host.api()
        .create(
            &grants,
            json!({"apiVersion": "setpoint.dev/v1", "kind": "PluginGrant",
                "metadata": {"name": "effector"},
                "spec": {"destinations": [url], "limits": {"rps": 1_000_000, "concurrency": 64}}}),
        )
        .await?;
    let none = phase(&host, "none", objects, json!({}), |o| {
        o["status"]["round"] == 0
    })
    .await?;
    let before = served.load(Ordering::Relaxed);
    let one = phase(
        &host,
        "one",
        objects,
        json!({"reads": [{"id": "r", "url": format!("{url}/zone")}]}),
        |o| o["status"]["answers"]["r"]["status"] == 200,
    )
    .await?;
    let requests = served.load(Ordering::Relaxed) - before;
    println!(
        "objects={objects} no-read={none:.0}/s one-read-round={one:.0}/s ratio={:.2} http-requests={requests}",
        none / one
    );
    host.shutdown().await;
    Ok(())
}

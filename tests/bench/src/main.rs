//! `store-bench`: durable puts of 1 KiB values into Setpoint's embedded store
//! and into etcd, with the same client-side concurrency, on the same machine.
//!
//! ```text
//! store-bench embedded WRITERS PUTS            # a fresh data dir in $TMPDIR
//! store-bench etcd ENDPOINT WRITERS PUTS       # e.g. http://127.0.0.1:23790
//! ```
//!
//! Prints one line: puts/s and per-put latency p50/p99 (from call to
//! acknowledgement). `scripts/bench` runs both sides interleaved.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use setpoint::store::{Backend, Condition, EmbeddedBackend};

const VALUE_BYTES: usize = 1024;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize| -> anyhow::Result<usize> {
        args.get(i)
            .context("missing argument")?
            .parse()
            .context("not a number")
    };
    let (name, latencies, elapsed) = match args.first().map(String::as_str) {
        Some("embedded") => {
            let (writers, puts) = (number(1)?, number(2)?);
            let dir = tempfile::tempdir()?;
            let store = Arc::new(EmbeddedBackend::open(dir.path())?);
            let handle = store.clone();
            let (l, e) = run(writers, puts, move |key, value| {
                let store = store.clone();
                async move {
                    store.put(&key, value, Condition::Any).await?;
                    Ok(())
                }
            })
            .await?;
            let stats = handle.stats();
            let batches = stats.commits.max(1) as u32;
            let applies = stats.applies.max(1) as u32;
            eprintln!(
                "  embedded: {} batches of {:.1} writes; per batch: decide {:?}, log sync wait \
                 {:?}, gather {:?}; {} database commits, each: apply {:?}, commit {:?}; {} \
                 checkpoints of {:?}",
                stats.commits,
                stats.writes as f64 / f64::from(batches),
                stats.decide_time / batches,
                stats.commit_time / batches,
                stats.gather_time / batches,
                stats.applies,
                stats.apply_time / applies,
                stats.db_commit_time / applies,
                stats.checkpoints,
                stats.checkpoint_time / stats.checkpoints.max(1) as u32,
            );
            (format!("embedded, {writers} writers"), l, e)
        }
        Some("etcd") => {
            let endpoint = args.get(1).context("missing endpoint")?.clone();
            let (writers, puts) = (number(2)?, number(3)?);
            // Several connections, as etcd's own benchmark tool does: one
            // HTTP/2 connection serialises flow control.
            let connections = writers.clamp(1, 8);
            let mut clients = Vec::new();
            for _ in 0..connections {
                clients.push(
                    etcd_client::Client::connect([endpoint.as_str()], None)
                        .await?
                        .kv_client(),
                );
            }
            let clients = Arc::new(clients);
            let (l, e) = run(writers, puts, move |key, value| {
                let clients = clients.clone();
                async move {
                    let mut client = clients[key.len() % clients.len()].clone();
                    client.put(key, value, None).await?;
                    Ok(())
                }
            })
            .await?;
            (format!("etcd, {writers} writers"), l, e)
        }
        _ => bail!(
            "usage: store-bench embedded WRITERS PUTS | store-bench etcd ENDPOINT WRITERS PUTS"
        ),
    };
    let mut latencies = latencies;
    latencies.sort();
    let p = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    println!(
        "{name}: {:.0} puts/s, latency p50 {:.3} ms, p99 {:.3} ms",
        latencies.len() as f64 / elapsed.as_secs_f64(),
        p(0.5).as_secs_f64() * 1e3,
        p(0.99).as_secs_f64() * 1e3
    );
    Ok(())
}

/// Run `puts` puts of distinct keys from `writers` concurrent tasks.
async fn run<F, Fut>(
    writers: usize,
    puts: usize,
    put: F,
) -> anyhow::Result<(Vec<Duration>, Duration)>
where
    F: Fn(String, Vec<u8>) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let run_id = std::process::id();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let put = put.clone();
        let count = puts / writers + usize::from(w < puts % writers);
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(count);
            for i in 0..count {
                let key = format!("/bench/{run_id}/w{w:03}/obj-{i:08}");
                let value: Vec<u8> = (0..VALUE_BYTES)
                    .map(|b| (b as u8).wrapping_mul(31).wrapping_add(i as u8))
                    .collect();
                let t = Instant::now();
                put(key, value).await?;
                latencies.push(t.elapsed());
            }
            anyhow::Ok(latencies)
        }));
    }
    let mut all = Vec::with_capacity(puts);
    for task in tasks {
        all.extend(task.await??);
    }
    Ok((all, started.elapsed()))
}

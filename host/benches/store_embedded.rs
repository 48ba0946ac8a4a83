//! Durable put throughput and commit latency of the embedded store.
//!
//! `cargo bench -p setpoint --bench store_embedded [-- REPS]`. Each repetition uses a fresh
//! store in `$SETPOINT_BENCH_DIR` (default: the system temp dir) and writes
//! 1 KiB values under distinct keys: one writer (every put is its own
//! commit: the single-write commit latency), then 64 concurrent writer tasks
//! (group commit). The raw `write + fdatasync` floor of the same disk is
//! measured alongside, since the disk dominates and varies.

use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use setpoint::store::{Backend, Condition, EmbeddedBackend};

const VALUE: usize = 1024;

struct Run {
    puts_per_sec: f64,
    p50: Duration,
    p99: Duration,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn summarize(mut latencies: Vec<Duration>, elapsed: Duration) -> Run {
    latencies.sort();
    Run {
        puts_per_sec: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50: percentile(&latencies, 0.50),
        p99: percentile(&latencies, 0.99),
    }
}

/// 1 KiB of pseudo-random bytes, different for every `n`.
fn value(n: u64) -> Vec<u8> {
    let mut state = n.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::with_capacity(VALUE);
    while out.len() < VALUE {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.extend_from_slice(&state.to_le_bytes());
    }
    out
}

fn bench_dir() -> PathBuf {
    std::env::var_os("SETPOINT_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
}

/// Raw floor: write 4 KiB in place into a preallocated file (as a database
/// page write is) and fdatasync, `n` times.
fn fdatasync_floor(n: usize) -> Run {
    let dir = tempfile::tempdir_in(bench_dir()).unwrap();
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(dir.path().join("raw"))
        .unwrap();
    let page = [value(1), value(2), value(3), value(4)].concat();
    let slots = 1024u64;
    file.set_len(slots * page.len() as u64).unwrap();
    file.sync_all().unwrap();
    let mut latencies = Vec::with_capacity(n);
    let start = Instant::now();
    for i in 0..n as u64 {
        let t = Instant::now();
        file.seek(SeekFrom::Start((i % slots) * page.len() as u64))
            .unwrap();
        file.write_all(&page).unwrap();
        file.sync_data().unwrap();
        latencies.push(t.elapsed());
    }
    summarize(latencies, start.elapsed())
}

/// `writers` tasks put `total` distinct keys between them, or, with
/// `keys = Some(k)`, update pseudo-random keys among `k`.
async fn puts(store: &Arc<EmbeddedBackend>, writers: usize, total: u64) -> Run {
    puts_to(store, writers, total, None).await
}

async fn puts_to(
    store: &Arc<EmbeddedBackend>,
    writers: usize,
    total: u64,
    keys: Option<u64>,
) -> Run {
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..writers {
        let store = store.clone();
        let next = next.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= total {
                    return latencies;
                }
                let k = match keys {
                    Some(keys) => n.wrapping_mul(0x9e37_79b9_7f4a_7c15) % keys,
                    None => n,
                };
                let key = format!("/registry/deployments/team-a/obj-{k:08}");
                let v = value(n);
                let t = Instant::now();
                store.put(&key, v, Condition::Any).await.unwrap();
                latencies.push(t.elapsed());
            }
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.unwrap());
    }
    summarize(latencies, start.elapsed())
}

/// Compacts 100,000 revisions (1,000 keys × 100 versions) while one writer
/// keeps writing; returns the compaction time and the writer's latencies.
async fn compaction(store: &Arc<EmbeddedBackend>) -> (Duration, Run) {
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let store = store.clone();
        let next = next.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= 100_000 {
                    return;
                }
                let key = format!("/registry/pods/team-a/pod-{:04}", n % 1000);
                store.put(&key, value(n), Condition::Any).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let revision = store.current_revision().await.unwrap();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let store = store.clone();
        let done = done.clone();
        tokio::spawn(async move {
            let mut latencies = Vec::new();
            let start = Instant::now();
            let mut n = 0u64;
            while !done.load(Ordering::Relaxed) {
                let t = Instant::now();
                store
                    .put(&format!("/registry/other/{n}"), value(n), Condition::Any)
                    .await
                    .unwrap();
                latencies.push(t.elapsed());
                n += 1;
            }
            (latencies, start.elapsed())
        })
    };
    let start = Instant::now();
    store.compact(revision).await.unwrap();
    let took = start.elapsed();
    done.store(true, Ordering::Relaxed);
    let (latencies, elapsed) = writer.await.unwrap();
    let mut run = summarize(latencies.clone(), elapsed);
    run.p99 = latencies.iter().copied().max().unwrap_or_default();
    (took, run)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn report(name: &str, runs: &[Run]) {
    let mut rate: Vec<f64> = runs.iter().map(|r| r.puts_per_sec).collect();
    let mut p50: Vec<f64> = runs.iter().map(|r| r.p50.as_secs_f64() * 1e6).collect();
    let mut p99: Vec<f64> = runs.iter().map(|r| r.p99.as_secs_f64() * 1e6).collect();
    let (lo, hi) = (
        rate.iter().copied().fold(f64::MAX, f64::min),
        rate.iter().copied().fold(0.0, f64::max),
    );
    println!(
        "{name:<28} {:>9.0} puts/s [{lo:.0}..{hi:.0}]   p50 {:>7.0} µs   p99 {:>7.0} µs   (x{})",
        median(&mut rate),
        median(&mut p50),
        median(&mut p99),
        runs.len()
    );
}

fn main() {
    let reps: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(5);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (mut floor, mut single, mut many) = (Vec::new(), Vec::new(), Vec::new());
    let mut random = Vec::new();
    for rep in 0..reps {
        floor.push(fdatasync_floor(2000));
        runtime.block_on(async {
            let dir = tempfile::tempdir_in(bench_dir()).unwrap();
            let store = Arc::new(EmbeddedBackend::open(dir.path()).unwrap());
            single.push(puts(&store, 1, 3000).await);
            store.close().await.unwrap();
            let dir = tempfile::tempdir_in(bench_dir()).unwrap();
            let store = Arc::new(EmbeddedBackend::open(dir.path()).unwrap());
            many.push(puts(&store, 64, 100_000).await);
            let stats = store.stats();
            let per = |d: Duration| d / stats.commits.max(1) as u32;
            let per_apply = |d: Duration| d / stats.applies.max(1) as u32;
            eprintln!(
                "  64 writers: {:.1} puts/batch; per batch: decide {:?}, log sync wait {:?}, \
                 gather {:?}; {:.1} batches per database commit, each: apply {:?}, commit {:?}",
                stats.writes as f64 / stats.commits.max(1) as f64,
                per(stats.decide_time),
                per(stats.commit_time),
                per(stats.gather_time),
                stats.commits as f64 / stats.applies.max(1) as f64,
                per_apply(stats.apply_time),
                per_apply(stats.db_commit_time),
            );
            if rep == 0 {
                let size = std::fs::metadata(store.file()).unwrap().len();
                store.close().await.unwrap();
                let start = Instant::now();
                let reopened = EmbeddedBackend::open(dir.path()).unwrap();
                eprintln!(
                    "  reopening the {:.0} MB store of 100,000 keys (full integrity check): {:?}",
                    size as f64 / 1e6,
                    start.elapsed()
                );
                reopened.close().await.unwrap();
            }
            store.close().await.unwrap();
            let dir = tempfile::tempdir_in(bench_dir()).unwrap();
            let store = Arc::new(EmbeddedBackend::open(dir.path()).unwrap());
            puts(&store, 64, 10_000).await;
            random.push(puts_to(&store, 64, 50_000, Some(10_000)).await);
            store.close().await.unwrap();
        });
        let (f, s, m) = (&floor[rep], &single[rep], &many[rep]);
        eprintln!(
            "rep {rep}: floor {:.0}/s p50 {:?} | 1 writer {:.0}/s p50 {:?} p99 {:?} | 64 writers {:.0}/s p50 {:?} p99 {:?}",
            f.puts_per_sec, f.p50, s.puts_per_sec, s.p50, s.p99, m.puts_per_sec, m.p50, m.p99
        );
    }
    runtime.block_on(async {
        let dir = tempfile::tempdir_in(bench_dir()).unwrap();
        let store = Arc::new(EmbeddedBackend::open(dir.path()).unwrap());
        let (took, writer) = compaction(&store).await;
        println!(
            "compacting 100,000 revisions (1,000 keys x 100 versions): {took:?}; a concurrent \
             writer meanwhile: {:.0} puts/s, p50 {:?}, max {:?}",
            writer.puts_per_sec, writer.p50, writer.p99
        );
        store.close().await.unwrap();
    });
    println!("1 KiB values, median [min..max] of {reps} repetitions; latency = per put");
    report("4 KiB pwrite+fdatasync", &floor);
    report("embedded, 1 writer", &single);
    report("embedded, 64 writers", &many);
    report("64 writers, random updates", &random);
}

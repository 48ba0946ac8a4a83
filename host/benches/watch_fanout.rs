//! Watch fan-out: 1,000 in-process watchers on one watch hub, one writer
//! putting 1 KiB objects. Run with `cargo bench -p setpoint --bench watch_fanout`.
//!
//! Two measurements per repetition:
//! - **burst**: the writer puts every event as fast as it can; delivered
//!   events per second = watchers × events / time from the first put to the
//!   last delivery (the fan-out's capacity).
//! - **paced**: the writer puts at a fixed rate (default 2,000 puts/s, i.e.
//!   2M deliveries/s to 1,000 watchers); put→delivery latency percentiles
//!   at that load.
//!
//! Arguments (optional): WATCHERS EVENTS REPETITIONS PACED_PUTS_PER_SECOND
//! (default 1000 1000 5 2000).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use setpoint::store::{Backend, Condition, MemoryBackend};
use setpoint::watch::WatchHub;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let watchers = args.first().copied().unwrap_or(1000);
    let events = args.get(1).copied().unwrap_or(1000);
    let reps = args.get(2).copied().unwrap_or(5);
    let paced_rate = args.get(3).copied().unwrap_or(2000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut rates = Vec::new();
    let mut p50s = Vec::new();
    let mut p99s = Vec::new();
    for rep in 0..reps {
        let (rate, _, _) = runtime.block_on(run(watchers, events, None));
        let (paced, p50, p99) = runtime.block_on(run(watchers, events, Some(paced_rate)));
        println!(
            "rep {rep}: {watchers} watchers x {events} events: burst {:.0} events/s delivered; paced at {paced_rate} puts/s: {:.0} events/s delivered, put->delivery p50 {:.2} ms, p99 {:.2} ms",
            rate,
            paced,
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3
        );
        rates.push(rate);
        p50s.push(p50);
        p99s.push(p99);
    }
    rates.sort_by(f64::total_cmp);
    p50s.sort();
    p99s.sort();
    println!(
        "median of {reps}: burst {:.0} events/s delivered [{:.0}..{:.0}]; paced p50 {:.2} ms, p99 {:.2} ms",
        rates[reps / 2],
        rates[0],
        rates[reps - 1],
        p50s[reps / 2].as_secs_f64() * 1e3,
        p99s[reps / 2].as_secs_f64() * 1e3
    );
}

async fn run(watchers: usize, events: usize, paced: Option<usize>) -> (f64, Duration, Duration) {
    let backend = Arc::new(MemoryBackend::new());
    let hub = WatchHub::start(backend.clone(), events.next_power_of_two() * 2)
        .await
        .unwrap();
    let origin = Instant::now();
    // When each revision was put, in nanoseconds since `origin`.
    let sent: Arc<Vec<AtomicU64>> = Arc::new((0..=events).map(|_| AtomicU64::new(0)).collect());
    let value = object_of_1kib();
    let mut tasks = Vec::with_capacity(watchers);
    for _ in 0..watchers {
        let mut subscription = hub.subscribe("/registry/", 0).unwrap();
        let sent = sent.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(events);
            for _ in 0..events {
                let event = subscription.next().await.expect("no watcher falls behind");
                let now = origin.elapsed().as_nanos() as u64;
                let at = sent[event.revision as usize].load(Ordering::Acquire);
                latencies.push(Duration::from_nanos(now.saturating_sub(at)));
            }
            (latencies, origin.elapsed())
        }));
    }
    let started = origin.elapsed();
    // Paced: a batch every millisecond.
    let per_tick = paced.map(|rate| (rate / 1000).max(1));
    let mut ticker = tokio::time::interval(Duration::from_millis(1));
    for i in 0..events {
        if let Some(n) = per_tick
            && i % n == 0
        {
            ticker.tick().await;
        }
        let revision = i + 1;
        sent[revision].store(origin.elapsed().as_nanos() as u64, Ordering::Release);
        backend
            .put(
                &format!("/registry/demo/objects/default/o{i}"),
                value.clone(),
                Condition::Any,
            )
            .await
            .unwrap();
        if per_tick.is_none() && i % 64 == 63 {
            // A real writer awaits I/O between writes; let watchers run.
            tokio::task::yield_now().await;
        }
    }
    let mut latencies = Vec::with_capacity(watchers * events);
    let mut finished = Duration::ZERO;
    for task in tasks {
        let (l, end) = task.await.unwrap();
        latencies.extend(l);
        finished = finished.max(end);
    }
    latencies.sort();
    let elapsed = (finished - started).as_secs_f64();
    let rate = (watchers * events) as f64 / elapsed;
    let p = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    (rate, p(0.50), p(0.99))
}

fn object_of_1kib() -> Vec<u8> {
    let padding = "x".repeat(900);
    serde_json::to_vec(&serde_json::json!({
        "apiVersion": "demo.setpoint.dev/v1", "kind": "Widget",
        "metadata": {"name": "o", "namespace": "default"},
        "spec": {"padding": padding}
    }))
    .unwrap()
}

//! Restarts without a reconcile storm, through the binary on the embedded
//! store: each plugin's controller keeps a checkpoint (the revision it has
//! seen every change up to, and the keys it still owes a reconcile), so a
//! host restarted after a stop or a `kill -9` reconciles what changed while
//! it was down and what it owed, and nothing else — and misses nothing.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{ServeProcess, plugins_dir};

const PODS: &str = "/apis/demo.setpoint.dev/v1/namespaces/default/pods";

/// Pods in the test: as many as the issue asks for.
const PODS_N: usize = 100_000;

fn serve(data: &Path, plugins: &Path) -> ServeProcess {
    ServeProcess::start_with_env(
        [
            std::ffi::OsStr::new("--data"),
            data.as_os_str(),
            "--plugins".as_ref(),
            plugins.as_os_str(),
        ],
        &[],
    )
}

fn pod(i: usize) -> Value {
    json!({"apiVersion": "demo.setpoint.dev/v1", "kind": "Pod",
        "metadata": {"name": format!("pod-{i:06}"), "namespace": "default", "labels": {"app": "restart"}},
        "spec": {"startupDelayMs": 0, "image": "registry.example.com/app:1"}})
}

/// Create pods `range` from 32 clients at once.
async fn create(url: &str, range: std::ops::Range<usize>) {
    let http = reqwest::Client::new();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(range.start));
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let (http, next, url, end) = (http.clone(), next.clone(), url.to_owned(), range.end);
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= end {
                        return;
                    }
                    let response = http
                        .post(format!("{url}{PODS}"))
                        .json(&pod(i))
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

/// One number of `/metrics`; 0 for a series not there yet (a counter
/// nothing has counted).
async fn metric(url: &str, series: &str) -> f64 {
    crate::support::metric(url, series).await.unwrap_or(0.0)
}

async fn podsim_reconciles(url: &str) -> f64 {
    metric(url, "setpoint_plugin_reconciles_total{plugin=\"podsim\"}").await
}

/// Waits until podsim has nothing queued nor in flight for a second and
/// a half in a row (past a checkpoint's period).
async fn podsim_idle(url: &str, within: Duration) {
    let deadline = Instant::now() + within;
    let mut idle_since: Option<Instant> = None;
    loop {
        let depth = metric(url, "workqueue_depth{name=\"podsim\"}").await;
        let busy = metric(url, "workqueue_unfinished_work_seconds{name=\"podsim\"}").await;
        if depth == 0.0 && busy == 0.0 {
            let since = *idle_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= Duration::from_millis(1500) {
                return;
            }
        } else {
            idle_since = None;
        }
        assert!(
            Instant::now() < deadline,
            "podsim still busy after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn ready(url: &str) {
    let deadline = Instant::now() + Duration::from_secs(300);
    while !reqwest::get(format!("{url}/readyz"))
        .await
        .is_ok_and(|r| r.status().is_success())
    {
        assert!(Instant::now() < deadline, "not ready in 5 minutes");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every Pod's phase, by name.
async fn phases(url: &str) -> std::collections::BTreeMap<String, String> {
    let http = reqwest::Client::new();
    let mut phases = std::collections::BTreeMap::new();
    let mut next: Option<String> = None;
    loop {
        let mut request = http.get(format!("{url}{PODS}")).query(&[("limit", "5000")]);
        if let Some(token) = &next {
            request = request.query(&[("continue", token)]);
        }
        let page: Value = request.send().await.unwrap().json().await.unwrap();
        for item in page["items"].as_array().unwrap() {
            phases.insert(
                item["metadata"]["name"].as_str().unwrap().to_owned(),
                item["status"]["phase"].as_str().unwrap_or("").to_owned(),
            );
        }
        match page["metadata"]["continue"].as_str() {
            Some(token) if !token.is_empty() => next = Some(token.to_owned()),
            _ => return phases,
        }
    }
}

fn not_running(phases: &std::collections::BTreeMap<String, String>) -> Vec<&String> {
    phases
        .iter()
        .filter(|(_, phase)| *phase != "Running")
        .map(|(name, _)| name)
        .collect()
}

fn stop(mut server: ServeProcess) {
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(server.child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "no exit within 60 s of SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn log(server: &ServeProcess) -> String {
    server.log.lock().unwrap().join("\n")
}

/// Changes made with the host down, through the library on its data
/// directory: a new Pod, a Pod relabelled, a Pod deleted.
async fn change_offline(data: &Path) {
    let store = Arc::new(setpoint::store::EmbeddedBackend::open(data).unwrap());
    let api = setpoint::api::Api::open(store.clone()).await.unwrap();
    let pods = api.kinds().require("demo.setpoint.dev/v1", "Pod").unwrap();
    api.create(&pods, pod(PODS_N)).await.unwrap();
    let mut relabelled = api.get(&pods, Some("default"), "pod-000007").await.unwrap();
    relabelled["metadata"]["labels"]["changed"] = json!("offline");
    api.update(&pods, relabelled).await.unwrap();
    api.delete(
        &pods,
        Some("default"),
        "pod-000008",
        &setpoint::api::DeleteOptions::default(),
    )
    .await
    .unwrap();
    // Closed, its directory lock released, before the host starts on it.
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_100k_pods_reconciles_only_what_changed_and_misses_nothing() {
    let data = tempfile::tempdir().unwrap();
    let data = data.path().join("data");
    let plugins = plugins_dir(&["podsim"]);

    // 100,000 Pods, and a kill -9 in the middle of podsim's work on them:
    // no checkpoint says it is done, so the restart owes every one.
    let server = serve(&data, plugins.path());
    create(&server.url, 0..PODS_N).await;
    server.kill9();
    let server = serve(&data, plugins.path());
    ready(&server.url).await;
    podsim_idle(&server.url, Duration::from_secs(600)).await;
    let all = phases(&server.url).await;
    assert_eq!(all.len(), PODS_N);
    assert_eq!(
        not_running(&all),
        Vec::<&String>::new(),
        "missed after the kill -9"
    );

    // Converged and idle: a stop and a start reconcile nothing.
    stop(server);
    let server = serve(&data, plugins.path());
    ready(&server.url).await;
    podsim_idle(&server.url, Duration::from_secs(120)).await;
    assert_eq!(
        podsim_reconciles(&server.url).await,
        0.0,
        "a restart after a stop reconciled unchanged Pods: {}",
        log(&server)
    );
    assert!(
        log(&server).contains("controller resumes from its checkpoint"),
        "{}",
        log(&server)
    );

    // The same after a kill -9, with changes made while the host was down:
    // exactly those are reconciled (the new Pod twice: Pending, then
    // Running; the relabelled one once; the deleted one not at all). The
    // Pods' informer starts from the cache it saved once the kind was
    // quiet, caught up with the changes.
    let saved = data.join("informers").join("demo.setpoint.dev_v1.Pod");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !saved.exists() {
        assert!(
            Instant::now() < deadline,
            "no informer cache saved within 60 s of idling"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server.kill9();
    change_offline(&data).await;
    let server = serve(&data, plugins.path());
    ready(&server.url).await;
    assert!(
        log(&server).contains("informer filled from its saved cache"),
        "{}",
        log(&server)
    );
    podsim_idle(&server.url, Duration::from_secs(120)).await;
    let all = phases(&server.url).await;
    assert_eq!(all.len(), PODS_N);
    assert_eq!(
        all.get(&format!("pod-{PODS_N:06}")).map(String::as_str),
        Some("Running")
    );
    assert!(!all.contains_key("pod-000008"));
    assert_eq!(
        podsim_reconciles(&server.url).await,
        3.0,
        "after a kill -9 and three changes: {}",
        log(&server)
    );
}

/// A damaged checkpoint is named and not used: every object is queued
/// again, and everything converges as without one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_checkpoint_is_named_and_every_object_reconciled() {
    let data = tempfile::tempdir().unwrap();
    let data = data.path().join("data");
    let plugins = plugins_dir(&["podsim"]);
    let server = serve(&data, plugins.path());
    create(&server.url, 0..200).await;
    podsim_idle(&server.url, Duration::from_secs(120)).await;
    stop(server);

    let file = data.join("checkpoints").join("podsim");
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 2;
    bytes[last] ^= 0x01;
    std::fs::write(&file, &bytes).unwrap();

    let server = serve(&data, plugins.path());
    ready(&server.url).await;
    podsim_idle(&server.url, Duration::from_secs(120)).await;
    let log = log(&server);
    assert!(
        log.contains("checkpoint not used") && log.contains("is damaged"),
        "{log}"
    );
    assert_eq!(podsim_reconciles(&server.url).await, 200.0, "{log}");
    assert_eq!(
        not_running(&phases(&server.url).await),
        Vec::<&String>::new()
    );
}

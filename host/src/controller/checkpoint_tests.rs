//! A controller stopped and started again on the same store resumes from
//! its checkpoint: it reconciles what changed meanwhile and what it owed,
//! when it is due, and nothing else.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use super::*;
use crate::object::KindRef;
use crate::store::MemoryBackend;

fn event(name: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": "default"}})
}

/// A reconciler that notes every name it is called for; `e7` asks to be
/// looked at again in an hour.
fn noting(calls: Arc<Mutex<Vec<String>>>) -> Arc<dyn Reconciler> {
    Arc::new(from_fn(
        Manifest::new("noting", "1", KindRef::new("v1", "Event")),
        move |request, _| {
            let name = crate::object::meta::name(&request.object).to_owned();
            let later = name == "e7";
            calls.lock().unwrap().push(name);
            Ok(Response {
                requeue_after: later.then_some(Duration::from_secs(3600)),
                ..Default::default()
            })
        },
    ))
}

async fn start(api: &Api, reconciler: Arc<dyn Reconciler>, config: &Config) -> Controller {
    Controller::start(
        api.clone(),
        Informers::new(api.clone()),
        reconciler,
        config.clone(),
    )
    .await
    .unwrap()
}

async fn until(calls: &Arc<Mutex<Vec<String>>>, n: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while calls.lock().unwrap().len() < n {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            calls.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until the controller owes nothing but delayed keys.
async fn only_delayed_owed(controller: &Controller) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let owed = controller.queue().owed_up_to(100).unwrap();
        if owed.iter().all(|(_, due)| due.is_some()) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{owed:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_resumes_from_its_checkpoint_with_what_changed_and_what_it_owed() {
    let dir = tempfile::tempdir().unwrap();
    let api = Api::open(Arc::new(MemoryBackend::new())).await.unwrap();
    let events = api.kinds().require("v1", "Event").unwrap();
    for i in 0..50 {
        api.create(&events, event(&format!("e{i}"))).await.unwrap();
    }
    let checkpoint = Checkpoint::at(dir.path().join("noting"));
    let config = Config {
        checkpoint: Some(checkpoint.clone()),
        ..Config::default()
    };
    let calls: Arc<Mutex<Vec<String>>> = Arc::default();

    let first = start(&api, noting(calls.clone()), &config).await;
    until(&calls, 50).await;
    // A reconcile is noted when it starts: wait until the last ones ended
    // (a key still in hand at the stop is owed, due now, by design).
    only_delayed_owed(&first).await;
    // A drained stop keeps the delayed key in its last checkpoint.
    first.shutdown_with_drain(Duration::from_secs(5)).await;
    let saved = checkpoint
        .load("noting@1", api.current_revision().await.unwrap())
        .unwrap()
        .expect("a checkpoint at stop");
    let in_an_hour = checkpoint::unix_ms(std::time::SystemTime::now()) + 3_500_000;
    assert!(
        matches!(&saved.owed[..], [(Some(ns), name, due)] if ns == "default" && name == "e7" && *due > in_an_hour),
        "{:?}",
        saved.owed
    );

    // While it is stopped: one changed, one deleted, one created.
    let mut changed = api.get(&events, Some("default"), "e3").await.unwrap();
    changed["message"] = json!("changed");
    api.update(&events, changed).await.unwrap();
    api.delete(&events, Some("default"), "e4", &Default::default())
        .await
        .unwrap();
    api.create(&events, event("e50")).await.unwrap();

    calls.lock().unwrap().clear();
    let second = start(&api, noting(calls.clone()), &config).await;
    until(&calls, 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut seen = calls.lock().unwrap().clone();
    seen.sort();
    assert_eq!(
        seen,
        ["e3", "e50"],
        "only what changed (e7 is due in an hour)"
    );
    second.shutdown().await;

    // Another version of the reconciler does not trust it: everything again.
    calls.lock().unwrap().clear();
    let other = Arc::new(from_fn(
        Manifest::new("noting", "2", KindRef::new("v1", "Event")),
        {
            let calls = calls.clone();
            move |request, _| {
                calls
                    .lock()
                    .unwrap()
                    .push(crate::object::meta::name(&request.object).to_owned());
                Ok(Response::default())
            }
        },
    ));
    let third = start(&api, other, &config).await;
    until(&calls, 50).await;
    third.shutdown().await;
}

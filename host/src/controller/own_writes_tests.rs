//! A reconcile reads its own writes: a key queued again right after a
//! reconcile wrote its status (a requeue with no delay, a paced turn, a
//! retry) is handed the object as that write left it, however far the
//! informer's watch lags behind the store.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use super::*;
use crate::object::KindRef;
use crate::store::{self, Backend, MemoryBackend};

/// The memory store, with every watch event held back `delay`: an
/// informer that lags its store as it does under load.
struct LaggingWatch {
    inner: MemoryBackend,
    delay: Duration,
}

#[async_trait::async_trait]
impl Backend for LaggingWatch {
    async fn get(&self, key: &str) -> store::Result<Option<store::KeyValue>> {
        self.inner.get(key).await
    }
    async fn range(&self, range: store::Range) -> store::Result<store::RangeResult> {
        self.inner.range(range).await
    }
    async fn put(
        &self,
        key: &str,
        value: Vec<u8>,
        condition: store::Condition,
    ) -> store::Result<store::KeyValue> {
        self.inner.put(key, value, condition).await
    }
    async fn delete(
        &self,
        key: &str,
        condition: store::Condition,
    ) -> store::Result<store::Deleted> {
        self.inner.delete(key, condition).await
    }
    async fn current_revision(&self) -> store::Result<store::Revision> {
        self.inner.current_revision().await
    }
    async fn compact(&self, revision: store::Revision) -> store::Result<()> {
        self.inner.compact(revision).await
    }
    async fn watch(&self, after: store::Revision) -> store::Result<store::WatchStream> {
        let mut events = self.inner.watch(after).await?;
        let (tx, rx) = tokio::sync::mpsc::channel(1024);
        let delay = self.delay;
        tokio::spawn(async move {
            while let Some(event) = events.recv().await {
                tokio::time::sleep(delay).await;
                if tx.send(event).await.is_err() {
                    return;
                }
            }
        });
        Ok(rx)
    }
}

/// Each call's object name and the phase it saw.
type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// Moves an Event's `status.phase` from none to `Pending` (asking to be
/// called again at once) to `Running`, noting the phase each call saw.
fn stepping(seen: Seen) -> Arc<dyn Reconciler> {
    Arc::new(from_fn(
        Manifest::new("stepping", "1", KindRef::new("v1", "Event")),
        move |request, _| {
            let name = crate::object::meta::name(&request.object).to_owned();
            let phase = request.object["status"]["phase"]
                .as_str()
                .map(str::to_owned);
            seen.lock().unwrap().push((name, phase.clone()));
            Ok(match phase.as_deref() {
                None => Response {
                    status: Some(json!({"phase": "Pending"})),
                    requeue_after: Some(Duration::ZERO),
                    ..Default::default()
                },
                Some("Pending") => Response {
                    status: Some(json!({"phase": "Running"})),
                    ..Default::default()
                },
                Some(_) => Response::default(),
            })
        },
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_queued_again_after_its_write_is_handed_the_object_as_written() {
    const N: usize = 20;
    let backend = LaggingWatch {
        inner: MemoryBackend::new(),
        delay: Duration::from_millis(30),
    };
    let api = Api::open(Arc::new(backend)).await.unwrap();
    let events = api.kinds().require("v1", "Event").unwrap();
    let seen: Seen = Arc::default();
    let controller = Controller::start(
        api.clone(),
        Informers::new(api.clone()),
        stepping(seen.clone()),
        Config::default(),
    )
    .await
    .unwrap();
    for i in 0..N {
        let event = json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": format!("e{i}"), "namespace": "default"}});
        api.create(&events, event).await.unwrap();
    }

    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut running = 0;
        for i in 0..N {
            let event = api
                .get(&events, Some("default"), &format!("e{i}"))
                .await
                .unwrap();
            running += usize::from(event["status"]["phase"] == "Running");
        }
        if running == N {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{:?}", seen.lock());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Past the lag: any call still to come would have come.
    tokio::time::sleep(Duration::from_millis(300)).await;
    controller.shutdown().await;

    let seen = seen.lock().unwrap().clone();
    for i in 0..N {
        let name = format!("e{i}");
        let phases: Vec<_> = seen
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, phase)| phase.as_deref())
            .collect();
        assert_eq!(
            phases,
            [None, Some("Pending")],
            "{name}: each call sees the object as the last one left it"
        );
    }
}

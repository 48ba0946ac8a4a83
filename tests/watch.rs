//! Watches: the HTTP watch stream (initial events, changes, bookmarks, 410
//! for a too-old revision) and the hub's protection against slow watchers.

use std::time::Duration;

use serde_json::{Value, json};
use setpoint::watch;

use crate::support::TestHost;

/// A Flaky object in mode "ok": its plugin never writes, so every change in
/// these tests is the test's own.
fn flaky(name: &str) -> Value {
    json!({"apiVersion": "test.setpoint.dev/v1", "kind": "Flaky",
           "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
           "spec": {"mode": "ok"}})
}

/// Reads newline-delimited JSON events from a streaming response.
struct EventStream {
    response: reqwest::Response,
    buffer: Vec<u8>,
}

impl EventStream {
    async fn open(url: &str) -> Self {
        let response = reqwest::get(url).await.unwrap();
        assert_eq!(response.status(), 200);
        Self {
            response,
            buffer: Vec::new(),
        }
    }

    async fn next(&mut self) -> Value {
        loop {
            if let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                return serde_json::from_slice(&line).unwrap();
            }
            let chunk = tokio::time::timeout(Duration::from_secs(30), self.response.chunk())
                .await
                .expect("an event within 30 s")
                .unwrap()
                .expect("the stream is still open");
            self.buffer.extend_from_slice(&chunk);
        }
    }
}

fn summary(event: &Value) -> (String, String) {
    (
        event["type"].as_str().unwrap().to_owned(),
        event["object"]["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_owned(),
    )
}

fn pair(kind: &str, name: &str) -> (String, String) {
    (kind.to_owned(), name.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_without_a_version_lists_then_follows_every_change() {
    let host = TestHost::start(&["flaky"]).await;
    let api = host.host.api();
    let kind = api
        .kinds()
        .require("test.setpoint.dev/v1", "Flaky")
        .unwrap();
    api.create(&kind, flaky("a")).await.unwrap();
    api.create(&kind, flaky("b")).await.unwrap();
    let url = format!(
        "{}/apis/test.setpoint.dev/v1/namespaces/default/flakies?watch=true",
        host.url
    );
    let mut stream = EventStream::open(&url).await;
    let mut initial = vec![summary(&stream.next().await), summary(&stream.next().await)];
    initial.sort();
    assert_eq!(initial, [pair("ADDED", "a"), pair("ADDED", "b")]);

    api.merge_patch(
        &kind,
        Some("default"),
        "a",
        &json!({"spec": {"mode": "still ok"}}),
        false,
    )
    .await
    .unwrap();
    api.create(&kind, flaky("c")).await.unwrap();
    api.delete(&kind, Some("default"), "b", &Default::default())
        .await
        .unwrap();
    let modified = stream.next().await;
    assert_eq!(summary(&modified), pair("MODIFIED", "a"));
    assert_eq!(modified["object"]["spec"]["mode"], "still ok");
    assert_eq!(summary(&stream.next().await), pair("ADDED", "c"));
    assert_eq!(summary(&stream.next().await), pair("DELETED", "b"));
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_from_a_version_resumes_exactly_after_it_with_selectors_applied() {
    let host = TestHost::start(&["flaky"]).await;
    let api = host.host.api();
    let kind = api
        .kinds()
        .require("test.setpoint.dev/v1", "Flaky")
        .unwrap();
    let a = api.create(&kind, flaky("a")).await.unwrap();
    api.create(&kind, flaky("b")).await.unwrap();
    api.create(&kind, flaky("c")).await.unwrap();
    let rv = a["metadata"]["resourceVersion"].as_str().unwrap();
    let url = format!(
        "{}/apis/test.setpoint.dev/v1/namespaces/default/flakies?watch=1&resourceVersion={rv}&labelSelector=app!%3Db",
        host.url
    );
    let mut stream = EventStream::open(&url).await;
    assert_eq!(
        summary(&stream.next().await),
        pair("ADDED", "c"),
        "a is before the version, b is filtered out"
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_from_a_version_older_than_the_cache_answers_410_expired() {
    let host = TestHost::start(&["flaky"]).await;
    let api = host.host.api();
    let kind = api
        .kinds()
        .require("test.setpoint.dev/v1", "Flaky")
        .unwrap();
    let first = api.create(&kind, flaky("a")).await.unwrap();
    // Push the first revision out of the bounded watch history.
    for i in 0..api.hub().max_lag() + 10 {
        api.merge_patch(
            &kind,
            Some("default"),
            "a",
            &json!({"spec": {"n": i}}),
            false,
        )
        .await
        .unwrap();
    }
    // The hub follows the store asynchronously: wait until it has seen the
    // last write, so that its history no longer reaches the first one.
    api.hub()
        .wait_for(api.current_revision().await.unwrap())
        .await;
    let rv = first["metadata"]["resourceVersion"].as_str().unwrap();
    let url = format!(
        "{}/apis/test.setpoint.dev/v1/namespaces/default/flakies?watch=true&resourceVersion={rv}",
        host.url
    );
    let mut stream = EventStream::open(&url).await;
    let event = stream.next().await;
    assert_eq!(event["type"], "ERROR");
    assert_eq!(event["object"]["code"], 410);
    assert_eq!(event["object"]["reason"], "Expired");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initial_events_end_with_a_bookmark_and_quiet_streams_get_bookmarks() {
    let host = TestHost::start(&["flaky"]).await;
    let api = host.host.api();
    let kind = api
        .kinds()
        .require("test.setpoint.dev/v1", "Flaky")
        .unwrap();
    api.create(&kind, flaky("a")).await.unwrap();
    let url = format!(
        "{}/apis/test.setpoint.dev/v1/namespaces/default/flakies?watch=true&sendInitialEvents=true&allowWatchBookmarks=true",
        host.url
    );
    let mut stream = EventStream::open(&url).await;
    assert_eq!(summary(&stream.next().await), pair("ADDED", "a"));
    let end = stream.next().await;
    assert_eq!(end["type"], "BOOKMARK");
    assert_eq!(
        end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    // A write to another kind moves the store on; the quiet stream's next
    // bookmark carries the revision forward past it.
    let events = api.kinds().by_plural("", "events").unwrap();
    let other = api
        .create(&events, json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e", "namespace": "default"}}))
        .await
        .unwrap();
    let bookmark = stream.next().await;
    assert_eq!(bookmark["type"], "BOOKMARK");
    let other_rv: i64 = other["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let carried: i64 = bookmark["object"]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        carried >= other_rv,
        "bookmark {carried} should reach {other_rv}"
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_watcher_is_cut_off_while_writers_keep_going() {
    let host = TestHost::start(&["flaky"]).await;
    let api = host.host.api();
    let kind = api
        .kinds()
        .require("test.setpoint.dev/v1", "Flaky")
        .unwrap();
    api.create(&kind, flaky("a")).await.unwrap();
    let start = api.current_revision().await.unwrap();
    let mut slow = api.hub().subscribe("/registry/", start).unwrap();
    // The slow watcher reads nothing while writers go far past its buffer.
    let writes = api.hub().max_lag() + 100;
    for i in 0..writes {
        api.merge_patch(
            &kind,
            Some("default"),
            "a",
            &json!({"spec": {"n": i}}),
            false,
        )
        .await
        .unwrap();
    }
    let last = api.current_revision().await.unwrap();
    assert_eq!(
        last,
        start + writes as i64,
        "every write completed without waiting for the watcher"
    );
    api.hub().wait_for(last).await;
    let err = loop {
        let next = tokio::time::timeout(Duration::from_secs(30), slow.next()).await;
        match next.expect("the slow watcher must be cut off, not left waiting") {
            Ok(_) => continue,
            Err(err) => break err,
        }
    };
    assert!(
        matches!(err, watch::Error::TooOldResourceVersion { .. }),
        "{err:?}"
    );
    // A fresh watcher from the current revision works.
    let mut fresh = api.hub().subscribe("/registry/", last).unwrap();
    api.merge_patch(
        &kind,
        Some("default"),
        "a",
        &json!({"spec": {"n": -1}}),
        false,
    )
    .await
    .unwrap();
    assert_eq!(fresh.next().await.unwrap().revision, last + 1);
    host.stop().await;
}

//! Durability of the embedded store through the real binary: writers are
//! acknowledged, the host is killed with SIGKILL at a random moment and
//! restarted on the same data directory; every acknowledged write must be
//! there, revisions only go forward, and watches resume. Also: a damaged
//! data directory is refused with a clear error and left untouched.

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{ServeProcess, setpoint_bin};

/// A `setpoint serve` on a data directory.
struct Server;

impl Server {
    fn start(data: &Path, plugins: &Path) -> ServeProcess {
        ServeProcess::start([
            std::ffi::OsStr::new("--data"),
            data.as_os_str(),
            "--plugins".as_ref(),
            plugins.as_os_str(),
        ])
    }
}

pub(crate) const CRD: &str = r#"{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
  "metadata": {"name": "notes.test.setpoint.dev"},
  "spec": {"group": "test.setpoint.dev", "scope": "Namespaced",
    "names": {"kind": "Note", "plural": "notes", "singular": "note"},
    "versions": [{"name": "v1", "served": true, "storage": true,
      "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}}"#;

pub(crate) const NOTES: &str = "/apis/test.setpoint.dev/v1/namespaces/default/notes";

/// An acknowledged write: the name and the resource version it was given.
type Acked = Arc<Mutex<Vec<(String, i64)>>>;

async fn list(url: &str) -> Value {
    reqwest::get(format!("{url}{NOTES}"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_kill_9_and_revisions_only_go_forward() {
    let data = tempfile::tempdir().unwrap();
    let plugins = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let acked: Acked = Arc::default();
    let mut highest_seen = 0i64;

    for round in 0..4 {
        let server = Server::start(data.path(), plugins.path());
        if round == 0 {
            let crd: Value = serde_json::from_str(CRD).unwrap();
            let response = http
                .post(format!(
                    "{}/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                    server.url
                ))
                .json(&crd)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 201);
        }

        // Everything acknowledged before is there, and nothing went backwards.
        let listed = list(&server.url).await;
        let revision: i64 = listed["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            revision >= highest_seen,
            "round {round}: revision went back from {highest_seen} to {revision}"
        );
        let present: std::collections::HashSet<&str> = listed["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap())
            .collect();
        let missing: Vec<String> = acked
            .lock()
            .unwrap()
            .iter()
            .filter(|(name, _)| !present.contains(name.as_str()))
            .map(|(name, _)| name.clone())
            .collect();
        assert!(
            missing.is_empty(),
            "round {round}: acknowledged writes lost: {missing:?}"
        );

        // A watch resumes from the last acknowledged version: no 410.
        let last_acked = acked.lock().unwrap().iter().map(|(_, rv)| *rv).max();
        if let Some(last) = last_acked {
            let mut response = http
                .get(format!(
                    "{}{NOTES}?watch=true&resourceVersion={last}&timeoutSeconds=1",
                    server.url
                ))
                .send()
                .await
                .unwrap();
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await.unwrap() {
                body.extend_from_slice(&chunk);
            }
            assert!(
                !String::from_utf8_lossy(&body).contains("\"ERROR\""),
                "round {round}: watch did not resume"
            );
        }

        // Writers until the kill.
        let mut writers = Vec::new();
        for w in 0..16 {
            let (http, url, acked) = (http.clone(), server.url.clone(), acked.clone());
            writers.push(tokio::spawn(async move {
                for i in 0.. {
                    let name = format!("r{round}-w{w}-n{i}");
                    let note = json!({"apiVersion": "test.setpoint.dev/v1", "kind": "Note",
                        "metadata": {"name": name}, "spec": {"text": "x".repeat(512)}});
                    let Ok(response) = http.post(format!("{url}{NOTES}")).json(&note).send().await
                    else {
                        return;
                    };
                    if response.status() != 201 {
                        return;
                    }
                    let Ok(created) = response.json::<Value>().await else {
                        return;
                    };
                    let rv = created["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap()
                        .parse()
                        .unwrap();
                    acked.lock().unwrap().push((name, rv));
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(200 + fastrand::u64(0..800))).await;
        let before_kill = acked.lock().unwrap().len();
        server.kill9();
        for writer in writers {
            writer.await.unwrap();
        }
        highest_seen = highest_seen.max(
            acked
                .lock()
                .unwrap()
                .iter()
                .map(|(_, rv)| *rv)
                .max()
                .unwrap_or(0),
        );
        assert!(
            acked.lock().unwrap().len() > before_kill.min(1),
            "round {round}: the writers made progress"
        );
    }

    // One more start: the last round's writes are there too, and new writes
    // get higher revisions than any acknowledged one.
    let server = Server::start(data.path(), plugins.path());
    let listed = list(&server.url).await;
    let names: std::collections::HashSet<String> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    for (name, _) in acked.lock().unwrap().iter() {
        assert!(names.contains(name), "acknowledged write {name} lost");
    }
    let note = json!({"apiVersion": "test.setpoint.dev/v1", "kind": "Note", "metadata": {"name": "after"}, "spec": {}});
    let created: Value = http
        .post(format!("{}{NOTES}", server.url))
        .json(&note)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let rv: i64 = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        rv > highest_seen,
        "new revision {rv} must be above every acknowledged one ({highest_seen})"
    );
}

/// Run `setpoint serve` on a damaged data directory: it must exit with a
/// clear error and leave the file as it was.
fn refuses_damaged(data: &Path, what: &str) {
    let file = data.join("store.redb");
    let before = std::fs::read(&file).unwrap();
    let plugins = tempfile::tempdir().unwrap();
    let out = Command::new(setpoint_bin())
        .args(["serve", "--addr", "127.0.0.1:0", "--data"])
        .arg(data)
        .arg("--plugins")
        .arg(plugins.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "{what}: a damaged store was accepted: {stderr}"
    );
    assert!(
        stderr.contains("corrupt"),
        "{what}: the error should say the store is corrupt: {stderr}"
    );
    assert!(
        stderr.contains("store.redb"),
        "{what}: the error should name the file: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{what}: {stderr}");
    assert_eq!(
        std::fs::read(&file).unwrap(),
        before,
        "{what}: the damaged file was modified"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_data_directory_is_refused_with_a_clear_error_and_left_untouched() {
    let data = tempfile::tempdir().unwrap();
    let plugins = tempfile::tempdir().unwrap();
    {
        let server = Server::start(data.path(), plugins.path());
        let crd: Value = serde_json::from_str(CRD).unwrap();
        let response = reqwest::Client::new()
            .post(format!(
                "{}/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                server.url
            ))
            .json(&crd)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201);
        drop(server);
    }
    let file = data.path().join("store.redb");
    let good = std::fs::read(&file).unwrap();

    let mut garbage = good.clone();
    let middle = garbage.len() / 2;
    for (i, byte) in garbage[..middle].iter_mut().enumerate() {
        *byte = (i as u8).wrapping_mul(97).wrapping_add(13);
    }
    std::fs::write(&file, &garbage).unwrap();
    refuses_damaged(data.path(), "overwritten with garbage");

    std::fs::write(&file, &good[..good.len() / 3]).unwrap();
    refuses_damaged(data.path(), "truncated");

    std::fs::write(&file, b"").unwrap();
    refuses_damaged(data.path(), "emptied");
}

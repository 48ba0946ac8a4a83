//! Hostile HTTP clients through the real binary (issue #34): what one
//! client can make the host hold or keep from others is bounded. The
//! memory figures are measured by `scripts/bench clients`; these tests
//! check the behaviour that bounds them.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::crash::NOTES;
use crate::durability::{create_crd, note, serve};

/// Create a note of `text_len` bytes, which must be acknowledged.
async fn create_note(http: &reqwest::Client, url: &str, name: &str, text_len: usize) {
    let response = http
        .post(format!("{url}{NOTES}"))
        .json(&note(name, text_len))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201, "creating {name}");
}

/// The server's address (`host:port`) from its URL.
fn addr(url: &str) -> &str {
    url.trim_start_matches("http://")
}

/// One number from the server's `/metrics`, which must be there.
async fn metric(url: &str, name: &str) -> f64 {
    crate::support::metric(url, name)
        .await
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
}

/// Reads whatever `socket` holds until the server closes it; how many
/// bytes came, or `None` if it stayed open for `wait`.
async fn read_to_close(socket: &mut TcpStream, wait: Duration) -> Option<usize> {
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0;
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(deadline, socket.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0) | Err(_)) => return Some(total),
            Ok(Ok(n)) => total += n,
        }
    }
}

/// A watcher that stops reading is closed once it is a bounded number of
/// bytes of changes behind, not kept (with everything it has not read)
/// until thousands of changes later; one that reads keeps its stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_that_stops_reading_is_closed_a_bounded_number_of_bytes_behind() {
    let data = tempfile::tempdir().unwrap();
    let server = serve(data.path());
    create_crd(&server.url).await;
    // A raw watch whose client never reads, on a small receive buffer so
    // that the server's side fills after a few objects.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stalled = socket
        .connect(addr(&server.url).parse().unwrap())
        .await
        .unwrap();
    stalled
        .write_all(format!("GET {NOTES}?watch=true HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    // A watcher that reads everything.
    let mut reading = reqwest::get(format!("{}{NOTES}?watch=true", server.url))
        .await
        .unwrap();
    assert_eq!(reading.status(), 200);
    let (seen_tx, seen) = tokio::sync::watch::channel(0usize);
    let reader = tokio::spawn(async move {
        let mut lines = 0usize;
        while let Ok(Some(chunk)) = reading.chunk().await {
            lines += chunk.iter().filter(|b| **b == b'\n').count();
            let _ = seen_tx.send(lines);
            if lines == 40 {
                break;
            }
        }
        lines
    });
    // 40 notes of 1 MB: 40 MB of changes, far past the bound (16 MiB) but
    // far below the watch cache's 8,192 changes, which was the only bound.
    let http = reqwest::Client::new();
    for i in 0..40 {
        create_note(&http, &server.url, &format!("fat-{i:02}"), 1_000_000).await;
    }
    crate::support::eventually(
        "the watch of the client that stopped reading is closed",
        Duration::from_secs(30),
        || async {
            match metric(&server.url, "setpoint_watches_closed_slow_total").await {
                n if n >= 1.0 => Ok(()),
                n => Err(format!("{n} closed")),
            }
        },
    )
    .await;
    // What it is sent ends there: the kernel's buffers, then the close.
    let read = read_to_close(&mut stalled, Duration::from_secs(30))
        .await
        .expect("the server closed the stream of the client that stopped reading");
    assert!(
        read < 20_000_000,
        "it is closed before everything was sent ({read} bytes came)"
    );
    let seen = tokio::time::timeout(Duration::from_secs(30), reader)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the reading watcher got {} of 40 changes in 30 s",
                *seen.borrow()
            )
        })
        .unwrap();
    assert_eq!(seen, 40, "the reading watcher is not closed");
}

/// Connections that stall in their request hold no slot of the in-flight
/// bound: 400 of them (the default bound) stalled in their bodies leave
/// every other request served; the server gives up on a stalled body with
/// a 408 and on stalled headers by closing the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_requests_keep_no_one_out_and_are_given_up_on() {
    let data = tempfile::tempdir().unwrap();
    let server = serve(data.path());
    create_crd(&server.url).await;
    let http = reqwest::Client::new();
    create_note(&http, &server.url, "target", 10).await;
    let mut bodies = Vec::new();
    for i in 0..400 {
        let mut socket = TcpStream::connect(addr(&server.url)).await.unwrap();
        let head = format!(
            "PUT {NOTES}/stall-{i} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{"
        );
        socket.write_all(head.as_bytes()).await.unwrap();
        bodies.push(socket);
    }
    let mut headers = TcpStream::connect(addr(&server.url)).await.unwrap();
    headers
        .write_all(format!("GET {NOTES} HTTP/1.1\r\nHost: x\r\n").as_bytes())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    for _ in 0..50 {
        let response = http
            .get(format!("{}{NOTES}/target", server.url))
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            200,
            "others are served while 400 bodies stall"
        );
    }
    // Stalled headers: closed (hyper's header read timeout), no answer.
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(90), headers.read_to_end(&mut answer))
        .await
        .expect("a connection stalled in its headers is closed");
    assert!(
        read.is_ok() && answer.is_empty(),
        "closed without an answer"
    );
    // A stalled body: 408, and the connection closed.
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(90), bodies[0].read_to_end(&mut answer))
        .await
        .expect("a connection stalled in its body is answered and closed");
    assert!(read.is_ok());
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.1 408"),
        "a stalled body gets 408: {answer}"
    );
    assert!(answer.contains("did not arrive within 60 s"), "{answer}");
}

/// A client inventing a new `fieldManager` for every apply makes neither
/// the object nor the work of each request grow without end: past the
/// bound the apply is refused with a 422 naming it, and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applies_by_ever_new_managers_stop_at_the_bound() {
    let data = tempfile::tempdir().unwrap();
    let server = serve(data.path());
    create_crd(&server.url).await;
    let http = reqwest::Client::new();
    let bound = setpoint::api::MAX_FIELD_MANAGERS;
    let mut refused = Vec::new();
    for i in 0..bound + 20 {
        let body = serde_json::json!({"apiVersion": "test.setpoint.dev/v1", "kind": "Note",
            "metadata": {"name": "managed", "namespace": "default",
                "labels": {format!("by-{i}"): "x"}},
            "spec": {"text": format!("from {i}")}});
        let response = http
            .patch(format!("{}{NOTES}/managed", server.url))
            .query(&[
                ("fieldManager", format!("manager-{i}").as_str()),
                ("force", "true"),
            ])
            .header("content-type", "application/apply-patch+yaml")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        match response.status().as_u16() {
            200 | 201 => assert!(i < bound, "apply {i} is past the bound"),
            422 => refused.push(response.json::<serde_json::Value>().await.unwrap()),
            other => panic!("apply {i}: {other}"),
        }
    }
    assert_eq!(refused.len(), 20);
    assert!(
        refused[0]["message"]
            .as_str()
            .unwrap()
            .contains("must have at most 100 field managers"),
        "{}",
        refused[0]
    );
    let object: serde_json::Value = http
        .get(format!("{}{NOTES}/managed", server.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        object["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .len(),
        bound
    );
    assert_eq!(object["spec"]["text"], format!("from {}", bound - 1));
}

/// A LIST is streamed a page at a time (what it holds is a page, not the
/// whole list), and still one snapshot: writes while a slow client reads
/// it show in none of its pages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_list_is_one_snapshot_while_writes_go_on() {
    let data = tempfile::tempdir().unwrap();
    let server = serve(data.path());
    create_crd(&server.url).await;
    let http = reqwest::Client::new();
    for i in 0..200 {
        create_note(&http, &server.url, &format!("n-{i:03}"), 20_000).await;
    }
    let mut list = http
        .get(format!("{}{NOTES}", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(list.status(), 200);
    let mut text = list.chunk().await.unwrap().unwrap().to_vec();
    assert!(
        text.len() < 4_000_000,
        "the first chunk is a page, not the list"
    );
    // Meanwhile: every note changed, and more created.
    for i in 0..200 {
        let patched = http
            .patch(format!("{}{NOTES}/n-{i:03}", server.url))
            .header("content-type", "application/merge-patch+json")
            .body(r#"{"spec": {"text": "changed"}}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(patched.status(), 200);
    }
    for i in 0..20 {
        create_note(&http, &server.url, &format!("late-{i}"), 10).await;
    }
    while let Some(chunk) = list.chunk().await.unwrap() {
        text.extend_from_slice(&chunk);
    }
    let list: serde_json::Value = serde_json::from_slice(&text).unwrap();
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 200, "none of the notes created later");
    let revision: i64 = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    for item in items {
        assert_eq!(
            item["spec"]["text"].as_str().unwrap().len(),
            20_000,
            "as listed, not changed"
        );
        let rv: i64 = item["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(rv <= revision);
    }
}

/// A table of a whole collection (no `limit`: a client that does not page,
/// unlike kubectl) is written a page of rows at a time, all from one
/// snapshot: rows for the objects as listed, none for those created while
/// it is read, and the first chunk is a page, not the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_of_a_whole_collection_is_written_a_page_at_a_time_from_one_snapshot() {
    let data = tempfile::tempdir().unwrap();
    let server = serve(data.path());
    create_crd(&server.url).await;
    let http = reqwest::Client::new();
    for i in 0..1_200 {
        create_note(&http, &server.url, &format!("n-{i:04}"), 2_000).await;
    }
    let as_table = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
    let mut table = http
        .get(format!("{}{NOTES}?includeObject=Object", server.url))
        .header("accept", as_table)
        .send()
        .await
        .unwrap();
    assert_eq!(table.status(), 200);
    let mut text = table.chunk().await.unwrap().unwrap().to_vec();
    assert!(
        text.len() < 1_500_000,
        "the first chunk is a page of rows, not the table ({} bytes)",
        text.len()
    );
    for i in 0..20 {
        create_note(&http, &server.url, &format!("late-{i}"), 10).await;
    }
    while let Some(chunk) = table.chunk().await.unwrap() {
        text.extend_from_slice(&chunk);
    }
    let table: serde_json::Value = serde_json::from_slice(&text).unwrap();
    assert_eq!(table["kind"], "Table");
    let rows = table["rows"].as_array().unwrap();
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["cells"][0].as_str().unwrap())
        .collect();
    let expected: Vec<String> = (0..1_200).map(|i| format!("n-{i:04}")).collect();
    assert_eq!(
        names, expected,
        "every note as listed, in order, none later"
    );
    let revision: i64 = table["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(table["metadata"]["continue"].is_null());
    for row in rows {
        let rv: i64 = row["object"]["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(rv <= revision);
    }
    // With a limit, a page as before, with its continue token.
    let page: serde_json::Value = http
        .get(format!("{}{NOTES}?limit=500", server.url))
        .header("accept", as_table)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(page["rows"].as_array().unwrap().len(), 500);
    assert!(page["metadata"]["continue"].is_string());
}

/// `resourceVersionMatch` is honoured, not ignored: `Exact` lists the
/// objects as they were at that revision; the combinations Kubernetes
/// forbids are refused with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_honours_resource_version_match() {
    let data = tempfile::tempdir().unwrap();
    let server = serve(data.path());
    create_crd(&server.url).await;
    let http = reqwest::Client::new();
    let post = |name: &str| {
        http.post(format!("{}{NOTES}", server.url))
            .json(&note(name, 10))
            .send()
    };
    assert_eq!(post("first").await.unwrap().status(), 201);
    let listed: serde_json::Value = http
        .get(format!("{}{NOTES}", server.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let then = listed["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(post("second").await.unwrap().status(), 201);
    let list = |query: Vec<(&'static str, String)>| {
        http.get(format!("{}{NOTES}", server.url))
            .query(&query)
            .send()
    };
    let names = |list: &serde_json::Value| -> Vec<String> {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let exact: serde_json::Value = list(vec![
        ("resourceVersion", then.clone()),
        ("resourceVersionMatch", "Exact".into()),
    ])
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(names(&exact), ["first"], "as it was at {then}");
    assert_eq!(exact["metadata"]["resourceVersion"], then.as_str());
    let newer: serde_json::Value = list(vec![
        ("resourceVersion", then.clone()),
        ("resourceVersionMatch", "NotOlderThan".into()),
    ])
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(names(&newer), ["first", "second"]);
    for (query, said) in [
        (
            vec![("resourceVersionMatch", "Exact".to_owned())],
            "forbidden unless resourceVersion is provided",
        ),
        (
            vec![
                ("resourceVersion", "0".to_owned()),
                ("resourceVersionMatch", "Exact".to_owned()),
            ],
            "forbidden for resourceVersion \"0\"",
        ),
        (
            vec![
                ("resourceVersion", then.clone()),
                ("resourceVersionMatch", "Newest".to_owned()),
            ],
            "Unsupported value: \"Newest\"",
        ),
    ] {
        let refused = list(query.clone()).await.unwrap();
        assert_eq!(refused.status(), 422, "{query:?}");
        let status: serde_json::Value = refused.json().await.unwrap();
        let message = status["message"].as_str().unwrap();
        assert!(message.contains(said), "{query:?}: {message}");
    }
}

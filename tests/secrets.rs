//! Core Secrets over HTTP: who may read them (a token's rules decide, and
//! a token without `secrets` gets 403 on get, list and watch while it reads
//! other kinds), and values that never reach the host's logs.

use std::sync::Arc;

use serde_json::{Value, json};
use setpoint_server::Config;
use setpoint_server::auth::{Rule, Tokens, User};

use crate::support::{TestHost, logs};

const ADMIN: &str = "admin-token-0123456789";
const READER: &str = "reader-token-0123456789";

/// An admin, and a reader that may read Events and Pods but not Secrets.
fn tokens() -> Arc<Tokens> {
    let rule = |verbs: &[&str], groups: &[&str], resources: &[&str]| Rule {
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        api_groups: groups.iter().map(|v| v.to_string()).collect(),
        resources: resources.iter().map(|v| v.to_string()).collect(),
        ..Rule::default()
    };
    Arc::new(Tokens {
        users: vec![
            User {
                name: "admin".into(),
                token: ADMIN.into(),
                rules: vec![rule(&["*"], &["*"], &["*"])],
            },
            User {
                name: "reader".into(),
                token: READER.into(),
                rules: vec![
                    rule(&["get", "list", "watch"], &[""], &["events"]),
                    rule(&["get", "list", "watch"], &["demo.setpoint.dev"], &["pods"]),
                ],
            },
        ],
    })
}

fn secrets_url(host: &TestHost) -> String {
    format!("{}/api/v1/namespaces/default/secrets", host.url)
}

fn secret(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
           "stringData": {"apiKey": value}})
}

#[tokio::test(flavor = "multi_thread")]
async fn a_token_without_rights_on_secrets_gets_403_on_get_list_and_watch_but_reads_other_kinds() {
    let host = TestHost::start_with(
        &["podsim"],
        Config {
            tokens: Some(tokens()),
            ..Config::default()
        },
    )
    .await;
    let http = reqwest::Client::new();
    let created = http
        .post(secrets_url(&host))
        .bearer_auth(ADMIN)
        .json(&secret("creds", "s3cr3t-value"))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);

    for (verb, url) in [
        ("get", format!("{}/creds", secrets_url(&host))),
        ("list", secrets_url(&host)),
        ("watch", format!("{}?watch=true", secrets_url(&host))),
        ("list", format!("{}/api/v1/secrets", host.url)),
    ] {
        let response = http.get(&url).bearer_auth(READER).send().await.unwrap();
        assert_eq!(response.status(), 403, "{verb} {url}");
        let body = response.text().await.unwrap();
        assert!(
            body.contains(&format!(r#"cannot {verb} resource \"secrets\""#)),
            "{verb} {url}: {body}"
        );
        assert!(!body.contains("s3cr3t"), "{body}");
    }

    for url in [
        format!("{}/api/v1/namespaces/default/events", host.url),
        format!(
            "{}/apis/demo.setpoint.dev/v1/namespaces/default/pods",
            host.url
        ),
    ] {
        let response = http.get(&url).bearer_auth(READER).send().await.unwrap();
        assert_eq!(response.status(), 200, "{url}");
    }
    let read = http
        .get(format!("{}/creds", secrets_url(&host)))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 200);
    let read: Value = read.json().await.unwrap();
    assert_eq!(read["data"]["apiKey"], "czNjcjN0LXZhbHVl");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn secret_values_written_read_or_refused_appear_in_no_log_line() {
    logs::capture();
    // Unique to this test, so lines other tests log cannot match.
    let value = format!("v4lue-{}", fastrand::u64(..));
    let host = TestHost::start(&[]).await;
    let http = reqwest::Client::new();
    let url = secrets_url(&host);
    let created = http
        .post(&url)
        .json(&secret("creds", &value))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let stored: Value = created.json().await.unwrap();
    let encoded = stored["data"]["apiKey"].as_str().unwrap().to_owned();

    let refusals = [
        // Not base64: refused naming the key.
        http.patch(format!("{url}/creds"))
            .header("content-type", "application/merge-patch+json")
            .body(json!({"data": {"other": value}}).to_string()),
        // A failed test would echo what it found.
        http.patch(format!("{url}/creds"))
            .header("content-type", "application/json-patch+json")
            .body(json!([{"op": "test", "path": "/data/apiKey", "value": value}]).to_string()),
        // Already exists.
        http.post(&url).json(&secret("creds", &value)),
    ];
    for request in refusals {
        let response = request.send().await.unwrap();
        assert!(response.status().is_client_error(), "{response:?}");
        let body = response.text().await.unwrap();
        assert!(
            !body.contains(&value) && !body.contains(&encoded),
            "a refusal echoed the value: {body}"
        );
    }
    let listed = http.get(&url).send().await.unwrap();
    assert_eq!(listed.status(), 200);
    host.stop().await;

    assert_eq!(logs::lines_with(&[&value]), Vec::<String>::new());
    assert_eq!(logs::lines_with(&[&encoded]), Vec::<String>::new());
}

//! `/metrics` in Prometheus' text format: workqueue, reconcile, request and
//! watch series, store latencies, watchers, and per-plugin reconciles and
//! guest faults.

use std::time::Duration;

use serde_json::json;

use crate::support::{TestHost, eventually, plugins_dir, pod, pods};

/// The value of the sample `name{labels}` in a Prometheus text page.
fn sample(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_report_workqueue_reconcile_request_and_watch_series() {
    let host = TestHost::start(&["podsim"]).await;
    let http = reqwest::Client::new();
    let created = http
        .post(pods(&host, "default"))
        .json(&pod("m1"))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let watch = http
        .get(format!("{}?watch=true", pods(&host, "default")))
        .send()
        .await
        .unwrap();
    let page = eventually("podsim reconciled m1", Duration::from_secs(20), || async {
        let page = reqwest::get(format!("{}/metrics", host.url))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        match sample(
            &page,
            r#"controller_runtime_reconcile_total{controller="podsim",result="success"}"#,
        ) {
            Some(n) if n >= 1.0 => Ok(page),
            _ => Err(page),
        }
    })
    .await;
    assert!(
        sample(&page, r#"workqueue_adds_total{name="podsim"}"#).unwrap() >= 1.0,
        "{page}"
    );
    assert!(
        sample(&page, r#"workqueue_depth{name="podsim"}"#).is_some(),
        "{page}"
    );
    assert!(
        sample(
            &page,
            r#"controller_runtime_reconcile_time_seconds_count{controller="podsim"}"#
        )
        .unwrap()
            >= 1.0,
        "{page}"
    );
    assert_eq!(
        sample(
            &page,
            r#"apiserver_request_total{verb="CREATE",resource="pods",code="201"}"#
        ),
        Some(1.0),
        "{page}"
    );
    assert_eq!(
        sample(&page, r#"apiserver_longrunning_requests{verb="WATCH"}"#),
        Some(1.0),
        "{page}"
    );
    drop(watch);
    eventually(
        "the closed watch is no longer counted",
        Duration::from_secs(10),
        || async {
            let page = reqwest::get(format!("{}/metrics", host.url))
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            match sample(&page, r#"apiserver_longrunning_requests{verb="WATCH"}"#) {
                Some(0.0) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    host.stop().await;
}

async fn scrape(host: &TestHost) -> String {
    reqwest::get(format!("{}/metrics", host.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_report_store_latencies_watchers_and_per_plugin_reconciles_and_faults() {
    let dir = plugins_dir(&["podsim", "zoo"]);
    std::fs::write(dir.path().join("zoo.toml"), "deadline_ms = 200\n").unwrap();
    let host = TestHost::start_in(dir, setpoint::runtime::RuntimeConfig::default()).await;
    let http = reqwest::Client::new();
    let zoos = format!(
        "{}/apis/test.setpoint.dev/v1/namespaces/default/zoos",
        host.url
    );
    for (name, fault) in [("spinner", "spin"), ("panicker", "panic"), ("calm", "none")] {
        let created = http
            .post(&zoos)
            .json(&json!({"apiVersion": "test.setpoint.dev/v1", "kind": "Zoo",
                          "metadata": {"name": name}, "spec": {"fault": fault}}))
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), 201);
    }
    let created = http
        .post(pods(&host, "default"))
        .json(&pod("p1"))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let watch = http
        .get(format!("{}?watch=true", pods(&host, "default")))
        .send()
        .await
        .unwrap();
    assert_eq!(watch.status(), 200);

    let faults = |page: &str, fault: &str| {
        sample(
            page,
            &format!(r#"setpoint_plugin_faults_total{{plugin="zoo",fault="{fault}"}}"#),
        )
        .unwrap_or(0.0)
    };
    let page = eventually(
        "zoo's timeout and trap are counted",
        Duration::from_secs(30),
        || async {
            let page = scrape(&host).await;
            if faults(&page, "timeout") >= 1.0 && faults(&page, "trap") >= 1.0 {
                Ok(page)
            } else {
                Err(page)
            }
        },
    )
    .await;
    assert_eq!(faults(&page, "memory"), 0.0, "{page}");
    assert_eq!(faults(&page, "fuel"), 0.0, "{page}");

    // Per plugin: calls (as `setpoint plugins` counts them), failures, and
    // the duration histogram of the Wasm calls.
    let series = |name: &str| sample(&page, name).unwrap_or_else(|| panic!("no {name} in\n{page}"));
    assert!(series(r#"setpoint_plugin_reconciles_total{plugin="zoo"}"#) >= 3.0);
    assert!(series(r#"setpoint_plugin_reconcile_errors_total{plugin="zoo"}"#) >= 2.0);
    let zoo_calls = series(r#"setpoint_plugin_reconcile_duration_seconds_count{plugin="zoo"}"#);
    assert!(zoo_calls >= 3.0, "{page}");
    assert_eq!(
        series(r#"setpoint_plugin_reconcile_duration_seconds_bucket{plugin="zoo",le="+Inf"}"#),
        zoo_calls
    );
    assert!(series(r#"setpoint_plugin_reconcile_duration_seconds_sum{plugin="zoo"}"#) > 0.0);
    let podsim = host.plugin("podsim").await.unwrap();
    assert!(podsim.reconciles >= 1);
    assert!(series(r#"setpoint_plugin_reconciles_total{plugin="podsim"}"#) >= 1.0);

    // The store: every operation timed; the writes above went through put.
    assert!(series(r#"setpoint_store_request_duration_seconds_count{operation="put"}"#) >= 5.0);
    assert!(series(r#"setpoint_store_request_duration_seconds_count{operation="get"}"#) >= 1.0);
    assert!(series(r#"setpoint_store_request_duration_seconds_count{operation="range"}"#) >= 1.0);
    assert!(series(r#"setpoint_store_request_duration_seconds_count{operation="watch"}"#) >= 1.0);
    assert_eq!(
        series(r#"setpoint_store_request_duration_seconds_bucket{operation="put",le="+Inf"}"#),
        series(r#"setpoint_store_request_duration_seconds_count{operation="put"}"#)
    );
    assert_eq!(
        series(r#"setpoint_store_request_errors_total{operation="put"}"#),
        0.0
    );

    // The open watch, by group and resource.
    assert_eq!(
        series(r#"setpoint_watchers{group="demo.setpoint.dev",resource="pods"}"#),
        1.0
    );
    drop(watch);
    eventually(
        "the closed watch is no longer counted",
        Duration::from_secs(10),
        || async {
            let page = scrape(&host).await;
            match sample(
                &page,
                r#"setpoint_watchers{group="demo.setpoint.dev",resource="pods"}"#,
            ) {
                Some(0.0) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    host.stop().await;
}

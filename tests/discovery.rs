//! Discovery as kubectl uses it: the aggregated `/api` and `/apis`
//! documents when asked for, the legacy lists otherwise.

use serde_json::{Value, json};

use crate::support::TestHost;

/// What kubectl ≥ 1.26 sends to `/api` and `/apis`.
const AGGREGATED_ACCEPT: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

async fn discovery(url: &str, accept: Option<&str>) -> (String, String, Value) {
    let mut request = reqwest::Client::new().get(url);
    if let Some(accept) = accept {
        request = request.header("Accept", accept);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200, "{url}");
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    let vary = response
        .headers()
        .get("vary")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (content_type, vary, response.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn aggregated_discovery_describes_every_group_in_one_answer_when_asked_for() {
    let host = TestHost::start(&["podsim"]).await;
    let (content_type, vary, list) =
        discovery(&format!("{}/apis", host.url), Some(AGGREGATED_ACCEPT)).await;
    assert_eq!(
        content_type,
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    assert_eq!(vary, "Accept");
    assert_eq!(list["kind"], "APIGroupDiscoveryList");
    assert_eq!(list["apiVersion"], "apidiscovery.k8s.io/v2");
    let group = |name: &str| {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no group {name} in {list}"))
            .clone()
    };
    let demo = group("demo.setpoint.dev");
    assert_eq!(demo["versions"][0]["version"], "v1");
    assert_eq!(demo["versions"][0]["freshness"], "Current");
    let pods = &demo["versions"][0]["resources"][0];
    assert_eq!(
        *pods,
        json!({
            "resource": "pods",
            "responseKind": {"group": "demo.setpoint.dev", "version": "v1", "kind": "Pod"},
            "scope": "Namespaced",
            "singularResource": "pod",
            "shortNames": ["po"],
            "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
            "subresources": [{
                "subresource": "status",
                "responseKind": {"group": "demo.setpoint.dev", "version": "v1", "kind": "Pod"},
                "verbs": ["get", "patch", "update"],
            }],
        })
    );
    let crds = &group("apiextensions.k8s.io")["versions"][0]["resources"][0];
    assert_eq!(crds["resource"], "customresourcedefinitions");
    assert_eq!(crds["scope"], "Cluster");
    assert_eq!(crds["shortNames"], json!(["crd", "crds"]));

    // The core group has no name; its v1 carries Events.
    let (_, _, core) = discovery(&format!("{}/api", host.url), Some(AGGREGATED_ACCEPT)).await;
    assert_eq!(core["kind"], "APIGroupDiscoveryList");
    assert_eq!(core["items"].as_array().unwrap().len(), 1, "{core}");
    assert!(core["items"][0]["metadata"].get("name").is_none(), "{core}");
    let events = &core["items"][0]["versions"][0]["resources"][0];
    assert_eq!(
        (
            &events["resource"],
            &events["scope"],
            &events["responseKind"]["kind"]
        ),
        (&json!("events"), &json!("Namespaced"), &json!("Event"))
    );

    // v2beta1 when only that is accepted.
    let (content_type, _, beta) = discovery(
        &format!("{}/apis", host.url),
        Some("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"),
    )
    .await;
    assert_eq!(
        content_type,
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
    );
    assert_eq!(beta["apiVersion"], "apidiscovery.k8s.io/v2beta1");
    assert_eq!(beta["items"], list["items"]);

    // Any other Accept header gets the legacy lists.
    for accept in [
        None,
        Some("application/json"),
        Some("application/json, */*"),
        Some(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;q=0,application/json",
        ),
        Some(
            "application/json;g=apidiscovery.k8s.io;v=v9;as=APIGroupDiscoveryList,application/json",
        ),
    ] {
        let (content_type, _, legacy) = discovery(&format!("{}/apis", host.url), accept).await;
        assert_eq!(content_type, "application/json", "{accept:?}");
        assert_eq!(legacy["kind"], "APIGroupList", "{accept:?}");
        let (_, _, versions) = discovery(&format!("{}/api", host.url), accept).await;
        assert_eq!(versions["kind"], "APIVersions", "{accept:?}");
    }
    host.stop().await;
}

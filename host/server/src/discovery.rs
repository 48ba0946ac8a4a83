//! Discovery: `/version`, `/api`, `/apis` and the resource list of each
//! group-version, in the shapes kubectl and client-go expect.
//!
//! `/api` and `/apis` answer in two forms, chosen by the `Accept` header:
//!
//! - the legacy `APIVersions` / `APIGroupList`, which make a client fetch
//!   `/api/v1` and every `/apis/{group}/{version}` next;
//! - the aggregated `APIGroupDiscoveryList` (`apidiscovery.k8s.io`, `v2` or
//!   `v2beta1`), which carries every group's resources in one answer.
//!   kubectl ≥ 1.26 asks for it first (`Accept:
//!   application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,…,application/json`),
//!   and client-go decides how to decode the body by the response's
//!   `Content-Type` alone, so that header names the form exactly.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::status::error_response;
use setpoint::Host;
use setpoint::object::KindInfo;

pub(super) async fn version() -> Json<Value> {
    Json(json!({
        "major": "1",
        "minor": "32",
        "gitVersion": format!("v1.32.0+setpoint-{}", env!("CARGO_PKG_VERSION")),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "",
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    }))
}

pub(super) async fn core_versions(State(host): State<Arc<Host>>, headers: HeaderMap) -> Response {
    if let Some(form) = Aggregated::requested(&headers) {
        return form.respond(vec![group_discovery(&host, "", &["v1".to_owned()])]);
    }
    legacy(json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}],
    }))
}

pub(super) async fn core_resources(State(host): State<Arc<Host>>) -> Json<Value> {
    Json(resource_list(&host, "", "v1"))
}

/// Every named group and its versions, the preferred (first) one first.
fn group_versions(host: &Host) -> BTreeMap<String, Vec<String>> {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for kind in host.api().kinds().all() {
        if !kind.group.is_empty() {
            let versions = groups.entry(kind.group.clone()).or_default();
            if !versions.contains(&kind.version) {
                versions.push(kind.version.clone());
            }
        }
    }
    groups
}

pub(super) async fn groups(State(host): State<Arc<Host>>, headers: HeaderMap) -> Response {
    let groups = group_versions(&host);
    if let Some(form) = Aggregated::requested(&headers) {
        let items = groups
            .iter()
            .map(|(name, versions)| group_discovery(&host, name, versions))
            .collect();
        return form.respond(items);
    }
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|(name, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
                .collect();
            json!({"name": name, "versions": versions, "preferredVersion": versions[0]})
        })
        .collect();
    legacy(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}))
}

/// A legacy discovery answer. `Vary: Accept` because the same URL answers
/// in two forms, so that no cache hands one client the other's.
fn legacy(body: Value) -> Response {
    ([(header::VARY, "Accept")], Json(body)).into_response()
}

/// The verbs of every kind's main resource and of its `status`
/// sub-resource.
const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
const STATUS_VERBS: [&str; 3] = ["get", "patch", "update"];

/// The aggregated discovery version a client asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Aggregated {
    V2,
    V2Beta1,
}

impl Aggregated {
    /// The form the `Accept` header prefers: the first media range that is
    /// either an aggregated discovery list or plain JSON (which means the
    /// legacy form), skipping ranges refused with `q=0`.
    fn requested(headers: &HeaderMap) -> Option<Self> {
        let accept = headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect::<Vec<_>>()
            .join(",");
        for range in accept.split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("").to_ascii_lowercase();
            let params: BTreeMap<String, String> = parts
                .filter_map(|p| p.split_once('='))
                .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
                .collect();
            if params.get("q").is_some_and(|q| q.parse::<f32>() == Ok(0.0)) {
                continue;
            }
            if !matches!(media.as_str(), "application/json" | "application/*" | "*/*") {
                continue;
            }
            let wants = |key: &str, value: &str| params.get(key).is_some_and(|v| v == value);
            if params.contains_key("as") {
                if wants("as", "APIGroupDiscoveryList") && wants("g", "apidiscovery.k8s.io") {
                    if wants("v", "v2") {
                        return Some(Aggregated::V2);
                    }
                    if wants("v", "v2beta1") {
                        return Some(Aggregated::V2Beta1);
                    }
                }
                // Another conversion (a Table, say) is not offered here.
                continue;
            }
            return None;
        }
        None
    }

    fn version(self) -> &'static str {
        match self {
            Aggregated::V2 => "v2",
            Aggregated::V2Beta1 => "v2beta1",
        }
    }

    fn respond(self, items: Vec<Value>) -> Response {
        let version = self.version();
        let content_type = HeaderValue::from_str(&format!(
            "application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList"
        ))
        .expect("a valid header value");
        let body = json!({
            "kind": "APIGroupDiscoveryList",
            "apiVersion": format!("apidiscovery.k8s.io/{version}"),
            "metadata": {},
            "items": items,
        });
        (
            [
                (header::CONTENT_TYPE, content_type),
                (header::VARY, HeaderValue::from_static("Accept")),
            ],
            body.to_string(),
        )
            .into_response()
    }
}

/// One `APIGroupDiscovery`: the group's versions (preferred first), each
/// with its resources. The core group has an empty name.
fn group_discovery(host: &Host, group: &str, versions: &[String]) -> Value {
    let registry = host.api().kinds();
    let versions: Vec<Value> = versions
        .iter()
        .map(|version| {
            let resources: Vec<Value> = registry
                .in_group_version(group, version)
                .iter()
                .map(|k| resource_discovery(k))
                .collect();
            // Every version served here is served by this process: always current.
            json!({"version": version, "resources": resources, "freshness": "Current"})
        })
        .collect();
    let mut metadata = json!({});
    if !group.is_empty() {
        metadata["name"] = json!(group);
    }
    json!({"metadata": metadata, "versions": versions})
}

/// One `APIResourceDiscovery`.
fn resource_discovery(kind: &KindInfo) -> Value {
    let response_kind = json!({"group": kind.group, "version": kind.version, "kind": kind.kind});
    let mut resource = json!({
        "resource": kind.plural,
        "responseKind": response_kind,
        "scope": if kind.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": kind.singular,
        "verbs": VERBS,
    });
    if !kind.short_names.is_empty() {
        resource["shortNames"] = json!(kind.short_names);
    }
    if kind.status_subresource {
        resource["subresources"] = json!([{
            "subresource": "status",
            "responseKind": response_kind,
            "verbs": STATUS_VERBS,
        }]);
    }
    resource
}

pub(super) async fn group_resources(
    State(host): State<Arc<Host>>,
    Path((group, version)): Path<(String, String)>,
) -> Response {
    let list = resource_list(&host, &group, &version);
    if list["resources"].as_array().is_none_or(Vec::is_empty) {
        return error_response(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("the server could not find the requested resource: {group}/{version}"),
        );
    }
    Json(list).into_response()
}

fn resource_list(host: &Host, group: &str, version: &str) -> Value {
    let kinds = host.api().kinds().in_group_version(group, version);
    let mut resources = Vec::new();
    for kind in &kinds {
        resources.push(json!({
            "name": kind.plural,
            "singularName": kind.singular,
            "namespaced": kind.namespaced,
            "kind": kind.kind,
            "verbs": VERBS,
            "shortNames": kind.short_names,
        }));
        if kind.status_subresource {
            resources.push(json!({
                "name": format!("{}/status", kind.plural),
                "singularName": "",
                "namespaced": kind.namespaced,
                "kind": kind.kind,
                "verbs": STATUS_VERBS,
            }));
        }
    }
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources})
}

//! Discovery: `/version`, `/api`, `/apis` and the resource list of each
//! group-version, in the shapes kubectl and client-go expect.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::status::error_response;
use crate::Host;
use crate::object::KindInfo;

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

pub(super) async fn core_versions() -> Json<Value> {
    Json(json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}],
    }))
}

pub(super) async fn core_resources(State(host): State<Arc<Host>>) -> Json<Value> {
    Json(resource_list(&host, "", "v1"))
}

pub(super) async fn groups(State(host): State<Arc<Host>>) -> Json<Value> {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for kind in host.api().kinds().all() {
        if !kind.group.is_empty() {
            let versions = groups.entry(kind.group.clone()).or_default();
            if !versions.contains(&kind.version) {
                versions.push(kind.version.clone());
            }
        }
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
    Json(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}))
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
    let kinds: Vec<Arc<KindInfo>> = host
        .api()
        .kinds()
        .all()
        .into_iter()
        .filter(|k| k.group == group && k.version == version)
        .collect();
    let mut resources = Vec::new();
    for kind in &kinds {
        let verbs = [
            "create", "delete", "get", "list", "patch", "update", "watch",
        ];
        resources.push(json!({
            "name": kind.plural,
            "singularName": kind.singular,
            "namespaced": kind.namespaced,
            "kind": kind.kind,
            "verbs": verbs,
            "shortNames": kind.short_names,
        }));
        if kind.status_subresource {
            resources.push(json!({
                "name": format!("{}/status", kind.plural),
                "singularName": "",
                "namespaced": kind.namespaced,
                "kind": kind.kind,
                "verbs": ["get", "patch", "update"],
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

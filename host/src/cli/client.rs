//! A small typed HTTP client for a running host: discovery-based kind
//! resolution, get, list, apply (create or update) and delete. Server
//! `Status` errors become messages a user can act on.

use anyhow::{Context, anyhow, bail};
use reqwest::StatusCode;
use serde_json::Value;

use super::manifest::Manifest;

/// A kind as the server's discovery describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// API group (empty for core).
    pub group: String,
    /// Version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Plural (URL) name.
    pub plural: String,
    /// Singular name.
    pub singular: String,
    /// Short names.
    pub short_names: Vec<String>,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
}

impl Resource {
    /// `group/version` or `version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The group for display (`core` for the empty group).
    pub fn group_suffix(&self) -> &str {
        if self.group.is_empty() {
            "core"
        } else {
            &self.group
        }
    }

    fn path(&self, namespace: Option<&str>, name: Option<&str>) -> String {
        let mut path = if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        };
        if let (true, Some(ns)) = (self.namespaced, namespace) {
            path.push_str(&format!("/namespaces/{ns}"));
        }
        path.push('/');
        path.push_str(&self.plural);
        if let Some(name) = name {
            path.push('/');
            path.push_str(name);
        }
        path
    }
}

/// A client of one host's HTTP API.
pub struct Client {
    base: String,
    http: reqwest::Client,
}

impl Client {
    /// A client for the API at `base` (e.g. `http://127.0.0.1:8490`).
    pub fn new(base: &str) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .build()
            .context("building the HTTP client")?;
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            http,
        })
    }

    /// Send `token` as a bearer token with every request.
    pub fn with_token(mut self, token: Option<&str>) -> anyhow::Result<Self> {
        if let Some(token) = token {
            let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
                .context("the token is not a valid HTTP header value")?;
            value.set_sensitive(true);
            let mut headers = reqwest::header::HeaderMap::new();
            headers.insert(reqwest::header::AUTHORIZATION, value);
            self.http = reqwest::Client::builder()
                .default_headers(headers)
                .build()
                .context("building the HTTP client")?;
        }
        Ok(self)
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> anyhow::Result<(StatusCode, Value)> {
        let response = request.send().await.map_err(|e| {
            anyhow!(
                "cannot reach the Setpoint API at {} ({e}); is `setpoint serve` running?",
                self.base
            )
        })?;
        let status = response.status();
        let bytes = response.bytes().await.context("reading the response")?;
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok((status, body))
    }

    /// Send a request whose success answer is the JSON body.
    async fn send_ok(&self, request: reqwest::RequestBuilder) -> anyhow::Result<Value> {
        let (status, body) = self.send(request).await?;
        if status.is_success() {
            Ok(body)
        } else {
            Err(Self::fail(status, &body))
        }
    }

    fn fail(status: StatusCode, body: &Value) -> anyhow::Error {
        match body["message"].as_str() {
            Some(message) => anyhow!("{message} (HTTP {})", status.as_u16()),
            None => anyhow!("the server answered HTTP {status}"),
        }
    }

    async fn get_json(&self, path: &str) -> anyhow::Result<Option<Value>> {
        let (status, body) = self
            .send(self.http.get(format!("{}{path}", self.base)))
            .await?;
        match status {
            StatusCode::NOT_FOUND => Ok(None),
            s if s.is_success() => Ok(Some(body)),
            s => Err(Self::fail(s, &body)),
        }
    }

    /// Every kind the server serves, from discovery.
    pub async fn resources(&self) -> anyhow::Result<Vec<Resource>> {
        let mut group_versions = vec![("".to_owned(), "v1".to_owned())];
        if let Some(groups) = self.get_json("/apis").await? {
            for group in groups["groups"].as_array().into_iter().flatten() {
                for version in group["versions"].as_array().into_iter().flatten() {
                    group_versions.push((
                        group["name"].as_str().unwrap_or("").to_owned(),
                        version["version"].as_str().unwrap_or("").to_owned(),
                    ));
                }
            }
        }
        let mut resources = Vec::new();
        for (group, version) in group_versions {
            let path = if group.is_empty() {
                format!("/api/{version}")
            } else {
                format!("/apis/{group}/{version}")
            };
            let Some(list) = self.get_json(&path).await? else {
                continue;
            };
            for r in list["resources"].as_array().into_iter().flatten() {
                let plural = r["name"].as_str().unwrap_or("");
                if plural.contains('/') {
                    continue; // sub-resources
                }
                resources.push(Resource {
                    group: group.clone(),
                    version: version.clone(),
                    kind: r["kind"].as_str().unwrap_or("").to_owned(),
                    plural: plural.to_owned(),
                    singular: r["singularName"].as_str().unwrap_or("").to_owned(),
                    short_names: r["shortNames"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .filter_map(|s| s.as_str().map(str::to_owned))
                                .collect()
                        })
                        .unwrap_or_default(),
                    namespaced: r["namespaced"].as_bool().unwrap_or(true),
                });
            }
        }
        Ok(resources)
    }

    /// Find a kind by what a user typed: kind, plural, singular or short
    /// name, case-insensitively, optionally as `name.group`.
    pub async fn resolve(&self, name: &str) -> anyhow::Result<Resource> {
        let wanted = name.to_lowercase();
        let (base, group) = match wanted.split_once('.') {
            Some((b, g)) => (b.to_owned(), Some(g.to_owned())),
            None => (wanted.clone(), None),
        };
        let resources = self.resources().await?;
        resources
            .iter()
            .find(|r| {
                group.as_ref().is_none_or(|g| &r.group == g)
                    && (r.plural == base
                        || r.singular == base
                        || r.kind.to_lowercase() == base
                        || r.short_names.iter().any(|s| s == &base))
            })
            .cloned()
            .ok_or_else(|| anyhow!("the server doesn't have a resource type {name:?} (is the plugin that defines it loaded?)"))
    }

    /// One object.
    pub async fn get(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
        name: &str,
    ) -> anyhow::Result<Value> {
        self.send_ok(self.http.get(self.url(resource, namespace, Some(name))))
            .await
    }

    /// Every object of a kind (in a namespace, or all), optionally selected by labels.
    pub async fn list(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
        selector: Option<&str>,
    ) -> anyhow::Result<Value> {
        let mut request = self.http.get(self.url(resource, namespace, None));
        if let Some(selector) = selector {
            request = request.query(&[("labelSelector", selector)]);
        }
        self.send_ok(request).await
    }

    /// Follow a watch stream, calling `on_event` with each event
    /// (`{"type": …, "object": …}`); returns when the server ends it.
    pub async fn watch(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
        mut on_event: impl FnMut(Value),
    ) -> anyhow::Result<()> {
        let request = self
            .http
            .get(self.url(resource, namespace, None))
            .query(&[("watch", "true")]);
        let mut response = request.send().await.map_err(|e| {
            anyhow!(
                "cannot reach the Setpoint API at {} ({e}); is `setpoint serve` running?",
                self.base
            )
        })?;
        if !response.status().is_success() {
            let status = response.status();
            let body: Value = response.json().await.unwrap_or(Value::Null);
            return Err(Self::fail(status, &body));
        }
        let mut buffer = Vec::new();
        while let Some(chunk) = response.chunk().await.context("reading the watch stream")? {
            buffer.extend_from_slice(&chunk);
            while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buffer.drain(..=end).collect();
                let event: Value =
                    serde_json::from_slice(&line).context("the watch stream sent invalid JSON")?;
                if event["type"] == "ERROR" {
                    return Err(anyhow!(
                        "watch ended: {}",
                        event["object"]["message"].as_str().unwrap_or("error")
                    ));
                }
                on_event(event);
            }
        }
        Ok(())
    }

    /// Delete an object.
    pub async fn delete(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
        name: &str,
    ) -> anyhow::Result<Value> {
        self.send_ok(self.http.delete(self.url(resource, namespace, Some(name))))
            .await
    }

    /// The table columns of a kind: its CustomResourceDefinition's
    /// `additionalPrinterColumns` (except the age, shown anyway), or the
    /// built-in ones.
    pub async fn columns(&self, resource: &Resource) -> anyhow::Result<Vec<super::output::Column>> {
        if resource.group.is_empty() || resource.group == "apiextensions.k8s.io" {
            return Ok(super::output::builtin_columns(resource));
        }
        let path = format!(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{}.{}",
            resource.plural, resource.group
        );
        let Some(crd) = self.get_json(&path).await? else {
            return Ok(vec![]);
        };
        let version = crd["spec"]["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == resource.version.as_str());
        Ok(version
            .and_then(|v| v["additionalPrinterColumns"].as_array())
            .into_iter()
            .flatten()
            .filter(|c| c["jsonPath"] != ".metadata.creationTimestamp")
            .map(|c| super::output::Column {
                header: c["name"].as_str().unwrap_or("").to_uppercase(),
                json_path: c["jsonPath"].as_str().unwrap_or("").to_owned(),
            })
            .collect())
    }

    fn url(&self, resource: &Resource, namespace: Option<&str>, name: Option<&str>) -> String {
        format!("{}{}", self.base, resource.path(namespace, name))
    }

    /// Create or update every manifest, after checking that the server knows
    /// every kind (so an unknown kind writes nothing). Returns one line per
    /// object, as kubectl prints them.
    pub async fn apply_all(&self, manifests: &[Manifest]) -> anyhow::Result<Vec<String>> {
        let resources = self.resources().await?;
        let mut plan = Vec::new();
        for manifest in manifests {
            let api_version = manifest.object["apiVersion"].as_str().unwrap_or("");
            let kind = manifest.object["kind"].as_str().unwrap_or("");
            let resource = resources
                .iter()
                .find(|r| r.api_version() == api_version && r.kind == kind)
                .ok_or_else(|| {
                    anyhow!(
                        "{}: unknown kind {kind:?} in {api_version:?}: the server has no such kind (is the plugin that defines it loaded?)",
                        manifest.origin()
                    )
                })?;
            plan.push((manifest, resource));
        }
        let mut lines = Vec::new();
        for (manifest, resource) in plan {
            let action = self
                .apply(resource, &manifest.object)
                .await
                .with_context(|| manifest.origin())?;
            lines.push(format!(
                "{}.{}/{} {action}",
                resource.singular,
                resource.group_suffix(),
                manifest.object["metadata"]["name"].as_str().unwrap_or("")
            ));
        }
        Ok(lines)
    }

    /// Create the object, or update the live one with the manifest's fields.
    /// Returns `created`, `configured` or `unchanged`.
    pub async fn apply(&self, resource: &Resource, object: &Value) -> anyhow::Result<&'static str> {
        let name = object["metadata"]["name"].as_str().unwrap_or("");
        let namespace = resource.namespaced.then(|| {
            object["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
        });
        for _attempt in 0..5 {
            let (status, live) = self
                .send(self.http.get(self.url(resource, namespace, Some(name))))
                .await?;
            if status == StatusCode::NOT_FOUND {
                let (status, body) = self
                    .send(
                        self.http
                            .post(self.url(resource, namespace, None))
                            .json(object),
                    )
                    .await?;
                match status {
                    s if s.is_success() => return Ok("created"),
                    StatusCode::CONFLICT => continue, // created meanwhile: update it
                    s => return Err(Self::fail(s, &body)),
                }
            }
            if !status.is_success() {
                return Err(Self::fail(status, &live));
            }
            let desired = merged(&live, object);
            let (status, body) = self
                .send(
                    self.http
                        .put(self.url(resource, namespace, Some(name)))
                        .json(&desired),
                )
                .await?;
            match status {
                s if s.is_success() => {
                    let unchanged =
                        body["metadata"]["resourceVersion"] == live["metadata"]["resourceVersion"];
                    return Ok(if unchanged { "unchanged" } else { "configured" });
                }
                StatusCode::CONFLICT => continue,
                s => return Err(Self::fail(s, &body)),
            }
        }
        bail!("gave up after repeated conflicts updating {name:?}")
    }
}

/// The live object with the manifest's fields laid over it: top-level
/// fields other than metadata and status replaced, labels and annotations
/// replaced when given, the live resource version kept as the precondition.
fn merged(live: &Value, manifest: &Value) -> Value {
    let mut next = live.clone();
    for (field, value) in manifest.as_object().into_iter().flatten() {
        if field != "metadata" && field != "status" {
            next[field] = value.clone();
        }
    }
    for field in ["labels", "annotations", "finalizers"] {
        if let Some(value) = manifest["metadata"].get(field) {
            next["metadata"][field] = value.clone();
        }
    }
    next
}

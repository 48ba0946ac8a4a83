//! The remote host's API as the CLI uses it: a small typed HTTP client
//! with discovery-based kind resolution, get, list, apply (create or
//! update) and delete. Server `Status` errors become messages a user can
//! act on; the server's `Warning` headers are printed to standard error,
//! as kubectl does. How
//! requests travel (HTTP or HTTPS, token) is `http`'s.

use anyhow::{Context, anyhow, bail};
use axum::http::{Method, StatusCode};
use http_body_util::BodyExt;
use serde::Deserialize;
use serde_json::Value;

use super::http::{Transport, Trust};
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

/// One entry of a discovery `APIResourceList`, as the server writes it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DiscoveredResource {
    name: String,
    #[serde(default)]
    singular_name: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    short_names: Vec<String>,
    #[serde(default = "namespaced_by_default")]
    namespaced: bool,
}

fn namespaced_by_default() -> bool {
    true
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
    http: Transport,
}

impl Client {
    /// A client for the API at `base` (e.g. `http://127.0.0.1:8490`),
    /// without a token; an `https://` server must have a certificate the
    /// system trusts.
    pub fn new(base: &str) -> anyhow::Result<Self> {
        Self::connect(base, &Trust::System, None)
    }

    /// A client for the API at `base` that trusts `trust` over HTTPS and
    /// sends `token` as a bearer token with every request.
    pub fn connect(base: &str, trust: &Trust, token: Option<&str>) -> anyhow::Result<Self> {
        Ok(Self {
            http: Transport::new(base, trust, token)?,
        })
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<(StatusCode, Value)> {
        let response = self.http.send(method, path, body).await?;
        print_warnings(response.headers());
        let status = response.status();
        Ok((status, json_body(response).await?))
    }

    /// Send a request whose success answer is the JSON body.
    async fn send_ok(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<Value> {
        let (status, body) = self.send(method, path, body).await?;
        if status.is_success() {
            Ok(body)
        } else {
            Err(Self::fail(status, &body))
        }
    }

    /// `POST path` with a JSON body; the success answer's JSON body.
    pub async fn post_json(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        self.send_ok(Method::POST, path, Some(body)).await
    }

    fn fail(status: StatusCode, body: &Value) -> anyhow::Error {
        match body["message"].as_str() {
            Some(message) => anyhow!("{message} (HTTP {})", status.as_u16()),
            None => anyhow!("the server answered HTTP {status}"),
        }
    }

    /// `GET path`, the answer's body left to stream (for a large body);
    /// an error status becomes an error with the server's message.
    pub async fn get_streaming(
        &self,
        path: &str,
    ) -> anyhow::Result<hyper::Response<hyper::body::Incoming>> {
        let response = self.http.send(Method::GET, path, None).await?;
        print_warnings(response.headers());
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        Err(Self::fail(status, &json_body(response).await?))
    }

    /// `GET path` (with its query): the JSON body, or `None` on 404.
    pub async fn get_json(&self, path: &str) -> anyhow::Result<Option<Value>> {
        let (status, body) = self.send(Method::GET, path, None).await?;
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
            let listed = match &list["resources"] {
                Value::Null => Vec::new(),
                resources => Vec::<DiscoveredResource>::deserialize(resources)
                    .with_context(|| format!("the host's discovery at {path} is malformed"))?,
            };
            resources.extend(
                listed
                    .into_iter()
                    // Sub-resources (`pods/status`) are not kinds.
                    .filter(|r| !r.name.contains('/'))
                    .map(|r| Resource {
                        group: group.clone(),
                        version: version.clone(),
                        kind: r.kind,
                        plural: r.name,
                        singular: r.singular_name,
                        short_names: r.short_names,
                        namespaced: r.namespaced,
                    }),
            );
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
        self.send_ok(Method::GET, &resource.path(namespace, Some(name)), None)
            .await
    }

    /// Every object of a kind (in a namespace, or all), optionally selected by labels.
    pub async fn list(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
        selector: Option<&str>,
    ) -> anyhow::Result<Value> {
        let mut path = resource.path(namespace, None);
        if let Some(selector) = selector {
            path.push_str(&query(&[("labelSelector", selector)]));
        }
        self.send_ok(Method::GET, &path, None).await
    }

    /// Follow a watch stream, calling `on_event` with each event
    /// (`{"type": …, "object": …}`); returns when the server ends it.
    pub async fn watch(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
        mut on_event: impl FnMut(Value),
    ) -> anyhow::Result<()> {
        let path = format!(
            "{}{}",
            resource.path(namespace, None),
            query(&[("watch", "true")])
        );
        let response = self.http.send(Method::GET, &path, None).await?;
        if !response.status().is_success() {
            let status = response.status();
            let bytes = response
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            return Err(Self::fail(status, &body));
        }
        let mut body = response.into_body();
        let mut buffer = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.context("reading the watch stream")?;
            let Ok(chunk) = frame.into_data() else {
                continue;
            };
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
        self.send_ok(Method::DELETE, &resource.path(namespace, Some(name)), None)
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
            let item = resource.path(namespace, Some(name));
            let (status, live) = self.send(Method::GET, &item, None).await?;
            if status == StatusCode::NOT_FOUND {
                let (status, body) = self
                    .send(Method::POST, &resource.path(namespace, None), Some(object))
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
            let desired = setpoint::object::patch::applied_over(&live, object);
            let (status, body) = self.send(Method::PUT, &item, Some(&desired)).await?;
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

/// `?k=v&…`, percent-encoded.
/// An answer's body as JSON (`null` if it is not JSON).
async fn json_body(response: hyper::Response<hyper::body::Incoming>) -> anyhow::Result<Value> {
    let bytes = response
        .into_body()
        .collect()
        .await
        .context("reading the response")?
        .to_bytes();
    Ok(serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

pub(super) fn query(pairs: &[(&str, &str)]) -> String {
    let encode = |text: &str| -> String {
        text.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                    (b as char).to_string()
                }
                other => format!("%{other:02X}"),
            })
            .collect()
    };
    let pairs: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect();
    format!("?{}", pairs.join("&"))
}

/// Print the server's warnings (`Warning: 299 - "text"`) as kubectl does.
fn print_warnings(headers: &axum::http::HeaderMap) {
    for value in headers.get_all(axum::http::header::WARNING) {
        let Ok(value) = value.to_str() else { continue };
        // warn-code SP warn-agent SP quoted-text: print the text, unquoted.
        let text = value
            .splitn(3, ' ')
            .nth(2)
            .and_then(|t| t.strip_prefix('"'))
            .and_then(|t| t.strip_suffix('"'))
            .map(|t| t.replace("\\\"", "\"").replace("\\\\", "\\"))
            .unwrap_or_else(|| value.to_owned());
        eprintln!("Warning: {text}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_strings_are_percent_encoded() {
        assert_eq!(
            query(&[("labelSelector", "app in (a,b)"), ("watch", "true")]),
            "?labelSelector=app%20in%20%28a%2Cb%29&watch=true"
        );
    }
}

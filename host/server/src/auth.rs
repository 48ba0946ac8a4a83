//! Authentication and authorisation: bearer tokens from a tokens file, each
//! bound to rules over verbs, API groups, resources and namespaces (a subset
//! of Kubernetes RBAC, with the same wording in its refusals).
//!
//! Owns the tokens file format, generating a first token, and deciding
//! whether a request may proceed; does not own the HTTP plumbing (see
//! `guard.rs`) or the `Status` bodies (see `status.rs`).
//!
//! # The tokens file
//!
//! YAML (or JSON):
//!
//! ```yaml
//! users:
//!   - name: admin
//!     token: 9f2c…            # the bearer token, at least 16 characters
//!     rules:
//!       - verbs: ["*"]
//!         apiGroups: ["*"]
//!         resources: ["*"]
//!       - verbs: ["get"]
//!         nonResourceURLs: ["/metrics", "/setpoint/*"]
//!   - name: viewer
//!     token: 0b7d…
//!     rules:
//!       - verbs: ["get", "list", "watch"]
//!         apiGroups: ["demo.setpoint.dev"]
//!         resources: ["pods", "replicasets"]
//!         namespaces: ["default"]   # omitted: every namespace and cluster-scoped kinds
//! ```
//!
//! - `verbs`: `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, or `*`.
//! - `apiGroups`: `""` is the core group (events, secrets), `*` any group.
//! - `resources`: plural names; `pods/status` names a sub-resource, `*` all
//!   resources and sub-resources.
//! - Discovery, `/version`, `/openapi/*`, `/setpoint/v1/console/whoami` and
//!   `/setpoint/v1/manifests` are open to every authenticated user;
//!   `/healthz`, `/readyz`, `/livez` and the console's page (`/`,
//!   `/console/*`, which hold no data) to everyone. Other paths
//!   (`/metrics`, `/setpoint/v1/*`) need a `nonResourceURLs` rule (a trailing
//!   `*` matches a prefix).

use std::path::Path;

use axum::http::Method;
use serde::{Deserialize, Serialize};

/// A tokens file could not be read or is malformed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Reading or writing the file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a valid tokens file.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// One rule: the verbs allowed on resources (or non-resource URLs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rule {
    /// Allowed verbs, or `*`.
    #[serde(default)]
    pub verbs: Vec<String>,
    /// API groups (`""` for core), or `*`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub api_groups: Vec<String>,
    /// Resources (`pods`, `pods/status`), or `*`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    /// Namespaces; empty means all namespaces and cluster-scoped resources.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Paths outside the resource API (`/metrics`, `/setpoint/*`).
    #[serde(
        default,
        rename = "nonResourceURLs",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub non_resource_urls: Vec<String>,
}

/// A user: a name (as it appears in refusals), a token and rules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct User {
    /// The user name.
    pub name: String,
    /// The bearer token.
    pub token: String,
    /// What the user may do.
    #[serde(default)]
    pub rules: Vec<Rule>,
}

/// The users of a server, looked up by token.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tokens {
    /// Every user.
    pub users: Vec<User>,
}

/// The shortest token accepted.
pub const MIN_TOKEN_LEN: usize = 16;

impl Tokens {
    /// Parse a tokens file's text (YAML or JSON).
    pub fn parse(text: &str, path: &str) -> Result<Self, Error> {
        let tokens: Tokens = serde_yaml_ng::from_str(text).map_err(|e| Error::Invalid {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        for user in &tokens.users {
            if user.token.len() < MIN_TOKEN_LEN {
                return Err(Error::Invalid {
                    path: path.to_owned(),
                    message: format!(
                        "the token of user {:?} is shorter than {MIN_TOKEN_LEN} characters",
                        user.name
                    ),
                });
            }
        }
        Ok(tokens)
    }

    /// Read a tokens file.
    pub fn load(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// One administrator with a fresh random token and every permission.
    pub fn generate_admin() -> Self {
        let token = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        Tokens {
            users: vec![User {
                name: "admin".into(),
                token,
                rules: vec![
                    Rule {
                        verbs: vec!["*".into()],
                        api_groups: vec!["*".into()],
                        resources: vec!["*".into()],
                        ..Rule::default()
                    },
                    Rule {
                        verbs: vec!["*".into()],
                        non_resource_urls: vec!["*".into()],
                        ..Rule::default()
                    },
                ],
            }],
        }
    }

    /// Write the file, readable by its owner only.
    pub fn save(&self, path: &Path) -> Result<(), Error> {
        let io = |source| Error::Io {
            path: path.display().to_string(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let text = serde_yaml_ng::to_string(self).expect("tokens serialise");
        write_private(path, &text).map_err(io)
    }

    /// The user holding `token`, comparing in constant time per user.
    pub fn authenticate(&self, token: &str) -> Option<&User> {
        self.users
            .iter()
            .find(|u| constant_time_eq(u.token.as_bytes(), token.as_bytes()))
    }
}

/// Write `text` to `path`, with mode 0600 on Unix.
pub fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)?.write_all(text.as_bytes())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// What a request asks to do, as Kubernetes' `RequestInfo` sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// A resource request.
    Resource(ResourceRequest),
    /// Discovery, `/version`, OpenAPI: open to every authenticated user.
    Discovery,
    /// Health checks: open to everyone.
    Health,
    /// Any other path (`/metrics`, `/setpoint/v1/*`), with its verb.
    NonResource {
        /// Lower-case HTTP verb (`get`, `post`, …).
        verb: String,
        /// The path.
        path: String,
    },
}

/// A request on a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceRequest {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
    pub verb: String,
    /// The API group (`""` for core).
    pub group: String,
    /// The plural resource name.
    pub resource: String,
    /// The sub-resource (`status`), if any.
    pub subresource: Option<String>,
    /// The namespace, if the path names one.
    pub namespace: Option<String>,
    /// The object name, if the path names one.
    pub name: Option<String>,
}

impl ResourceRequest {
    /// The resource as rules name it: `pods` or `pods/status`.
    pub fn full_resource(&self) -> String {
        match &self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.clone(),
        }
    }
}

/// Classify a request by method, path and query.
pub fn classify(method: &Method, path: &str, watch: bool) -> Request {
    // The console's page and files hold no data: open like health checks.
    if matches!(path, "/healthz" | "/readyz" | "/livez" | "/") || path.starts_with("/console/") {
        return Request::Health;
    }
    // Who the caller is, and reading a manifest's text: no data either.
    if matches!(
        path,
        "/setpoint/v1/console/whoami" | "/setpoint/v1/manifests"
    ) {
        return Request::Discovery;
    }
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, rest) = match segments.as_slice() {
        ["api", _version, rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        ["api"] | ["apis"] | ["apis", _] | ["version"] => return Request::Discovery,
        ["openapi", ..] => return Request::Discovery,
        _ => {
            return Request::NonResource {
                verb: method.as_str().to_ascii_lowercase(),
                path: path.to_owned(),
            };
        }
    };
    if rest.is_empty() {
        return Request::Discovery;
    }
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some((*ns).to_owned()), rest),
        other => (None, other),
    };
    let name = rest.get(1).map(|s| (*s).to_owned());
    let verb = match (method.as_str(), &name) {
        ("GET" | "HEAD", Some(_)) => "get",
        ("GET" | "HEAD", None) if watch => "watch",
        ("GET" | "HEAD", None) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", Some(_)) => "delete",
        ("DELETE", None) => "deletecollection",
        (other, _) => {
            return Request::NonResource {
                verb: other.to_ascii_lowercase(),
                path: path.to_owned(),
            };
        }
    };
    Request::Resource(ResourceRequest {
        verb: verb.into(),
        group: group.to_owned(),
        resource: rest[0].to_owned(),
        subresource: rest.get(2).map(|s| (*s).to_owned()),
        namespace,
        name,
    })
}

fn listed(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == "*" || v == value)
}

impl Rule {
    fn allows_resource(&self, request: &ResourceRequest) -> bool {
        listed(&self.verbs, &request.verb)
            && listed(&self.api_groups, &request.group)
            && (self.resources.iter().any(|r| r == "*")
                || listed(&self.resources, &request.full_resource()))
            && (self.namespaces.is_empty()
                || request
                    .namespace
                    .as_deref()
                    .is_some_and(|ns| listed(&self.namespaces, ns)))
    }

    fn allows_path(&self, verb: &str, path: &str) -> bool {
        listed(&self.verbs, verb)
            && self.non_resource_urls.iter().any(|pattern| {
                pattern == path
                    || pattern
                        .strip_suffix('*')
                        .is_some_and(|prefix| path.starts_with(prefix))
            })
    }
}

impl User {
    /// Whether any rule allows `request`.
    pub fn allows(&self, request: &Request) -> bool {
        match request {
            Request::Health | Request::Discovery => true,
            Request::Resource(r) => self.rules.iter().any(|rule| rule.allows_resource(r)),
            Request::NonResource { verb, path } => {
                self.rules.iter().any(|rule| rule.allows_path(verb, path))
            }
        }
    }

    /// Whether some rule lets the user create, update or patch some
    /// resource (what the console asks before it offers to apply; each
    /// write is still checked on its own).
    pub fn may_write_some(&self) -> bool {
        self.rules.iter().any(|rule| {
            !rule.resources.is_empty()
                && rule
                    .verbs
                    .iter()
                    .any(|v| matches!(v.as_str(), "*" | "create" | "update" | "patch"))
        })
    }
}

/// Kubernetes' wording for a refused request, e.g. `pods is forbidden: User
/// "x" cannot list resource "pods" in API group "demo.setpoint.dev" in the
/// namespace "default"`.
pub fn forbidden_message(user: &str, request: &Request) -> String {
    match request {
        Request::Resource(r) => {
            let what = if r.group.is_empty() {
                r.resource.clone()
            } else {
                format!("{}.{}", r.resource, r.group)
            };
            let subject = match &r.name {
                Some(name) => format!("{what} {name:?}"),
                None => what,
            };
            let scope = match &r.namespace {
                Some(ns) => format!("in the namespace {ns:?}"),
                None => "at the cluster scope".to_owned(),
            };
            format!(
                "{subject} is forbidden: User {user:?} cannot {} resource {:?} in API group {:?} {scope}",
                r.verb,
                r.full_resource(),
                r.group
            )
        }
        Request::NonResource { verb, path } => {
            format!("forbidden: User {user:?} cannot {verb} path {path:?}")
        }
        Request::Discovery | Request::Health => format!("forbidden: User {user:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn viewer() -> User {
        User {
            name: "viewer".into(),
            token: "x".repeat(20),
            rules: vec![Rule {
                verbs: vec!["get".into(), "list".into(), "watch".into()],
                api_groups: vec!["demo.setpoint.dev".into()],
                resources: vec!["pods".into()],
                namespaces: vec!["default".into()],
                ..Rule::default()
            }],
        }
    }

    #[test]
    fn requests_are_classified_like_kubernetes_request_info() {
        let r = classify(
            &Method::GET,
            "/apis/demo.setpoint.dev/v1/namespaces/default/pods",
            true,
        );
        let Request::Resource(r) = r else { panic!() };
        assert_eq!(
            (r.verb.as_str(), r.namespace.as_deref(), r.name),
            ("watch", Some("default"), None)
        );
        let r = classify(
            &Method::PUT,
            "/apis/g/v1/namespaces/ns/pods/p/status",
            false,
        );
        let Request::Resource(r) = r else { panic!() };
        assert_eq!(
            (r.verb.as_str(), r.full_resource().as_str()),
            ("update", "pods/status")
        );
        assert_eq!(
            classify(&Method::GET, "/apis/g/v1", false),
            Request::Discovery
        );
        assert_eq!(
            classify(&Method::GET, "/openapi/v3", false),
            Request::Discovery
        );
        assert_eq!(classify(&Method::GET, "/readyz", false), Request::Health);
        assert!(matches!(
            classify(&Method::GET, "/metrics", false),
            Request::NonResource { .. }
        ));
    }

    #[test]
    fn rules_limit_verbs_groups_resources_and_namespaces() {
        let user = viewer();
        let allowed = |m: Method, p: &str| user.allows(&classify(&m, p, false));
        assert!(allowed(
            Method::GET,
            "/apis/demo.setpoint.dev/v1/namespaces/default/pods"
        ));
        assert!(!allowed(
            Method::DELETE,
            "/apis/demo.setpoint.dev/v1/namespaces/default/pods/a"
        ));
        assert!(!allowed(
            Method::GET,
            "/apis/demo.setpoint.dev/v1/namespaces/other/pods"
        ));
        assert!(!allowed(Method::GET, "/apis/demo.setpoint.dev/v1/pods"));
        assert!(!allowed(
            Method::GET,
            "/apis/demo.setpoint.dev/v1/namespaces/default/pods/a/status"
        ));
        assert!(!allowed(
            Method::GET,
            "/apis/other.dev/v1/namespaces/default/pods"
        ));
        assert!(!allowed(Method::GET, "/metrics"));
        assert!(allowed(Method::GET, "/apis"));
    }

    #[test]
    fn a_refusal_names_user_verb_resource_group_and_namespace() {
        let request = classify(
            &Method::GET,
            "/apis/demo.setpoint.dev/v1/namespaces/default/pods",
            false,
        );
        assert_eq!(
            forbidden_message("x", &request),
            r#"pods.demo.setpoint.dev is forbidden: User "x" cannot list resource "pods" in API group "demo.setpoint.dev" in the namespace "default""#
        );
    }

    #[test]
    fn a_generated_tokens_file_round_trips_and_authenticates_its_admin() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.yaml");
        let tokens = Tokens::generate_admin();
        tokens.save(&path).unwrap();
        let loaded = Tokens::load(&path).unwrap();
        assert_eq!(loaded, tokens);
        let admin = loaded.authenticate(&tokens.users[0].token).unwrap();
        assert!(admin.allows(&classify(&Method::DELETE, "/apis/g/v1/things/a", false)));
        assert!(admin.allows(&classify(&Method::GET, "/metrics", false)));
        assert!(loaded.authenticate("wrong-token-wrong-token").is_none());
    }

    #[test]
    fn short_tokens_and_unknown_fields_are_refused() {
        assert!(Tokens::parse("users: [{name: a, token: short}]", "t").is_err());
        assert!(
            Tokens::parse(
                "users: [{name: a, token: aaaaaaaaaaaaaaaaaaaa, role: x}]",
                "t"
            )
            .is_err()
        );
    }
}

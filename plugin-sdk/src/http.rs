//! External HTTP requests as data: [`HttpRequest`] (what a plugin wants the
//! host to send), [`HttpResponse`] and [`HttpError`] (what came back), and
//! [`SecretKeyRef`] (a secret the host fills in at send time, so its value
//! never enters the plugin).
//!
//! A plugin never sends anything itself. It *reads* with
//! [`Ctx::fetch`](crate::Ctx::fetch), which either returns the answer the
//! host got in an earlier round of this reconcile or ends the round so the
//! host can get it; it *writes* with
//! [`Response::effect`](crate::Response::effect), which the host performs
//! after the response is applied. See `docs/plugins.md`, "Talking to
//! external systems".

use std::fmt;

use crate::Error;

/// A key of a `v1 Secret` in the reconciled object's namespace.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SecretKeyRef {
    /// The Secret's name.
    pub name: String,
    /// The key inside its `data`.
    pub key: String,
}

impl SecretKeyRef {
    /// The key `key` of the Secret `name`.
    pub fn new(name: impl Into<String>, key: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            key: key.into(),
        }
    }
}

/// Where the host puts a secret's value when it sends a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretTarget {
    /// A header named `name` whose value is `template` with every `{}`
    /// replaced by the secret (`"Bearer {}"`; `"{}"` is the value alone).
    /// Three templates stand for parts of HTTP Basic credentials instead
    /// ([`HttpRequest::secret_basic_auth`]): [`BASIC_AUTH_USERNAME`],
    /// [`BASIC_AUTH_PASSWORD`], and `BASIC_AUTH_PASSWORD` followed by `:`
    /// and a literal user name; the host joins the parts of one header into
    /// `Basic` and the base64 of `username:password`.
    Header {
        /// The header's name.
        name: String,
        /// The header's value, `{}` standing for the secret.
        template: String,
    },
    /// A query parameter of this name, appended to the URL.
    Query(String),
    /// A string in the JSON body at this JSON pointer (`"/auth/token"`).
    BodyPointer(String),
}

/// The header template of a secret that is the user name of HTTP Basic
/// credentials ([`HttpRequest::secret_basic_auth`]).
pub const BASIC_AUTH_USERNAME: &str = "basic-auth:username";

/// The header template of a secret that is the password of HTTP Basic
/// credentials; followed by `:` and a user name, the user name is that
/// literal ([`HttpRequest::secret_basic_auth_as`]).
pub const BASIC_AUTH_PASSWORD: &str = "basic-auth:password";

/// One secret placed into a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretUse {
    /// Which secret.
    pub secret: SecretKeyRef,
    /// Where it goes.
    pub target: SecretTarget,
}

/// An HTTP request a plugin wants the host to make, built with chained
/// calls:
///
/// ```
/// use setpoint_plugin_sdk::{HttpRequest, SecretKeyRef};
///
/// let read = HttpRequest::get("http://127.0.0.1:8081/api/v1/servers/localhost/zones/example.org.")
///     .secret_header("X-API-Key", "{}", SecretKeyRef::new("pdns", "api-key"));
/// assert_eq!(read.id, "GET http://127.0.0.1:8081/api/v1/servers/localhost/zones/example.org.");
///
/// let write = HttpRequest::new("PATCH", "http://127.0.0.1:8081/api/v1/servers/localhost/zones/example.org.")
///     .id("rrset/www")
///     .json(&serde_json::json!({"rrsets": []}));
/// assert_eq!(write.header_value("content-type"), Some("application/json"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpRequest {
    /// Matches the answer to the request. Defaults to `"METHOD URL"`; set a
    /// stable name of your own with [`HttpRequest::id`] when one response
    /// sends the same method and URL twice.
    pub id: String,
    /// `GET`, `POST`, `PUT`, `PATCH`, `DELETE` or `HEAD`.
    pub method: String,
    /// An absolute `http://` or `https://` URL.
    pub url: String,
    /// Headers; `Host`, hop-by-hop headers and `Content-Length` are refused
    /// by the host.
    pub headers: Vec<(String, String)>,
    /// The body, if any.
    pub body: Option<Vec<u8>>,
    /// Secrets the host substitutes when it sends.
    pub secrets: Vec<SecretUse>,
    /// The most this exchange may take, capped by the host.
    pub timeout_ms: Option<u32>,
}

impl HttpRequest {
    /// A request with this method and URL, id `"METHOD URL"`.
    pub fn new(method: impl Into<String>, url: impl Into<String>) -> Self {
        let method = method.into().to_ascii_uppercase();
        let url = url.into();
        Self {
            id: format!("{method} {url}"),
            method,
            url,
            headers: Vec::new(),
            body: None,
            secrets: Vec::new(),
            timeout_ms: None,
        }
    }

    /// A `GET`.
    pub fn get(url: impl Into<String>) -> Self {
        Self::new("GET", url)
    }

    /// A `POST`.
    pub fn post(url: impl Into<String>) -> Self {
        Self::new("POST", url)
    }

    /// A `PUT`.
    pub fn put(url: impl Into<String>) -> Self {
        Self::new("PUT", url)
    }

    /// A `PATCH`.
    pub fn patch(url: impl Into<String>) -> Self {
        Self::new("PATCH", url)
    }

    /// A `DELETE`.
    pub fn delete(url: impl Into<String>) -> Self {
        Self::new("DELETE", url)
    }

    /// Sets the id the answer is matched by.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = id.into();
        self
    }

    /// Adds a header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = Some(body.into());
        self
    }

    /// Sets a JSON body and `Content-Type: application/json`.
    pub fn json(self, body: &serde_json::Value) -> Self {
        self.header("Content-Type", "application/json")
            .body(body.to_string())
    }

    /// Has the host put `secret` into header `name`, as `template` with `{}`
    /// standing for the value.
    pub fn secret_header(
        mut self,
        name: impl Into<String>,
        template: impl Into<String>,
        secret: SecretKeyRef,
    ) -> Self {
        self.secrets.push(SecretUse {
            secret,
            target: SecretTarget::Header {
                name: name.into(),
                template: template.into(),
            },
        });
        self
    }

    /// Has the host send HTTP Basic credentials (`Authorization: Basic`
    /// and the base64 of `username:password`) made of two secrets, such as
    /// the `username` and `password` keys of a Secret of Kubernetes' type
    /// `kubernetes.io/basic-auth`. Neither value enters the plugin; both
    /// keys must be declared and granted.
    ///
    /// ```
    /// use setpoint_plugin_sdk::{HttpRequest, SecretKeyRef};
    ///
    /// let read = HttpRequest::get("http://127.0.0.1:15672/api/overview").secret_basic_auth(
    ///     SecretKeyRef::new("rabbitmq-admin", "username"),
    ///     SecretKeyRef::new("rabbitmq-admin", "password"),
    /// );
    /// assert_eq!(read.secrets.len(), 2);
    /// ```
    pub fn secret_basic_auth(self, username: SecretKeyRef, password: SecretKeyRef) -> Self {
        self.secret_header("Authorization", BASIC_AUTH_USERNAME, username)
            .secret_header("Authorization", BASIC_AUTH_PASSWORD, password)
    }

    /// Has the host send HTTP Basic credentials for user `username` (not a
    /// secret; it must not contain `:`) with the password `password`:
    /// a check that a password works, say.
    ///
    /// ```
    /// use setpoint_plugin_sdk::{HttpRequest, SecretKeyRef};
    ///
    /// let whoami = HttpRequest::get("http://127.0.0.1:15672/api/whoami")
    ///     .secret_basic_auth_as("app", SecretKeyRef::new("app-password", "password"));
    /// assert_eq!(whoami.secrets.len(), 1);
    /// ```
    pub fn secret_basic_auth_as(self, username: &str, password: SecretKeyRef) -> Self {
        self.secret_header(
            "Authorization",
            format!("{BASIC_AUTH_PASSWORD}:{username}"),
            password,
        )
    }

    /// Has the host append `secret` as query parameter `name`.
    pub fn secret_query(mut self, name: impl Into<String>, secret: SecretKeyRef) -> Self {
        self.secrets.push(SecretUse {
            secret,
            target: SecretTarget::Query(name.into()),
        });
        self
    }

    /// Has the host put `secret` as a string at `pointer` in the JSON body.
    pub fn secret_body(mut self, pointer: impl Into<String>, secret: SecretKeyRef) -> Self {
        self.secrets.push(SecretUse {
            secret,
            target: SecretTarget::BodyPointer(pointer.into()),
        });
        self
    }

    /// Accepts an answer up to `age` old (whole seconds): the host may hand
    /// this read the answer of an identical read (same URL, headers and
    /// secrets) another object of the plugin made that recently, instead
    /// of sending it again. Sent as HTTP's `Cache-Control: max-age=N`
    /// request directive; zero asks for an exchange of its own (or one not
    /// sent yet). Without it the host's window applies (one second by
    /// default). After this object's own write to the same destination,
    /// it is never handed an answer read before that write finished;
    /// other objects' writes do not end the freshness (ask zero to see
    /// them at once).
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint_plugin_sdk::HttpRequest;
    ///
    /// let read = HttpRequest::get("https://dns.example/zones/example.org").max_age(Duration::from_secs(15));
    /// assert_eq!(read.header_value("cache-control"), Some("max-age=15"));
    /// ```
    pub fn max_age(mut self, age: std::time::Duration) -> Self {
        self.headers
            .retain(|(n, _)| !n.eq_ignore_ascii_case("cache-control"));
        self.headers
            .push(("Cache-Control".into(), format!("max-age={}", age.as_secs())));
        self
    }

    /// Lets the host send this write together with others of the plugin
    /// that wait at the same time: same method, URL and headers, bodies
    /// equal but for the JSON array at `pointer`, whose items are joined
    /// into one body (PowerDNS's zone `PATCH` takes many `rrsets`). Every
    /// write of the batch gets its answer; when the batch is refused (4xx)
    /// each is sent again alone, so an answer is always about its own
    /// write. A write whose secrets go into its body is never batched.
    /// Sent as the `X-Setpoint-Batch` header, which the host removes.
    ///
    /// ```
    /// use setpoint_plugin_sdk::HttpRequest;
    /// use setpoint_plugin_sdk::serde_json::json;
    ///
    /// let write = HttpRequest::patch("https://dns.example/zones/example.org")
    ///     .json(&json!({"rrsets": [{"name": "www.example.org.", "changetype": "DELETE"}]}))
    ///     .batch("/rrsets");
    /// assert_eq!(write.header_value("x-setpoint-batch"), Some("/rrsets"));
    /// ```
    pub fn batch(self, pointer: impl Into<String>) -> Self {
        self.header("X-Setpoint-Batch", pointer)
    }

    /// Sets the most this exchange may take.
    pub fn timeout_ms(mut self, ms: u32) -> Self {
        self.timeout_ms = Some(ms);
        self
    }

    /// The value of the first header named `name` (any case).
    pub fn header_value(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// What a server answered. Any status is an answer; check it with
/// [`HttpResponse::is_success`] or [`HttpResponse::error_for_status`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpResponse {
    /// The HTTP status code.
    pub status: u16,
    /// Response headers, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body, at most the host's size cap.
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The value of the first header named `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON into `T`; a permanent error if it does not
    /// parse.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, Error> {
        serde_json::from_slice(&self.body)
            .map_err(|e| Error::permanent(format!("response body: {e}")))
    }

    /// The response itself when its status is 2xx; otherwise an error with
    /// the status and the start of the body: transient for 5xx, 408 and 429,
    /// permanent for the rest of 4xx (retrying will not help), and transient
    /// for anything else.
    pub fn error_for_status(self) -> Result<Self, Error> {
        if self.is_success() {
            return Ok(self);
        }
        let mut text = self.text();
        if text.len() > 200 {
            let mut cut = 200;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
        }
        let message = format!("HTTP {}: {}", self.status, text.trim());
        Err(match self.status {
            408 | 429 => Error::transient(message),
            400..=499 => Error::permanent(message),
            _ => Error::transient(message),
        })
    }
}

/// Why a request got no answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HttpErrorKind {
    /// Not sent: outside the grant, a forbidden header, a private address
    /// without an explicit grant, an unknown secret.
    Refused,
    /// Not sent now: a rate limit or circuit breaker holds it back; the
    /// host requeues the object.
    Throttled,
    /// Name resolution or connecting failed.
    Connect,
    /// The connect or total timeout passed.
    Timeout,
    /// The response was larger than the host accepts.
    TooLarge,
    /// Anything else on the wire.
    Transport,
}

impl HttpErrorKind {
    /// The kind's name as the host reports it (`refused`, `too-large`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Refused => "refused",
            Self::Throttled => "throttled",
            Self::Connect => "connect",
            Self::Timeout => "timeout",
            Self::TooLarge => "too-large",
            Self::Transport => "transport",
        }
    }
}

/// A request that got no answer, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpError {
    /// The class of failure.
    pub kind: HttpErrorKind,
    /// What happened, secrets masked.
    pub message: String,
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.as_str(), self.message)
    }
}

impl std::error::Error for HttpError {}

impl From<HttpError> for Error {
    /// Refusals are permanent (only the operator's grant or the plugin can
    /// fix them); everything else is transient.
    fn from(err: HttpError) -> Self {
        match err.kind {
            HttpErrorKind::Refused => Error::permanent(err.to_string()),
            _ => Error::transient(err.to_string()),
        }
    }
}

/// The answer to one request, matched by id.
pub type HttpResult = Result<HttpResponse, HttpError>;

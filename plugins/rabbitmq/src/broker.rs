//! The RabbitMQ management API as the plugins use it: [`Api`] (the broker
//! an object names, every request carrying the credentials from its Secret
//! as HTTP Basic auth the host fills in), URL encoding of names, and what
//! an answer means ([`Api::read_answer`], [`Api::written`]) as a
//! [`Failure`] with a reason when it is not what was hoped for.
//!
//! The API answers a refusal as JSON, `{"error": "bad_request", "reason":
//! "inequivalent arg 'durable' for queue 'q' in vhost '/': ..."}`; the
//! `reason` (not always a string) is what an operator needs to read.

use std::time::Duration;

use setpoint_plugin_sdk::serde_json::{self, Value};
use setpoint_plugin_sdk::{
    Ctx, Error, HttpErrorKind, HttpRequest, HttpResponse, HttpResult, SecretKeyRef,
};

use crate::{BrokerRef, Failure};

/// The Secret keys of the broker's credentials (`kubernetes.io/basic-auth`).
pub const USERNAME_KEY: &str = "username";
/// See [`USERNAME_KEY`].
pub const PASSWORD_KEY: &str = "password";

/// A name as one path segment: everything but RFC 3986's unreserved
/// characters percent-encoded (the default vhost `/` is `%2F`).
pub fn encode(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Check a name of the broker's (queue, exchange, user, ...): not empty,
/// and not `.` or `..`, which HTTP clients take for path steps however
/// they are encoded.
pub fn check_name(field: &str, name: &str) -> Result<(), Failure> {
    if name.is_empty() || name == "." || name == ".." {
        return Err(Failure::InvalidSpec(format!(
            "{field} {name:?} is not a name the management API can address"
        )));
    }
    if name.chars().any(char::is_control) {
        return Err(Failure::InvalidSpec(format!(
            "{field} {name:?} contains control characters"
        )));
    }
    Ok(())
}

/// One broker, as an object names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Api {
    /// The base URL, without a trailing `/`.
    pub base: String,
    /// The Secret with the credentials.
    pub secret: String,
}

impl Api {
    /// Check the broker reference.
    pub fn from_spec(broker: &BrokerRef) -> Result<Self, Failure> {
        let base = broker.url.trim().trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(Failure::InvalidSpec(format!(
                "spec.broker.url {:?} is not an http:// or https:// URL",
                broker.url
            )));
        }
        let secret = broker.credentials_secret.trim();
        if secret.is_empty() {
            return Err(Failure::InvalidSpec(
                "spec.broker.credentialsSecret is empty".into(),
            ));
        }
        Ok(Self {
            base: base.to_owned(),
            secret: secret.to_owned(),
        })
    }

    /// `{base}/api{path}`; `path` is already encoded.
    pub fn url(&self, path: &str) -> String {
        format!("{}/api{path}", self.base)
    }

    /// A request with the broker's credentials.
    pub fn request(&self, method: &str, id: &str, path: &str) -> HttpRequest {
        HttpRequest::new(method, self.url(path))
            .id(id)
            .header("Accept", "application/json")
            .secret_basic_auth(
                SecretKeyRef::new(&self.secret, USERNAME_KEY),
                SecretKeyRef::new(&self.secret, PASSWORD_KEY),
            )
    }

    /// A read that accepts an answer up to `max_age` old (see
    /// [`crate::reconcile::max_age`]): the host shares it among the
    /// objects reading the same URL with the same credentials (every queue
    /// of a vhost reads the vhost's list).
    pub fn read(&self, id: &str, path: &str, max_age: Duration) -> HttpRequest {
        self.request("GET", id, path).max_age(max_age)
    }

    /// A write with a JSON body.
    pub fn write(&self, method: &str, id: &str, path: &str, body: &Value) -> HttpRequest {
        self.request(method, id, path).json(body)
    }

    /// What a read's answer means: the response when the broker has the
    /// object (2xx), `None` when it has not (404), or the failure.
    pub fn read_answer<'a>(
        &self,
        answer: &'a HttpResult,
    ) -> Result<Option<&'a HttpResponse>, Failure> {
        let response = answer
            .as_ref()
            .map_err(|e| unanswered(e.kind, &e.message))?;
        match response.status {
            200..=299 => Ok(Some(response)),
            404 => Ok(None),
            status => Err(self.refused(status, response)),
        }
    }

    /// What a write's outcome means. A `DELETE` answered 404 found nothing
    /// to delete: done.
    pub fn written(&self, what: &str, outcome: &HttpResult, delete: bool) -> Result<(), Failure> {
        let response = outcome
            .as_ref()
            .map_err(|e| unanswered(e.kind, &e.message))?;
        match response.status {
            200..=299 => Ok(()),
            404 if delete => Ok(()),
            400 | 404 | 405 | 406 | 409 | 412 | 422 => Err(Failure::Rejected(format!(
                "RabbitMQ refused to {what}: {}",
                broker_reason(response)
            ))),
            status => Err(self.refused(status, response)),
        }
    }

    fn refused(&self, status: u16, response: &HttpResponse) -> Failure {
        match status {
            401 | 403 => Failure::Unauthorized(format!(
                "RabbitMQ refused the credentials from Secret {} (keys {USERNAME_KEY}, \
                 {PASSWORD_KEY}): {}",
                self.secret,
                broker_reason(response)
            )),
            _ => Failure::Unreachable(format!("RabbitMQ answered {}", broker_reason(response))),
        }
    }

    /// A body that does not parse as what the API answers.
    pub fn garbled(&self, what: &str, err: impl std::fmt::Display) -> Failure {
        Failure::Unreachable(format!(
            "RabbitMQ answered the read of {what} with something unexpected: {err}"
        ))
    }
}

/// A request that got no answer.
pub fn unanswered(kind: HttpErrorKind, message: &str) -> Failure {
    match kind {
        HttpErrorKind::Refused => Failure::NotGranted(format!(
            "the host did not send the request to RabbitMQ: {message}"
        )),
        // The host's hold changes with every look (its time left): not in
        // the message, which must stay the same while the failure does.
        HttpErrorKind::Throttled => Failure::Unreachable(
            "no answer from RabbitMQ (throttled): the host holds requests to it for now".into(),
        ),
        _ => Failure::Unreachable(format!(
            "no answer from RabbitMQ ({}): {message}",
            kind.as_str()
        )),
    }
}

/// `HTTP 400: <reason>`: the status and the broker's `reason` (or the
/// start of the body).
pub fn broker_reason(response: &HttpResponse) -> String {
    let status = response.status;
    if let Ok(body) = serde_json::from_slice::<Value>(&response.body)
        && let Some(reason) = body.get("reason")
    {
        let reason = match reason {
            Value::String(s) => s.trim().to_owned(),
            other => other.to_string(),
        };
        return format!("HTTP {status}: {}", cut(&reason));
    }
    let text = response.text();
    let text = text.trim();
    if text.is_empty() {
        format!("HTTP {status}")
    } else {
        format!("HTTP {status}: {}", cut(text))
    }
}

fn cut(text: &str) -> String {
    let mut end = text.len().min(200);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let ellipsis = if end < text.len() { "…" } else { "" };
    format!("{}{ellipsis}", &text[..end])
}

/// [`Ctx::fetch_result`], except that an answer the host held back (a rate
/// limit, its breaker) ends the reconcile in a transient error: it says
/// nothing about the broker, so nothing is reported, and the host requeues
/// the object when the hold ends. Reporting it would flip the status
/// between this and the next look's, a write each time.
pub fn fetch(ctx: &Ctx, request: &HttpRequest) -> Result<HttpResult, Error> {
    let answer = ctx.fetch_result(request)?;
    not_held(&answer)?;
    Ok(answer)
}

/// [`fetch`] of several reads in one round.
pub fn fetch_all(ctx: &Ctx, requests: &[HttpRequest]) -> Result<Vec<HttpResult>, Error> {
    let answers = ctx.fetch_all(requests)?;
    for answer in &answers {
        not_held(answer)?;
    }
    Ok(answers)
}

fn not_held(answer: &HttpResult) -> Result<(), Error> {
    match answer {
        Err(held) if held.kind == HttpErrorKind::Throttled => Err(Error::transient(format!(
            "the host holds requests to RabbitMQ for now: {}",
            held.message
        ))),
        _ => Ok(()),
    }
}

/// Whether two JSON values mean the same: numbers by value (`10` is
/// `10.0`), objects whatever their order.
pub fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_json(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        _ => a == b,
    }
}

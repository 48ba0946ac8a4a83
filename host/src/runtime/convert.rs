//! Conversions between the plugin world's records and the controller's
//! types: the manifest and response a plugin returns (checked here: JSON
//! that does not parse, a response over the size limit), the request it is
//! given, and the `0.1` series' records, which have no effects.

use std::time::Duration;

use serde_json::Value;

use super::Error;
use super::bindings::setpoint::plugin::types as wit;
use super::bindings::v01::setpoint::plugin::types as v01;
use crate::controller::{
    Answer, EventRecord, HttpErrorKind, HttpRequest, Manifest, Request, Response, SecretKeyRef,
    SecretTarget, SecretUse, Severity,
};
use crate::object::KindRef;
use crate::object::codec::json_text;

pub(super) fn manifest(m: wit::Manifest) -> Result<Manifest, Error> {
    let bad = |msg: String| Error::BadResponse(format!("manifest: {msg}"));
    if m.name.is_empty() {
        return Err(bad("name is empty".into()));
    }
    let kind = |k: wit::KindRef| KindRef::new(k.api_version, k.kind);
    let definitions = m
        .definitions
        .iter()
        .enumerate()
        .map(|(i, d)| {
            serde_json::from_str::<Value>(d)
                .map_err(|e| bad(format!("definitions[{i}] is not JSON: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let reconciles = kind(m.reconciles);
    if reconciles.api_version.is_empty() || reconciles.kind.is_empty() {
        return Err(bad("reconciles names no kind".into()));
    }
    Ok(Manifest {
        name: m.name,
        version: m.version,
        reconciles,
        owns: m.owns.into_iter().map(kind).collect(),
        definitions,
        finalizer: m.finalizer,
        destinations: m.destinations,
        secrets: m.secrets,
    })
}

pub(super) fn response(r: wit::Response, limit: usize) -> Result<Response, Error> {
    let size = r.children.iter().flatten().map(String::len).sum::<usize>()
        + r.observe
            .iter()
            .chain(&r.effects)
            .map(request_size)
            .sum::<usize>()
        + r.status.as_ref().map_or(0, String::len)
        + r.events
            .iter()
            .map(|e| e.message.len() + e.reason.len())
            .sum::<usize>();
    if size > limit {
        return Err(Error::BadResponse(format!(
            "response is {size} bytes, over the limit of {limit} bytes"
        )));
    }
    let children = r
        .children
        .map(|list| {
            list.iter()
                .enumerate()
                .map(|(i, c)| {
                    let v: Value = serde_json::from_str(c).map_err(|e| {
                        Error::BadResponse(format!("children[{i}] is not JSON: {e}"))
                    })?;
                    if !v.is_object() {
                        return Err(Error::BadResponse(format!(
                            "children[{i}] is not a JSON object"
                        )));
                    }
                    Ok(v)
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()?;
    let status = r
        .status
        .map(|s| {
            let v: Value = serde_json::from_str(&s)
                .map_err(|e| Error::BadResponse(format!("status is not JSON: {e}")))?;
            if v.is_object() {
                Ok(v)
            } else {
                Err(Error::BadResponse(
                    "status patch is not a JSON object".into(),
                ))
            }
        })
        .transpose()?;
    Ok(Response {
        children,
        status,
        events: r
            .events
            .into_iter()
            .map(|e| EventRecord {
                severity: match e.severity {
                    wit::Severity::Normal => Severity::Normal,
                    wit::Severity::Warning => Severity::Warning,
                },
                reason: e.reason,
                message: e.message,
            })
            .collect(),
        requeue_after: r.requeue_after_ms.map(Duration::from_millis),
        remove_finalizer: r.remove_finalizer,
        observe: r.observe.into_iter().map(from_wit_request).collect(),
        effects: r.effects.into_iter().map(from_wit_request).collect(),
    })
}

fn request_size(r: &wit::HttpRequest) -> usize {
    r.id.len()
        + r.url.len()
        + r.method.len()
        + r.headers
            .iter()
            .map(|(n, v)| n.len() + v.len())
            .sum::<usize>()
        + r.body.as_ref().map_or(0, Vec::len)
}

fn from_wit_request(r: wit::HttpRequest) -> HttpRequest {
    let mut request = HttpRequest::new(r.method, r.url).id(r.id);
    request.headers = r.headers;
    request.body = r.body;
    request.timeout_ms = r.timeout_ms;
    request.secrets = r
        .secrets
        .into_iter()
        .map(|s| SecretUse {
            secret: SecretKeyRef::new(s.secret.name, s.secret.key),
            target: match s.target {
                wit::SecretTarget::Header(h) => SecretTarget::Header {
                    name: h.name,
                    template: h.template,
                },
                wit::SecretTarget::Query(name) => SecretTarget::Query(name),
                wit::SecretTarget::BodyPointer(p) => SecretTarget::BodyPointer(p),
            },
        })
        .collect();
    request
}

fn to_wit_answer((id, answer): &Answer) -> wit::HttpResult {
    wit::HttpResult {
        id: id.clone(),
        answer: match answer {
            Ok(r) => Ok(wit::HttpResponse {
                status: r.status,
                headers: r.headers.clone(),
                body: r.body.clone(),
            }),
            Err(e) => Err(wit::HttpError {
                kind: match e.kind {
                    HttpErrorKind::Refused => wit::HttpErrorKind::Refused,
                    HttpErrorKind::Throttled => wit::HttpErrorKind::Throttled,
                    HttpErrorKind::Connect => wit::HttpErrorKind::Connect,
                    HttpErrorKind::Timeout => wit::HttpErrorKind::Timeout,
                    HttpErrorKind::TooLarge => wit::HttpErrorKind::TooLarge,
                    HttpErrorKind::Transport => wit::HttpErrorKind::Transport,
                },
                message: e.message.clone(),
            }),
        },
    }
}

/// The plugin world's request for a controller request.
pub(super) fn request(request: &Request) -> wit::Request {
    wit::Request {
        object: json_text(&request.object),
        owned: request.owned.iter().map(|o| json_text(o)).collect(),
        finalizing: request.finalizing,
        now_unix_ms: request.now_unix_ms,
        observations: request.observations.iter().map(to_wit_answer).collect(),
        outcomes: request.outcomes.iter().map(to_wit_answer).collect(),
        round: request.round,
    }
}

/// A `0.1` request: the same without effects (a `0.1` plugin never asks
/// for any, so it never has answers to get).
pub(super) fn request_v01(r: wit::Request) -> v01::Request {
    v01::Request {
        object: r.object,
        owned: r.owned,
        finalizing: r.finalizing,
        now_unix_ms: r.now_unix_ms,
    }
}

/// A `0.1` manifest, declaring no destinations or secrets.
pub(super) fn manifest_v01(m: v01::Manifest) -> wit::Manifest {
    let kind = |k: v01::KindRef| wit::KindRef {
        api_version: k.api_version,
        kind: k.kind,
    };
    wit::Manifest {
        name: m.name,
        version: m.version,
        reconciles: kind(m.reconciles),
        owns: m.owns.into_iter().map(kind).collect(),
        definitions: m.definitions,
        finalizer: m.finalizer,
        destinations: Vec::new(),
        secrets: Vec::new(),
    }
}

/// A `0.1` response or error: the same with no effects.
pub(super) fn result_v01(
    r: Result<v01::Response, v01::ReconcileError>,
) -> Result<wit::Response, wit::ReconcileError> {
    match r {
        Ok(r) => Ok(wit::Response {
            children: r.children,
            status: r.status,
            events: r
                .events
                .into_iter()
                .map(|e| wit::Event {
                    severity: match e.severity {
                        v01::Severity::Normal => wit::Severity::Normal,
                        v01::Severity::Warning => wit::Severity::Warning,
                    },
                    reason: e.reason,
                    message: e.message,
                })
                .collect(),
            requeue_after_ms: r.requeue_after_ms,
            remove_finalizer: r.remove_finalizer,
            observe: Vec::new(),
            effects: Vec::new(),
        }),
        Err(v01::ReconcileError::Transient(m)) => Err(wit::ReconcileError::Transient(m)),
        Err(v01::ReconcileError::Permanent(m)) => Err(wit::ReconcileError::Permanent(m)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::{HttpError, HttpResponse};

    #[test]
    fn effects_cross_the_boundary_with_their_secrets_and_answers() {
        let request = wit::HttpRequest {
            id: "w".into(),
            method: "PUT".into(),
            url: "http://x:1/a".into(),
            headers: vec![("a".into(), "b".into())],
            body: Some(b"{}".to_vec()),
            secrets: vec![wit::SecretUse {
                secret: wit::SecretKeyRef {
                    name: "s".into(),
                    key: "k".into(),
                },
                target: wit::SecretTarget::Query("token".into()),
            }],
            timeout_ms: Some(5),
        };
        let back = from_wit_request(request);
        assert_eq!((back.id.as_str(), back.method.as_str()), ("w", "PUT"));
        assert_eq!(back.secrets[0].target, SecretTarget::Query("token".into()));
        let answer = to_wit_answer(&(
            "w".into(),
            Err(HttpError {
                kind: HttpErrorKind::TooLarge,
                message: "m".into(),
            }),
        ));
        assert!(matches!(
            answer.answer,
            Err(wit::HttpError {
                kind: wit::HttpErrorKind::TooLarge,
                ..
            })
        ));
        let ok = to_wit_answer(&(
            "r".into(),
            Ok(HttpResponse {
                status: 204,
                headers: vec![],
                body: vec![],
            }),
        ));
        assert!(matches!(
            ok.answer,
            Ok(wit::HttpResponse { status: 204, .. })
        ));
    }
}

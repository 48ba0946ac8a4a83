//! The gate every request passes before a handler: authentication (401),
//! per-user rate limits and the bound on requests in flight (429 with
//! `Retry-After`), authorisation (403), and the body size limit (413).
//!
//! # Order
//!
//! 1. Health checks (`/healthz`, `/readyz`, `/livez`) pass untouched.
//! 2. With tokens configured, a request without a known bearer token is
//!    refused with 401. Without tokens every caller is `system:anonymous`
//!    and allowed everything (the server then binds loopback only).
//! 3. The caller's token bucket must hold a token, else 429.
//! 4. The caller's rules must allow the request, else 403.
//! 5. A declared `Content-Length` over the limit is refused with 413 before
//!    the body is read; a chunked body is cut off at the limit, also 413.
//! 6. The body is read whole, within [`BODY_READ_TIMEOUT`] (else 408),
//!    before the request is admitted: a client that sends its body slowly,
//!    or stalls in it, holds no slot of the in-flight bound and keeps no
//!    one else out.
//! 7. A request that is not a watch takes a slot of the in-flight bound for
//!    as long as its handler runs, else 429. Watches are long-running and,
//!    as in Kubernetes, not counted. With tokens, one user may hold at most
//!    half the slots ([`Config::max_in_flight_per_user`]), so that one
//!    busy or hostile client leaves room for the others.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;

use super::auth::{self, Tokens};

/// How long a client may take to send a request's body.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(60);

/// Who may call the server, and how much.
#[derive(Debug, Clone)]
pub struct Config {
    /// Bearer tokens and their rules; `None` serves everyone (loopback only).
    pub tokens: Option<Arc<Tokens>>,
    /// Requests (other than watches) handled at once; more get 429.
    pub max_in_flight: usize,
    /// With tokens, the slots of `max_in_flight` one user may hold at once;
    /// `None`: half of them (at least one). Without tokens every caller is
    /// the same anonymous user, and only `max_in_flight` applies.
    pub max_in_flight_per_user: Option<usize>,
    /// Per-user rate limit; `None` for none.
    pub rate_limit: Option<RateLimit>,
    /// The largest request body accepted; larger gets 413.
    pub max_body_bytes: usize,
    /// Where the web console's page comes from, or no console.
    pub console: super::console::Source,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            tokens: None,
            max_in_flight: 400,
            max_in_flight_per_user: None,
            rate_limit: None,
            max_body_bytes: super::MAX_BODY_BYTES,
            console: super::console::Source::Embedded,
        }
    }
}

/// A token bucket per user: `qps` sustained, `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    /// Requests per second refilled.
    pub qps: f64,
    /// Bucket size.
    pub burst: u32,
}

/// Why the gate refused a request; `status.rs` turns it into a `Status`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// No token, or an unknown one.
    #[error("Unauthorized")]
    Unauthorized,
    /// The caller's rules do not allow the request.
    #[error("{0}")]
    Forbidden(String),
    /// Rate limited or too many requests in flight.
    #[error("{message}")]
    TooManyRequests {
        /// What was exceeded.
        message: String,
        /// Seconds to wait before retrying.
        retry_after_secs: u64,
    },
    /// The body is larger than the limit.
    #[error("the request body is larger than the limit of {limit} bytes")]
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The body did not arrive in time.
    #[error("the request body did not arrive within {} s", .0.as_secs())]
    BodyTimeout(Duration),
    /// The body could not be read (the client broke it off, say).
    #[error("the request body could not be read: {0}")]
    BadBody(String),
}

struct Bucket {
    tokens: f64,
    refilled: Instant,
}

/// The gate's state, shared by every request.
pub(super) struct Guard {
    config: Config,
    pub(super) metrics: Arc<super::metrics::RequestMetrics>,
    in_flight: Arc<Semaphore>,
    buckets: Mutex<HashMap<String, Bucket>>,
    /// Slots held per user (with tokens).
    held: Arc<Mutex<HashMap<String, usize>>>,
}

/// A user's share of the in-flight slots, given back when dropped.
struct Share {
    held: Arc<Mutex<HashMap<String, usize>>>,
    user: String,
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = held.get_mut(&self.user) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.user);
            }
        }
    }
}

impl Guard {
    pub(super) fn new(config: Config) -> Arc<Self> {
        Arc::new(Self {
            in_flight: Arc::new(Semaphore::new(config.max_in_flight.max(1))),
            config,
            metrics: Arc::default(),
            buckets: Mutex::new(HashMap::new()),
            held: Arc::default(),
        })
    }

    /// Take one of `user`'s share of the in-flight slots, if it has one
    /// left.
    fn share(&self, user: &str) -> Option<Share> {
        let most = self
            .config
            .max_in_flight_per_user
            .unwrap_or(self.config.max_in_flight / 2)
            .max(1);
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let n = held.entry(user.to_owned()).or_insert(0);
        if *n >= most {
            return None;
        }
        *n += 1;
        Some(Share {
            held: self.held.clone(),
            user: user.to_owned(),
        })
    }

    /// Take a token from `user`'s bucket, or say how long until one is there.
    fn take(&self, user: &str) -> Result<(), Duration> {
        let Some(limit) = self.config.rate_limit else {
            return Ok(());
        };
        let now = Instant::now();
        let mut buckets = self.buckets.lock().expect("rate limiter lock");
        let bucket = buckets.entry(user.to_owned()).or_insert(Bucket {
            tokens: f64::from(limit.burst),
            refilled: now,
        });
        let elapsed = now.duration_since(bucket.refilled).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * limit.qps).min(f64::from(limit.burst));
        bucket.refilled = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                (1.0 - bucket.tokens) / limit.qps.max(f64::MIN_POSITIVE),
            ))
        }
    }
}

fn bearer(request: &Request) -> Option<&str> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

fn is_watch(request: &Request) -> bool {
    request.uri().query().is_some_and(|q| {
        q.split('&')
            .any(|pair| matches!(pair, "watch=true" | "watch=1"))
    })
}

/// The middleware: see the module doc for the order of checks. Every
/// answer (refusals included) is counted for `/metrics`.
pub(super) async fn check(
    State(guard): State<Arc<Guard>>,
    request: Request,
    next: Next,
) -> Response {
    let watch = is_watch(&request);
    let classified = auth::classify(request.method(), request.uri().path(), watch);
    if classified == auth::Request::Health {
        return next.run(request).await;
    }
    let started = Instant::now();
    let (verb, resource, group) = match &classified {
        auth::Request::Resource(r) => (
            r.verb.to_ascii_uppercase(),
            r.full_resource(),
            r.group.clone(),
        ),
        _ => (
            request.method().as_str().to_owned(),
            String::new(),
            String::new(),
        ),
    };
    let response = gate(&guard, request, next, watch, classified).await;
    guard.metrics.observe(
        &verb,
        &resource,
        response.status().as_u16(),
        started.elapsed(),
    );
    if watch && response.status().is_success() {
        // Count the stream as open until its body is dropped.
        let gauge = guard.metrics.watch_started(&group, &resource);
        let (parts, body) = response.into_parts();
        let stream = tokio_stream::StreamExt::map(body.into_data_stream(), move |chunk| {
            let _open = &gauge;
            chunk
        });
        return Response::from_parts(parts, axum::body::Body::from_stream(stream));
    }
    response
}

/// The authenticated user of a request, for handlers whose answer depends
/// on what the caller may read (a plan); absent when the API has no
/// tokens, so everyone may read everything.
#[derive(Debug, Clone)]
pub(super) struct Caller(pub(super) auth::User);

async fn gate(
    guard: &Guard,
    mut request: Request,
    next: Next,
    watch: bool,
    classified: auth::Request,
) -> Response {
    let user = match &guard.config.tokens {
        None => None,
        Some(tokens) => match bearer(&request).and_then(|t| tokens.authenticate(t)) {
            Some(user) => Some(user.clone()),
            None => {
                tracing::debug!(path = %request.uri().path(), "unauthenticated request refused");
                return Refusal::Unauthorized.into_response();
            }
        },
    };
    let name = user
        .as_ref()
        .map_or("system:anonymous", |u| u.name.as_str())
        .to_owned();
    if let Err(wait) = guard.take(&name) {
        return Refusal::TooManyRequests {
            message: format!("too many requests from user {name:?}, please try again later"),
            retry_after_secs: wait.as_secs_f64().ceil().max(1.0) as u64,
        }
        .into_response();
    }
    if let Some(user) = &user
        && !user.allows(&classified)
    {
        let message = auth::forbidden_message(&user.name, &classified);
        tracing::debug!(user = %user.name, "{message}");
        return Refusal::Forbidden(message).into_response();
    }
    if let Some(user) = user {
        request.extensions_mut().insert(Caller(user));
    }
    let limit = guard.config.max_body_bytes;
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|len| len > limit) {
        return Refusal::TooLarge { limit }.into_response();
    }
    let request = match read_body(request, limit).await {
        Ok(request) => request,
        Err(refusal) => return refusal.into_response(),
    };
    let _share = match (&guard.config.tokens, watch) {
        (Some(_), false) => match guard.share(&name) {
            Some(share) => Some(share),
            None => {
                return Refusal::TooManyRequests {
                    message: format!(
                        "too many requests in flight from user {name:?}, please try again later"
                    ),
                    retry_after_secs: 1,
                }
                .into_response();
            }
        },
        _ => None,
    };
    let _permit = if watch {
        None
    } else {
        match guard.in_flight.clone().try_acquire_owned() {
            Ok(permit) => Some(permit),
            Err(_) => {
                return Refusal::TooManyRequests {
                    message: "too many requests in flight, please try again later".into(),
                    retry_after_secs: 1,
                }
                .into_response();
            }
        }
    };
    let response = next.run(request).await;
    let is_status_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if response.status() == StatusCode::PAYLOAD_TOO_LARGE && !is_status_json {
        return Refusal::TooLarge { limit }.into_response();
    }
    response
}

/// The request with its body read whole (at most `limit` bytes, within
/// [`BODY_READ_TIMEOUT`]), for methods that carry one.
async fn read_body(request: Request, limit: usize) -> Result<Request, Refusal> {
    if matches!(
        *request.method(),
        axum::http::Method::GET | axum::http::Method::HEAD | axum::http::Method::OPTIONS
    ) {
        return Ok(request);
    }
    use http_body_util::BodyExt;
    let (parts, body) = request.into_parts();
    let read = http_body_util::Limited::new(body, limit).collect();
    match tokio::time::timeout(BODY_READ_TIMEOUT, read).await {
        Err(_) => Err(Refusal::BodyTimeout(BODY_READ_TIMEOUT)),
        Ok(Err(err)) if err.is::<http_body_util::LengthLimitError>() => {
            Err(Refusal::TooLarge { limit })
        }
        Ok(Err(err)) => Err(Refusal::BadBody(err.to_string())),
        Ok(Ok(collected)) => Ok(Request::from_parts(
            parts,
            axum::body::Body::from(collected.to_bytes()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::body::Body;
    use axum::routing::get;

    fn user(name: &str) -> auth::User {
        auth::User {
            name: name.into(),
            token: format!("{name}-token-0123456789"),
            rules: vec![auth::Rule {
                verbs: vec!["*".into()],
                non_resource_urls: vec!["*".into()],
                ..auth::Rule::default()
            }],
        }
    }

    /// One user holding its share of the slots is turned away; another
    /// still gets in.
    #[tokio::test]
    async fn one_user_holds_at_most_its_share_of_the_in_flight_slots() {
        let guard = Guard::new(Config {
            tokens: Some(Arc::new(auth::Tokens {
                users: vec![user("busy"), user("other")],
            })),
            max_in_flight: 4,
            ..Config::default()
        });
        let release = Arc::new(Semaphore::new(0));
        let router = Router::new()
            .route(
                "/setpoint/v1/slow",
                get({
                    let release = release.clone();
                    move || async move {
                        let _ = release.acquire().await;
                        "done"
                    }
                }),
            )
            .layer(axum::middleware::from_fn_with_state(guard.clone(), check));
        let call = |who: &str| {
            let mut router = router.clone();
            let request = Request::builder()
                .uri("/setpoint/v1/slow")
                .header(
                    header::AUTHORIZATION,
                    format!("Bearer {who}-token-0123456789"),
                )
                .body(Body::empty())
                .unwrap();
            async move {
                tower_service::Service::call(&mut router, request)
                    .await
                    .unwrap()
                    .status()
            }
        };
        let held: Vec<_> = (0..2).map(|_| tokio::spawn(call("busy"))).collect();
        while guard.held.lock().unwrap().get("busy") != Some(&2) {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            call("busy").await,
            StatusCode::TOO_MANY_REQUESTS,
            "past its share"
        );
        let other = tokio::spawn(call("other"));
        while guard.held.lock().unwrap().get("other") != Some(&1) {
            tokio::task::yield_now().await;
        }
        release.add_permits(3);
        assert_eq!(other.await.unwrap(), StatusCode::OK);
        for answer in held {
            assert_eq!(answer.await.unwrap(), StatusCode::OK);
        }
        assert!(guard.held.lock().unwrap().is_empty(), "shares given back");
    }
}

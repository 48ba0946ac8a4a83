//! Sending one request: resolve the name on the host, refuse addresses the
//! grant does not allow, connect to the chosen address (TLS with the
//! original name for SNI and certificate checks), send with the original
//! `Host`, never follow a redirect, and read at most the size cap, all
//! within a connect timeout and a total timeout. One connection per
//! request: the address is chosen and checked each time.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls;

use super::policy::{self, Destination};
use super::secrets::Wire;
use crate::contract::{HttpError, HttpErrorKind, HttpResponse};

/// What one exchange may take and return.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Connecting (name resolution included).
    pub connect: Duration,
    /// When the whole exchange must be over.
    pub deadline: Instant,
    /// The most response body bytes accepted.
    pub max_body: usize,
}

fn error(kind: HttpErrorKind, message: impl Into<String>) -> HttpError {
    HttpError {
        kind,
        message: message.into(),
    }
}

/// The addresses `destination` resolves to that may be used: every
/// address for an ordinary one; a special one (loopback, private, ...)
/// only when `explicit` (the grant names this destination, not a wildcard).
pub async fn resolve(
    destination: &Destination,
    explicit: bool,
    budget: &Budget,
) -> Result<Vec<SocketAddr>, HttpError> {
    let addrs: Vec<SocketAddr> = match destination.ip() {
        Some(ip) => vec![SocketAddr::new(ip, destination.port)],
        None => {
            let lookup = tokio::net::lookup_host((destination.host.as_str(), destination.port));
            match tokio::time::timeout_at(
                budget.deadline.min(Instant::now() + budget.connect),
                lookup,
            )
            .await
            {
                Err(_) => {
                    return Err(error(
                        HttpErrorKind::Timeout,
                        format!("resolving {} timed out", destination.host),
                    ));
                }
                Ok(Err(e)) => {
                    return Err(error(
                        HttpErrorKind::Connect,
                        format!("cannot resolve {}: {e}", destination.host),
                    ));
                }
                Ok(Ok(addrs)) => addrs.collect(),
            }
        }
    };
    let (allowed, special): (Vec<SocketAddr>, Vec<SocketAddr>) = addrs
        .into_iter()
        .partition(|a| explicit || !policy::is_special(a.ip()));
    if allowed.is_empty() {
        let ips: Vec<String> = special.iter().map(|a| a.ip().to_string()).collect();
        return Err(error(
            HttpErrorKind::Refused,
            format!(
                "{destination} resolves to {} (loopback, private, link-local or metadata), \
                 which needs a grant naming this destination exactly, not a wildcard",
                ips.join(", ")
            ),
        ));
    }
    Ok(allowed)
}

/// Send `wire` (secrets in place) to `destination` at one of `addrs`.
pub async fn send(
    method: &str,
    destination: &Destination,
    addrs: &[SocketAddr],
    wire: Wire,
    budget: &Budget,
) -> Result<HttpResponse, HttpError> {
    let method = Method::from_bytes(method.as_bytes())
        .map_err(|_| error(HttpErrorKind::Refused, format!("bad method {method:?}")))?;
    let connect_by = budget.deadline.min(Instant::now() + budget.connect);
    let stream = connect(addrs, connect_by).await?;
    let path = path_and_query(&wire.url);
    let host_header = match (destination.scheme.as_str(), destination.port) {
        ("http", 80) | ("https", 443) => host_text(destination),
        _ => format!("{}:{}", host_text(destination), destination.port),
    };
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", host_header);
    for (name, value) in &wire.headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let body = Full::new(Bytes::from(wire.body.unwrap_or_default()));
    let request = request
        .body(body)
        .map_err(|e| error(HttpErrorKind::Refused, format!("bad request: {e}")))?;
    let exchange = async {
        if destination.scheme == "https" {
            let name = ServerName::try_from(destination.host.clone()).map_err(|_| {
                error(
                    HttpErrorKind::Refused,
                    format!("bad TLS name {}", destination.host),
                )
            })?;
            let tls = tls_connector()?
                .connect(name, stream)
                .await
                .map_err(|e| error(HttpErrorKind::Transport, format!("TLS: {e}")))?;
            exchange(TokioIo::new(tls), request, budget.max_body).await
        } else {
            exchange(TokioIo::new(stream), request, budget.max_body).await
        }
    };
    match tokio::time::timeout_at(budget.deadline, exchange).await {
        Ok(result) => result,
        Err(_) => Err(error(
            HttpErrorKind::Timeout,
            "no complete response within the request's time limit",
        )),
    }
}

fn host_text(destination: &Destination) -> String {
    if destination.host.contains(':') {
        format!("[{}]", destination.host)
    } else {
        destination.host.clone()
    }
}

/// `/path?query` of an absolute URL (fragment dropped).
fn path_and_query(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.split('#').next().unwrap_or_default();
    match rest.find(['/', '?']) {
        Some(i) if rest[i..].starts_with('/') => rest[i..].to_owned(),
        Some(i) => format!("/{}", &rest[i..]),
        None => "/".to_owned(),
    }
}

async fn connect(addrs: &[SocketAddr], by: Instant) -> Result<TcpStream, HttpError> {
    let mut last = None;
    for addr in addrs {
        match tokio::time::timeout_at(by, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(e)) => last = Some(format!("{addr}: {e}")),
            Err(_) => {
                return Err(error(
                    HttpErrorKind::Timeout,
                    format!("connecting to {addr} timed out"),
                ));
            }
        }
    }
    Err(error(
        HttpErrorKind::Connect,
        format!(
            "cannot connect: {}",
            last.unwrap_or_else(|| "no address".into())
        ),
    ))
}

async fn exchange<S>(
    io: TokioIo<S>,
    request: Request<Full<Bytes>>,
    max_body: usize,
) -> Result<HttpResponse, HttpError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let transport = |e: hyper::Error| error(HttpErrorKind::Transport, e.to_string());
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(transport)?;
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let result = async {
        let response = sender.send_request(request).await.map_err(transport)?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        if let Some(length) = response
            .headers()
            .get("content-length")
            .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
            && length > max_body
        {
            return Err(too_large(max_body));
        }
        let mut body = response.into_body();
        let mut bytes = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(transport)?;
            if let Some(data) = frame.data_ref() {
                if bytes.len() + data.len() > max_body {
                    return Err(too_large(max_body));
                }
                bytes.extend_from_slice(data);
            }
        }
        Ok(HttpResponse {
            status,
            headers,
            body: bytes,
        })
    }
    .await;
    driver.abort();
    result
}

fn too_large(max: usize) -> HttpError {
    error(
        HttpErrorKind::TooLarge,
        format!("the response body is larger than the limit of {max} bytes"),
    )
}

/// Trusted roots: the system's (`SSL_CERT_FILE`, `SSL_CERT_DIR` or the
/// distribution's bundle), read once.
fn tls_connector() -> Result<TlsConnector, HttpError> {
    static CONNECTOR: OnceLock<Result<TlsConnector, String>> = OnceLock::new();
    CONNECTOR
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            let mut roots = rustls::RootCertStore::empty();
            // A bundle may hold certificates rustls cannot use; skip those.
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(match found.errors.first() {
                    Some(err) => format!("no trusted CA certificate could be read: {err}"),
                    None => "no trusted CA bundle found (set SSL_CERT_FILE)".to_owned(),
                });
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .with_root_certificates(roots)
                .with_no_client_auth();
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            Ok(TlsConnector::from(Arc::new(config)))
        })
        .clone()
        .map_err(|e| error(HttpErrorKind::Transport, e))
}

/// The address a connection would use, for messages.
pub fn first_ip(addrs: &[SocketAddr]) -> Option<IpAddr> {
    addrs.first().map(SocketAddr::ip)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_line_keeps_path_and_query_only() {
        assert_eq!(path_and_query("http://h:1/a/b?c=d#f"), "/a/b?c=d");
        assert_eq!(path_and_query("http://h:1"), "/");
        assert_eq!(path_and_query("http://h:1?x=1"), "/?x=1");
    }
}

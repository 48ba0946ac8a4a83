//! How the CLI reaches a host: HTTP or HTTPS (rustls with the ring
//! provider, the same stack the server uses) over one pooled hyper client,
//! with a bearer token on every request. Owns the connection — the server
//! URL, which certificates to trust, the token — not what is asked over
//! it (`remote`).
//!
//! An `https://` server is trusted through, in order: the PEM certificates
//! given (`--certificate-authority`, or a kubeconfig's
//! `certificate-authority(-data)`), else the system's CA bundle
//! (`SSL_CERT_FILE`, `SSL_CERT_DIR`, or the usual Linux locations, through
//! `rustls-native-certs`). With
//! `--insecure-skip-tls-verify` nothing is checked, as with kubectl.
//!
//! A server certificate that is itself one of the given certificates is
//! accepted when it names the server, like kubectl (Go) does: a
//! self-signed certificate made with `openssl req -x509` says `CA:TRUE`,
//! which webpki refuses for a server (`CaUsedAsEndEntity`), yet it is what
//! `setpoint serve --tls-cert` is usually given. Such a pinned certificate
//! is trusted as given: its validity dates are not checked.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

use anyhow::{Context, anyhow, bail};
use axum::body::Bytes;
use axum::http::{HeaderValue, Method, Request, Response, Uri, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client as Pool;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::{self, DigitallySignedStruct, SignatureScheme};

/// Which server certificates to accept over HTTPS.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Trust {
    /// Those signed by an authority of the system's CA bundle.
    #[default]
    System,
    /// Those signed by one of these PEM certificates (a self-signed server
    /// certificate is its own authority).
    Pem(Vec<u8>),
    /// Any certificate at all: the connection is encrypted, not
    /// authenticated.
    Insecure,
}

/// One host's API: its base URL, a connection pool and the token.
#[derive(Clone)]
pub struct Transport {
    base: String,
    pool: Pool<Connector, Full<Bytes>>,
    token: Option<HeaderValue>,
}

impl Transport {
    /// A transport for the API at `server` (`http://…` or `https://…`).
    /// The trust is only read (and must be usable) for `https://`.
    pub fn new(server: &str, trust: &Trust, token: Option<&str>) -> anyhow::Result<Self> {
        let base = server.trim_end_matches('/').to_owned();
        let uri: Uri = base
            .parse()
            .with_context(|| format!("the server address {server:?} is not a URL"))?;
        let tls = match uri.scheme_str() {
            Some("http") => None,
            Some("https") => Some(TlsConnector::from(Arc::new(client_config(trust)?))),
            _ => bail!("the server address {server:?} must start with http:// or https://"),
        };
        let token = token
            .map(|t| {
                let mut value = HeaderValue::from_str(&format!("Bearer {t}"))
                    .context("the token is not a valid HTTP header value")?;
                value.set_sensitive(true);
                anyhow::Ok(value)
            })
            .transpose()?;
        let pool = Pool::builder(TokioExecutor::new()).build(Connector { tls });
        Ok(Self { base, pool, token })
    }

    /// Send a request for `path_and_query` (e.g. `/apis?x=1`) with an
    /// optional JSON body; the answer's body is left to stream.
    pub async fn send(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<Response<Incoming>> {
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{path_and_query}", self.base))
            .header(header::ACCEPT, "application/json");
        if let Some(token) = &self.token {
            request = request.header(header::AUTHORIZATION, token.clone());
        }
        let body = match body {
            Some(value) => {
                request = request.header(header::CONTENT_TYPE, "application/json");
                Full::new(Bytes::from(serde_json::to_vec(value)?))
            }
            None => Full::new(Bytes::new()),
        };
        let request = request.body(body).context("building the request")?;
        self.pool.request(request).await.map_err(|e| {
            let hint = if refused(&e) {
                "; is `setpoint serve` running?"
            } else {
                ""
            };
            anyhow!(
                "cannot reach the Setpoint API at {} ({}){hint}",
                self.base,
                error_chain(&e)
            )
        })
    }
}

/// An error and its causes on one line: a TLS failure is only in the
/// innermost cause (`invalid peer certificate: UnknownIssuer`).
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Whether nothing listens at the address (rather than, say, TLS failing).
fn refused(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(err);
    while let Some(e) = source {
        if e.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        source = e.source();
    }
    false
}

fn client_config(trust: &Trust) -> anyhow::Result<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .context("setting up TLS")?;
    let mut config = match trust {
        Trust::Insecure => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth(),
        Trust::Pem(pem) => {
            let roots = Arc::new(roots(pem, "the certificate authority")?);
            let chain = rustls::client::WebPkiServerVerifier::builder_with_provider(
                roots,
                provider.clone(),
            )
            .build()
            .context("setting up certificate verification")?;
            let pinned = CertificateDer::pem_slice_iter(pem)
                .filter_map(Result::ok)
                .collect();
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(ChainOrPinned { chain, pinned }))
                .with_no_client_auth()
        }
        Trust::System => {
            let found = rustls_native_certs::load_native_certs();
            let mut store = rustls::RootCertStore::empty();
            // A bundle may hold certificates rustls cannot use; skip those.
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                let why = found.errors.first().map_or_else(
                    || "no system CA bundle found".to_owned(),
                    |e| format!("the system's CA certificates could not be read ({e})"),
                );
                bail!("{why}: give the host's certificate with --certificate-authority");
            }
            builder.with_root_certificates(store).with_no_client_auth()
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

fn roots(pem: &[u8], what: &str) -> anyhow::Result<rustls::RootCertStore> {
    let mut store = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| anyhow!("{what} is not PEM: {e}"))?;
        // A bundle may hold certificates rustls cannot use; skip those.
        let _ = store.add(cert);
    }
    if store.is_empty() {
        bail!("{what} holds no usable PEM certificate");
    }
    Ok(store)
}

/// Verifies the server's chain against the given certificates, or accepts
/// a server certificate that is exactly one of them and names the server
/// (see the module docs).
#[derive(Debug)]
struct ChainOrPinned {
    chain: Arc<rustls::client::WebPkiServerVerifier>,
    pinned: Vec<CertificateDer<'static>>,
}

impl rustls::client::danger::ServerCertVerifier for ChainOrPinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        let chained = self.chain.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        );
        match chained {
            Err(err)
                if self
                    .pinned
                    .iter()
                    .any(|p| p.as_ref() == end_entity.as_ref()) =>
            {
                let parsed =
                    rustls::server::ParsedCertificate::try_from(end_entity).map_err(|_| err)?;
                rustls::client::verify_server_name(&parsed, server_name)?;
                Ok(rustls::client::danger::ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.chain.supported_verify_schemes()
    }
}

/// Accepts every server certificate (`--insecure-skip-tls-verify`), while
/// still checking that the handshake is signed by the certificate's key.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Opens TCP connections, with a TLS handshake for `https://`.
#[derive(Clone)]
struct Connector {
    tls: Option<TlsConnector>,
}

type Connecting = Pin<Box<dyn Future<Output = io::Result<TokioIo<Stream>>> + Send>>;

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<Stream>;
    type Error = io::Error;
    type Future = Connecting;

    fn poll_ready(&mut self, _: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Connecting {
        let tls = self.tls.clone();
        Box::pin(async move {
            let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, what.to_owned());
            let host = uri
                .host()
                .ok_or_else(|| invalid("the server address has no host"))?
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned();
            let https = uri.scheme_str() == Some("https");
            let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
            let tcp = TcpStream::connect((host.as_str(), port)).await?;
            tcp.set_nodelay(true)?;
            let stream = match (https, tls) {
                (false, _) => Stream::Plain(tcp),
                (true, Some(tls)) => {
                    let name = ServerName::try_from(host)
                        .map_err(|_| invalid("the server's host is not a valid TLS name"))?;
                    Stream::Tls(Box::new(tls.connect(name, tcp).await?))
                }
                (true, None) => return Err(invalid("HTTPS is not set up for this server")),
            };
            Ok(TokioIo::new(stream))
        })
    }
}

/// A connection, plain or TLS.
enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

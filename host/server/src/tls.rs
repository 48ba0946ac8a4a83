//! TLS for the HTTP API with rustls (ring), when a certificate is given.
//!
//! Owns loading a PEM certificate chain and key, and a listener that
//! completes TLS handshakes concurrently (each bounded by
//! [`HANDSHAKE_TIMEOUT`], so a stalled client holds up no one) before
//! handing connections to the HTTP server. Does not own authentication:
//! TLS protects tokens on the wire, it does not replace them.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::server::TlsStream;

/// How long a client may take to complete its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Completed handshakes waiting for the server to take them.
const ACCEPT_BACKLOG: usize = 64;

/// The certificate or key could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A PEM file could not be read or holds nothing usable.
    #[error("{path}: {message}")]
    Pem {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// rustls refused the certificate and key.
    #[error("the certificate and key do not make a TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// A server configuration from a PEM certificate chain and a PEM private key
/// (PKCS#8, PKCS#1 or SEC1), offering HTTP/1.1.
pub fn load(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, Error> {
    let pem_error = |path: &Path, message: String| Error::Pem {
        path: path.display().to_string(),
        message,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| pem_error(cert, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| pem_error(cert, e.to_string()))?;
    if certs.is_empty() {
        return Err(pem_error(cert, "no certificate found".into()));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| pem_error(key, e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A listener yielding connections whose TLS handshake has completed.
pub struct TlsListener {
    connections: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
    acceptor: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    /// Accept on `tcp` and run each handshake on its own task.
    pub fn new(tcp: TcpListener, config: Arc<rustls::ServerConfig>) -> std::io::Result<Self> {
        let local = tcp.local_addr()?;
        let (tx, connections) = mpsc::channel(ACCEPT_BACKLOG);
        let tls = TlsAcceptor::from(config);
        let acceptor = tokio::spawn(async move {
            loop {
                let (stream, peer) = match tcp.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        tracing::warn!(error = %e, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let tls = tls.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(stream)).await {
                        Ok(Ok(stream)) => {
                            let _ = tx.send((stream, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(Self {
            connections,
            local,
            acceptor,
        })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.connections.recv().await {
            Some(connection) => connection,
            // The accepting task is gone: nothing will ever connect again.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

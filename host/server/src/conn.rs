//! Connections: the accept loop, and what bounds one connection whatever
//! its client does.
//!
//! - **Headers** must arrive within [`HEADER_READ_TIMEOUT`] (hyper's
//!   header read timeout), and fit in [`MAX_BUF_BYTES`], hyper's read and
//!   write buffer per connection.
//! - **A client that stops reading** a response is disconnected once its
//!   connection could write nothing for [`WRITE_STALL_TIMEOUT`], and at
//!   once when a watch on it falls too far behind ([`Connection::cut`]):
//!   ending a response cleanly would need the client to read the rest.
//! - **Stopping**: the loop stops accepting when `shutdown` resolves and
//!   returns once every connection has finished its requests (hyper's
//!   graceful shutdown); the caller bounds how long that may take.
//!
//! Request bodies are read before a request is admitted (see `guard`),
//! under a deadline of their own.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

/// How long a client may take to send a request's headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a connection may have a response waiting that its client does
/// not read (no byte written) before it is closed.
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Hyper's buffer per connection: the largest request head accepted, and
/// what it queues of a response before it waits for the client.
pub const MAX_BUF_BYTES: usize = 256 << 10;

/// Connections closed because their client stopped reading
/// (`setpoint_connections_closed_stalled_total`).
pub(super) static CLOSED_STALLED: AtomicU64 = AtomicU64::new(0);

/// What a handler may do to the connection its request came on: close it
/// without ending the response, for a client that no longer reads.
#[derive(Clone)]
pub(super) struct Connection {
    state: Arc<State>,
}

struct State {
    cut: Notify,
    /// When the connection last could not write (ms since `epoch`; 0:
    /// it is not waiting on its client).
    blocked_since: AtomicU64,
    epoch: tokio::time::Instant,
}

impl Connection {
    /// Close the connection at once, whatever it is doing.
    pub(super) fn cut(&self) {
        self.state.cut.notify_one();
    }
}

/// The connection's socket, noting when a write has to wait for the client.
struct Watched<I> {
    io: I,
    state: Arc<State>,
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<I> Watched<I> {
    fn note<T>(&self, poll: Poll<T>) -> Poll<T> {
        match poll {
            Poll::Pending => {
                let now = self.state.epoch.elapsed().as_millis() as u64 + 1;
                let _ = self.state.blocked_since.compare_exchange(
                    0,
                    now,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
            Poll::Ready(_) => self.state.blocked_since.store(0, Ordering::Relaxed),
        }
        poll
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.io).poll_write(cx, buf);
        self.note(poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.note(poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let poll = Pin::new(&mut self.io).poll_flush(cx);
        self.note(poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Serve `router` on `listener` until `shutdown` resolves, then until every
/// connection has finished; see the module docs for the bounds.
pub(super) async fn serve<L>(
    mut listener: L,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    L: axum::serve::Listener,
{
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (io, _peer) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let state = Arc::new(State {
            cut: Notify::new(),
            blocked_since: AtomicU64::new(0),
            epoch: tokio::time::Instant::now(),
        });
        let connection = Connection {
            state: state.clone(),
        };
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<_>| {
            request.extensions_mut().insert(connection.clone());
            let mut router = router.clone();
            tower_service::Service::call(&mut router, request)
        });
        let served = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_READ_TIMEOUT)
            .max_buf_size(MAX_BUF_BYTES)
            .serve_connection(
                TokioIo::new(Watched {
                    io,
                    state: state.clone(),
                }),
                service,
            );
        let served = graceful.watch(served);
        tokio::spawn(async move {
            let mut served = std::pin::pin!(served);
            let mut check = tokio::time::interval(WRITE_STALL_TIMEOUT / 4);
            loop {
                tokio::select! {
                    result = &mut served => {
                        if let Err(err) = result {
                            tracing::debug!(%err, "connection ended with an error");
                        }
                        return;
                    }
                    () = state.cut.notified() => return,
                    _ = check.tick() => {
                        let since = state.blocked_since.load(Ordering::Relaxed);
                        let now = state.epoch.elapsed().as_millis() as u64 + 1;
                        if since != 0
                            && now.saturating_sub(since) > WRITE_STALL_TIMEOUT.as_millis() as u64
                        {
                            CLOSED_STALLED.fetch_add(1, Ordering::Relaxed);
                            tracing::info!("closing a connection whose client has read nothing for {} s", WRITE_STALL_TIMEOUT.as_secs());
                            return;
                        }
                    }
                }
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

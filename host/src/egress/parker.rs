//! Letting a reconcile's worker go while its requests wait on the
//! network ([`Parker::park`]), and ending those waits when the object
//! changes under them ([`Parker::supersede`]).

use std::sync::Arc;

use crate::contract::{HttpError, HttpErrorKind, HttpRequest};

/// Lets a reconcile's worker go while its requests wait: the worker
/// hands the rest of the turn to a task of its own and takes the next key,
/// so keys waiting for a busy destination never hold workers that keys of
/// other destinations need. [`Parker::default`] tells nobody.
#[derive(Clone, Default)]
pub struct Parker(Option<Arc<ParkerState>>);

struct ParkerState {
    parked: std::sync::Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    superseded: tokio::sync::watch::Sender<bool>,
}

impl std::fmt::Debug for Parker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Parker")
    }
}

impl Parker {
    /// A parker, and what it tells: the receiver resolves at the first
    /// [`Parker::park`], or when every clone is dropped.
    ///
    /// ```
    /// use setpoint::egress::Parker;
    ///
    /// let (parker, mut parked) = Parker::new();
    /// assert!(parked.try_recv().is_err());
    /// parker.park();
    /// parker.park();
    /// assert!(parked.try_recv().is_ok());
    /// ```
    pub fn new() -> (Self, tokio::sync::oneshot::Receiver<()>) {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        (
            Self(Some(Arc::new(ParkerState {
                parked: std::sync::Mutex::new(Some(sender)),
                superseded: tokio::sync::watch::Sender::new(false),
            }))),
            receiver,
        )
    }

    /// Whether [`Parker::park`] was called.
    pub fn is_parked(&self) -> bool {
        self.0.as_ref().is_some_and(|state| {
            state
                .parked
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_none()
        })
    }

    /// The reconcile is about to wait on the network.
    pub fn park(&self) {
        if let Some(state) = &self.0
            && let Some(sender) = state
                .parked
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
        {
            let _ = sender.send(());
        }
    }

    /// The object changed while its reconcile waits: what it waits for was
    /// decided on an older version, so its waits end now, unsent (and the
    /// object is reconciled again at once).
    ///
    /// ```
    /// use setpoint::egress::Parker;
    ///
    /// let (parker, _parked) = Parker::new();
    /// assert!(!parker.is_superseded());
    /// parker.supersede();
    /// assert!(parker.is_superseded());
    /// ```
    pub fn supersede(&self) {
        if let Some(state) = &self.0 {
            state.superseded.send_replace(true);
        }
    }

    /// Whether [`Parker::supersede`] was called.
    pub fn is_superseded(&self) -> bool {
        self.0.as_ref().is_some_and(|s| *s.superseded.borrow())
    }

    /// Until [`Parker::supersede`] is called (never, for a default parker).
    async fn superseded(&self) {
        match &self.0 {
            Some(state) => {
                let mut watch = state.superseded.subscribe();
                let _ = watch.wait_for(|s| *s).await;
            }
            None => std::future::pending().await,
        }
    }

    /// `wait`, unless the object changes first: then a `throttled` answer
    /// saying so.
    pub(super) async fn unless_superseded<T>(
        &self,
        what: &HttpRequest,
        wait: impl std::future::Future<Output = T>,
    ) -> Result<T, HttpError> {
        tokio::select! {
            biased;
            () = self.superseded() => Err(HttpError {
                kind: HttpErrorKind::Throttled,
                message: format!(
                    "{} {}: not sent: the object changed while the request waited",
                    what.method, what.url
                ),
            }),
            done = wait => Ok(done),
        }
    }
}

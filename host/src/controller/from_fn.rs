//! Reconcilers made of a manifest and a closure ([`from_fn`]): for an
//! embedder's small in-process controllers and for tests, without a type
//! and a trait implementation for each.

use std::sync::Arc;

use crate::contract::{CacheView, Manifest, ReconcileError, Reconciler, Request, Response};

/// A [`Reconciler`] that calls a closure; see [`from_fn`].
pub struct FnReconciler<F> {
    manifest: Manifest,
    reconcile: F,
    inline: bool,
}

/// A reconciler of `manifest`'s kind whose reconcile is `reconcile`.
///
/// The closure is called from several threads at once (never for the same
/// object): state it keeps goes behind atomics or a lock, and like any
/// reconciler it must not block on I/O.
///
/// ```
/// use std::sync::Arc;
/// use serde_json::json;
/// use setpoint::controller::{Manifest, Response, from_fn};
/// use setpoint::object::KindRef;
///
/// let copier = from_fn(
///     Manifest::new("copier", "1.0.0", KindRef::new("example.dev/v1", "Copy")),
///     |request, _cache| {
///         Ok(Response {
///             status: Some(json!({"copied": request.object["spec"]["value"]})),
///             ..Default::default()
///         })
///     },
/// );
/// # fn add(_: Arc<dyn setpoint::controller::Reconciler>) {}
/// add(Arc::new(copier)); // host.add_reconciler(Arc::new(copier)).await?
/// ```
pub fn from_fn<F>(manifest: Manifest, reconcile: F) -> FnReconciler<F>
where
    F: Fn(&Request, &Arc<dyn CacheView>) -> Result<Response, ReconcileError>
        + Send
        + Sync
        + 'static,
{
    FnReconciler {
        manifest,
        reconcile,
        inline: false,
    }
}

impl<F> FnReconciler<F> {
    /// Run the closure on the async task that took the key (see
    /// [`Reconciler::runs_inline`]): only for closures that return within
    /// microseconds.
    #[must_use]
    pub fn inline(mut self) -> Self {
        self.inline = true;
        self
    }
}

impl<F> Reconciler for FnReconciler<F>
where
    F: Fn(&Request, &Arc<dyn CacheView>) -> Result<Response, ReconcileError>
        + Send
        + Sync
        + 'static,
{
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn reconcile(
        &self,
        request: &Request,
        cache: &Arc<dyn CacheView>,
    ) -> Result<Response, ReconcileError> {
        (self.reconcile)(request, cache)
    }

    fn runs_inline(&self) -> bool {
        self.inline
    }
}

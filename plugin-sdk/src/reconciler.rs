//! The [`Reconciler`] trait a plugin implements.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{Ctx, Error, Manifest, Object, Response};

/// A reconciler: drives objects of one kind towards their spec.
///
/// Implement it on a unit struct that derives `Default` and export it with
/// [`export_reconciler!`](crate::export_reconciler). Nothing here is specific
/// to WebAssembly: the same implementation can run natively, in-process.
///
/// The rules a reconcile follows (see the crate documentation for why):
/// - it is a pure function of the object, its owned children and
///   [`Ctx::now`]: no clocks, no sleeping, no memory between calls;
/// - it returns the *full* desired state (all children, the whole status);
///   the host writes only what differs, so an object already at its setpoint
///   must produce exactly what is stored, and no events;
/// - it never waits: return [`Response::requeue_after`] instead.
pub trait Reconciler {
    /// The `spec` of the reconciled kind.
    type Spec: DeserializeOwned;
    /// The `status` of the reconciled kind; a missing status parses as
    /// `Default::default()`. Mark the type `#[serde(default)]` so that a
    /// partial status (one written by an older version, say) parses too.
    type Status: Serialize + DeserializeOwned + Default;

    /// Describes the plugin. Called once, at load time.
    fn manifest(&self) -> Manifest;

    /// Looks at one object and says what should be.
    fn reconcile(
        &self,
        object: &Object<Self::Spec, Self::Status>,
        ctx: &Ctx,
    ) -> Result<Response<Self::Status>, Error>;
}

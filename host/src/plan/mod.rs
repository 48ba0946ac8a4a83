//! Plans: what a change would do, before it happens. A manifest to apply
//! (or an object to delete) is written to an in-memory overlay of the
//! store ([`crate::store::OverlayBackend`]) through the same object API,
//! then the host's reconcilers are called on what it changes, with the
//! would-be objects and children, in the same sandbox with the same limits,
//! and their responses applied to the overlay by the same code the
//! controllers use; the garbage collector's decisions run over the overlay
//! too. This repeats until nothing more changes (or a bound is reached and
//! a cycle reported).
//!
//! What comes out is a [`Plan`]: every object created, changed or deleted,
//! with its cause; the external writes provider plugins would send (their
//! reads are made, under the same grants, as the real reconcile would make
//! them, through a read-only egress that refuses anything but safe
//! methods); events; and the steps a plan cannot take — a look again after
//! a time, a decision that needs the outcome of an external write — shown
//! as pending, not guessed.
//!
//! # Guarantees
//!
//! - Planning writes nothing to the store: no revision moves and no
//!   watcher wakes, because the only backend written is the overlay.
//! - Planning sends no external write: the egress it uses sends only `GET`,
//!   `HEAD` and `OPTIONS`, and the responses' writes are listed, never
//!   performed.
//! - Bad input is reported per object ([`PlanError`]) and the rest is
//!   still planned.
//!
//! # Caveats
//!
//! - A plan is of *now*: a change that lands between the plan and the
//!   apply makes them differ, and reconciles that depend on time (a
//!   `requeue_after`) are shown as pending.
//! - A deletion makes the collector list the whole store once (its owner
//!   index), as the running collector does when it starts.

mod cascade;
mod net;
mod render;
mod report;
mod view;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use render::{RenderOptions, render};
pub use report::{
    Action, Cause, Change, ExternalRequest, ObjectRef, PendingStep, Plan, PlanError, PlannedEvent,
};

use crate::api::{Api, Propagation};
use crate::controller::pool::CallPool;
use crate::egress::Egress;
use crate::informer::Informers;

/// Calls of one reconciler on one object after which a plan stops calling
/// it and reports a cycle: a converging reconciler needs a handful (create
/// children, see them, write status).
pub const MAX_RECONCILES_PER_OBJECT: usize = 16;

/// Reconciler calls one plan makes at most.
pub const MAX_RECONCILES: usize = 20_000;

/// What to plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Request {
    /// Apply these objects as `setpoint apply` does: create each, or update
    /// the live one with the manifest's fields.
    Apply(Vec<Document>),
    /// Delete one object.
    Delete(DeleteTarget),
}

/// One object of a manifest, with where it came from (for errors).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Document {
    /// Where the object came from (`web.yaml#2`).
    #[serde(default)]
    pub origin: String,
    /// The object.
    pub object: Value,
}

/// The object a deletion plan deletes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteTarget {
    /// Its `apiVersion`.
    pub api_version: String,
    /// Its kind.
    pub kind: String,
    /// Its namespace (namespaced kinds; default `default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// `Background` (the default), `Foreground` or `Orphan`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub propagation_policy: Option<String>,
}

impl DeleteTarget {
    fn propagation(&self) -> Result<Option<Propagation>, Error> {
        self.propagation_policy
            .as_deref()
            .map(|p| {
                Propagation::parse(p).ok_or_else(|| {
                    Error::BadRequest(format!(
                        "propagationPolicy {p:?}: expected Background, Foreground or Orphan"
                    ))
                })
            })
            .transpose()
    }
}

/// Why no plan could be made at all (per-object problems are part of the
/// plan instead, see [`PlanError`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The request itself is unusable.
    #[error("{0}")]
    BadRequest(String),
    /// The store could not be read.
    #[error(transparent)]
    Api(#[from] crate::api::Error),
    /// The store could not be read.
    #[error(transparent)]
    Store(#[from] crate::store::Error),
}

/// One running controller, as a plan calls it.
pub(crate) use crate::controller::PlanTarget as Target;

/// What a plan runs with: the host's API, caches, egress, call pool and
/// controllers.
pub(crate) struct Context {
    pub api: Api,
    pub informers: Informers,
    /// Read-only ([`Egress::read_only`]).
    pub egress: Egress,
    pub pool: CallPool,
    pub targets: Vec<Target>,
}

/// Plan `request` against the host's current state.
pub(crate) async fn run(context: &Context, request: Request) -> Result<Plan, Error> {
    debug_assert!(context.egress.is_read_only());
    let mut cascade = cascade::Cascade::new(context).await?;
    match request {
        Request::Apply(documents) => {
            if documents.is_empty() {
                return Err(Error::BadRequest("the manifest holds no objects".into()));
            }
            cascade.apply_documents(&documents).await;
        }
        Request::Delete(target) => {
            let propagation = target.propagation()?;
            cascade.delete(&target, propagation).await?;
        }
    }
    cascade.run_to_fixpoint().await;
    cascade.finish().await
}

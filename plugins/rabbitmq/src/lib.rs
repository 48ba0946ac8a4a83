//! `rabbitmq`: what the seven RabbitMQ topology plugins share. Each plugin
//! (`rabbitmq-vhost`, `rabbitmq-queue`, ...) reconciles one kind of
//! `rabbitmq.setpoint.dev/v1` and is a few lines over this crate:
//!
//! - [`broker`]: the management API (the broker an object names, its
//!   credentials from a Secret, URL encoding, what an answer means);
//! - [`decide`]: the decisions as pure functions, one [`decide::decide`]
//!   for every kind over what a kind says about itself ([`Topology`]);
//! - [`reconcile`]: observe, decide, ask, report, the same for every kind;
//! - one module per kind ([`vhost`], [`queue`], [`exchange`], [`binding`],
//!   [`user`], [`permission`], [`policy`]): its spec, its definition, its
//!   requests and how the broker's answers read.
//!
//! The behaviour follows RabbitMQ's messaging-topology-operator: the
//! properties a queue or exchange cannot change in place are reported
//! (`ImmutableChange`) unless the object opts into re-creating it, queues
//! are retained on deletion unless told otherwise, and objects wait
//! (`VhostMissing`, ...) for what they depend on.

pub mod binding;
pub mod broker;
pub mod decide;
pub mod exchange;
pub mod permission;
pub mod policy;
pub mod queue;
pub mod reconcile;
pub mod user;
pub mod vhost;

#[cfg(test)]
mod tests;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use setpoint_plugin_sdk::{Condition, Time};

pub use decide::{Diff, Failure, Memory, Step, Topology};

/// The API version of every kind.
pub const API_VERSION: &str = "rabbitmq.setpoint.dev/v1";

/// Which broker an object lives in, and the credentials to manage it with.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BrokerRef {
    /// The management API's base URL, e.g. http://127.0.0.1:15672 (granted to the plugin by a PluginGrant).
    pub url: String,
    /// A Secret in the object's namespace with the keys username and password (type kubernetes.io/basic-auth), sent as HTTP Basic credentials by the host.
    pub credentials_secret: String,
}

/// What to do with the broker's object when the Setpoint object is deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DeletionPolicy {
    /// Leave it in the broker (its messages stay).
    #[default]
    Retain,
    /// Delete it from the broker.
    Delete,
}

/// The resync period's default, in seconds.
pub fn default_resync() -> u64 {
    30
}

/// The default vhost of objects that name none.
pub fn default_vhost() -> String {
    "/".into()
}

/// What an object of any kind reports: `observed` is the kind's view of
/// the broker's object (`null`: there is none, or it was not seen).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
#[serde(bound(serialize = "O: Serialize", deserialize = "O: DeserializeOwned"))]
pub struct Status<O> {
    /// The `metadata.generation` this status was computed from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// What the broker had at the last look.
    pub observed: Option<O>,
    /// Writes for this generation wait until then after the broker refused
    /// one or did not show what it accepted (`null`: no wait).
    pub writes_held_until: Option<Time>,
    /// `Ready`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl<O> Default for Status<O> {
    fn default() -> Self {
        Self {
            observed_generation: None,
            observed: None,
            writes_held_until: None,
            conditions: Vec::new(),
        }
    }
}

/// The columns every kind prints after its own: `Ready` and its reason.
pub fn ready_columns(
    definition: setpoint_plugin_sdk::Definition,
) -> setpoint_plugin_sdk::Definition {
    use setpoint_plugin_sdk::PrinterColumn;
    definition
        .column(PrinterColumn::condition("Ready", "Ready"))
        .column(PrinterColumn::string(
            "Reason",
            ".status.conditions[?(@.type==\"Ready\")].reason",
        ))
}

/// The plugin crate of one kind: its reconciler type, which implements
/// [`Reconciler`](setpoint_plugin_sdk::Reconciler) with the kind's
/// [`Topology`], its manifest (any HTTP destination and any Secret, the
/// operator's grant narrowing them; the finalizer
/// `rabbitmq.setpoint.dev/<kind>`), and the Wasm export.
///
/// ```text
/// rabbitmq::topology_plugin!(QueueReconciler, rabbitmq::queue::Queue);
/// ```
#[macro_export]
macro_rules! topology_plugin {
    ($reconciler:ident, $topology:ty) => {
        /// The reconciler of the kind; see the crate documentation.
        #[derive(Debug, Default)]
        pub struct $reconciler;

        impl ::setpoint_plugin_sdk::Reconciler for $reconciler {
            type Spec = <$topology as $crate::Topology>::Spec;
            type Status = $crate::Status<<$topology as $crate::Topology>::Observed>;

            fn manifest(&self) -> ::setpoint_plugin_sdk::Manifest {
                $crate::reconcile::manifest::<$topology>(
                    env!("CARGO_PKG_NAME"),
                    env!("CARGO_PKG_VERSION"),
                )
            }

            fn reconcile(
                &self,
                object: &::setpoint_plugin_sdk::Object<Self::Spec, Self::Status>,
                ctx: &::setpoint_plugin_sdk::Ctx,
            ) -> ::core::result::Result<
                ::setpoint_plugin_sdk::Response<Self::Status>,
                ::setpoint_plugin_sdk::Error,
            > {
                $crate::reconcile::reconcile::<$topology>(object, ctx)
            }
        }

        ::setpoint_plugin_sdk::export_reconciler!($reconciler);
    };
}

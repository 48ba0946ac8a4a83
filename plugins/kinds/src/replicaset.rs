//! The ReplicaSet: keeps `spec.replicas` Pods of a template in existence.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use setpoint_plugin_sdk::{Definition, KindRef, LabelSelector, PrinterColumn, Resource, Template};

use crate::API_VERSION;

/// The ReplicaSet kind, for [`Ctx::owned`](setpoint_plugin_sdk::Ctx::owned).
#[derive(Debug)]
pub struct ReplicaSet;

impl Resource for ReplicaSet {
    type Spec = ReplicaSetSpec;
    type Status = ReplicaSetStatus;
    fn kind() -> KindRef {
        kind()
    }
}

/// The ReplicaSet kind.
pub fn kind() -> KindRef {
    KindRef::new(API_VERSION, "ReplicaSet")
}

/// The ReplicaSet kind's definition.
pub fn definition() -> Definition {
    Definition::of::<ReplicaSetSpec, ReplicaSetStatus>(kind())
        .short_name("rs")
        .description("Keeps a number of identical pods, named <replicaset>-<index>, in existence.")
        .column(
            PrinterColumn::integer("Desired", ".spec.replicas")
                .description("Number of pods asked for."),
        )
        .column(
            PrinterColumn::integer("Current", ".status.replicas")
                .description("Number of pods that exist."),
        )
        .column(
            PrinterColumn::integer("Ready", ".status.readyReplicas")
                .description("Number of pods that are ready."),
        )
}

/// What a ReplicaSet asks for.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSetSpec {
    /// How many pods to keep.
    #[serde(default = "one")]
    pub replicas: u32,
    /// Labels every pod of this replica set carries; must match the template's labels.
    pub selector: LabelSelector,
    /// The pods to create.
    pub template: Template,
}

fn one() -> u32 {
    1
}

/// The observed state, written by the replicaset plugin.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct ReplicaSetStatus {
    /// Number of owned pods that exist and are not being deleted.
    pub replicas: u32,
    /// Number of those pods whose Ready condition is True.
    pub ready_replicas: u32,
    /// Number of available pods (for now, the ready ones).
    pub available_replicas: u32,
    /// The metadata.generation this status was computed from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

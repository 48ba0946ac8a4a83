//! The simulated Pod: `podsim` plays its node agent.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use setpoint_plugin_sdk::{Condition, Definition, KindRef, PrinterColumn, Resource, Time};

use crate::API_VERSION;

/// The Pod kind, for [`Ctx::owned`](setpoint_plugin_sdk::Ctx::owned).
#[derive(Debug)]
pub struct Pod;

impl Resource for Pod {
    type Spec = PodSpec;
    type Status = PodStatus;
    fn kind() -> KindRef {
        kind()
    }
}

/// The Pod kind.
pub fn kind() -> KindRef {
    KindRef::new(API_VERSION, "Pod")
}

/// The Pod kind's definition.
pub fn definition() -> Definition {
    Definition::of::<PodSpec, PodStatus>(kind())
        .short_name("po")
        .description("A simulated pod: the podsim plugin plays the node agent and moves it from Pending to Running.")
        .column(PrinterColumn::string("Phase", ".status.phase").description("Where the pod is in its lifecycle."))
        .column(PrinterColumn::condition("Ready", "Ready").description("Whether the pod is ready."))
}

/// The fields of a Pod's spec that the simulation uses; everything else in
/// the spec (containers, images, ...) is kept, free-form, and ignored.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct PodSpec {
    /// How long the pod stays Pending before it is Running, in milliseconds.
    #[serde(default = "default_startup_delay_ms")]
    pub startup_delay_ms: u64,
}

fn default_startup_delay_ms() -> u64 {
    1000
}

/// Where a Pod is in its lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Phase {
    /// Accepted, not started yet.
    Pending,
    /// Started and ready.
    Running,
    /// Finished successfully (never set by the simulation).
    Succeeded,
    /// Finished with a failure (never set by the simulation).
    Failed,
    /// Unknown, or a phase this version does not know.
    #[serde(other)]
    Unknown,
}

/// A Pod's observed state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct PodStatus {
    /// Lifecycle phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// When the simulated node accepted the pod; startup is timed from here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// The `Ready` condition.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

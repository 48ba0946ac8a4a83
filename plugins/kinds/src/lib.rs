//! The `demo.setpoint.dev` kinds that more than one example plugin needs:
//! [`pod`] (reconciled by `podsim`, created by `replicaset` and `stack`) and
//! [`replicaset`] (reconciled by `replicaset`, created by `deployment` and
//! `stack`). Each module holds the kind's Rust types and its
//! [`Definition`](setpoint_plugin_sdk::Definition), generated from them,
//! so whichever plugin registers the kind first registers the same thing.

pub mod pod;
pub mod replicaset;

/// The API version of the demo kinds.
pub const API_VERSION: &str = "demo.setpoint.dev/v1";

#[cfg(test)]
mod tests {
    use setpoint_plugin_sdk::serde_json::{self, Value};
    use setpoint_plugin_sdk::testing::definition_differences;

    fn handwritten(json: &str) -> Value {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn the_generated_pod_definition_means_what_the_handwritten_one_did() {
        let generated = super::pod::definition().to_crd();
        let old = handwritten(include_str!("../../podsim/crds/pod.json"));
        assert_eq!(
            definition_differences(&generated, &old),
            Vec::<String>::new()
        );
    }

    #[test]
    fn the_generated_replica_set_definition_means_what_the_handwritten_one_did() {
        let generated = super::replicaset::definition().to_crd();
        let old = handwritten(include_str!("../../replicaset/crds/replicaset.json"));
        assert_eq!(
            definition_differences(&generated, &old),
            Vec::<String>::new()
        );
    }
}

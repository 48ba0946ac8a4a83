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
    use setpoint_plugin_sdk::serde_json::json;

    #[test]
    fn a_pod_spec_keeps_what_the_simulation_does_not_use_and_defaults_the_delay() {
        let crd = super::pod::definition().to_crd();
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(spec["x-kubernetes-preserve-unknown-fields"], true);
        assert_eq!(spec["properties"]["startupDelayMs"]["default"], 1000);
        assert_eq!(crd["spec"]["names"]["shortNames"], json!(["po"]));
    }

    #[test]
    fn a_replica_set_needs_a_selector_and_a_template_and_defaults_to_one_replica() {
        let crd = super::replicaset::definition().to_crd();
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(spec["required"], json!(["selector", "template"]));
        assert_eq!(spec["properties"]["replicas"]["default"], 1);
        assert_eq!(
            spec["properties"]["selector"]["properties"]["matchLabels"]["minProperties"],
            1
        );
    }
}

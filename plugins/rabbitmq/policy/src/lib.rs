//! `rabbitmq-policy`: the provider plugin of `Policy` (`rabbitmq.setpoint.dev/v1`),
//! a policy in a vhost: `PUT /api/policies/{vhost}/{name}` when absent or different, removed with the object; waits (`VhostMissing`) for its vhost.
//!
//! Everything but the export lives in the shared `rabbitmq` crate
//! (`rabbitmq::policy` for the kind, `rabbitmq::reconcile` for the rest),
//! because one plugin reconciles one kind and the seven kinds decide alike.

rabbitmq::topology_plugin!(PolicyReconciler, rabbitmq::policy::Policy);

#[cfg(test)]
mod tests {
    use setpoint_plugin_sdk::Reconciler;

    use super::*;

    #[test]
    fn the_manifest_asks_for_any_broker_and_secret_and_brings_its_definition() {
        let manifest = PolicyReconciler.manifest();
        assert_eq!(manifest.name, "rabbitmq-policy");
        assert_eq!(manifest.reconciles.kind, "Policy");
        assert_eq!(
            manifest.finalizer.as_deref(),
            Some("rabbitmq.setpoint.dev/policy")
        );
        assert_eq!(manifest.destinations, ["http://*:*", "https://*:*"]);
        assert_eq!(manifest.secrets, ["*"]);
        assert_eq!(manifest.definitions.len(), 1);
        assert_eq!(manifest.definitions[0]["spec"]["names"]["kind"], "Policy");
    }
}

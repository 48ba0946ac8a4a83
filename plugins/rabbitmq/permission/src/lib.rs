//! `rabbitmq-permission`: the provider plugin of `Permission` (`rabbitmq.setpoint.dev/v1`),
//! a user's configure/write/read permissions in a vhost: set with `PUT /api/permissions/{vhost}/{user}` once both exist (until then `UserMissing` / `VhostMissing`), restored when changed in the broker, removed with the object.
//!
//! Everything but the export lives in the shared `rabbitmq` crate
//! (`rabbitmq::permission` for the kind, `rabbitmq::reconcile` for the rest),
//! because one plugin reconciles one kind and the seven kinds decide alike.

rabbitmq::topology_plugin!(PermissionReconciler, rabbitmq::permission::Permission);

#[cfg(test)]
mod tests {
    use setpoint_plugin_sdk::Reconciler;

    use super::*;

    #[test]
    fn the_manifest_asks_for_any_broker_and_secret_and_brings_its_definition() {
        let manifest = PermissionReconciler.manifest();
        assert_eq!(manifest.name, "rabbitmq-permission");
        assert_eq!(manifest.reconciles.kind, "Permission");
        assert_eq!(
            manifest.finalizer.as_deref(),
            Some("rabbitmq.setpoint.dev/permission")
        );
        assert_eq!(manifest.destinations, ["http://*:*", "https://*:*"]);
        assert_eq!(manifest.secrets, ["*"]);
        assert_eq!(manifest.definitions.len(), 1);
        assert_eq!(
            manifest.definitions[0]["spec"]["names"]["kind"],
            "Permission"
        );
    }
}

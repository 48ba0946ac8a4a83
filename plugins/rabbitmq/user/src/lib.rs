//! `rabbitmq-user`: the provider plugin of `User` (`rabbitmq.setpoint.dev/v1`),
//! a RabbitMQ user with its tags and a password from a Secret that the host puts into the request (the plugin never sees it). Whether the broker's password is the Secret's is observed with `GET /api/whoami` sent as the user, so a changed Secret or a password changed in the broker is set again.
//!
//! Everything but the export lives in the shared `rabbitmq` crate
//! (`rabbitmq::user` for the kind, `rabbitmq::reconcile` for the rest),
//! because one plugin reconciles one kind and the seven kinds decide alike.

rabbitmq::topology_plugin!(UserReconciler, rabbitmq::user::User);

#[cfg(test)]
mod tests {
    use setpoint_plugin_sdk::Reconciler;

    use super::*;

    #[test]
    fn the_manifest_asks_for_any_broker_and_secret_and_brings_its_definition() {
        let manifest = UserReconciler.manifest();
        assert_eq!(manifest.name, "rabbitmq-user");
        assert_eq!(manifest.reconciles.kind, "User");
        assert_eq!(
            manifest.finalizer.as_deref(),
            Some("rabbitmq.setpoint.dev/user")
        );
        assert_eq!(manifest.destinations, ["http://*:*", "https://*:*"]);
        assert_eq!(manifest.secrets, ["*"]);
        assert_eq!(manifest.definitions.len(), 1);
        assert_eq!(manifest.definitions[0]["spec"]["names"]["kind"], "User");
    }
}

//! `rabbitmq-vhost`: the provider plugin of `Vhost` (`rabbitmq.setpoint.dev/v1`),
//! a RabbitMQ virtual host: created with `PUT /api/vhosts/{vhost}`, re-created when deleted behind the object's back, and on deletion left in place (`deletionPolicy: Retain`, the default: it holds queues and messages) or deleted (`Delete`).
//!
//! Everything but the export lives in the shared `rabbitmq` crate
//! (`rabbitmq::vhost` for the kind, `rabbitmq::reconcile` for the rest),
//! because one plugin reconciles one kind and the seven kinds decide alike.

rabbitmq::topology_plugin!(VhostReconciler, rabbitmq::vhost::Vhost);

#[cfg(test)]
mod tests {
    use setpoint_plugin_sdk::Reconciler;

    use super::*;

    #[test]
    fn the_manifest_asks_for_any_broker_and_secret_and_brings_its_definition() {
        let manifest = VhostReconciler.manifest();
        assert_eq!(manifest.name, "rabbitmq-vhost");
        assert_eq!(manifest.reconciles.kind, "Vhost");
        assert_eq!(
            manifest.finalizer.as_deref(),
            Some("rabbitmq.setpoint.dev/vhost")
        );
        assert_eq!(manifest.destinations, ["http://*:*", "https://*:*"]);
        assert_eq!(manifest.secrets, ["*"]);
        assert_eq!(manifest.definitions.len(), 1);
        assert_eq!(manifest.definitions[0]["spec"]["names"]["kind"], "Vhost");
    }
}

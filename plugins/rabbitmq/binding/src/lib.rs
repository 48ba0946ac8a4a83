//! `rabbitmq-binding`: the provider plugin of `Binding` (`rabbitmq.setpoint.dev/v1`),
//! a binding from an exchange to a queue or exchange: found at every look among the bindings between its two ends by routing key and arguments (RabbitMQ names it; the plugin never remembers the name), created with `POST` once both ends exist (until then `ExchangeMissing` / `DestinationMissing`), deleted by its `properties_key` with the object.
//!
//! Everything but the export lives in the shared `rabbitmq` crate
//! (`rabbitmq::binding` for the kind, `rabbitmq::reconcile` for the rest),
//! because one plugin reconciles one kind and the seven kinds decide alike.

rabbitmq::topology_plugin!(BindingReconciler, rabbitmq::binding::Binding);

#[cfg(test)]
mod tests {
    use setpoint_plugin_sdk::Reconciler;

    use super::*;

    #[test]
    fn the_manifest_asks_for_any_broker_and_secret_and_brings_its_definition() {
        let manifest = BindingReconciler.manifest();
        assert_eq!(manifest.name, "rabbitmq-binding");
        assert_eq!(manifest.reconciles.kind, "Binding");
        assert_eq!(
            manifest.finalizer.as_deref(),
            Some("rabbitmq.setpoint.dev/binding")
        );
        assert_eq!(manifest.destinations, ["http://*:*", "https://*:*"]);
        assert_eq!(manifest.secrets, ["*"]);
        assert_eq!(manifest.definitions.len(), 1);
        assert_eq!(manifest.definitions[0]["spec"]["names"]["kind"], "Binding");
    }
}

//! `rabbitmq-exchange`: the provider plugin of `Exchange` (`rabbitmq.setpoint.dev/v1`),
//! an exchange in a vhost: declared with `PUT /api/exchanges/{vhost}/{name}`, seen through one list read per vhost, re-declared when deleted behind the object's back; its type, durability, auto-delete and arguments are fixed once declared (`ImmutableChange`, or `recreateOnChange`). Deleted with the object.
//!
//! Everything but the export lives in the shared `rabbitmq` crate
//! (`rabbitmq::exchange` for the kind, `rabbitmq::reconcile` for the rest),
//! because one plugin reconciles one kind and the seven kinds decide alike.

rabbitmq::topology_plugin!(ExchangeReconciler, rabbitmq::exchange::Exchange);

#[cfg(test)]
mod tests {
    use setpoint_plugin_sdk::Reconciler;

    use super::*;

    #[test]
    fn the_manifest_asks_for_any_broker_and_secret_and_brings_its_definition() {
        let manifest = ExchangeReconciler.manifest();
        assert_eq!(manifest.name, "rabbitmq-exchange");
        assert_eq!(manifest.reconciles.kind, "Exchange");
        assert_eq!(
            manifest.finalizer.as_deref(),
            Some("rabbitmq.setpoint.dev/exchange")
        );
        assert_eq!(manifest.destinations, ["http://*:*", "https://*:*"]);
        assert_eq!(manifest.secrets, ["*"]);
        assert_eq!(manifest.definitions.len(), 1);
        assert_eq!(manifest.definitions[0]["spec"]["names"]["kind"], "Exchange");
    }
}

//! `rabbitmq-queue`: the provider plugin of `Queue` (`rabbitmq.setpoint.dev/v1`),
//! a queue in a vhost: declared with `PUT /api/queues/{vhost}/{name}`, seen through one list read per vhost shared by all its queues, re-declared when deleted behind the object's back. What RabbitMQ cannot change in place is reported (`ImmutableChange`) or, with `recreateOnChange`, the queue is deleted and declared again. On deletion it stays with its messages (`Retain`, the default, said in a `Retained` event) or is deleted (`Delete`).
//!
//! Everything but the export lives in the shared `rabbitmq` crate
//! (`rabbitmq::queue` for the kind, `rabbitmq::reconcile` for the rest),
//! because one plugin reconciles one kind and the seven kinds decide alike.

rabbitmq::topology_plugin!(QueueReconciler, rabbitmq::queue::Queue);

#[cfg(test)]
mod tests {
    use setpoint_plugin_sdk::Reconciler;

    use super::*;

    #[test]
    fn the_manifest_asks_for_any_broker_and_secret_and_brings_its_definition() {
        let manifest = QueueReconciler.manifest();
        assert_eq!(manifest.name, "rabbitmq-queue");
        assert_eq!(manifest.reconciles.kind, "Queue");
        assert_eq!(
            manifest.finalizer.as_deref(),
            Some("rabbitmq.setpoint.dev/queue")
        );
        assert_eq!(manifest.destinations, ["http://*:*", "https://*:*"]);
        assert_eq!(manifest.secrets, ["*"]);
        assert_eq!(manifest.definitions.len(), 1);
        assert_eq!(manifest.definitions[0]["spec"]["names"]["kind"], "Queue");
    }
}

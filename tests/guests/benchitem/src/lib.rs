//! `benchitem`: the whole-loop benchmark's status writer as a Wasm plugin
//! (`cargo bench -p setpoint --bench loop -- 10000 256 wasm`). It does
//! what the benchmark's native reconciler does: copies `spec.value` into
//! `status.value` and records the generation it saw.

use serde::{Deserialize, Serialize};
use setpoint_plugin_sdk::serde_json::{Value, json};
use setpoint_plugin_sdk::{
    Ctx, Error, KindRef, Manifest, Object, Reconciler, Response, export_reconciler,
};

/// An Item's spec.
#[derive(Debug, Deserialize)]
pub struct ItemSpec {
    /// Copied into the status.
    #[serde(default)]
    pub value: i64,
}

/// An Item's status.
#[derive(Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ItemStatus {
    /// The spec's value, as last reconciled.
    pub value: i64,
    /// The generation last reconciled.
    pub observed_generation: i64,
}

/// The Item kind's definition, the same the benchmark registers.
pub fn definition() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "items.bench.setpoint.dev"},
        "spec": {"group": "bench.setpoint.dev", "scope": "Namespaced",
            "names": {"kind": "Item", "plural": "items", "singular": "item", "listKind": "ItemList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"value": {"type": "integer"}}},
                    "status": {"type": "object", "properties": {
                        "value": {"type": "integer"},
                        "observedGeneration": {"type": "integer"}}}}}}}]}
    })
}

/// The reconciler.
#[derive(Debug, Default)]
pub struct BenchItem;

impl Reconciler for BenchItem {
    type Spec = ItemSpec;
    type Status = ItemStatus;

    fn manifest(&self) -> Manifest {
        Manifest::new(
            "benchitem",
            "1.0.0",
            KindRef::new("bench.setpoint.dev/v1", "Item"),
        )
        .definition(definition())
    }

    fn reconcile(
        &self,
        object: &Object<ItemSpec, ItemStatus>,
        _ctx: &Ctx,
    ) -> Result<Response<ItemStatus>, Error> {
        Ok(Response::new().status(ItemStatus {
            value: object.spec.value,
            observed_generation: object.metadata.generation.unwrap_or(0),
        }))
    }
}

export_reconciler!(BenchItem);

//! `flaky`: a test plugin that fails on purpose. `spec.mode` picks how:
//! `transient` always returns a transient error (the host must retry with
//! growing delays), `permanent` a permanent one (the host must report it on
//! the object and stop retrying), anything else succeeds.

use serde::Deserialize;
use setpoint_plugin_sdk::{
    Ctx, Error, KindRef, Manifest, Object, Reconciler, Response, export_reconciler,
};

/// The Flaky spec.
#[derive(Debug, Deserialize)]
pub struct FlakySpec {
    /// `transient`, `permanent` or anything else for success.
    #[serde(default)]
    pub mode: String,
}

const CRD: &str = r#"{
  "apiVersion": "apiextensions.k8s.io/v1",
  "kind": "CustomResourceDefinition",
  "metadata": {"name": "flakies.test.setpoint.dev"},
  "spec": {
    "group": "test.setpoint.dev",
    "scope": "Namespaced",
    "names": {"kind": "Flaky", "plural": "flakies", "singular": "flaky", "listKind": "FlakyList"},
    "versions": [{"name": "v1", "served": true, "storage": true,
      "subresources": {"status": {}},
      "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
  }
}"#;

/// The reconciler.
#[derive(Debug, Default)]
pub struct Flaky;

impl Reconciler for Flaky {
    type Spec = FlakySpec;
    type Status = setpoint_plugin_sdk::serde_json::Value;

    fn manifest(&self) -> Manifest {
        Manifest::new(
            "flaky",
            env!("CARGO_PKG_VERSION"),
            KindRef::new("test.setpoint.dev/v1", "Flaky"),
        )
        .definition_json(CRD)
    }

    fn reconcile(
        &self,
        object: &Object<FlakySpec, setpoint_plugin_sdk::serde_json::Value>,
        _ctx: &Ctx,
    ) -> Result<Response<setpoint_plugin_sdk::serde_json::Value>, Error> {
        match object.spec.mode.as_str() {
            "transient" => Err(Error::transient("not yet: failing on purpose")),
            "permanent" => Err(Error::permanent("cannot ever work: failing on purpose")),
            _ => Ok(Response::new()),
        }
    }
}

export_reconciler!(Flaky);

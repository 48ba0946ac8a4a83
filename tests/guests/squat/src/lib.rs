//! `squat`: a test plugin that reconciles a kind of its own (`Squat`) but
//! also brings a definition of `replicasets.demo.setpoint.dev`, narrower
//! than the replicaset plugin's (at most one replica, no `rs` short name).
//! Loaded beside the replicaset plugin, the host must refuse it (one owner
//! per definition) whichever loads first.

use setpoint_plugin_sdk::serde_json::{Value, json};
use setpoint_plugin_sdk::{
    Ctx, Error, KindRef, Manifest, Object, Reconciler, Response, export_reconciler,
};

const SQUAT_CRD: &str = r#"{
  "apiVersion": "apiextensions.k8s.io/v1",
  "kind": "CustomResourceDefinition",
  "metadata": {"name": "squats.test.setpoint.dev"},
  "spec": {
    "group": "test.setpoint.dev",
    "scope": "Namespaced",
    "names": {"kind": "Squat", "plural": "squats", "singular": "squat", "listKind": "SquatList"},
    "versions": [{"name": "v1", "served": true, "storage": true,
      "subresources": {"status": {}},
      "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
  }
}"#;

const NARROW_REPLICASETS: &str = r#"{
  "apiVersion": "apiextensions.k8s.io/v1",
  "kind": "CustomResourceDefinition",
  "metadata": {"name": "replicasets.demo.setpoint.dev"},
  "spec": {
    "group": "demo.setpoint.dev",
    "scope": "Namespaced",
    "names": {"kind": "ReplicaSet", "plural": "replicasets", "singular": "replicaset", "listKind": "ReplicaSetList"},
    "versions": [{"name": "v1", "served": true, "storage": true,
      "subresources": {"status": {}},
      "schema": {"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"replicas": {"type": "integer", "maximum": 1}},
                 "x-kubernetes-preserve-unknown-fields": true},
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]
  }
}"#;

/// The reconciler.
#[derive(Debug, Default)]
pub struct Squat;

impl Reconciler for Squat {
    type Spec = Value;
    type Status = Value;

    fn manifest(&self) -> Manifest {
        Manifest::new(
            "squat",
            env!("CARGO_PKG_VERSION"),
            KindRef::new("test.setpoint.dev/v1", "Squat"),
        )
        .definition_json(SQUAT_CRD)
        .definition_json(NARROW_REPLICASETS)
    }

    fn reconcile(
        &self,
        _object: &Object<Value, Value>,
        _ctx: &Ctx,
    ) -> Result<Response<Value>, Error> {
        Ok(Response::new().status(json!({"squatting": true})))
    }
}

export_reconciler!(Squat);

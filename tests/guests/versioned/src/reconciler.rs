// The reconciler shared by the `versioned*` test plugins; each crate sets
// `VERSION` and `KIND` and includes this file.

use serde::Deserialize;
use setpoint_plugin_sdk::serde_json::{Value, json};
use setpoint_plugin_sdk::{
    Ctx, Error, KindRef, Manifest, Object, Reconciler, Response, export_reconciler,
};

/// The spec of a versioned test object.
#[derive(Debug, Deserialize)]
pub struct VersionedSpec {
    /// Echoed into the status, to show which spec a version saw.
    #[serde(default)]
    pub n: i64,
    /// Busy work per reconcile (loop iterations), to keep calls in flight.
    #[serde(default)]
    pub work: u64,
}

fn crd(kind: &str) -> Value {
    let lower = kind.to_lowercase();
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{lower}s.test.setpoint.dev")},
        "spec": {
            "group": "test.setpoint.dev",
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": format!("{lower}s"), "singular": lower, "listKind": format!("{kind}List")},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    })
}

/// The reconciler.
#[derive(Debug, Default)]
pub struct Versioned;

impl Reconciler for Versioned {
    type Spec = VersionedSpec;
    type Status = Value;

    fn manifest(&self) -> Manifest {
        Manifest::new(
            "versioned",
            VERSION,
            KindRef::new("test.setpoint.dev/v1", KIND),
        )
        .definition(crd(KIND))
    }

    fn reconcile(&self, object: &Object<VersionedSpec, Value>, _ctx: &Ctx) -> Result<Response<Value>, Error> {
        let mut acc: u64 = 0;
        for i in 0..object.spec.work {
            acc = std::hint::black_box(acc.wrapping_add(i));
        }
        std::hint::black_box(acc);
        Ok(Response::new().status(json!({"version": VERSION, "n": object.spec.n})))
    }
}

export_reconciler!(Versioned);

//! `world01`: a test plugin built directly with wit-bindgen against
//! `setpoint:plugin@0.1.0` (the frozen copy in `wit/0.1/`), as plugins
//! built before effects existed are. It reconciles `World01` objects by
//! writing `{"series": "0.1", "n": spec.n}` into their status, logging
//! through the 0.1 host import.

#[cfg(target_arch = "wasm32")]
mod component {
    wit_bindgen::generate!({ path: "../../../wit/0.1", world: "reconciler" });

    use serde_json::{Value, json};
    use setpoint::plugin::host::{Level, log};
    use setpoint::plugin::types::KindRef;

    struct World01;

    impl Guest for World01 {
        fn manifest() -> Manifest {
            let crd = json!({
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": "world01s.test.setpoint.dev"},
                "spec": {
                    "group": "test.setpoint.dev",
                    "scope": "Namespaced",
                    "names": {"kind": "World01", "plural": "world01s", "singular": "world01", "listKind": "World01List"},
                    "versions": [{"name": "v1", "served": true, "storage": true,
                        "subresources": {"status": {}},
                        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
                }
            });
            Manifest {
                name: "world01".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                reconciles: KindRef {
                    api_version: "test.setpoint.dev/v1".into(),
                    kind: "World01".into(),
                },
                owns: vec![],
                definitions: vec![crd.to_string()],
                finalizer: None,
            }
        }

        fn reconcile(req: Request) -> Result<Response, ReconcileError> {
            log(Level::Info, "a 0.1 plugin reconciling");
            let object: Value = serde_json::from_str(&req.object)
                .map_err(|e| ReconcileError::Permanent(e.to_string()))?;
            let status = json!({"series": "0.1", "n": object["spec"]["n"]});
            Ok(Response {
                children: None,
                status: Some(status.to_string()),
                events: vec![],
                requeue_after_ms: None,
                remove_finalizer: false,
            })
        }
    }

    export!(World01);
}

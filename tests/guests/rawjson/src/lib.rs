//! `rawjson`: a test plugin on the raw WIT bindings (no SDK) whose reconcile
//! returns a status that is not JSON at all. The host must refuse the
//! response and report it on the object.

#[cfg(target_arch = "wasm32")]
mod component {
    wit_bindgen::generate!({ path: "../../../wit", world: "reconciler" });

    use setpoint::plugin::types::KindRef;

    const CRD: &str = r#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
      "metadata":{"name":"rawjsons.test.setpoint.dev"},
      "spec":{"group":"test.setpoint.dev","scope":"Namespaced",
        "names":{"kind":"RawJson","plural":"rawjsons","singular":"rawjson","listKind":"RawJsonList"},
        "versions":[{"name":"v1","served":true,"storage":true,"subresources":{"status":{}},
          "schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}"#;

    struct RawJson;

    impl Guest for RawJson {
        fn manifest() -> Manifest {
            Manifest {
                name: "rawjson".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                reconciles: KindRef {
                    api_version: "test.setpoint.dev/v1".into(),
                    kind: "RawJson".into(),
                },
                owns: vec![],
                definitions: vec![CRD.into()],
                finalizer: None,
                destinations: vec![],
                secrets: vec![],
            }
        }

        fn reconcile(_req: Request) -> Result<Response, ReconcileError> {
            Ok(Response {
                children: None,
                status: Some("{this is not json".into()),
                events: vec![],
                requeue_after_ms: None,
                remove_finalizer: false,
                observe: vec![],
                effects: vec![],
            })
        }
    }

    export!(RawJson);
}

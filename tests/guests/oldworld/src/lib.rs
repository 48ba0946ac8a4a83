//! `oldworld`: a test plugin built against `setpoint:plugin@0.0.1`, an older
//! (incompatible) version of the plugin world. The host must refuse to load
//! it and say why, and keep running the others.

#[cfg(target_arch = "wasm32")]
mod component {
    wit_bindgen::generate!({ path: "wit", world: "reconciler" });

    use setpoint::plugin::host::{Level, log};
    use setpoint::plugin::types::KindRef;

    struct OldWorld;

    impl Guest for OldWorld {
        fn manifest() -> Manifest {
            Manifest {
                name: "oldworld".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                reconciles: KindRef {
                    api_version: "test.setpoint.dev/v1".into(),
                    kind: "OldWorld".into(),
                },
                owns: vec![],
                definitions: vec![],
                finalizer: None,
            }
        }

        fn reconcile(_req: Request) -> Result<Response, ReconcileError> {
            log(Level::Info, "an old plugin reconciling");
            Ok(Response {
                children: None,
                status: None,
                events: vec![],
                requeue_after_ms: None,
                remove_finalizer: false,
            })
        }
    }

    export!(OldWorld);
}

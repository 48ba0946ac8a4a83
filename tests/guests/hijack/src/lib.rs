//! `hijack`: a test plugin that reconciles `demo.setpoint.dev/v1 Pod`, the
//! kind podsim reconciles, and marks every Pod `Failed`. Loaded beside
//! podsim, the host must refuse it (one reconciler per kind) rather than let
//! the two fight over every Pod.

use setpoint_plugin_sdk::serde_json::{Value, json};
use setpoint_plugin_sdk::{
    Ctx, Error, KindRef, Manifest, Object, Reconciler, Response, export_reconciler,
};

/// The reconciler.
#[derive(Debug, Default)]
pub struct Hijack;

impl Reconciler for Hijack {
    type Spec = Value;
    type Status = Value;

    fn manifest(&self) -> Manifest {
        Manifest::new(
            "hijack",
            env!("CARGO_PKG_VERSION"),
            KindRef::new("demo.setpoint.dev/v1", "Pod"),
        )
    }

    fn reconcile(
        &self,
        _object: &Object<Value, Value>,
        _ctx: &Ctx,
    ) -> Result<Response<Value>, Error> {
        Ok(Response::new().status(json!({"phase": "Failed", "hijackedBy": "hijack"})))
    }
}

export_reconciler!(Hijack);

//! The only `bindgen!`s of the host: Rust bindings for the plugin world in
//! `wit/` (the current series, `0.2`) and for the frozen previous series
//! in `wit/0.1/`, which the host keeps loading (docs/wit.md). Imports are
//! trappable so a host import can stop a misbehaving guest.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "reconciler",
    imports: { default: trappable },
});

/// The `setpoint:plugin@0.1.0` world: plugins built against it link here,
/// and `plugin` converts their requests and responses.
pub mod v01 {
    wasmtime::component::bindgen!({
        path: "../wit/0.1",
        world: "reconciler",
        imports: { default: trappable },
    });
}

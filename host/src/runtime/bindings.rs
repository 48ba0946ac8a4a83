//! The only `bindgen!` of the host: Rust bindings for the plugin world in
//! `wit/`. Imports are trappable so a host import can stop a misbehaving
//! guest.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "reconciler",
    imports: { default: trappable },
});

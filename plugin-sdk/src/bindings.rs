//! The only place the WIT contract is turned into Rust. Nothing here is public
//! API: plugins reach it only through [`export_reconciler!`](crate::export_reconciler).
//!
//! The generated code (and the `export!` macro it defines, expanded in each
//! plugin crate) refers to the bindings runtime through this crate's
//! re-export, so a plugin depends on `setpoint-plugin-sdk` alone.

wit_bindgen::generate!({
    path: "../wit",
    world: "reconciler",
    pub_export_macro: true,
    runtime_path: "::setpoint_plugin_sdk::__wit_bindgen::rt",
});

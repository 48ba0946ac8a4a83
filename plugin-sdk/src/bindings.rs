//! The only place the WIT contract is turned into Rust. Nothing here is public
//! API: plugins reach it only through [`export_reconciler!`](crate::export_reconciler).
//!
//! The generated code (and the `export!` macro it defines, expanded in each
//! plugin crate) refers to the bindings runtime through this crate's
//! re-export, so a plugin depends on `setpoint-plugin-sdk` alone.

// FIXME(wit): `wit/host.wit` names a function `list`, which is a WIT keyword,
// so `../wit` does not parse (`expected type, resource or func, found keyword
// list`). Until it is written `%list`, we generate from `plugin-sdk/wit/`, a
// copy that differs only by that `%`; the test `wit_copy_matches_the_contract`
// fails on any other drift, and tells us to switch back once `../wit` is fixed.
wit_bindgen::generate!({
    path: "wit",
    world: "reconciler",
    pub_export_macro: true,
    runtime_path: "::setpoint_plugin_sdk::__wit_bindgen::rt",
});

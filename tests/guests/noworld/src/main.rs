//! `noworld`: a valid WebAssembly component (a WASI command) that exports
//! neither `manifest` nor `reconcile`. The host must refuse to load it.

fn main() {
    println!("I am not a reconciler");
}

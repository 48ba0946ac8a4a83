//! Crate-level checks that belong to no single module.

/// `plugin-sdk/wit/` must be the contract in `../wit`, apart from the `%list`
/// escape the contract is missing (see `bindings.rs`).
#[test]
fn wit_copy_matches_the_contract() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    for file in ["host.wit", "types.wit", "world.wit"] {
        let contract = std::fs::read_to_string(format!("{root}/wit/{file}")).unwrap();
        let copy = std::fs::read_to_string(format!("{root}/plugin-sdk/wit/{file}")).unwrap();
        assert!(
            !contract.contains("%list:"),
            "wit/{file} now escapes `%list`: point generate! in plugin-sdk/src/bindings.rs back at \
             \"../wit\" and delete plugin-sdk/wit/"
        );
        let escaped = contract.replace("\n  list: func(", "\n  %list: func(");
        assert_eq!(
            copy, escaped,
            "plugin-sdk/wit/{file} drifted from wit/{file}; copy it again"
        );
    }
}

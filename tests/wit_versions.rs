//! The plugin contract's versions on a real runtime: a plugin built against
//! another `setpoint:plugin` series is refused with both versions named,
//! one with no plugin world at all gets the linker's words (or, as a core module
//! built without WASI, a hint to build it with the SDK), and plugins of the
//! accepted series load.

use setpoint::controller::Reconciler;
use setpoint::runtime::{self, Runtime, RuntimeConfig};

use crate::support::{built_plugins, built_wasi_plugins};

fn load(runtime: &Runtime, plugin: &str) -> Result<String, runtime::Error> {
    let bytes = std::fs::read(built_plugins().join(format!("{plugin}.wasm"))).unwrap();
    runtime
        .load(&bytes, None)
        .map(|p| p.manifest().name.clone())
}

#[test]
fn the_host_states_the_versions_it_accepts_and_refuses_others_by_name() {
    assert_eq!(runtime::WIT_VERSION, "0.2.0");
    assert_eq!(runtime::ACCEPTED_WIT_VERSIONS, "0.2.x or 0.1.x");
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();

    let old = load(&runtime, "oldworld").unwrap_err();
    assert!(matches!(old, runtime::Error::Link { .. }), "{old:?}");
    assert!(
        old.to_string().starts_with(
            "plugin does not implement the setpoint:plugin@0.2.0 reconciler world: \
             it was built against setpoint:plugin@0.0.1, and this host accepts \
             setpoint:plugin 0.2.x or 0.1.x; rebuild it with a plugin SDK for setpoint:plugin@0.2.0"
        ),
        "{old}"
    );

    // A WASI command: a component, but no plugin world.
    let bytes = std::fs::read(built_wasi_plugins().join("noworld.wasm")).unwrap();
    let none = runtime.load(&bytes, None).map(|_| ()).unwrap_err();
    assert!(matches!(none, runtime::Error::Link { .. }), "{none:?}");
    assert!(
        !none.to_string().contains("built against"),
        "no version to name: {none}"
    );

    // The same program built without WASI: a core module with no world's
    // types to make a component from.
    let core = load(&runtime, "noworld").unwrap_err();
    assert!(matches!(core, runtime::Error::Compile(_)), "{core:?}");
    assert!(
        core.to_string().contains(
            "a core Wasm module, not a component: a core module must be built with the \
             Setpoint SDK (or wit-bindgen) for wasm32-unknown-unknown"
        ),
        "{core}"
    );

    assert_eq!(load(&runtime, "podsim").unwrap(), "podsim");
}

//! Accepting plugins built without WASI: a `wasm32-unknown-unknown` build
//! is a core module that carries its world's types in a custom section
//! (wit-bindgen puts it there); the host wraps it into a component before
//! compiling, as `wasm-tools component new` would.
//!
//! Why the host does it rather than the plugin's build: a plugin author then
//! builds with plain `cargo build` and drops the file in, with no extra tool
//! to install. It runs only when a file is compiled (a few milliseconds for
//! a plugin), never per call; the compiled-code cache keys on the result.

use std::borrow::Cow;

use super::Error;

/// The preamble of a core module: the magic number and version 1.
const CORE_MODULE: [u8; 8] = *b"\0asm\x01\0\0\0";

/// `bytes` as a component: components are returned as they are, core modules
/// are wrapped. Anything else is left to the compiler to reject.
pub(super) fn to_component(bytes: &[u8]) -> Result<Cow<'_, [u8]>, Error> {
    if !bytes.starts_with(&CORE_MODULE) {
        return Ok(Cow::Borrowed(bytes));
    }
    // Without the types section the encoder would make an empty component,
    // which then fails to link with a less helpful message.
    let (with_world, _) =
        wit_component::metadata::decode(bytes).map_err(|e| not_a_plugin_module(&e))?;
    if with_world.is_none() {
        return Err(not_a_plugin_module(&anyhow::anyhow!(
            "it carries no component-type section"
        )));
    }
    let mut encoder = wit_component::ComponentEncoder::default()
        .validate(true)
        .module(bytes)
        .map_err(|e| not_a_plugin_module(&e))?;
    encoder
        .encode()
        .map(Cow::Owned)
        .map_err(|e| not_a_plugin_module(&e))
}

fn not_a_plugin_module(err: &anyhow::Error) -> Error {
    let detail = format!("{err:#}");
    let hint = if detail.contains("wasi_snapshot_preview1") {
        "it imports WASI preview 1 (a wasm32-wasip1 build); build for wasm32-unknown-unknown or wasm32-wasip2"
    } else {
        "a core module must be built with the Setpoint SDK (or wit-bindgen) for wasm32-unknown-unknown, which records the plugin world it implements"
    };
    Error::Compile(format!(
        "a core Wasm module, not a component: {hint} ({detail})"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_and_other_bytes_pass_through_untouched() {
        let component = b"\0asm\x0d\0\x01\0";
        assert!(matches!(to_component(component), Ok(Cow::Borrowed(_))));
        assert!(matches!(to_component(b"not wasm"), Ok(Cow::Borrowed(_))));
    }

    #[test]
    fn a_core_module_without_a_world_is_refused_with_a_hint() {
        // `(module)`: a valid core module with no component-type section.
        let err = to_component(&CORE_MODULE).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("a core Wasm module, not a component"),
            "{text}"
        );
        assert!(text.contains("wasm32-unknown-unknown"), "{text}");
    }
}

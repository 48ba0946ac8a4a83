//! The first look at a plugin file, before anything parses it: is it a
//! WebAssembly binary at all (the magic number), which kind (core module
//! or component), and is it complete (every top-level section fits in the
//! file)? A half-written, empty or foreign file is then reported in words a
//! person understands, instead of reaching a parser that was never meant
//! for it (wasmtime accepts the WebAssembly *text* format too, and reports
//! a binary it cannot read as bad text) or a componentizer that assumes a
//! well-formed module.
//!
//! Only the outer structure is checked here; wasmtime validates the rest
//! (`Runtime::load` validates a core module before it is wrapped into a
//! component).

use super::Error;

/// `\0asm`.
const MAGIC: [u8; 4] = *b"\0asm";
/// A core module's version field (1).
const CORE_VERSION: [u8; 4] = [1, 0, 0, 0];
/// A component's version and layer fields (the component-model binary).
const COMPONENT_LAYER: [u8; 2] = [1, 0];

/// What a plugin file holds, as far as its header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    /// A core WebAssembly module.
    CoreModule,
    /// A WebAssembly component.
    Component,
}

/// Check `bytes` as a plugin file; see the module documentation.
pub(super) fn check(bytes: &[u8]) -> Result<Shape, Error> {
    let invalid = |detail: String| Error::InvalidFile(detail);
    if bytes.is_empty() {
        return Err(invalid(
            "the file is empty (0 bytes); a plugin is a compiled WebAssembly binary (.wasm)".into(),
        ));
    }
    if bytes.len() < 8 && MAGIC.starts_with(&bytes[..bytes.len().min(4)]) {
        return Err(invalid(format!(
            "the file is truncated: {} bytes, shorter than a WebAssembly header (8 bytes); was it still being written?",
            bytes.len()
        )));
    }
    if !bytes.starts_with(&MAGIC) {
        let hint = if looks_like_text(bytes) {
            "; it looks like text: build the plugin to a binary (.wasm) with `cargo build --target wasm32-unknown-unknown`, or compile a .wat file with `wasm-tools parse`"
        } else {
            ""
        };
        return Err(invalid(format!(
            "not a WebAssembly binary: it does not start with the WebAssembly magic number \\0asm (it starts with {}){hint}",
            show_bytes(&bytes[..bytes.len().min(8)])
        )));
    }
    let shape = if bytes[4..8] == CORE_VERSION {
        Shape::CoreModule
    } else if bytes[6..8] == COMPONENT_LAYER {
        Shape::Component
    } else {
        return Err(invalid(format!(
            "unknown WebAssembly version {} (this host reads core modules, version 1, and components)",
            show_bytes(&bytes[4..8])
        )));
    };
    let mut at = 8;
    let mut index = 0;
    while at < bytes.len() {
        let section_at = at;
        let id = bytes[at];
        at += 1;
        let Some((size, used)) = leb128_u32(&bytes[at..]) else {
            return Err(truncated(bytes.len(), index, id, section_at, None));
        };
        at += used;
        let remaining = bytes.len() - at;
        if size as usize > remaining {
            return Err(truncated(
                bytes.len(),
                index,
                id,
                section_at,
                Some((size, remaining)),
            ));
        }
        at += size as usize;
        index += 1;
    }
    Ok(shape)
}

fn truncated(
    len: usize,
    index: usize,
    id: u8,
    offset: usize,
    sizes: Option<(u32, usize)>,
) -> Error {
    let detail = match sizes {
        Some((size, remaining)) => {
            format!("declares {size} bytes but only {remaining} follow")
        }
        None => "has no complete size".to_owned(),
    };
    Error::InvalidFile(format!(
        "the file is truncated or damaged: section {index} (id {id}) at byte {offset} {detail} ({len} bytes in all); was it still being written, or cut short?"
    ))
}

/// An unsigned LEB128 number of at most 32 bits: its value and length.
fn leb128_u32(bytes: &[u8]) -> Option<(u32, usize)> {
    let mut value: u64 = 0;
    for (i, byte) in bytes.iter().take(5).enumerate() {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return u32::try_from(value).ok().map(|v| (v, i + 1));
        }
    }
    None
}

fn looks_like_text(bytes: &[u8]) -> bool {
    let head = &bytes[..bytes.len().min(256)];
    std::str::from_utf8(head).is_ok_and(|s| {
        s.chars()
            .all(|c| !c.is_control() || c.is_ascii_whitespace())
    })
}

fn show_bytes(bytes: &[u8]) -> String {
    let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    hex.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(module)` with one custom section named "x" holding "abc".
    fn module() -> Vec<u8> {
        let mut bytes = b"\0asm\x01\0\0\0".to_vec();
        bytes.extend([0, 5, 1, b'x', b'a', b'b', b'c']);
        bytes
    }

    fn message(bytes: &[u8]) -> String {
        match check(bytes) {
            Err(Error::InvalidFile(detail)) => detail,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn complete_modules_and_components_pass() {
        assert_eq!(check(&module()).unwrap(), Shape::CoreModule);
        assert_eq!(check(b"\0asm\x0d\0\x01\0").unwrap(), Shape::Component);
    }

    #[test]
    fn every_cut_of_a_file_is_reported_as_truncated_or_empty() {
        let whole = module();
        for len in 0..whole.len() {
            if len == 8 {
                assert!(
                    check(&whole[..len]).is_ok(),
                    "a bare header is a complete module"
                );
                continue;
            }
            let text = message(&whole[..len]);
            let expected = if len == 0 { "empty" } else { "truncated" };
            assert!(text.contains(expected), "{len}: {text}");
        }
    }

    #[test]
    fn foreign_files_are_told_apart_from_wasm() {
        let text = message(b"(module)");
        assert!(text.contains("not a WebAssembly binary"), "{text}");
        assert!(text.contains("looks like text"), "{text}");
        let random: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let text = message(&random);
        assert!(text.contains("not a WebAssembly binary"), "{text}");
        assert!(!text.contains("looks like text"), "{text}");
        let text = message(b"\0asm\x02\0\0\0");
        assert!(text.contains("unknown WebAssembly version"), "{text}");
    }
}

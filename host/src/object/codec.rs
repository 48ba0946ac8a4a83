//! How objects are stored: JSON bytes without `metadata.resourceVersion`,
//! which is the key's modification revision and is filled in on decode.

use serde_json::Value;

use super::{Object, meta};

/// Encode an object for the store. The resource version is left out: it is
/// the store revision of the write, known only once the write commits.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::codec;
/// let bytes = codec::encode(&json!({"metadata": {"name": "web", "resourceVersion": "7"}}));
/// assert_eq!(bytes, br#"{"metadata":{"name":"web"}}"#);
/// ```
pub fn encode(object: &Object) -> Vec<u8> {
    if meta::resource_version(object).is_none() {
        return serde_json::to_vec(object).expect("a JSON value always serialises");
    }
    let mut copy = object.clone();
    meta::metadata_mut(&mut copy).remove("resourceVersion");
    serde_json::to_vec(&copy).expect("a JSON value always serialises")
}

/// An object as JSON text, as reconcilers receive it (Wasm plugins and
/// native reconcilers alike).
///
/// `serde_json::to_string` writes straight into a byte buffer;
/// `Value::to_string` (`Display`) goes through a `fmt::Formatter` for every
/// token and took about twice as long on a 16 KiB object. Not inlined, so
/// that every reconcile path runs the same machine code: separate copies of
/// the serialiser, placed differently in the binary, measured up to 10 %
/// apart on the plugin benchmark for reasons that had nothing to do with the
/// path itself.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::codec;
/// assert_eq!(codec::json_text(&json!({"kind": "Pod"})), r#"{"kind":"Pod"}"#);
/// ```
#[inline(never)]
pub fn json_text(object: &Object) -> String {
    serde_json::to_string(object).expect("a JSON value always serialises")
}

/// Decode stored bytes, setting `metadata.resourceVersion` to `revision`.
///
/// ```
/// use setpoint::object::{codec, meta};
/// let object = codec::decode(br#"{"metadata":{"name":"web"}}"#, 42).unwrap();
/// assert_eq!(meta::resource_version(&object), Some("42"));
/// assert!(codec::decode(b"not json", 1).is_err());
/// ```
pub fn decode(bytes: &[u8], revision: i64) -> Result<Object, serde_json::Error> {
    let mut object: Value = serde_json::from_slice(bytes)?;
    meta::metadata_mut(&mut object).insert(
        "resourceVersion".into(),
        Value::String(revision.to_string()),
    );
    Ok(object)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn resource_version_is_not_stored_and_is_restored_from_the_revision() {
        let obj = json!({"metadata": {"name": "a", "resourceVersion": "3"}});
        let bytes = encode(&obj);
        assert!(!String::from_utf8_lossy(&bytes).contains("resourceVersion"));
        let back = decode(&bytes, 9).unwrap();
        assert_eq!(meta::resource_version(&back), Some("9"));
    }
}

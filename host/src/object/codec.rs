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
/// token and was slower (docs/benchmarks/plugins.md#branch-plugin-perf-parse-once-build-maps-in-bulk). Not inlined, so
/// that every reconcile path runs the same machine code: separate copies of
/// the serialiser, placed differently in the binary, measured
/// apart on the plugin benchmark for reasons that had nothing to do with the
/// path itself (docs/benchmarks/plugins.md#current-figures-the-manifest-kept-out-of-the-reconciles-memory-2026-11-22-1140).
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
    let mut object: Value = match serde_json::from_slice(bytes) {
        Ok(object) => object,
        Err(err) => decode_deep(bytes).ok_or(err)?,
    };
    meta::metadata_mut(&mut object).insert(
        "resourceVersion".into(),
        Value::String(revision.to_string()),
    );
    Ok(object)
}

/// Decode only the `metadata` of stored bytes: an object with that one
/// member, the same as [`decode`]'s `metadata` but for the resource
/// version, which is not set. The rest of the text is skipped unparsed
/// into values, so a reader that needs only names, labels, owners or
/// finalizers (the informer's indexes, the garbage collector) pays a tenth
/// of a whole decode in allocations. Nesting outside `metadata` is skipped
/// at any depth; text the short path does not take (a repeated
/// `metadata`, `metadata` nested past the parser's limit) is decoded
/// whole, as [`decode`] reads it.
///
/// ```
/// use setpoint::object::codec::decode_metadata;
/// let head = decode_metadata(br#"{"kind":"Pod","metadata":{"name":"a","uid":"u1"},"spec":{"big":[1,2,3]}}"#).unwrap();
/// assert_eq!(head, serde_json::json!({"metadata": {"name": "a", "uid": "u1"}}));
/// assert!(decode_metadata(b"{not json").is_err());
/// ```
pub fn decode_metadata(bytes: &[u8]) -> Result<Object, serde_json::Error> {
    /// Only the member wanted; serde skips the others.
    #[derive(serde::Deserialize)]
    struct Head {
        #[serde(default)]
        metadata: Value,
    }
    match serde_json::from_slice::<Head>(bytes) {
        Ok(head) => Ok(serde_json::json!({ "metadata": head.metadata })),
        Err(err) => {
            let mut object = decode_whole(bytes, err)?;
            Ok(serde_json::json!({ "metadata": take(&mut object, "/metadata") }))
        }
    }
}

/// Decode only `metadata` and `status.conditions` of stored bytes (what an
/// informer indexes), as `{"metadata": …, "status": {"conditions": …}}`
/// (`status` only when the object has conditions); the rest is skipped.
/// Text the partial parse does not take is decoded whole, as
/// [`decode_metadata`] does.
///
/// ```
/// use setpoint::object::codec::decode_head;
/// let head = decode_head(br#"{"metadata":{"name":"a"},"spec":{"x":1},"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}"#).unwrap();
/// assert_eq!(head, serde_json::json!({"metadata": {"name": "a"},
///     "status": {"conditions": [{"type": "Ready", "status": "True"}]}}));
/// ```
pub fn decode_head(bytes: &[u8]) -> Result<Object, serde_json::Error> {
    #[derive(serde::Deserialize)]
    struct Status {
        #[serde(default)]
        conditions: Value,
    }
    #[derive(serde::Deserialize)]
    struct Head {
        #[serde(default)]
        metadata: Value,
        #[serde(default)]
        status: Option<Status>,
    }
    let head = |metadata: Value, conditions: Value| {
        let mut head = serde_json::json!({ "metadata": metadata });
        if !conditions.is_null() {
            head["status"] = serde_json::json!({ "conditions": conditions });
        }
        head
    };
    match serde_json::from_slice::<Head>(bytes) {
        Ok(h) => Ok(head(
            h.metadata,
            h.status.map(|s| s.conditions).unwrap_or(Value::Null),
        )),
        Err(err) => {
            let mut object = decode_whole(bytes, err)?;
            let metadata = take(&mut object, "/metadata");
            let conditions = take(&mut object, "/status/conditions");
            Ok(head(metadata, conditions))
        }
    }
}

/// The member at JSON pointer `pointer`, taken out of `object` (null if
/// there is none).
fn take(object: &mut Value, pointer: &str) -> Value {
    object
        .pointer_mut(pointer)
        .map(Value::take)
        .unwrap_or(Value::Null)
}

/// Bytes a partial parse did not take (a repeated member, nesting past the
/// parser's limit), decoded whole as the store reads them; `err`, the
/// partial parse's error, if they do not decode at all.
fn decode_whole(bytes: &[u8], err: serde_json::Error) -> Result<Value, serde_json::Error> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(object) => Ok(object),
        Err(_) => decode_deep(bytes).ok_or(err),
    }
}

/// How deep a stored object may nest and still be read. Writes keep
/// objects within `shape::MAX_DEPTH`, but earlier versions stored whatever
/// a JSON patch built; such an object must stay readable (and so
/// replaceable and deletable through the API) instead of making its whole
/// kind fail to list. Parsing recurses once per level, so this stays far
/// below what a thread's stack holds.
const LEGACY_READ_DEPTH: usize = 512;

/// Decode stored bytes nested deeper than the JSON parser's default limit
/// but within [`LEGACY_READ_DEPTH`]; `None` for anything else, whose
/// original error then stands.
pub(crate) fn decode_deep(bytes: &[u8]) -> Option<Value> {
    if nesting(bytes) > LEGACY_READ_DEPTH {
        return None;
    }
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    deserializer.disable_recursion_limit();
    let value = serde::Deserialize::deserialize(&mut deserializer).ok()?;
    deserializer.end().ok()?;
    Some(value)
}

/// The deepest nesting of `[`/`{` in JSON text, strings skipped: a linear
/// scan that needs no parse.
fn nesting(bytes: &[u8]) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0, false, false);
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
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

    fn nested_text(levels: usize) -> String {
        let mut text = String::from(r#"{"metadata":{"name":"deep"},"spec":"#);
        text.push_str(&"[".repeat(levels));
        text.push_str(r#""]\"[{""#);
        text.push_str(&"]".repeat(levels));
        text.push('}');
        text
    }

    #[test]
    fn an_object_stored_deeper_than_the_parser_allows_is_still_read() {
        // Stored by an earlier version through a JSON patch: readable, so the
        // object can be fixed or deleted and its kind still lists.
        let text = nested_text(300);
        assert!(
            serde_json::from_str::<Value>(&text).is_err(),
            "over the default limit"
        );
        let object = decode(text.as_bytes(), 5).unwrap();
        assert_eq!(meta::resource_version(&object), Some("5"));
        assert_eq!(crate::object::shape::depth(&object), 301);
    }

    #[test]
    fn nesting_past_the_legacy_limit_or_damage_keeps_the_parser_error() {
        let err = decode(nested_text(LEGACY_READ_DEPTH + 1).as_bytes(), 1).unwrap_err();
        assert!(err.to_string().contains("recursion limit"), "{err}");
        assert!(decode(b"{\"a\": [1, 2", 1).is_err());
        assert!(decode(&[b'['; 100_000], 1).is_err(), "no stack overflow");
    }

    #[test]
    fn the_metadata_alone_is_what_a_whole_decode_reads_there() {
        let texts = [
            r#"{"kind":"Pod","metadata":{"name":"a","labels":{"x":"1"},"ownerReferences":[{"uid":"o"}]},"spec":{"n":[1,{"m":2}]}}"#.to_owned(),
            r#"{"kind":"Pod","spec":{}}"#.to_owned(),
            // A repeated member: the last one wins, as in a whole decode.
            r#"{"metadata":{"name":"first"},"metadata":{"name":"second"}}"#.to_owned(),
            nested_text(300),
        ];
        for text in &texts {
            let mut whole = decode(text.as_bytes(), 9).unwrap();
            meta::metadata_mut(&mut whole).remove("resourceVersion");
            let head = decode_metadata(text.as_bytes()).unwrap();
            let expected = match whole.get("metadata") {
                Some(m) if !m.as_object().is_some_and(|m| m.is_empty()) => m.clone(),
                _ => Value::Null,
            };
            assert_eq!(head, json!({"metadata": expected}), "{text}");
        }
        // Nesting outside `metadata` is skipped, not parsed: past every
        // limit it still gives the metadata (a whole decode refuses it).
        let too_deep = nested_text(LEGACY_READ_DEPTH + 1);
        assert!(decode(too_deep.as_bytes(), 1).is_err());
        assert_eq!(
            decode_metadata(too_deep.as_bytes()).unwrap(),
            json!({"metadata": {"name": "deep"}})
        );
        assert!(decode_metadata(b"{\"a\": [1, 2").is_err());
        assert!(
            decode_metadata(&[b'['; 100_000]).is_err(),
            "no stack overflow"
        );
    }
}

//! Stored objects written out as the API's JSON without decoding them:
//! the store keeps each object's JSON without `metadata.resourceVersion`
//! (see `codec`), so a LIST only has to put the version back in, at the
//! place a decode and a re-encode would have put it. A decoded 1 KiB
//! object costs about 10 KiB of allocations and several microseconds;
//! the splice is a scan and a copy.

/// Write the stored object `bytes` into `out` with
/// `metadata.resourceVersion` set to `revision`: the same bytes as
/// `serde_json::to_vec(&codec::decode(bytes, revision)?)` for what the
/// store writes (compact JSON, keys in order). Returns `false`, having
/// written nothing, for anything this scan does not take (no `metadata`
/// object, a version already there, an escaped key in `metadata`,
/// malformed JSON): the caller decodes those instead.
///
/// ```
/// use setpoint::object::raw;
/// let mut out = Vec::new();
/// assert!(raw::with_resource_version(br#"{"metadata":{"name":"web","uid":"u"}}"#, 42, &mut out));
/// assert_eq!(out, br#"{"metadata":{"name":"web","resourceVersion":"42","uid":"u"}}"#);
/// assert!(!raw::with_resource_version(br#"{"kind":"Pod"}"#, 42, &mut out));
/// ```
pub fn with_resource_version(bytes: &[u8], revision: i64, out: &mut Vec<u8>) -> bool {
    match insertion_point(bytes) {
        Some((at, Placement::Before)) => {
            out.extend_from_slice(&bytes[..at]);
            out.extend_from_slice(br#""resourceVersion":""#);
            write_revision(out, revision);
            out.extend_from_slice(br#"","#);
            out.extend_from_slice(&bytes[at..]);
            true
        }
        Some((at, placement)) => {
            out.extend_from_slice(&bytes[..at]);
            if placement == Placement::AfterMember {
                out.push(b',');
            }
            out.extend_from_slice(br#""resourceVersion":""#);
            write_revision(out, revision);
            out.push(b'"');
            out.extend_from_slice(&bytes[at..]);
            true
        }
        None => false,
    }
}

/// Writes `revision` in decimal, without the allocation of `to_string`
/// (one for each item of a list).
fn write_revision(out: &mut Vec<u8>, revision: i64) {
    use std::io::Write as _;
    write!(out, "{revision}").expect("writing to a Vec does not fail");
}

/// Where the version goes relative to the byte offset found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// Before the member starting there (the first key sorting after it).
    Before,
    /// At the closing brace, after the last member.
    AfterMember,
    /// At the closing brace of an empty `metadata`.
    Alone,
}

const VERSION_KEY: &[u8] = b"resourceVersion";

fn insertion_point(bytes: &[u8]) -> Option<(usize, Placement)> {
    let mut i = skip_ws(bytes, 0);
    if bytes.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    loop {
        i = skip_ws(bytes, i);
        let (key, after_key) = key_at(bytes, i)?;
        i = skip_ws(bytes, after_key);
        if bytes.get(i) != Some(&b':') {
            return None;
        }
        i = skip_ws(bytes, i + 1);
        if key == b"metadata" {
            return in_metadata(bytes, i);
        }
        i = skip_ws(bytes, skip_value(bytes, i)?);
        match bytes.get(i) {
            Some(b',') => i += 1,
            _ => return None,
        }
    }
}

/// The insertion point inside the `metadata` object starting at `i`.
fn in_metadata(bytes: &[u8], mut i: usize) -> Option<(usize, Placement)> {
    if bytes.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_ws(bytes, i + 1);
    if bytes.get(i) == Some(&b'}') {
        return Some((i, Placement::Alone));
    }
    loop {
        let member = i;
        let (key, after_key) = key_at(bytes, i)?;
        if key == VERSION_KEY {
            return None;
        }
        if key > VERSION_KEY {
            return Some((member, Placement::Before));
        }
        i = skip_ws(bytes, after_key);
        if bytes.get(i) != Some(&b':') {
            return None;
        }
        i = skip_ws(bytes, skip_value(bytes, skip_ws(bytes, i + 1))?);
        match bytes.get(i) {
            Some(b',') => i = skip_ws(bytes, i + 1),
            Some(b'}') => return Some((i, Placement::AfterMember)),
            _ => return None,
        }
    }
}

fn skip_ws(bytes: &[u8], mut i: usize) -> usize {
    while matches!(bytes.get(i), Some(b' ' | b'\n' | b'\r' | b'\t')) {
        i += 1;
    }
    i
}

/// The key starting at `i` (without quotes) and the offset after it;
/// `None` for an escaped key, whose order the raw text does not give.
fn key_at(bytes: &[u8], i: usize) -> Option<(&[u8], usize)> {
    if bytes.get(i) != Some(&b'"') {
        return None;
    }
    let len = memchr::memchr(b'"', &bytes[i + 1..])?;
    let key = &bytes[i + 1..i + 1 + len];
    if key.contains(&b'\\') {
        return None;
    }
    Some((key, i + len + 2))
}

/// The offset after the JSON value starting at `i`.
fn skip_value(bytes: &[u8], i: usize) -> Option<usize> {
    match *bytes.get(i)? {
        b'"' => skip_string(bytes, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match *bytes.get(j)? {
                    b'"' => {
                        j = skip_string(bytes, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let end = bytes[i..]
                .iter()
                .position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t'))
                .map_or(bytes.len(), |n| i + n);
            (end > i).then_some(end)
        }
    }
}

/// The offset after the string starting (at its quote) at `i`. Long
/// strings (annotations, certificates) are most of an object's bytes:
/// they are skipped a vector at a time, not a byte at a time.
fn skip_string(bytes: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    loop {
        j += memchr::memchr2(b'"', b'\\', bytes.get(j..)?)?;
        match bytes[j] {
            b'\\' => j += 2,
            _ => return Some(j + 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::object::codec;

    fn same_as_decode(object: &Value) {
        let stored = codec::encode(object);
        let mut out = Vec::new();
        assert!(
            with_resource_version(&stored, 17, &mut out),
            "{}",
            String::from_utf8_lossy(&stored)
        );
        let expected = serde_json::to_vec(&codec::decode(&stored, 17).unwrap()).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&expected)
        );
    }

    #[test]
    fn the_splice_writes_what_a_decode_and_encode_would() {
        same_as_decode(&json!({"metadata": {}}));
        same_as_decode(&json!({"metadata": {"name": "a"}}));
        same_as_decode(&json!({"metadata": {"uid": "u"}}));
        same_as_decode(&json!({"metadata": {"name": "a", "uid": "u"}}));
        same_as_decode(&json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"annotations": {"a\"b": "}{\\", "resourceVersion": "x"},
                "labels": {"app": "web"}, "name": "p", "namespace": "default",
                "ownerReferences": [{"uid": "o", "name": "]["}], "uid": "u"},
            "spec": {"list": [1, 2.5, -3e-7, true, null, {"k": []}]},
            "status": {"phase": "Running"}}));
        same_as_decode(&json!({"a": [{"metadata": {}}], "metadata": {"zzz": 1}, "z": "\u{1}"}));
    }

    #[test]
    fn what_the_scan_does_not_take_is_left_to_a_decode() {
        let mut out = Vec::new();
        for bytes in [
            &br#"{"kind":"Pod"}"#[..],
            br#"{"metadata":{"resourceVersion":"3"}}"#,
            br#"{"metadata":{"na\"me":"a"}}"#,
            br#"{"metadata":"flat"}"#,
            br#"{"metadata":{"name":"a""#,
            br#"["metadata"]"#,
            b"",
        ] {
            assert!(
                !with_resource_version(bytes, 1, &mut out),
                "{}",
                String::from_utf8_lossy(bytes)
            );
            assert!(out.is_empty());
        }
    }

    #[test]
    fn whitespace_is_allowed() {
        let mut out = Vec::new();
        assert!(with_resource_version(
            b" { \"metadata\" : { \"name\" : \"a\" } } ",
            5,
            &mut out
        ));
        let back: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(back["metadata"]["resourceVersion"], "5");
        assert_eq!(back["metadata"]["name"], "a");
    }
}

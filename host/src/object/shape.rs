//! The bounds on an object's shape that every write enforces, and the
//! measures behind them: nesting depth and encoded size, both computed
//! without recursion so that measuring a hostile value cannot itself
//! overflow the stack.
//!
//! Why a depth bound at all: `serde_json::Value` is recursive — cloning,
//! comparing, encoding and dropping one recurse once per level — and the
//! JSON parser refuses input nested deeper than 128 levels. An object stored
//! deeper than that could never be read back, and one nested a few thousand
//! levels deep overflows a thread's stack in any of those operations. So no
//! write may produce an object deeper than [`MAX_DEPTH`], well inside what
//! the parser reads.

use serde_json::Value;

/// The deepest nesting of objects and arrays an object may have: a bare
/// scalar is depth 0, `{"a": 1}` depth 1, `{"spec": {"a": [1]}}` depth 3.
/// Below the JSON parser's limit of 128 with room to spare, so that every
/// stored object decodes, and above what any real resource needs (the
/// deepest Kubernetes built-in types nest about 20 levels).
pub const MAX_DEPTH: usize = 100;

/// The largest encoded object accepted by default, as in Kubernetes (etcd's
/// request limit); the object API's limit is configurable
/// (`Api::with_max_object_bytes`).
pub const DEFAULT_MAX_OBJECT_BYTES: usize = 1536 * 1024;

/// The nesting depth of `value` (see [`MAX_DEPTH`] for how it counts).
/// Iterative: any depth is measured without recursion.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::shape::depth;
/// assert_eq!(depth(&json!("x")), 0);
/// assert_eq!(depth(&json!({"a": 1})), 1);
/// assert_eq!(depth(&json!({"spec": {"a": [1]}, "b": {}})), 3);
/// ```
pub fn depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack: Vec<(&Value, usize)> = vec![(value, 0)];
    while let Some((value, level)) = stack.pop() {
        if let Some(children) = containers_in(value) {
            deepest = deepest.max(level + 1);
            stack.extend(children.map(|child| (child, level + 1)));
        }
    }
    deepest
}

/// The arrays and objects directly inside `value`, if it is a container:
/// scalars never need a place on a walk's stack.
fn containers_in(value: &Value) -> Option<impl Iterator<Item = &Value>> {
    let is_container = |v: &&Value| v.is_array() || v.is_object();
    match value {
        Value::Array(items) => Some(Either::Left(items.iter().filter(is_container))),
        Value::Object(members) => Some(Either::Right(members.values().filter(is_container))),
        _ => None,
    }
}

/// One of two iterators, without boxing either.
enum Either<L, R> {
    Left(L),
    Right(R),
}

impl<'a, L, R> Iterator for Either<L, R>
where
    L: Iterator<Item = &'a Value>,
    R: Iterator<Item = &'a Value>,
{
    type Item = &'a Value;

    fn next(&mut self) -> Option<&'a Value> {
        match self {
            Either::Left(l) => l.next(),
            Either::Right(r) => r.next(),
        }
    }
}

/// Whether `value` is nested deeper than `limit`, stopping as soon as it
/// knows: cheaper than [`depth`] on a hostile value.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::shape::deeper_than;
/// assert!(!deeper_than(&json!({"a": {"b": 1}}), 2));
/// assert!(deeper_than(&json!({"a": {"b": [1]}}), 2));
/// ```
pub fn deeper_than(value: &Value, limit: usize) -> bool {
    // Every write asks this of the whole object: one stack allocation, and
    // only containers pushed (see `encode_checked` in `api`).
    let mut stack: Vec<(&Value, usize)> = vec![(value, 0)];
    while let Some((value, level)) = stack.pop() {
        if let Some(children) = containers_in(value) {
            if level + 1 > limit {
                return true;
            }
            stack.extend(children.map(|child| (child, level + 1)));
        }
    }
    false
}

/// Where `value` first passes `limit` levels of nesting, as a field path
/// (`spec.a[0].b`), or `None` if it does not: for telling a person which
/// part of an object is too deep.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::shape::too_deep_at;
/// assert_eq!(too_deep_at(&json!({"spec": {"a": [{"b": 1}]}}), 3).as_deref(), Some("spec.a[0]"));
/// assert_eq!(too_deep_at(&json!({"spec": {}}), 3), None);
/// ```
pub fn too_deep_at(value: &Value, limit: usize) -> Option<String> {
    // Depth-first with the path of the current branch only, so that a wide
    // object costs no string per member.
    let mut path: Vec<String> = Vec::new();
    let mut stack: Vec<(&Value, usize, Option<String>)> = vec![(value, 0, None)];
    while let Some((value, level, segment)) = stack.pop() {
        path.truncate(level.saturating_sub(1));
        if let Some(segment) = segment {
            path.push(segment);
        }
        match value {
            Value::Array(items) if level < limit => stack.extend(
                items
                    .iter()
                    .enumerate()
                    .rev()
                    .map(|(i, item)| (item, level + 1, Some(format!("[{i}]")))),
            ),
            Value::Object(members) if level < limit => stack.extend(
                members
                    .iter()
                    .rev()
                    .map(|(k, member)| (member, level + 1, Some(format!(".{k}")))),
            ),
            Value::Array(_) | Value::Object(_) => {
                let joined = path.concat();
                return Some(joined.strip_prefix('.').unwrap_or(&joined).to_owned());
            }
            _ => {}
        }
    }
    None
}

/// The length of `value`'s compact JSON encoding, in bytes, computed
/// without building it (and without recursion).
///
/// ```
/// use serde_json::json;
/// use setpoint::object::shape::encoded_len;
/// for v in [json!(null), json!({"a": [1, "x\"y", 2.5, true]}), json!({"é": "\u{1}"})] {
///     assert_eq!(encoded_len(&v), serde_json::to_vec(&v).unwrap().len(), "{v}");
/// }
/// ```
pub fn encoded_len(value: &Value) -> usize {
    let mut total = 0;
    let mut stack: Vec<&Value> = vec![value];
    while let Some(value) = stack.pop() {
        total += match value {
            Value::Null => 4,
            Value::Bool(true) => 4,
            Value::Bool(false) => 5,
            Value::Number(n) => n.to_string().len(),
            Value::String(s) => string_len(s),
            Value::Array(items) => {
                stack.extend(items.iter());
                // Brackets and the commas between items.
                2 + items.len().saturating_sub(1)
            }
            Value::Object(members) => {
                stack.extend(members.values());
                // Braces, commas, and per member its key and colon.
                2 + members.len().saturating_sub(1)
                    + members.keys().map(|k| string_len(k) + 1).sum::<usize>()
            }
        };
    }
    total
}

/// A JSON string's encoded length, quotes and escapes included (as
/// `serde_json` escapes: the short forms, `\u00XX` for other controls).
fn string_len(s: &str) -> usize {
    2 + s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0..=0x1f => 6,
            _ => 1,
        })
        .sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(levels: usize) -> Value {
        let mut v = json!(1);
        for i in 0..levels {
            v = if i % 2 == 0 {
                json!([v])
            } else {
                json!({"k": v})
            };
        }
        v
    }

    #[test]
    fn depth_counts_every_level_of_objects_and_arrays() {
        for levels in [0, 1, 2, 7, 99, 100, 101, 127] {
            let v = nested(levels);
            assert_eq!(depth(&v), levels);
            assert_eq!(deeper_than(&v, MAX_DEPTH), levels > MAX_DEPTH);
        }
        assert_eq!(depth(&json!({"a": [], "b": {"c": {}}})), 3);
    }

    #[test]
    fn a_value_too_deep_to_recurse_over_is_measured_without_overflowing() {
        // Built and taken apart iteratively: dropping it recursively would
        // itself overflow the test thread's stack.
        let mut v = json!(0);
        for _ in 0..200_000 {
            v = Value::Array(vec![v]);
        }
        assert_eq!(depth(&v), 200_000);
        assert!(deeper_than(&v, MAX_DEPTH));
        assert_eq!(encoded_len(&v), 400_001);
        let mut v = Some(v);
        while let Some(Value::Array(mut items)) = v.take() {
            v = items.pop();
        }
    }

    #[test]
    fn encoded_len_matches_the_encoder_on_escapes_numbers_and_unicode() {
        for v in [
            json!({"a\"b": "line\nbreak\ttab\u{7}bell\\", "n": [0, -1, 1.5e300, 12345678901234u64]}),
            json!(["ünïcødé ✓", {}, [], null, false, {"": ""}]),
            json!({"z": {"y": {"x": [1, [2, [3]]]}}}),
        ] {
            assert_eq!(
                encoded_len(&v),
                serde_json::to_vec(&v).unwrap().len(),
                "{v}"
            );
        }
    }
}

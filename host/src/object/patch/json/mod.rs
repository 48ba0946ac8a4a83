//! JSON patch (RFC 6902): the operations, their wire form, and applying
//! them all-or-nothing with errors that name the operation and its path.
//! Pointer syntax and lookup are `object::pointer`'s.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::object::pointer::{Pointer, PointerError};
use crate::object::shape;

/// The most operations one patch may carry, as in Kubernetes.
pub const MAX_OPERATIONS: usize = 10_000;

/// How far applying a patch may take a document: the limits every stored
/// object is held to, enforced operation by operation so that a small
/// patch cannot build a huge or deeply nested value on the way (ten
/// self-copies double a document ten times) before the final size check.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::patch::{Bounds, JsonPatch, PatchError};
///
/// // Each copy doubles /spec: stopped at the first operation past the limit.
/// let bomb: Vec<_> = (0..40)
///     .map(|i| json!({"op": "copy", "from": "/spec", "path": format!("/spec/b{i}")}))
///     .collect();
/// let patch = JsonPatch::from_value(&json!(bomb)).unwrap();
/// let mut doc = json!({"spec": {"payload": "x".repeat(100)}});
/// let err = patch.apply_within(&mut doc, Bounds { max_bytes: 10_000, ..Bounds::default() }).unwrap_err();
/// assert!(matches!(err, PatchError::TooLarge { index: 6, .. }), "{err}");
/// assert_eq!(doc, json!({"spec": {"payload": "x".repeat(100)}}), "unchanged");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// The deepest nesting the document may reach ([`shape::MAX_DEPTH`]).
    pub max_depth: usize,
    /// The largest encoded size the document may reach.
    pub max_bytes: usize,
}

impl Default for Bounds {
    /// The limits of a stored object with the default size limit.
    fn default() -> Self {
        Self {
            max_depth: shape::MAX_DEPTH,
            max_bytes: shape::DEFAULT_MAX_OBJECT_BYTES,
        }
    }
}

/// How much copying and measuring one patch may cause, in multiples of
/// the size limit. No sensible patch comes near it; a hostile one that
/// copies the largest allowed value back and forth stops here rather than
/// keeping a thread busy for ten thousand operations.
const WORK_PER_LIMIT: usize = 64;

/// One JSON patch operation, in its wire form (`{"op": "add", "path": …}`).
///
/// ```
/// use serde_json::json;
/// use setpoint::object::patch::{JsonPatch, PatchError, PatchOperation};
///
/// let op: PatchOperation = serde_json::from_value(json!({"op": "remove", "path": "/spec/paused"})).unwrap();
/// assert_eq!(op, PatchOperation::Remove { path: "/spec/paused".into() });
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum PatchOperation {
    /// Add (or replace) a member, or insert into a list (`-` appends).
    Add {
        /// Where.
        path: String,
        /// What.
        value: Value,
    },
    /// Remove an existing value.
    Remove {
        /// Where.
        path: String,
    },
    /// Replace an existing value.
    Replace {
        /// Where.
        path: String,
        /// The new value.
        value: Value,
    },
    /// Remove the value at `from` and add it at `path`.
    Move {
        /// Where the value is taken from.
        from: String,
        /// Where it goes.
        path: String,
    },
    /// Add a copy of the value at `from` at `path`.
    Copy {
        /// Where the value is copied from.
        from: String,
        /// Where the copy goes.
        path: String,
    },
    /// Fail the whole patch unless the value at `path` equals `value`.
    Test {
        /// Where.
        path: String,
        /// The expected value.
        value: Value,
    },
}

impl PatchOperation {
    /// The operation's name (`add`, `remove`, …).
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::patch::{JsonPatch, PatchError, PatchOperation};
    ///
    /// let op = PatchOperation::Test { path: "/a".into(), value: json!(1) };
    /// assert_eq!(op.name(), "test");
    /// ```
    pub fn name(&self) -> &'static str {
        match self {
            PatchOperation::Add { .. } => "add",
            PatchOperation::Remove { .. } => "remove",
            PatchOperation::Replace { .. } => "replace",
            PatchOperation::Move { .. } => "move",
            PatchOperation::Copy { .. } => "copy",
            PatchOperation::Test { .. } => "test",
        }
    }

    /// The target path.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::patch::{JsonPatch, PatchError, PatchOperation};
    ///
    /// let op = PatchOperation::Move { from: "/a".into(), path: "/b".into() };
    /// assert_eq!(op.path(), "/b");
    /// ```
    pub fn path(&self) -> &str {
        match self {
            PatchOperation::Add { path, .. }
            | PatchOperation::Remove { path }
            | PatchOperation::Replace { path, .. }
            | PatchOperation::Move { path, .. }
            | PatchOperation::Copy { path, .. }
            | PatchOperation::Test { path, .. } => path,
        }
    }

    /// Whether the operation writes to `pointer` (test only reads).
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::patch::{JsonPatch, PatchError, PatchOperation};
    ///
    /// let replace = PatchOperation::Replace { path: "/metadata/resourceVersion".into(), value: json!("7") };
    /// assert!(replace.writes("/metadata/resourceVersion"));
    /// let test = PatchOperation::Test { path: "/metadata/resourceVersion".into(), value: json!("7") };
    /// assert!(!test.writes("/metadata/resourceVersion"), "a test only reads");
    /// ```
    pub fn writes(&self, pointer: &str) -> bool {
        !matches!(self, PatchOperation::Test { .. }) && self.path() == pointer
    }
}

/// A JSON patch: operations applied in order, all or nothing.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::patch::JsonPatch;
/// let patch = JsonPatch::from_value(&json!([
///     {"op": "test", "path": "/spec/replicas", "value": 1},
///     {"op": "replace", "path": "/spec/replicas", "value": 3},
///     {"op": "add", "path": "/metadata/labels/tier~1role", "value": "web"},
/// ])).unwrap();
/// let mut doc = json!({"metadata": {"labels": {}}, "spec": {"replicas": 1}});
/// patch.apply(&mut doc).unwrap();
/// assert_eq!(doc, json!({"metadata": {"labels": {"tier/role": "web"}}, "spec": {"replicas": 3}}));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JsonPatch(pub Vec<PatchOperation>);

/// A JSON patch that is malformed or cannot be applied. Names the operation
/// (by index) and the path.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::patch::{JsonPatch, PatchError, PatchOperation};
///
/// let patch = JsonPatch::from_value(&json!([{"op": "test", "path": "/n", "value": 2}])).unwrap();
/// let err = patch.apply(&mut json!({"n": 1})).unwrap_err();
/// assert!(matches!(err, PatchError::TestFailed { index: 0, .. }));
/// assert_eq!(err.to_string(), "operation 0 (test /n): test failed: expected 2, found 1");
/// ```
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PatchError {
    /// The patch document is not a list of operations.
    #[error("a JSON patch must be a list of operations")]
    NotAList,
    /// One operation is malformed (unknown op, missing field).
    #[error("operation {index}: {message}")]
    Malformed {
        /// The operation's position in the patch.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// An operation could not be applied (missing path, bad index).
    #[error("operation {index} ({op} {path}): {source}")]
    Failed {
        /// The operation's position in the patch.
        index: usize,
        /// The operation's name.
        op: &'static str,
        /// Its target path.
        path: String,
        /// Why.
        source: PointerError,
    },
    /// A `move` into its own child.
    #[error("operation {index} (move {path}): cannot move {from} into one of its children")]
    MoveIntoChild {
        /// The operation's position in the patch.
        index: usize,
        /// The source.
        from: String,
        /// The target.
        path: String,
    },
    /// An operation would nest the document deeper than allowed.
    #[error(
        "operation {index} ({op} {path}): the value would be nested {depth} levels deep, over the limit of {limit}"
    )]
    TooDeep {
        /// The operation's position in the patch.
        index: usize,
        /// The operation's name.
        op: &'static str,
        /// Its target path.
        path: String,
        /// How deep the document would nest.
        depth: usize,
        /// The limit.
        limit: usize,
    },
    /// An operation would make the document larger than allowed.
    #[error(
        "operation {index}: the patched object would be at least {size} bytes, over the limit of {limit} bytes"
    )]
    TooLarge {
        /// The operation's position in the patch.
        index: usize,
        /// How large the document would be, at least.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The patch has more operations than allowed, or makes the host copy
    /// far more than the size of an object.
    #[error("{0}")]
    TooCostly(String),
    /// A `test` found a different value.
    #[error("operation {index} (test {path}): test failed: expected {expected}, found {actual}")]
    TestFailed {
        /// The operation's position in the patch.
        index: usize,
        /// The tested path.
        path: String,
        /// The value the patch expected.
        expected: Value,
        /// The value found (`null` when absent).
        actual: Value,
    },
}

impl PatchError {
    /// Whether the patch document itself is malformed (a bad request) rather
    /// than not applicable to this object.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::patch::{JsonPatch, PatchError, PatchOperation};
    ///
    /// assert!(JsonPatch::from_value(&json!({"op": "add"})).unwrap_err().is_malformed());
    /// let patch = JsonPatch::from_value(&json!([{"op": "remove", "path": "/x"}])).unwrap();
    /// assert!(!patch.apply(&mut json!({})).unwrap_err().is_malformed(), "well-formed, not applicable");
    /// ```
    pub fn is_malformed(&self) -> bool {
        matches!(self, PatchError::NotAList | PatchError::Malformed { .. })
    }
}

impl JsonPatch {
    /// Parse a patch document, naming the first malformed operation.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::patch::{JsonPatch, PatchError, PatchOperation};
    ///
    /// let err = JsonPatch::from_value(&json!([{"op": "replace", "path": "/a", "value": 1}, {"op": "frobnicate"}])).unwrap_err();
    /// assert!(matches!(err, PatchError::Malformed { index: 1, .. }));
    /// ```
    pub fn from_value(doc: &Value) -> Result<Self, PatchError> {
        let ops = doc.as_array().ok_or(PatchError::NotAList)?;
        ops.iter()
            .enumerate()
            .map(|(index, op)| {
                PatchOperation::deserialize(op).map_err(|e| PatchError::Malformed {
                    index,
                    message: e.to_string(),
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(JsonPatch)
    }

    /// Apply every operation in order, within the default [`Bounds`]. On
    /// error the document is unchanged.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::patch::{JsonPatch, PatchError, PatchOperation};
    ///
    /// let patch = JsonPatch::from_value(&json!([
    ///     {"op": "replace", "path": "/a", "value": 2},
    ///     {"op": "remove", "path": "/missing"},
    /// ])).unwrap();
    /// let mut doc = json!({"a": 1});
    /// assert!(patch.apply(&mut doc).is_err());
    /// assert_eq!(doc, json!({"a": 1}), "all or nothing");
    /// ```
    pub fn apply(&self, doc: &mut Value) -> Result<(), PatchError> {
        self.apply_within(doc, Bounds::default())
    }

    /// Apply every operation in order, keeping the document within
    /// `bounds` after every operation (see [`Bounds`]). On error the
    /// document is unchanged.
    pub fn apply_within(&self, doc: &mut Value, bounds: Bounds) -> Result<(), PatchError> {
        if self.0.len() > MAX_OPERATIONS {
            return Err(PatchError::TooCostly(format!(
                "the patch has {} operations; at most {MAX_OPERATIONS} are allowed",
                self.0.len()
            )));
        }
        let mut work = doc.clone();
        let mut budget = Budget {
            bounds,
            size_at_most: shape::encoded_len(&work),
            work_left: bounds.max_bytes.saturating_mul(WORK_PER_LIMIT),
        };
        for (index, op) in self.0.iter().enumerate() {
            apply_one(&mut work, index, op, &mut budget)?;
        }
        *doc = work;
        Ok(())
    }

    /// Whether any operation writes `pointer` (e.g. `/metadata/resourceVersion`).
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::patch::{JsonPatch, PatchError, PatchOperation};
    ///
    /// let patch = JsonPatch::from_value(&json!([{"op": "add", "path": "/metadata/resourceVersion", "value": "3"}])).unwrap();
    /// assert!(patch.writes("/metadata/resourceVersion"));
    /// ```
    pub fn writes(&self, pointer: &str) -> bool {
        self.0.iter().any(|op| op.writes(pointer))
    }
}

/// What a patch may still do to its document: an upper bound on the
/// document's size (exact at the start, raised by what each operation
/// places, recomputed exactly only when it passes the limit) and the
/// copying and measuring left.
struct Budget {
    bounds: Bounds,
    size_at_most: usize,
    work_left: usize,
}

impl Budget {
    fn spend(&mut self, bytes: usize) -> Result<(), PatchError> {
        self.work_left = self.work_left.checked_sub(bytes).ok_or_else(|| {
            PatchError::TooCostly(format!(
                "the patch copies more than {} times the object size limit; split it or send the object",
                WORK_PER_LIMIT
            ))
        })?;
        Ok(())
    }

    /// Checks, before `value` is placed at `target`, that the document will
    /// stay within the depth bound, and counts its size.
    fn before_placing(
        &mut self,
        index: usize,
        op: &PatchOperation,
        target: &Pointer,
        value: &Value,
    ) -> Result<(), PatchError> {
        let levels = target.tokens().len();
        let room = self.bounds.max_depth.saturating_sub(levels);
        if levels > self.bounds.max_depth || shape::deeper_than(value, room) {
            return Err(PatchError::TooDeep {
                index,
                op: op.name(),
                path: op.path().to_owned(),
                depth: levels + shape::depth(value),
                limit: self.bounds.max_depth,
            });
        }
        let len = shape::encoded_len(value);
        self.spend(len)?;
        // The member's key, quotes, colon and comma come on top of the value.
        let key = target.tokens().last().map_or(0, String::len) + 4;
        self.size_at_most = self.size_at_most.saturating_add(len + key);
        Ok(())
    }

    /// After an operation placed a value: if the upper bound passed the
    /// limit, measure the document exactly and refuse if it really is over.
    fn after_placing(&mut self, index: usize, doc: &Value) -> Result<(), PatchError> {
        if self.size_at_most <= self.bounds.max_bytes {
            return Ok(());
        }
        let exact = shape::encoded_len(doc);
        self.spend(exact)?;
        if exact > self.bounds.max_bytes {
            return Err(PatchError::TooLarge {
                index,
                size: exact,
                limit: self.bounds.max_bytes,
            });
        }
        self.size_at_most = exact;
        Ok(())
    }
}

fn apply_one(
    doc: &mut Value,
    index: usize,
    op: &PatchOperation,
    budget: &mut Budget,
) -> Result<(), PatchError> {
    let fail = |path: &str, source: PointerError| PatchError::Failed {
        index,
        op: op.name(),
        path: path.to_owned(),
        source,
    };
    let parse = |path: &str| Pointer::parse(path).map_err(|e| fail(path, e));
    match op {
        PatchOperation::Add { path, value } => {
            let target = parse(path)?;
            budget.before_placing(index, op, &target, value)?;
            target.add(doc, value.clone()).map_err(|e| fail(path, e))?;
            budget.after_placing(index, doc)
        }
        PatchOperation::Remove { path } => parse(path)?
            .remove(doc)
            .map(drop)
            .map_err(|e| fail(path, e)),
        PatchOperation::Replace { path, value } => {
            let pointer = parse(path)?;
            budget.before_placing(index, op, &pointer, value)?;
            let target = pointer.get_mut(doc).map_err(|e| fail(path, e))?;
            *target = value.clone();
            budget.after_placing(index, doc)
        }
        PatchOperation::Move { from, path } => {
            let (source, target) = (parse(from)?, parse(path)?);
            if target.is_inside(&source) {
                return Err(PatchError::MoveIntoChild {
                    index,
                    from: from.clone(),
                    path: path.clone(),
                });
            }
            if source == target {
                return source.get(doc).map(drop).map_err(|e| fail(from, e));
            }
            let value = source.remove(doc).map_err(|e| fail(from, e))?;
            budget.before_placing(index, op, &target, &value)?;
            target.add(doc, value).map_err(|e| fail(path, e))?;
            budget.after_placing(index, doc)
        }
        PatchOperation::Copy { from, path } => {
            let target = parse(path)?;
            let value = parse(from)?.get(doc).map_err(|e| fail(from, e))?;
            // Checked before the copy is made: a copy of a value into its
            // own depths is how a few bytes of patch build a huge document.
            budget.before_placing(index, op, &target, value)?;
            let value = value.clone();
            target.add(doc, value).map_err(|e| fail(path, e))?;
            budget.after_placing(index, doc)
        }
        PatchOperation::Test { path, value } => {
            let actual = parse(path)?.get(doc).ok();
            if actual.is_some_and(|actual| json_equal(actual, value)) {
                Ok(())
            } else {
                Err(PatchError::TestFailed {
                    index,
                    path: path.clone(),
                    expected: value.clone(),
                    actual: actual.cloned().unwrap_or(Value::Null),
                })
            }
        }
    }
}

/// JSON equality as RFC 6902 `test` defines it: numbers compare by value
/// (`1` equals `1.0`), objects ignore member order.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::patch::json_equal;
/// assert!(json_equal(&json!(1), &json!(1.0)), "numbers compare by value");
/// assert!(!json_equal(&json!([1, 2]), &json!([2, 1])));
/// ```
pub fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => match (x.as_u64(), y.as_u64()) {
                (Some(x), Some(y)) => x == y,
                _ => x.as_f64() == y.as_f64(),
            },
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests;

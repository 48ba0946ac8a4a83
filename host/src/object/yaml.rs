//! Reading YAML from untrusted sources (apply bodies, manifest files) with
//! bounded work: YAML's own features make a small document expensive, and
//! these readers refuse such documents before doing the work.
//!
//! - **Deep nesting.** libyaml (under `serde_yaml_ng`) does work
//!   proportional to the nesting depth for every token, so 200 KB of `[`
//!   takes minutes. Objects cannot nest deeper than [`MAX_DEPTH`] levels
//!   anyway (JSON bodies have the same limit), so a first pass with
//!   `granit-parser` (serde-saphyr's event parser, whose scanner has
//!   nesting limits) refuses a deeper document after reading [`MAX_DEPTH`]
//!   levels of it.
//! - **Aliases** (`*a` repeating an `&a` anchor, the "billion laughs"):
//!   `serde_yaml_ng` expands them, so a document of a few kilobytes can
//!   describe billions of values. The value is built counting its nodes,
//!   and stops at [`MAX_NODES`]; everything that reads the same document
//!   with the same parser afterwards (the field review) is then bounded
//!   too.
//!
//! The documents themselves are read by `serde_yaml_ng` as before, so what
//! a valid document means does not change.

use std::cell::Cell;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// The deepest nesting of maps and lists accepted, as for JSON bodies
/// (`serde_json`'s recursion limit).
pub const MAX_DEPTH: usize = 128;

/// The most values (maps, lists and scalars, aliases expanded) one document
/// may hold: more than an object under the size limit can have.
pub const MAX_NODES: usize = 1_000_000;

/// Why a YAML text was refused.
///
/// ```
/// use setpoint::object::yaml::{self, YamlError};
/// let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
/// assert!(matches!(yaml::from_str(&deep), Err(YamlError::TooDeep { .. })));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum YamlError {
    /// Maps and lists nest deeper than [`MAX_DEPTH`].
    #[error("nesting deeper than {limit} levels")]
    TooDeep {
        /// The limit.
        limit: usize,
    },
    /// The document holds more than [`MAX_NODES`] values once its aliases
    /// are expanded.
    #[error("more than {limit} values once aliases are expanded")]
    TooManyValues {
        /// The limit.
        limit: usize,
    },
    /// The text is not valid YAML (or has more than one document where one
    /// is expected).
    #[error("{0}")]
    Syntax(String),
}

/// Read a YAML text of one document (JSON is YAML too) as a JSON value.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::yaml;
/// let value = yaml::from_str("kind: Widget\nspec: {replicas: 2, tags: [a, b]}\n")?;
/// assert_eq!(value, json!({"kind": "Widget", "spec": {"replicas": 2, "tags": ["a", "b"]}}));
/// # Ok::<(), yaml::YamlError>(())
/// ```
pub fn from_str(text: &str) -> Result<Value, YamlError> {
    check_structure(text).map_err(|(_, e)| e)?;
    let nodes = Cell::new(0);
    Bounded { nodes: &nodes }
        .deserialize(serde_yaml_ng::Deserializer::from_str(text))
        .map_err(|e| classify(e, &nodes))
}

/// Read every document of a YAML text, in order; an empty document is
/// `null`. A failure names the document (1-based) it happened in.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::yaml;
/// let docs = yaml::documents("a: 1\n---\n---\nb: [x]\n").unwrap();
/// assert_eq!(docs, [json!({"a": 1}), json!(null), json!({"b": ["x"]})]);
/// let (document, _) = yaml::documents("a: 1\n---\nb: [x\n").unwrap_err();
/// assert_eq!(document, 2);
/// ```
pub fn documents(text: &str) -> Result<Vec<Value>, (usize, YamlError)> {
    check_structure(text)?;
    let mut docs = Vec::new();
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let nodes = Cell::new(0);
        let value = Bounded { nodes: &nodes }
            .deserialize(doc)
            .map_err(|e| (i + 1, classify(e, &nodes)))?;
        docs.push(value);
    }
    Ok(docs)
}

/// The first pass: refuse nesting deeper than [`MAX_DEPTH`] after reading
/// at most that many levels of it. An event parser with nesting limits in
/// its scanner, so the work stays proportional to the text; it interprets
/// no scalar, so it refuses nothing for what the values say. A failure
/// names the document (1-based) it is in.
fn check_structure(text: &str) -> Result<(), (usize, YamlError)> {
    use granit_parser::{Event, Options, Parser};
    let mut options = Options::default();
    options.flow_nesting_limit = MAX_DEPTH + 1;
    options.block_nesting_limit = MAX_DEPTH + 1;
    let mut depth = 0usize;
    let mut document = 0usize;
    for event in Parser::new_from_str_with_options(text, options) {
        let at = document.max(1);
        match event {
            Ok((Event::DocumentStart(..), _)) => document += 1,
            Ok((Event::SequenceStart(..) | Event::MappingStart(..), _)) => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err((at, YamlError::TooDeep { limit: MAX_DEPTH }));
                }
            }
            Ok((Event::SequenceEnd | Event::MappingEnd, _)) => depth = depth.saturating_sub(1),
            Ok(_) => {}
            Err(err) if matches!(err.kind(), granit_parser::ErrorKind::RecursionLimitExceeded) => {
                return Err((at, YamlError::TooDeep { limit: MAX_DEPTH }));
            }
            Err(err) => return Err((at, YamlError::Syntax(err.to_string()))),
        }
    }
    Ok(())
}

fn classify(err: serde_yaml_ng::Error, nodes: &Cell<usize>) -> YamlError {
    let message = err.to_string();
    // serde_yaml_ng's own bound on alias jumps is one more way to expand too far.
    if nodes.get() > MAX_NODES || message.starts_with("repetition limit exceeded") {
        YamlError::TooManyValues { limit: MAX_NODES }
    } else if message.starts_with("recursion limit exceeded") {
        YamlError::TooDeep { limit: MAX_DEPTH }
    } else {
        YamlError::Syntax(message)
    }
}

/// Builds the JSON value as `serde_json` would, counting every value it
/// makes and failing past [`MAX_NODES`].
#[derive(Clone, Copy)]
struct Bounded<'a> {
    nodes: &'a Cell<usize>,
}

impl Bounded<'_> {
    fn count<E: serde::de::Error>(self) -> Result<(), E> {
        self.nodes.set(self.nodes.get() + 1);
        if self.nodes.get() > MAX_NODES {
            return Err(E::custom(format!(
                "more than {MAX_NODES} values once aliases are expanded"
            )));
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Bounded<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Bounded<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
        self.count()?;
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        self.count()?;
        Ok(Value::from(v))
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        self.count()?;
        Ok(Value::from(v))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        self.count()?;
        // As serde_json: a number JSON cannot hold is null.
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        self.count()?;
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Value, E> {
        self.count()?;
        Ok(Value::String(v))
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        self.count()?;
        Ok(Value::Null)
    }
    fn visit_none<E: serde::de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }
    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.count()?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.count()?;
        let mut members = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            self.count()?;
            let value = map.next_value_seed(self)?;
            members.insert(key, value);
        }
        Ok(Value::Object(members))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn documents_read_as_serde_yaml_ng_reads_them() {
        let text = "a: 1\nb: [true, null, 1.5, \"x\", ~]\nc: {d: e}\nf: .inf\ng: 0x10\n";
        let expected: Value = serde_yaml_ng::from_str(text).unwrap();
        assert_eq!(from_str(text).unwrap(), expected);
        assert_eq!(
            from_str("{\"json\": [1, {\"too\": 2}]}").unwrap(),
            json!({"json": [1, {"too": 2}]})
        );
        let anchored = from_str("base: &b {x: 1}\ncopy: *b\n").unwrap();
        assert_eq!(anchored["copy"], json!({"x": 1}), "aliases still work");
    }

    #[test]
    fn nesting_deeper_than_the_limit_is_refused_in_flow_and_block_style() {
        let ok_flow = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(from_str(&ok_flow).is_ok(), "the limit itself is fine");
        for depth in [MAX_DEPTH + 1, 10_000, 100_000] {
            let flow = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            assert_eq!(
                from_str(&flow),
                Err(YamlError::TooDeep { limit: MAX_DEPTH })
            );
            let maps = format!("{}x{}", "{a: ".repeat(depth), "}".repeat(depth));
            assert_eq!(
                from_str(&maps),
                Err(YamlError::TooDeep { limit: MAX_DEPTH })
            );
            let unclosed = "[".repeat(depth);
            assert!(from_str(&unclosed).is_err());
            let block = "- ".repeat(depth) + "x\n";
            assert_eq!(
                from_str(&block),
                Err(YamlError::TooDeep { limit: MAX_DEPTH })
            );
        }
        let (document, err) =
            documents(&format!("a: 1\n---\n{}\n", "[".repeat(50_000))).unwrap_err();
        assert_eq!(
            (document, err),
            (2, YamlError::TooDeep { limit: MAX_DEPTH })
        );
    }

    #[test]
    fn alias_expansion_stops_at_the_value_limit() {
        // Nine levels of nine aliases: 9^9 values from a few hundred bytes.
        let mut text = String::from("l0: &l0 [x, x, x, x, x, x, x, x, x]\n");
        for level in 1..=9 {
            let prev = format!("*l{}", level - 1);
            let items = [prev.as_str(); 9].join(", ");
            text.push_str(&format!("l{level}: &l{level} [{items}]\n"));
        }
        assert_eq!(
            from_str(&text),
            Err(YamlError::TooManyValues { limit: MAX_NODES })
        );
        // Few aliases of a big anchor: within serde_yaml_ng's bound on
        // alias jumps, but two million values.
        let big = format!(
            "big: &big [{}]\ncopies: [{}]\n",
            vec!["x"; 2_000].join(", "),
            vec!["*big"; 1_000].join(", ")
        );
        assert_eq!(
            from_str(&big),
            Err(YamlError::TooManyValues { limit: MAX_NODES })
        );
        let (_, err) = documents(&big).unwrap_err();
        assert_eq!(err, YamlError::TooManyValues { limit: MAX_NODES });
    }

    #[test]
    fn syntax_errors_and_several_documents_are_errors() {
        assert!(matches!(
            from_str("a: [unclosed"),
            Err(YamlError::Syntax(_))
        ));
        assert!(matches!(
            from_str("a: 1\n---\nb: 2\n"),
            Err(YamlError::Syntax(_))
        ));
    }
}

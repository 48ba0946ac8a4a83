//! JSON Pointer (RFC 6901): parsing `/a/b~1c/0` into tokens, and finding,
//! inserting and removing the value a pointer names. Owns pointer syntax
//! and lookup only; the JSON patch operations built on it are in
//! `object::patch`.

use serde_json::Value;

/// Why a pointer could not be parsed or followed.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::pointer::{Pointer, PointerError};
///
/// let doc = json!({"items": [1]});
/// assert!(matches!(Pointer::parse("/items/7").unwrap().get(&doc), Err(PointerError::BadIndex { .. })));
/// assert!(matches!(Pointer::parse("/nope").unwrap().get(&doc), Err(PointerError::Missing(_))));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PointerError {
    /// The text is not a JSON pointer (does not start with `/`, bad `~` escape).
    #[error("invalid JSON pointer {0:?}")]
    Syntax(String),
    /// Nothing exists at the pointer.
    #[error("no value at {0}")]
    Missing(String),
    /// A list index that is not a number, has leading zeros or is out of range.
    #[error("invalid list index {token:?} at {pointer}")]
    BadIndex {
        /// The pointer.
        pointer: String,
        /// The offending token.
        token: String,
    },
    /// The parent of the target is neither an object nor a list.
    #[error("the parent of {0} is not an object or a list")]
    NotAContainer(String),
}

/// A parsed JSON pointer; the empty pointer names the whole document.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::pointer::{Pointer, PointerError};
///
/// let doc = json!({"spec": {"ports": [80, 443]}});
/// assert_eq!(Pointer::parse("/spec/ports/1").unwrap().get(&doc).unwrap(), &json!(443));
/// assert_eq!(Pointer::parse("").unwrap().get(&doc).unwrap(), &doc, "the empty pointer is the document");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pointer {
    text: String,
    tokens: Vec<String>,
}

impl Pointer {
    /// Parse a pointer, unescaping `~1` (`/`) and `~0` (`~`).
    ///
    /// ```
    /// use setpoint::object::pointer::Pointer;
    /// let p = Pointer::parse("/metadata/labels/app.kubernetes.io~1name").unwrap();
    /// assert_eq!(p.tokens(), ["metadata", "labels", "app.kubernetes.io/name"]);
    /// assert!(Pointer::parse("metadata").is_err());
    /// ```
    pub fn parse(text: &str) -> Result<Self, PointerError> {
        if text.is_empty() {
            return Ok(Self {
                text: String::new(),
                tokens: Vec::new(),
            });
        }
        let Some(rest) = text.strip_prefix('/') else {
            return Err(PointerError::Syntax(text.to_owned()));
        };
        let tokens = rest
            .split('/')
            .map(|raw| unescape(raw).ok_or_else(|| PointerError::Syntax(text.to_owned())))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            text: text.to_owned(),
            tokens,
        })
    }

    /// The unescaped reference tokens.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::pointer::{Pointer, PointerError};
    ///
    /// assert_eq!(Pointer::parse("/a~0b/c").unwrap().tokens(), ["a~b", "c"]);
    /// ```
    pub fn tokens(&self) -> &[String] {
        &self.tokens
    }

    /// The pointer as written.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::pointer::{Pointer, PointerError};
    ///
    /// assert_eq!(Pointer::parse("/a~1b").unwrap().as_str(), "/a~1b");
    /// ```
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether `self` names a location strictly inside `other`.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::pointer::{Pointer, PointerError};
    ///
    /// let spec = Pointer::parse("/spec").unwrap();
    /// let replicas = Pointer::parse("/spec/replicas").unwrap();
    /// assert!(replicas.is_inside(&spec));
    /// assert!(!spec.is_inside(&spec));
    /// ```
    pub fn is_inside(&self, other: &Pointer) -> bool {
        self.tokens.len() > other.tokens.len() && self.tokens.starts_with(&other.tokens)
    }

    /// The value the pointer names.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::pointer::{Pointer, PointerError};
    ///
    /// let doc = json!({"metadata": {"labels": {"app": "web"}}});
    /// assert_eq!(Pointer::parse("/metadata/labels/app").unwrap().get(&doc).unwrap(), "web");
    /// ```
    pub fn get<'a>(&self, doc: &'a Value) -> Result<&'a Value, PointerError> {
        let mut current = doc;
        for token in &self.tokens {
            current = match current {
                Value::Object(map) => map.get(token),
                Value::Array(items) => items.get(self.index(token, items.len(), false)?),
                _ => None,
            }
            .ok_or_else(|| self.missing())?;
        }
        Ok(current)
    }

    /// Add `value` at the pointer: set an object member (replacing any),
    /// insert into a list before the index (`-` appends), or replace the
    /// whole document for the empty pointer. The parent must exist.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::pointer::{Pointer, PointerError};
    ///
    /// let mut doc = json!({"items": [1, 3]});
    /// Pointer::parse("/items/1").unwrap().add(&mut doc, json!(2)).unwrap();
    /// Pointer::parse("/items/-").unwrap().add(&mut doc, json!(4)).unwrap();
    /// assert_eq!(doc, json!({"items": [1, 2, 3, 4]}));
    /// assert!(Pointer::parse("/missing/x").unwrap().add(&mut doc, json!(0)).is_err());
    /// ```
    pub fn add(&self, doc: &mut Value, value: Value) -> Result<(), PointerError> {
        let Some((last, parent)) = self.split_last() else {
            *doc = value;
            return Ok(());
        };
        match parent.get_mut(doc)? {
            Value::Object(map) => {
                map.insert(last.clone(), value);
                Ok(())
            }
            Value::Array(items) => {
                let at = self.index(last, items.len(), true)?;
                items.insert(at, value);
                Ok(())
            }
            _ => Err(PointerError::NotAContainer(self.text.clone())),
        }
    }

    /// Remove and return the value at the pointer; it must exist. The whole
    /// document cannot be removed.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::pointer::{Pointer, PointerError};
    ///
    /// let mut doc = json!({"a": 1, "b": 2});
    /// assert_eq!(Pointer::parse("/a").unwrap().remove(&mut doc).unwrap(), json!(1));
    /// assert_eq!(doc, json!({"b": 2}));
    /// ```
    pub fn remove(&self, doc: &mut Value) -> Result<Value, PointerError> {
        let Some((last, parent)) = self.split_last() else {
            return Err(PointerError::Missing("the document root".into()));
        };
        match parent.get_mut(doc).map_err(|_| self.missing())? {
            Value::Object(map) => map.remove(last).ok_or_else(|| self.missing()),
            Value::Array(items) => {
                let at = self.index(last, items.len(), false)?;
                Ok(items.remove(at))
            }
            _ => Err(self.missing()),
        }
    }

    /// A mutable reference to the value at the pointer.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::pointer::{Pointer, PointerError};
    ///
    /// let mut doc = json!({"spec": {"replicas": 1}});
    /// *Pointer::parse("/spec/replicas").unwrap().get_mut(&mut doc).unwrap() = json!(3);
    /// assert_eq!(doc["spec"]["replicas"], 3);
    /// ```
    pub fn get_mut<'a>(&self, doc: &'a mut Value) -> Result<&'a mut Value, PointerError> {
        let mut current = doc;
        for token in &self.tokens {
            current = match current {
                Value::Object(map) => map.get_mut(token),
                Value::Array(items) => {
                    let at = self.index(token, items.len(), false)?;
                    items.get_mut(at)
                }
                _ => None,
            }
            .ok_or_else(|| self.missing())?;
        }
        Ok(current)
    }

    fn split_last(&self) -> Option<(&String, Pointer)> {
        let (last, parent) = self.tokens.split_last()?;
        let parent_text = self
            .text
            .rfind('/')
            .map(|i| self.text[..i].to_owned())
            .unwrap_or_default();
        Some((
            last,
            Pointer {
                text: parent_text,
                tokens: parent.to_vec(),
            },
        ))
    }

    /// A list index: digits without leading zeros, below `len` (or equal to
    /// it, or `-`, when inserting).
    fn index(&self, token: &str, len: usize, inserting: bool) -> Result<usize, PointerError> {
        let bad = || PointerError::BadIndex {
            pointer: self.text.clone(),
            token: token.to_owned(),
        };
        if token == "-" {
            return if inserting { Ok(len) } else { Err(bad()) };
        }
        let well_formed = !token.is_empty()
            && token.bytes().all(|b| b.is_ascii_digit())
            && (token == "0" || !token.starts_with('0'));
        let index: usize = if well_formed {
            token.parse().map_err(|_| bad())?
        } else {
            return Err(bad());
        };
        if index < len || (inserting && index == len) {
            Ok(index)
        } else {
            Err(bad())
        }
    }

    fn missing(&self) -> PointerError {
        PointerError::Missing(self.text.clone())
    }
}

fn unescape(raw: &str) -> Option<String> {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '~' {
            match chars.next() {
                Some('0') => out.push('~'),
                Some('1') => out.push('/'),
                _ => return None,
            }
        } else {
            out.push(c);
        }
    }
    Some(out)
}

/// Escape one reference token (`~` → `~0`, `/` → `~1`).
///
/// ```
/// use setpoint::object::pointer::{Pointer, escape};
/// let token = escape("app.kubernetes.io/name");
/// assert_eq!(token, "app.kubernetes.io~1name");
/// assert_eq!(Pointer::parse(&format!("/{token}")).unwrap().tokens(), ["app.kubernetes.io/name"]);
/// ```
pub fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn escapes_round_trip_and_bad_escapes_are_syntax_errors() {
        let p = Pointer::parse("/a~1b/c~0d/~01").unwrap();
        assert_eq!(p.tokens(), ["a/b", "c~d", "~1"]);
        assert_eq!(escape("a/b~c"), "a~1b~0c");
        assert!(matches!(
            Pointer::parse("/a~2"),
            Err(PointerError::Syntax(_))
        ));
        assert!(matches!(
            Pointer::parse("/a~"),
            Err(PointerError::Syntax(_))
        ));
        assert_eq!(Pointer::parse("").unwrap().tokens().len(), 0);
        assert_eq!(Pointer::parse("/").unwrap().tokens(), [""]);
    }

    #[test]
    fn lookups_follow_objects_and_list_indexes() {
        let doc = json!({"a": [10, {"b": true}], "": 1});
        assert_eq!(
            Pointer::parse("/a/1/b").unwrap().get(&doc).unwrap(),
            &json!(true)
        );
        assert_eq!(Pointer::parse("/").unwrap().get(&doc).unwrap(), &json!(1));
        assert_eq!(Pointer::parse("").unwrap().get(&doc).unwrap(), &doc);
        for bad in ["/a/01", "/a/2", "/a/-", "/a/x", "/a/"] {
            assert!(
                matches!(
                    Pointer::parse(bad).unwrap().get(&doc),
                    Err(PointerError::BadIndex { .. })
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            Pointer::parse("/missing/x").unwrap().get(&doc),
            Err(PointerError::Missing(_))
        ));
    }

    #[test]
    fn add_inserts_into_lists_and_remove_shifts_them() {
        let mut doc = json!({"a": [1, 3]});
        Pointer::parse("/a/1")
            .unwrap()
            .add(&mut doc, json!(2))
            .unwrap();
        Pointer::parse("/a/-")
            .unwrap()
            .add(&mut doc, json!(4))
            .unwrap();
        Pointer::parse("/a/4")
            .unwrap()
            .add(&mut doc, json!(5))
            .unwrap();
        assert_eq!(doc, json!({"a": [1, 2, 3, 4, 5]}));
        assert_eq!(
            Pointer::parse("/a/0").unwrap().remove(&mut doc).unwrap(),
            json!(1)
        );
        assert_eq!(doc, json!({"a": [2, 3, 4, 5]}));
        assert!(
            Pointer::parse("/a/9")
                .unwrap()
                .add(&mut doc, json!(0))
                .is_err()
        );
        assert!(
            Pointer::parse("/x/y")
                .unwrap()
                .add(&mut doc, json!(0))
                .is_err()
        );
        assert!(Pointer::parse("").unwrap().remove(&mut doc).is_err());
        Pointer::parse("")
            .unwrap()
            .add(&mut doc, json!("all"))
            .unwrap();
        assert_eq!(doc, json!("all"));
    }
}

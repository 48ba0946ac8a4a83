//! Label selectors in the Kubernetes string syntax: `a=b`, `a==b`, `a!=b`,
//! `a in (x,y)`, `a notin (x,y)`, `a` (exists), `!a` (does not exist),
//! joined by commas; every requirement must hold.

use serde_json::{Map, Value};

/// A parsed label selector. The empty selector matches everything.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::selector::LabelSelector;
///
/// let all = LabelSelector::default();
/// assert!(all.is_empty() && all.matches(None));
/// let web = LabelSelector::parse("app=web").unwrap();
/// assert!(!web.matches(None));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A selector string that does not parse.
///
/// ```
/// use setpoint::object::selector::LabelSelector;
/// let err = LabelSelector::parse("app in (web").unwrap_err();
/// assert_eq!(err.selector, "app in (web");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector {selector:?}: {reason}")]
pub struct SelectorError {
    /// The selector as given.
    pub selector: String,
    /// What is wrong with it.
    pub reason: String,
}

impl LabelSelector {
    /// Parse a selector string.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::selector::LabelSelector;
    /// let sel = LabelSelector::parse("app=web,tier in (front, back),!canary").unwrap();
    /// assert!(sel.matches(json!({"app": "web", "tier": "front"}).as_object()));
    /// assert!(!sel.matches(json!({"app": "web", "tier": "db"}).as_object()));
    /// ```
    pub fn parse(selector: &str) -> Result<Self, SelectorError> {
        let err = |reason: &str| SelectorError {
            selector: selector.to_owned(),
            reason: reason.to_owned(),
        };
        let mut requirements = Vec::new();
        for term in split_terms(selector).map_err(|r| err(&r))? {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            requirements.push(parse_term(term).map_err(|r| err(&r))?);
        }
        Ok(Self { requirements })
    }

    /// A selector requiring every `key=value` of `labels` (a `matchLabels` map).
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::selector::LabelSelector;
    ///
    /// let labels = json!({"app": "web", "tier": "front"});
    /// let selector = LabelSelector::from_match_labels(labels.as_object().unwrap());
    /// assert!(selector.matches(labels.as_object()));
    /// assert!(!selector.matches(json!({"app": "web"}).as_object()));
    /// ```
    pub fn from_match_labels(labels: &Map<String, Value>) -> Self {
        let requirements = labels
            .iter()
            .map(|(k, v)| Requirement::Equals(k.clone(), v.as_str().unwrap_or("").to_owned()))
            .collect();
        Self { requirements }
    }

    /// Whether the selector has no requirements (matches everything).
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::selector::LabelSelector;
    ///
    /// assert!(LabelSelector::parse("").unwrap().is_empty());
    /// assert!(!LabelSelector::parse("app").unwrap().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether `labels` (an object's `metadata.labels`) satisfy the selector.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::selector::LabelSelector;
    ///
    /// let canary = LabelSelector::parse("track notin (stable)").unwrap();
    /// assert!(canary.matches(json!({"track": "canary"}).as_object()));
    /// assert!(canary.matches(None), "a missing label is not in the set");
    /// ```
    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        let get = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
        self.requirements.iter().all(|req| match req {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => !get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::DoesNotExist(k) => get(k).is_none(),
        })
    }
}

/// Split on commas that are not inside parentheses.
fn split_terms(selector: &str) -> Result<Vec<&str>, String> {
    let mut terms = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in selector.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.checked_sub(1).ok_or("unbalanced ')'")?,
            ',' if depth == 0 => {
                terms.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced '('".into());
    }
    terms.push(&selector[start..]);
    Ok(terms)
}

fn parse_term(term: &str) -> Result<Requirement, String> {
    if let Some(key) = term.strip_prefix('!') {
        return Ok(Requirement::DoesNotExist(valid_key(key.trim())?));
    }
    for (op, ctor) in [
        (
            "!=",
            Requirement::NotEquals as fn(String, String) -> Requirement,
        ),
        ("==", Requirement::Equals),
        ("=", Requirement::Equals),
    ] {
        if let Some((k, v)) = term.split_once(op) {
            return Ok(ctor(valid_key(k.trim())?, valid_value(v.trim())?));
        }
    }
    let words: Vec<&str> = term.splitn(2, char::is_whitespace).collect();
    if let [key, rest] = words.as_slice() {
        let rest = rest.trim();
        let (op, values) = if let Some(v) = rest.strip_prefix("notin") {
            ("notin", v)
        } else if let Some(v) = rest.strip_prefix("in") {
            ("in", v)
        } else {
            return Err(format!("unknown operator in {term:?}"));
        };
        let values = values
            .trim()
            .strip_prefix('(')
            .and_then(|v| v.strip_suffix(')'))
            .ok_or_else(|| format!("expected a parenthesised value list after {op:?}"))?;
        let values = values
            .split(',')
            .map(|v| valid_value(v.trim()))
            .collect::<Result<Vec<_>, _>>()?;
        let key = valid_key(key)?;
        return Ok(if op == "in" {
            Requirement::In(key, values)
        } else {
            Requirement::NotIn(key, values)
        });
    }
    Ok(Requirement::Exists(valid_key(term)?))
}

fn valid_key(key: &str) -> Result<String, String> {
    let ok = !key.is_empty()
        && key.len() <= 317
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if ok {
        Ok(key.to_owned())
    } else {
        Err(format!("invalid label key {key:?}"))
    }
}

fn valid_value(value: &str) -> Result<String, String> {
    let ok = value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(value.to_owned())
    } else {
        Err(format!("invalid label value {value:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn matches(selector: &str, labels: Value) -> bool {
        LabelSelector::parse(selector)
            .unwrap()
            .matches(labels.as_object())
    }

    #[test]
    fn every_operator_matches_as_kubernetes_defines_it() {
        let labels = json!({"app": "web", "tier": "front"});
        assert!(matches("", labels.clone()));
        assert!(matches("app=web", labels.clone()));
        assert!(matches("app==web", labels.clone()));
        assert!(!matches("app=db", labels.clone()));
        assert!(matches("app!=db", labels.clone()));
        assert!(matches("missing!=x", labels.clone()));
        assert!(matches("tier in (front,back)", labels.clone()));
        assert!(!matches("tier in (back)", labels.clone()));
        assert!(matches("tier notin (back)", labels.clone()));
        assert!(matches("missing notin (back)", labels.clone()));
        assert!(matches("app", labels.clone()));
        assert!(!matches("missing", labels.clone()));
        assert!(matches("!missing", labels.clone()));
        assert!(!matches("!app", labels.clone()));
        assert!(matches("app=web, tier in (front), !canary", labels.clone()));
        assert!(!matches("app=web,tier=back", labels));
        assert!(!matches("app", Value::Null));
    }

    #[test]
    fn malformed_selectors_are_rejected_with_the_reason() {
        for bad in ["app in (a", "app in a", "a b c", "app=we b", "=x"] {
            let err = LabelSelector::parse(bad).unwrap_err();
            assert_eq!(err.selector, bad);
        }
    }
}

//! The core `v1 Secret` kind: what the host knows of it and the rules its
//! writes follow, as in Kubernetes. `data` maps keys to base64 strings;
//! `stringData` (plain text, write-only) is folded into `data` on every
//! write, create, update, patch and apply alike; `type` defaults to
//! `Opaque` and cannot change; an `immutable: true` Secret keeps its data.
//!
//! Values never appear in an error: a bad value is reported by its key.
//! Who may read a Secret is the tokens file's business (`server::auth`).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value};

use super::{Error, Result};
use crate::object::{KindInfo, Object, meta};

/// The kind name, in the core group.
pub const KIND: &str = "Secret";

/// The `type` a Secret gets when it names none.
pub const DEFAULT_TYPE: &str = "Opaque";

/// The built-in kind's description: `secrets`, namespaced, no short name.
///
/// ```
/// let secrets = setpoint::api::secret::kind_info();
/// assert_eq!((secrets.plural.as_str(), secrets.namespaced), ("secrets", true));
/// assert!(secrets.short_names.is_empty());
/// ```
pub fn kind_info() -> KindInfo {
    KindInfo {
        group: String::new(),
        version: "v1".into(),
        kind: KIND.into(),
        plural: "secrets".into(),
        singular: "secret".into(),
        short_names: vec![],
        list_kind: "SecretList".into(),
        namespaced: true,
        status_subresource: false,
        schema: None,
        printer_columns: vec![
            serde_json::json!({"name": "Type", "type": "string", "jsonPath": ".type"}),
            serde_json::json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}),
        ],
    }
}

/// Whether `kind` is the core Secret kind.
///
/// ```
/// use setpoint::api::{KindRegistry, secret};
/// let kinds = KindRegistry::with_builtins();
/// assert!(secret::is_secret(&*kinds.require("v1", "Secret")?));
/// assert!(!secret::is_secret(&*kinds.require("v1", "Event")?));
/// # Ok::<(), setpoint::api::Error>(())
/// ```
pub fn is_secret(kind: &KindInfo) -> bool {
    kind.group.is_empty() && kind.version == "v1" && kind.kind == KIND
}

/// The decoded value of `key` in a stored Secret's `data`, or `None` when
/// the Secret has no such key. What a host that sends a secret uses.
///
/// ```
/// use serde_json::json;
/// let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
///     "data": {"apiKey": "czNjcjN0"}});
/// assert_eq!(setpoint::api::secret::value(&secret, "apiKey")?, Some(b"s3cr3t".to_vec()));
/// assert_eq!(setpoint::api::secret::value(&secret, "other")?, None);
/// # Ok::<(), setpoint::api::Error>(())
/// ```
pub fn value(secret: &Object, key: &str) -> Result<Option<Vec<u8>>> {
    let Some(encoded) = secret["data"].get(key) else {
        return Ok(None);
    };
    decode(meta::name(secret), key, encoded).map(Some)
}

fn decode(name: &str, key: &str, encoded: &Value) -> Result<Vec<u8>> {
    let invalid = |message: &str| Error::invalid(KIND, name, &format!("data[{key}]"), message);
    let text = encoded
        .as_str()
        .ok_or_else(|| invalid("must be a base64-encoded string"))?;
    STANDARD
        .decode(text)
        .map_err(|_| invalid("illegal base64 data"))
}

/// Prepare a Secret for storage: fold `stringData` into `data`, check
/// keys and values, default `type`, and when `current` is given (an
/// update) keep `type` and, for an immutable Secret, `data` and
/// `immutable` as they were.
///
/// ```
/// use serde_json::json;
/// use setpoint::api::secret;
/// let mut s = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
///     "stringData": {"user": "admin"}});
/// secret::prepare(None, &mut s)?;
/// assert_eq!(s["data"]["user"], "YWRtaW4=");
/// assert_eq!(s["type"], "Opaque");
/// assert!(s.get("stringData").is_none());
///
/// let mut bad = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
///     "data": {"user": "not base64!"}});
/// let err = secret::prepare(None, &mut bad).unwrap_err();
/// assert_eq!(err.to_string(), r#"Secret "s" is invalid: data[user]: illegal base64 data"#);
/// # Ok::<(), setpoint::api::Error>(())
/// ```
pub fn prepare(current: Option<&Object>, next: &mut Object) -> Result<()> {
    let name = meta::name(next).to_owned();
    let invalid = |field: &str, message: &str| Error::invalid(KIND, &name, field, message);
    let Some(map) = next.as_object_mut() else {
        return Err(Error::BadRequest("a Secret must be a JSON object".into()));
    };
    let mut data = match map.remove("data") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(data)) => data,
        Some(_) => return Err(invalid("data", "must be a map of base64-encoded strings")),
    };
    for (key, encoded) in &data {
        check_key(&name, "data", key)?;
        decode(&name, key, encoded)?;
    }
    match map.remove("stringData") {
        None | Some(Value::Null) => {}
        Some(Value::Object(plain)) => {
            for (key, text) in plain {
                check_key(&name, "stringData", &key)?;
                let Value::String(text) = text else {
                    return Err(invalid(&format!("stringData[{key}]"), "must be a string"));
                };
                // As in Kubernetes: stringData wins over data for a key in both.
                data.insert(key, Value::String(STANDARD.encode(text)));
            }
        }
        Some(_) => return Err(invalid("stringData", "must be a map of strings")),
    }
    if !data.is_empty() {
        map.insert("data".into(), Value::Object(data));
    }
    match map.get("type") {
        // As in Kubernetes, an empty type (what typed clients send when
        // none is set) is the default too.
        None | Some(Value::Null) => {
            map.insert("type".into(), Value::String(DEFAULT_TYPE.into()));
        }
        Some(Value::String(t)) if t.is_empty() => {
            map.insert("type".into(), Value::String(DEFAULT_TYPE.into()));
        }
        Some(Value::String(_)) => {}
        Some(_) => return Err(invalid("type", "must be a string")),
    }
    if let Some(immutable) = map.get("immutable")
        && !immutable.is_null()
        && !immutable.is_boolean()
    {
        return Err(invalid("immutable", "must be a boolean"));
    }
    let Some(current) = current else {
        return Ok(());
    };
    if current.get("type") != next.get("type") {
        return Err(invalid("type", "field is immutable"));
    }
    if current["immutable"] == Value::Bool(true)
        && (current.get("data") != next.get("data") || next["immutable"] != Value::Bool(true))
    {
        return Err(invalid(
            "data",
            "field is immutable when `immutable` is set",
        ));
    }
    Ok(())
}

/// Keys are what Kubernetes allows in a Secret or ConfigMap: letters,
/// digits, `-`, `_` and `.`, at most 253 characters, not `.` or `..`.
fn check_key(name: &str, field: &str, key: &str) -> Result<()> {
    let ok = !key.is_empty()
        && key.len() <= 253
        && key != "."
        && key != ".."
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            KIND,
            name,
            &format!("{field}[{key}]"),
            "a valid key must consist of alphanumeric characters, '-', '_' or '.'",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn secret(body: Value) -> Object {
        let mut s = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}});
        for (k, v) in body.as_object().unwrap() {
            s[k] = v.clone();
        }
        s
    }

    #[test]
    fn string_data_is_folded_into_data_and_wins_over_it() {
        let mut s = secret(json!({"data": {"a": "eA==", "b": "eQ=="}, "stringData": {"b": "z"}}));
        prepare(None, &mut s).unwrap();
        assert_eq!(s["data"], json!({"a": "eA==", "b": "eg=="}));
        assert!(s.get("stringData").is_none());
        assert_eq!(s["type"], "Opaque");
    }

    #[test]
    fn a_type_is_kept_and_cannot_change_on_update() {
        let mut s = secret(json!({"type": "kubernetes.io/basic-auth"}));
        prepare(None, &mut s).unwrap();
        assert_eq!(s["type"], "kubernetes.io/basic-auth");
        let mut next = secret(json!({"type": "Opaque"}));
        let err = prepare(Some(&s), &mut next).unwrap_err();
        assert!(
            err.to_string().contains("type: field is immutable"),
            "{err}"
        );
        let mut same = secret(json!({}));
        let err = prepare(Some(&s), &mut same).unwrap_err();
        assert!(
            err.to_string().contains("type"),
            "a dropped type defaults to Opaque, a change: {err}"
        );
    }

    #[test]
    fn bad_values_and_keys_are_named_without_the_value() {
        let mut s = secret(json!({"data": {"token": "hunter2!!"}}));
        let err = prepare(None, &mut s).unwrap_err().to_string();
        assert!(err.contains("data[token]"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");

        let mut s = secret(json!({"stringData": {"bad key": "x"}}));
        let err = prepare(None, &mut s).unwrap_err().to_string();
        assert!(err.contains("stringData[bad key]"), "{err}");

        let mut s = secret(json!({"stringData": {"n": 5}}));
        assert!(prepare(None, &mut s).is_err());
        let mut s = secret(json!({"data": ["x"]}));
        assert!(prepare(None, &mut s).is_err());
        let mut s = secret(json!({"immutable": "yes"}));
        assert!(prepare(None, &mut s).is_err());
        let mut s = secret(json!({"type": ""}));
        prepare(None, &mut s).unwrap();
        assert_eq!(s["type"], "Opaque", "empty is the default");
    }

    #[test]
    fn an_immutable_secret_keeps_its_data_and_stays_immutable() {
        let mut s = secret(json!({"immutable": true, "stringData": {"k": "v"}}));
        prepare(None, &mut s).unwrap();

        let mut relabelled = s.clone();
        relabelled["metadata"]["labels"] = json!({"a": "b"});
        prepare(Some(&s), &mut relabelled).unwrap();

        let mut changed = s.clone();
        changed["stringData"] = json!({"k": "w"});
        let err = prepare(Some(&s), &mut changed).unwrap_err();
        assert!(err.to_string().contains("immutable"), "{err}");

        let mut unlocked = s.clone();
        unlocked["immutable"] = json!(false);
        assert!(prepare(Some(&s), &mut unlocked).is_err());
    }

    #[test]
    fn value_decodes_a_key() {
        let mut s = secret(json!({"stringData": {"k": "v\u{e9}"}}));
        prepare(None, &mut s).unwrap();
        assert_eq!(value(&s, "k").unwrap().unwrap(), "v\u{e9}".as_bytes());
        assert_eq!(value(&s, "missing").unwrap(), None);
    }
}

//! Field paths and field errors in the Kubernetes shape (`spec.items[2].name`,
//! `Invalid value: 5: …`), the counterpart of apimachinery's `field` package.
//! Owns the wording of a field error; what is checked lives with the checker
//! (`object::schema`, `api`).

use std::fmt;

use serde_json::Value;

/// A path to a field, rendered the Kubernetes way: `spec.template.metadata`,
/// `spec.items[2].name`. The empty path is the object itself.
///
/// ```
/// use setpoint::object::field::FieldPath;
/// let path = FieldPath::new("spec").child("replicas");
/// assert_eq!(path.as_str(), "spec.replicas");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FieldPath(String);

impl FieldPath {
    /// The root (the whole object).
    ///
    /// ```
    /// use setpoint::object::field::FieldPath;
    /// assert!(FieldPath::root().is_root());
    /// assert_eq!(FieldPath::root().child("spec").as_str(), "spec");
    /// ```
    pub fn root() -> Self {
        Self::default()
    }

    /// A path from its rendered form.
    ///
    /// ```
    /// use setpoint::object::field::FieldPath;
    /// assert_eq!(FieldPath::new("spec.items[2]").index(0).to_string(), "spec.items[2][0]");
    /// ```
    pub fn new(path: impl Into<String>) -> Self {
        Self(path.into())
    }

    /// The path of field `name` below this one.
    ///
    /// ```
    /// use setpoint::object::field::FieldPath;
    /// let path = FieldPath::root().child("spec").child("items").index(2).child("name");
    /// assert_eq!(path.to_string(), "spec.items[2].name");
    /// ```
    pub fn child(&self, name: &str) -> Self {
        if self.0.is_empty() {
            Self(name.to_owned())
        } else {
            Self(format!("{}.{name}", self.0))
        }
    }

    /// The path of list item `index` below this one.
    ///
    /// ```
    /// use setpoint::object::field::FieldPath;
    /// assert_eq!(FieldPath::new("spec.ports").index(1).as_str(), "spec.ports[1]");
    /// ```
    pub fn index(&self, index: usize) -> Self {
        Self(format!("{}[{index}]", self.0))
    }

    /// The path of map entry `key` below this one, as `properties[spec]`
    /// (the form Kubernetes uses inside schemas).
    ///
    /// ```
    /// use setpoint::object::field::FieldPath;
    /// let path = FieldPath::new("openAPIV3Schema.properties").key("spec");
    /// assert_eq!(path.as_str(), "openAPIV3Schema.properties[spec]");
    /// ```
    pub fn key(&self, key: &str) -> Self {
        Self(format!("{}[{key}]", self.0))
    }

    /// The rendered path.
    ///
    /// ```
    /// use setpoint::object::field::FieldPath;
    /// assert_eq!(FieldPath::new("metadata.name").as_str(), "metadata.name");
    /// ```
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is the root.
    ///
    /// ```
    /// use setpoint::object::field::FieldPath;
    /// assert!(FieldPath::new("").is_root());
    /// assert!(!FieldPath::new("spec").is_root());
    /// ```
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What is wrong with a field; decides the wording and the Kubernetes
/// `StatusCause.reason`.
///
/// ```
/// use setpoint::object::field::{ErrorType, FieldError, FieldPath};
/// let err = FieldError::required(FieldPath::new("spec.image"), "");
/// assert_eq!(err.error_type, ErrorType::Required);
/// assert_eq!(err.to_string(), "spec.image: Required value");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum ErrorType {
    /// A required field is missing (`Required value`).
    #[serde(rename = "FieldValueRequired")]
    Required,
    /// The value breaks a rule (`Invalid value: …`).
    #[serde(rename = "FieldValueInvalid")]
    Invalid,
    /// The value has the wrong JSON type (`Invalid value: "string": …`).
    #[serde(rename = "FieldValueTypeInvalid")]
    TypeInvalid,
    /// The value is not one of an enumeration (`Unsupported value: …`).
    #[serde(rename = "FieldValueNotSupported")]
    NotSupported,
    /// The value is too long (`Too long: …`).
    #[serde(rename = "FieldValueTooLong")]
    TooLong,
    /// The list or map has too many entries (`Too many: …`).
    #[serde(rename = "FieldValueTooMany")]
    TooMany,
    /// The field may not be set (`Forbidden: …`).
    #[serde(rename = "FieldValueForbidden")]
    Forbidden,
    /// The value repeats another (`Duplicate value: …`).
    #[serde(rename = "FieldValueDuplicate")]
    Duplicate,
}

impl ErrorType {
    /// The Kubernetes `StatusCause.reason`, e.g. `FieldValueRequired`.
    ///
    /// ```
    /// use setpoint::object::field::ErrorType;
    /// assert_eq!(ErrorType::NotSupported.cause_type(), "FieldValueNotSupported");
    /// ```
    pub fn cause_type(self) -> &'static str {
        match self {
            ErrorType::Required => "FieldValueRequired",
            ErrorType::Invalid => "FieldValueInvalid",
            ErrorType::TypeInvalid => "FieldValueTypeInvalid",
            ErrorType::NotSupported => "FieldValueNotSupported",
            ErrorType::TooLong => "FieldValueTooLong",
            ErrorType::TooMany => "FieldValueTooMany",
            ErrorType::Forbidden => "FieldValueForbidden",
            ErrorType::Duplicate => "FieldValueDuplicate",
        }
    }

    fn label(self) -> &'static str {
        match self {
            ErrorType::Required => "Required value",
            ErrorType::Invalid | ErrorType::TypeInvalid => "Invalid value",
            ErrorType::NotSupported => "Unsupported value",
            ErrorType::TooLong => "Too long",
            ErrorType::TooMany => "Too many",
            ErrorType::Forbidden => "Forbidden",
            ErrorType::Duplicate => "Duplicate value",
        }
    }
}

/// One invalid field: its path, what is wrong, the offending value (if it
/// is shown) and a detail sentence.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::field::{FieldError, FieldPath};
/// let err = FieldError::invalid(FieldPath::new("spec.replicas"), json!(-1), "must be >= 0");
/// assert_eq!(err.to_string(), "spec.replicas: Invalid value: -1: must be >= 0");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// What kind of problem.
    pub error_type: ErrorType,
    /// Where.
    pub field: FieldPath,
    /// The offending value, shown in the message when present.
    pub value: Option<Value>,
    /// The rule that was broken, e.g. `must be of type integer`.
    pub detail: String,
}

impl FieldError {
    /// `Required value`.
    ///
    /// ```
    /// use setpoint::object::field::{FieldError, FieldPath};
    /// let err = FieldError::required(FieldPath::new("metadata.name"), "name is required");
    /// assert_eq!(err.body(), "Required value: name is required");
    /// ```
    pub fn required(field: FieldPath, detail: impl Into<String>) -> Self {
        Self {
            error_type: ErrorType::Required,
            field,
            value: None,
            detail: detail.into(),
        }
    }

    /// `Invalid value: <value>: <detail>`.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::field::{FieldError, FieldPath};
    /// let err = FieldError::invalid(FieldPath::new("spec.image"), json!(""), "must not be empty");
    /// assert_eq!(err.body(), r#"Invalid value: "": must not be empty"#);
    /// ```
    pub fn invalid(field: FieldPath, value: Value, detail: impl Into<String>) -> Self {
        Self {
            error_type: ErrorType::Invalid,
            field,
            value: Some(value),
            detail: detail.into(),
        }
    }

    /// `Invalid value: <value>: <detail>` for a wrong JSON type.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::field::{ErrorType, FieldError, FieldPath};
    /// let err = FieldError::type_invalid(FieldPath::new("spec.replicas"), json!("string"), "must be of type integer");
    /// assert_eq!(err.error_type.cause_type(), "FieldValueTypeInvalid");
    /// assert_eq!(err.body(), r#"Invalid value: "string": must be of type integer"#);
    /// ```
    pub fn type_invalid(field: FieldPath, value: Value, detail: impl Into<String>) -> Self {
        Self {
            error_type: ErrorType::TypeInvalid,
            field,
            value: Some(value),
            detail: detail.into(),
        }
    }

    /// `Unsupported value: <value>: supported values: "a", "b"`.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::field::{FieldError, FieldPath};
    /// let err = FieldError::not_supported(FieldPath::new("spec.color"), json!("pink"), &["red".into(), "blue".into()]);
    /// assert_eq!(err.body(), r#"Unsupported value: "pink": supported values: "red", "blue""#);
    /// ```
    pub fn not_supported(field: FieldPath, value: Value, supported: &[String]) -> Self {
        let list = supported
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        Self {
            error_type: ErrorType::NotSupported,
            field,
            value: Some(value),
            detail: format!("supported values: {list}"),
        }
    }

    /// `Too long: may not be longer than <max>`.
    ///
    /// ```
    /// use setpoint::object::field::{FieldError, FieldPath};
    /// let err = FieldError::too_long(FieldPath::new("metadata.name"), 253);
    /// assert_eq!(err.body(), "Too long: may not be longer than 253");
    /// ```
    pub fn too_long(field: FieldPath, max: u64) -> Self {
        Self {
            error_type: ErrorType::TooLong,
            field,
            value: None,
            detail: format!("may not be longer than {max}"),
        }
    }

    /// `Too many: <actual>: must have at most <max> items`.
    ///
    /// ```
    /// use setpoint::object::field::{FieldError, FieldPath};
    /// let err = FieldError::too_many(FieldPath::new("spec.ports"), 5, 3);
    /// assert_eq!(err.body(), "Too many: 5: must have at most 3 items");
    /// ```
    pub fn too_many(field: FieldPath, actual: usize, max: u64) -> Self {
        Self {
            error_type: ErrorType::TooMany,
            field,
            value: Some(Value::from(actual)),
            detail: format!("must have at most {max} items"),
        }
    }

    /// `Forbidden: <detail>`.
    ///
    /// ```
    /// use setpoint::object::field::{FieldError, FieldPath};
    /// let err = FieldError::forbidden(FieldPath::new("metadata.uid"), "set by the host");
    /// assert_eq!(err.to_string(), "metadata.uid: Forbidden: set by the host");
    /// ```
    pub fn forbidden(field: FieldPath, detail: impl Into<String>) -> Self {
        Self {
            error_type: ErrorType::Forbidden,
            field,
            value: None,
            detail: detail.into(),
        }
    }

    /// The message without the field path, as in a `StatusCause.message`:
    /// `Invalid value: "x": spec.replicas in body must be of type integer: "string"`.
    ///
    /// ```
    /// use serde_json::json;
    /// use setpoint::object::field::{FieldError, FieldPath};
    /// let err = FieldError::invalid(FieldPath::new("spec.replicas"), json!(500), "should be less than or equal to 100");
    /// assert_eq!(err.body(), "Invalid value: 500: should be less than or equal to 100");
    /// ```
    pub fn body(&self) -> String {
        let mut body = self.error_type.label().to_owned();
        if let Some(value) = &self.value {
            body.push_str(": ");
            body.push_str(&render_value(value));
        }
        if !self.detail.is_empty() {
            body.push_str(": ");
            body.push_str(&self.detail);
        }
        body
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_root() {
            f.write_str(&self.body())
        } else {
            write!(f, "{}: {}", self.field, self.body())
        }
    }
}

/// A value as Kubernetes messages show it: strings quoted, other scalars
/// bare, objects and lists as compact JSON.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::field::render_value;
/// assert_eq!(render_value(&json!("web")), r#""web""#);
/// assert_eq!(render_value(&json!(3)), "3");
/// assert_eq!(render_value(&json!({"a": [1]})), r#"{"a":[1]}"#);
/// ```
pub fn render_value(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_render_fields_indexes_and_schema_keys() {
        let root = FieldPath::root();
        assert!(root.is_root());
        assert_eq!(root.child("spec").as_str(), "spec");
        assert_eq!(
            root.child("spec").child("items").index(0).to_string(),
            "spec.items[0]"
        );
        assert_eq!(
            root.child("properties").key("spec").to_string(),
            "properties[spec]"
        );
    }

    #[test]
    fn errors_are_worded_like_kubernetes_field_errors() {
        let path = FieldPath::new("spec.replicas");
        assert_eq!(
            FieldError::required(path.clone(), "").to_string(),
            "spec.replicas: Required value"
        );
        assert_eq!(
            FieldError::type_invalid(
                path.clone(),
                json!("string"),
                "spec.replicas in body must be of type integer: \"string\""
            )
            .to_string(),
            "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""
        );
        assert_eq!(
            FieldError::not_supported(path.clone(), json!("pink"), &["red".into(), "blue".into()])
                .body(),
            "Unsupported value: \"pink\": supported values: \"red\", \"blue\""
        );
        assert_eq!(
            FieldError::too_long(path.clone(), 5).body(),
            "Too long: may not be longer than 5"
        );
        assert_eq!(
            FieldError::too_many(path, 4, 3).body(),
            "Too many: 4: must have at most 3 items"
        );
        assert_eq!(
            ErrorType::NotSupported.cause_type(),
            "FieldValueNotSupported"
        );
        assert_eq!(
            serde_json::to_value(ErrorType::Required).unwrap(),
            json!("FieldValueRequired")
        );
    }
}

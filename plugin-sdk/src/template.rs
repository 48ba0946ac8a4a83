//! Spec types that controllers of children share, so each kind need not
//! re-declare them: a [`LabelSelector`] and an object [`Template`] (the
//! metadata and free-form spec each child gets), with their schemas.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{DynamicObject, Error};

/// Selects objects by label (`{"matchLabels": {"app": "web"}}`).
///
/// The schema requires at least one label: a selector that matches
/// everything would make its owner claim every object of the kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("required" = ["matchLabels"]))]
pub struct LabelSelector {
    /// Every label here must be on the object, with this value.
    #[serde(default)]
    #[schemars(extend("minProperties" = 1))]
    pub match_labels: BTreeMap<String, String>,
}

impl LabelSelector {
    /// Whether `labels` carry every label of the selector.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.missing(labels).next().is_none()
    }

    /// The selector's `key=value` pairs that `labels` lack.
    pub fn missing<'a>(
        &'a self,
        labels: &'a BTreeMap<String, String>,
    ) -> impl Iterator<Item = String> + 'a {
        self.match_labels
            .iter()
            .filter(move |&(key, value)| labels.get(key) != Some(value))
            .map(|(key, value)| format!("{key}={value}"))
    }

    /// The selector as the host's [`Ctx::list`](crate::Ctx::list) takes it
    /// (`app=web,tier=front`).
    pub fn to_query(&self) -> String {
        let pairs: Vec<String> = self
            .match_labels
            .iter()
            .map(|(key, value)| format!("{key}={value}"))
            .collect();
        pairs.join(",")
    }
}

/// A template of the children a controller creates: the labels and
/// annotations each gets, and its spec, copied verbatim (free-form to the
/// controller; the child's own kind validates it).
///
/// ```
/// use setpoint_plugin_sdk::Template;
///
/// let template: Template = serde_json::from_value(serde_json::json!({
///     "metadata": {"labels": {"app": "web"}},
///     "spec": {"containers": [{"image": "nginx"}]},
/// })).unwrap();
/// let pod = template.instantiate("demo.setpoint.dev/v1", "Pod", "web-0").unwrap();
/// assert_eq!(pod.label("app"), Some("web"));
/// assert_eq!(pod.spec().unwrap()["containers"][0]["image"], "nginx");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct Template {
    /// Labels and annotations for each child.
    pub metadata: TemplateMetadata,
    /// The child's spec, copied verbatim.
    pub spec: Map<String, Value>,
}

/// The metadata a [`Template`] sets on each child.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct TemplateMetadata {
    /// Labels for each child; must include its owner's selector's.
    pub labels: BTreeMap<String, String>,
    /// Annotations for each child.
    pub annotations: BTreeMap<String, String>,
}

impl Template {
    /// A child of kind `kind` named `name` made from the template
    /// (namespace and owner reference are the host's job).
    pub fn instantiate(
        &self,
        api_version: &str,
        kind: &str,
        name: impl Into<String>,
    ) -> Result<DynamicObject, Error> {
        DynamicObject::new(api_version, kind, name)
            .with_labels(self.metadata.labels.clone())
            .with_annotations(self.metadata.annotations.clone())
            .with_spec(&self.spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_selector_names_the_labels_an_object_lacks() {
        let selector = LabelSelector {
            match_labels: labels(&[("app", "web"), ("tier", "front")]),
        };
        assert!(selector.matches(&labels(&[("app", "web"), ("tier", "front"), ("x", "y")])));
        let lacking = labels(&[("app", "web"), ("tier", "back")]);
        assert!(!selector.matches(&lacking));
        assert_eq!(
            selector.missing(&lacking).collect::<Vec<_>>(),
            ["tier=front"]
        );
        assert_eq!(selector.to_query(), "app=web,tier=front");
    }
}

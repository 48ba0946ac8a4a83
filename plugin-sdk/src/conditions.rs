//! Status conditions in the Kubernetes style, and [`set_condition`], which
//! keeps `lastTransitionTime` stable unless the condition's status changes (so
//! a converged object's status is byte-for-byte unchanged and the host writes
//! nothing).

use serde::{Deserialize, Serialize};

use crate::Time;

/// The status of a condition: `"True"`, `"False"` or `"Unknown"`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// It is not known whether the condition holds.
    #[default]
    Unknown,
}

impl From<bool> for ConditionStatus {
    fn from(holds: bool) -> Self {
        if holds { Self::True } else { Self::False }
    }
}

/// One entry of `status.conditions`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// The condition's type in UpperCamelCase, e.g. `"Ready"`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Whether the condition holds.
    pub status: ConditionStatus,
    /// A short UpperCamelCase reason for the last transition.
    #[serde(default)]
    pub reason: String,
    /// A human-readable message.
    #[serde(default)]
    pub message: String,
    /// When `status` last changed; maintained by [`set_condition`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// The `metadata.generation` this condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The schema of one entry of the host's `status.conditions`.
impl schemars::JsonSchema for Condition {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Condition".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let schema = crate::definition::conditions_schema()["items"].take();
        schemars::Schema::try_from(schema).unwrap_or_default()
    }
}

impl Condition {
    /// A condition without a transition time (see [`set_condition`]) or
    /// observed generation.
    pub fn new(
        type_: impl Into<String>,
        status: impl Into<ConditionStatus>,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: None,
            observed_generation: None,
        }
    }

    /// The same condition, recording the generation it was computed from.
    pub fn with_observed_generation(mut self, generation: Option<i64>) -> Self {
        self.observed_generation = generation;
        self
    }

    /// Whether the status is `True`.
    pub fn is_true(&self) -> bool {
        self.status == ConditionStatus::True
    }
}

/// Inserts or replaces the condition of `condition.type_` in `conditions`.
///
/// `lastTransitionTime` becomes `now` when the condition is new or its status
/// changed, and otherwise keeps its previous value (whatever `condition`
/// carries is ignored). Returns whether the status changed (or the condition
/// is new).
///
/// ```
/// use setpoint_plugin_sdk::{Condition, Time, set_condition};
///
/// let mut conditions = Vec::new();
/// let t0 = Time::from_unix_ms(0);
/// assert!(set_condition(&mut conditions, Condition::new("Ready", false, "Starting", ""), t0));
/// // Same status, new reason: no transition, time kept.
/// let later = Time::from_unix_ms(5_000);
/// assert!(!set_condition(&mut conditions, Condition::new("Ready", false, "Pulling", ""), later));
/// assert_eq!(conditions[0].last_transition_time, Some(t0));
/// assert_eq!(conditions[0].reason, "Pulling");
/// ```
pub fn set_condition(conditions: &mut Vec<Condition>, mut condition: Condition, now: Time) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        Some(existing) => {
            let transitioned = existing.status != condition.status;
            condition.last_transition_time = match existing.last_transition_time {
                Some(previous) if !transitioned => Some(previous),
                _ => Some(now),
            };
            *existing = condition;
            transitioned
        }
        None => {
            condition.last_transition_time = Some(now);
            conditions.push(condition);
            true
        }
    }
}

/// The condition of type `type_`, if present.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_changes_only_with_status() {
        let (t0, t1, t2) = (
            Time::from_unix_ms(0),
            Time::from_unix_ms(1),
            Time::from_unix_ms(2),
        );
        let mut conditions = vec![Condition::new("Other", true, "", "")];
        assert!(set_condition(
            &mut conditions,
            Condition::new("Ready", false, "A", ""),
            t0
        ));
        assert!(!set_condition(
            &mut conditions,
            Condition::new("Ready", false, "B", "m"),
            t1
        ));
        assert_eq!(conditions[1].last_transition_time, Some(t0));
        assert!(set_condition(
            &mut conditions,
            Condition::new("Ready", true, "C", ""),
            t2
        ));
        let ready = find_condition(&conditions, "Ready").unwrap();
        assert_eq!(
            (ready.last_transition_time, ready.reason.as_str()),
            (Some(t2), "C")
        );
        assert!(ready.is_true());
        assert_eq!(conditions.len(), 2, "replaced, not appended");
    }

    #[test]
    fn an_existing_condition_without_a_time_gets_one() {
        let mut conditions = vec![Condition::new("Ready", true, "", "")];
        let now = Time::from_unix_ms(7);
        assert!(!set_condition(
            &mut conditions,
            Condition::new("Ready", true, "", ""),
            now
        ));
        assert_eq!(conditions[0].last_transition_time, Some(now));
    }

    #[test]
    fn serialises_like_kubernetes() {
        let condition =
            Condition::new("Ready", true, "PodReady", "ok").with_observed_generation(Some(3));
        let mut conditions = Vec::new();
        set_condition(&mut conditions, condition, Time::from_unix_ms(0));
        assert_eq!(
            serde_json::to_value(&conditions[0]).unwrap(),
            serde_json::json!({
                "type": "Ready", "status": "True", "reason": "PodReady", "message": "ok",
                "lastTransitionTime": "1970-01-01T00:00:00.000Z", "observedGeneration": 3
            })
        );
    }
}

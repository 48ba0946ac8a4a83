//! The options of a write request, read the way the Kubernetes API server
//! reads them: `dryRun` from the query string (and, for a delete, from the
//! `DeleteOptions` body too), and a delete's `propagationPolicy`,
//! `orphanDependents` and `preconditions` from the query string or the
//! body, the body's fields winning where both say something. Clients differ
//! in where they put them: kubectl sends a body, the Python client's
//! `delete_namespaced_custom_object(propagation_policy=…)` the query.

use std::collections::HashMap;

use serde_json::Value;

use setpoint::api::{DeleteOptions, Error, Propagation};

/// The one `dryRun` value Kubernetes defines: every stage runs, nothing is
/// persisted.
const DRY_RUN_ALL: &str = "All";

/// Whether the request asks for a dry run (`?dryRun=All`). An empty value
/// is no dry run, as in Kubernetes; anything else is refused, so a client
/// that misspells it never writes by accident.
pub(super) fn dry_run(query: &HashMap<String, String>) -> Result<bool, Error> {
    match query.get("dryRun").map(String::as_str) {
        None | Some("") => Ok(false),
        Some(DRY_RUN_ALL) => Ok(true),
        Some(other) => Err(unsupported_dry_run(other)),
    }
}

fn unsupported_dry_run(value: &str) -> Error {
    Error::BadRequest(format!(
        "dryRun: Unsupported value: {value:?}: supported values: \"All\""
    ))
}

/// A delete's options and whether it is a dry run, from the query string
/// and the `DeleteOptions` body (`Value::Null` when there is none).
pub(super) fn delete(
    query: &HashMap<String, String>,
    body: &Value,
) -> Result<(DeleteOptions, bool), Error> {
    if !body.is_null() && !body.is_object() {
        return Err(Error::BadRequest(
            "the body of a delete must be a DeleteOptions object".into(),
        ));
    }
    let mut dry = dry_run(query)?;
    if let Some(values) = body.get("dryRun").filter(|v| !v.is_null()) {
        let values = values
            .as_array()
            .ok_or_else(|| Error::BadRequest("dryRun: must be a list of strings".into()))?;
        for value in values {
            match value.as_str() {
                Some(DRY_RUN_ALL) => dry = true,
                Some(other) => return Err(unsupported_dry_run(other)),
                None => {
                    return Err(Error::BadRequest(
                        "dryRun: must be a list of strings".into(),
                    ));
                }
            }
        }
    }
    let from_query = propagation(
        query.get("propagationPolicy").map(String::as_str),
        query
            .get("orphanDependents")
            .map(|v| parse_bool("orphanDependents", v))
            .transpose()?,
    )?;
    let from_body = propagation(
        body.get("propagationPolicy")
            .filter(|v| !v.is_null())
            .map(|v| {
                v.as_str()
                    .ok_or_else(|| Error::BadRequest("propagationPolicy: must be a string".into()))
            })
            .transpose()?,
        body.get("orphanDependents").and_then(Value::as_bool),
    )?;
    let preconditions = &body["preconditions"];
    let precondition = |field: &str| -> Result<Option<String>, Error> {
        match &preconditions[field] {
            Value::Null => Ok(None),
            Value::String(s) => Ok(Some(s.clone())),
            _ => Err(Error::BadRequest(format!(
                "preconditions.{field}: must be a string"
            ))),
        }
    };
    let options = DeleteOptions {
        propagation_policy: from_body.or(from_query),
        resource_version: precondition("resourceVersion")?,
        uid: precondition("uid")?,
    };
    Ok((options, dry))
}

/// The policy named by `propagationPolicy`, or by the deprecated
/// `orphanDependents` (true: Orphan); both at once is an error, as in
/// Kubernetes.
fn propagation(
    policy: Option<&str>,
    orphan_dependents: Option<bool>,
) -> Result<Option<Propagation>, Error> {
    let policy = policy
        .filter(|p| !p.is_empty())
        .map(|p| {
            Propagation::parse(p).ok_or_else(|| {
                Error::BadRequest(format!(
                    "propagationPolicy: Unsupported value: {p:?}: supported values: \"Background\", \"Foreground\", \"Orphan\""
                ))
            })
        })
        .transpose()?;
    match (policy, orphan_dependents) {
        (Some(_), Some(_)) => Err(Error::BadRequest(
            "orphanDependents: Invalid value: both orphanDependents and propagationPolicy are set; use propagationPolicy only".into(),
        )),
        (Some(p), None) => Ok(Some(p)),
        (None, Some(true)) => Ok(Some(Propagation::Orphan)),
        (None, Some(false)) => Ok(Some(Propagation::Background)),
        (None, None) => Ok(None),
    }
}

fn parse_bool(field: &str, value: &str) -> Result<bool, Error> {
    match value {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        other => Err(Error::BadRequest(format!(
            "{field}: {other:?} is not a boolean"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn query(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn dry_run_is_all_or_nothing_and_a_misspelling_is_refused() {
        assert!(!dry_run(&query(&[])).unwrap());
        assert!(!dry_run(&query(&[("dryRun", "")])).unwrap());
        assert!(dry_run(&query(&[("dryRun", "All")])).unwrap());
        let err = dry_run(&query(&[("dryRun", "all")])).unwrap_err();
        assert_eq!(err.code(), 400);
        assert!(
            err.to_string().contains("Unsupported value: \"all\""),
            "{err}"
        );
    }

    #[test]
    fn delete_options_come_from_the_query_or_the_body_and_the_body_wins() {
        let (options, dry) =
            delete(&query(&[("propagationPolicy", "Orphan")]), &Value::Null).unwrap();
        assert_eq!(options.propagation_policy, Some(Propagation::Orphan));
        assert!(!dry);

        let (options, _) = delete(
            &query(&[("propagationPolicy", "Orphan")]),
            &json!({"propagationPolicy": "Foreground"}),
        )
        .unwrap();
        assert_eq!(options.propagation_policy, Some(Propagation::Foreground));

        let (options, _) = delete(&query(&[("orphanDependents", "true")]), &Value::Null).unwrap();
        assert_eq!(options.propagation_policy, Some(Propagation::Orphan));

        let (options, dry) = delete(
            &query(&[]),
            &json!({"dryRun": ["All"], "preconditions": {"uid": "u-1", "resourceVersion": "7"}}),
        )
        .unwrap();
        assert!(dry);
        assert_eq!(options.uid.as_deref(), Some("u-1"));
        assert_eq!(options.resource_version.as_deref(), Some("7"));
    }

    #[test]
    fn contradictory_or_malformed_delete_options_are_refused() {
        for (q, body) in [
            (vec![("propagationPolicy", "Sideways")], Value::Null),
            (
                vec![
                    ("propagationPolicy", "Orphan"),
                    ("orphanDependents", "true"),
                ],
                Value::Null,
            ),
            (vec![("orphanDependents", "maybe")], Value::Null),
            (vec![], json!({"dryRun": ["Some"]})),
            (vec![], json!({"dryRun": "All"})),
            (vec![], json!({"propagationPolicy": 3})),
            (vec![], json!({"preconditions": {"uid": 7}})),
            (vec![], json!(["not", "an", "object"])),
        ] {
            let err = delete(&query(&q), &body).unwrap_err();
            assert_eq!(err.code(), 400, "{q:?} {body}: {err}");
        }
    }
}

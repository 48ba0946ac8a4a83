//! A plan for people: a summary line, then each object with a `+ ~ -`
//! sign and the fields that change, as `terraform plan` shows them, then
//! the external writes, reads, events, pending steps and errors. Colour
//! when asked (the CLI asks on a terminal).

use std::fmt::Write;

use serde_json::Value;

use super::report::{Action, Change, ExternalRequest, Plan};

/// How to render a plan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RenderOptions {
    /// ANSI colours (green `+`, yellow `~`, red `-`).
    pub color: bool,
}

/// Field lines shown per object before the rest is summed up.
const MAX_FIELD_LINES: usize = 40;
/// Characters of one value shown before it is cut.
const MAX_VALUE_CHARS: usize = 100;

/// Metadata the store sets, not worth a line.
const HIDDEN_METADATA: [&str; 5] = [
    "uid",
    "creationTimestamp",
    "resourceVersion",
    "generation",
    "managedFields",
];

struct Paint(bool);

impl Paint {
    fn sign(&self, sign: &str) -> String {
        if !self.0 {
            return sign.to_owned();
        }
        let colour = match sign {
            "+" => "32",
            "-" => "31",
            _ => "33",
        };
        format!("\x1b[{colour}m{sign}\x1b[0m")
    }

    fn bold(&self, text: &str) -> String {
        if self.0 {
            format!("\x1b[1m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    fn dim(&self, text: &str) -> String {
        if self.0 {
            format!("\x1b[2m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }
}

/// The plan as text.
///
/// ```
/// use setpoint::plan::{render, Plan, RenderOptions};
/// let text = render(&Plan::default(), RenderOptions::default());
/// assert!(text.starts_with("No changes."));
/// ```
pub fn render(plan: &Plan, options: RenderOptions) -> String {
    let paint = Paint(options.color);
    let mut out = String::new();
    let count = |actions: &[Action]| {
        plan.changes
            .iter()
            .filter(|c| actions.contains(&c.action))
            .count()
    };
    if plan.is_empty() {
        out.push_str("No changes.");
        if plan.reconciles > 0 {
            let _ = write!(out, " ({} reconciles, all converged)", plan.reconciles);
        }
        out.push('\n');
        return out;
    }
    let _ = writeln!(
        out,
        "Plan: {} to create, {} to change, {} to delete; {} external write{}; {} pending; {} error{}.",
        count(&[Action::Create]),
        count(&[Action::Update, Action::Status]),
        count(&[Action::Delete, Action::Deleting]),
        plan.writes.len(),
        if plan.writes.len() == 1 { "" } else { "s" },
        plan.pending.len(),
        plan.errors.len(),
        if plan.errors.len() == 1 { "" } else { "s" },
    );
    for change in &plan.changes {
        out.push('\n');
        render_change(&mut out, &paint, change);
    }
    if !plan.writes.is_empty() {
        let _ = writeln!(
            out,
            "\n{}",
            paint.bold("External writes (listed, not sent):")
        );
        let mut writes = plan.writes.iter().peekable();
        while let Some(write) = writes.next() {
            if let Some(create) = writes.next_if(|next| replaces(write, next)) {
                render_replacement(&mut out, &paint, write, create);
            } else {
                render_request(&mut out, &paint, write);
            }
        }
    }
    if !plan.observations.is_empty() {
        let _ = writeln!(
            out,
            "\n{}",
            paint.bold("External reads made while planning:")
        );
        for read in &plan.observations {
            render_request(&mut out, &paint, read);
        }
    }
    if !plan.events.is_empty() {
        let _ = writeln!(out, "\n{}", paint.bold("Events:"));
        for event in &plan.events {
            let message = if event.hidden {
                paint.dim("(message hidden: you may not read this object)")
            } else {
                event.message.clone()
            };
            let _ = writeln!(
                out,
                "  {} {} on {}: {message}",
                event.severity, event.reason, event.object
            );
        }
    }
    if !plan.pending.is_empty() {
        let _ = writeln!(out, "\n{}", paint.bold("Pending (shown, not planned):"));
        for step in &plan.pending {
            let _ = writeln!(
                out,
                "  {}: plugin {} {}",
                step.object, step.plugin, step.reason
            );
        }
    }
    if !plan.cycles.is_empty() {
        let _ = writeln!(
            out,
            "\n{}",
            paint.bold("Cycles (reconciles that kept writing; stopped):")
        );
        for object in &plan.cycles {
            let _ = writeln!(out, "  {object}");
        }
    }
    if !plan.errors.is_empty() {
        let _ = writeln!(out, "\n{}", paint.bold("Errors:"));
        for error in &plan.errors {
            match &error.object {
                Some(object) => {
                    let _ = writeln!(out, "  {} ({object}): {}", error.origin, error.message);
                }
                None => {
                    let _ = writeln!(out, "  {}: {}", error.origin, error.message);
                }
            }
        }
    }
    out
}

fn render_change(out: &mut String, paint: &Paint, change: &Change) {
    let what = match change.action {
        Action::Create => "created",
        Action::Update => "changed",
        Action::Status => "status changed",
        Action::Delete => "deleted",
        Action::Deleting => "deletion starts (waits for finalizers)",
    };
    let mut by = change.cause.to_string();
    for then in &change.then {
        let _ = write!(by, ", then {then}");
    }
    let _ = writeln!(
        out,
        "{} {} {}",
        paint.sign(change.action.sign()),
        paint.bold(&change.object.to_string()),
        paint.dim(&format!("{what}; {by}"))
    );
    let finalizers: Vec<&str> = change
        .before
        .as_ref()
        .and_then(|b| b["metadata"]["finalizers"].as_array())
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if matches!(change.action, Action::Delete | Action::Deleting) && !finalizers.is_empty() {
        let _ = writeln!(out, "    finalizers: {}", finalizers.join(", "));
    }
    if change.hidden {
        let _ = writeln!(
            out,
            "    {}",
            paint.dim("(contents hidden: you may not read this object)")
        );
        return;
    }
    let mut lines = Vec::new();
    match change.action {
        Action::Delete => {}
        _ => diff(
            &mut lines,
            "",
            change.before.as_ref().unwrap_or(&Value::Null),
            change.after.as_ref().unwrap_or(&Value::Null),
        ),
    }
    let shown = lines.len().min(MAX_FIELD_LINES);
    for (sign, line) in &lines[..shown] {
        let _ = writeln!(out, "    {} {line}", paint.sign(sign));
    }
    if lines.len() > shown {
        let _ = writeln!(
            out,
            "    … {} more field(s); `-o json` shows all",
            lines.len() - shown
        );
    }
}

fn render_request(out: &mut String, paint: &Paint, request: &ExternalRequest) {
    let result = request
        .result
        .as_ref()
        .map(|r| format!(" → {r}"))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "  {} {}{result} {}",
        request.method,
        request.url,
        paint.dim(&format!(
            "(plugin {}, {}, id {})",
            request.plugin, request.object, request.id
        ))
    );
    render_body(out, paint, request);
}

/// A request's body (cut) or why it is hidden, under its line.
fn render_body(out: &mut String, paint: &Paint, request: &ExternalRequest) {
    if let Some(body) = &request.body {
        let _ = writeln!(out, "      {}", cut(body));
    }
    if request.hidden {
        let _ = writeln!(
            out,
            "      {}",
            paint.dim("(body and answer hidden: you may not read this object)")
        );
    }
}

/// Whether `create` right after `delete` (the same plugin and object)
/// makes again what `delete` removes: a replacement, as a provider asks for
/// one when the external system cannot change a property in place (the
/// host sends effects in order and stops at the first failure).
fn replaces(delete: &ExternalRequest, create: &ExternalRequest) -> bool {
    let path = |url: &str| url.split(['?', '#']).next().unwrap_or_default().to_owned();
    delete.method.eq_ignore_ascii_case("DELETE")
        && ["PUT", "POST"]
            .iter()
            .any(|m| create.method.eq_ignore_ascii_case(m))
        && delete.plugin == create.plugin
        && delete.object == create.object
        && path(&delete.url) == path(&create.url)
}

/// A delete and the create that follows it, as one replacement (Terraform
/// shows `-/+` for the same).
fn render_replacement(
    out: &mut String,
    paint: &Paint,
    delete: &ExternalRequest,
    create: &ExternalRequest,
) {
    let _ = writeln!(
        out,
        "  {} replace {} {}",
        paint.sign("-/+"),
        create.url,
        paint.dim(&format!(
            "({} then {}; plugin {}, {}, ids {} and {})",
            delete.method, create.method, create.plugin, create.object, delete.id, create.id
        ))
    );
    render_body(out, paint, create);
}

fn cut(text: &str) -> String {
    if text.chars().count() <= MAX_VALUE_CHARS {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(MAX_VALUE_CHARS).collect();
    cut.push('…');
    cut
}

fn show(value: &Value) -> String {
    cut(&value.to_string())
}

fn hidden(path: &str) -> bool {
    path.strip_prefix("metadata.")
        .is_some_and(|field| HIDDEN_METADATA.contains(&field))
        || path == "apiVersion"
        || path == "kind"
}

/// The changed leaves between `before` and `after`, as `sign path: value`
/// lines (objects are followed field by field, lists of the same length
/// item by item).
fn diff(lines: &mut Vec<(&'static str, String)>, path: &str, before: &Value, after: &Value) {
    if hidden(path) || before == after {
        return;
    }
    let join = |key: &str| {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    };
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            for (key, value) in a {
                diff(lines, &join(key), b.get(key).unwrap_or(&Value::Null), value);
            }
            for (key, value) in b {
                if !a.contains_key(key) {
                    diff(lines, &join(key), value, &Value::Null);
                }
            }
        }
        (Value::Null, Value::Object(a)) => {
            for (key, value) in a {
                diff(lines, &join(key), &Value::Null, value);
            }
        }
        (Value::Object(b), Value::Null) => {
            for (key, value) in b {
                diff(lines, &join(key), value, &Value::Null);
            }
        }
        (Value::Array(b), Value::Array(a)) if a.len() == b.len() => {
            for (i, (b, a)) in b.iter().zip(a).enumerate() {
                diff(lines, &format!("{path}[{i}]"), b, a);
            }
        }
        (Value::Null, after) => lines.push(("+", format!("{path}: {}", show(after)))),
        (before, Value::Null) => lines.push(("-", format!("{path}: {}", show(before)))),
        (before, after) => lines.push(("~", format!("{path}: {} → {}", show(before), show(after)))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::plan::report::{Cause, ObjectRef};

    fn change(action: Action, before: Option<Value>, after: Option<Value>) -> Change {
        Change {
            action,
            object: ObjectRef {
                api_version: "apps.example.dev/v1".into(),
                kind: "ReplicaSet".into(),
                namespace: Some("default".into()),
                name: "web".into(),
            },
            cause: Cause::Request,
            then: vec![],
            before,
            after,
            hidden: false,
        }
    }

    #[test]
    fn changed_fields_are_listed_with_their_sign_and_bookkeeping_is_hidden() {
        let before = json!({"metadata": {"name": "web", "uid": "u1", "labels": {"old": "1"}},
                            "spec": {"replicas": 3, "ports": [80, 443]}});
        let after = json!({"metadata": {"name": "web", "uid": "u1", "labels": {"new": "2"}},
                           "spec": {"replicas": 5, "ports": [80, 8443]}});
        let plan = Plan {
            changes: vec![change(Action::Update, Some(before), Some(after))],
            ..Plan::default()
        };
        let text = render(&plan, RenderOptions::default());
        assert!(
            text.starts_with("Plan: 0 to create, 1 to change, 0 to delete"),
            "{text}"
        );
        assert!(
            text.contains("~ ReplicaSet default/web changed; requested"),
            "{text}"
        );
        assert!(text.contains("    ~ spec.replicas: 3 → 5"), "{text}");
        assert!(text.contains("    ~ spec.ports[1]: 443 → 8443"), "{text}");
        assert!(text.contains("    + metadata.labels.new: \"2\""), "{text}");
        assert!(text.contains("    - metadata.labels.old: \"1\""), "{text}");
        assert!(!text.contains("uid"), "{text}");
        assert!(!text.contains('\x1b'), "no colour unless asked");
        let coloured = render(&plan, RenderOptions { color: true });
        assert!(coloured.contains("\x1b[33m~\x1b[0m"), "{coloured}");
    }

    #[test]
    fn long_objects_are_cut_with_a_pointer_to_the_json() {
        let fields: serde_json::Map<String, Value> =
            (0..60).map(|i| (format!("f{i:02}"), json!(i))).collect();
        let plan = Plan {
            changes: vec![change(Action::Create, None, Some(json!({"spec": fields})))],
            ..Plan::default()
        };
        let text = render(&plan, RenderOptions::default());
        assert!(text.contains("+ spec.f00: 0"), "{text}");
        assert!(
            text.contains("… 20 more field(s); `-o json` shows all"),
            "{text}"
        );
    }

    #[test]
    fn a_delete_then_a_create_of_the_same_url_shows_as_a_replacement() {
        let queue = ObjectRef {
            api_version: "rabbitmq.setpoint.dev/v1".into(),
            kind: "Queue".into(),
            namespace: Some("default".into()),
            name: "orders".into(),
        };
        let request = |method: &str, url: &str, id: &str, object: &ObjectRef| ExternalRequest {
            plugin: "rabbitmq_queue".into(),
            object: object.clone(),
            id: id.into(),
            method: method.into(),
            url: url.into(),
            body: (method != "DELETE").then(|| r#"{"durable":false}"#.to_owned()),
            result: None,
            hidden: false,
        };
        let url = "http://127.0.0.1:15672/api/queues/%2F/orders";
        let other = ObjectRef {
            name: "audit".into(),
            ..queue.clone()
        };
        let plan = Plan {
            writes: vec![
                request("DELETE", url, "delete", &queue),
                request("PUT", url, "create", &queue),
                // Not a replacement: another object's create after a delete.
                request("DELETE", &format!("{url}-a"), "delete", &queue),
                request("PUT", &format!("{url}-a"), "create", &other),
            ],
            ..Plan::default()
        };
        let text = render(&plan, RenderOptions::default());
        assert!(
            text.contains(&format!(
                "  -/+ replace {url} (DELETE then PUT; plugin rabbitmq_queue, Queue default/orders, ids delete and create)\n      {{\"durable\":false}}"
            )),
            "{text}"
        );
        assert!(text.contains(&format!("  DELETE {url}-a ")), "{text}");
        assert!(text.contains(&format!("  PUT {url}-a ")), "{text}");
        assert_eq!(text.matches("replace").count(), 1, "{text}");
    }

    #[test]
    fn a_hidden_change_says_what_happens_but_not_its_contents() {
        let mut plan = Plan {
            changes: vec![change(
                Action::Update,
                Some(json!({"spec": {"password": "old"}})),
                Some(json!({"spec": {"password": "new"}})),
            )],
            ..Plan::default()
        };
        plan.redact(|_| false);
        let text = render(&plan, RenderOptions::default());
        assert!(text.contains("~ ReplicaSet default/web"), "{text}");
        assert!(text.contains("contents hidden"), "{text}");
        assert!(!text.contains("password"), "{text}");
    }
}

//! The subset of JSONPath that CustomResourceDefinition
//! `additionalPrinterColumns` use: `.a.b`, `.a[0]`, `.a[*]` and filters like
//! `.conditions[?(@.type=="Ready")].status`.

use serde_json::Value;

/// Evaluate `path` against `value`; every match, in order.
///
/// ```
/// use serde_json::json;
/// use setpoint::object::jsonpath::select;
/// let pod = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
/// let found = select(&pod, r#".status.conditions[?(@.type=="Ready")].status"#);
/// assert_eq!(found, [&json!("True")]);
/// ```
pub fn select<'a>(value: &'a Value, path: &str) -> Vec<&'a Value> {
    let path = path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim_start_matches('$');
    let mut current = vec![value];
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let field = &after[..end];
            current = current.into_iter().filter_map(|v| v.get(field)).collect();
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let Some(end) = find_closing(after) else {
                return vec![];
            };
            let inner = &after[..end];
            rest = &after[end + 1..];
            current = current.into_iter().flat_map(|v| index(v, inner)).collect();
        } else {
            return vec![];
        }
    }
    current
}

fn find_closing(s: &str) -> Option<usize> {
    let mut depth = 0;
    for (i, c) in s.char_indices() {
        match c {
            '[' | '(' => depth += 1,
            ')' => depth -= 1,
            ']' if depth == 0 => return Some(i),
            ']' => depth -= 1,
            _ => {}
        }
    }
    None
}

fn index<'a>(value: &'a Value, selector: &str) -> Vec<&'a Value> {
    let Some(items) = value.as_array() else {
        return vec![];
    };
    if selector == "*" {
        return items.iter().collect();
    }
    if let Ok(i) = selector.parse::<usize>() {
        return items.get(i).into_iter().collect();
    }
    if let Some(filter) = selector
        .strip_prefix("?(")
        .and_then(|s| s.strip_suffix(')'))
    {
        let Some((left, right)) = filter.split_once("==") else {
            return vec![];
        };
        let field = left.trim().trim_start_matches('@');
        let expected = right.trim().trim_matches(|c| c == '"' || c == '\'');
        return items
            .iter()
            .filter(|item| {
                select(item, field).first().is_some_and(|v| {
                    v.as_str()
                        .map_or_else(|| **v == *expected, |s| s == expected)
                })
            })
            .collect();
    }
    vec![]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_indexes_wildcards_and_filters() {
        let doc = json!({"spec": {"replicas": 3, "items": [{"n": 1}, {"n": 2}]},
                         "status": {"conditions": [{"type": "A", "status": "False"}, {"type": "Ready", "status": "True"}]}});
        assert_eq!(select(&doc, ".spec.replicas"), [&json!(3)]);
        assert_eq!(select(&doc, ".spec.items[1].n"), [&json!(2)]);
        assert_eq!(select(&doc, ".spec.items[*].n"), [&json!(1), &json!(2)]);
        assert_eq!(
            select(&doc, ".status.conditions[?(@.type==\"Ready\")].status"),
            [&json!("True")]
        );
        assert!(select(&doc, ".missing.field").is_empty());
        assert!(select(&doc, ".spec.items[9]").is_empty());
    }
}

//! Tests of schema compilation, pruning, defaulting and validation.

use serde_json::{Value, json};

use super::*;
use crate::object::field::ErrorType;

fn schema(doc: Value) -> Schema {
    Schema::compile(&doc, &FieldPath::root()).unwrap_or_else(|e| panic!("{e:?}"))
}

/// A schema with `spec` as given.
fn with_spec(spec: Value) -> Schema {
    schema(json!({"type": "object", "properties": {"spec": spec}}))
}

fn messages(schema: &Schema, mut object: Value) -> Vec<String> {
    match schema.admit(&mut object) {
        Ok(()) => vec![],
        Err(errors) => errors.iter().map(ToString::to_string).collect(),
    }
}

fn admitted(schema: &Schema, mut object: Value) -> Value {
    schema
        .admit(&mut object)
        .unwrap_or_else(|e| panic!("{e:?}"));
    object
}

#[test]
fn a_wrong_type_is_reported_in_the_kubernetes_wording() {
    let s = with_spec(json!({"type": "object", "properties": {
        "replicas": {"type": "integer"}, "name": {"type": "string"},
        "ratio": {"type": "number"}, "on": {"type": "boolean"},
        "list": {"type": "array", "items": {"type": "string"}}, "map": {"type": "object"}}}));
    assert_eq!(
        messages(&s, json!({"spec": {"replicas": "x"}})),
        [
            "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""
        ]
    );
    assert_eq!(
        messages(
            &s,
            json!({"spec": {"replicas": 1.5, "name": 3, "ratio": "1", "on": "yes", "list": {}, "map": []}})
        ),
        [
            "spec.list: Invalid value: \"object\": spec.list in body must be of type array: \"object\"",
            "spec.map: Invalid value: \"array\": spec.map in body must be of type object: \"array\"",
            "spec.name: Invalid value: \"integer\": spec.name in body must be of type string: \"integer\"",
            "spec.on: Invalid value: \"string\": spec.on in body must be of type boolean: \"string\"",
            "spec.ratio: Invalid value: \"string\": spec.ratio in body must be of type number: \"string\"",
            "spec.replicas: Invalid value: \"number\": spec.replicas in body must be of type integer: \"number\"",
        ]
    );
    assert!(messages(&s, json!({"spec": {"ratio": 2, "replicas": 2}})).is_empty());
    let mut bad = json!({"spec": {"replicas": "x"}});
    let err = &s.admit(&mut bad).unwrap_err()[0];
    assert_eq!(err.error_type, ErrorType::TypeInvalid);
    assert_eq!(err.field.as_str(), "spec.replicas");
}

#[test]
fn every_violation_is_collected_with_its_full_path() {
    let s = with_spec(
        json!({"type": "object", "required": ["image"], "properties": {
        "image": {"type": "string"},
        "template": {"type": "object", "properties": {"metadata": {"type": "object", "properties": {
            "labels": {"type": "object", "additionalProperties": {"type": "string"}}}}}},
        "items": {"type": "array", "items": {"type": "object", "required": ["name"],
            "properties": {"name": {"type": "string", "minLength": 2}}}}}}),
    );
    let errors = messages(
        &s,
        json!({"spec": {
            "template": {"metadata": {"labels": {"app": 1}}},
            "items": [{"name": "ok"}, {"name": "okay"}, {"name": "x"}, {}]}}),
    );
    assert_eq!(
        errors,
        [
            "spec.image: Required value",
            "spec.items[2].name: Invalid value: \"x\": spec.items[2].name in body should be at least 2 chars long",
            "spec.items[3].name: Required value",
            "spec.template.metadata.labels.app: Invalid value: \"integer\": spec.template.metadata.labels.app in body must be of type string: \"integer\"",
        ]
    );
}

#[test]
fn enums_bounds_lengths_patterns_and_counts_are_enforced() {
    let s = with_spec(json!({"type": "object", "properties": {
        "color": {"type": "string", "enum": ["red", "green"]},
        "size": {"type": "integer", "enum": [1, 2]},
        "min": {"type": "integer", "minimum": 1},
        "xmin": {"type": "integer", "minimum": 1, "exclusiveMinimum": true},
        "max": {"type": "number", "maximum": 2.5},
        "xmax": {"type": "integer", "maximum": 10, "exclusiveMaximum": true},
        "step": {"type": "integer", "multipleOf": 5},
        "short": {"type": "string", "maxLength": 3},
        "dns": {"type": "string", "pattern": "^[a-z]+$"},
        "few": {"type": "array", "maxItems": 1, "items": {"type": "integer"}},
        "many": {"type": "array", "minItems": 2, "items": {"type": "integer"}},
        "props": {"type": "object", "minProperties": 1, "additionalProperties": {"type": "string"}},
        "capped": {"type": "object", "maxProperties": 1, "additionalProperties": {"type": "string"}}}}));
    let errors = messages(
        &s,
        json!({"spec": {"color": "pink", "size": 3, "min": 0, "xmin": 1, "max": 3, "xmax": 10,
                        "step": 7, "short": "four", "dns": "Bad1", "few": [1, 2], "many": [1],
                        "props": {}, "capped": {"a": "1", "b": "2"}}}),
    );
    assert_eq!(
        errors,
        [
            "spec.capped: Too many: 2: must have at most 1 items",
            "spec.color: Unsupported value: \"pink\": supported values: \"red\", \"green\"",
            "spec.dns: Invalid value: \"Bad1\": spec.dns in body should match '^[a-z]+$'",
            "spec.few: Too many: 2: must have at most 1 items",
            "spec.many: Invalid value: [1]: spec.many in body should have at least 2 items",
            "spec.max: Invalid value: 3: spec.max in body should be less than or equal to 2.5",
            "spec.min: Invalid value: 0: spec.min in body should be greater than or equal to 1",
            "spec.props: Invalid value: {}: spec.props in body should have at least 1 properties",
            "spec.short: Too long: may not be longer than 3",
            "spec.size: Unsupported value: 3: supported values: \"1\", \"2\"",
            "spec.step: Invalid value: 7: spec.step in body should be a multiple of 5",
            "spec.xmax: Invalid value: 10: spec.xmax in body should be less than 10",
            "spec.xmin: Invalid value: 1: spec.xmin in body should be greater than 1",
        ]
    );
    assert!(
        messages(
            &s,
            json!({"spec": {"color": "red", "size": 2, "min": 1, "xmin": 2, "max": 2.5, "xmax": 9,
                            "step": 10, "short": "abc", "dns": "ok", "few": [1], "many": [1, 2],
                            "props": {"a": "b"}, "capped": {"a": "1"}}})
        )
        .is_empty()
    );
}

#[test]
fn integer_formats_and_date_times_are_checked() {
    let s = with_spec(json!({"type": "object", "properties": {
        "small": {"type": "integer", "format": "int32"},
        "big": {"type": "integer", "format": "int64"},
        "when": {"type": "string", "format": "date-time"},
        "free": {"type": "string", "format": "something-else"}}}));
    assert_eq!(
        messages(
            &s,
            json!({"spec": {"small": 2_147_483_648_i64, "big": u64::MAX, "when": "yesterday", "free": "x"}})
        ),
        [
            "spec.big: Invalid value: 18446744073709551615: spec.big in body must be of type int64: \"18446744073709551615\"",
            "spec.small: Invalid value: 2147483648: spec.small in body must be of type int32: \"2147483648\"",
            "spec.when: Invalid value: \"yesterday\": spec.when in body must be of type date-time: \"yesterday\"",
        ]
    );
    assert!(
        messages(
            &s,
            json!({"spec": {"small": -2_147_483_648_i64, "big": i64::MAX, "when": "2024-05-01T10:00:00Z"}})
        )
        .is_empty()
    );
}

#[test]
fn unknown_fields_are_pruned_at_any_depth_but_root_metadata_is_untouched() {
    let s = with_spec(json!({"type": "object", "properties": {
        "keep": {"type": "object", "properties": {"a": {"type": "string"}}},
        "list": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "integer"}}}}}}));
    let out = admitted(
        &s,
        json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n", "custom": 1},
               "spec": {"keep": {"a": "1", "b": 2}, "list": [{"n": 1, "junk": true}], "extra": 1},
               "toplevel": true}),
    );
    assert_eq!(
        out,
        json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n", "custom": 1},
               "spec": {"keep": {"a": "1"}, "list": [{"n": 1}]}})
    );
}

#[test]
fn preserve_unknown_fields_keeps_members_but_still_checks_declared_ones() {
    let s = with_spec(
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true,
        "properties": {"delay": {"type": "integer", "minimum": 0, "default": 5},
                       "inner": {"type": "object", "properties": {"x": {"type": "string"}}}}}),
    );
    let out = admitted(
        &s,
        json!({"spec": {"image": "nginx", "inner": {"x": "1", "y": 2}}}),
    );
    assert_eq!(
        out,
        json!({"spec": {"image": "nginx", "delay": 5, "inner": {"x": "1"}}}),
        "preservation is per node: inner prunes"
    );
    assert_eq!(
        messages(&s, json!({"spec": {"delay": -1}})),
        ["spec.delay: Invalid value: -1: spec.delay in body should be greater than or equal to 0"]
    );
    let whole = schema(json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
    let any = json!({"spec": {"anything": [1, {"goes": true}]}, "status": {"x": 1}});
    assert_eq!(admitted(&whole, any.clone()), any);
}

#[test]
fn additional_properties_validate_map_values_or_allow_anything() {
    let s = with_spec(json!({"type": "object", "properties": {
        "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 3}},
        "open": {"type": "object", "additionalProperties": true},
        "closed": {"type": "object", "additionalProperties": false}}}));
    assert_eq!(
        messages(&s, json!({"spec": {"labels": {"a": "1", "b": "long"}}})),
        ["spec.labels.b: Too long: may not be longer than 3"]
    );
    let out = admitted(
        &s,
        json!({"spec": {"open": {"x": {"y": 1}}, "closed": {"x": 1}}}),
    );
    assert_eq!(
        out,
        json!({"spec": {"open": {"x": {"y": 1}}, "closed": {}}})
    );
}

#[test]
fn int_or_string_accepts_both_and_nothing_else() {
    let s = with_spec(json!({"type": "object", "properties": {
        "port": {"x-kubernetes-int-or-string": true}}}));
    assert!(messages(&s, json!({"spec": {"port": 80}})).is_empty());
    assert!(messages(&s, json!({"spec": {"port": "http"}})).is_empty());
    assert_eq!(
        messages(&s, json!({"spec": {"port": 1.5}})),
        [
            "spec.port: Invalid value: \"number\": spec.port in body must be of type integer,string: \"number\""
        ]
    );
}

#[test]
fn nulls_are_kept_when_nullable_and_otherwise_pruned_before_defaulting() {
    let s = with_spec(
        json!({"type": "object", "required": ["must"], "properties": {
        "maybe": {"type": "string", "nullable": true},
        "dropped": {"type": "string"},
        "defaulted": {"type": "integer", "default": 3},
        "must": {"type": "string"},
        "list": {"type": "array", "items": {"type": "string"}}}}),
    );
    let mut obj =
        json!({"spec": {"maybe": null, "dropped": null, "defaulted": null, "must": null}});
    let errors = s.admit(&mut obj).unwrap_err();
    assert_eq!(obj, json!({"spec": {"maybe": null, "defaulted": 3}}));
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].to_string(), "spec.must: Required value");
    assert_eq!(
        messages(&s, json!({"spec": {"must": "x", "list": ["a", null]}})),
        [
            "spec.list[1]: Invalid value: \"null\": spec.list[1] in body must be of type string: \"null\""
        ]
    );
}

#[test]
fn defaults_apply_at_any_depth_when_the_parent_exists() {
    let s = schema(json!({"type": "object", "properties": {
        "spec": {"type": "object", "default": {}, "properties": {
            "replicas": {"type": "integer", "default": 1},
            "strategy": {"type": "object", "default": {"type": "Rolling"}, "properties": {
                "type": {"type": "string"},
                "maxSurge": {"type": "integer", "default": 25}}},
            "absent": {"type": "object", "properties": {"x": {"type": "integer", "default": 7}}},
            "ports": {"type": "array", "items": {"type": "object", "properties": {
                "protocol": {"type": "string", "default": "TCP"}, "port": {"type": "integer"}}}},
            "named": {"type": "object", "additionalProperties": {"type": "object", "properties": {
                "weight": {"type": "integer", "default": 1}}}}}}}}));
    assert_eq!(
        admitted(&s, json!({"kind": "K"})),
        json!({"kind": "K", "spec": {"replicas": 1, "strategy": {"type": "Rolling", "maxSurge": 25}}}),
        "a defaulted parent gets its own children's defaults; absent parents stay absent"
    );
    assert_eq!(
        admitted(
            &s,
            json!({"spec": {"replicas": 4, "ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}],
                            "named": {"a": {}, "b": {"weight": 5}}, "absent": {}}})
        )["spec"],
        json!({"replicas": 4, "strategy": {"type": "Rolling", "maxSurge": 25},
               "ports": [{"port": 80, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}],
               "named": {"a": {"weight": 1}, "b": {"weight": 5}}, "absent": {"x": 7}})
    );
}

#[test]
fn prune_alone_applies_no_defaults() {
    let s = with_spec(
        json!({"type": "object", "properties": {"n": {"type": "integer", "default": 1}}}),
    );
    let mut obj = json!({"spec": {"junk": 1}});
    s.prune(&mut obj);
    assert_eq!(obj, json!({"spec": {}}));
}

#[test]
fn embedded_resources_keep_their_type_and_object_metadata() {
    let s = with_spec(json!({"type": "object", "properties": {"template": {
        "type": "object", "x-kubernetes-embedded-resource": true,
        "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}));
    let obj = json!({"spec": {"template": {"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p"}, "spec": {"x": 1}, "junk": 1}}});
    assert_eq!(
        admitted(&s, obj)["spec"]["template"],
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"x": 1}})
    );
}

#[test]
fn compiling_reports_every_structural_problem_with_its_schema_path() {
    let at = FieldPath::new("spec.versions[0].schema.openAPIV3Schema");
    let errors = Schema::compile(
        &json!({"type": "object", "properties": {
            "a": {"type": "strin"},
            "b": {"type": "array"},
            "c": {"description": "no type"},
            "d": {"type": "string", "pattern": "("},
            "e": {"type": "array", "items": [{"type": "string"}]},
            "f": {"type": "integer", "default": "one"},
            "g": {"type": "integer", "minimum": "low", "maxLength": -1}}}),
        &at,
    )
    .unwrap_err();
    let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
    let base = "spec.versions[0].schema.openAPIV3Schema.properties";
    assert_eq!(
        fields,
        [
            format!("{base}[a].type"),
            format!("{base}[b].items"),
            format!("{base}[c].type"),
            format!("{base}[d].pattern"),
            format!("{base}[e].items"),
            format!("{base}[f].default"),
            format!("{base}[g].minimum"),
            format!("{base}[g].maxLength"),
        ]
    );
    assert!(
        errors[0]
            .to_string()
            .contains("Unsupported value: \"strin\"")
    );
    assert!(errors[5].to_string().contains("must be of type integer"));

    let not_object = Schema::compile(&json!({"type": "string"}), &at).unwrap_err();
    assert_eq!(not_object.len(), 1);
    assert_eq!(
        not_object[0].to_string(),
        "spec.versions[0].schema.openAPIV3Schema.type: Invalid value: \"string\": must be object at the root"
    );
    assert!(Schema::compile(&json!("schema"), &at).is_err());
    let both = Schema::compile(
        &json!({"type": "object", "properties": {"m": {"type": "object",
            "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}}}}),
        &at,
    )
    .unwrap_err();
    assert_eq!(both[0].error_type, ErrorType::Forbidden);
}

#[test]
fn accessors_expose_the_compiled_tree() {
    let s = with_spec(json!({"type": "object", "properties": {"n": {"type": "integer"}}}));
    assert_eq!(s.type_(), Some(Type::Object));
    let spec = s.property("spec").unwrap();
    assert_eq!(spec.property("n").unwrap().type_(), Some(Type::Integer));
    assert!(spec.property("missing").is_none());
    assert!(
        spec.validate(&json!({"n": "x"}), &FieldPath::new("spec"))[0]
            .to_string()
            .starts_with("spec.n: Invalid value")
    );
}

fn unknown(s: &Schema, object: Value) -> Vec<String> {
    s.unknown_fields(&object)
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn unknown_fields_are_exactly_those_pruning_drops() {
    let s = schema(json!({"type": "object", "properties": {
    "spec": {"type": "object", "properties": {
        "replicas": {"type": "integer"},
        "items": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
        "labels": {"type": "object", "additionalProperties": {"type": "object", "properties": {"v": {"type": "string"}}}},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        "open": {"type": "object", "additionalProperties": true},
        "embedded": {"type": "object", "x-kubernetes-embedded-resource": true,
                     "properties": {"spec": {"type": "object"}}},
        "text": {"type": "string"}
    }}}}));
    let object = json!({
        "apiVersion": "x/v1", "kind": "X", "metadata": {"whatever": 1},
        "top": 1,
        "spec": {
            "replicas": null,
            "bogus": {"deep": 1},
            "items": [{"name": "a"}, {"name": "b", "extra": true}],
            "labels": {"any": {"v": "1", "w": "2"}},
            "free": {"x": {"y": 1}},
            "open": {"x": 1},
            "embedded": {"apiVersion": "v1", "kind": "K", "metadata": {"name": "n"}, "other": 1},
            "text": {"not": "an object"}
        }
    });
    let found = unknown(&s, object.clone());
    assert_eq!(
        found,
        [
            "spec.bogus",
            "spec.embedded.other",
            "spec.items[1].extra",
            "spec.labels.any.w",
            "top"
        ]
    );
    // Pruning drops exactly these (and nothing it keeps is reported).
    let mut pruned = object.clone();
    s.prune(&mut pruned);
    assert!(pruned["spec"].get("bogus").is_none() && pruned.get("top").is_none());
    assert!(pruned["spec"]["items"][1].get("extra").is_none());
    assert!(pruned["spec"]["labels"]["any"].get("w").is_none());
    assert!(pruned["spec"]["embedded"].get("other").is_none());
    assert_eq!(pruned["spec"]["free"], object["spec"]["free"]);
    assert_eq!(pruned["spec"]["text"], object["spec"]["text"]);
}

#[test]
fn unknown_fields_of_patches_skip_deletions_and_follow_pointers() {
    let s = with_spec(json!({"type": "object", "properties": {
        "replicas": {"type": "integer"},
        "items": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}));
    let text =
        |paths: Vec<FieldPath>| -> Vec<String> { paths.iter().map(ToString::to_string).collect() };
    assert_eq!(
        text(s.unknown_fields_in_merge_patch(
            &json!({"spec": {"gone": null, "new": 1, "items": [{"name": null, "x": null}]}})
        )),
        ["spec.items[0].x", "spec.new"]
    );
    let tokens = |p: &str| -> Vec<String> { p.split('/').skip(1).map(str::to_owned).collect() };
    let at = |p: &str, v: Option<Value>| text(s.unknown_fields_at(&tokens(p), v.as_ref()));
    assert_eq!(at("/spec/bogus", Some(json!(1))), ["spec.bogus"]);
    assert_eq!(at("/spec/bogus/deeper", Some(json!(1))), ["spec.bogus"]);
    assert_eq!(at("/spec/replicas", Some(json!(1))), Vec::<String>::new());
    assert_eq!(
        at("/spec/items/-", Some(json!({"name": "a", "x": 1}))),
        ["spec.items[-].x"]
    );
    assert_eq!(at("/spec/items/0/y", Some(json!(1))), ["spec.items[0].y"]);
    assert_eq!(
        at("/spec/free/anything", Some(json!({"a": 1}))),
        Vec::<String>::new()
    );
    assert_eq!(
        at("/metadata/labels/a", Some(json!("b"))),
        Vec::<String>::new()
    );
    assert_eq!(
        at("/spec", Some(json!({"replicas": 1, "z": 2}))),
        ["spec.z"]
    );
    assert_eq!(at("", Some(json!({"kind": "X", "q": 1}))), ["q"]);
    assert_eq!(at("/spec/other", None), ["spec.other"]);
}

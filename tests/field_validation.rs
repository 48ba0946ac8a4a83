//! Field validation on writes: `Strict` refuses unknown and duplicate
//! fields, `Warn` reports them in `Warning` headers, `Ignore` prunes them.

use serde_json::{Value, json};

use crate::support::TestHost;

/// A `Widget` kind whose schema declares `spec.replicas` and `spec.color`.
async fn install_widgets(host: &TestHost) {
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"kind": "Widget", "listKind": "WidgetList", "plural": "widgets", "singular": "widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "replicas": {"type": "integer"}, "color": {"type": "string"}}}}}}}]
        }
    });
    let created = reqwest::Client::new()
        .post(format!(
            "{}/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            host.url
        ))
        .json(&crd)
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
}

fn widgets(host: &TestHost) -> String {
    format!(
        "{}/apis/example.com/v1/namespaces/default/widgets",
        host.url
    )
}

/// Status, `Warning` headers and body of a response.
async fn answer(response: reqwest::Response) -> (u16, Vec<String>, Value) {
    let status = response.status().as_u16();
    let warnings = response
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    (status, warnings, response.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn field_validation_strict_refuses_unknown_and_duplicate_fields_warn_reports_and_ignore_prunes()
 {
    let host = TestHost::start(&[]).await;
    install_widgets(&host).await;
    let http = reqwest::Client::new();
    let with_bogus = |name: &str| {
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name},
               "spec": {"replicas": 1, "bogus": true, "deep": {"x": 1}}})
    };
    let strict_message = r#"Widget in version "v1" cannot be handled as a Widget: strict decoding error: unknown field "spec.bogus", unknown field "spec.deep""#;

    // Strict: 400 naming every unknown field, nothing written.
    let (status, _, body) = answer(
        http.post(format!("{}?fieldValidation=Strict", widgets(&host)))
            .json(&with_bogus("s1"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["reason"], "BadRequest");
    assert_eq!(body["message"], strict_message);
    let missing = http
        .get(format!("{}/s1", widgets(&host)))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);

    // A member given twice is refused too, even one the schema knows.
    let (status, _, body) = answer(
        http.post(format!("{}?fieldValidation=Strict", widgets(&host)))
            .header("content-type", "application/json")
            .body(r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"s2"},"spec":{"replicas":1,"replicas":2}}"#)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .ends_with(r#"strict decoding error: duplicate field "spec.replicas""#),
        "{body}"
    );

    // Known fields only: Strict writes, without warnings.
    let known = json!({"apiVersion": "example.com/v1", "kind": "Widget",
                       "metadata": {"name": "w1", "labels": {"any": "label"}},
                       "spec": {"replicas": 1, "color": "red"}});
    let (status, warnings, _) = answer(
        http.post(format!("{}?fieldValidation=Strict", widgets(&host)))
            .json(&known)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, warnings.len()), (201, 0));

    // Warn (also the default): written, pruned, one Warning per field.
    for (query, name) in [("?fieldValidation=Warn", "w2"), ("", "w3")] {
        let (status, warnings, body) = answer(
            http.post(format!("{}{query}", widgets(&host)))
                .json(&with_bogus(name))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 201, "{body}");
        assert_eq!(
            warnings,
            [
                r#"299 - "unknown field \"spec.bogus\"""#,
                r#"299 - "unknown field \"spec.deep\"""#
            ]
        );
        assert_eq!(body["spec"], json!({"replicas": 1}));
    }

    // Ignore: written and pruned without a word.
    let (status, warnings, body) = answer(
        http.post(format!("{}?fieldValidation=Ignore", widgets(&host)))
            .json(&with_bogus("w4"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, warnings.len()), (201, 0), "{body}");
    assert_eq!(body["spec"], json!({"replicas": 1}));

    // Update, merge patch, JSON patch and apply are reviewed the same way.
    let mut replaced: Value = http
        .get(format!("{}/w1", widgets(&host)))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    replaced["spec"]["bogus"] = json!(1);
    let strict = format!("{}/w1?fieldValidation=Strict", widgets(&host));
    let refused = [
        http.put(&strict).json(&replaced),
        http.patch(&strict)
            .header("content-type", "application/merge-patch+json")
            .body(r#"{"spec":{"bogus":1}}"#),
        http.patch(&strict)
            .header("content-type", "application/json-patch+json")
            .body(r#"[{"op":"add","path":"/spec/bogus","value":1}]"#),
        http.patch(format!("{strict}&fieldManager=test"))
            .header("content-type", "application/apply-patch+yaml")
            .body("apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  bogus: 1\n"),
    ];
    for request in refused {
        let (status, _, body) = answer(request.send().await.unwrap()).await;
        assert_eq!(status, 400, "{body}");
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .ends_with(r#"strict decoding error: unknown field "spec.bogus""#),
            "{body}"
        );
    }
    let (status, _, body) = answer(
        http.patch(format!("{strict}&fieldManager=test"))
            .header("content-type", "application/apply-patch+yaml")
            .body("apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  color: a\n  color: b\n")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .ends_with(r#"duplicate field "spec.color""#),
        "{body}"
    );
    let unchanged: Value = http
        .get(format!("{}/w1", widgets(&host)))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(unchanged["spec"], json!({"replicas": 1, "color": "red"}));

    // Deleting an unknown field with a merge patch is no unknown field.
    let (status, warnings, body) = answer(
        http.patch(&strict)
            .header("content-type", "application/merge-patch+json")
            .body(r#"{"spec":{"bogus":null,"replicas":2}}"#)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, warnings.len()), (200, 0), "{body}");
    assert_eq!(body["spec"]["replicas"], 2);
    // A JSON patch under Warn: written, pruned, warned about.
    let (status, warnings, body) = answer(
        http.patch(format!("{}/w1", widgets(&host)))
            .header("content-type", "application/json-patch+json")
            .body(r#"[{"op":"add","path":"/spec/bogus","value":1},{"op":"replace","path":"/spec/replicas","value":3}]"#)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(warnings, [r#"299 - "unknown field \"spec.bogus\"""#]);
    assert_eq!(body["spec"], json!({"replicas": 3, "color": "red"}));

    // Anything but the three values is refused.
    let (status, _, body) = answer(
        http.post(format!("{}?fieldValidation=Loose", widgets(&host)))
            .json(&known)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    host.stop().await;
}

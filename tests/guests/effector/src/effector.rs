// The reconciler shared by the `effector*` test plugins; each crate sets
// `NAME` and `KIND` and includes this file.

use serde::Deserialize;
use setpoint_plugin_sdk::serde_json::{Map, Value, json};
use setpoint_plugin_sdk::{
    Ctx, Error, HttpRequest, HttpResult, KindRef, Manifest, Object, Reconciler, Response,
    SecretKeyRef, export_reconciler,
};

/// One request as a spec lists it.
#[derive(Debug, Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
pub struct Req {
    /// The request id (default `METHOD URL`).
    #[serde(default)]
    pub id: Option<String>,
    /// The method (default GET).
    #[serde(default)]
    pub method: Option<String>,
    /// The URL.
    pub url: String,
    /// Headers as `[name, value]` pairs.
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    /// A text body.
    #[serde(default)]
    pub body: Option<String>,
    /// A time limit.
    #[serde(default)]
    pub timeout_ms: Option<u32>,
    /// Secrets to put in.
    #[serde(default)]
    pub secrets: Vec<SecretSpec>,
}

/// Where a secret goes: `header` (with `template`), `query` or `pointer`.
#[derive(Debug, Deserialize, Clone)]
pub struct SecretSpec {
    /// The Secret.
    pub name: String,
    /// Its key.
    pub key: String,
    /// A header name.
    #[serde(default)]
    pub header: Option<String>,
    /// The header's template (default `{}`).
    #[serde(default)]
    pub template: Option<String>,
    /// A query parameter.
    #[serde(default)]
    pub query: Option<String>,
    /// A JSON pointer into the body.
    #[serde(default)]
    pub pointer: Option<String>,
}

/// Many reads of one URL (`?i=0`, `?i=1`, ...).
#[derive(Debug, Deserialize, Clone)]
pub struct Flood {
    /// The URL.
    pub url: String,
    /// How many.
    pub count: usize,
}

/// The spec of an effect test object.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EffectSpec {
    /// Reads, all in one round.
    #[serde(default)]
    pub reads: Vec<Req>,
    /// Reads, one round each (a chain).
    #[serde(default)]
    pub chain: Vec<Req>,
    /// Writes, once per generation.
    #[serde(default)]
    pub writes: Vec<Req>,
    /// Many reads in one round.
    #[serde(default)]
    pub flood: Option<Flood>,
    /// A read answered with a status of 400 or more fails the reconcile.
    #[serde(default)]
    pub strict: bool,
    /// Look again after this many milliseconds.
    #[serde(default)]
    pub requeue_ms: Option<u64>,
}

fn request(r: &Req) -> HttpRequest {
    let mut request = HttpRequest::new(r.method.as_deref().unwrap_or("GET"), &r.url);
    if let Some(id) = &r.id {
        request = request.id(id);
    }
    for (n, v) in &r.headers {
        request = request.header(n, v);
    }
    if let Some(body) = &r.body {
        request = request.body(body.as_bytes().to_vec());
    }
    if let Some(ms) = r.timeout_ms {
        request = request.timeout_ms(ms);
    }
    for s in &r.secrets {
        let key = SecretKeyRef::new(&s.name, &s.key);
        if let Some(header) = &s.header {
            request = request.secret_header(header, s.template.as_deref().unwrap_or("{}"), key);
        } else if let Some(query) = &s.query {
            request = request.secret_query(query, key);
        } else if let Some(pointer) = &s.pointer {
            request = request.secret_body(pointer, key);
        }
    }
    request
}

/// An answer as JSON: everything the plugin received.
fn answer(result: &HttpResult) -> Value {
    match result {
        Ok(r) => {
            let headers: Map<String, Value> = r
                .headers
                .iter()
                .map(|(n, v)| (n.clone(), Value::String(v.clone())))
                .collect();
            json!({"status": r.status, "headers": headers, "body": r.text(),
                   "error": null, "message": null})
        }
        // Nulls remove what an earlier answer left (the status is a merge patch).
        Err(e) => json!({"error": e.kind.as_str(), "message": e.message,
                         "status": null, "headers": null, "body": null}),
    }
}

fn crd(kind: &str) -> Value {
    let lower = kind.to_lowercase();
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{lower}s.test.setpoint.dev")},
        "spec": {
            "group": "test.setpoint.dev",
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": format!("{lower}s"), "singular": lower, "listKind": format!("{kind}List")},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    })
}

/// The reconciler.
#[derive(Debug, Default)]
pub struct Effector;

impl Reconciler for Effector {
    type Spec = Value;
    type Status = Value;

    fn manifest(&self) -> Manifest {
        Manifest::new(NAME, "1.0.0", KindRef::new("test.setpoint.dev/v1", KIND))
            .definition(crd(KIND))
            .destination("http://*:*")
            .destination("https://*:*")
            .secret("*")
    }

    fn reconcile(&self, object: &Object<Value, Value>, ctx: &Ctx) -> Result<Response<Value>, Error> {
        let spec: EffectSpec = setpoint_plugin_sdk::serde_json::from_value(object.spec.clone())?;
        let spec = &spec;
        let mut reads: Vec<HttpRequest> = spec.reads.iter().map(request).collect();
        if let Some(flood) = &spec.flood {
            reads.extend((0..flood.count).map(|i| HttpRequest::get(format!("{}?i={i}", flood.url))));
        }
        let answers = ctx.fetch_all(&reads)?;
        for r in &spec.chain {
            let _answer = ctx.fetch_result(&request(r))?;
        }
        let mut seen = Map::new();
        for (req, result) in reads.iter().zip(&answers) {
            if spec.strict {
                result.clone().map_err(Error::from)?.error_for_status()?;
            }
            seen.insert(req.id.clone(), answer(result));
        }
        for r in &spec.chain {
            let req = request(r);
            if let Some(result) = ctx.observation(&req.id) {
                seen.insert(req.id.clone(), answer(result));
            }
        }
        let outcomes: Map<String, Value> = ctx
            .outcomes()
            .iter()
            .map(|(id, r)| (id.clone(), answer(r)))
            .collect();
        // Copy everything received into the log and the status.
        let received = json!({
            // Not its status (what this plugin wrote last time) nor its
            // resourceVersion (which that write moves): a converged object
            // gets the same status again, so nothing is written.
            "object": {"metadata": {"name": object.metadata.name, "namespace": object.metadata.namespace,
                                    "uid": object.metadata.uid, "generation": object.metadata.generation},
                       "spec": object.spec},
            "answers": seen, "outcomes": outcomes, "round": ctx.round(),
        });
        ctx.info(format!("received {received}"));
        let generation = object.metadata.generation.unwrap_or(0);
        let mut status = object.status.clone();
        if !status.is_object() {
            status = json!({});
        }
        status["answers"] = Value::Object(seen);
        status["round"] = json!(ctx.round());
        if !outcomes.is_empty() {
            status["outcomes"] = Value::Object(outcomes);
        }
        status["received"] = received;
        let mut response = Response::new();
        if !spec.writes.is_empty() && status["wroteGeneration"] != json!(generation) {
            for w in &spec.writes {
                response = response.effect(request(w));
            }
            status["wroteGeneration"] = json!(generation);
        }
        if let Some(ms) = spec.requeue_ms {
            response = response.requeue_after(std::time::Duration::from_millis(ms));
        }
        Ok(response.status(status))
    }
}

export_reconciler!(Effector);

//! `zoo`: a test plugin that misbehaves on purpose, one way per object.
//! `spec.fault` picks how: `spin` loops forever, `membomb` allocates without
//! end (`smallbomb` likewise, in small blocks), `churn` allocates four times
//! its memory cap in small blocks it frees again (not a fault: it succeeds),
//! `panic` panics, `badstatus` returns a status that is not an object,
//! `oversized` returns a status over the host's response cap, `undeclared`
//! writes a child of a kind it did not declare, `crossns` writes a child in
//! another namespace, `escape` tries to read a file and open a socket, `clock`
//! reports what its clocks say across busy work, `log`
//! logs through the `log` import and stdout, `requeue0` asks to be called
//! again at once with nothing to do, `flip` flips its one child between two
//! states on every call, `sleep` sleeps for `spec.seconds` (3600 by default)
//! and reports its clocks and random numbers, `clash` wants three children,
//! one of which may already belong to someone else, `logflood` logs
//! `spec.count` lines of 1 KiB through the `log` import and as many to
//! stdout on every call and asks to be called again in 10 ms,
//! `eventflood` emits `spec.count` distinct events on every call and asks
//! again in 100 ms, `children` wants `spec.count` children, `burst` asks
//! to be called again at once and writes a small status every few calls
//! (a tick of 50 ms), `fatstatus` writes a status of `spec.count` KiB
//! (1,200 by default), new on every call, and asks again in 100 ms;
//! `busy` computes for `spec.count` million rounds (20 by default) and
//! otherwise behaves as `burst`; anything else succeeds.

use serde::Deserialize;
use setpoint_plugin_sdk::serde_json::{Value, json};
use setpoint_plugin_sdk::{
    Ctx, DynamicObject, Error, KindRef, Manifest, Object, Reconciler, Response, export_reconciler,
};

/// The Zoo spec.
#[derive(Debug, Deserialize)]
pub struct ZooSpec {
    /// Which fault to commit.
    #[serde(default)]
    pub fault: String,
    /// How long `sleep` sleeps.
    #[serde(default)]
    pub seconds: Option<u64>,
    /// How many lines, events or children the floods make.
    #[serde(default)]
    pub count: Option<usize>,
}

const CRD: &str = r#"{
  "apiVersion": "apiextensions.k8s.io/v1",
  "kind": "CustomResourceDefinition",
  "metadata": {"name": "zoos.test.setpoint.dev"},
  "spec": {
    "group": "test.setpoint.dev",
    "scope": "Namespaced",
    "names": {"kind": "Zoo", "plural": "zoos", "singular": "zoo", "listKind": "ZooList"},
    "versions": [{"name": "v1", "served": true, "storage": true,
      "subresources": {"status": {}},
      "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
  }
}"#;

const CHILD_CRD: &str = r#"{
  "apiVersion": "apiextensions.k8s.io/v1",
  "kind": "CustomResourceDefinition",
  "metadata": {"name": "zoochildren.test.setpoint.dev"},
  "spec": {
    "group": "test.setpoint.dev",
    "scope": "Namespaced",
    "names": {"kind": "ZooChild", "plural": "zoochildren", "singular": "zoochild", "listKind": "ZooChildList"},
    "versions": [{"name": "v1", "served": true, "storage": true,
      "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
  }
}"#;

/// The reconciler.
#[derive(Debug, Default)]
pub struct Zoo;

impl Reconciler for Zoo {
    type Spec = ZooSpec;
    type Status = Value;

    fn manifest(&self) -> Manifest {
        Manifest::new(
            "zoo",
            env!("CARGO_PKG_VERSION"),
            KindRef::new("test.setpoint.dev/v1", "Zoo"),
        )
        .owns(KindRef::new("test.setpoint.dev/v1", "ZooChild"))
        .definition_json(CRD)
        .definition_json(CHILD_CRD)
    }

    fn reconcile(
        &self,
        object: &Object<ZooSpec, Value>,
        ctx: &Ctx,
    ) -> Result<Response<Value>, Error> {
        match object.spec.fault.as_str() {
            "spin" => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "membomb" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            // Small blocks kept forever: the SDK's arena hands over to
            // `malloc` at its budget, and `malloc` then meets the cap.
            "smallbomb" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 10]);
                    std::hint::black_box(&hoard);
                }
            }
            // Four times the 16 MiB cap in small blocks, freed oldest first
            // (never the most recent block): fits only because the arena
            // stops at its budget and `malloc` reuses what was freed.
            "churn" => {
                let mut window: std::collections::VecDeque<Vec<u8>> =
                    std::collections::VecDeque::new();
                let mut churned: u64 = 0;
                while churned < 64 << 20 {
                    window.push_back(vec![1u8; 1 << 10]);
                    if window.len() > 1024 {
                        std::hint::black_box(window.pop_front());
                    }
                    churned += 1 << 10;
                }
                Ok(Response::new().status(json!({"churnedBytes": churned})))
            }
            "panic" => panic!("zoo panicked on purpose in {}", object.name()),
            "badstatus" => Ok(Response::new().status(json!("not an object"))),
            "oversized" => Ok(Response::new().status(json!({"blob": "x".repeat(1 << 20)}))),
            "undeclared" => {
                Ok(Response::new().children(vec![child("v1", "ConfigMap", object.name(), None)?]))
            }
            "crossns" => Ok(Response::new().children(vec![child(
                "test.setpoint.dev/v1",
                "ZooChild",
                object.name(),
                Some("elsewhere"),
            )?])),
            "escape" => {
                let file = std::fs::read("/etc/passwd")
                    .map(|b| format!("read {} bytes", b.len()))
                    .unwrap_or_else(|e| format!("file: {e}"));
                let socket = std::net::TcpStream::connect("127.0.0.1:80")
                    .map(|_| "connected".to_owned())
                    .unwrap_or_else(|e| format!("socket: {e}"));
                let env = std::env::vars().count();
                Err(Error::permanent(format!(
                    "escape attempt: {file}; {socket}; {env} environment variables"
                )))
            }
            "clock" => {
                let start = std::time::Instant::now();
                let mut n: u64 = 0;
                for i in 0..5_000_000u64 {
                    n = std::hint::black_box(n.wrapping_add(i));
                }
                let elapsed_ns = start.elapsed().as_nanos() as u64;
                let wall_ms = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis() as u64)
                    .unwrap_or(0);
                Ok(Response::new().status(json!({
                    "elapsedNs": elapsed_ns,
                    "wallMs": wall_ms,
                    "requestMs": ctx.now().unix_ms(),
                })))
            }
            "log" => {
                ctx.info(format!("zoo log import for {}", object.name()));
                println!("zoo stdout for {}", object.name());
                Ok(Response::new().status(json!({"logged": true})))
            }
            "busy" => {
                let mut n: u64 = 0;
                for i in 0..(object.spec.count.unwrap_or(20) as u64 * 1_000_000) {
                    n = std::hint::black_box(n.wrapping_mul(31).wrapping_add(i));
                }
                Ok(Response::new()
                    .status(json!({"tick": ctx.now().unix_ms() / 50, "n": n % 7}))
                    .requeue_after(std::time::Duration::ZERO))
            }
            "fatstatus" => {
                let tick = ctx.now().unix_ms();
                let blob = format!(
                    "{tick}:{}",
                    "f".repeat(object.spec.count.unwrap_or(1200) << 10)
                );
                Ok(Response::new()
                    .status(json!({"tick": tick, "blob": blob}))
                    .requeue_after(std::time::Duration::from_millis(100)))
            }
            "requeue0" => Ok(Response::new().requeue_after(std::time::Duration::ZERO)),
            "burst" => Ok(Response::new()
                .status(json!({"tick": ctx.now().unix_ms() / 50}))
                .requeue_after(std::time::Duration::ZERO)),
            "flip" => {
                let current = ctx
                    .owned_objects()
                    .first()
                    .and_then(|c| c.field("/data/a"))
                    .and_then(Value::as_str)
                    .unwrap_or("b");
                let next = if current == "a" { "b" } else { "a" };
                let flipped = DynamicObject::from_value(json!({
                    "apiVersion": "test.setpoint.dev/v1",
                    "kind": "ZooChild",
                    "metadata": {"name": object.name()},
                    "data": {"a": next},
                }))?;
                Ok(Response::new().children(vec![flipped]))
            }
            "sleep" => {
                let mono = std::time::Instant::now();
                let random = std::collections::hash_map::RandomState::new();
                use std::hash::BuildHasher;
                let drawn = random.hash_one(18u64);
                std::thread::sleep(std::time::Duration::from_secs(
                    object.spec.seconds.unwrap_or(3600),
                ));
                let slept_ns = mono.elapsed().as_nanos() as u64;
                let wall_ms = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis() as u64)
                    .unwrap_or(0);
                Ok(Response::new().status(json!({
                    "sleptNs": slept_ns,
                    "wallMs": wall_ms,
                    "requestMs": ctx.now().unix_ms(),
                    "random": drawn.to_string(),
                })))
            }
            "clash" => Ok(Response::new().children(
                ["a", "b", "c"]
                    .iter()
                    .map(|n| {
                        child(
                            "test.setpoint.dev/v1",
                            "ZooChild",
                            &format!("{}-{n}", object.name()),
                            None,
                        )
                    })
                    .collect::<Result<_, _>>()?,
            )),
            "logflood" => {
                let line = "z".repeat(1 << 10);
                for i in 0..object.spec.count.unwrap_or(1000) {
                    ctx.info(format!("{i} {line}"));
                }
                // Past the host's capture stdout is a closed pipe: go on.
                use std::io::Write as _;
                let mut stdout = std::io::stdout();
                for i in 0..object.spec.count.unwrap_or(1000) {
                    let _ = writeln!(stdout, "{i} {line}");
                }
                Ok(Response::new().requeue_after(std::time::Duration::from_millis(10)))
            }
            "eventflood" => {
                let mut response =
                    Response::new().requeue_after(std::time::Duration::from_millis(100));
                let call = ctx.now().unix_ms();
                for i in 0..object.spec.count.unwrap_or(10_000) {
                    response = response.event(setpoint_plugin_sdk::Event::normal(
                        "Flood",
                        format!("event {i} of the call at {call}"),
                    ));
                }
                Ok(response)
            }
            "children" => Ok(Response::new().children(
                (0..object.spec.count.unwrap_or(10_000))
                    .map(|i| {
                        child(
                            "test.setpoint.dev/v1",
                            "ZooChild",
                            &format!("{}-{i}", object.name()),
                            None,
                        )
                    })
                    .collect::<Result<_, _>>()?,
            )),
            _ => Ok(Response::new().status(json!({"fine": true}))),
        }
    }
}

fn child(
    api_version: &str,
    kind: &str,
    name: &str,
    namespace: Option<&str>,
) -> Result<DynamicObject, Error> {
    let mut metadata = json!({"name": name});
    if let Some(ns) = namespace {
        metadata["namespace"] = json!(ns);
    }
    DynamicObject::from_value(json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": metadata,
        "data": {"a": "b"},
    }))
}

export_reconciler!(Zoo);

//! The provider's decisions, natively: `plan` on its own, then whole
//! reconciles with `FakeCtx` answering the zone read and the last write.

use setpoint_plugin_sdk::serde_json::{Value, json};
use setpoint_plugin_sdk::testing::FakeCtx;
use setpoint_plugin_sdk::{
    ConditionStatus, HttpError, HttpErrorKind, HttpResponse, HttpResult, Object, Reconciler,
    Response, Time,
};

use super::*;
use crate::plan::{READ_ID, decide};

const URL: &str = "http://127.0.0.1:8081/api/v1/servers/localhost/zones/example.test.";

fn spec(records: &[&str], ttl: u32) -> Value {
    json!({"zone": "example.test", "name": "www", "type": "A", "ttl": ttl,
           "records": records, "resyncSeconds": 10,
           "server": {"url": "http://127.0.0.1:8081/",
                      "apiKeySecretRef": {"name": "pdns", "key": "api-key"}}})
}

fn record(spec: Value, status: Value) -> Object<DnsRecordSpec, DnsRecordStatus> {
    Object::from_value(json!({"apiVersion": API_VERSION, "kind": "DnsRecord",
        "metadata": {"name": "www", "namespace": "default", "generation": 2, "uid": "u1"},
        "spec": spec, "status": status}))
    .unwrap()
}

fn target(records: &[&str], ttl: u32) -> Target {
    Target::from_spec(&record(spec(records, ttl), json!({})).spec).unwrap()
}

fn answer(status: u16, body: Value) -> HttpResult {
    Ok(HttpResponse {
        status,
        headers: vec![],
        body: body.to_string().into_bytes(),
    })
}

fn zone(rrsets: Value) -> HttpResult {
    answer(200, json!({"name": "example.test.", "rrsets": rrsets}))
}

fn www(ttl: u32, contents: &[&str]) -> Value {
    let records: Vec<Value> = contents
        .iter()
        .map(|c| json!({"content": c, "disabled": false}))
        .collect();
    json!([{"name": "www.example.test.", "type": "A", "ttl": ttl, "records": records},
           {"name": "example.test.", "type": "SOA", "ttl": 3600, "records": [{"content": "x", "disabled": false}]}])
}

fn unanswered(kind: HttpErrorKind) -> HttpResult {
    Err(HttpError {
        kind,
        message: "connection refused".into(),
    })
}

fn rrset(ttl: u32, records: &[&str]) -> Rrset {
    Rrset {
        ttl,
        records: records.iter().map(|s| s.to_string()).collect(),
    }
}

#[test]
fn a_spec_becomes_an_absolute_name_a_zone_url_and_sorted_contents() {
    let t = target(&["192.0.2.9", "192.0.2.1", "192.0.2.1"], 60);
    assert_eq!(t.zone_url, URL);
    assert_eq!(
        (t.fqdn.as_str(), t.rtype.as_str()),
        ("www.example.test.", "A")
    );
    assert_eq!(t.wanted, rrset(60, &["192.0.2.1", "192.0.2.9"]));

    let mut apex = record(spec(&["x"], 60), json!({})).spec;
    apex.name = "@".into();
    assert_eq!(Target::from_spec(&apex).unwrap().fqdn, "example.test.");
    apex.name = "Mail.Example.Test.".into();
    assert_eq!(Target::from_spec(&apex).unwrap().fqdn, "mail.example.test.");

    for (field, value) in [
        ("name", json!("www.other.test.")),
        ("zone", json!("bad zone")),
        ("type", json!("A A")),
        ("records", json!([])),
    ] {
        let mut s = spec(&["192.0.2.1"], 60);
        s[field] = value;
        let err = Target::from_spec(&record(s, json!({})).spec).unwrap_err();
        assert_eq!(err.reason(), "InvalidSpec");
        assert!(err.message().contains(&format!("spec.{field}")), "{err:?}");
    }
    let mut s = spec(&["192.0.2.1"], 60);
    s["server"]["url"] = json!("ftp://x");
    assert!(Target::from_spec(&record(s, json!({})).spec).is_err());
}

#[test]
fn the_requests_carry_the_key_as_a_secret_and_say_replace_or_delete() {
    let t = target(&["192.0.2.1"], 60);
    let read = t.read();
    assert_eq!(
        (read.method.as_str(), read.url.as_str(), read.id.as_str()),
        ("GET", URL, READ_ID)
    );
    assert_eq!(read.secrets.len(), 1);
    assert_eq!(read.secrets[0].secret.name, "pdns");
    assert!(
        read.header_value("X-API-Key").is_none(),
        "the host fills it in"
    );

    let replace = t.replace();
    assert_eq!(
        (replace.method.as_str(), replace.id.as_str()),
        ("PATCH", WRITE_ID)
    );
    let body: Value = serde_json_from(&replace.body);
    assert_eq!(
        body,
        json!({"rrsets": [{"name": "www.example.test.", "type": "A", "ttl": 60, "changetype": "REPLACE",
                           "records": [{"content": "192.0.2.1", "disabled": false}]}]})
    );
    let delete: Value = serde_json_from(&t.delete().body);
    assert_eq!(delete["rrsets"][0]["changetype"], "DELETE");
    assert_eq!(t.delete().secrets.len(), 1);
}

fn serde_json_from(body: &Option<Vec<u8>>) -> Value {
    setpoint_plugin_sdk::serde_json::from_slice(body.as_deref().unwrap()).unwrap()
}

#[test]
fn answers_become_an_rrset_or_a_failure_with_a_reason() {
    let t = target(&["192.0.2.1"], 60);
    assert_eq!(
        t.observe(&zone(www(60, &["192.0.2.1"]))).unwrap(),
        Some(rrset(60, &["192.0.2.1"]))
    );
    assert_eq!(t.observe(&zone(json!([]))).unwrap(), None);
    let disabled = json!([{"name": "www.example.test.", "type": "A", "ttl": 60,
                           "records": [{"content": "192.0.2.1", "disabled": true}]}]);
    assert_eq!(
        t.observe(&zone(disabled)).unwrap(),
        None,
        "disabled is not served"
    );

    let reason = |r: &HttpResult| t.observe(r).unwrap_err().reason();
    assert_eq!(reason(&answer(401, json!("Unauthorized"))), "Unauthorized");
    assert_eq!(
        reason(&answer(404, json!({"error": "Not Found"}))),
        "ZoneNotFound"
    );
    assert_eq!(reason(&answer(500, json!({}))), "Unreachable");
    assert_eq!(reason(&unanswered(HttpErrorKind::Connect)), "Unreachable");
    assert_eq!(reason(&unanswered(HttpErrorKind::Throttled)), "Unreachable");
    assert_eq!(reason(&unanswered(HttpErrorKind::Refused)), "NotGranted");
    let message = t.observe(&answer(401, json!("Unauthorized"))).unwrap_err();
    assert!(
        message.message().contains("Secret pdns/api-key"),
        "{message:?}"
    );
    assert!(message.message().contains("HTTP 401"), "{message:?}");

    assert_eq!(t.written(&answer(204, json!(null))), Ok(()));
    let rejected = t
        .written(&answer(422, json!({"error": "bad IP"})))
        .unwrap_err();
    assert_eq!(rejected.reason(), "Rejected");
    assert!(rejected.message().contains("bad IP"));
}

#[test]
fn decide_writes_on_a_difference_and_nothing_when_in_sync() {
    let t = target(&["192.0.2.1"], 60);
    let none = Memory::default();
    assert_eq!(
        decide(&t, false, Ok(Some(rrset(60, &["192.0.2.1"]))), &none),
        Step::InSync(rrset(60, &["192.0.2.1"]))
    );
    assert_eq!(decide(&t, false, Ok(None), &none), Step::Write(None));
    let stale = Some(rrset(300, &["192.0.2.1"]));
    assert_eq!(
        decide(&t, false, Ok(stale.clone()), &none),
        Step::Write(stale.clone())
    );

    // A write that went through but did not change what is served is not
    // sent again at once.
    let accepted = Memory {
        last_write: Some(Ok(())),
        held: None,
    };
    let step = decide(&t, false, Ok(stale.clone()), &accepted);
    assert!(
        matches!(step, Step::Fail(Failure::NotConverging(_), _)),
        "{step:?}"
    );
    // Nor one PowerDNS refused, nor while a refusal holds writes.
    let refused = Failure::Rejected("no".into());
    let rejected = Memory {
        last_write: Some(Err(refused.clone())),
        held: None,
    };
    assert_eq!(
        decide(&t, false, Ok(None), &rejected),
        Step::Fail(refused.clone(), None)
    );
    let held = Memory {
        last_write: None,
        held: Some(refused.clone()),
    };
    assert_eq!(
        decide(&t, false, Ok(None), &held),
        Step::Fail(refused, None)
    );
    // A read failure is reported as it is.
    let down = Failure::Unreachable("down".into());
    assert_eq!(
        decide(&t, false, Err(down.clone()), &none),
        Step::Fail(down, None)
    );
}

#[test]
fn decide_deletes_then_releases_when_finalizing() {
    let t = target(&["192.0.2.1"], 60);
    let none = Memory::default();
    let served = rrset(60, &["192.0.2.1"]);
    assert_eq!(
        decide(&t, true, Ok(Some(served.clone())), &none),
        Step::Delete(served)
    );
    assert_eq!(decide(&t, true, Ok(None), &none), Step::Release);
    let gone = Failure::ZoneNotFound("gone".into());
    assert_eq!(decide(&t, true, Err(gone), &none), Step::Release);
    let denied = Failure::Unauthorized("key".into());
    assert_eq!(
        decide(&t, true, Err(denied.clone()), &none),
        Step::Fail(denied, None),
        "the finalizer stays until the record can be deleted"
    );
}

fn ready(response: &Response<DnsRecordStatus>) -> (ConditionStatus, String) {
    let status = response.status.as_ref().expect("a status");
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    (ready.status, ready.reason.clone())
}

#[test]
fn a_reconcile_reads_first_then_writes_what_differs() {
    let r = record(spec(&["192.0.2.1"], 60), json!({}));
    let ctx = FakeCtx::new();
    let err = DnsRecordReconciler.reconcile(&r, &ctx).unwrap_err();
    assert!(err.message().contains("waiting"), "{err:?}");
    assert_eq!(ctx.pending_reads().len(), 1, "the zone read is asked for");

    let ctx = FakeCtx::new().with_observation(READ_ID, zone(www(300, &["192.0.2.1"])));
    let response = DnsRecordReconciler.reconcile(&r, &ctx).unwrap();
    assert_eq!(response.effects.len(), 1);
    assert_eq!(response.effects[0].method, "PATCH");
    assert_eq!(
        ready(&response),
        (ConditionStatus::False, "Updating".into())
    );
    let status = response.status.unwrap();
    assert_eq!(status.observed, Some(rrset(300, &["192.0.2.1"])));
    assert_eq!(status.observed_generation, Some(2));
    assert_eq!(status.fqdn.as_deref(), Some("www.example.test."));

    let ctx = FakeCtx::new()
        .with_observation(READ_ID, zone(www(60, &["192.0.2.1"])))
        .with_outcome(WRITE_ID, answer(204, json!(null)));
    let response = DnsRecordReconciler.reconcile(&r, &ctx).unwrap();
    assert!(response.effects.is_empty());
    assert_eq!(ready(&response), (ConditionStatus::True, "InSync".into()));
    assert_eq!(
        response.requeue_after,
        Some(Duration::from_secs(10)),
        "looks again"
    );
}

#[test]
fn a_failure_is_written_once_then_left_to_the_hosts_backoff() {
    let r = record(spec(&["192.0.2.1"], 60), json!({}));
    let ctx = FakeCtx::new().with_observation(READ_ID, answer(401, json!("Unauthorized")));
    let response = DnsRecordReconciler.reconcile(&r, &ctx).unwrap();
    assert_eq!(
        ready(&response),
        (ConditionStatus::False, "Unauthorized".into())
    );
    assert!(response.effects.is_empty());
    assert_eq!(response.events.len(), 1);
    // Its own status write does not call it again: it asks to be.
    assert_eq!(response.requeue_after, Some(Duration::from_secs(1)));

    // The status now says so: the same failure is an error (backoff), and
    // no write is asked for.
    let reported = setpoint_plugin_sdk::serde_json::to_value(response.status.unwrap()).unwrap();
    let r = record(spec(&["192.0.2.1"], 60), reported);
    let err = DnsRecordReconciler.reconcile(&r, &ctx).unwrap_err();
    assert!(!err.is_permanent());
    assert!(err.message().contains("Unauthorized"), "{err:?}");

    // PowerDNS down, then back: reported, then in sync again.
    let ctx = FakeCtx::new().with_observation(READ_ID, unanswered(HttpErrorKind::Connect));
    let response = DnsRecordReconciler.reconcile(&r, &ctx).unwrap();
    assert_eq!(
        ready(&response),
        (ConditionStatus::False, "Unreachable".into())
    );
    assert_eq!(
        response.status.as_ref().unwrap().observed,
        None,
        "nothing seen: the last observation is kept (none here)"
    );
    let ctx = FakeCtx::new().with_observation(READ_ID, zone(www(60, &["192.0.2.1"])));
    let response = DnsRecordReconciler.reconcile(&r, &ctx).unwrap();
    assert_eq!(ready(&response), (ConditionStatus::True, "InSync".into()));
}

#[test]
fn a_rejected_write_holds_further_writes_for_the_resync_period() {
    let r = record(spec(&["not-an-ip"], 60), json!({}));
    let now = Time::from_unix_ms(1_000_000);
    let ctx = FakeCtx::new()
        .with_now(now)
        .with_observation(READ_ID, zone(json!([])))
        .with_outcome(WRITE_ID, answer(422, json!({"error": "bad content"})));
    let response = DnsRecordReconciler.reconcile(&r, &ctx).unwrap();
    assert_eq!(
        ready(&response),
        (ConditionStatus::False, "Rejected".into())
    );
    assert!(response.effects.is_empty());
    assert_eq!(response.requeue_after, Some(Duration::from_secs(10)));
    let held = response.status.clone().unwrap();
    assert_eq!(held.writes_held_until, Some(now + Duration::from_secs(10)));

    // The reconcile the status write causes: no outcome any more, but the
    // hold keeps the write back and changes nothing.
    let r = record(
        spec(&["not-an-ip"], 60),
        setpoint_plugin_sdk::serde_json::to_value(&held).unwrap(),
    );
    let later = now + Duration::from_secs(4);
    let ctx = FakeCtx::new()
        .with_now(later)
        .with_observation(READ_ID, zone(json!([])));
    let response = DnsRecordReconciler.reconcile(&r, &ctx).unwrap();
    assert!(response.effects.is_empty());
    assert_eq!(response.status.as_ref(), Some(&held));
    assert_eq!(response.requeue_after, Some(Duration::from_secs(6)));
    // Once the hold ends, the write is tried again.
    let ctx = FakeCtx::new()
        .with_now(now + Duration::from_secs(10))
        .with_observation(READ_ID, zone(json!([])));
    let response = DnsRecordReconciler.reconcile(&r, &ctx).unwrap();
    assert_eq!(response.effects.len(), 1);
}

#[test]
fn deleting_sends_a_delete_and_releases_the_finalizer_once_the_record_is_gone() {
    let mut value = spec(&["192.0.2.1"], 60);
    value["zone"] = json!("example.test.");
    let r = Object::<DnsRecordSpec, DnsRecordStatus>::from_value(json!({
        "apiVersion": API_VERSION, "kind": "DnsRecord",
        "metadata": {"name": "www", "namespace": "default", "generation": 2,
                     "deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": [FINALIZER]},
        "spec": value}))
    .unwrap();
    let ctx = FakeCtx::new()
        .with_finalizing(true)
        .with_observation(READ_ID, zone(www(60, &["192.0.2.1"])));
    let response = DnsRecordReconciler.reconcile(&r, &ctx).unwrap();
    assert_eq!(response.effects.len(), 1);
    assert!(!response.remove_finalizer);
    let ctx = FakeCtx::new()
        .with_finalizing(true)
        .with_observation(READ_ID, zone(json!([])))
        .with_outcome(WRITE_ID, answer(204, json!(null)));
    let response = DnsRecordReconciler.reconcile(&r, &ctx).unwrap();
    assert!(response.effects.is_empty());
    assert!(response.remove_finalizer);
}

#[test]
fn the_manifest_declares_the_finalizer_any_http_destination_and_its_definition() {
    let manifest = DnsRecordReconciler.manifest();
    assert_eq!(manifest.finalizer.as_deref(), Some(FINALIZER));
    assert_eq!(manifest.destinations, ["http://*:*", "https://*:*"]);
    assert_eq!(manifest.definitions.len(), 1);
}

#[test]
fn a_failure_whose_message_changes_while_its_reason_stays_is_not_written_again() {
    let r = record(spec(&["192.0.2.1"], 60), json!({}));
    let first = Err(HttpError {
        kind: HttpErrorKind::Timeout,
        message: "after 2001 ms".into(),
    });
    let ctx = FakeCtx::new().with_observation(READ_ID, first);
    let reported = DnsRecordReconciler
        .reconcile(&r, &ctx)
        .unwrap()
        .status
        .unwrap();
    let r = record(
        spec(&["192.0.2.1"], 60),
        setpoint_plugin_sdk::serde_json::to_value(reported).unwrap(),
    );
    let second = Err(HttpError {
        kind: HttpErrorKind::Timeout,
        message: "after 2003 ms".into(),
    });
    let ctx = FakeCtx::new().with_observation(READ_ID, second);
    let err = DnsRecordReconciler.reconcile(&r, &ctx).unwrap_err();
    assert!(!err.is_permanent(), "backs off: {err:?}");

    // A hold by the host is reported without its time left.
    let t = target(&["192.0.2.1"], 60);
    let held = |ms: u32| {
        t.observe(&Err(HttpError {
            kind: HttpErrorKind::Throttled,
            message: format!("circuit breaker: retry in {ms} ms"),
        }))
        .unwrap_err()
    };
    assert_eq!(held(29_000), held(28_000));
}

#[test]
fn retrying_a_write_after_a_failure_leaves_the_status_as_it_is_until_the_write_lands() {
    let r = record(spec(&["192.0.2.1"], 60), json!({}));
    // The write was sent and got no answer.
    let ctx = FakeCtx::new()
        .with_observation(READ_ID, zone(json!([])))
        .with_outcome(WRITE_ID, unanswered(HttpErrorKind::Timeout));
    let response = DnsRecordReconciler.reconcile(&r, &ctx).unwrap();
    assert_eq!(
        ready(&response),
        (ConditionStatus::False, "Unreachable".into())
    );
    let reported = response.status.unwrap();
    let r = record(
        spec(&["192.0.2.1"], 60),
        setpoint_plugin_sdk::serde_json::to_value(&reported).unwrap(),
    );
    // The next look: the write is sent again, the status stays.
    let ctx = FakeCtx::new().with_observation(READ_ID, zone(json!([])));
    let response = DnsRecordReconciler.reconcile(&r, &ctx).unwrap();
    assert_eq!(response.effects.len(), 1);
    assert_eq!(response.status.as_ref(), Some(&reported));
    assert!(response.events.is_empty());
    // Its outcome fails again: reported already, so backoff.
    let ctx = FakeCtx::new()
        .with_observation(READ_ID, zone(json!([])))
        .with_outcome(WRITE_ID, unanswered(HttpErrorKind::Timeout));
    assert!(DnsRecordReconciler.reconcile(&r, &ctx).is_err());
}

#[test]
fn a_write_that_could_not_connect_is_sent_again_once_a_read_is_answered() {
    // Written while PowerDNS was down (its zone read still fresh): the
    // write never reached it. Now a read is answered: write, do not
    // report the old failure (that would cost a look of its own).
    let r = record(
        spec(&["192.0.3.1"], 60),
        json!({"conditions": [{"type": "Ready", "status": "False", "reason": "Updating",
            "message": "updating", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}),
    );
    let ctx = FakeCtx::new()
        .with_observation(READ_ID, zone(www(60, &["192.0.2.1"])))
        .with_outcome(WRITE_ID, unanswered(HttpErrorKind::Connect));
    let response = DnsRecordReconciler.reconcile(&r, &ctx).unwrap();
    assert_eq!(response.effects.len(), 1, "written again");
    assert_eq!(
        ready(&response),
        (ConditionStatus::False, "Updating".into())
    );
    // A write PowerDNS answered with an error is still reported.
    let ctx = FakeCtx::new()
        .with_observation(READ_ID, zone(www(60, &["192.0.2.1"])))
        .with_outcome(
            WRITE_ID,
            answer(500, json!({"error": "database is locked"})),
        );
    let response = DnsRecordReconciler.reconcile(&r, &ctx).unwrap();
    assert!(response.effects.is_empty(), "not sent again at once");
    assert_eq!(
        ready(&response),
        (ConditionStatus::False, "Unreachable".into())
    );
}

#[test]
fn requests_the_host_held_back_change_nothing_on_the_object() {
    // In sync, then the next look is held by the host (rate limit, breaker):
    // not a PowerDNS failure, no status, the host requeues.
    let ctx = FakeCtx::new().with_observation(READ_ID, zone(www(60, &["192.0.2.1"])));
    let r = record(spec(&["192.0.2.1"], 60), json!({}));
    let in_sync = DnsRecordReconciler
        .reconcile(&r, &ctx)
        .unwrap()
        .status
        .unwrap();
    let r = record(
        spec(&["192.0.2.1"], 60),
        setpoint_plugin_sdk::serde_json::to_value(&in_sync).unwrap(),
    );
    let ctx = FakeCtx::new().with_observation(READ_ID, unanswered(HttpErrorKind::Throttled));
    let err = DnsRecordReconciler.reconcile(&r, &ctx).unwrap_err();
    assert!(!err.is_permanent(), "{err:?}");

    // A write the host held back was not sent: it is asked for again.
    let r = record(spec(&["192.0.2.2"], 60), json!({}));
    let ctx = FakeCtx::new()
        .with_observation(READ_ID, zone(www(60, &["192.0.2.1"])))
        .with_outcome(WRITE_ID, unanswered(HttpErrorKind::Throttled));
    let response = DnsRecordReconciler.reconcile(&r, &ctx).unwrap();
    assert_eq!(response.effects.len(), 1);
    assert_eq!(
        ready(&response),
        (ConditionStatus::False, "Updating".into())
    );
}

//! The DNS provider against a real PowerDNS (`support::pdns`): the harness
//! itself, then `plugins/dns` reconciling `DnsRecord`s.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use setpoint::controller::Outcome;
use setpoint::object::{KindInfo, ObjectKey};

use crate::support::pdns::PowerDns;
use crate::support::{TestHost, eventually, ready_condition};

#[tokio::test(flavor = "multi_thread")]
async fn the_powerdns_harness_serves_a_record_written_through_its_api_and_survives_a_restart() {
    let mut pdns = PowerDns::start().await;
    pdns.create_zone("example.test.").await;
    pdns.patch_rrsets(
        "example.test.",
        json!([{"name": "www.example.test.", "type": "A", "ttl": 120, "changetype": "REPLACE",
                "records": [{"content": "192.0.2.7", "disabled": false},
                            {"content": "192.0.2.8", "disabled": false}]}]),
    )
    .await;
    assert_eq!(
        pdns.query("www.example.test.", "A").await,
        ["192.0.2.7", "192.0.2.8"]
    );
    assert_eq!(pdns.query_ttl("www.example.test.", "A").await, Some(120));
    let rrset = pdns
        .rrset("example.test.", "www.example.test.", "A")
        .await
        .unwrap();
    assert_eq!(rrset["ttl"], 120);

    pdns.stop().await;
    let refused = reqwest::Client::new()
        .get(format!("{}/api/v1/servers/localhost", pdns.api_url()))
        .header("X-API-Key", pdns.api_key())
        .send()
        .await;
    assert!(refused.is_err(), "stopped: nothing listens");
    pdns.resume().await;
    assert_eq!(
        pdns.query("www.example.test.", "A").await,
        ["192.0.2.7", "192.0.2.8"],
        "the data outlives a restart"
    );

    let wrong_key = reqwest::Client::new()
        .get(format!("{}/api/v1/servers/localhost/zones", pdns.api_url()))
        .header("X-API-Key", "wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_key.status(), 401);
}

const WAIT: Duration = Duration::from_secs(60);
const ZONE: &str = "example.test.";

/// A host running the `dns` plugin, a PowerDNS with zone `example.test.`,
/// the API key in Secret `default/pdns-api` (key `api-key`, or `key` when
/// given) and a grant for both.
async fn setup(key: Option<&str>) -> (TestHost, PowerDns) {
    setup_with(key, Default::default()).await
}

/// [`setup`] with these egress settings.
async fn setup_with(
    key: Option<&str>,
    egress: setpoint::egress::EgressConfig,
) -> (TestHost, PowerDns) {
    let pdns = PowerDns::start().await;
    pdns.create_zone(ZONE).await;
    let host = TestHost::start_with_egress(&["dns"], egress).await;
    set_secret(&host, key.unwrap_or(pdns.api_key())).await;
    let api = host.host.api();
    let grants = api
        .kinds()
        .require("setpoint.dev/v1", "PluginGrant")
        .unwrap();
    api.create(
        &grants,
        json!({"apiVersion": "setpoint.dev/v1", "kind": "PluginGrant", "metadata": {"name": "dns"},
               "spec": {"destinations": [pdns.api_url()], "secrets": ["default/pdns-api/api-key"]}}),
    )
    .await
    .unwrap();
    (host, pdns)
}

/// Create or change Secret `default/pdns-api` to hold `key`.
async fn set_secret(host: &TestHost, key: &str) {
    let api = host.host.api();
    let secrets = api.kinds().require("v1", "Secret").unwrap();
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "pdns-api", "namespace": "default"},
        "stringData": {"api-key": key}});
    match api.get(&secrets, Some("default"), "pdns-api").await {
        Ok(_) => {
            api.merge_patch(
                &secrets,
                Some("default"),
                "pdns-api",
                &json!({"stringData": {"api-key": key}}),
                false,
            )
            .await
            .unwrap();
        }
        Err(_) => {
            api.create(&secrets, secret).await.unwrap();
        }
    }
}

fn dns_record(pdns: &PowerDns, name: &str, records: &[&str], ttl: u32) -> Value {
    let mut record = crate::support::pdns::dns_record(&pdns.api_url(), name, records, ttl);
    record["spec"]["resyncSeconds"] = json!(1);
    record
}

fn records_kind(host: &TestHost) -> Arc<KindInfo> {
    host.host
        .api()
        .kinds()
        .require("dns.setpoint.dev/v1", "DnsRecord")
        .expect("the dns plugin registers DnsRecord")
}

/// The DnsRecord `name` in `default`, if it exists.
async fn get_record(host: &TestHost, name: &str) -> Option<Value> {
    host.host
        .api()
        .get(&records_kind(host), Some("default"), name)
        .await
        .ok()
}

fn ready(object: &Value) -> Value {
    ready_condition(object).unwrap_or(Value::Null)
}

/// Wait until `dig` answers `name` with exactly `want` (sorted).
async fn served(pdns: &PowerDns, name: &str, want: &[&str]) {
    served_within(pdns, name, want, WAIT).await;
}

/// [`served`] with a time limit of its own.
async fn served_within(pdns: &PowerDns, name: &str, want: &[&str], limit: Duration) {
    let fqdn = format!("{name}.example.test.");
    eventually(&format!("{fqdn} served as {want:?}"), limit, || async {
        let got = pdns.query(&fqdn, "A").await;
        if got == want {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    })
    .await;
}

/// Wait until the DnsRecord's Ready condition has `status` and `reason`.
async fn ready_is(host: &TestHost, name: &str, status: &str, reason: &str) -> Value {
    eventually(
        &format!("DnsRecord {name} Ready={status} ({reason})"),
        WAIT,
        || async {
            let object = get_record(host, name).await.ok_or("absent")?;
            let ready = ready(&object);
            if ready["status"] == status && ready["reason"] == reason {
                Ok(object)
            } else {
                Err(object["status"].to_string())
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dns_record_is_served_updated_and_removed_with_its_object() {
    let (host, pdns) = setup(None).await;
    let api = host.host.api();
    let kind = records_kind(&host);
    api.create(&kind, dns_record(&pdns, "www", &["192.0.2.1"], 120))
        .await
        .unwrap();
    served(&pdns, "www", &["192.0.2.1"]).await;
    let object = ready_is(&host, "www", "True", "InSync").await;
    assert_eq!(object["status"]["fqdn"], "www.example.test.");
    assert_eq!(
        object["status"]["observed"],
        json!({"ttl": 120, "records": ["192.0.2.1"]})
    );
    assert_eq!(object["status"]["observedGeneration"], 1);
    assert_eq!(
        object["metadata"]["finalizers"],
        json!(["dns.setpoint.dev/record"]),
        "{object}"
    );

    // New contents and TTL.
    api.merge_patch(
        &kind,
        Some("default"),
        "www",
        &json!({"spec": {"records": ["192.0.2.2", "192.0.2.3"], "ttl": 60}}),
        false,
    )
    .await
    .unwrap();
    served(&pdns, "www", &["192.0.2.2", "192.0.2.3"]).await;
    eventually("the new TTL served", WAIT, || async {
        match pdns.query_ttl("www.example.test.", "A").await {
            Some(60) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let object = ready_is(&host, "www", "True", "InSync").await;
    assert_eq!(object["status"]["observedGeneration"], 2);

    // Deleting the object deletes the record, then the object goes.
    api.delete(&kind, Some("default"), "www", &Default::default())
        .await
        .unwrap();
    served(&pdns, "www", &[]).await;
    eventually("the DnsRecord is gone", WAIT, || async {
        match get_record(&host, "www").await {
            None => Ok(()),
            Some(o) => Err(o["metadata"].to_string()),
        }
    })
    .await;
    assert_eq!(pdns.rrset(ZONE, "www.example.test.", "A").await, None);
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_deleted_or_edited_behind_the_objects_back_is_restored_within_the_resync_period() {
    let (host, pdns) = setup(None).await;
    let api = host.host.api();
    api.create(
        &records_kind(&host),
        dns_record(&pdns, "api", &["192.0.2.10"], 300),
    )
    .await
    .unwrap();
    served(&pdns, "api", &["192.0.2.10"]).await;
    ready_is(&host, "api", "True", "InSync").await;

    // Each change behind the object's back is acknowledged by PowerDNS
    // (`patch_rrsets` asserts its 204). Asking DNS right after would race
    // the repair: with a resync of 1 s the plugin may already have put the
    // record back, so only the repair is awaited.
    pdns.patch_rrsets(
        ZONE,
        json!([{"name": "api.example.test.", "type": "A", "changetype": "DELETE"}]),
    )
    .await;
    served(&pdns, "api", &["192.0.2.10"]).await;

    pdns.patch_rrsets(
        ZONE,
        json!([{"name": "api.example.test.", "type": "A", "ttl": 5, "changetype": "REPLACE",
                "records": [{"content": "198.51.100.66", "disabled": false}]}]),
    )
    .await;
    served(&pdns, "api", &["192.0.2.10"]).await;
    eventually("the TTL restored", WAIT, || async {
        match pdns.query_ttl("api.example.test.", "A").await {
            Some(300) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_api_key_is_reported_as_unauthorized_with_backoff_and_a_fixed_secret_recovers() {
    let wrong = "wrong-key-4f1c9a";
    let (host, pdns) = setup(Some(wrong)).await;
    let api = host.host.api();
    api.create(
        &records_kind(&host),
        dns_record(&pdns, "mail", &["192.0.2.25"], 300),
    )
    .await
    .unwrap();
    let object = ready_is(&host, "mail", "False", "Unauthorized").await;
    let message = ready(&object)["message"].as_str().unwrap().to_owned();
    assert!(
        message.contains("refused the API key") && message.contains("pdns-api/api-key"),
        "{message}"
    );
    assert!(message.contains("HTTP 401"), "{message}");
    assert!(!message.contains(wrong), "{message}");

    // Retried with a growing delay, not in a loop: the host's history of
    // the object shows transient errors, each scheduled later than the last.
    let key = ObjectKey::new(Some("default"), "mail");
    let delays = eventually("five retries in a row", WAIT, || async {
        let history = host
            .host
            .history("dns.setpoint.dev/v1", "DnsRecord", &key)
            .await;
        let delays: Vec<Duration> = history
            .iter()
            .rev()
            .take_while(
                |r| matches!(&r.outcome, Outcome::TransientError(e) if e.contains("Unauthorized")),
            )
            .filter_map(|r| r.next_in)
            .collect();
        if delays.len() >= 5 {
            Ok(delays)
        } else {
            Err(format!("{history:?}"))
        }
    })
    .await;
    // Newest first. Each delay doubles, less up to a tenth of jitter, so
    // none is shorter than the one before it by more than the jitter, and
    // the newest is far longer than the oldest.
    assert!(
        delays
            .windows(2)
            .all(|w| w[0].as_secs_f64() >= 0.85 * w[1].as_secs_f64()),
        "{delays:?}"
    );
    assert!(delays[0] >= delays[delays.len() - 1] * 3, "{delays:?}");
    assert_eq!(
        pdns.query("mail.example.test.", "A").await,
        Vec::<String>::new()
    );

    set_secret(&host, pdns.api_key()).await;
    served(&pdns, "mail", &["192.0.2.25"]).await;
    ready_is(&host, "mail", "True", "InSync").await;
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn powerdns_stopped_is_reported_unreachable_and_every_record_arrives_when_it_returns() {
    // A reconcile budget shorter than the outage: the time the requests
    // wait is not charged to it, or every probe after the outage would
    // end before it starts, and nothing would recover.
    let budget = Duration::from_secs(3);
    let (host, mut pdns) = setup_with(
        None,
        setpoint::egress::EgressConfig {
            reconcile_budget: budget,
            ..Default::default()
        },
    )
    .await;
    let api = host.host.api();
    let kind = records_kind(&host);
    api.create(&kind, dns_record(&pdns, "a0", &["192.0.2.100"], 300))
        .await
        .unwrap();
    served(&pdns, "a0", &["192.0.2.100"]).await;
    ready_is(&host, "a0", "True", "InSync").await;

    pdns.stop().await;
    // Changes made while PowerDNS is away: one update, five new records.
    api.merge_patch(
        &kind,
        Some("default"),
        "a0",
        &json!({"spec": {"records": ["192.0.2.200"]}}),
        false,
    )
    .await
    .unwrap();
    for i in 1..=5 {
        let address = format!("192.0.2.{i}");
        api.create(&kind, dns_record(&pdns, &format!("a{i}"), &[&address], 300))
            .await
            .unwrap();
    }
    let object = ready_is(&host, "a3", "False", "Unreachable").await;
    assert!(
        ready(&object)["message"]
            .as_str()
            .unwrap()
            .contains("no answer from PowerDNS"),
        "{object}"
    );
    ready_is(&host, "a0", "False", "Unreachable").await;
    // Longer than the budget, with the changes waiting.
    tokio::time::sleep(budget * 2).await;

    pdns.resume().await;
    let back = std::time::Instant::now();
    // The failures opened the host's circuit breaker for PowerDNS: the
    // requests made since wait in the plugin's queue, and a probe goes
    // every second; the first one answered lets them all go, so the held
    // changes follow PowerDNS's return within seconds, not after a fixed
    // breaker period or the records' backoff.
    let recovery = Duration::from_secs(10);
    served_within(&pdns, "a0", &["192.0.2.200"], recovery).await;
    for i in 1..=5 {
        let (name, address) = (format!("a{i}"), format!("192.0.2.{i}"));
        served_within(&pdns, &name, &[&address], recovery).await;
        ready_is(&host, &name, "True", "InSync").await;
    }
    assert!(
        back.elapsed() < recovery,
        "every held change arrived within {recovery:?} of PowerDNS's return: {:?}",
        back.elapsed()
    );
    host.stop().await;
}

/// A record of zone `example.test.` named `r{i}`, resynced every 30 s
/// (the default), for the tests with many records.
fn many_record(pdns: &PowerDns, i: usize) -> Value {
    let mut record = dns_record(pdns, &format!("r{i}"), &[&address(i)], 300);
    record["spec"]["resyncSeconds"] = json!(30);
    record
}

fn address(i: usize) -> String {
    format!("198.51.{}.{}", i / 250, i % 250 + 1)
}

/// How many of `r0`..`r{n-1}` the zone serves as [`many_record`] wants,
/// read through PowerDNS's API (one read, not `n` DNS queries).
async fn served_count(pdns: &PowerDns, n: usize) -> usize {
    let rrsets = pdns.rrsets(ZONE).await;
    (0..n)
        .filter(|i| {
            let name = format!("r{i}.example.test.");
            rrsets.iter().any(|r| {
                r["name"] == name.as_str()
                    && r["type"] == "A"
                    && r["records"][0]["content"] == address(*i).as_str()
            })
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_records_in_one_zone_are_all_served_under_the_default_limits() {
    let (host, pdns) = setup(None).await;
    let api = host.host.api();
    let kind = records_kind(&host);
    const N: usize = 300;
    for i in 0..N {
        api.create(&kind, many_record(&pdns, i)).await.unwrap();
    }
    // 300 writes at the default 20 a second take 15 s; the zone reads
    // are shared. Before the fair queue this never converged: each try
    // spent a token on a read, then had its write refused and started
    // over.
    eventually("300 records served", Duration::from_secs(120), || async {
        match served_count(&pdns, N).await {
            N => Ok(()),
            n => Err(format!("{n} of {N}")),
        }
    })
    .await;
    for i in [0, 149, 299] {
        served(&pdns, &format!("r{i}"), &[&address(i)]).await;
    }
    for i in 0..N {
        ready_is(&host, &format!("r{i}"), "True", "InSync").await;
    }
    // No spinning: about four plugin calls per record (read, write; read,
    // in sync) and one write and a fraction of a read sent per record.
    let calls = host
        .host
        .runtime()
        .plugin_call_stats()
        .into_iter()
        .find(|s| s.plugin == "dns")
        .expect("dns was called")
        .duration
        .count;
    assert!(calls <= 5 * N as u64, "{calls} calls for {N} records");
    let metrics = host.host.egress().metrics().render();
    let sent: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("setpoint_effects_requests_total{plugin=\"dns\""))
        .filter(|l| !l.contains("class=\"refused\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert!(
        sent <= 2 * N as u64,
        "{sent} requests sent for {N} records: {metrics}"
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_on_another_server_and_a_deletion_go_through_while_a_busy_server_queue_waits() {
    let (host, pdns) = setup(None).await;
    let other = PowerDns::start().await;
    other.create_zone(ZONE).await;
    let api = host.host.api();
    let grants = api
        .kinds()
        .require("setpoint.dev/v1", "PluginGrant")
        .unwrap();
    // Two a second, and one zone per record (a zone's writes go out
    // together, one batch): the 40 records below, a read and a write
    // each, queue for about 40 s.
    api.merge_patch(
        &grants,
        None,
        "dns",
        &json!({"spec": {"destinations": [pdns.api_url(), other.api_url()],
                         "secrets": ["default/pdns-api/api-key", "default/other-api/api-key"],
                         "limits": {"rps": 2}}}),
        false,
    )
    .await
    .unwrap();
    let secrets = api.kinds().require("v1", "Secret").unwrap();
    api.create(
        &secrets,
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "other-api", "namespace": "default"},
            "stringData": {"api-key": other.api_key()}}),
    )
    .await
    .unwrap();
    let kind = records_kind(&host);
    api.create(&kind, many_record(&pdns, 1000)).await.unwrap();
    served(&pdns, "r1000", &[&address(1000)]).await;
    ready_is(&host, "r1000", "True", "InSync").await;
    const BUSY: usize = 40;
    for i in 0..BUSY {
        let zone = format!("busy{i}.test.");
        pdns.create_zone(&zone).await;
        let mut record = many_record(&pdns, i);
        record["spec"]["zone"] = json!(zone);
        api.create(&kind, record).await.unwrap();
    }
    let busy_served = || async {
        let mut n = 0;
        for i in 0..BUSY {
            let name = format!("r{i}.busy{i}.test.");
            if pdns
                .rrset(&format!("busy{i}.test."), &name, "A")
                .await
                .is_some()
            {
                n += 1;
            }
        }
        n
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        busy_served().await < BUSY / 2,
        "the busy queue is still waiting"
    );

    // Another server's record does not wait behind the busy one.
    let started = std::time::Instant::now();
    let mut elsewhere = dns_record(&other, "elsewhere", &["192.0.2.77"], 300);
    elsewhere["spec"]["server"]["apiKeySecretRef"]["name"] = json!("other-api");
    api.create(&kind, elsewhere).await.unwrap();
    eventually("elsewhere served", Duration::from_secs(10), || async {
        match other.query("elsewhere.example.test.", "A").await.as_slice() {
            [one] if one == "192.0.2.77" => Ok(()),
            got => Err(format!("{got:?}")),
        }
    })
    .await;
    let elsewhere_took = started.elapsed();

    // Nor does the deletion of a record on the busy server: it goes first.
    let started = std::time::Instant::now();
    api.delete(&kind, Some("default"), "r1000", &Default::default())
        .await
        .unwrap();
    eventually(
        "r1000 gone from PowerDNS",
        Duration::from_secs(10),
        || async {
            match pdns.rrset(ZONE, "r1000.example.test.", "A").await {
                None => Ok(()),
                Some(r) => Err(r.to_string()),
            }
        },
    )
    .await;
    eventually("r1000's object gone", Duration::from_secs(10), || async {
        match get_record(&host, "r1000").await {
            None => Ok(()),
            Some(o) => Err(o["metadata"].to_string()),
        }
    })
    .await;
    let deletion_took = started.elapsed();

    // And a record whose own reconcile is waiting in the busy queue: its
    // deletion ends that wait (the request was decided before it) and
    // goes first.
    let last = BUSY - 1;
    let name = format!("r{last}");
    assert!(
        pdns.rrset(
            &format!("busy{last}.test."),
            &format!("r{last}.busy{last}.test."),
            "A"
        )
        .await
        .is_none(),
        "the last busy record still waits for its turn"
    );
    let started = std::time::Instant::now();
    api.delete(&kind, Some("default"), &name, &Default::default())
        .await
        .unwrap();
    eventually(
        "the waiting record's object gone",
        Duration::from_secs(10),
        || async {
            match get_record(&host, &name).await {
                None => Ok(()),
                Some(o) => Err(o["status"].to_string()),
            }
        },
    )
    .await;
    let waiting_deletion_took = started.elapsed();
    let waiting = BUSY - busy_served().await;
    assert!(
        waiting > 0,
        "measured while the busy queue still waits (other server {elsewhere_took:?}, deletion {deletion_took:?})"
    );
    assert!(
        elsewhere_took < Duration::from_secs(5)
            && deletion_took < Duration::from_secs(5)
            && waiting_deletion_took < Duration::from_secs(5),
        "other server {elsewhere_took:?}, deletion {deletion_took:?}, \
         deletion of a waiting record {waiting_deletion_took:?}, {waiting} still waiting"
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_naming_a_server_outside_the_grant_is_reported_and_nothing_is_sent() {
    let (host, pdns) = setup(None).await;
    let elsewhere = crate::support::recorder::Recorder::echo().await;
    let mut record = dns_record(&pdns, "elsewhere", &["192.0.2.50"], 300);
    record["spec"]["server"]["url"] = json!(elsewhere.url());
    host.host
        .api()
        .create(&records_kind(&host), record)
        .await
        .unwrap();
    let object = ready_is(&host, "elsewhere", "False", "NotGranted").await;
    let message = ready(&object)["message"].as_str().unwrap().to_owned();
    assert!(message.contains("did not send"), "{message}");
    assert_eq!(
        elsewhere.connections(),
        0,
        "nothing reached the other server"
    );
    assert_eq!(
        pdns.query("elsewhere.example.test.", "A").await,
        Vec::<String>::new()
    );
    host.stop().await;
}

/// Issue #20: a record change planned, then made. The plan's reads are
/// real (the zone as it is), its write is listed and not sent, and the
/// change made for real sends exactly the write the plan listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_record_change_lists_the_write_the_real_change_then_sends() {
    let (host, pdns) = setup(None).await;
    let api = host.host.api();
    let kind = records_kind(&host);
    api.create(&kind, dns_record(&pdns, "www", &["192.0.2.1"], 120))
        .await
        .unwrap();
    served(&pdns, "www", &["192.0.2.1"]).await;
    ready_is(&host, "www", "True", "InSync").await;
    let recent = "DnsRecord/default/www";
    let writes_sent = || {
        host.host
            .egress()
            .metrics()
            .recent(recent)
            .into_iter()
            .filter(|r| r.role == "effect")
            .map(|r| (r.method, r.url))
            .collect::<Vec<_>>()
    };
    let sent_before = writes_sent();

    let plan = host
        .host
        .plan(setpoint::plan::Request::Apply(vec![
            setpoint::plan::Document {
                origin: "www.yaml".into(),
                object: dns_record(&pdns, "www", &["192.0.2.9"], 120),
            },
        ]))
        .await
        .unwrap();
    assert!(plan.errors.is_empty(), "{:#?}", plan.errors);
    assert_eq!(plan.writes.len(), 1, "{:#?}", plan.writes);
    let write = &plan.writes[0];
    assert_eq!(write.plugin, "dns");
    assert!(
        write
            .body
            .as_deref()
            .is_some_and(|b| b.contains("192.0.2.9")),
        "the new contents: {write:?}"
    );
    assert!(
        !write.body.as_deref().unwrap_or("").contains(pdns.api_key()),
        "the key is a reference, never a value"
    );
    assert!(
        plan.observations
            .iter()
            .any(|o| o.method == "GET" && o.result.as_deref() == Some("200")),
        "the zone was read as the real reconcile reads it: {:#?}",
        plan.observations
    );
    assert!(
        plan.pending.iter().any(|p| p.reason.contains("outcome")),
        "{:#?}",
        plan.pending
    );
    // Nothing was sent: PowerDNS still serves the old address.
    assert_eq!(writes_sent(), sent_before);
    assert_eq!(pdns.query("www.example.test.", "A").await, ["192.0.2.1"]);

    api.merge_patch(
        &kind,
        Some("default"),
        "www",
        &json!({"spec": {"records": ["192.0.2.9"]}}),
        false,
    )
    .await
    .unwrap();
    served(&pdns, "www", &["192.0.2.9"]).await;
    ready_is(&host, "www", "True", "InSync").await;
    let sent = writes_sent();
    assert_eq!(
        sent[sent_before.len()..],
        [(write.method.clone(), write.url.clone())],
        "the real change sent the planned write, and nothing else"
    );

    // A planned deletion: the finalizer's external delete, listed; the
    // plugin lets the object go once it sees the delete's outcome, which
    // only the real world gives (pending). Made for real, the same delete
    // is sent.
    let plan = host
        .host
        .plan(setpoint::plan::Request::Delete(
            setpoint::plan::DeleteTarget {
                api_version: "dns.setpoint.dev/v1".into(),
                kind: "DnsRecord".into(),
                namespace: Some("default".into()),
                name: "www".into(),
                propagation_policy: None,
            },
        ))
        .await
        .unwrap();
    assert!(plan.errors.is_empty(), "{:#?}", plan.errors);
    assert_eq!(plan.writes.len(), 1, "{:#?}", plan.writes);
    let delete = &plan.writes[0];
    assert!(
        delete.body.as_deref().is_some_and(|b| b.contains("DELETE")),
        "the rrset is deleted: {delete:?}"
    );
    assert!(
        plan.pending
            .iter()
            .any(|p| p.reason.contains("outcome of 1 external write")),
        "the finalizer's removal waits for the delete's outcome: {:#?}",
        plan.pending
    );
    assert_eq!(
        plan.changes_of("DnsRecord", setpoint::plan::Action::Deleting)
            .len(),
        1,
        "the object waits for its finalizer: {:#?}",
        plan.changes
    );
    assert_eq!(pdns.query("www.example.test.", "A").await, ["192.0.2.9"]);
    let sent_before = writes_sent();
    api.delete(&kind, Some("default"), "www", &Default::default())
        .await
        .unwrap();
    served(&pdns, "www", &[]).await;
    eventually("the record object goes", WAIT, || async {
        match get_record(&host, "www").await {
            None => Ok(()),
            Some(o) => Err(o["metadata"].to_string()),
        }
    })
    .await;
    assert_eq!(
        writes_sent()[sent_before.len()..],
        [(delete.method.clone(), delete.url.clone())]
    );
    host.stop().await;
}

/// POST `object` to `path` of a running `setpoint serve`, retrying while
/// its kinds are still being registered; panics on any other refusal.
async fn post(http: &reqwest::Client, url: &str, path: &str, object: &Value) {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let response = http
            .post(format!("{url}{path}"))
            .json(object)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        if status == 201 || status == 409 {
            return;
        }
        let text = response.text().await.unwrap_or_default();
        assert!(
            status == 404 && std::time::Instant::now() < deadline,
            "POST {path}: {status} {text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_record_converges_after_a_kill_9_of_the_host_in_the_middle_of_the_load() {
    use crate::support::{ServeProcess, plugins_dir};
    let pdns = PowerDns::start().await;
    const ZONES: usize = 4;
    const PER_ZONE: usize = 40;
    for z in 0..ZONES {
        pdns.create_zone(&format!("k{z}.test.")).await;
    }
    let plugins = plugins_dir(&["dns"]);
    let data = tempfile::tempdir().unwrap();
    let args = [
        std::ffi::OsStr::new("--data"),
        data.path().as_os_str(),
        "--plugins".as_ref(),
        plugins.path().as_os_str(),
    ];
    let serve = ServeProcess::start(args);
    let http = reqwest::Client::new();
    post(
        &http,
        &serve.url,
        "/api/v1/namespaces/default/secrets",
        &json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "pdns-api", "namespace": "default"},
            "stringData": {"api-key": pdns.api_key()}}),
    )
    .await;
    // Slow enough that the load is still in flight when the host dies.
    post(
        &http,
        &serve.url,
        "/apis/setpoint.dev/v1/plugingrants",
        &json!({"apiVersion": "setpoint.dev/v1", "kind": "PluginGrant", "metadata": {"name": "dns"},
               "spec": {"destinations": [pdns.api_url()], "secrets": ["default/pdns-api/api-key"],
                        "limits": {"rps": 3}}}),
    )
    .await;
    let record = |z: usize, i: usize| {
        json!({"apiVersion": "dns.setpoint.dev/v1", "kind": "DnsRecord",
            "metadata": {"name": format!("k{z}-r{i}"), "namespace": "default"},
            "spec": {"zone": format!("k{z}.test"), "name": format!("r{i}"), "type": "A",
                     "records": [format!("203.0.113.{}", i + 1)],
                     "server": {"url": pdns.api_url(),
                                "apiKeySecretRef": {"name": "pdns-api", "key": "api-key"}}}})
    };
    let records = "/apis/dns.setpoint.dev/v1/namespaces/default/dnsrecords";
    for z in 0..ZONES {
        for i in 0..PER_ZONE {
            post(&http, &serve.url, records, &record(z, i)).await;
        }
    }
    // Some records were served already (zone k0 first), some are waiting
    // for their turn, some are being written: the worst moment is any.
    tokio::time::sleep(Duration::from_millis(fastrand::u64(200..1500))).await;
    let served_before = pdns.rrsets("k3.test.").await.len();
    let mut at_kill = 0;
    for z in 0..ZONES {
        at_kill += pdns.rrsets(&format!("k{z}.test.")).await.len() - 1;
    }
    serve.kill9();
    eprintln!(
        "{at_kill} of {} records served when the host was killed",
        ZONES * PER_ZONE
    );

    let serve = ServeProcess::start(args);
    let want = |z: usize| -> Vec<(String, String)> {
        (0..PER_ZONE)
            .map(|i| (format!("r{i}.k{z}.test."), format!("203.0.113.{}", i + 1)))
            .collect()
    };
    eventually(
        "every record served after the restart",
        Duration::from_secs(90),
        || async {
            let mut missing = 0;
            for z in 0..ZONES {
                let rrsets = pdns.rrsets(&format!("k{z}.test.")).await;
                missing += want(z)
                    .iter()
                    .filter(|(name, address)| {
                        !rrsets.iter().any(|r| {
                            r["name"] == name.as_str()
                                && r["records"][0]["content"] == address.as_str()
                        })
                    })
                    .count();
            }
            if missing == 0 {
                Ok(())
            } else {
                Err(format!("{missing} missing"))
            }
        },
    )
    .await;
    // And the objects say so.
    eventually("every object Ready", WAIT, || async {
        let list: Value = http
            .get(format!("{}{records}", serve.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let items = list["items"].as_array().cloned().unwrap_or_default();
        let not_ready = items
            .iter()
            .filter(|o| ready(o)["reason"] != "InSync")
            .count();
        if items.len() == ZONES * PER_ZONE && not_ready == 0 {
            Ok(())
        } else {
            Err(format!("{} objects, {not_ready} not in sync", items.len()))
        }
    })
    .await;
    assert!(
        served_before <= pdns.rrsets("k3.test.").await.len(),
        "nothing served was lost"
    );
}

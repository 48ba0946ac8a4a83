//! The DNS provider against a real PowerDNS (`support::pdns`): the harness
//! itself, then `plugins/dns` reconciling `DnsRecord`s.

use serde_json::json;

use crate::support::pdns::PowerDns;

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

//! The provider's decisions as pure functions, with no host in sight: a
//! `DnsRecord`'s spec becomes a [`Target`] (the zone URL, the record's full
//! name, its normalised contents) and the HTTP requests that read and write
//! it; PowerDNS's answers become an observed [`Rrset`] or a [`Failure`]; and
//! [`decide`] picks the [`Step`] from what is wanted, what was seen and how
//! the last write went.
//!
//! PowerDNS's API: `GET /api/v1/servers/{id}/zones/{zone}` answers the zone
//! with its `rrsets` (`name`, `type`, `ttl`, `records: [{content,
//! disabled}]`); `PATCH` of the same URL with `{"rrsets": [{..., "changetype":
//! "REPLACE" | "DELETE"}]}` changes one RRset and answers 204. The key goes
//! in `X-API-Key`; a wrong one is a 401.

use std::net::{Ipv4Addr, Ipv6Addr};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use setpoint_plugin_sdk::serde_json::{Value, json};
use setpoint_plugin_sdk::{HttpErrorKind, HttpRequest, HttpResult, SecretKeyRef};

/// The id of the zone read, as the host matches its answer.
pub const READ_ID: &str = "zone";
/// The id of the RRset write, as the next reconcile finds its outcome.
pub const WRITE_ID: &str = "rrset";

/// One RRset (name and type) in a PowerDNS zone, kept as written here.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DnsRecordSpec {
    /// The zone, e.g. example.org (a trailing dot is optional). It must exist in PowerDNS.
    pub zone: String,
    /// The record's name: relative to the zone (www), @ for the zone's apex, or absolute with a trailing dot.
    pub name: String,
    /// The record type: A, AAAA, CNAME, TXT, MX, ...
    #[serde(rename = "type")]
    pub type_: String,
    /// Time to live in seconds.
    #[serde(default = "default_ttl")]
    #[schemars(range(max = 2147483647))]
    pub ttl: u32,
    /// The records' contents, in PowerDNS's presentation format (TXT quoted, names with a trailing dot).
    #[schemars(length(min = 1))]
    pub records: Vec<String>,
    /// How often PowerDNS is looked at again to repair changes made behind the object's back.
    #[serde(default = "default_resync")]
    #[schemars(range(min = 1))]
    pub resync_seconds: u64,
    /// Which PowerDNS, and the key to use.
    pub server: ServerRef,
}

fn default_ttl() -> u32 {
    300
}

fn default_resync() -> u64 {
    30
}

/// A PowerDNS API server.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerRef {
    /// The PowerDNS web server, e.g. http://127.0.0.1:8081 (granted to the plugin by a PluginGrant).
    pub url: String,
    /// The server id in the API's paths.
    #[serde(default = "default_server_id")]
    pub server_id: String,
    /// The Secret (in the object's namespace) and key holding the API key, sent as X-API-Key by the host.
    pub api_key_secret_ref: SecretKeySelector,
}

fn default_server_id() -> String {
    "localhost".into()
}

/// A key of a Secret in the object's namespace.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
pub struct SecretKeySelector {
    /// The Secret's name.
    pub name: String,
    /// The key in its data.
    pub key: String,
}

/// One RRset as PowerDNS serves it: its TTL and enabled contents, sorted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rrset {
    /// Time to live, seconds.
    pub ttl: u32,
    /// Contents of the enabled records, normalised and sorted.
    pub records: Vec<String>,
}

/// A zone as PowerDNS's API answers it, the fields the provider reads,
/// borrowed from the answer's text where it has no escapes.
#[derive(Deserialize)]
struct ZoneView<'a> {
    #[serde(borrow, default)]
    rrsets: Vec<RrsetView<'a>>,
}

#[derive(Deserialize)]
struct RrsetView<'a> {
    #[serde(borrow)]
    name: std::borrow::Cow<'a, str>,
    #[serde(rename = "type", borrow)]
    rtype: std::borrow::Cow<'a, str>,
    #[serde(default)]
    ttl: u64,
    #[serde(borrow, default)]
    records: Vec<RecordView<'a>>,
}

#[derive(Deserialize)]
struct RecordView<'a> {
    #[serde(borrow)]
    content: std::borrow::Cow<'a, str>,
    #[serde(default)]
    disabled: bool,
}

/// What the spec means, checked: every request is built from this.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    /// `{url}/api/v1/servers/{id}/zones/{zone}`.
    pub zone_url: String,
    /// The zone, lower case, with its trailing dot.
    pub zone: String,
    /// The record's name, absolute, lower case, with its trailing dot.
    pub fqdn: String,
    /// The type, upper case.
    pub rtype: String,
    /// What should be served.
    pub wanted: Rrset,
    /// The API key's Secret and key.
    pub key: SecretKeyRef,
    /// Seconds between looks at PowerDNS.
    pub resync_seconds: u64,
}

/// Why the provider cannot get the record where it should be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The spec cannot be turned into a record.
    InvalidSpec(String),
    /// PowerDNS refused the API key (401, 403).
    Unauthorized(String),
    /// The zone does not exist in PowerDNS.
    ZoneNotFound(String),
    /// No answer (down, timed out, throttled) or a server error (5xx).
    Unreachable(String),
    /// The host did not send the request: not granted (or not allowed).
    NotGranted(String),
    /// PowerDNS refused the write (4xx): the contents are not acceptable.
    Rejected(String),
    /// A write PowerDNS accepted did not make it serve what is wanted (it
    /// stores the contents in another form, say).
    NotConverging(String),
}

impl Failure {
    /// The `Ready` condition's reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Failure::InvalidSpec(_) => "InvalidSpec",
            Failure::Unauthorized(_) => "Unauthorized",
            Failure::ZoneNotFound(_) => "ZoneNotFound",
            Failure::Unreachable(_) => "Unreachable",
            Failure::NotGranted(_) => "NotGranted",
            Failure::Rejected(_) => "Rejected",
            Failure::NotConverging(_) => "NotConverging",
        }
    }

    /// The condition's message.
    pub fn message(&self) -> &str {
        match self {
            Failure::InvalidSpec(m)
            | Failure::Unauthorized(m)
            | Failure::ZoneNotFound(m)
            | Failure::Unreachable(m)
            | Failure::NotGranted(m)
            | Failure::Rejected(m)
            | Failure::NotConverging(m) => m,
        }
    }

    /// Whether trying again soon may help without anyone changing the
    /// object: then the host's backoff paces the retries. The others wait
    /// for the object (or the resync period).
    pub fn retry_with_backoff(&self) -> bool {
        matches!(
            self,
            Failure::Unauthorized(_)
                | Failure::ZoneNotFound(_)
                | Failure::Unreachable(_)
                | Failure::NotGranted(_)
        )
    }

    /// Whether no further write should be sent for this generation until
    /// the resync period has passed.
    pub fn holds_writes(&self) -> bool {
        matches!(self, Failure::Rejected(_) | Failure::NotConverging(_))
    }
}

fn valid_name_chars(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '*'))
        && !name.contains("..")
}

/// The contents as PowerDNS shows them, so that equal sets compare equal:
/// addresses in their canonical form, names in lower case; `TXT`-like
/// contents as they are.
pub fn normalise(rtype: &str, content: &str) -> String {
    let content = content.trim();
    match rtype {
        "A" => content
            .parse::<Ipv4Addr>()
            .map_or_else(|_| content.to_owned(), |ip| ip.to_string()),
        "AAAA" => content
            .parse::<Ipv6Addr>()
            .map_or_else(|_| content.to_owned(), |ip| ip.to_string()),
        "TXT" | "SPF" => content.to_owned(),
        _ => content.to_ascii_lowercase(),
    }
}

impl Target {
    /// Check the spec and work out the record it names.
    pub fn from_spec(spec: &DnsRecordSpec) -> Result<Self, Failure> {
        let invalid = |m: String| Failure::InvalidSpec(m);
        let mut zone = spec.zone.trim().to_ascii_lowercase();
        if !zone.ends_with('.') {
            zone.push('.');
        }
        if !valid_name_chars(zone.trim_end_matches('.')) || zone.contains('*') {
            return Err(invalid(format!(
                "spec.zone {:?} is not a zone name",
                spec.zone
            )));
        }
        let name = spec.name.trim().to_ascii_lowercase();
        let fqdn = if name.is_empty() || name == "@" {
            zone.clone()
        } else if name.ends_with('.') {
            name
        } else {
            format!("{name}.{zone}")
        };
        if !valid_name_chars(fqdn.trim_end_matches('.'))
            || !(fqdn == zone || fqdn.ends_with(&format!(".{zone}")))
        {
            return Err(invalid(format!(
                "spec.name {:?} is not a name in zone {zone}",
                spec.name
            )));
        }
        let rtype = spec.type_.trim().to_ascii_uppercase();
        if rtype.is_empty() || !rtype.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(invalid(format!(
                "spec.type {:?} is not a record type",
                spec.type_
            )));
        }
        if spec.records.is_empty() {
            return Err(invalid(
                "spec.records is empty (delete the DnsRecord to remove the record)".into(),
            ));
        }
        let mut records: Vec<String> = spec.records.iter().map(|c| normalise(&rtype, c)).collect();
        records.sort();
        records.dedup();
        let base = spec.server.url.trim().trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(invalid(format!(
                "spec.server.url {:?} is not an http:// or https:// URL",
                spec.server.url
            )));
        }
        let server_id = spec.server.server_id.trim();
        if server_id.is_empty() || server_id.contains(['/', '?', '#']) {
            return Err(invalid(format!(
                "spec.server.serverId {server_id:?} is not a server id"
            )));
        }
        let secret = &spec.server.api_key_secret_ref;
        Ok(Self {
            zone_url: format!("{base}/api/v1/servers/{server_id}/zones/{zone}"),
            zone,
            fqdn,
            rtype,
            wanted: Rrset {
                ttl: spec.ttl,
                records,
            },
            key: SecretKeyRef::new(&secret.name, &secret.key),
            resync_seconds: spec.resync_seconds.max(1),
        })
    }

    /// The record as `name TYPE`, for messages.
    pub fn describe(&self) -> String {
        format!("{} {}", self.fqdn, self.rtype)
    }

    /// Read the zone.
    ///
    /// Every record of the zone reads the same URL with the same key, so
    /// the host shares one read among them: an answer up to half the
    /// resync period old is good enough for a look that happens once per
    /// period (drift is repaired within one and a half periods), and
    /// PowerDNS sees about two zone reads per period however many records
    /// the zone holds. A record's own write ends that freshness, so the
    /// look after it sees what it did.
    pub fn read(&self) -> HttpRequest {
        HttpRequest::get(&self.zone_url)
            .id(READ_ID)
            .header("Accept", "application/json")
            .max_age(std::time::Duration::from_secs(self.resync_seconds / 2))
            .secret_header("X-API-Key", "{}", self.key.clone())
    }

    /// A `PATCH` of one RRset, batchable: the host may send the writes
    /// of many records of the zone waiting at the same time as one `PATCH`
    /// (PowerDNS applies it atomically, and writes one at a time).
    fn patch(&self, rrset: Value) -> HttpRequest {
        HttpRequest::patch(&self.zone_url)
            .id(WRITE_ID)
            .secret_header("X-API-Key", "{}", self.key.clone())
            .json(&json!({ "rrsets": [rrset] }))
            .batch("/rrsets")
    }

    /// Make PowerDNS serve exactly the wanted RRset.
    pub fn replace(&self) -> HttpRequest {
        let records: Vec<Value> = self
            .wanted
            .records
            .iter()
            .map(|c| json!({"content": c, "disabled": false}))
            .collect();
        self.patch(
            json!({"name": self.fqdn, "type": self.rtype, "ttl": self.wanted.ttl,
                          "changetype": "REPLACE", "records": records}),
        )
    }

    /// Remove the RRset.
    pub fn delete(&self) -> HttpRequest {
        self.patch(json!({"name": self.fqdn, "type": self.rtype, "changetype": "DELETE"}))
    }

    /// The RRset of this name and type in a zone as the API returns it
    /// (its JSON text), if it has enabled records. The zone is read into
    /// borrowed views of the fields used, not a whole JSON tree: every
    /// record of a zone reads the same zone, so this is most of a
    /// reconcile's work in a large zone (BENCHMARKS.md, "Effects at scale").
    pub fn find(&self, zone: &[u8]) -> Result<Option<Rrset>, String> {
        let zone: ZoneView<'_> =
            setpoint_plugin_sdk::serde_json::from_slice(zone).map_err(|e| e.to_string())?;
        let Some(rrset) = zone.rrsets.iter().find(|r| {
            r.name.eq_ignore_ascii_case(&self.fqdn) && r.rtype.eq_ignore_ascii_case(&self.rtype)
        }) else {
            return Ok(None);
        };
        let mut records: Vec<String> = rrset
            .records
            .iter()
            .filter(|r| !r.disabled)
            .map(|r| normalise(&self.rtype, &r.content))
            .collect();
        if records.is_empty() {
            return Ok(None);
        }
        records.sort();
        let ttl = u32::try_from(rrset.ttl).unwrap_or_default();
        Ok(Some(Rrset { ttl, records }))
    }

    /// What the zone read tells: the RRset served (or none), or why
    /// nothing could be seen.
    pub fn observe(&self, answer: &HttpResult) -> Result<Option<Rrset>, Failure> {
        let response = answer
            .as_ref()
            .map_err(|e| self.unanswered(e.kind, &e.message))?;
        match response.status {
            200..=299 => self.find(&response.body).map_err(|e| {
                Failure::Unreachable(format!(
                    "PowerDNS answered the zone read with something else than a zone: {e}"
                ))
            }),
            404 | 422 => Err(Failure::ZoneNotFound(format!(
                "zone {} does not exist in PowerDNS ({})",
                self.zone,
                http_summary(response.status, &response.text())
            ))),
            status => Err(self.refused_by_server(status, &response.text())),
        }
    }

    /// What the outcome of the previous write tells.
    pub fn written(&self, outcome: &HttpResult) -> Result<(), Failure> {
        let response = outcome
            .as_ref()
            .map_err(|e| self.unanswered(e.kind, &e.message))?;
        match response.status {
            200..=299 => Ok(()),
            400 | 404 | 422 => Err(Failure::Rejected(format!(
                "PowerDNS refused to write {}: {}",
                self.describe(),
                http_summary(response.status, &response.text())
            ))),
            status => Err(self.refused_by_server(status, &response.text())),
        }
    }

    fn refused_by_server(&self, status: u16, body: &str) -> Failure {
        match status {
            401 | 403 => Failure::Unauthorized(format!(
                "PowerDNS refused the API key from Secret {}/{} ({})",
                self.key.name,
                self.key.key,
                http_summary(status, body)
            )),
            _ => Failure::Unreachable(format!("PowerDNS answered {}", http_summary(status, body))),
        }
    }

    fn unanswered(&self, kind: HttpErrorKind, message: &str) -> Failure {
        match kind {
            HttpErrorKind::Refused => Failure::NotGranted(format!(
                "the host did not send the request to PowerDNS: {message}"
            )),
            // The host's hold changes with every look (its time left):
            // not part of the message, which must stay the same while the
            // failure does.
            HttpErrorKind::Throttled => Failure::Unreachable(
                "no answer from PowerDNS (throttled): the host holds requests to it for now \
                 (a rate limit, or its circuit breaker after failures)"
                    .into(),
            ),
            _ => Failure::Unreachable(format!(
                "no answer from PowerDNS ({}): {message}",
                kind.as_str()
            )),
        }
    }
}

/// `HTTP 401 (Unauthorized)`: the status and the start of the body.
fn http_summary(status: u16, body: &str) -> String {
    let body = body.trim();
    if body.is_empty() {
        return format!("HTTP {status}");
    }
    let mut cut = body.len().min(160);
    while !body.is_char_boundary(cut) {
        cut -= 1;
    }
    let ellipsis = if cut < body.len() { "…" } else { "" };
    format!("HTTP {status}: {}{ellipsis}", &body[..cut])
}

/// What the reconcile does.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// PowerDNS serves what is wanted.
    InSync(Rrset),
    /// Send the REPLACE; `observed` is what is served now.
    Write(Option<Rrset>),
    /// Being deleted and the record is still there: send the DELETE.
    Delete(Rrset),
    /// Being deleted and the record is gone: let the object go.
    Release,
    /// Report the failure; `observed` is what was last seen.
    Fail(Failure, Option<Rrset>),
}

/// What the previous reconcile left that [`decide`] must know.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Memory {
    /// The outcome of the previous reconcile's write, if it sent one.
    pub last_write: Option<Result<(), Failure>>,
    /// A failure that holds writes (rejected or not converging) reported
    /// for this generation, and still within the resync period.
    pub held: Option<Failure>,
}

/// Decide what to do from the target, whether the object is being
/// finalized, what the zone read showed and what the previous write did.
pub fn decide(
    target: &Target,
    finalizing: bool,
    observed: Result<Option<Rrset>, Failure>,
    memory: &Memory,
) -> Step {
    let observed = match observed {
        Ok(observed) => observed,
        // Deleting a record from a zone that no longer exists: done.
        Err(Failure::ZoneNotFound(_)) if finalizing => return Step::Release,
        Err(failure) => return Step::Fail(failure, None),
    };
    if finalizing {
        return match (observed, &memory.last_write) {
            (None, _) => Step::Release,
            (Some(rrset), Some(Err(failure))) => Step::Fail(failure.clone(), Some(rrset)),
            (Some(rrset), _) => Step::Delete(rrset),
        };
    }
    if observed.as_ref() == Some(&target.wanted) {
        return Step::InSync(target.wanted.clone());
    }
    match &memory.last_write {
        Some(Err(failure)) => return Step::Fail(failure.clone(), observed),
        Some(Ok(())) => {
            return Step::Fail(
                Failure::NotConverging(format!(
                    "PowerDNS accepted the write of {} but serves {} instead of {}",
                    target.describe(),
                    show(observed.as_ref()),
                    show(Some(&target.wanted))
                )),
                observed,
            );
        }
        None => {}
    }
    if let Some(held) = &memory.held {
        return Step::Fail(held.clone(), observed);
    }
    Step::Write(observed)
}

/// An RRset for messages: `ttl 300: [192.0.2.1]`, or `nothing`.
pub fn show(rrset: Option<&Rrset>) -> String {
    match rrset {
        None => "nothing".into(),
        Some(r) => format!("ttl {}: [{}]", r.ttl, r.records.join(", ")),
    }
}

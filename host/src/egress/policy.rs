//! Who may talk to what: destination patterns (`scheme://host:port`), the
//! operator's grant (a `PluginGrant` object), the addresses that need an
//! explicit grant (loopback, private, link-local, metadata) and the headers
//! a plugin may not set. Pure functions; `egress` applies them.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde_json::Value;

/// The group and version of the grant kind.
pub const GRANT_API_VERSION: &str = "setpoint.dev/v1";
/// The grant kind: cluster-scoped, named after the plugin.
pub const GRANT_KIND: &str = "PluginGrant";

/// A `scheme://host:port` pattern. The host is a name, an IP address
/// (IPv6 in brackets), `*.suffix` for any name under `suffix`, or `*` for
/// any host; the port is a number, `*` for any, or left out for the
/// scheme's. A pattern whose host is not a wildcard names its host
/// explicitly, which loopback and private addresses require.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    /// `http` or `https`.
    pub scheme: String,
    /// The host, lower case, brackets removed; `*.example.com` for a wildcard.
    pub host: String,
    /// The port; 0 in a pattern for any port.
    pub port: u16,
}

/// Why a pattern or URL is not a destination.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadDestination(pub String);

impl Destination {
    /// Parse a pattern (`https://*.example.com:443`) or the start of a URL
    /// (`http://127.0.0.1:8081/api?x=1`: the path and query are ignored).
    pub fn parse(text: &str) -> Result<Self, BadDestination> {
        let bad = |why: &str| BadDestination(format!("{text:?}: {why}"));
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| bad("not scheme://host:port"))?;
        let scheme = scheme.to_ascii_lowercase();
        let default_port = match scheme.as_str() {
            "http" => 80,
            "https" => 443,
            _ => return Err(bad("only http and https are supported")),
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        if authority.contains('@') {
            return Err(bad("user information is not allowed in a destination"));
        }
        let (host, port) = if let Some(inner) = authority.strip_prefix('[') {
            let (host, after) = inner.split_once(']').ok_or_else(|| bad("unclosed ["))?;
            (host, after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let port = match port {
            Some("*") => 0,
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| bad("bad port"))?,
            None => default_port,
        };
        let host = host.to_ascii_lowercase();
        let valid = host
            .strip_prefix("*.")
            .unwrap_or(&host)
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '_'));
        if host != "*" && (!valid || host[1..].contains('*')) {
            return Err(bad(
                "bad host (a wildcard is allowed only as a leading `*.`)",
            ));
        }
        Ok(Self { scheme, host, port })
    }

    /// Whether the host is a wildcard (`*` or `*.suffix`).
    pub fn is_wildcard(&self) -> bool {
        self.host.starts_with('*')
    }

    /// Whether `self` (a pattern) covers `target` (a concrete destination).
    pub fn covers(&self, target: &Destination) -> bool {
        if self.scheme != target.scheme || (self.port != 0 && self.port != target.port) {
            return false;
        }
        if self.host == "*" {
            return true;
        }
        match self.host.strip_prefix("*.") {
            Some(suffix) => target
                .host
                .strip_suffix(suffix)
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            None => self.host == target.host,
        }
    }

    /// The host as an IP address, if it is one.
    pub fn ip(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }
}

impl std::fmt::Display for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let port = match self.port {
            0 => "*".to_owned(),
            p => p.to_string(),
        };
        if self.host.contains(':') {
            write!(f, "{}://[{}]:{port}", self.scheme, self.host)
        } else {
            write!(f, "{}://{}:{port}", self.scheme, self.host)
        }
    }
}

/// A `namespace/name[/key]` pattern of granted secrets; `*` matches any one
/// part. In a manifest the namespace is left out (`name[/key]`): the
/// reconciled object's namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretPattern {
    namespace: Option<String>,
    name: String,
    key: Option<String>,
}

impl SecretPattern {
    /// A grant's pattern: `namespace/name` or `namespace/name/key`.
    pub fn parse_granted(text: &str) -> Result<Self, BadDestination> {
        let parts: Vec<&str> = text.split('/').collect();
        match parts.as_slice() {
            [ns, name] => Ok(Self::new(Some(ns), name, None)),
            [ns, name, key] => Ok(Self::new(Some(ns), name, Some(key))),
            _ => Err(BadDestination(format!(
                "secret {text:?}: not namespace/name or namespace/name/key"
            ))),
        }
    }

    /// A manifest's pattern: `name` or `name/key`.
    pub fn parse_declared(text: &str) -> Result<Self, BadDestination> {
        let parts: Vec<&str> = text.split('/').collect();
        match parts.as_slice() {
            [name] => Ok(Self::new(None, name, None)),
            [name, key] => Ok(Self::new(None, name, Some(key))),
            _ => Err(BadDestination(format!(
                "secret {text:?}: not name or name/key"
            ))),
        }
    }

    fn new(namespace: Option<&str>, name: &str, key: Option<&str>) -> Self {
        Self {
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
            key: key.map(str::to_owned),
        }
    }

    /// Whether the pattern covers key `key` of Secret `name` in at least
    /// one namespace (for what a manifest declares, which names none).
    pub fn covers_in_some_namespace(&self, name: &str, key: &str) -> bool {
        let part = |pattern: &str, value: &str| pattern == "*" || pattern == value;
        part(&self.name, name) && self.key.as_deref().is_none_or(|k| part(k, key))
    }

    /// Whether the pattern covers key `key` of Secret `namespace/name`.
    pub fn covers(&self, namespace: &str, name: &str, key: &str) -> bool {
        let part = |pattern: &str, value: &str| pattern == "*" || pattern == value;
        self.namespace
            .as_deref()
            .is_none_or(|ns| part(ns, namespace))
            && part(&self.name, name)
            && self.key.as_deref().is_none_or(|k| part(k, key))
    }
}

/// Optional limits a grant sets (else the host's defaults).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GrantLimits {
    /// Requests per second, per plugin.
    pub rps: Option<f64>,
    /// Requests in flight at once, per plugin.
    pub concurrency: Option<usize>,
    /// Children one object may have (a response asking for more is
    /// refused); the host's default (1,000) when unset.
    pub children: Option<usize>,
    /// Cores' worth of reconcile call time a second the plugin may spend;
    /// the host's default (half a core) when unset
    /// (`controller::PaceLimits`).
    pub cpu: Option<f64>,
    /// MiB of objects its responses may have the store write a second;
    /// the host's default (4) when unset.
    pub write_mib_per_second: Option<f64>,
    /// Events its responses may record per object at once (and an hour);
    /// the host's default (500) when unset.
    pub events: Option<f64>,
}

/// An operator's grant to one plugin, read from its `PluginGrant` object.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Grant {
    /// Granted destination patterns.
    pub destinations: Vec<Destination>,
    /// Granted secret patterns.
    pub secrets: Vec<SecretPattern>,
    /// Limits, if set.
    pub limits: GrantLimits,
}

impl Grant {
    /// The grant a `PluginGrant` object's `spec` states; an entry that does
    /// not parse is an error naming it (a grant is either read whole or not
    /// at all).
    pub fn from_object(object: &Value) -> Result<Self, BadDestination> {
        let spec = &object["spec"];
        let strings = |field: &str| -> Result<Vec<String>, BadDestination> {
            match &spec[field] {
                Value::Null => Ok(Vec::new()),
                Value::Array(items) => items
                    .iter()
                    .map(|i| {
                        i.as_str().map(str::to_owned).ok_or_else(|| {
                            BadDestination(format!("spec.{field}: entries must be strings"))
                        })
                    })
                    .collect(),
                _ => Err(BadDestination(format!("spec.{field} must be a list"))),
            }
        };
        let destinations = strings("destinations")?
            .iter()
            .map(|d| Destination::parse(d))
            .collect::<Result<_, _>>()?;
        let secrets = strings("secrets")?
            .iter()
            .map(|s| SecretPattern::parse_granted(s))
            .collect::<Result<_, _>>()?;
        let limits = GrantLimits {
            rps: spec["limits"]["rps"].as_f64().filter(|r| *r > 0.0),
            concurrency: spec["limits"]["concurrency"]
                .as_u64()
                .filter(|c| *c > 0)
                .map(|c| c as usize),
            children: spec["limits"]["children"]
                .as_u64()
                .filter(|c| *c > 0)
                .map(|c| c as usize),
            cpu: spec["limits"]["cpu"]
                .as_f64()
                .filter(|c| c.is_finite() && *c > 0.0),
            write_mib_per_second: spec["limits"]["writeMiBPerSecond"]
                .as_f64()
                .filter(|w| w.is_finite() && *w > 0.0),
            events: spec["limits"]["events"]
                .as_u64()
                .filter(|e| *e > 0)
                .map(|e| e as f64),
        };
        Ok(Self {
            destinations,
            secrets,
            limits,
        })
    }

    /// The granted pattern covering `target`, if any; one naming the host
    /// explicitly before a wildcard (it decides whether loopback and
    /// private addresses may be used).
    pub fn destination_for(&self, target: &Destination) -> Option<&Destination> {
        self.destinations
            .iter()
            .find(|d| !d.is_wildcard() && d.covers(target))
            .or_else(|| self.destinations.iter().find(|d| d.covers(target)))
    }
}

/// What a plugin declared in its manifest, parsed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Declared {
    /// Declared destination patterns.
    pub destinations: Vec<Destination>,
    /// Declared secret patterns.
    pub secrets: Vec<SecretPattern>,
    /// Declared entries that do not parse (reported, never matched).
    pub invalid: Vec<String>,
}

impl Declared {
    /// Parse a manifest's declarations.
    pub fn parse(destinations: &[String], secrets: &[String]) -> Self {
        let mut declared = Self::default();
        for d in destinations {
            match Destination::parse(d) {
                Ok(d) => declared.destinations.push(d),
                Err(err) => declared.invalid.push(err.0),
            }
        }
        for s in secrets {
            match SecretPattern::parse_declared(s) {
                Ok(s) => declared.secrets.push(s),
                Err(err) => declared.invalid.push(err.0),
            }
        }
        declared
    }
}

/// Whether an address needs a grant that names its destination explicitly:
/// loopback, private, shared (CGNAT), link-local (cloud metadata lives
/// there: 169.254.169.254), unique-local IPv6 (fd00:ec2::254),
/// unspecified, multicast, broadcast, and IPv4 inside IPv6 of those.
pub fn is_special(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return special_v4(v4);
            }
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00 // unique local, fc00::/7
                || (first & 0xffc0) == 0xfe80 // link-local, fe80::/10
                || (first & 0xffc0) == 0xfec0 // site-local (deprecated)
                || v6 == Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0xa9fe, 0xa9fe) // NAT64 of metadata
        }
    }
}

fn special_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
        || (a == 192 && b == 0 && ip.octets()[2] == 0) // IETF protocol assignments
        || a >= 240 // reserved
}

/// Headers a plugin may not set: the host owns the connection and the
/// message framing, and a plugin-chosen `Host` could reach another virtual
/// host than the granted one.
pub fn forbidden_header(name: &str) -> bool {
    const FORBIDDEN: &[&str] = &[
        "host",
        "content-length",
        "connection",
        "keep-alive",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "expect",
        "idempotency-key",
    ];
    let lower = name.to_ascii_lowercase();
    FORBIDDEN.contains(&lower.as_str()) || lower.starts_with("proxy-")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn d(text: &str) -> Destination {
        Destination::parse(text).unwrap()
    }

    #[test]
    fn patterns_cover_exact_and_wildcard_hosts_on_their_port_only() {
        assert!(d("http://127.0.0.1:8081").covers(&d("http://127.0.0.1:8081/api/v1?x")));
        assert!(!d("http://127.0.0.1:8081").covers(&d("http://127.0.0.1:8082/")));
        assert!(!d("http://127.0.0.1:8081").covers(&d("https://127.0.0.1:8081/")));
        let wild = d("https://*.example.com");
        assert_eq!(wild.port, 443);
        assert!(wild.covers(&d("https://api.example.com/x")));
        assert!(wild.covers(&d("https://a.b.example.com:443")));
        assert!(!wild.covers(&d("https://example.com")));
        assert!(!wild.covers(&d("https://evilexample.com")));
        assert_eq!(d("http://[::1]:80").host, "::1");
        assert_eq!(d("http://[::1]:80").to_string(), "http://[::1]:80");
        let any_port = d("http://127.0.0.1:*");
        assert_eq!(any_port.to_string(), "http://127.0.0.1:*");
        assert!(any_port.covers(&d("http://127.0.0.1:9")));
        assert!(!any_port.is_wildcard(), "the host is named");
        let anything = d("https://*:*");
        assert!(anything.is_wildcard());
        assert!(anything.covers(&d("https://10.0.0.1:8443")));
        assert!(!anything.covers(&d("http://10.0.0.1:8443")));
    }

    #[test]
    fn bad_destinations_are_refused_with_the_reason() {
        for (text, why) in [
            ("ftp://x:1", "only http and https"),
            ("127.0.0.1:80", "not scheme://host:port"),
            ("http://a:b", "bad port"),
            ("http://user@x", "user information"),
            ("http://a*.b", "wildcard"),
            ("http://:80", "no host"),
            ("http://a:0", "bad port"),
        ] {
            let err = Destination::parse(text).unwrap_err().to_string();
            assert!(err.contains(why), "{text}: {err}");
        }
    }

    #[test]
    fn special_addresses_are_recognised() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00:ec2::254",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::",
        ] {
            assert!(is_special(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["93.184.216.34", "2606:4700::1", "8.8.8.8"] {
            assert!(!is_special(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn a_grant_object_is_read_whole_or_refused() {
        let grant = Grant::from_object(&json!({"spec": {
            "destinations": ["http://127.0.0.1:8081"],
            "secrets": ["*/pdns/api-key"],
            "limits": {"rps": 5, "concurrency": 2},
        }}))
        .unwrap();
        assert!(
            grant
                .destination_for(&d("http://127.0.0.1:8081/x"))
                .is_some()
        );
        assert!(grant.secrets[0].covers("default", "pdns", "api-key"));
        assert!(!grant.secrets[0].covers("default", "pdns", "other"));
        assert_eq!(grant.limits.rps, Some(5.0));
        let err = Grant::from_object(&json!({"spec": {"destinations": ["gopher://x"]}}));
        assert!(err.unwrap_err().to_string().contains("gopher"));
        assert!(Grant::from_object(&json!({"spec": {"secrets": "x"}})).is_err());
    }

    #[test]
    fn hop_by_hop_and_host_headers_are_forbidden() {
        for h in [
            "Host",
            "content-length",
            "Proxy-Authorization",
            "Transfer-Encoding",
        ] {
            assert!(forbidden_header(h), "{h}");
        }
        assert!(!forbidden_header("X-API-Key"));
    }
}

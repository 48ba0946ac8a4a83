//! Timestamps in the Kubernetes format (RFC 3339, UTC).

use chrono::{SecondsFormat, Utc};

/// Now, as Kubernetes writes `creationTimestamp`: RFC 3339 in UTC, whole seconds.
pub fn now_rfc3339() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Now, with microseconds (for event times that must order within a second).
pub fn now_rfc3339_micros() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// Milliseconds since the Unix epoch.
pub fn now_unix_ms() -> u64 {
    u64::try_from(Utc::now().timestamp_millis()).unwrap_or(0)
}

/// Parse an RFC 3339 timestamp into seconds since the epoch.
pub fn parse_unix_seconds(timestamp: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(timestamp)
        .ok()
        .map(|t| t.timestamp())
}

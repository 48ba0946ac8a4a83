//! Timestamps in the Kubernetes format (RFC 3339, UTC).

use chrono::{SecondsFormat, Utc};

/// Now, as Kubernetes writes `creationTimestamp`: RFC 3339 in UTC, whole seconds.
///
/// ```
/// let now = setpoint::object::time::now_rfc3339();
/// assert!(now.ends_with('Z') && now.len() == "2025-01-02T03:04:05Z".len());
/// ```
pub fn now_rfc3339() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Now, with microseconds (for event times that must order within a second).
///
/// ```
/// let now = setpoint::object::time::now_rfc3339_micros();
/// assert_eq!(now.len(), "2025-01-02T03:04:05.123456Z".len());
/// ```
pub fn now_rfc3339_micros() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// Milliseconds since the Unix epoch.
///
/// ```
/// assert!(setpoint::object::time::now_unix_ms() > 1_700_000_000_000);
/// ```
pub fn now_unix_ms() -> u64 {
    u64::try_from(Utc::now().timestamp_millis()).unwrap_or(0)
}

/// Parse an RFC 3339 timestamp into seconds since the epoch.
///
/// ```
/// use setpoint::object::time::parse_unix_seconds;
/// assert_eq!(parse_unix_seconds("1970-01-01T00:01:00Z"), Some(60));
/// assert_eq!(parse_unix_seconds("yesterday"), None);
/// ```
pub fn parse_unix_seconds(timestamp: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(timestamp)
        .ok()
        .map(|t| t.timestamp())
}

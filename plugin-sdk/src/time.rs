//! Points in time as the API writes them: RFC 3339 in UTC with milliseconds,
//! e.g. `2025-01-02T03:04:05.678Z`. A small hand-written formatter and parser
//! (no calendar dependency); a plugin gets the current time from
//! [`Ctx::now`](crate::Ctx::now), never from a clock of its own.

use std::fmt;
use std::ops::{Add, Sub};
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::Error;

/// A point in time with millisecond precision, serialised as an RFC 3339
/// string in UTC (`"2025-01-02T03:04:05.678Z"`).
///
/// Parsing accepts any RFC 3339 timestamp (fractions of any length, `Z` or a
/// numeric offset) and truncates it to milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time {
    unix_ms: i64,
}

impl Time {
    /// The time `unix_ms` milliseconds after 1970-01-01T00:00:00Z.
    pub const fn from_unix_ms(unix_ms: i64) -> Self {
        Self { unix_ms }
    }

    /// Milliseconds since 1970-01-01T00:00:00Z.
    pub const fn unix_ms(self) -> i64 {
        self.unix_ms
    }

    /// How long after `earlier` this time is; zero if it is not later.
    pub fn saturating_duration_since(self, earlier: Time) -> Duration {
        let ms = self.unix_ms.saturating_sub(earlier.unix_ms).max(0);
        Duration::from_millis(ms as u64)
    }

    /// Parses an RFC 3339 timestamp.
    pub fn parse_rfc3339(text: &str) -> Result<Self, Error> {
        parse(text.as_bytes())
            .ok_or_else(|| Error::permanent(format!("invalid RFC 3339 timestamp {text:?}")))
    }

    /// Formats as RFC 3339 in UTC with milliseconds.
    pub fn to_rfc3339(self) -> String {
        self.to_string()
    }
}

fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Add<Duration> for Time {
    type Output = Time;
    /// Saturates instead of overflowing.
    fn add(self, d: Duration) -> Time {
        Time::from_unix_ms(self.unix_ms.saturating_add(duration_ms(d)))
    }
}

impl Sub<Duration> for Time {
    type Output = Time;
    /// Saturates instead of overflowing.
    fn sub(self, d: Duration) -> Time {
        Time::from_unix_ms(self.unix_ms.saturating_sub(duration_ms(d)))
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let days = self.unix_ms.div_euclid(86_400_000);
        let ms_of_day = self.unix_ms.rem_euclid(86_400_000);
        let (y, m, d) = civil_from_days(days);
        let (hh, mm) = (ms_of_day / 3_600_000, ms_of_day / 60_000 % 60);
        let (ss, ms) = (ms_of_day / 1000 % 60, ms_of_day % 1000);
        write!(f, "{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}.{ms:03}Z")
    }
}

impl FromStr for Time {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        Self::parse_rfc3339(s)
    }
}

impl Serialize for Time {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// An RFC 3339 string, as OpenAPI's `date-time`.
impl schemars::JsonSchema for Time {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Time".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "string", "format": "date-time"})
    }
}

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Time::parse_rfc3339(&text).map_err(|e| serde::de::Error::custom(e.message()))
    }
}

/// `YYYY-MM-DD[T ]HH:MM:SS[.fraction](Z|±HH:MM)`.
fn parse(b: &[u8]) -> Option<Time> {
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let digits = b.get(range)?;
        digits.iter().try_fold(0i64, |acc, &c| {
            c.is_ascii_digit().then(|| acc * 10 + i64::from(c - b'0'))
        })
    };
    let sep = |i: usize, allowed: &[u8]| b.get(i).is_some_and(|c| allowed.contains(c));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt ") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let month_ok = (1..=12).contains(&month);
    if !month_ok || day < 1 || day > days_in_month(year, month) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 {
        return None; // 60 is a leap second
    }
    let mut i = 19;
    let mut millis = 0;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return None;
        }
        // Milliseconds are the first three digits, padded: ".5" is 500 ms.
        millis = (0..3).fold(0, |acc, k| {
            let digit = if start + k < i {
                i64::from(b[start + k] - b'0')
            } else {
                0
            };
            acc * 10 + digit
        });
    }
    let offset_min = match b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if i + 6 == b.len() && b[i + 3] == b':' => {
            let (oh, om) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
            if oh > 23 || om > 59 {
                return None;
            }
            if *sign == b'+' {
                oh * 60 + om
            } else {
                -(oh * 60 + om)
            }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_min * 60;
    Some(Time::from_unix_ms(seconds * 1000 + millis))
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The inverse of [`days_from_civil`].
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(text: &str) -> Time {
        Time::parse_rfc3339(text).unwrap()
    }

    #[test]
    fn formats_utc_with_milliseconds() {
        assert_eq!(
            Time::from_unix_ms(0).to_string(),
            "1970-01-01T00:00:00.000Z"
        );
        assert_eq!(
            Time::from_unix_ms(1_735_787_045_678).to_string(),
            "2025-01-02T03:04:05.678Z"
        );
        // A leap day and the last millisecond of a year.
        assert_eq!(
            Time::from_unix_ms(951_782_400_000).to_string(),
            "2000-02-29T00:00:00.000Z"
        );
        assert_eq!(
            Time::from_unix_ms(1_704_067_199_999).to_string(),
            "2023-12-31T23:59:59.999Z"
        );
        assert_eq!(
            Time::from_unix_ms(-1).to_string(),
            "1969-12-31T23:59:59.999Z"
        );
    }

    #[test]
    fn parses_what_it_formats() {
        for ms in [
            0,
            1,
            999,
            86_399_999,
            951_782_400_000,
            1_735_787_045_678,
            -1,
            -86_400_001,
        ] {
            let time = Time::from_unix_ms(ms);
            assert_eq!(t(&time.to_string()), time, "{time}");
        }
        // Every day for a few years around leap years round-trips.
        for day in -800..2000 {
            let time = Time::from_unix_ms(day * 86_400_000 + 12_345);
            assert_eq!(t(&time.to_rfc3339()), time);
        }
    }

    #[test]
    fn parses_kubernetes_style_timestamps() {
        assert_eq!(t("2025-01-02T03:04:05Z").unix_ms(), 1_735_787_045_000);
        assert_eq!(t("2025-01-02T03:04:05.6Z").unix_ms(), 1_735_787_045_600);
        assert_eq!(
            t("2025-01-02T03:04:05.678999999Z").unix_ms(),
            1_735_787_045_678
        );
        assert_eq!(t("2025-01-02t03:04:05z").unix_ms(), 1_735_787_045_000);
        assert_eq!(t("2025-01-02T05:04:05+02:00").unix_ms(), 1_735_787_045_000);
        assert_eq!(t("2025-01-01T23:34:05-03:30").unix_ms(), 1_735_787_045_000);
    }

    #[test]
    fn rejects_malformed_timestamps() {
        for bad in [
            "",
            "2025-01-02",
            "2025-01-02T03:04:05",
            "2025-13-02T03:04:05Z",
            "2025-02-29T03:04:05Z",
            "2025-01-02T24:04:05Z",
            "2025-01-02T03:04:05.Z",
            "2025-01-02T03:04:05Zjunk",
            "2025-01-02T03:04:05+0200",
            "2025/01/02T03:04:05Z",
            "２025-01-02T03:04:05Z",
        ] {
            assert!(Time::parse_rfc3339(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn arithmetic_with_durations_saturates() {
        let start = Time::from_unix_ms(1000);
        assert_eq!(start + Duration::from_millis(500), Time::from_unix_ms(1500));
        assert_eq!(start - Duration::from_secs(2), Time::from_unix_ms(-1000));
        assert_eq!(
            Time::from_unix_ms(1500).saturating_duration_since(start),
            Duration::from_millis(500)
        );
        assert_eq!(
            start.saturating_duration_since(Time::from_unix_ms(1500)),
            Duration::ZERO
        );
        assert_eq!(start + Duration::MAX, Time::from_unix_ms(i64::MAX));
    }

    #[test]
    fn serde_uses_the_string_form() {
        let time = Time::from_unix_ms(1_735_787_045_678);
        let json = serde_json::to_string(&time).unwrap();
        assert_eq!(json, "\"2025-01-02T03:04:05.678Z\"");
        assert_eq!(serde_json::from_str::<Time>(&json).unwrap(), time);
        let err = serde_json::from_str::<Time>("\"yesterday\"").unwrap_err();
        assert!(err.to_string().contains("yesterday"), "{err}");
    }
}

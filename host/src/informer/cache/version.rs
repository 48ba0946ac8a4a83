//! A cached object's resource version, as the cache keeps it: a store
//! revision as the number, so that an entry allocates nothing for it (a
//! start from a saved cache makes a million entries at once), any other
//! text as it is.

use std::fmt;

/// A resource version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Version {
    /// A revision, written as `text` would be: decimal, no sign, no leading
    /// zero.
    Revision(i64),
    /// Anything else.
    Text(Box<str>),
}

impl Version {
    /// `text` as a version.
    pub(super) fn of(text: Option<&str>) -> Option<Version> {
        let text = text?;
        Some(match revision_written_as(text) {
            Some(revision) => Version::Revision(revision),
            None => Version::Text(text.into()),
        })
    }

    /// The store revision this version names, if it names one.
    pub(super) fn revision(&self) -> Option<i64> {
        match self {
            Version::Revision(revision) => Some(*revision),
            Version::Text(text) => text.parse().ok(),
        }
    }

    /// Whether `version` is written as `text` (both absent included).
    pub(super) fn same(version: Option<&Version>, text: Option<&str>) -> bool {
        match (version, text) {
            (None, None) => true,
            (Some(Version::Revision(revision)), Some(text)) => {
                revision_written_as(text) == Some(*revision)
            }
            (Some(Version::Text(mine)), Some(text)) => **mine == *text,
            _ => false,
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Version::Revision(revision) => write!(f, "{revision}"),
            Version::Text(text) => f.write_str(text),
        }
    }
}

/// The revision `text` is the canonical decimal writing of, if it is one.
fn revision_written_as(text: &str) -> Option<i64> {
    let canonical = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    if canonical { text.parse().ok() } else { None }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_revision_is_kept_as_its_number_and_anything_else_as_its_text() {
        for (text, kept) in [
            ("0", Version::Revision(0)),
            ("4103679", Version::Revision(4_103_679)),
            ("007", Version::Text("007".into())),
            ("+7", Version::Text("+7".into())),
            ("-7", Version::Text("-7".into())),
            ("", Version::Text("".into())),
            (
                "99999999999999999999",
                Version::Text("99999999999999999999".into()),
            ),
            ("abc", Version::Text("abc".into())),
        ] {
            let version = Version::of(Some(text)).unwrap();
            assert_eq!(version, kept, "{text:?}");
            assert_eq!(version.to_string(), text, "written back as it came");
            assert!(Version::same(Some(&version), Some(text)));
            assert!(!Version::same(Some(&version), Some("12")), "{text:?}");
            assert!(!Version::same(Some(&version), None));
        }
        assert!(Version::same(None, None));
        assert!(!Version::same(None, Some("1")));
        assert!(!Version::same(Some(&Version::Revision(7)), Some("07")));
        assert_eq!(Version::Text("07".into()).revision(), Some(7));
        assert_eq!(Version::of(None), None);
    }
}

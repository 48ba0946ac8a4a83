//! Which versions of the plugin contract (`setpoint:plugin`, in `wit/`) the
//! host accepts, and what it says when a plugin was built against another.
//! Owns the statement and the wording; the matching itself is wasmtime's
//! semver-aware linker (an import of `setpoint:plugin/host@0.1.0` is served
//! by this host's `0.1.x`). How the contract evolves is `docs/wit.md`.

use wasmtime::Engine;
use wasmtime::component::Component;

use super::{Error, WIT_VERSION};

/// The WIT package of the plugin contract.
pub const WIT_PACKAGE: &str = "setpoint:plugin";

/// The versions of [`WIT_PACKAGE`] this host accepts plugins built
/// against: every `0.2.x` (the current series) and every `0.1.x` (the
/// previous one, kept for the window docs/wit.md promises), as semver has
/// it for `0.x` (the minor version is the breaking one). A plugin built
/// against a later release of a series than this host's loads as long as
/// it uses nothing that release added.
pub const ACCEPTED_WIT_VERSIONS: &str = "0.2.x or 0.1.x";

/// The previous series, still accepted (its frozen WIT is `wit/0.1/`).
pub const PREVIOUS_WIT_SERIES: (u64, u64) = (0, 1);

/// Which series' world a plugin implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Series {
    /// The current series ([`WIT_VERSION`]).
    Current,
    /// The previous series, `0.1`: no effects; its requests and responses
    /// are converted by the host.
    Previous,
}

/// The series a component was built against, by the versions of
/// [`WIT_PACKAGE`] it imports; the current one when it imports none.
pub(super) fn series_of(engine: &Engine, component: &Component) -> Series {
    let previous = imported_versions(engine, component)
        .iter()
        .filter_map(|v| parse(v))
        .any(|(major, minor, _)| (major, minor) == PREVIOUS_WIT_SERIES);
    if previous {
        Series::Previous
    } else {
        Series::Current
    }
}

/// A `MAJOR.MINOR.PATCH` version without pre-release or build parts.
fn parse(version: &str) -> Option<(u64, u64, u64)> {
    let mut parts = version.split('.').map(|p| p.parse::<u64>().ok());
    let parsed = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(parsed)
}

/// Whether this host accepts a plugin built against `version` of
/// [`WIT_PACKAGE`]: the same major version, and for `0.x` the same minor
/// version ([`ACCEPTED_WIT_VERSIONS`]). Pre-releases match only exactly.
///
/// ```
/// use setpoint::runtime::accepts_wit_version;
///
/// assert!(accepts_wit_version("0.2.0"));
/// assert!(accepts_wit_version("0.2.7"), "additive releases of the series");
/// assert!(accepts_wit_version("0.1.0"), "the previous series");
/// assert!(!accepts_wit_version("0.0.1"));
/// assert!(!accepts_wit_version("0.3.0"));
/// assert!(!accepts_wit_version("0.2.0-rc.1"));
/// ```
pub fn accepts_wit_version(version: &str) -> bool {
    let (Some(plugin), Some(host)) = (parse(version), parse(WIT_VERSION)) else {
        return version == WIT_VERSION;
    };
    if (plugin.0, plugin.1) == PREVIOUS_WIT_SERIES {
        return true;
    }
    match (plugin, host) {
        ((0, 0, _), _) | (_, (0, 0, _)) => plugin == host,
        ((0, a, _), (0, b, _)) => a == b,
        ((a, _, _), (b, _, _)) => a == b,
    }
}

/// The versions of [`WIT_PACKAGE`] a component imports, sorted.
fn imported_versions(engine: &Engine, component: &Component) -> Vec<String> {
    let prefix = format!("{WIT_PACKAGE}/");
    let mut versions: Vec<String> = component
        .component_type()
        .imports(engine)
        .filter_map(|(name, _)| name.strip_prefix(&prefix)?.split_once('@'))
        .map(|(_, version)| version.to_owned())
        .collect();
    versions.sort();
    versions.dedup();
    versions
}

/// The error for a component that does not link against the plugin world:
/// when it was built against a version this host does not accept, say so
/// first, with the versions accepted.
pub(super) fn link_error(engine: &Engine, component: &Component, err: wasmtime::Error) -> Error {
    let linker = match super::error::link(err) {
        Error::Link { detail } => detail,
        other => return other,
    };
    let built = imported_versions(engine, component);
    let newer = |v: &&String| parse(v).zip(parse(WIT_VERSION)).is_some_and(|(p, h)| p > h);
    let detail = if let Some(version) = built.iter().find(|v| !accepts_wit_version(v)) {
        format!(
            "it was built against {WIT_PACKAGE}@{version}, and this host accepts \
             {WIT_PACKAGE} {ACCEPTED_WIT_VERSIONS}; rebuild it with a plugin SDK for \
             {WIT_PACKAGE}@{WIT_VERSION} ({linker})"
        )
    } else if let Some(version) = built.iter().find(newer) {
        format!(
            "{linker} (it was built against {WIT_PACKAGE}@{version}, newer than this \
             host's {WIT_VERSION}: it loads only if it uses nothing added since)"
        )
    } else {
        linker
    };
    Error::Link { detail }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accepted_series_is_the_hosts_own() {
        let (major, minor, _) = parse(WIT_VERSION).unwrap();
        let (pmajor, pminor) = PREVIOUS_WIT_SERIES;
        assert_eq!(
            ACCEPTED_WIT_VERSIONS,
            format!("{major}.{minor}.x or {pmajor}.{pminor}.x")
        );
        assert!(accepts_wit_version(WIT_VERSION));
        assert!(!accepts_wit_version("1.1.0"));
        assert!(!accepts_wit_version("0.1"));
        assert!(!accepts_wit_version("garbage"));
    }

    /// A component importing an (empty) instance named `import`.
    fn importing(engine: &Engine, import: &str) -> Component {
        let wat = format!(r#"(component (import "{import}" (instance)))"#);
        Component::new(engine, wat).unwrap()
    }

    fn link(import: &str) -> String {
        let runtime = crate::runtime::Runtime::new(Default::default()).unwrap();
        let engine = &runtime.inner.engine;
        let component = importing(engine, import);
        let err = runtime
            .inner
            .linker
            .instantiate_pre(&component)
            .map(drop)
            .and_then(|()| Err::<(), _>(wasmtime::Error::msg("missing exports")))
            .unwrap_err();
        link_error(engine, &component, err).to_string()
    }

    #[test]
    fn a_plugin_of_another_series_is_refused_naming_both_versions() {
        let message = link("setpoint:plugin/host@0.0.1");
        assert!(
            message.starts_with(
                "plugin does not implement the setpoint:plugin@0.2.0 reconciler world: \
                 it was built against setpoint:plugin@0.0.1, and this host accepts \
                 setpoint:plugin 0.2.x or 0.1.x; rebuild it"
            ),
            "{message}"
        );
        let message = link("setpoint:plugin/host@0.3.0");
        assert!(
            message.contains("built against setpoint:plugin@0.3.0"),
            "{message}"
        );
    }

    #[test]
    fn a_plugin_of_the_accepted_series_gets_the_linkers_own_words() {
        // A later 0.2 release links (its `host` is served by ours): what
        // fails here is the missing exports, and that is what is said.
        let message = link("setpoint:plugin/host@0.2.9");
        assert!(
            message.ends_with(
                "missing exports (it was built against setpoint:plugin@0.2.9, newer than \
                 this host's 0.2.0: it loads only if it uses nothing added since)"
            ),
            "{message}"
        );
        let same = link("setpoint:plugin/host@0.2.0");
        assert!(
            same.ends_with("reconciler world: missing exports"),
            "{same}"
        );
        let plain = link("wasi:cli/environment@0.2.0");
        assert!(!plain.contains("built against"), "{plain}");
    }
}

//! `setpoint new-plugin NAME`: write a plugin crate from the SDK's template
//! that builds to a component and reconciles out of the box, with a native
//! unit test. Owns the template; does not build anything.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// Where the generated crate finds the SDK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SdkSource {
    /// A path dependency on a Setpoint checkout's `plugin-sdk` directory.
    Path(PathBuf),
    /// A version requirement, for when the SDK comes from a registry.
    Version(String),
}

impl SdkSource {
    /// The SDK to use for a crate created in `target`: `explicit` if given;
    /// else the `plugin-sdk` of an enclosing Setpoint checkout; else the SDK
    /// this binary was built from, if it is still there; else the registry
    /// version matching this binary.
    pub fn detect(explicit: Option<PathBuf>, target: &Path) -> Self {
        if let Some(path) = explicit {
            return Self::Path(path);
        }
        let absolute = std::path::absolute(target).unwrap_or_else(|_| target.to_owned());
        for dir in absolute.ancestors() {
            let sdk = dir.join("plugin-sdk");
            if sdk.join("Cargo.toml").is_file() && dir.join("wit").is_dir() {
                return Self::Path(sdk);
            }
        }
        let built_from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugin-sdk");
        if built_from.join("Cargo.toml").is_file() {
            return Self::Path(std::fs::canonicalize(&built_from).unwrap_or(built_from));
        }
        Self::Version(env!("CARGO_PKG_VERSION").to_owned())
    }

    fn dependency(&self) -> String {
        match self {
            Self::Path(path) => format!("{{ path = {:?} }}", path.display().to_string()),
            Self::Version(version) => format!("{version:?}"),
        }
    }
}

/// `my-thing` → `MyThing`.
fn kind_name(name: &str) -> String {
    name.split(['-', '_'])
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut chars = p.chars();
            chars
                .next()
                .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// Check a plugin name: lowercase ASCII letters, digits and `-`, starting
/// with a letter (it becomes the crate, the plugin and the kind's name).
pub fn validate_name(name: &str) -> anyhow::Result<()> {
    let ok = name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.ends_with('-');
    if !ok {
        bail!(
            "plugin name {name:?} must be lowercase letters, digits and '-', starting with a letter"
        );
    }
    Ok(())
}

/// Write the crate `dir/NAME` and return its path. Refuses to overwrite an
/// existing directory.
pub fn generate(name: &str, dir: &Path, sdk: &SdkSource) -> anyhow::Result<PathBuf> {
    validate_name(name)?;
    let root = dir.join(name);
    if root.exists() {
        bail!("{} already exists", root.display());
    }
    let kind = kind_name(name);
    let files = [
        ("Cargo.toml", cargo_toml(name, sdk)),
        ("rust-toolchain.toml", TOOLCHAIN.to_owned()),
        (".cargo/config.toml", CARGO_CONFIG.to_owned()),
        ("src/lib.rs", lib_rs(name, &kind)),
        ("example.yaml", example_yaml(&kind)),
        // The guide's commands, run in the crate, put the plugins directory
        // and the host's data there.
        (".gitignore", "/target\n/plugins/\n/.setpoint/\n".to_owned()),
    ];
    for (path, text) in files {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().expect("has a parent"))
            .with_context(|| format!("creating {}", root.display()))?;
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(root)
}

/// The generated crate's `.cargo/config.toml`: the same Wasm memory layout
/// as the plugins in Setpoint's own workspace (its `.cargo/config.toml`,
/// kept equal by a test). A 256 KiB stack instead of Rust's 1 MiB and
/// 512 KiB of initial memory, so a reconcile of a typical object never grows
/// memory (each `memory.grow` costs an `mprotect` in the call and another
/// when the next instance takes the pool slot). See docs/plugins.md,
/// "Performance".
const CARGO_CONFIG: &str = r#"# The memory layout Setpoint's own plugins use (docs/plugins.md, Performance):
# a 256 KiB stack instead of Rust's default 1 MiB, and 512 KiB of initial
# memory so that reconciling a typical object never grows memory. Raise
# --initial-memory for a plugin that reconciles much larger objects.
[target.wasm32-unknown-unknown]
rustflags = ["-C", "link-arg=-zstack-size=262144", "-C", "link-arg=--initial-memory=524288"]
# The same when built with WASI (for dependencies that need it).
[target.wasm32-wasip2]
rustflags = ["-C", "link-arg=-zstack-size=262144", "-C", "link-arg=--initial-memory=524288"]
"#;

const TOOLCHAIN: &str = r#"[toolchain]
channel = "1.95.0"
components = ["rustfmt", "clippy"]
targets = ["wasm32-unknown-unknown", "wasm32-wasip2"]
profile = "minimal"
"#;

fn cargo_toml(name: &str, sdk: &SdkSource) -> String {
    format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

# Its own workspace, even when created inside another one.
[workspace]

[lib]
# cdylib: the Wasm plugin the host loads; rlib: native unit tests.
crate-type = ["cdylib", "rlib"]

[dependencies]
setpoint-plugin-sdk = {sdk}
serde = {{ version = "1", features = ["derive"] }}
# The kind's schema is generated from the Rust types (`Definition::of`).
schemars = "1"

# What Setpoint's own plugins use: opt-level 3 made a fresh-instance
# reconcile about a fifth faster than "s" (docs/plugins.md, Performance).
[profile.release]
opt-level = 3
lto = true
codegen-units = 1
strip = true
"#,
        sdk = sdk.dependency()
    )
}

fn example_yaml(kind: &str) -> String {
    format!(
        r#"apiVersion: example.setpoint.dev/v1
kind: {kind}
metadata:
  name: hello
  namespace: default
spec:
  greeting: Hello, world!
"#
    )
}

fn lib_rs(name: &str, kind: &str) -> String {
    let lower = kind.to_lowercase();
    TEMPLATE
        .replace("__NAME__", name)
        .replace("__KIND__", kind)
        .replace("__LOWER__", &lower)
}

const TEMPLATE: &str = r##"//! `__NAME__`: a Setpoint plugin that reconciles `__KIND__` objects.
//!
//! Build it with `cargo build --release --target wasm32-unknown-unknown`
//! and copy `target/wasm32-unknown-unknown/release/<crate>.wasm` into the
//! host's plugins directory; `cargo test` runs the reconcile natively. Log
//! with `ctx.log(...)`: without WASI, `println!` goes nowhere (build for
//! `wasm32-wasip2` to have it, at about 2 µs more per call).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use setpoint_plugin_sdk::{
    Condition, ConditionStatus, Ctx, Definition, Error, Event, KindRef, Manifest, Object,
    PrinterColumn, Reconciler, Response, export_reconciler, set_condition,
};

/// What a user asks for. The doc comments become the kind's schema
/// descriptions; the host validates every write against that schema.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct __KIND__Spec {
    /// The greeting to publish.
    #[serde(default)]
    pub greeting: String,
}

/// What the plugin reports.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct __KIND__Status {
    /// The greeting last published.
    #[serde(default)]
    pub published: String,
    /// Standard conditions (`Ready`).
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// The reconciler. Keep it stateless: each call runs in a fresh instance.
#[derive(Debug, Default)]
pub struct __KIND__Reconciler;

impl Reconciler for __KIND__Reconciler {
    type Spec = __KIND__Spec;
    type Status = __KIND__Status;

    fn manifest(&self) -> Manifest {
        let kind = KindRef::new("example.setpoint.dev/v1", "__KIND__");
        // The kind's CustomResourceDefinition, generated from the types
        // above; the host registers it when the plugin loads.
        let definition = Definition::of::<__KIND__Spec, __KIND__Status>(kind.clone())
            .column(PrinterColumn::string("Published", ".status.published"))
            .column(PrinterColumn::condition("Ready", "Ready"));
        Manifest::new("__NAME__", env!("CARGO_PKG_VERSION"), kind).define(definition)
    }

    fn reconcile(
        &self,
        object: &Object<__KIND__Spec, __KIND__Status>,
        ctx: &Ctx,
    ) -> Result<Response<__KIND__Status>, Error> {
        if object.spec.greeting.is_empty() {
            return Err(Error::permanent("spec.greeting must not be empty"));
        }
        let mut status = object.status.clone();
        let mut response = Response::new();
        if status.published != object.spec.greeting {
            ctx.info(format!("publishing {:?}", object.spec.greeting));
            response = response.event(Event::normal("Published", &object.spec.greeting));
            status.published = object.spec.greeting.clone();
        }
        let ready = Condition::new("Ready", ConditionStatus::True, "Published", "greeting published")
            .with_observed_generation(object.metadata.generation);
        set_condition(&mut status.conditions, ready, ctx.now());
        Ok(response.status(status))
    }
}

export_reconciler!(__KIND__Reconciler);

#[cfg(test)]
mod tests {
    use super::*;
    use setpoint_plugin_sdk::testing::FakeCtx;

    fn object(greeting: &str) -> Object<__KIND__Spec, __KIND__Status> {
        Object::from_value(setpoint_plugin_sdk::serde_json::json!({
            "apiVersion": "example.setpoint.dev/v1", "kind": "__KIND__",
            "metadata": {"name": "hello", "namespace": "default", "generation": 1},
            "spec": {"greeting": greeting},
        }))
        .unwrap()
    }

    #[test]
    fn a_new_greeting_is_published_and_ready() {
        let response = __KIND__Reconciler
            .reconcile(&object("Hello"), &FakeCtx::new())
            .unwrap();
        let status = response.status.unwrap();
        assert_eq!(status.published, "Hello");
        assert!(status.conditions.iter().any(|c| c.type_ == "Ready" && c.is_true()));
        assert_eq!(response.events.len(), 1);
    }

    #[test]
    fn a_new_greeting_is_logged() {
        let ctx = FakeCtx::new().with_now_unix_ms(1_000);
        let response = __KIND__Reconciler.reconcile(&object("Hello"), &ctx).unwrap();
        assert_eq!(response.status.unwrap().published, "Hello");
        assert!(ctx.logs().iter().any(|(_, line)| line.contains("publishing \"Hello\"")));
    }

    #[test]
    fn the_manifest_defines_the_kind() {
        let manifest = __KIND__Reconciler.manifest();
        let crd = &manifest.definitions[0];
        assert_eq!(crd["metadata"]["name"], "__LOWER__s.example.setpoint.dev");
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        assert_eq!(schema["properties"]["spec"]["properties"]["greeting"]["type"], "string");
    }

    #[test]
    fn an_empty_greeting_is_a_permanent_error() {
        let err = __KIND__Reconciler
            .reconcile(&object(""), &FakeCtx::new())
            .unwrap_err();
        assert!(err.is_permanent());
    }
}
"##;

#[cfg(test)]
mod tests {
    use super::*;

    /// The `[target.TARGET]` rustflags line of a config file.
    fn wasm_rustflags<'a>(config: &'a str, target: &str) -> Option<&'a str> {
        let section = config.split(&format!("[target.{target}]")).nth(1)?;
        section.lines().find(|l| l.starts_with("rustflags"))
    }

    /// The values of `keys` in the `[header]` section of a Cargo.toml.
    fn profile<'a>(manifest: &'a str, header: &str, keys: &[&str]) -> Vec<&'a str> {
        let section = manifest.split(header).nth(1).expect("the section");
        let section = section.split("\n[").next().unwrap_or(section);
        keys.iter()
            .map(|key| {
                section
                    .lines()
                    .find(|l| l.split('=').next().map(str::trim) == Some(*key))
                    .unwrap_or_else(|| panic!("{key} missing in {header}"))
            })
            .collect()
    }

    #[test]
    fn a_new_crate_builds_with_the_workspaces_plugin_profile() {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml");
        let workspace = std::fs::read_to_string(workspace).unwrap();
        let generated = cargo_toml("flags", &SdkSource::Version("0.1.0".into()));
        let keys = ["opt-level", "lto", "codegen-units", "strip"];
        assert_eq!(
            profile(&generated, "[profile.release]", &keys),
            profile(&workspace, "[profile.plugin]", &keys)
        );
    }

    #[test]
    fn a_new_crate_gets_the_workspaces_wasm_link_flags() {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cargo/config.toml");
        let workspace = std::fs::read_to_string(workspace).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let root = generate("flags", dir.path(), &SdkSource::Version("0.1.0".into())).unwrap();
        let generated = std::fs::read_to_string(root.join(".cargo/config.toml")).unwrap();
        for target in ["wasm32-unknown-unknown", "wasm32-wasip2"] {
            let expected =
                wasm_rustflags(&workspace, target).expect("the workspace sets wasm rustflags");
            assert_eq!(
                wasm_rustflags(&generated, target),
                Some(expected),
                "{target}"
            );
        }
    }

    #[test]
    fn names_become_kinds_in_upper_camel_case() {
        assert_eq!(kind_name("web-app"), "WebApp");
        assert_eq!(kind_name("cron"), "Cron");
    }

    #[test]
    fn names_that_cannot_be_crates_and_kinds_are_refused() {
        for bad in ["", "Web", "1app", "web_app", "web-", "we b"] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
        validate_name("web-app2").unwrap();
    }

    /// The guide's unit-test snippet (docs/plugins.md, section 3), line by
    /// line, is the generated crate's own test, so it passes against it.
    #[test]
    fn the_guides_unit_test_snippet_is_the_templates_own_test() {
        let guide = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/plugins.md");
        let guide = std::fs::read_to_string(guide).unwrap();
        let section = guide.split("## 3.").nth(1).unwrap();
        let snippet = section.split("```rust").nth(1).unwrap();
        let snippet = snippet.split("```").next().unwrap();
        let mut checked = 0;
        for line in snippet.lines() {
            let code = line.split("  //").next().unwrap().trim();
            if code.is_empty() || code.starts_with("//") || code.starts_with("use ") {
                continue;
            }
            let code = code.replace("HelloWorld", "__KIND__");
            assert!(TEMPLATE.contains(&code), "not in the template: {code}");
            checked += 1;
        }
        assert!(checked >= 3, "{snippet}");
    }

    #[test]
    fn a_new_crate_ignores_what_the_guides_commands_put_in_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = generate("ignored", dir.path(), &SdkSource::Version("0.1.0".into())).unwrap();
        let ignore = std::fs::read_to_string(root.join(".gitignore")).unwrap();
        for entry in ["/target", "/plugins/", "/.setpoint/"] {
            assert!(ignore.lines().any(|l| l == entry), "{entry}: {ignore}");
        }
    }
}

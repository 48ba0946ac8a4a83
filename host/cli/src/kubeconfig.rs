//! Kubeconfig files, both ways: the one `setpoint serve --tokens` writes
//! for kubectl ([`render`]), and reading one back ([`read`]) so that the
//! `setpoint` CLI connects the way kubectl would (`--kubeconfig FILE`).
//! Only what a token-authenticated cluster needs is read: the current
//! context's cluster `server`, `certificate-authority(-data)`,
//! `insecure-skip-tls-verify`, and its user's `token` (or `tokenFile`).

use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};
use serde_json::Value;

/// How a kubeconfig says to reach the API.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Connection {
    /// The server URL.
    pub server: String,
    /// A bearer token.
    pub token: Option<String>,
    /// PEM certificates to trust for `https://`.
    pub certificate_authority: Option<Vec<u8>>,
    /// Skip checking the server's certificate.
    pub insecure_skip_tls_verify: bool,
}

/// A kubeconfig for `server`, authenticating with `token` (user name and
/// token) if given and trusting `ca_pem` (the served certificate, for
/// HTTPS) if given.
pub fn render(server: &str, token: Option<(&str, &str)>, ca_pem: Option<&[u8]>) -> String {
    let ca_line = ca_pem
        .map(|pem| format!("    certificate-authority-data: {}\n", base64(pem)))
        .unwrap_or_default();
    let (user, token_line) = match token {
        Some((user, token)) => (user, format!("    token: {token}\n")),
        None => ("anonymous", String::new()),
    };
    format!(
        "apiVersion: v1\nkind: Config\n\
         clusters:\n- name: setpoint\n  cluster:\n    server: {server}\n{ca_line}\
         users:\n- name: {user}\n  user:\n{token_line}\
         contexts:\n- name: setpoint\n  context:\n    cluster: setpoint\n    user: {user}\n    namespace: default\n\
         current-context: setpoint\n"
    )
}

/// Read the current context of the kubeconfig at `path`. Relative file
/// names inside it are relative to the file, as kubectl reads them.
pub fn read(path: &Path) -> anyhow::Result<Connection> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse(&text, path.parent().unwrap_or(Path::new(".")))
        .with_context(|| format!("kubeconfig {}", path.display()))
}

fn parse(text: &str, dir: &Path) -> anyhow::Result<Connection> {
    let config: Value = serde_yaml_ng::from_str(text).context("not YAML")?;
    let current = config["current-context"]
        .as_str()
        .filter(|c| !c.is_empty())
        .ok_or_else(|| anyhow!("no current-context"))?;
    let named = |list: &str, name: &str, member: &str| -> anyhow::Result<Value> {
        config[list]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["name"] == name)
            .map(|e| e[member].clone())
            .ok_or_else(|| anyhow!("no {list} entry named {name:?}"))
    };
    let context = named("contexts", current, "context")?;
    let cluster_name = context["cluster"]
        .as_str()
        .ok_or_else(|| anyhow!("context {current:?} names no cluster"))?;
    let cluster = named("clusters", cluster_name, "cluster")?;
    let user = match context["user"].as_str() {
        Some(name) => named("users", name, "user")?,
        None => Value::Null,
    };
    let server = cluster["server"]
        .as_str()
        .ok_or_else(|| anyhow!("cluster {cluster_name:?} has no server"))?
        .to_owned();
    let file = |key: &str| cluster[key].as_str().map(|f| resolve(dir, f));
    let certificate_authority = match (
        cluster["certificate-authority-data"].as_str(),
        file("certificate-authority"),
    ) {
        (Some(data), _) => {
            Some(base64_decode(data).context("certificate-authority-data is not base64")?)
        }
        (None, Some(path)) => {
            Some(std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?)
        }
        (None, None) => None,
    };
    let token = match (user["token"].as_str(), user["tokenFile"].as_str()) {
        (Some(token), _) => Some(token.to_owned()),
        (None, Some(file)) => {
            let path = resolve(dir, file);
            Some(
                std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?
                    .trim()
                    .to_owned(),
            )
        }
        (None, None) => None,
    };
    Ok(Connection {
        server,
        token,
        certificate_authority,
        insecure_skip_tls_verify: cluster["insecure-skip-tls-verify"].as_bool() == Some(true),
    })
}

fn resolve(dir: &Path, file: &str) -> PathBuf {
    let path = Path::new(file);
    if path.is_absolute() {
        path.to_owned()
    } else {
        dir.join(path)
    }
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding (for kubeconfig `*-data` fields).
fn base64(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decode standard base64; whitespace is ignored and padding optional.
fn base64_decode(text: &str) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let (mut bits, mut nbits) = (0u32, 0u32);
    for c in text.bytes().filter(|c| !c.is_ascii_whitespace()) {
        if c == b'=' {
            break;
        }
        let Some(value) = ALPHABET.iter().position(|&a| a == c) else {
            bail!("invalid character {:?}", c as char);
        };
        bits = (bits << 6) | value as u32;
        nbits += 6;
        if nbits >= 8 {
            nbits -= 8;
            out.push((bits >> nbits) as u8);
            bits &= (1 << nbits) - 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabet_with_padding_both_ways() {
        for (plain, encoded) in [
            (&b""[..], ""),
            (b"f", "Zg=="),
            (b"fo", "Zm8="),
            (b"foo", "Zm9v"),
            (b"foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain), encoded);
            assert_eq!(base64_decode(encoded).unwrap(), plain);
        }
        assert_eq!(base64_decode("Zm9v\nYmE").unwrap(), b"fooba");
        assert!(base64_decode("Zm9v!").is_err());
    }

    #[test]
    fn a_rendered_kubeconfig_reads_back_with_server_token_and_certificate_authority() {
        let text = render("https://127.0.0.1:1", Some(("admin", "tok")), Some(b"pem"));
        assert!(text.contains("current-context: setpoint"), "{text}");
        assert_eq!(
            parse(&text, Path::new("/")).unwrap(),
            Connection {
                server: "https://127.0.0.1:1".into(),
                token: Some("tok".into()),
                certificate_authority: Some(b"pem".to_vec()),
                insecure_skip_tls_verify: false,
            }
        );
    }

    #[test]
    fn files_named_in_a_kubeconfig_are_relative_to_it_and_the_current_context_decides() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), "the ca").unwrap();
        std::fs::write(dir.path().join("token"), "secret\n").unwrap();
        let text = "apiVersion: v1\nkind: Config\ncurrent-context: b\n\
            clusters:\n- name: one\n  cluster: {server: 'http://one'}\n\
            - name: two\n  cluster: {server: 'https://two:8490', certificate-authority: ca.pem, insecure-skip-tls-verify: true}\n\
            users:\n- name: u\n  user: {tokenFile: token}\n\
            contexts:\n- name: a\n  context: {cluster: one}\n- name: b\n  context: {cluster: two, user: u}\n";
        let path = dir.path().join("config");
        std::fs::write(&path, text).unwrap();
        assert_eq!(
            read(&path).unwrap(),
            Connection {
                server: "https://two:8490".into(),
                token: Some("secret".into()),
                certificate_authority: Some(b"the ca".to_vec()),
                insecure_skip_tls_verify: true,
            }
        );
        let err = parse("current-context: x\ncontexts: []\n", Path::new("/")).unwrap_err();
        assert!(
            format!("{err:#}").contains("no contexts entry named \"x\""),
            "{err:#}"
        );
    }
}

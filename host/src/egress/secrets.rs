//! Secrets in requests: reading a `v1 Secret`'s key, putting the value
//! where the request says (header template, query parameter, JSON body
//! pointer) at send time, and masking every value used out of whatever
//! the host records or hands back to the plugin.

use serde_json::Value;

use crate::contract::{HttpRequest, SecretTarget};

/// What replaces a secret value wherever the host shows text.
pub const MASK: &str = "***";

/// The value of key `key` in a Secret object's `data` (base64), or why not.
pub fn value_of(secret: &Value, key: &str) -> Result<String, String> {
    let bytes = crate::api::secret::value(secret, key)
        .map_err(|_| format!("key {key:?} is not valid base64"))?
        .ok_or_else(|| format!("has no key {key:?}"))?;
    String::from_utf8(bytes).map_err(|_| format!("key {key:?} is not UTF-8 text"))
}

/// The values of the secrets one request uses, to mask them afterwards.
/// Values shorter than 4 bytes are masked too, but a one-character
/// "secret" would mask half of every message, so those are refused when
/// substituted.
#[derive(Debug, Default, Clone)]
pub struct Masker {
    values: Vec<String>,
}

impl Masker {
    /// Add a value to mask, with the forms it takes in a URL and in JSON.
    pub fn add(&mut self, value: &str) {
        for form in [
            value.to_owned(),
            url_encode(value),
            serde_json::to_string(value)
                .unwrap_or_default()
                .trim_matches('"')
                .to_owned(),
        ] {
            if !form.is_empty() && !self.values.contains(&form) {
                self.values.push(form);
            }
        }
        // Longest first, so a value containing another is masked whole.
        self.values.sort_by_key(|v| std::cmp::Reverse(v.len()));
    }

    /// Whether anything is masked at all.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// `text` with every value replaced by [`MASK`].
    pub fn text(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for value in &self.values {
            if out.contains(value.as_str()) {
                out = out.replace(value.as_str(), MASK);
            }
        }
        out
    }

    /// `bytes` with every value replaced by [`MASK`].
    pub fn bytes(&self, bytes: Vec<u8>) -> Vec<u8> {
        let mut out = bytes;
        for value in &self.values {
            let needle = value.as_bytes();
            if needle.is_empty() || out.len() < needle.len() {
                continue;
            }
            if !out.windows(needle.len()).any(|w| w == needle) {
                continue;
            }
            let mut replaced = Vec::with_capacity(out.len());
            let mut i = 0;
            while i < out.len() {
                if out[i..].starts_with(needle) {
                    replaced.extend_from_slice(MASK.as_bytes());
                    i += needle.len();
                } else {
                    replaced.push(out[i]);
                    i += 1;
                }
            }
            out = replaced;
        }
        out
    }
}

/// Percent-encode for a query parameter value (RFC 3986 unreserved kept).
pub fn url_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The parts of HTTP Basic credentials one header is made of.
#[derive(Default)]
struct BasicAuth {
    username: Option<String>,
    password: Option<String>,
}

/// What a header template asks for.
enum HeaderSlot<'a> {
    /// `{}` replaced by the value.
    Template,
    /// The user name of Basic credentials.
    BasicUsername,
    /// The password of Basic credentials, with a literal user name if given.
    BasicPassword(Option<&'a str>),
}

fn header_slot(template: &str) -> HeaderSlot<'_> {
    use setpoint_plugin_sdk::{BASIC_AUTH_PASSWORD, BASIC_AUTH_USERNAME};
    if template == BASIC_AUTH_USERNAME {
        return HeaderSlot::BasicUsername;
    }
    match template.strip_prefix(BASIC_AUTH_PASSWORD) {
        Some("") => HeaderSlot::BasicPassword(None),
        Some(rest) => match rest.strip_prefix(':') {
            Some(username) => HeaderSlot::BasicPassword(Some(username)),
            None => HeaderSlot::Template,
        },
        None => HeaderSlot::Template,
    }
}

/// The request as it goes on the wire: secrets in place. `values` holds
/// each [`crate::contract::SecretUse`]'s value, in order.
pub fn substitute(request: &HttpRequest, values: &[String]) -> Result<Wire, String> {
    let mut url = request.url.clone();
    let mut headers = request.headers.clone();
    let mut body = request.body.clone();
    let mut basic: Vec<(String, BasicAuth)> = Vec::new();
    for (use_, value) in request.secrets.iter().zip(values) {
        if value.len() < 4 {
            return Err(format!(
                "secret {}/{} is shorter than 4 characters, too short to mask safely",
                use_.secret.name, use_.secret.key
            ));
        }
        match &use_.target {
            SecretTarget::Header { name, template }
                if !matches!(header_slot(template), HeaderSlot::Template) =>
            {
                let at = match basic.iter().position(|(n, _)| n.eq_ignore_ascii_case(name)) {
                    Some(at) => at,
                    None => {
                        basic.push((name.clone(), BasicAuth::default()));
                        basic.len() - 1
                    }
                };
                let parts = &mut basic[at].1;
                let (slot, literal) = match header_slot(template) {
                    HeaderSlot::BasicUsername => (&mut parts.username, None),
                    HeaderSlot::BasicPassword(literal) => (&mut parts.password, literal),
                    HeaderSlot::Template => unreachable!("matched above"),
                };
                if slot.replace(value.clone()).is_some() {
                    return Err(format!("header {name} names two Basic {template} secrets"));
                }
                if let Some(username) = literal
                    && parts.username.replace(username.to_owned()).is_some()
                {
                    return Err(format!("header {name} names two Basic user names"));
                }
            }
            SecretTarget::Header { name, template } => {
                if !template.contains("{}") {
                    return Err(format!("the template of header {name} has no {{}}"));
                }
                headers.push((name.clone(), template.replace("{}", value)));
            }
            SecretTarget::Query(name) => {
                let (base, fragment) = match url.split_once('#') {
                    Some((b, f)) => (b.to_owned(), Some(f.to_owned())),
                    None => (url.clone(), None),
                };
                let sep = if base.contains('?') { '&' } else { '?' };
                url = format!("{base}{sep}{}={}", url_encode(name), url_encode(value));
                if let Some(f) = fragment {
                    url = format!("{url}#{f}");
                }
            }
            SecretTarget::BodyPointer(pointer) => {
                let text = body
                    .as_deref()
                    .ok_or_else(|| format!("secret for body pointer {pointer}: no body"))?;
                let mut json: Value = serde_json::from_slice(text).map_err(|e| {
                    format!("secret for body pointer {pointer}: body is not JSON: {e}")
                })?;
                let (parent, last) = pointer
                    .rsplit_once('/')
                    .ok_or_else(|| format!("body pointer {pointer:?} does not start with /"))?;
                let last = last.replace("~1", "/").replace("~0", "~");
                let slot = json
                    .pointer_mut(parent)
                    .and_then(Value::as_object_mut)
                    .ok_or_else(|| format!("body pointer {pointer}: no object at {parent:?}"))?;
                slot.insert(last, Value::String(value.clone()));
                body = Some(json.to_string().into_bytes());
            }
        }
    }
    let mut derived = Vec::new();
    for (name, parts) in basic {
        let (Some(username), Some(password)) = (parts.username, parts.password) else {
            return Err(format!(
                "header {name} has only part of Basic credentials: a user name and a password \
                 are both needed"
            ));
        };
        if username.contains(':') {
            return Err(format!(
                "header {name}: a Basic user name cannot contain ':'"
            ));
        }
        use base64::Engine as _;
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"));
        headers.push((name, format!("Basic {encoded}")));
        derived.push(encoded);
    }
    Ok(Wire {
        url,
        headers,
        body,
        derived,
    })
}

/// A request with its secrets in place: never logged, never stored.
#[derive(Clone, Default)]
pub struct Wire {
    /// The URL, query secrets appended.
    pub url: String,
    /// Headers, secret headers added.
    pub headers: Vec<(String, String)>,
    /// The body, body secrets in place.
    pub body: Option<Vec<u8>>,
    /// Forms of the secrets made here (Basic credentials' base64), to be
    /// masked like the values themselves.
    pub derived: Vec<String>,
}

impl std::fmt::Debug for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Wire { .. }")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::SecretKeyRef;
    use serde_json::json;

    #[test]
    fn values_go_where_the_request_says() {
        let key = SecretKeyRef::new("s", "k");
        let request = HttpRequest::post("http://x/a?b=1")
            .secret_header("Authorization", "Bearer {}", key.clone())
            .secret_query("token", key.clone())
            .json(&json!({"auth": {}}))
            .secret_body("/auth/token", key);
        let v = "p@ss word".to_string();
        let wire = substitute(&request, &[v.clone(), v.clone(), v]).unwrap();
        assert_eq!(wire.url, "http://x/a?b=1&token=p%40ss%20word");
        assert!(
            wire.headers
                .contains(&("Authorization".into(), "Bearer p@ss word".into()))
        );
        let body: Value = serde_json::from_slice(&wire.body.unwrap()).unwrap();
        assert_eq!(body, json!({"auth": {"token": "p@ss word"}}));
    }

    #[test]
    fn masking_catches_the_value_in_its_url_and_json_forms() {
        let mut masker = Masker::default();
        masker.add("s3cr\"et value");
        assert_eq!(masker.text("a s3cr\"et value b"), "a *** b");
        assert_eq!(masker.text("?t=s3cr%22et%20value"), "?t=***");
        assert_eq!(masker.text(r#"{"t":"s3cr\"et value"}"#), r#"{"t":"***"}"#);
        assert_eq!(
            masker.bytes(b"xs3cr\"et valuey".to_vec()),
            b"x***y".to_vec()
        );
    }

    #[test]
    fn basic_credentials_are_joined_from_two_secrets_or_a_literal_user() {
        let request = HttpRequest::get("http://x/api").secret_basic_auth(
            SecretKeyRef::new("a", "username"),
            SecretKeyRef::new("a", "password"),
        );
        let wire = substitute(&request, &["guest".into(), "p@ss:word".into()]).unwrap();
        // base64("guest:p@ss:word"), as `curl -u guest:p@ss:word` sends it.
        let expected = "Z3Vlc3Q6cEBzczp3b3Jk";
        assert_eq!(
            wire.headers,
            [("Authorization".to_owned(), format!("Basic {expected}"))]
        );
        assert_eq!(wire.derived, [expected]);
        let as_user = HttpRequest::get("http://x/api/whoami")
            .secret_basic_auth_as("app", SecretKeyRef::new("p", "password"));
        let wire = substitute(&as_user, &["s3cret".into()]).unwrap();
        assert_eq!(wire.headers[0].1, "Basic YXBwOnMzY3JldA==");
    }

    #[test]
    fn half_of_basic_credentials_or_a_user_with_a_colon_is_refused() {
        let password_only = HttpRequest::get("http://x/").secret_header(
            "Authorization",
            setpoint_plugin_sdk::BASIC_AUTH_PASSWORD,
            SecretKeyRef::new("a", "password"),
        );
        let err = substitute(&password_only, &["s3cret".into()]).unwrap_err();
        assert!(err.contains("only part of Basic credentials"), "{err}");
        let colon = HttpRequest::get("http://x/")
            .secret_basic_auth_as("a:b", SecretKeyRef::new("p", "password"));
        let err = substitute(&colon, &["s3cret".into()]).unwrap_err();
        assert!(err.contains("cannot contain ':'"), "{err}");
        let twice = HttpRequest::get("http://x/")
            .secret_basic_auth_as("app", SecretKeyRef::new("p", "password"))
            .secret_basic_auth_as("app", SecretKeyRef::new("p", "password"));
        let err = substitute(&twice, &["s3cret".into(), "s3cret".into()]).unwrap_err();
        assert!(err.contains("two Basic"), "{err}");
    }

    #[test]
    fn secret_data_is_base64_and_a_missing_key_is_named() {
        let secret = json!({"data": {"k": "aHVudGVyMg=="}});
        assert_eq!(value_of(&secret, "k").unwrap(), "hunter2");
        assert!(value_of(&secret, "x").unwrap_err().contains("\"x\""));
    }

    #[test]
    fn short_values_and_templates_without_a_slot_are_refused() {
        let key = SecretKeyRef::new("s", "k");
        let r = HttpRequest::get("http://x/").secret_header("X", "{}", key.clone());
        assert!(substitute(&r, &["abc".into()]).is_err());
        let r = HttpRequest::get("http://x/").secret_header("X", "none", key);
        assert!(substitute(&r, &["abcd".into()]).is_err());
    }
}

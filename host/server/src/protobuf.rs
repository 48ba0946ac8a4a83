//! Kubernetes protobuf request bodies, read into JSON. Typed clients
//! (client-go's clientsets, so `kubectl create secret`) send built-in kinds
//! as `application/vnd.kubernetes.protobuf`; the host stores JSON and
//! answers JSON (such clients accept it). Owns only the decoding of the
//! kinds the host has built in that clients create this way: core `Secret`.
//! Everything else in protobuf is refused with 415 and a sentence saying to
//! send JSON.
//!
//! The wire format: the bytes `k8s\0`, then a `runtime.Unknown` message
//! (`typeMeta` 1 {`apiVersion` 1, `kind` 2}, `raw` 2) whose `raw` is the
//! object's message, as in `k8s.io/api/core/v1/generated.proto`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value, json};

/// The media type of Kubernetes protobuf bodies.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

const MAGIC: &[u8] = b"k8s\0";

/// Why a protobuf body could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// Not a protobuf encoding of any message.
    #[error("the protobuf body is malformed: {0}")]
    Malformed(&'static str),
    /// A kind the host does not read from protobuf.
    #[error("protobuf bodies are read for core v1 Secrets only, not {0}; send application/json")]
    Unsupported(String),
}

/// Whether a `Content-Type` header names Kubernetes protobuf.
pub fn is_protobuf(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|t| t.trim().eq_ignore_ascii_case(MEDIA_TYPE))
}

/// The object a protobuf body carries, as JSON.
pub fn decode(body: &[u8]) -> Result<Value, Error> {
    let envelope = body
        .strip_prefix(MAGIC)
        .ok_or(Error::Malformed("it does not start with the k8s\\0 prefix"))?;
    let mut api_version = String::new();
    let mut kind = String::new();
    let mut raw: &[u8] = &[];
    for field in Fields::new(envelope) {
        match field? {
            (1, Wire::Bytes(type_meta)) => {
                for field in Fields::new(type_meta) {
                    match field? {
                        (1, Wire::Bytes(b)) => api_version = string(b)?,
                        (2, Wire::Bytes(b)) => kind = string(b)?,
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(b)) => raw = b,
            _ => {}
        }
    }
    match (api_version.as_str(), kind.as_str()) {
        ("v1", "Secret") => secret(raw),
        _ => Err(Error::Unsupported(format!("{api_version}/{kind}"))),
    }
}

/// `Secret`: metadata 1, data 2 (map of bytes), type 3, stringData 4
/// (map of strings), immutable 5.
fn secret(raw: &[u8]) -> Result<Value, Error> {
    let mut object = json!({"apiVersion": "v1", "kind": "Secret"});
    let mut data = Map::new();
    let mut string_data = Map::new();
    for field in Fields::new(raw) {
        match field? {
            (1, Wire::Bytes(b)) => object["metadata"] = object_meta(b)?,
            (2, Wire::Bytes(b)) => {
                let (k, v) = map_entry(b)?;
                data.insert(string(k)?, Value::String(STANDARD.encode(v)));
            }
            (3, Wire::Bytes(b)) => object["type"] = Value::String(string(b)?),
            (4, Wire::Bytes(b)) => {
                let (k, v) = map_entry(b)?;
                string_data.insert(string(k)?, Value::String(string(v)?));
            }
            (5, Wire::Varint(v)) => object["immutable"] = Value::Bool(v != 0),
            _ => {}
        }
    }
    if !data.is_empty() {
        object["data"] = Value::Object(data);
    }
    if !string_data.is_empty() {
        object["stringData"] = Value::Object(string_data);
    }
    Ok(object)
}

/// The `ObjectMeta` fields a client sets on create or update: name 1,
/// generateName 2, namespace 3, uid 5, resourceVersion 6, labels 11,
/// annotations 12, ownerReferences 13, finalizers 14. The rest are the
/// server's.
fn object_meta(raw: &[u8]) -> Result<Value, Error> {
    let mut meta = Map::new();
    let mut labels = Map::new();
    let mut annotations = Map::new();
    let mut owners = Vec::new();
    let mut finalizers = Vec::new();
    for field in Fields::new(raw) {
        let (number, wire) = field?;
        let Wire::Bytes(b) = wire else { continue };
        let name = match number {
            1 => "name",
            2 => "generateName",
            3 => "namespace",
            5 => "uid",
            6 => "resourceVersion",
            11 | 12 => {
                let (k, v) = map_entry(b)?;
                let map = if number == 11 {
                    &mut labels
                } else {
                    &mut annotations
                };
                map.insert(string(k)?, Value::String(string(v)?));
                continue;
            }
            13 => {
                owners.push(owner_reference(b)?);
                continue;
            }
            14 => {
                finalizers.push(Value::String(string(b)?));
                continue;
            }
            _ => continue,
        };
        let text = string(b)?;
        if !text.is_empty() {
            meta.insert(name.into(), Value::String(text));
        }
    }
    for (name, map) in [("labels", labels), ("annotations", annotations)] {
        if !map.is_empty() {
            meta.insert(name.into(), Value::Object(map));
        }
    }
    if !owners.is_empty() {
        meta.insert("ownerReferences".into(), Value::Array(owners));
    }
    if !finalizers.is_empty() {
        meta.insert("finalizers".into(), Value::Array(finalizers));
    }
    Ok(Value::Object(meta))
}

/// `OwnerReference`: kind 1, name 3, uid 4, apiVersion 5, controller 6,
/// blockOwnerDeletion 7.
fn owner_reference(raw: &[u8]) -> Result<Value, Error> {
    let mut owner = Map::new();
    for field in Fields::new(raw) {
        let (key, value) = match field? {
            (1, Wire::Bytes(b)) => ("kind", Value::String(string(b)?)),
            (3, Wire::Bytes(b)) => ("name", Value::String(string(b)?)),
            (4, Wire::Bytes(b)) => ("uid", Value::String(string(b)?)),
            (5, Wire::Bytes(b)) => ("apiVersion", Value::String(string(b)?)),
            (6, Wire::Varint(v)) => ("controller", Value::Bool(v != 0)),
            (7, Wire::Varint(v)) => ("blockOwnerDeletion", Value::Bool(v != 0)),
            _ => continue,
        };
        owner.insert(key.into(), value);
    }
    Ok(Value::Object(owner))
}

/// A map entry: key 1, value 2 (either may be absent, meaning empty).
fn map_entry(raw: &[u8]) -> Result<(&[u8], &[u8]), Error> {
    let (mut key, mut value): (&[u8], &[u8]) = (&[], &[]);
    for field in Fields::new(raw) {
        match field? {
            (1, Wire::Bytes(b)) => key = b,
            (2, Wire::Bytes(b)) => value = b,
            _ => {}
        }
    }
    Ok((key, value))
}

fn string(bytes: &[u8]) -> Result<String, Error> {
    String::from_utf8(bytes.to_vec()).map_err(|_| Error::Malformed("a string is not UTF-8"))
}

/// A field's value by wire type; fixed-width values are skipped.
enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// The fields of one message, in order.
struct Fields<'a> {
    rest: &'a [u8],
}

impl<'a> Fields<'a> {
    fn new(message: &'a [u8]) -> Self {
        Self { rest: message }
    }

    fn varint(&mut self) -> Result<u64, Error> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = self
                .rest
                .split_first()
                .ok_or(Error::Malformed("a varint is cut short"))?;
            self.rest = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(Error::Malformed("a varint is longer than ten bytes"))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        if n > self.rest.len() {
            return Err(Error::Malformed("a field runs past the end of its message"));
        }
        let (taken, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(taken)
    }

    fn field(&mut self) -> Result<(u64, Wire<'a>), Error> {
        let tag = self.varint()?;
        let wire = match tag & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Wire::Fixed
            }
            2 => {
                let len = usize::try_from(self.varint()?)
                    .map_err(|_| Error::Malformed("a length does not fit in memory"))?;
                Wire::Bytes(self.take(len)?)
            }
            5 => {
                self.take(4)?;
                Wire::Fixed
            }
            _ => return Err(Error::Malformed("an unknown wire type")),
        };
        Ok((tag >> 3, wire))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u64, Wire<'a>), Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let field = self.field();
        if field.is_err() {
            // One error ends the message: what follows cannot be framed.
            self.rest = &[];
        }
        Some(field)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_field(number: u8, value: &[u8]) -> Vec<u8> {
        let mut out = vec![(number << 3) | 2, u8::try_from(value.len()).unwrap()];
        out.extend_from_slice(value);
        out
    }

    fn entry(k: &str, v: &[u8]) -> Vec<u8> {
        [bytes_field(1, k.as_bytes()), bytes_field(2, v)].concat()
    }

    /// What kubectl 1.33 sends for
    /// `create secret generic pdns-api --from-literal=apiKey=s3cr3t`, in part.
    fn kubectl_secret() -> Vec<u8> {
        let type_meta = [bytes_field(1, b"v1"), bytes_field(2, b"Secret")].concat();
        let meta = [
            bytes_field(1, b"pdns-api"),
            bytes_field(2, b""),
            bytes_field(11, &entry("app", b"dns")),
            bytes_field(14, b"keep"),
        ]
        .concat();
        let secret = [
            bytes_field(1, &meta),
            bytes_field(2, &entry("apiKey", b"s3cr3t")),
            bytes_field(4, &entry("user", b"admin")),
            bytes_field(3, b"Opaque"),
            vec![5 << 3, 1],
        ]
        .concat();
        [
            MAGIC.to_vec(),
            bytes_field(1, &type_meta),
            bytes_field(2, &secret),
            bytes_field(3, b""),
            bytes_field(4, b""),
        ]
        .concat()
    }

    #[test]
    fn a_secret_from_a_typed_client_reads_as_its_json() {
        assert_eq!(
            decode(&kubectl_secret()).unwrap(),
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "pdns-api", "labels": {"app": "dns"}, "finalizers": ["keep"]},
                   "data": {"apiKey": "czNjcjN0"}, "stringData": {"user": "admin"},
                   "type": "Opaque", "immutable": true})
        );
    }

    #[test]
    fn other_kinds_and_broken_bodies_are_refused_clearly() {
        let type_meta = [bytes_field(1, b"v1"), bytes_field(2, b"ConfigMap")].concat();
        let body = [MAGIC.to_vec(), bytes_field(1, &type_meta)].concat();
        let err = decode(&body).unwrap_err();
        assert_eq!(err, Error::Unsupported("v1/ConfigMap".into()));
        assert!(err.to_string().contains("send application/json"));

        assert!(matches!(decode(b"{}"), Err(Error::Malformed(_))));
        let mut cut = kubectl_secret();
        cut.truncate(cut.len() - 7);
        assert!(matches!(decode(&cut), Err(Error::Malformed(_))));
    }

    #[test]
    fn the_media_type_is_recognised_with_parameters() {
        assert!(is_protobuf("application/vnd.kubernetes.protobuf"));
        assert!(is_protobuf(
            "application/vnd.kubernetes.protobuf; charset=x"
        ));
        assert!(!is_protobuf("application/json"));
    }
}

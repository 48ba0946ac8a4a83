//! `User`: a RabbitMQ user, its tags, and its password from a Secret.
//! `GET /api/users/{name}` sees it (404: absent) and its tags;
//! `PUT /api/users/{name}` with `{"tags": "a,b"}` and the password, which
//! the host puts into the body from the Secret (`secret_body`: the plugin
//! never sees it), creates or updates it; `DELETE` removes it.
//!
//! Whether the broker's password is the Secret's current one is observed,
//! not remembered, so a changed Secret (the host requeues objects whose
//! requests name it) or a password changed in the broker is set again:
//! `GET /api/whoami` is sent as the user itself, with the Secret's
//! password (`secret_basic_auth_as`). Checked against RabbitMQ 3.10.8:
//!
//! | user's password | user's tags | answer |
//! |---|---|---|
//! | right | management, monitoring, policymaker, administrator | `200 {"name": .., "tags": [..]}` |
//! | right | none (or others) | `401 {"error": "not_authorised", "reason": "Not management user"}` |
//! | wrong (or no such user) | any | `401 {"error": "not_authorized", "reason": "Login failed"}` and `WWW-Authenticate` |
//!
//! RabbitMQ checks the password first and the tags after, so "Not
//! management user" says the password was right. Anything else that is a
//! 401 says it was not (and is set again: a `PUT` with the same password
//! changes nothing). The whoami read is sent only when the user exists,
//! so a user about to be created costs no failed login in the broker's log.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use setpoint_plugin_sdk::serde_json::{self, Value, json};
use setpoint_plugin_sdk::{
    Ctx, Definition, Error, HttpRequest, HttpResult, KindRef, PrinterColumn, SecretKeyRef,
};

use crate::broker::{self, Api, check_name, encode, unanswered};
use crate::decide::{DELETE_ID, Diff, Failure, Topology, WRITE_ID};
use crate::{API_VERSION, BrokerRef, default_resync};

fn password_key() -> String {
    "password".into()
}

/// The Secret key holding a user's password.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
pub struct PasswordSecret {
    /// The Secret's name, in the object's namespace.
    pub name: String,
    /// The key in its data.
    #[serde(default = "password_key")]
    pub key: String,
}

/// A RabbitMQ user.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserSpec {
    /// The user's name in RabbitMQ (default: the object's name).
    pub name: Option<String>,
    /// Its tags: management, monitoring, policymaker, administrator, ...
    #[serde(default)]
    pub tags: Vec<String>,
    /// Where its password is; the host puts it into the request, the plugin never sees it.
    pub password_secret: PasswordSecret,
    /// The broker.
    pub broker: BrokerRef,
    /// How often RabbitMQ is looked at again to repair changes made behind the object's back.
    #[serde(default = "default_resync")]
    #[schemars(range(min = 1))]
    pub resync_seconds: u64,
}

/// The user as RabbitMQ has it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UserObserved {
    /// Its tags, sorted.
    pub tags: Vec<String>,
    /// Whether its password is the Secret's (it logs in with it).
    pub password_current: bool,
}

/// A `User` object's target.
#[derive(Clone, Debug, PartialEq)]
pub struct User {
    /// The user's name.
    pub name: String,
    /// Its tags, sorted.
    pub tags: Vec<String>,
    /// Its password.
    pub password: SecretKeyRef,
    /// The broker.
    pub api: Api,
    /// The resync period.
    pub resync: Duration,
}

/// The id of the user read.
pub const READ_ID: &str = "user";
/// The id of the password check.
pub const WHOAMI_ID: &str = "whoami";

/// Tags sorted, without blanks or repeats.
fn normalise(tags: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut tags: Vec<String> = tags
        .into_iter()
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
        .collect();
    tags.sort();
    tags.dedup();
    tags
}

/// The tags of a user as the API answers it: a list (3.9 and later) or
/// a comma-separated string (before).
pub fn tags_of(user: &Value) -> Vec<String> {
    match user.get("tags") {
        Some(Value::Array(tags)) => {
            normalise(tags.iter().filter_map(|t| t.as_str().map(str::to_owned)))
        }
        Some(Value::String(tags)) => normalise(tags.split(',').map(str::to_owned)),
        _ => Vec::new(),
    }
}

impl User {
    /// The password check: `GET /api/whoami` as the user, with the
    /// Secret's password.
    pub fn whoami(&self, max_age: Duration) -> HttpRequest {
        HttpRequest::get(self.api.url("/whoami"))
            .id(WHOAMI_ID)
            .header("Accept", "application/json")
            .max_age(max_age)
            .secret_basic_auth_as(&self.name, self.password.clone())
    }

    /// Whether the whoami answer says the password is the Secret's (see
    /// the module's table).
    pub fn password_current(&self, answer: &HttpResult) -> Result<bool, Failure> {
        let response = answer
            .as_ref()
            .map_err(|e| unanswered(e.kind, &e.message))?;
        match response.status {
            200..=299 => Ok(true),
            401 => {
                let body: Value = serde_json::from_slice(&response.body).unwrap_or_default();
                Ok(body.get("reason").and_then(Value::as_str) == Some("Not management user"))
            }
            _ => Err(Failure::Unreachable(format!(
                "RabbitMQ answered the password check of user {:?} with {}",
                self.name,
                broker::broker_reason(response)
            ))),
        }
    }

    fn path(&self) -> String {
        format!("/users/{}", encode(&self.name))
    }
}

impl Topology for User {
    const KIND: &'static str = "User";
    type Spec = UserSpec;
    type Observed = UserObserved;

    fn definition() -> Definition {
        crate::ready_columns(
            Definition::of::<UserSpec, Value>(KindRef::new(API_VERSION, Self::KIND))
                .short_name("rmquser")
                .column(PrinterColumn::string("Broker", ".spec.broker.url")),
        )
    }

    fn from_spec(name: &str, spec: &UserSpec) -> Result<Self, Failure> {
        let name = spec.name.clone().unwrap_or_else(|| name.to_owned());
        check_name("spec.name", &name)?;
        // The password check logs in as the user with HTTP Basic, where a
        // colon ends the user name.
        if name.contains(':') {
            return Err(Failure::InvalidSpec(format!(
                "spec.name {name:?} contains ':', which HTTP Basic credentials cannot carry"
            )));
        }
        if spec.password_secret.name.is_empty() || spec.password_secret.key.is_empty() {
            return Err(Failure::InvalidSpec(
                "spec.passwordSecret needs a name and a key".into(),
            ));
        }
        if let Some(tag) = spec.tags.iter().find(|t| t.contains(',')) {
            return Err(Failure::InvalidSpec(format!(
                "spec.tags: {tag:?} contains ',' (one tag per item)"
            )));
        }
        Ok(Self {
            name,
            tags: normalise(spec.tags.iter().cloned()),
            password: SecretKeyRef::new(&spec.password_secret.name, &spec.password_secret.key),
            api: Api::from_spec(&spec.broker)?,
            resync: Duration::from_secs(spec.resync_seconds.max(1)),
        })
    }

    fn api(&self) -> &Api {
        &self.api
    }

    fn resync(&self) -> Duration {
        self.resync
    }

    fn describe(&self) -> String {
        format!("user {:?}", self.name)
    }

    fn observe(
        &self,
        ctx: &Ctx,
        max_age: Duration,
    ) -> Result<Result<Option<UserObserved>, Failure>, Error> {
        let answer = broker::fetch(ctx, &self.api.read(READ_ID, &self.path(), max_age))?;
        let tags = match self.api.read_answer(&answer) {
            Ok(Some(user)) => match serde_json::from_slice::<Value>(&user.body) {
                Ok(user) => tags_of(&user),
                Err(e) => return Ok(Err(self.api.garbled("the user", e))),
            },
            Ok(None) => return Ok(Ok(None)),
            Err(failure) => return Ok(Err(failure)),
        };
        if ctx.finalizing() {
            // Deleting: whether the password is current does not matter.
            return Ok(Ok(Some(UserObserved {
                tags,
                password_current: true,
            })));
        }
        let check = broker::fetch(ctx, &self.whoami(max_age))?;
        Ok(self.password_current(&check).map(|password_current| {
            Some(UserObserved {
                tags,
                password_current,
            })
        }))
    }

    fn diff(&self, observed: &UserObserved) -> Diff {
        let mut differs = Vec::new();
        if observed.tags != self.tags {
            differs.push(format!(
                "tags [{}] (spec: [{}])",
                observed.tags.join(", "),
                self.tags.join(", ")
            ));
        }
        if !observed.password_current {
            differs.push(format!(
                "a password other than the one in Secret {} (key {})",
                self.password.name, self.password.key
            ));
        }
        if differs.is_empty() {
            Diff::Same
        } else {
            Diff::Mutable(differs.join(" and "))
        }
    }

    fn put(&self) -> HttpRequest {
        self.api
            .write(
                "PUT",
                WRITE_ID,
                &self.path(),
                &json!({"tags": self.tags.join(",")}),
            )
            .secret_body("/password", self.password.clone())
    }

    fn delete(&self, _: &UserObserved) -> HttpRequest {
        self.api.request("DELETE", DELETE_ID, &self.path())
    }
}

//! `Permission`: a user's configure, write and read permissions in a
//! vhost. `GET /api/permissions/{vhost}/{user}` sees them (404: none, or
//! no such user or vhost); `PUT` of the same URL sets them and `DELETE`
//! removes them. Only when there are none are the user and the vhost read,
//! so that the object waits (`UserMissing`, `VhostMissing`) rather than
//! having its `PUT` refused (RabbitMQ answers 400
//! `vhost_or_user_not_found` without saying which).

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use setpoint_plugin_sdk::serde_json::{self, Value, json};
use setpoint_plugin_sdk::{Ctx, Definition, Error, HttpRequest, KindRef, PrinterColumn};

use crate::broker::{self, Api, check_name, encode};
use crate::decide::{DELETE_ID, Diff, Failure, Topology, WRITE_ID};
use crate::vhost::{vhost_missing, vhost_read};
use crate::{API_VERSION, BrokerRef, default_resync, default_vhost};

fn everything() -> String {
    ".*".into()
}

/// A user's permissions in a vhost.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PermissionSpec {
    /// The user.
    pub user: String,
    /// The vhost.
    #[serde(default = "default_vhost")]
    pub vhost: String,
    /// A regular expression: the queues and exchanges the user may declare and delete.
    #[serde(default = "everything")]
    pub configure: String,
    /// A regular expression: the exchanges it may publish to (and queues bind).
    #[serde(default = "everything")]
    pub write: String,
    /// A regular expression: the queues it may consume from (and exchanges bind).
    #[serde(default = "everything")]
    pub read: String,
    /// The broker.
    pub broker: BrokerRef,
    /// How often RabbitMQ is looked at again to repair changes made behind the object's back.
    #[serde(default = "default_resync")]
    #[schemars(range(min = 1))]
    pub resync_seconds: u64,
}

/// The permissions as RabbitMQ has them (and as the spec wants them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermissionObserved {
    /// Configure.
    pub configure: String,
    /// Write.
    pub write: String,
    /// Read.
    pub read: String,
}

/// A `Permission` object's target.
#[derive(Clone, Debug, PartialEq)]
pub struct Permission {
    /// The user.
    pub user: String,
    /// The vhost.
    pub vhost: String,
    /// What is wanted.
    pub wanted: PermissionObserved,
    /// The broker.
    pub api: Api,
    /// The resync period.
    pub resync: Duration,
}

/// The id of the permissions read.
pub const READ_ID: &str = "permissions";
/// The id of the user read (when there are no permissions).
pub const USER_ID: &str = "user";
/// The id of the vhost read (when there are no permissions).
pub const VHOST_ID: &str = "vhost";

impl Permission {
    fn path(&self) -> String {
        format!(
            "/permissions/{}/{}",
            encode(&self.vhost),
            encode(&self.user)
        )
    }
}

impl Topology for Permission {
    const KIND: &'static str = "Permission";
    type Spec = PermissionSpec;
    type Observed = PermissionObserved;

    fn definition() -> Definition {
        crate::ready_columns(
            Definition::of::<PermissionSpec, Value>(KindRef::new(API_VERSION, Self::KIND))
                .short_name("rmqperm")
                .column(PrinterColumn::string("User", ".spec.user"))
                .column(PrinterColumn::string("Vhost", ".spec.vhost")),
        )
    }

    fn from_spec(_: &str, spec: &PermissionSpec) -> Result<Self, Failure> {
        check_name("spec.user", &spec.user)?;
        check_name("spec.vhost", &spec.vhost)?;
        Ok(Self {
            user: spec.user.clone(),
            vhost: spec.vhost.clone(),
            wanted: PermissionObserved {
                configure: spec.configure.clone(),
                write: spec.write.clone(),
                read: spec.read.clone(),
            },
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
        format!(
            "permissions of user {:?} in vhost {:?}",
            self.user, self.vhost
        )
    }

    fn observe(
        &self,
        ctx: &Ctx,
        max_age: Duration,
    ) -> Result<Result<Option<PermissionObserved>, Failure>, Error> {
        let answer = broker::fetch(ctx, &self.api.read(READ_ID, &self.path(), max_age))?;
        match self.api.read_answer(&answer) {
            Ok(Some(found)) => {
                return Ok(serde_json::from_slice(&found.body)
                    .map(Some)
                    .map_err(|e| self.api.garbled("the permissions", e)));
            }
            Ok(None) if !ctx.finalizing() => {}
            other => return Ok(other.map(|_| None)),
        }
        let reads = [
            self.api
                .read(USER_ID, &format!("/users/{}", encode(&self.user)), max_age),
            vhost_read(&self.api, VHOST_ID, &self.vhost, max_age),
        ];
        let answers = broker::fetch_all(ctx, &reads)?;
        Ok((|| {
            if self.api.read_answer(&answers[0])?.is_none() {
                return Err(Failure::UserMissing(format!(
                    "user {:?} does not exist in RabbitMQ (yet)",
                    self.user
                )));
            }
            if self.api.read_answer(&answers[1])?.is_none() {
                return Err(vhost_missing(&self.vhost, &self.api));
            }
            Ok(None)
        })())
    }

    fn diff(&self, observed: &PermissionObserved) -> Diff {
        if *observed == self.wanted {
            return Diff::Same;
        }
        Diff::Mutable(format!(
            "configure {:?}, write {:?}, read {:?}",
            observed.configure, observed.write, observed.read
        ))
    }

    fn put(&self) -> HttpRequest {
        self.api.write(
            "PUT",
            WRITE_ID,
            &self.path(),
            &json!({"configure": self.wanted.configure, "write": self.wanted.write,
                    "read": self.wanted.read}),
        )
    }

    fn delete(&self, _: &PermissionObserved) -> HttpRequest {
        self.api.request("DELETE", DELETE_ID, &self.path())
    }
}

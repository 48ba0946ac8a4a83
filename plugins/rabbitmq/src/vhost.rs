//! `Vhost`: a virtual host. `PUT /api/vhosts/{vhost}` creates it,
//! `GET /api/vhosts/{vhost}?columns=name` sees it (404: absent), and
//! `DELETE` of the same URL removes it, with everything in it: so by
//! default (`deletionPolicy: Retain`) deleting the object leaves the vhost.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use setpoint_plugin_sdk::serde_json::{Value, json};
use setpoint_plugin_sdk::{
    Ctx, Definition, Error, HttpRequest, HttpResult, KindRef, PrinterColumn,
};

use crate::broker::{self, Api, check_name, encode};
use crate::decide::{DELETE_ID, Diff, Failure, Topology, WRITE_ID};
use crate::{API_VERSION, BrokerRef, DeletionPolicy, default_resync};

/// A RabbitMQ virtual host.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VhostSpec {
    /// The vhost's name in RabbitMQ (default: the object's name).
    pub name: Option<String>,
    /// The broker.
    pub broker: BrokerRef,
    /// Retain (default) leaves the vhost, and everything in it, when the object is deleted; Delete deletes it.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
    /// How often RabbitMQ is looked at again to repair changes made behind the object's back.
    #[serde(default = "default_resync")]
    #[schemars(range(min = 1))]
    pub resync_seconds: u64,
}

/// The vhost as RabbitMQ has it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VhostObserved {
    /// Its name.
    pub name: String,
}

/// A `Vhost` object's target.
#[derive(Clone, Debug, PartialEq)]
pub struct Vhost {
    /// The vhost's name.
    pub name: String,
    /// The broker.
    pub api: Api,
    /// What deleting the object does.
    pub deletion: DeletionPolicy,
    /// The resync period.
    pub resync: Duration,
}

/// The id of the vhost read.
pub const READ_ID: &str = "vhost";

/// The read that tells whether vhost `name` exists (`columns=name`: the
/// full answer carries message statistics the check does not need).
pub fn vhost_read(api: &Api, id: &str, name: &str, max_age: Duration) -> HttpRequest {
    api.read(
        id,
        &format!("/vhosts/{}?columns=name", encode(name)),
        max_age,
    )
}

/// `VhostMissing` naming it.
pub fn vhost_missing(name: &str, api: &Api) -> Failure {
    Failure::VhostMissing(format!(
        "vhost {name:?} does not exist in RabbitMQ at {} (yet)",
        api.base
    ))
}

/// What a read of one of a vhost's lists (its queues, exchanges or
/// bindings: one read shared by every object of the vhost that asks) shows
/// of one object, found in it by `find`; a 404 is the vhost missing.
pub fn find_in_vhost_list<O>(
    answer: &HttpResult,
    api: &Api,
    vhost: &str,
    what: &str,
    find: impl FnOnce(&[u8]) -> Result<Option<O>, String>,
) -> Result<Option<O>, Failure> {
    match api.read_answer(answer)? {
        Some(list) => find(&list.body).map_err(|e| api.garbled(what, e)),
        None => Err(vhost_missing(vhost, api)),
    }
}

impl Topology for Vhost {
    const KIND: &'static str = "Vhost";
    type Spec = VhostSpec;
    type Observed = VhostObserved;

    fn definition() -> Definition {
        crate::ready_columns(
            Definition::of::<VhostSpec, Value>(KindRef::new(API_VERSION, Self::KIND))
                .short_name("rmqvhost")
                .column(PrinterColumn::string("Broker", ".spec.broker.url")),
        )
    }

    fn from_spec(name: &str, spec: &VhostSpec) -> Result<Self, Failure> {
        let name = spec.name.clone().unwrap_or_else(|| name.to_owned());
        check_name("spec.name", &name)?;
        Ok(Self {
            name,
            api: Api::from_spec(&spec.broker)?,
            deletion: spec.deletion_policy,
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
        format!("vhost {:?}", self.name)
    }

    fn observe(
        &self,
        ctx: &Ctx,
        max_age: Duration,
    ) -> Result<Result<Option<VhostObserved>, Failure>, Error> {
        let answer = broker::fetch(ctx, &vhost_read(&self.api, READ_ID, &self.name, max_age))?;
        Ok(self.api.read_answer(&answer).map(|found| {
            found.map(|_| VhostObserved {
                name: self.name.clone(),
            })
        }))
    }

    fn diff(&self, _: &VhostObserved) -> Diff {
        Diff::Same
    }

    fn put(&self) -> HttpRequest {
        self.api.write(
            "PUT",
            WRITE_ID,
            &format!("/vhosts/{}", encode(&self.name)),
            &json!({}),
        )
    }

    fn delete(&self, _: &VhostObserved) -> HttpRequest {
        self.api.request(
            "DELETE",
            DELETE_ID,
            &format!("/vhosts/{}", encode(&self.name)),
        )
    }

    fn deletion_policy(&self) -> DeletionPolicy {
        self.deletion
    }

    fn retained_message(&self, _: Option<&VhostObserved>) -> String {
        format!(
            "{} stays in RabbitMQ with everything in it (deletionPolicy Retain)",
            self.describe()
        )
    }
}

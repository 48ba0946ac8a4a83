//! `Queue`: a queue in a vhost. Every queue of a vhost is seen through
//! ONE shared read, `GET /api/queues/{vhost}?columns=name,durable,
//! auto_delete,arguments,type,messages` (the host shares it among the
//! queues of the vhost: a thousand queues cost about two reads per resync
//! period, not a thousand); a 404 means the vhost does not exist.
//! `PUT /api/queues/{vhost}/{name}` declares it and `DELETE` removes it.
//!
//! Nothing about a queue changes in place: `durable`, `autoDelete`, its
//! type and its arguments are fixed when it is declared (a `PUT` with
//! other values is refused, "inequivalent arg"). A spec that changes one
//! is reported (`ImmutableChange`, with the queue's message count) unless
//! it sets `recreateOnChange`, which deletes the queue (its messages
//! too) and declares it again right after, in the same response. The type is declared as
//! the argument `x-queue-type`, which RabbitMQ lists among the arguments
//! only when it was given: the comparison leaves it out of both sides and
//! compares the `type` column.

use std::borrow::Cow;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use setpoint_plugin_sdk::serde_json::value::RawValue;
use setpoint_plugin_sdk::serde_json::{self, Map, Value, json};
use setpoint_plugin_sdk::{Ctx, Definition, Error, HttpRequest, KindRef, PrinterColumn};

use crate::broker::{self, Api, check_name, encode, same_json};
use crate::decide::{DELETE_ID, Diff, Failure, Topology, WRITE_ID};
use crate::vhost::find_in_vhost_list;
use crate::{API_VERSION, BrokerRef, DeletionPolicy, default_resync, default_vhost};

/// The argument that declares a queue's type.
pub const TYPE_ARGUMENT: &str = "x-queue-type";

/// A queue's type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum QueueType {
    /// A classic queue.
    #[default]
    Classic,
    /// A replicated quorum queue (durable, not auto-delete).
    Quorum,
    /// A stream.
    Stream,
}

impl QueueType {
    /// As RabbitMQ names it.
    pub fn as_str(self) -> &'static str {
        match self {
            QueueType::Classic => "classic",
            QueueType::Quorum => "quorum",
            QueueType::Stream => "stream",
        }
    }
}

fn yes() -> bool {
    true
}

/// A RabbitMQ queue.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueSpec {
    /// The queue's name in RabbitMQ (default: the object's name).
    pub name: Option<String>,
    /// The vhost it lives in.
    #[serde(default = "default_vhost")]
    pub vhost: String,
    /// classic, quorum or stream; fixed once declared.
    #[serde(default, rename = "type")]
    pub type_: QueueType,
    /// Whether it survives a broker restart; fixed once declared.
    #[serde(default = "yes")]
    pub durable: bool,
    /// Whether RabbitMQ deletes it when its last consumer goes; fixed once declared.
    #[serde(default)]
    pub auto_delete: bool,
    /// Optional arguments (x-max-length, x-message-ttl, ...); fixed once declared.
    #[serde(default)]
    pub arguments: Map<String, Value>,
    /// Whether a change of what is fixed once declared deletes the queue (and its messages) and declares it again; otherwise the change is reported and nothing is written.
    #[serde(default)]
    pub recreate_on_change: bool,
    /// Retain (default) leaves the queue and its messages in RabbitMQ when the object is deleted; Delete deletes it.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
    /// The broker.
    pub broker: BrokerRef,
    /// How often RabbitMQ is looked at again to repair changes made behind the object's back.
    #[serde(default = "default_resync")]
    #[schemars(range(min = 1))]
    pub resync_seconds: u64,
}

/// The queue as RabbitMQ has it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueObserved {
    /// Its type.
    #[serde(rename = "type")]
    pub type_: String,
    /// Durable.
    pub durable: bool,
    /// Auto-delete.
    pub auto_delete: bool,
    /// Its arguments, but `x-queue-type`.
    pub arguments: Map<String, Value>,
    /// Messages in it (ready and unacknowledged), when RabbitMQ's
    /// statistics have them yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages: Option<u64>,
}

/// A `Queue` object's target.
#[derive(Clone, Debug, PartialEq)]
pub struct Queue {
    /// The queue's name.
    pub name: String,
    /// Its vhost.
    pub vhost: String,
    /// Its type.
    pub type_: QueueType,
    /// Durable.
    pub durable: bool,
    /// Auto-delete.
    pub auto_delete: bool,
    /// Its arguments, but `x-queue-type`.
    pub arguments: Map<String, Value>,
    /// Re-create on an immutable change.
    pub recreate: bool,
    /// What deleting the object does.
    pub deletion: DeletionPolicy,
    /// The broker.
    pub api: Api,
    /// The resync period.
    pub resync: Duration,
}

/// The id of the vhost's queue list read.
pub const READ_ID: &str = "queues";

/// One queue of the list, the fields compared; borrowed from the answer's
/// text where it can be: every queue of a vhost parses the same list, so
/// this is most of a reconcile's work in a large vhost.
#[derive(Deserialize)]
struct QueueView<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default)]
    durable: bool,
    #[serde(default)]
    auto_delete: bool,
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
    #[serde(rename = "type", default)]
    type_: Option<String>,
    #[serde(default)]
    messages: Option<u64>,
}

/// The arguments without the type; the type they declare, if any.
fn split_type(mut arguments: Map<String, Value>) -> (Map<String, Value>, Option<Value>) {
    let type_ = arguments.remove(TYPE_ARGUMENT);
    (arguments, type_)
}

impl Queue {
    /// The queue's properties as RabbitMQ declares them (its type as the
    /// `x-queue-type` argument).
    fn declaration(&self) -> Value {
        let mut arguments = self.arguments.clone();
        arguments.insert(TYPE_ARGUMENT.into(), self.type_.as_str().into());
        json!({"durable": self.durable, "auto_delete": self.auto_delete, "arguments": arguments})
    }

    /// Find this queue in the vhost's list as the API answers it.
    pub fn find(&self, list: &[u8]) -> Result<Option<QueueObserved>, String> {
        let queues: Vec<QueueView<'_>> = serde_json::from_slice(list).map_err(|e| e.to_string())?;
        let Some(queue) = queues.into_iter().find(|q| q.name == self.name) else {
            return Ok(None);
        };
        let arguments = match queue.arguments {
            Some(raw) => serde_json::from_str::<Map<String, Value>>(raw.get())
                .map_err(|e| format!("arguments of queue {:?}: {e}", self.name))?,
            None => Map::new(),
        };
        let (arguments, declared) = split_type(arguments);
        let type_ = queue
            .type_
            .or_else(|| declared.and_then(|t| t.as_str().map(str::to_owned)))
            .unwrap_or_else(|| QueueType::Classic.as_str().to_owned());
        Ok(Some(QueueObserved {
            type_,
            durable: queue.durable,
            auto_delete: queue.auto_delete,
            arguments,
            messages: queue.messages,
        }))
    }

    fn path(&self) -> String {
        format!("/queues/{}/{}", encode(&self.vhost), encode(&self.name))
    }
}

/// `field (RabbitMQ: x, spec: y)`.
pub fn field_diff(
    field: &str,
    broker: impl std::fmt::Display,
    spec: impl std::fmt::Display,
) -> String {
    format!("{field} (RabbitMQ: {broker}, spec: {spec})")
}

/// Messages for messages: `12 messages`, or that they are not known.
fn messages(observed: Option<&QueueObserved>) -> String {
    match observed.and_then(|o| o.messages) {
        Some(1) => "1 message".into(),
        Some(n) => format!("{n} messages"),
        None => "an unknown number of messages (no statistics yet)".into(),
    }
}

impl Topology for Queue {
    const KIND: &'static str = "Queue";
    type Spec = QueueSpec;
    type Observed = QueueObserved;

    fn definition() -> Definition {
        crate::ready_columns(
            Definition::of::<QueueSpec, Value>(KindRef::new(API_VERSION, Self::KIND))
                .short_name("rmqq")
                .column(PrinterColumn::string("Vhost", ".spec.vhost"))
                .column(PrinterColumn::string("Type", ".spec.type"))
                .column(PrinterColumn::integer(
                    "Messages",
                    ".status.observed.messages",
                )),
        )
    }

    fn from_spec(name: &str, spec: &QueueSpec) -> Result<Self, Failure> {
        let name = spec.name.clone().unwrap_or_else(|| name.to_owned());
        check_name("spec.name", &name)?;
        check_name("spec.vhost", &spec.vhost)?;
        let (arguments, declared) = split_type(spec.arguments.clone());
        if let Some(declared) = declared
            && declared.as_str() != Some(spec.type_.as_str())
        {
            return Err(Failure::InvalidSpec(format!(
                "spec.arguments.{TYPE_ARGUMENT} is {declared} but spec.type is {:?}: \
                 set the type with spec.type",
                spec.type_.as_str()
            )));
        }
        Ok(Self {
            name,
            vhost: spec.vhost.clone(),
            type_: spec.type_,
            durable: spec.durable,
            auto_delete: spec.auto_delete,
            arguments,
            recreate: spec.recreate_on_change,
            deletion: spec.deletion_policy,
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
        format!("queue {:?} in vhost {:?}", self.name, self.vhost)
    }

    fn observe(
        &self,
        ctx: &Ctx,
        max_age: Duration,
    ) -> Result<Result<Option<QueueObserved>, Failure>, Error> {
        let read = self.api.read(
            READ_ID,
            &format!(
                "/queues/{}?columns=name,durable,auto_delete,arguments,type,messages",
                encode(&self.vhost)
            ),
            max_age,
        );
        let answer = broker::fetch(ctx, &read)?;
        Ok(find_in_vhost_list(
            &answer,
            &self.api,
            &self.vhost,
            "the vhost's queues",
            |list| self.find(list),
        ))
    }

    fn diff(&self, observed: &QueueObserved) -> Diff {
        let mut fields = Vec::new();
        if observed.type_ != self.type_.as_str() {
            fields.push(field_diff("type", &observed.type_, self.type_.as_str()));
        }
        if observed.durable != self.durable {
            fields.push(field_diff("durable", observed.durable, self.durable));
        }
        if observed.auto_delete != self.auto_delete {
            fields.push(field_diff(
                "autoDelete",
                observed.auto_delete,
                self.auto_delete,
            ));
        }
        let wanted = Value::Object(self.arguments.clone());
        let seen = Value::Object(observed.arguments.clone());
        if !same_json(&seen, &wanted) {
            fields.push(field_diff("arguments", &seen, &wanted));
        }
        if fields.is_empty() {
            Diff::Same
        } else {
            Diff::Immutable(fields)
        }
    }

    fn put(&self) -> HttpRequest {
        // Declared through the vhost's definitions, so that the host can
        // send the declarations waiting at once as one request (a vhost of a
        // thousand queues is a handful of requests, not a thousand). A queue
        // is never changed in place, so this only ever declares; RabbitMQ
        // leaves an existing queue as it is, which the next look sees.
        let mut queue = self.declaration();
        queue["name"] = json!(self.name);
        self.api
            .write(
                "POST",
                WRITE_ID,
                &format!("/definitions/{}", encode(&self.vhost)),
                &json!({ "queues": [queue] }),
            )
            .batch("/queues")
    }

    fn redeclare(&self) -> HttpRequest {
        self.api
            .write("PUT", WRITE_ID, &self.path(), &self.declaration())
    }

    fn delete(&self, _: &QueueObserved) -> HttpRequest {
        self.api.request("DELETE", DELETE_ID, &self.path())
    }

    fn deletion_policy(&self) -> DeletionPolicy {
        self.deletion
    }

    fn recreate_on_change(&self) -> bool {
        self.recreate
    }

    fn immutable_message(&self, observed: &QueueObserved, fields: &[String]) -> String {
        format!(
            "RabbitMQ cannot change {} of {} in place: {}. It holds {}. Nothing was \
             written: set recreateOnChange: true to delete and re-declare it (its messages \
             are lost), or delete the queue in RabbitMQ",
            if fields.len() == 1 { "this" } else { "these" },
            self.describe(),
            fields.join(", "),
            messages(Some(observed))
        )
    }

    fn recreate_message(&self, observed: &QueueObserved, fields: &[String]) -> String {
        format!(
            "re-creating {} (recreateOnChange): RabbitMQ cannot change {} in place; it holds \
             {}, which are lost: deleting it, then declaring it again",
            self.describe(),
            fields.join(", "),
            messages(Some(observed))
        )
    }

    fn retained_message(&self, observed: Option<&QueueObserved>) -> String {
        match observed {
            Some(observed) => format!(
                "{} stays in RabbitMQ with {} (deletionPolicy Retain)",
                self.describe(),
                messages(Some(observed))
            ),
            None => format!(
                "{} is not in RabbitMQ: nothing is left behind (deletionPolicy Retain)",
                self.describe()
            ),
        }
    }
}

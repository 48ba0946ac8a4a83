//! `Binding`: a binding from an exchange to a queue or another exchange.
//! RabbitMQ names a binding by its `properties_key`, which it derives from
//! the routing key and arguments; the plugin never remembers it but finds
//! the binding again at every look (after a host restart too) among the
//! vhost's bindings, `GET /api/bindings/{vhost}?columns=…`: the one
//! between the spec's ends with its routing key and arguments is this
//! object's. That read is one for every binding of the vhost (the host
//! shares it, as the queues' list), so a thousand bindings cost the broker
//! about two reads a resync period, not a thousand.
//!
//! Only when the binding is not found are the ends looked for, in the
//! vhost's lists of exchanges and queues (shared too), so the object
//! waits (`ExchangeMissing`, `DestinationMissing`) rather than having its
//! write refused. It is created through the vhost's definitions
//! (`POST /api/definitions/{vhost}` with `{"bindings": [...]}`), which the
//! host sends for many bindings waiting at once as one request
//! (`.batch("/bindings")`); `DELETE /api/bindings/{vhost}/e/{source}/
//! {q|e}/{destination}/{properties_key}` removes it. A binding is never
//! updated: a spec that changes the routing key, arguments or ends names
//! another binding, which is created; once it exists, the one the status
//! showed before is deleted (the status is the only record of it: RabbitMQ
//! does not say whose a binding is).

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use setpoint_plugin_sdk::serde_json::{self, Map, Value, json};
use setpoint_plugin_sdk::{
    Ctx, Definition, Error, HttpRequest, HttpResult, KindRef, PrinterColumn,
};

use crate::broker::{self, Api, check_name, encode, same_json};
use crate::decide::{DELETE_ID, Diff, Failure, Topology, WRITE_ID};
use crate::vhost::find_in_vhost_list;
use crate::{API_VERSION, BrokerRef, default_resync, default_vhost};

/// What a binding leads to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DestinationType {
    /// A queue.
    #[default]
    Queue,
    /// An exchange.
    Exchange,
}

impl DestinationType {
    /// As the API's paths name it.
    fn letter(self) -> &'static str {
        match self {
            DestinationType::Queue => "q",
            DestinationType::Exchange => "e",
        }
    }

    /// As RabbitMQ names it.
    fn as_str(self) -> &'static str {
        match self {
            DestinationType::Queue => "queue",
            DestinationType::Exchange => "exchange",
        }
    }
}

/// A RabbitMQ binding.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BindingSpec {
    /// The vhost of both ends.
    #[serde(default = "default_vhost")]
    pub vhost: String,
    /// The exchange messages come from.
    pub source: String,
    /// The queue or exchange they go to.
    pub destination: String,
    /// queue (default) or exchange.
    #[serde(default)]
    pub destination_type: DestinationType,
    /// The routing key.
    #[serde(default)]
    pub routing_key: String,
    /// Optional arguments (a headers exchange's x-match, ...).
    #[serde(default)]
    pub arguments: Map<String, Value>,
    /// The broker.
    pub broker: BrokerRef,
    /// How often RabbitMQ is looked at again to repair changes made behind the object's back.
    #[serde(default = "default_resync")]
    #[schemars(range(min = 1))]
    pub resync_seconds: u64,
}

/// The binding as RabbitMQ has it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BindingObserved {
    /// Its vhost.
    pub vhost: String,
    /// Its source exchange.
    pub source: String,
    /// Its destination.
    pub destination: String,
    /// What the destination is.
    pub destination_type: DestinationType,
    /// Its routing key.
    pub routing_key: String,
    /// Its arguments.
    pub arguments: Map<String, Value>,
    /// The name RabbitMQ gives it.
    pub properties_key: String,
}

/// A `Binding` object's target.
#[derive(Clone, Debug, PartialEq)]
pub struct Binding {
    /// The vhost.
    pub vhost: String,
    /// The source exchange.
    pub source: String,
    /// The destination.
    pub destination: String,
    /// What the destination is.
    pub destination_type: DestinationType,
    /// The routing key.
    pub routing_key: String,
    /// The arguments.
    pub arguments: Map<String, Value>,
    /// The broker.
    pub api: Api,
    /// The resync period.
    pub resync: Duration,
}

/// The id of the read of the bindings between the two ends.
pub const READ_ID: &str = "bindings";
/// The id of the read of the source exchange.
pub const SOURCE_ID: &str = "source";
/// The id of the read of the destination.
pub const DESTINATION_ID: &str = "destination";

#[derive(Deserialize)]
struct BindingView {
    #[serde(default)]
    source: String,
    #[serde(default)]
    destination: String,
    #[serde(default)]
    destination_type: String,
    #[serde(default)]
    routing_key: String,
    #[serde(default)]
    arguments: Map<String, Value>,
    #[serde(default)]
    properties_key: String,
}

/// The URL path of the bindings between two ends.
fn bindings_path(
    vhost: &str,
    source: &str,
    destination_type: DestinationType,
    destination: &str,
) -> String {
    format!(
        "/bindings/{}/e/{}/{}/{}",
        encode(vhost),
        encode(source),
        destination_type.letter(),
        encode(destination)
    )
}

/// The columns of the vhost's bindings the plugin reads.
const COLUMNS: &str = "source,destination,destination_type,routing_key,arguments,properties_key";

impl Binding {
    /// The read of every binding of the vhost, shared by its bindings.
    fn list_path(&self) -> String {
        format!("/bindings/{}?columns={COLUMNS}", encode(&self.vhost))
    }

    /// Find this binding among the vhost's, as the API lists them: the one
    /// between the spec's ends with its routing key and arguments.
    pub fn find(&self, list: &[u8]) -> Result<Option<BindingObserved>, String> {
        let bindings: Vec<BindingView> = serde_json::from_slice(list).map_err(|e| e.to_string())?;
        let wanted = Value::Object(self.arguments.clone());
        Ok(bindings
            .into_iter()
            .find(|b| {
                b.source == self.source
                    && b.destination == self.destination
                    && b.destination_type == self.destination_type.as_str()
                    && b.routing_key == self.routing_key
                    && same_json(&Value::Object(b.arguments.clone()), &wanted)
            })
            .map(|b| BindingObserved {
                vhost: self.vhost.clone(),
                source: self.source.clone(),
                destination: self.destination.clone(),
                destination_type: self.destination_type,
                routing_key: b.routing_key,
                arguments: b.arguments,
                properties_key: b.properties_key,
            }))
    }

    /// The reads of both ends, asked for when the binding is not found:
    /// the vhost's lists of exchanges and of queues (or exchanges again),
    /// names only, shared by every binding that looks.
    pub fn end_reads(&self, max_age: Duration) -> [HttpRequest; 2] {
        let vhost = encode(&self.vhost);
        let destination = match self.destination_type {
            DestinationType::Queue => "queues",
            DestinationType::Exchange => "exchanges",
        };
        [
            self.api.read(
                SOURCE_ID,
                &format!("/exchanges/{vhost}?columns=name"),
                max_age,
            ),
            self.api.read(
                DESTINATION_ID,
                &format!("/{destination}/{vhost}?columns=name"),
                max_age,
            ),
        ]
    }

    /// Whether a vhost's list of names (`[{"name": ...}]`) holds `name`.
    fn lists(&self, answer: &HttpResult, name: &str) -> Result<bool, Failure> {
        let found =
            find_in_vhost_list(answer, &self.api, &self.vhost, "the vhost's list", |list| {
                let names: Vec<Value> = serde_json::from_slice(list).map_err(|e| e.to_string())?;
                Ok(names.iter().find(|n| n["name"] == name).map(|_| ()))
            })?;
        Ok(found.is_some())
    }

    /// What the reads of the ends tell: `Ok` when both exist.
    pub fn ends(&self, source: &HttpResult, destination: &HttpResult) -> Result<(), Failure> {
        if !self.lists(source, &self.source)? {
            return Err(Failure::ExchangeMissing(format!(
                "the source exchange {:?} does not exist in vhost {:?} (yet)",
                self.source, self.vhost
            )));
        }
        if !self.lists(destination, &self.destination)? {
            return Err(Failure::DestinationMissing(format!(
                "the destination {} {:?} does not exist in vhost {:?} (yet)",
                self.destination_type.as_str(),
                self.destination,
                self.vhost
            )));
        }
        Ok(())
    }
}

impl Topology for Binding {
    const KIND: &'static str = "Binding";
    type Spec = BindingSpec;
    type Observed = BindingObserved;

    fn definition() -> Definition {
        crate::ready_columns(
            Definition::of::<BindingSpec, Value>(KindRef::new(API_VERSION, Self::KIND))
                .short_name("rmqb")
                .column(PrinterColumn::string("Vhost", ".spec.vhost"))
                .column(PrinterColumn::string("Source", ".spec.source"))
                .column(PrinterColumn::string("Destination", ".spec.destination"))
                .column(PrinterColumn::string("RoutingKey", ".spec.routingKey")),
        )
    }

    fn from_spec(_: &str, spec: &BindingSpec) -> Result<Self, Failure> {
        check_name("spec.vhost", &spec.vhost)?;
        if spec.source.is_empty() {
            return Err(Failure::InvalidSpec(
                "spec.source is empty: the default exchange cannot be bound".into(),
            ));
        }
        check_name("spec.source", &spec.source)?;
        check_name("spec.destination", &spec.destination)?;
        Ok(Self {
            vhost: spec.vhost.clone(),
            source: spec.source.clone(),
            destination: spec.destination.clone(),
            destination_type: spec.destination_type,
            routing_key: spec.routing_key.clone(),
            arguments: spec.arguments.clone(),
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
            "binding from exchange {:?} to {} {:?} with routing key {:?} in vhost {:?}",
            self.source,
            self.destination_type.as_str(),
            self.destination,
            self.routing_key,
            self.vhost
        )
    }

    fn observe(
        &self,
        ctx: &Ctx,
        max_age: Duration,
    ) -> Result<Result<Option<BindingObserved>, Failure>, Error> {
        let answer = broker::fetch(ctx, &self.api.read(READ_ID, &self.list_path(), max_age))?;
        let found = find_in_vhost_list(&answer, &self.api, &self.vhost, "the bindings", |list| {
            self.find(list)
        });
        // Not there: whether it can be made is known only from its ends.
        // (Deleting, nothing is made: no need to know.)
        if !matches!(found, Ok(None)) || ctx.finalizing() {
            return Ok(found);
        }
        let answers = broker::fetch_all(ctx, &self.end_reads(max_age))?;
        Ok(self.ends(&answers[0], &answers[1]).map(|()| None))
    }

    fn diff(&self, _: &BindingObserved) -> Diff {
        // Found means found with the spec's routing key and arguments.
        Diff::Same
    }

    fn put(&self) -> HttpRequest {
        // Through the vhost's definitions, so that the host can send the
        // bindings waiting at once as one request. (A definition RabbitMQ
        // cannot take fails the whole request, which the host then sends
        // again one binding at a time, so each learns its own answer.)
        self.api
            .write(
                "POST",
                WRITE_ID,
                &format!("/definitions/{}", encode(&self.vhost)),
                &json!({"bindings": [{
                    "source": self.source,
                    "destination": self.destination,
                    "destination_type": self.destination_type.as_str(),
                    "routing_key": self.routing_key,
                    "arguments": self.arguments,
                }]}),
            )
            .batch("/bindings")
    }

    fn delete(&self, observed: &BindingObserved) -> HttpRequest {
        // The key as listed is already in the form RabbitMQ puts in its
        // URLs (`a%2Fb`); encoded once more, as the official clients do,
        // RabbitMQ decodes it back to that form. Both find the binding,
        // checked against RabbitMQ 3.10.
        self.api.request(
            "DELETE",
            DELETE_ID,
            &format!(
                "{}/{}",
                bindings_path(
                    &observed.vhost,
                    &observed.source,
                    observed.destination_type,
                    &observed.destination
                ),
                encode(&observed.properties_key)
            ),
        )
    }

    const REPLACED_BY_SPEC: bool = true;

    fn superseded(
        &self,
        previous: &BindingObserved,
        current: &BindingObserved,
    ) -> Option<HttpRequest> {
        // A binding is never changed, only replaced: once the spec's
        // binding exists, the one the status last showed (another routing
        // key, arguments or ends) is this object's no more.
        (previous != current).then(|| self.delete(previous))
    }
}

//! `Exchange`: an exchange in a vhost. Like queues, every exchange of a
//! vhost is seen through one shared read, `GET /api/exchanges/{vhost}`
//! (only the columns compared), 404 meaning the vhost does not exist;
//! `PUT /api/exchanges/{vhost}/{name}` declares it and `DELETE` removes
//! it. Its type, `durable`, `autoDelete` and arguments are fixed once
//! declared: a change is reported (`ImmutableChange`) unless the object
//! sets `recreateOnChange` (which deletes it, and so its bindings, and
//! declares it again right after, in the same response).

use std::borrow::Cow;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use setpoint_plugin_sdk::serde_json::value::RawValue;
use setpoint_plugin_sdk::serde_json::{self, Map, Value, json};
use setpoint_plugin_sdk::{Ctx, Definition, Error, HttpRequest, KindRef, PrinterColumn};

use crate::broker::{self, Api, check_name, encode, same_json};
use crate::decide::{DELETE_ID, Diff, Failure, Topology, WRITE_ID};
use crate::queue::field_diff;
use crate::vhost::find_in_vhost_list;
use crate::{API_VERSION, BrokerRef, default_resync, default_vhost};

fn yes() -> bool {
    true
}

fn direct() -> String {
    "direct".into()
}

/// A RabbitMQ exchange.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExchangeSpec {
    /// The exchange's name in RabbitMQ (default: the object's name).
    pub name: Option<String>,
    /// The vhost it lives in.
    #[serde(default = "default_vhost")]
    pub vhost: String,
    /// direct, fanout, topic, headers, or a type a broker plugin adds; fixed once declared.
    #[serde(default = "direct", rename = "type")]
    pub type_: String,
    /// Whether it survives a broker restart; fixed once declared.
    #[serde(default = "yes")]
    pub durable: bool,
    /// Whether RabbitMQ deletes it when its last binding goes; fixed once declared.
    #[serde(default)]
    pub auto_delete: bool,
    /// Optional arguments (alternate-exchange, ...); fixed once declared.
    #[serde(default)]
    pub arguments: Map<String, Value>,
    /// Whether a change of what is fixed once declared deletes the exchange (and its bindings) and declares it again; otherwise the change is reported and nothing is written.
    #[serde(default)]
    pub recreate_on_change: bool,
    /// The broker.
    pub broker: BrokerRef,
    /// How often RabbitMQ is looked at again to repair changes made behind the object's back.
    #[serde(default = "default_resync")]
    #[schemars(range(min = 1))]
    pub resync_seconds: u64,
}

/// The exchange as RabbitMQ has it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExchangeObserved {
    /// Its type.
    #[serde(rename = "type")]
    pub type_: String,
    /// Durable.
    pub durable: bool,
    /// Auto-delete.
    pub auto_delete: bool,
    /// Its arguments.
    pub arguments: Map<String, Value>,
}

/// An `Exchange` object's target.
#[derive(Clone, Debug, PartialEq)]
pub struct Exchange {
    /// The exchange's name.
    pub name: String,
    /// Its vhost.
    pub vhost: String,
    /// What is wanted.
    pub wanted: ExchangeObserved,
    /// Re-create on an immutable change.
    pub recreate: bool,
    /// The broker.
    pub api: Api,
    /// The resync period.
    pub resync: Duration,
}

/// The id of the vhost's exchange list read.
pub const READ_ID: &str = "exchanges";

/// One exchange of the list, borrowed from the answer where it can be.
#[derive(Deserialize)]
struct ExchangeView<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(rename = "type", default)]
    type_: String,
    #[serde(default)]
    durable: bool,
    #[serde(default)]
    auto_delete: bool,
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
}

/// Check an exchange name the plugin may declare or bind: the default
/// exchange (`""`) and the `amq.` ones are the broker's.
pub fn check_exchange_name(field: &str, name: &str, declaring: bool) -> Result<(), Failure> {
    check_name(field, name)?;
    if declaring && name.starts_with("amq.") {
        return Err(Failure::InvalidSpec(format!(
            "{field} {name:?}: names starting with amq. are reserved by RabbitMQ"
        )));
    }
    Ok(())
}

impl Exchange {
    /// Find this exchange in the vhost's list as the API answers it.
    pub fn find(&self, list: &[u8]) -> Result<Option<ExchangeObserved>, String> {
        let exchanges: Vec<ExchangeView<'_>> =
            serde_json::from_slice(list).map_err(|e| e.to_string())?;
        let Some(exchange) = exchanges.into_iter().find(|e| e.name == self.name) else {
            return Ok(None);
        };
        let arguments = match exchange.arguments {
            Some(raw) => serde_json::from_str::<Map<String, Value>>(raw.get())
                .map_err(|e| format!("arguments of exchange {:?}: {e}", self.name))?,
            None => Map::new(),
        };
        Ok(Some(ExchangeObserved {
            type_: exchange.type_,
            durable: exchange.durable,
            auto_delete: exchange.auto_delete,
            arguments,
        }))
    }

    fn path(&self) -> String {
        format!("/exchanges/{}/{}", encode(&self.vhost), encode(&self.name))
    }
}

impl Topology for Exchange {
    const KIND: &'static str = "Exchange";
    type Spec = ExchangeSpec;
    type Observed = ExchangeObserved;

    fn definition() -> Definition {
        crate::ready_columns(
            Definition::of::<ExchangeSpec, Value>(KindRef::new(API_VERSION, Self::KIND))
                .short_name("rmqx")
                .column(PrinterColumn::string("Vhost", ".spec.vhost"))
                .column(PrinterColumn::string("Type", ".spec.type")),
        )
    }

    fn from_spec(name: &str, spec: &ExchangeSpec) -> Result<Self, Failure> {
        let name = spec.name.clone().unwrap_or_else(|| name.to_owned());
        check_exchange_name("spec.name", &name, true)?;
        check_name("spec.vhost", &spec.vhost)?;
        let type_ = spec.type_.trim().to_owned();
        if type_.is_empty() {
            return Err(Failure::InvalidSpec("spec.type is empty".into()));
        }
        Ok(Self {
            name,
            vhost: spec.vhost.clone(),
            wanted: ExchangeObserved {
                type_,
                durable: spec.durable,
                auto_delete: spec.auto_delete,
                arguments: spec.arguments.clone(),
            },
            recreate: spec.recreate_on_change,
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
        format!("exchange {:?} in vhost {:?}", self.name, self.vhost)
    }

    fn observe(
        &self,
        ctx: &Ctx,
        max_age: Duration,
    ) -> Result<Result<Option<ExchangeObserved>, Failure>, Error> {
        let read = self.api.read(
            READ_ID,
            &format!(
                "/exchanges/{}?columns=name,type,durable,auto_delete,arguments",
                encode(&self.vhost)
            ),
            max_age,
        );
        let answer = broker::fetch(ctx, &read)?;
        Ok(find_in_vhost_list(
            &answer,
            &self.api,
            &self.vhost,
            "the vhost's exchanges",
            |list| self.find(list),
        ))
    }

    fn diff(&self, observed: &ExchangeObserved) -> Diff {
        let wanted = &self.wanted;
        let mut fields = Vec::new();
        if observed.type_ != wanted.type_ {
            fields.push(field_diff("type", &observed.type_, &wanted.type_));
        }
        if observed.durable != wanted.durable {
            fields.push(field_diff("durable", observed.durable, wanted.durable));
        }
        if observed.auto_delete != wanted.auto_delete {
            fields.push(field_diff(
                "autoDelete",
                observed.auto_delete,
                wanted.auto_delete,
            ));
        }
        let want = Value::Object(wanted.arguments.clone());
        let seen = Value::Object(observed.arguments.clone());
        if !same_json(&seen, &want) {
            fields.push(field_diff("arguments", &seen, &want));
        }
        if fields.is_empty() {
            Diff::Same
        } else {
            Diff::Immutable(fields)
        }
    }

    fn put(&self) -> HttpRequest {
        let wanted = &self.wanted;
        self.api.write(
            "PUT",
            WRITE_ID,
            &self.path(),
            &json!({"type": wanted.type_, "durable": wanted.durable,
                    "auto_delete": wanted.auto_delete, "internal": false,
                    "arguments": wanted.arguments}),
        )
    }

    fn delete(&self, _: &ExchangeObserved) -> HttpRequest {
        self.api.request("DELETE", DELETE_ID, &self.path())
    }

    fn recreate_on_change(&self) -> bool {
        self.recreate
    }
}

//! `Policy`: a policy in a vhost (a pattern, what it applies to, a
//! priority, a definition of settings). `GET /api/policies/{vhost}/{name}`
//! sees it (404: absent, or no such vhost, which is then read to tell);
//! `PUT` of the same URL creates or updates it in place; `DELETE` removes
//! it. A definition RabbitMQ does not accept is refused with 400
//! ("Validation failed ..."): `Rejected`, with its reason.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use setpoint_plugin_sdk::serde_json::{self, Map, Value, json};
use setpoint_plugin_sdk::{Ctx, Definition, Error, HttpRequest, KindRef, PrinterColumn};

use crate::broker::{self, Api, check_name, encode, same_json};
use crate::decide::{DELETE_ID, Diff, Failure, Topology, WRITE_ID};
use crate::vhost::{vhost_missing, vhost_read};
use crate::{API_VERSION, BrokerRef, default_resync, default_vhost};

/// What a policy applies to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ApplyTo {
    /// Queues.
    Queues,
    /// Exchanges.
    Exchanges,
    /// Both.
    #[default]
    All,
}

impl ApplyTo {
    /// As RabbitMQ names it.
    pub fn as_str(self) -> &'static str {
        match self {
            ApplyTo::Queues => "queues",
            ApplyTo::Exchanges => "exchanges",
            ApplyTo::All => "all",
        }
    }
}

/// A RabbitMQ policy.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicySpec {
    /// The policy's name in RabbitMQ (default: the object's name).
    pub name: Option<String>,
    /// The vhost.
    #[serde(default = "default_vhost")]
    pub vhost: String,
    /// A regular expression: the names of the queues or exchanges it applies to.
    pub pattern: String,
    /// queues, exchanges or all (default).
    #[serde(default)]
    pub apply_to: ApplyTo,
    /// Of the policies matching a name, the one of the highest priority applies.
    #[serde(default)]
    pub priority: i64,
    /// The settings (max-length, message-ttl, dead-letter-exchange, ...).
    #[schemars(extend("minProperties" = 1))]
    pub definition: Map<String, Value>,
    /// The broker.
    pub broker: BrokerRef,
    /// How often RabbitMQ is looked at again to repair changes made behind the object's back.
    #[serde(default = "default_resync")]
    #[schemars(range(min = 1))]
    pub resync_seconds: u64,
}

/// The policy as RabbitMQ has it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyObserved {
    /// The pattern.
    pub pattern: String,
    /// What it applies to.
    pub apply_to: String,
    /// Its priority.
    pub priority: i64,
    /// Its definition.
    pub definition: Map<String, Value>,
}

/// A policy as the API answers it.
#[derive(Deserialize)]
struct PolicyView {
    #[serde(default)]
    pattern: String,
    #[serde(rename = "apply-to", default)]
    apply_to: String,
    #[serde(default)]
    priority: i64,
    #[serde(default)]
    definition: Map<String, Value>,
}

/// A `Policy` object's target.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// The policy's name.
    pub name: String,
    /// Its vhost.
    pub vhost: String,
    /// What is wanted.
    pub wanted: PolicyObserved,
    /// The broker.
    pub api: Api,
    /// The resync period.
    pub resync: Duration,
}

/// The id of the policy read.
pub const READ_ID: &str = "policy";
/// The id of the vhost read (when there is no policy).
pub const VHOST_ID: &str = "vhost";

impl Policy {
    fn path(&self) -> String {
        format!("/policies/{}/{}", encode(&self.vhost), encode(&self.name))
    }
}

impl Topology for Policy {
    const KIND: &'static str = "Policy";
    type Spec = PolicySpec;
    type Observed = PolicyObserved;

    fn definition() -> Definition {
        crate::ready_columns(
            Definition::of::<PolicySpec, Value>(KindRef::new(API_VERSION, Self::KIND))
                .plural("policies")
                .short_name("rmqpol")
                .column(PrinterColumn::string("Vhost", ".spec.vhost"))
                .column(PrinterColumn::string("Pattern", ".spec.pattern"))
                .column(PrinterColumn::string("ApplyTo", ".spec.applyTo")),
        )
    }

    fn from_spec(name: &str, spec: &PolicySpec) -> Result<Self, Failure> {
        let name = spec.name.clone().unwrap_or_else(|| name.to_owned());
        check_name("spec.name", &name)?;
        check_name("spec.vhost", &spec.vhost)?;
        if spec.definition.is_empty() {
            return Err(Failure::InvalidSpec(
                "spec.definition is empty: a policy needs at least one setting".into(),
            ));
        }
        Ok(Self {
            name,
            vhost: spec.vhost.clone(),
            wanted: PolicyObserved {
                pattern: spec.pattern.clone(),
                apply_to: spec.apply_to.as_str().to_owned(),
                priority: spec.priority,
                definition: spec.definition.clone(),
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
        format!("policy {:?} in vhost {:?}", self.name, self.vhost)
    }

    fn observe(
        &self,
        ctx: &Ctx,
        max_age: Duration,
    ) -> Result<Result<Option<PolicyObserved>, Failure>, Error> {
        let answer = broker::fetch(ctx, &self.api.read(READ_ID, &self.path(), max_age))?;
        match self.api.read_answer(&answer) {
            Ok(Some(found)) => {
                return Ok(serde_json::from_slice::<PolicyView>(&found.body)
                    .map(|p| {
                        Some(PolicyObserved {
                            pattern: p.pattern,
                            apply_to: p.apply_to,
                            priority: p.priority,
                            definition: p.definition,
                        })
                    })
                    .map_err(|e| self.api.garbled("the policy", e)));
            }
            Ok(None) if !ctx.finalizing() => {}
            other => return Ok(other.map(|_| None)),
        }
        let answer = broker::fetch(ctx, &vhost_read(&self.api, VHOST_ID, &self.vhost, max_age))?;
        Ok(match self.api.read_answer(&answer) {
            Ok(Some(_)) => Ok(None),
            Ok(None) => Err(vhost_missing(&self.vhost, &self.api)),
            Err(failure) => Err(failure),
        })
    }

    fn diff(&self, observed: &PolicyObserved) -> Diff {
        let wanted = &self.wanted;
        let mut differs = Vec::new();
        if observed.pattern != wanted.pattern {
            differs.push(format!("pattern {:?}", observed.pattern));
        }
        if observed.apply_to != wanted.apply_to {
            differs.push(format!("apply-to {:?}", observed.apply_to));
        }
        if observed.priority != wanted.priority {
            differs.push(format!("priority {}", observed.priority));
        }
        let seen = Value::Object(observed.definition.clone());
        if !same_json(&seen, &Value::Object(wanted.definition.clone())) {
            differs.push(format!("definition {seen}"));
        }
        if differs.is_empty() {
            Diff::Same
        } else {
            Diff::Mutable(differs.join(", "))
        }
    }

    fn put(&self) -> HttpRequest {
        let wanted = &self.wanted;
        self.api.write(
            "PUT",
            WRITE_ID,
            &self.path(),
            &json!({"pattern": wanted.pattern, "apply-to": wanted.apply_to,
                    "priority": wanted.priority, "definition": wanted.definition}),
        )
    }

    fn delete(&self, _: &PolicyObserved) -> HttpRequest {
        self.api.request("DELETE", DELETE_ID, &self.path())
    }
}

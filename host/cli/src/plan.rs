//! `setpoint plan`: what applying a manifest (`-f FILE`) or deleting an
//! object (`--delete KIND NAME`) would do, asked of the host
//! (`POST /setpoint/v1/plan`) and shown as a `+ ~ -` tree, or as JSON.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Context;
use serde_json::json;

use super::manifest::read_documents;
use super::remote::Client;
use setpoint::plan::{Document, Plan, PlanError, RenderOptions, render};

/// How to show a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PlanFormat {
    /// For people: a summary, then each object's changed fields.
    Text,
    /// The whole plan as JSON, for programs.
    Json,
}

/// What happens to dependents in a planned deletion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CascadePolicy {
    /// The object now, its dependents afterwards (the default).
    Background,
    /// Its dependents first.
    Foreground,
    /// Keep the dependents.
    Orphan,
}

impl CascadePolicy {
    fn as_str(self) -> &'static str {
        match self {
            CascadePolicy::Background => "Background",
            CascadePolicy::Foreground => "Foreground",
            CascadePolicy::Orphan => "Orphan",
        }
    }
}

/// The plan of applying `files`: documents that cannot be read are
/// errors of the plan, and the rest is planned.
pub async fn plan_apply(client: &Client, files: &[PathBuf]) -> anyhow::Result<Plan> {
    let mut documents = Vec::new();
    let mut unreadable = Vec::new();
    for file in files {
        let (manifests, errors) = read_documents(file)?;
        documents.extend(manifests.into_iter().map(|m| Document {
            origin: m.origin(),
            object: m.object,
        }));
        unreadable.extend(errors.into_iter().map(|(origin, message)| PlanError {
            object: None,
            origin,
            message,
        }));
    }
    let mut plan = if documents.is_empty() {
        Plan::default()
    } else {
        ask(client, &json!({"apply": documents})).await?
    };
    plan.errors.splice(0..0, unreadable);
    Ok(plan)
}

/// The plan of deleting one object.
pub async fn plan_delete(
    client: &Client,
    kind: &str,
    name: &str,
    namespace: &str,
    cascade: CascadePolicy,
) -> anyhow::Result<Plan> {
    let resource = client.resolve(kind).await?;
    ask(
        client,
        &json!({"delete": {
            "apiVersion": resource.api_version(),
            "kind": resource.kind,
            "namespace": resource.namespaced.then_some(namespace),
            "name": name,
            "propagationPolicy": cascade.as_str(),
        }}),
    )
    .await
}

async fn ask(client: &Client, body: &serde_json::Value) -> anyhow::Result<Plan> {
    let answer = client.post_json("/setpoint/v1/plan", body).await?;
    serde_json::from_value(answer).context("reading the host's plan")
}

/// Print `plan` as asked; colour only on a terminal (and not with
/// `NO_COLOR`).
pub fn print(plan: &Plan, format: PlanFormat) -> anyhow::Result<()> {
    match format {
        PlanFormat::Json => outln!("{}", serde_json::to_string_pretty(plan)?),
        PlanFormat::Text => {
            let color = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            out!("{}", render(plan, RenderOptions { color }));
        }
    }
    Ok(())
}

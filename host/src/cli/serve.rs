//! `setpoint serve`: run a host with its plugins and HTTP API until Ctrl-C.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;

use crate::Host;

/// Arguments of `setpoint serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Address of the HTTP API (loopback only).
    #[arg(long, default_value = super::DEFAULT_ADDR)]
    pub addr: SocketAddr,
    /// Directory of `*.wasm` reconcile plugins.
    #[arg(long, default_value = "plugins")]
    pub plugins: PathBuf,
    /// Reconcile workers per plugin.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
}

pub(super) fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SETPOINT_LOG").unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new("info,wasmtime=warn,cranelift=warn")
            }),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let listener = crate::server::bind_loopback(args.addr)
            .await
            .with_context(|| format!("cannot listen on {}", args.addr))?;
        let addr = listener.local_addr()?;
        let controller = crate::controller::Config { workers: args.workers, ..Default::default() };
        let host = Host::builder()
            .plugins_dir(&args.plugins)
            .controller(controller)
            .build()
            .await
            .context("starting the host")?;
        for plugin in host.plugins().await {
            match &plugin.state {
                crate::plugins::PluginState::Running => tracing::info!(
                    plugin = %plugin.name, kind = plugin.kind.as_deref().unwrap_or(""), "loaded {}", plugin.path.display()),
                crate::plugins::PluginState::Failed(reason) => tracing::error!(
                    plugin = %plugin.name, "{} failed: {reason}", plugin.path.display()),
            }
        }
        let host = Arc::new(host);
        eprintln!("Setpoint API listening on http://{addr} (in-memory store; plugins from {})", args.plugins.display());
        eprintln!("Try: setpoint --server http://{addr} get replicasets");
        let shutdown = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        crate::server::serve(listener, host.clone(), shutdown).await.context("serving the API")?;
        eprintln!("shutting down: letting in-flight reconciles finish");
        host.shutdown().await;
        Ok(ExitCode::SUCCESS)
    })
}

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
    /// Data directory of the durable embedded store.
    #[arg(long, default_value = ".setpoint/data", conflicts_with = "in_memory")]
    pub data: PathBuf,
    /// Keep everything in memory instead (nothing survives a restart).
    #[arg(long)]
    pub in_memory: bool,
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
        let (backend, store_description): (Arc<dyn crate::store::Backend>, String) = if args.in_memory {
            (Arc::new(crate::store::MemoryBackend::new()), "in-memory store".into())
        } else {
            let dir = args.data.clone();
            // Opening checks the whole file: keep it off the async threads.
            let store = tokio::task::spawn_blocking(move || crate::store::EmbeddedBackend::open(&dir))
                .await?
                .with_context(|| format!("cannot open the data directory {}", args.data.display()))?;
            (Arc::new(store), format!("embedded store in {}", args.data.display()))
        };
        let host = Host::builder()
            .backend(backend)
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
        eprintln!("Setpoint API listening on http://{addr} ({store_description}; plugins from {})", args.plugins.display());
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

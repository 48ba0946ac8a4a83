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
    #[arg(long, conflicts_with = "etcd")]
    pub in_memory: bool,
    /// Store everything in etcd instead, at these client URLs (comma-separated);
    /// several hosts may share one etcd cluster.
    #[arg(long, value_delimiter = ',')]
    pub etcd: Vec<String>,
    /// Key prefix in etcd, so several Setpoint installations can share a cluster.
    #[arg(long, default_value = "")]
    pub etcd_prefix: String,
    /// etcd user name (with `SETPOINT_ETCD_PASSWORD`), when etcd has authentication on.
    #[arg(long, env = "SETPOINT_ETCD_USER")]
    pub etcd_user: Option<String>,
    /// PEM file of the CA that signed etcd's certificate (enables TLS).
    #[arg(long)]
    pub etcd_ca: Option<PathBuf>,
    /// PEM client certificate and key for etcd (mutual TLS).
    #[arg(long, num_args = 2, value_names = ["CERT", "KEY"])]
    pub etcd_client_cert: Vec<PathBuf>,
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
        } else if !args.etcd.is_empty() {
            let read = |p: &PathBuf| std::fs::read(p).with_context(|| format!("cannot read {}", p.display()));
            let config = crate::store::EtcdConfig {
                endpoints: args.etcd.clone(),
                prefix: args.etcd_prefix.clone(),
                user: match &args.etcd_user {
                    Some(user) => Some((
                        user.clone(),
                        std::env::var("SETPOINT_ETCD_PASSWORD").context("SETPOINT_ETCD_PASSWORD is not set")?,
                    )),
                    None => None,
                },
                ca_pem: args.etcd_ca.as_ref().map(read).transpose()?,
                client_identity_pem: match args.etcd_client_cert.as_slice() {
                    [cert, key] => Some((read(cert)?, read(key)?)),
                    _ => None,
                },
            };
            let store = crate::store::EtcdBackend::connect(config)
                .await
                .with_context(|| format!("cannot connect to etcd at {}", args.etcd.join(",")))?;
            (Arc::new(store), format!("etcd at {}", args.etcd.join(",")))
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

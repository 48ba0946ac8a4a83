//! `setpoint serve`: run a host with its plugins and HTTP API until Ctrl-C,
//! and print how to point kubectl at it.
//!
//! Without `--tokens` the API is open and binds loopback only. With
//! `--tokens FILE` callers need a bearer token from that file (created with
//! one administrator token when missing), any address may be used, and a
//! kubeconfig carrying the first token is written beside the file.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;

use crate::Host;
use crate::server::auth::Tokens;

/// Arguments of `setpoint serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Address of the HTTP API (loopback only unless `--tokens` is given).
    #[arg(long, default_value = super::DEFAULT_ADDR)]
    pub addr: SocketAddr,
    /// Bearer tokens file (see docs/api.md); created with an administrator
    /// token if missing. Required to listen on a non-loopback address.
    #[arg(long)]
    pub tokens: Option<PathBuf>,
    /// Where to write a kubeconfig for the first token (default: beside the
    /// tokens file).
    #[arg(long, requires = "tokens")]
    pub kubeconfig: Option<PathBuf>,
    /// Requests (other than watches) handled at once; more are answered 429.
    #[arg(long, default_value_t = 400)]
    pub max_in_flight: usize,
    /// Requests per second allowed per user (0: unlimited); more are answered 429.
    #[arg(long, default_value_t = 0.0)]
    pub rate_limit_qps: f64,
    /// Burst allowed per user above `--rate-limit-qps`.
    #[arg(long, default_value_t = 100)]
    pub rate_limit_burst: u32,
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
        let tokens = match &args.tokens {
            Some(path) => Some(Arc::new(load_or_generate_tokens(path)?)),
            None => None,
        };
        let listener = crate::server::bind(args.addr, tokens.is_some())
            .await
            .with_context(|| format!("cannot listen on {}", args.addr))?;
        let addr = listener.local_addr()?;
        let config = crate::server::Config {
            tokens: tokens.clone(),
            max_in_flight: args.max_in_flight,
            rate_limit: (args.rate_limit_qps > 0.0).then_some(crate::server::RateLimit {
                qps: args.rate_limit_qps,
                burst: args.rate_limit_burst.max(1),
            }),
            ..Default::default()
        };
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
        print_instructions(&args, addr, tokens.as_deref())?;
        let shutdown = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        crate::server::serve_with(listener, host.clone(), config, shutdown).await.context("serving the API")?;
        eprintln!("shutting down: letting in-flight reconciles finish");
        host.shutdown().await;
        Ok(ExitCode::SUCCESS)
    })
}

/// Read the tokens file, or create it with one administrator token.
fn load_or_generate_tokens(path: &Path) -> anyhow::Result<Tokens> {
    if path.exists() {
        return Ok(Tokens::load(path)?);
    }
    let tokens = Tokens::generate_admin();
    tokens.save(path)?;
    eprintln!(
        "Generated {} with an administrator token (user \"admin\")",
        path.display()
    );
    Ok(tokens)
}

/// A kubeconfig for `server`, authenticating with `token` if given.
pub fn kubeconfig(server: &str, token: Option<(&str, &str)>) -> String {
    let (user, token_line) = match token {
        Some((user, token)) => (user, format!("    token: {token}\n")),
        None => ("anonymous", String::new()),
    };
    format!(
        "apiVersion: v1\nkind: Config\n\
         clusters:\n- name: setpoint\n  cluster:\n    server: {server}\n\
         users:\n- name: {user}\n  user:\n{token_line}\
         contexts:\n- name: setpoint\n  context:\n    cluster: setpoint\n    user: {user}\n    namespace: default\n\
         current-context: setpoint\n"
    )
}

/// Say how to reach the API: with tokens, write a kubeconfig for the first
/// user and name it; without, the flags to use.
fn print_instructions(
    args: &ServeArgs,
    addr: SocketAddr,
    tokens: Option<&Tokens>,
) -> anyhow::Result<()> {
    let shown = if addr.ip().is_unspecified() {
        SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), addr.port())
    } else {
        addr
    };
    let server = format!("http://{shown}");
    match (tokens.and_then(|t| t.users.first()), &args.tokens) {
        (Some(user), Some(tokens_path)) => {
            let path = args
                .kubeconfig
                .clone()
                .unwrap_or_else(|| tokens_path.with_file_name("kubeconfig"));
            let text = kubeconfig(&server, Some((&user.name, &user.token)));
            crate::server::auth::write_private(&path, &text)
                .with_context(|| format!("writing {}", path.display()))?;
            let path = std::path::absolute(&path).unwrap_or(path);
            eprintln!("Point kubectl at it (as user {:?}):", user.name);
            eprintln!("  export KUBECONFIG={}", path.display());
            eprintln!("  kubectl get crds");
            eprintln!(
                "Or: setpoint --server {server} --token <token from {}> get replicasets",
                tokens_path.display()
            );
        }
        _ => {
            eprintln!("Point kubectl at it:  kubectl --server {server} get crds");
            eprintln!("Or:                   setpoint --server {server} get replicasets");
        }
    }
    Ok(())
}

//! `setpoint serve`: run a host with its plugins and HTTP API until SIGTERM
//! or SIGINT (Ctrl-C), and print how to point kubectl at it.
//!
//! A stop is clean: the API stops taking connections (requests in flight
//! get [`GRACE`] to finish, watches are cut after it), reconciles in flight
//! finish, and the embedded store checkpoints and deletes its log, so that
//! the data directory's `store.redb` alone holds every write. A second
//! signal during the stop exits at once, like a crash: the log stays and is
//! replayed at the next start.
//!
//! Without `--tokens` the API is open and binds loopback only. With
//! `--tokens FILE` callers need a bearer token from that file (created with
//! one administrator token when missing), any address may be used, and a
//! kubeconfig carrying the first token is written beside the file.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use setpoint::Host;
use setpoint_server::auth::Tokens;

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
    /// PEM certificate chain: serve HTTPS (rustls) instead of HTTP.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `--tls-cert`.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Requests (other than watches) handled at once; more are answered 429.
    #[arg(long, default_value_t = 400)]
    pub max_in_flight: usize,
    /// With --tokens, the requests one user may have handled at once
    /// (default: half of --max-in-flight); more are answered 429.
    #[arg(long)]
    pub max_in_flight_per_user: Option<usize>,
    /// Requests per second allowed per user (0: unlimited); more are answered 429.
    #[arg(long, default_value_t = 0.0)]
    pub rate_limit_qps: f64,
    /// Burst allowed per user above `--rate-limit-qps`.
    #[arg(long, default_value_t = 100)]
    pub rate_limit_burst: u32,
    /// How long an Event is kept after it last happened, in seconds.
    #[arg(long, default_value_t = 3600)]
    pub event_ttl_seconds: u64,
    /// After a stop signal, how long reconciles in flight may take to
    /// finish before the host stops without them (the store is closed
    /// cleanly either way), in seconds.
    #[arg(long, default_value_t = 30)]
    pub stop_timeout_seconds: u64,
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
    /// Reconcile exactly this many keys at once per plugin. Without it the
    /// number adapts by itself, between 8 and 16 per reconcile thread, to
    /// what raises throughput.
    #[arg(long)]
    pub workers: Option<usize>,
    /// Share the work with the other hosts on the same etcd (needs `--etcd`):
    /// each object is reconciled by exactly one host at a time.
    #[arg(long, requires = "etcd")]
    pub cluster: bool,
    /// This host's name in the cluster (default: hostname-pid-random).
    #[arg(long, requires = "cluster")]
    pub host_id: Option<String>,
    /// Seconds a dead host's objects wait before others take them over.
    #[arg(long, default_value_t = 10, requires = "cluster")]
    pub lease_ttl: u64,
    /// Shards the object keys are divided into; the same on every host.
    #[arg(long, default_value_t = 64, requires = "cluster")]
    pub shards: u32,
    /// Where compiled plugins are kept across restarts. Default: `cache` in
    /// the `--data` directory; with `--in-memory` or `--etcd`,
    /// `$XDG_CACHE_HOME/setpoint`, `~/.cache/setpoint` or `.setpoint/cache`.
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Serve no web console at `/` (its JSON endpoints stay, as API).
    #[arg(long, conflicts_with = "console_dir")]
    pub no_console: bool,
    /// Serve the console's files from this directory instead of the copy
    /// built in (for working on the console without rebuilding).
    #[arg(long)]
    pub console_dir: Option<PathBuf>,
}

/// The address to show for the console: a wildcard listener is reached
/// on loopback from this machine.
fn console_host(addr: SocketAddr) -> String {
    if addr.ip().is_unspecified() {
        SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), addr.port()).to_string()
    } else {
        addr.to_string()
    }
}

/// How long requests in flight (watches, mostly) may go on after a stop
/// signal before their connections are closed.
const GRACE: Duration = Duration::from_secs(5);

/// How long a blocking-pool thread waits for work before it ends (tokio's
/// default is 10 s).
const BLOCKING_KEEP_ALIVE: Duration = Duration::from_secs(1);

/// How often, at most, an idle runtime worker gives freed memory back.
const COLLECT_EVERY: Duration = Duration::from_secs(1);

/// On a runtime worker going idle: gives back what its thread freed, at
/// most every [`COLLECT_EVERY`].
fn collect_when_idle(collect: fn()) {
    thread_local! {
        static LAST: std::cell::Cell<Option<std::time::Instant>> = const { std::cell::Cell::new(None) };
    }
    LAST.with(|last| {
        let now = std::time::Instant::now();
        if last
            .get()
            .is_none_or(|at| now.duration_since(at) >= COLLECT_EVERY)
        {
            last.set(Some(now));
            collect();
        }
    });
}

pub(super) fn run(args: ServeArgs, allocator: crate::Allocator) -> anyhow::Result<ExitCode> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SETPOINT_LOG").unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new("info,wasmtime=warn,cranelift=warn")
            }),
        )
        .with_writer(std::io::stderr)
        .init();
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all();
    // Blocking-pool threads (the store's range reads) are woken in turn,
    // so a trickle of reads keeps every thread a burst started alive for
    // the keep-alive, each holding what it freed; an idle host lets them go
    // within a second, and each gives back what it holds as it ends.
    runtime.thread_keep_alive(BLOCKING_KEEP_ALIVE);
    if let Some(release) = allocator.release {
        setpoint::memory::install_release(release);
        runtime.on_thread_stop(release);
    }
    if let Some(collect) = allocator.collect {
        runtime.on_thread_park(move || collect_when_idle(collect));
    }
    let runtime = runtime.build().context("starting the async runtime")?;
    runtime.block_on(async move {
        // From the start: a stop while the store opens or plugins load is a
        // clean stop too, not the signal's default (an unclean exit).
        let mut stop_signal = StopSignal::new()?;
        let tokens = match &args.tokens {
            Some(path) => Some(Arc::new(load_or_generate_tokens(path)?)),
            None => None,
        };
        let tls = match (&args.tls_cert, &args.tls_key) {
            (Some(cert), Some(key)) => Some(setpoint_server::tls::load(cert, key)?),
            _ => None,
        };
        let listener = setpoint_server::bind(args.addr, tokens.is_some())
            .await
            .with_context(|| format!("cannot listen on {}", args.addr))?;
        let addr = listener.local_addr()?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let config = setpoint_server::Config {
            tokens: tokens.clone(),
            max_in_flight: args.max_in_flight,
            max_in_flight_per_user: args.max_in_flight_per_user,
            rate_limit: (args.rate_limit_qps > 0.0).then_some(setpoint_server::RateLimit {
                qps: args.rate_limit_qps,
                burst: args.rate_limit_burst.max(1),
            }),
            console: match (&args.console_dir, args.no_console) {
                (_, true) => setpoint_server::console::Source::Off,
                (Some(dir), false) => setpoint_server::console::Source::Dir(dir.clone()),
                (None, false) => setpoint_server::console::Source::Embedded,
            },
            ..Default::default()
        };
        let controller = match args.workers {
            Some(workers) => setpoint::controller::Config {
                workers,
                concurrency: setpoint::controller::Concurrency::Fixed,
                ..Default::default()
            },
            None => setpoint::controller::Config::default(),
        };
        let mut etcd_backend = None;
        let mut embedded = None;
        let (backend, store_description): (Arc<dyn setpoint::store::Backend>, String) = if args.in_memory {
            (Arc::new(setpoint::store::MemoryBackend::new()), "in-memory store".into())
        } else if !args.etcd.is_empty() {
            let read = |p: &PathBuf| std::fs::read(p).with_context(|| format!("cannot read {}", p.display()));
            let config = setpoint::store::EtcdConfig {
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
            let store = setpoint::store::EtcdBackend::connect(config)
                .await
                .with_context(|| format!("cannot connect to etcd at {}", args.etcd.join(",")))?;
            etcd_backend = Some(store.clone());
            (Arc::new(store), format!("etcd at {}", args.etcd.join(",")))
        } else {
            let dir = args.data.clone();
            // Opening checks the whole file: keep it off the async threads.
            let mut opening = tokio::task::spawn_blocking(move || setpoint::store::EmbeddedBackend::open(&dir));
            let (opened, stopping) = tokio::select! {
                opened = &mut opening => (opened, None),
                signal = stop_signal.next() => {
                    eprintln!("{signal}: stopping once the store is open (it is being checked; a second signal exits at once)");
                    tokio::select! {
                        opened = &mut opening => (opened, Some(signal)),
                        signal = stop_signal.next() => exit_at_once(signal),
                    }
                }
            };
            let store = opened?.with_context(|| format!("cannot open the data directory {}", args.data.display()))?;
            if stopping.is_some() {
                close_store(&store).await?;
                return Ok(ExitCode::SUCCESS);
            }
            embedded = Some(store.clone());
            (Arc::new(store), format!("embedded store in {}", args.data.display()))
        };
        let runtime = setpoint::runtime::RuntimeConfig { cache_dir: compiled_code_cache(&args)?, ..Default::default() };
        let mut builder = Host::builder()
            .backend(backend)
            .plugins_dir(&args.plugins)
            .controller(controller)
            .event_ttl(std::time::Duration::from_secs(args.event_ttl_seconds.max(1)))
            .runtime(runtime);
        if embedded.is_some() {
            builder = builder.checkpoints(args.data.join(setpoint::manager::CHECKPOINTS_DIR));
        }
        if let (true, Some(etcd)) = (args.cluster, etcd_backend) {
            let defaults = setpoint::cluster::Config::default();
            builder = builder.etcd_backend(etcd).cluster(setpoint::cluster::Config {
                host_id: args.host_id.clone().unwrap_or(defaults.host_id),
                lease_ttl: std::time::Duration::from_secs(args.lease_ttl),
                shards: args.shards,
            });
        }
        let built = tokio::select! {
            built = builder.build() => built,
            signal = stop_signal.next() => {
                // What the build started is dropped with it; the runtime's
                // end stops the rest.
                eprintln!("{signal} while starting: stopping");
                if let Some(store) = &embedded {
                    close_store(store).await?;
                }
                return Ok(ExitCode::SUCCESS);
            }
        };
        let host = match built {
            Ok(host) => host,
            Err(err) => {
                // Nothing was served: leave the data directory as closed.
                if let Some(store) = &embedded {
                    let _ = store.close().await;
                }
                return Err(anyhow::Error::new(err).context("starting the host"));
            }
        };
        for plugin in host.plugins().await {
            match &plugin.state {
                setpoint::plugins::PluginState::Running => tracing::info!(
                    plugin = %plugin.name, kind = plugin.kind.as_deref().unwrap_or(""), "loaded {}", plugin.path.display()),
                setpoint::plugins::PluginState::Failed(reason) => tracing::error!(
                    plugin = %plugin.name, "{} failed: {reason}", plugin.path.display()),
            }
        }
        let host = Arc::new(host);
        eprintln!("Setpoint API listening on {scheme}://{addr} ({store_description}; plugins from {})", args.plugins.display());
        if !args.no_console {
            eprintln!("Web console: {scheme}://{}/", console_host(addr));
        }
        if let Some(cluster) = host.cluster() {
            eprintln!("Sharing work as cluster member {:?} (lease {} s, {} shards)", cluster.host_id(), args.lease_ttl, args.shards);
        }
        print_instructions(&args, addr, tokens.as_deref())?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let shutdown = async {
            let _ = stopped.await;
        };
        let mut server = match tls {
            Some(tls) => {
                let listener = setpoint_server::tls::TlsListener::new(listener, tls)?;
                tokio::spawn(setpoint_server::serve_with(listener, host.clone(), config, shutdown))
            }
            None => tokio::spawn(setpoint_server::serve_with(listener, host.clone(), config, shutdown)),
        };
        tokio::select! {
            served = &mut server => served?.context("serving the API")?,
            signal = stop_signal.next() => {
                eprintln!("{signal}: stopping (a second signal exits at once)");
                let _ = stop.send(());
                match tokio::time::timeout(GRACE, &mut server).await {
                    Ok(served) => served?.context("serving the API")?,
                    Err(_) => {
                        eprintln!("closing the connections still open after {} s (watches)", GRACE.as_secs());
                        server.abort();
                    }
                }
            }
        }
        // From here on a second signal ends the process at once.
        tokio::spawn(async move {
            let signal = stop_signal.next().await;
            exit_at_once(signal);
        });
        let stop_timeout = Duration::from_secs(args.stop_timeout_seconds);
        eprintln!("shutting down: letting in-flight reconciles finish (at most {} s)", stop_timeout.as_secs());
        if tokio::time::timeout(stop_timeout, host.shutdown()).await.is_err() {
            eprintln!(
                "reconciles still in flight after {} s: stopping without them (their objects are reconciled again at the next start)",
                stop_timeout.as_secs()
            );
        }
        if let Some(store) = embedded {
            close_store(&store).await?;
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// A second stop signal: exit now, as safely as a crash.
fn exit_at_once(signal: &str) -> ! {
    eprintln!(
        "{signal} again: exiting without a clean stop; the store's log is replayed at the next start"
    );
    std::process::exit(130);
}

/// Close the embedded store and say what it holds.
async fn close_store(store: &setpoint::store::EmbeddedBackend) -> anyhow::Result<()> {
    store.close().await.context("closing the store")?;
    if store.log_kept() {
        eprintln!(
            "store closed: its write-ahead log is kept (a write failed, or the disk was too full for a final checkpoint); the next start replays it, so {} alone is not a backup until then",
            store.file().display()
        );
    } else {
        eprintln!("store closed: {} holds every write", store.file().display());
    }
    Ok(())
}

/// SIGTERM (what service managers send) and SIGINT (Ctrl-C), as a stream.
struct StopSignal {
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignal {
    /// Starts listening; from here on neither signal kills the process.
    fn new() -> anyhow::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Self {
                terminate: signal(SignalKind::terminate()).context("listening for SIGTERM")?,
                interrupt: signal(SignalKind::interrupt()).context("listening for SIGINT")?,
            })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    /// The next signal's name.
    async fn next(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.terminate.recv() => "SIGTERM",
                _ = self.interrupt.recv() => "SIGINT",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl-C"
        }
    }
}

/// The compiled-code cache directory, created: `--cache-dir`, else beside the
/// embedded store's data, else the user's cache directory. Without it every
/// start compiles every plugin again (tens to hundreds of milliseconds
/// each). A default that cannot be created only costs that, so it is a
/// warning; a `--cache-dir` that cannot be created is an error.
fn compiled_code_cache(args: &ServeArgs) -> anyhow::Result<Option<PathBuf>> {
    let dir = match &args.cache_dir {
        Some(dir) => dir.clone(),
        None if !args.in_memory && args.etcd.is_empty() => args.data.join("cache"),
        None => {
            let absolute = |name| {
                std::env::var_os(name)
                    .map(PathBuf::from)
                    .filter(|dir| dir.is_absolute())
            };
            absolute("XDG_CACHE_HOME")
                .map(|cache| cache.join("setpoint"))
                .or_else(|| absolute("HOME").map(|home| home.join(".cache/setpoint")))
                .unwrap_or_else(|| PathBuf::from(".setpoint/cache"))
        }
    };
    // The compiler's cache refuses a relative directory (`--data data`).
    let dir = std::path::absolute(&dir).with_context(|| format!("resolving {}", dir.display()))?;
    match std::fs::create_dir_all(&dir) {
        Ok(()) => {
            tracing::info!("compiled plugins are cached in {}", dir.display());
            Ok(Some(dir))
        }
        Err(err) if args.cache_dir.is_none() => {
            tracing::warn!(%err, "cannot create {}; plugins are compiled on every start", dir.display());
            Ok(None)
        }
        Err(err) => {
            Err(err).with_context(|| format!("cannot create the cache directory {}", dir.display()))
        }
    }
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
    let scheme = if args.tls_cert.is_some() {
        "https"
    } else {
        "http"
    };
    let server = format!("{scheme}://{shown}");
    match (tokens.and_then(|t| t.users.first()), &args.tokens) {
        (Some(user), Some(tokens_path)) => {
            let path = args
                .kubeconfig
                .clone()
                .unwrap_or_else(|| tokens_path.with_file_name("kubeconfig"));
            let ca = match &args.tls_cert {
                Some(cert) => Some(
                    std::fs::read(cert).with_context(|| format!("reading {}", cert.display()))?,
                ),
                None => None,
            };
            let text =
                super::kubeconfig::render(&server, Some((&user.name, &user.token)), ca.as_deref());
            setpoint_server::auth::write_private(&path, &text)
                .with_context(|| format!("writing {}", path.display()))?;
            let path = std::path::absolute(&path).unwrap_or(path);
            eprintln!("Point kubectl at it (as user {:?}):", user.name);
            eprintln!("  export KUBECONFIG={}", path.display());
            eprintln!("  kubectl get crds");
            eprintln!(
                "Or: setpoint get replicasets --kubeconfig {}",
                path.display()
            );
        }
        _ => {
            let ca = args
                .tls_cert
                .as_ref()
                .map(|c| format!(" --certificate-authority {}", c.display()))
                .unwrap_or_default();
            eprintln!("Point kubectl at it:  kubectl --server {server}{ca} get crds");
            eprintln!("Or:                   setpoint get replicasets --server {server}{ca}");
        }
    }
    Ok(())
}

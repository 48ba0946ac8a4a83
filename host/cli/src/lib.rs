//! The `setpoint` command line (crate `setpoint-cli`, whose binary is
//! `setpoint`): `serve` runs a host (the engine, `setpoint`, behind the HTTP
//! API, `setpoint-server`); `apply`, `plan`, `get`, `watch`, `describe`,
//! `delete`, `plugins` and `backup` talk to a running host over its HTTP
//! API; `new-plugin` writes a plugin crate. A thin layer over the
//! libraries; errors become `anyhow` here and nowhere else.

/// `println!` for a command's output: a reader that went away
/// (`setpoint get pods | head`) ends the command quietly, as a closed pipe
/// ends any Unix tool, instead of a panic.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::write_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` for a command's output; see [`outln!`].
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::write_out(format_args!($($arg)*))
    };
}

pub mod backup;
mod describe;
mod http;
mod kubeconfig;
mod manifest;
pub mod new_plugin;
mod output;
pub mod plan;
mod plugins;
mod remote;
mod serve;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};

pub use http::Trust;
pub use kubeconfig::Connection;
pub use manifest::{Manifest, read_manifests};
pub use remote::Client;

/// Where the HTTP API listens unless told otherwise.
pub const DEFAULT_ADDR: &str = "127.0.0.1:8490";

/// Setpoint: Kubernetes-style control loops with WebAssembly reconcilers.
#[derive(Debug, Parser)]
#[command(name = "setpoint", version, about, long_about = None)]
pub struct Cli {
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// Output formats of `get`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// A table with the kind's printer columns.
    Table,
    /// YAML.
    Yaml,
    /// JSON.
    Json,
}

/// How to reach a running host. Flags win over the kubeconfig, which wins
/// over the default address.
#[derive(Debug, Clone, clap::Args)]
pub struct ServerArgs {
    /// The host's API address [default: the kubeconfig's server, else http://127.0.0.1:8490].
    #[arg(long, env = "SETPOINT_SERVER")]
    pub server: Option<String>,
    /// A bearer token, when the host was started with `--tokens`.
    #[arg(long, env = "SETPOINT_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// A kubeconfig to take server, token and certificate authority from
    /// (its current context), e.g. the one `setpoint serve --tokens` writes.
    #[arg(long, env = "SETPOINT_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// PEM file of the certificate (authority) to trust for an https:// server.
    #[arg(long, env = "SETPOINT_CERTIFICATE_AUTHORITY")]
    pub certificate_authority: Option<PathBuf>,
    /// Do not check the https:// server's certificate (the connection is
    /// encrypted but not authenticated).
    #[arg(long)]
    pub insecure_skip_tls_verify: bool,
}

impl ServerArgs {
    /// Where to connect and how, from the flags and the kubeconfig.
    pub fn connection(&self) -> anyhow::Result<Connection> {
        let from_file = match &self.kubeconfig {
            Some(path) => kubeconfig::read(path)?,
            None => Connection::default(),
        };
        let certificate_authority = match &self.certificate_authority {
            Some(path) => Some(read_file(path)?),
            None => from_file.certificate_authority,
        };
        let server = self
            .server
            .clone()
            .or_else(|| Some(from_file.server).filter(|s| !s.is_empty()))
            .unwrap_or_else(|| format!("http://{DEFAULT_ADDR}"));
        Ok(Connection {
            server,
            token: self.token.clone().or(from_file.token),
            certificate_authority,
            insecure_skip_tls_verify: self.insecure_skip_tls_verify
                || from_file.insecure_skip_tls_verify,
        })
    }

    /// A client for the host these arguments name.
    pub fn client(&self) -> anyhow::Result<Client> {
        let connection = self.connection()?;
        let trust = match (
            connection.insecure_skip_tls_verify,
            connection.certificate_authority,
        ) {
            (true, _) => Trust::Insecure,
            (false, Some(pem)) => Trust::Pem(pem),
            (false, None) => Trust::System,
        };
        Client::connect(&connection.server, &trust, connection.token.as_deref())
    }
}

fn read_file(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

/// One object: its kind, name and namespace.
#[derive(Debug, Args)]
pub struct ObjectArgs {
    /// The kind: its name, plural, singular or short name (`replicasets`, `rs`).
    pub kind: String,
    /// The object's name.
    pub name: String,
    /// The namespace.
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
}

/// One namespace, or all of them.
#[derive(Debug, Args)]
pub struct NamespaceArgs {
    /// The namespace.
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
    /// Across all namespaces.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
}

impl NamespaceArgs {
    /// The namespace to ask about; `None` for all of them.
    pub fn namespace(&self) -> Option<&str> {
        (!self.all_namespaces).then_some(self.namespace.as_str())
    }
}

/// A `setpoint` subcommand.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a host: the store, the plugins and the HTTP API.
    Serve(Box<serve::ServeArgs>),
    /// Create or update the objects of a manifest (YAML or JSON; several documents allowed).
    Apply {
        /// The manifest file, or `-` for standard input.
        #[arg(short = 'f', long = "filename", required = true)]
        files: Vec<PathBuf>,
        /// Where the host is.
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Show what applying a manifest, or deleting an object, would do —
    /// the objects, the controllers' reaction through every level of
    /// children, the external writes — without changing anything.
    #[command(group = clap::ArgGroup::new("what").required(true).args(["files", "delete"]))]
    Plan {
        /// The manifest file to plan applying, or `-` for standard input.
        #[arg(short = 'f', long = "filename")]
        files: Vec<PathBuf>,
        /// Plan deleting this object instead.
        #[arg(long, num_args = 2, value_names = ["KIND", "NAME"])]
        delete: Vec<String>,
        /// The namespace of the object to delete.
        #[arg(short = 'n', long, default_value = "default")]
        namespace: String,
        /// What happens to the dependents of the object to delete.
        #[arg(long, value_enum, default_value = "background")]
        cascade: plan::CascadePolicy,
        /// The output format.
        #[arg(short = 'o', long, value_enum, default_value = "text")]
        output: plan::PlanFormat,
        /// Where the host is.
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Show objects of a kind, or one object.
    Get {
        /// The kind: its name, plural, singular or short name (`replicasets`, `rs`).
        kind: String,
        /// One object's name.
        name: Option<String>,
        /// Which namespaces.
        #[command(flatten)]
        scope: NamespaceArgs,
        /// Only objects matching this label selector.
        #[arg(short = 'l', long = "selector")]
        selector: Option<String>,
        /// The output format.
        #[arg(short = 'o', long, value_enum, default_value = "table")]
        output: Format,
        /// Where the host is.
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Follow changes to objects of a kind, one line per event, until interrupted.
    Watch {
        /// The kind.
        kind: String,
        /// Which namespaces.
        #[command(flatten)]
        scope: NamespaceArgs,
        /// Print each event's object as JSON instead of a summary line.
        #[arg(long)]
        json: bool,
        /// Where the host is.
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Show one object with its conditions, recent reconcile results and events.
    Describe {
        /// Which object.
        #[command(flatten)]
        object: ObjectArgs,
        /// Where the host is.
        #[command(flatten)]
        server: ServerArgs,
    },
    /// List the host's plugins: kind, version, content hash, state, reconcile counts.
    Plugins {
        /// Print the raw JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Where the host is.
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Create a plugin crate that builds and reconciles out of the box.
    NewPlugin {
        /// The plugin's name: lowercase letters, digits and '-' (`web-app`).
        name: String,
        /// The directory to create it in.
        #[arg(long, default_value = ".")]
        dir: PathBuf,
        /// A Setpoint checkout's `plugin-sdk` directory to depend on (default:
        /// the enclosing checkout's, or the one this binary was built from).
        #[arg(long)]
        sdk: Option<PathBuf>,
    },
    /// Save a consistent copy of the host's store, taken while it runs and
    /// writes go on (embedded store only). Restore: copy the file to
    /// `store.redb` in an empty data directory and start the host there.
    Backup {
        /// Where to write the copy (replaced only once the whole copy is
        /// received and checked).
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
        /// Where the host is.
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Delete an object.
    Delete {
        /// Which object.
        #[command(flatten)]
        object: ObjectArgs,
        /// Where the host is.
        #[command(flatten)]
        server: ServerArgs,
    },
}

/// What the binary's global allocator offers the host: the library picks
/// no allocator, so the binary that does hands its hooks in.
#[derive(Debug, Clone, Copy, Default)]
pub struct Allocator {
    /// Gives memory freed on the calling thread back to the OS. `serve`
    /// calls it on each runtime worker as the worker goes idle (at most
    /// once a second a thread), so that memory a burst of clients took is
    /// returned once they go, not only when the thread next allocates
    /// (BENCHMARKS.md, "Hostile clients").
    pub collect: Option<fn()>,
    /// Gives back all the calling thread holds freed, however costly;
    /// installed as [`setpoint::memory::install_release`] for the host's
    /// threads that have gone idle.
    pub release: Option<fn()>,
}

/// Run a parsed command line.
///
/// ```no_run
/// use clap::Parser;
///
/// let cli = setpoint_cli::Cli::parse_from(["setpoint", "serve", "--addr", "127.0.0.1:0"]);
/// setpoint_cli::run(cli)?;
/// # Ok::<(), anyhow::Error>(())
/// ```
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    run_with(cli, Allocator::default())
}

/// [`run`], with the binary's allocator hooks.
pub fn run_with(cli: Cli, allocator: Allocator) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Serve(args) => serve::run(*args, allocator),
        Command::Apply { files, server } => block_on(async move {
            let client = server.client()?;
            let mut manifests = Vec::new();
            for file in &files {
                manifests.extend(read_manifests(file)?);
            }
            for line in client.apply_all(&manifests).await? {
                outln!("{line}");
            }
            Ok(ExitCode::SUCCESS)
        }),
        Command::Plan {
            files,
            delete,
            namespace,
            cascade,
            output,
            server,
        } => block_on(async move {
            let client = server.client()?;
            let plan = match delete.as_slice() {
                [kind, name] => plan::plan_delete(&client, kind, name, &namespace, cascade).await?,
                _ => plan::plan_apply(&client, &files).await?,
            };
            plan::print(&plan, output)?;
            // Like `kubectl apply`, a plan with errors fails (after showing
            // everything that could be planned).
            Ok(if plan.errors.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }),
        Command::Get {
            kind,
            name,
            scope,
            selector,
            output,
            server,
        } => block_on(async move {
            let client = server.client()?;
            let resource = client.resolve(&kind).await?;
            let namespace = scope.namespace();
            let columns = if output == Format::Table {
                client.columns(&resource).await?
            } else {
                vec![]
            };
            let text = match name {
                Some(name) => {
                    let object = client.get(&resource, namespace, &name).await?;
                    output::render_one(&resource, &columns, &object, output)?
                }
                None => {
                    let list = client
                        .list(&resource, namespace, selector.as_deref())
                        .await?;
                    output::render_list(&resource, &columns, &list, output, scope.all_namespaces)?
                }
            };
            out!("{text}");
            Ok(ExitCode::SUCCESS)
        }),
        Command::Watch {
            kind,
            scope,
            json,
            server,
        } => block_on(async move {
            let client = server.client()?;
            let resource = client.resolve(&kind).await?;
            let namespace = scope.namespace();
            client
                .watch(&resource, namespace, |event| {
                    if json {
                        outln!("{event}");
                    } else {
                        outln!("{}", output::event_line(&event));
                    }
                })
                .await?;
            Ok(ExitCode::SUCCESS)
        }),
        Command::Describe {
            object:
                ObjectArgs {
                    kind,
                    name,
                    namespace,
                },
            server,
        } => block_on(async move {
            out!(
                "{}",
                describe::describe(&server.client()?, &kind, &name, &namespace).await?
            );
            Ok(ExitCode::SUCCESS)
        }),
        Command::Backup { output, server } => block_on(async move {
            let saved = backup::save(&server.client()?, &output).await?;
            outln!(
                "{}: a backup of the store at revision {} ({} bytes). To restore it, copy it to \
                 store.redb in an empty data directory and run `setpoint serve --data DIR` there.",
                output.display(),
                saved.revision,
                saved.bytes
            );
            Ok(ExitCode::SUCCESS)
        }),
        Command::Plugins { json, server } => block_on(async move {
            let list = plugins::fetch(&server.client()?).await?;
            if json {
                outln!("{}", serde_json::to_string_pretty(&list)?);
            } else {
                out!("{}", plugins::render(&list));
            }
            Ok(ExitCode::SUCCESS)
        }),
        Command::NewPlugin { name, dir, sdk } => {
            let sdk = new_plugin::SdkSource::detect(sdk, &dir);
            let root = new_plugin::generate(&name, &dir, &sdk)?;
            outln!("created {}", root.display());
            outln!(
                "  build:  cd {} && cargo build --release --target wasm32-unknown-unknown",
                root.display()
            );
            outln!("  test:   cargo test");
            // The same file name as the guide (docs/plugins.md), so that
            // following both never loads two copies.
            outln!(
                "  deploy: cp target/wasm32-unknown-unknown/release/{}.wasm <plugins dir>/{name}.wasm",
                name.replace('-', "_")
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Delete {
            object:
                ObjectArgs {
                    kind,
                    name,
                    namespace,
                },
            server,
        } => block_on(async move {
            let client = server.client()?;
            let resource = client.resolve(&kind).await?;
            client.delete(&resource, Some(&namespace), &name).await?;
            outln!(
                "{}.{} {name:?} deleted",
                resource.singular,
                resource.group_suffix()
            );
            Ok(ExitCode::SUCCESS)
        }),
    }
}

fn block_on<F: std::future::Future<Output = anyhow::Result<ExitCode>>>(
    future: F,
) -> anyhow::Result<ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(future)
}

/// Write a command's output to stdout; see [`outln!`].
pub(crate) fn write_out(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    if let Err(err) = stdout.write_fmt(args).and_then(|()| stdout.flush()) {
        if err.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: writing the output: {err}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server_args(args: &[&str]) -> ServerArgs {
        let mut argv = vec!["setpoint", "plugins"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Plugins { server, .. } => server,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn flags_win_over_the_kubeconfig_which_wins_over_the_default_address() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        std::fs::write(
            &path,
            kubeconfig::render(
                "https://10.0.0.1:8490",
                Some(("admin", "from-file")),
                Some(b"ca"),
            ),
        )
        .unwrap();
        let path = path.to_str().unwrap();
        assert_eq!(
            server_args(&[]).connection().unwrap(),
            Connection {
                server: format!("http://{DEFAULT_ADDR}"),
                ..Connection::default()
            }
        );
        assert_eq!(
            server_args(&["--kubeconfig", path]).connection().unwrap(),
            Connection {
                server: "https://10.0.0.1:8490".into(),
                token: Some("from-file".into()),
                certificate_authority: Some(b"ca".to_vec()),
                insecure_skip_tls_verify: false,
            }
        );
        let ca = dir.path().join("other.pem");
        std::fs::write(&ca, "other").unwrap();
        assert_eq!(
            server_args(&[
                "--kubeconfig",
                path,
                "--server",
                "https://127.0.0.1:1",
                "--token",
                "from-flag",
                "--certificate-authority",
                ca.to_str().unwrap(),
                "--insecure-skip-tls-verify",
            ])
            .connection()
            .unwrap(),
            Connection {
                server: "https://127.0.0.1:1".into(),
                token: Some("from-flag".into()),
                certificate_authority: Some(b"other".to_vec()),
                insecure_skip_tls_verify: true,
            }
        );
    }
}

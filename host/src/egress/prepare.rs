//! The checks a request passes before anything touches the network: the
//! URL names a declared and granted destination, no header the host owns
//! is set, every secret it names is declared, granted and readable (and is
//! substituted here, masked everywhere after). Owns the refusal reasons
//! (`BadRequest`, `DestinationNotDeclared`, `DestinationNotGranted`,
//! `SecretNotGranted`, `SecretNotFound`, `ForbiddenHeader`, ...).

use super::{Egress, Rights, Scope, policy, secrets};
use crate::contract::HttpRequest;
use crate::object::meta;
use policy::Destination;
use secrets::Masker;

/// A request that passed the checks that need no network.
#[derive(Clone)]
pub(super) struct Prepared {
    pub(super) destination: Destination,
    pub(super) explicit: bool,
    pub(super) wire: secrets::Wire,
    pub(super) plugin_rps: Option<f64>,
    pub(super) plugin_concurrency: Option<usize>,
}

impl Egress {
    /// The checks that need no network: the destination and the secrets.
    pub(super) async fn prepare(
        &self,
        scope: &Scope<'_>,
        rights: &Rights,
        request: &HttpRequest,
        destination: Result<Destination, policy::BadDestination>,
        masker: &mut Masker,
    ) -> Result<Prepared, (&'static str, String)> {
        let what = format!("{} {}", request.method, request.url);
        let destination = destination.map_err(|e| ("BadRequest", format!("{what}: {e}")))?;
        if destination.port == 0 || destination.is_wildcard() {
            return Err((
                "BadRequest",
                format!("{what}: a URL names one host and port"),
            ));
        }
        if let Some((name, _)) = request
            .headers
            .iter()
            .find(|(n, _)| policy::forbidden_header(n))
        {
            return Err((
                "ForbiddenHeader",
                format!("{what}: the header {name} is set by the host, not by a plugin"),
            ));
        }
        let secret_header = request.secrets.iter().find_map(|s| match &s.target {
            crate::contract::SecretTarget::Header { name, .. }
                if policy::forbidden_header(name) =>
            {
                Some(name)
            }
            _ => None,
        });
        if let Some(name) = secret_header {
            return Err((
                "ForbiddenHeader",
                format!("{what}: the header {name} is set by the host, not by a plugin"),
            ));
        }
        if !rights
            .declared
            .destinations
            .iter()
            .any(|d| d.covers(&destination))
        {
            return Err((
                "DestinationNotDeclared",
                format!(
                    "{what}: destination {destination} is not declared in the manifest of plugin {}",
                    scope.plugin.name
                ),
            ));
        }
        let grant = match &rights.grant {
            Ok(Some(grant)) => grant,
            Ok(None) => {
                return Err((
                    "DestinationNotGranted",
                    format!(
                        "{what}: destination {destination} is not granted to plugin {} \
                         (no PluginGrant {} exists)",
                        scope.plugin.name, scope.plugin.name
                    ),
                ));
            }
            Err(err) => return Err(("DestinationNotGranted", format!("{what}: {err}"))),
        };
        let Some(pattern) = grant.destination_for(&destination) else {
            return Err((
                "DestinationNotGranted",
                format!(
                    "{what}: destination {destination} is not granted to plugin {} \
                     (PluginGrant {} spec.destinations)",
                    scope.plugin.name, scope.plugin.name
                ),
            ));
        };
        let explicit = !pattern.is_wildcard();
        let namespace = meta::namespace(scope.object).unwrap_or("default");
        let mut values = Vec::with_capacity(request.secrets.len());
        for use_ in &request.secrets {
            let (name, key) = (&use_.secret.name, &use_.secret.key);
            let declared = rights
                .declared
                .secrets
                .iter()
                .any(|p| p.covers(namespace, name, key));
            let granted = grant.secrets.iter().any(|p| p.covers(namespace, name, key));
            if !declared || !granted {
                return Err((
                    "SecretNotGranted",
                    format!(
                        "{what}: secret {namespace}/{name} key {key} is not {} plugin {}",
                        if declared {
                            "granted to"
                        } else {
                            "declared by"
                        },
                        scope.plugin.name
                    ),
                ));
            }
            let value = self.secret(namespace, name, key).await.map_err(|why| {
                (
                    "SecretNotFound",
                    format!("{what}: secret {namespace}/{name} {why}"),
                )
            })?;
            masker.add(&value);
            values.push(value);
        }
        let wire = secrets::substitute(request, &values)
            .map_err(|e| ("BadRequest", format!("{what}: {}", masker.text(&e))))?;
        for derived in &wire.derived {
            masker.add(derived);
        }
        if let Some(explicit_ip) = destination.ip()
            && policy::is_special(explicit_ip)
            && !explicit
        {
            return Err((
                "PrivateAddress",
                format!("{what}: {explicit_ip} needs a grant naming it exactly"),
            ));
        }
        Ok(Prepared {
            destination,
            explicit,
            wire,
            plugin_rps: grant.limits.rps,
            plugin_concurrency: grant.limits.concurrency,
        })
    }

    async fn secret(&self, namespace: &str, name: &str, key: &str) -> Result<String, String> {
        let kind = self
            .inner
            .api
            .kinds()
            .by_kind("v1", "Secret")
            .ok_or_else(|| "cannot be read: this host has no v1 Secret kind".to_owned())?;
        let object = self
            .inner
            .api
            .get(&kind, Some(namespace), name)
            .await
            .map_err(|e| match e {
                crate::api::Error::NotFound { .. } => "does not exist".to_owned(),
                other => format!("cannot be read: {other}"),
            })?;
        secrets::value_of(&object, key)
    }
}

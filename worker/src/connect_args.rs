//! How the worker reaches a coordinator safely, shared by `run` and `verify`: the
//! enrolment token (from a flag, the environment or a private file, so it need not be on
//! a command line), the CA to trust, and the plaintext policy: `http://` to anything but
//! this machine is refused unless `--allow-plaintext` says the network is trusted (a
//! cluster's internal network), because tokens and results would cross it in clear.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;
use tracing::warn;

/// Connection flags.
#[derive(Args, Debug, Clone)]
pub struct ConnectArgs {
    /// The fleet's enrolment token (prefer --token-file or the environment: a command
    /// line is visible to every user of the machine).
    #[arg(long, env = "E2FLEET_ENROLL_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Read the enrolment token from this file (its first line).
    #[arg(long, env = "E2FLEET_ENROLL_TOKEN_FILE", conflicts_with = "token")]
    pub token_file: Option<PathBuf>,
    /// CA certificate (PEM) to trust for an https:// coordinator (default: system roots).
    #[arg(long, env = "E2FLEET_CA_CERT")]
    pub ca_cert: Option<PathBuf>,
    /// Allow plain http:// to a coordinator on another machine (only on a network you
    /// trust: the token and every result cross it unencrypted).
    #[arg(long, env = "E2FLEET_ALLOW_PLAINTEXT")]
    pub allow_plaintext: bool,
}

impl ConnectArgs {
    /// The enrolment token, from `--token`, `E2FLEET_ENROLL_TOKEN` or `--token-file`.
    pub fn token(&self) -> Result<String> {
        if let Some(t) = &self.token {
            return Ok(t.clone());
        }
        let Some(path) = &self.token_file else {
            bail!(
                "no enrolment token: give --token-file FILE (or E2FLEET_ENROLL_TOKEN_FILE), or E2FLEET_ENROLL_TOKEN"
            );
        };
        read_token_file(path)
    }

    /// Checks `url` (or each of a comma-separated list) against the plaintext policy (a
    /// warning when allowed).
    pub fn check_transport(&self, url: &str) -> Result<()> {
        crate::api::urls(url)
            .into_iter()
            .try_for_each(|u| self.check_one(u))
    }

    fn check_one(&self, url: &str) -> Result<()> {
        let Some(host) = e2fleet_proto::client::plaintext_remote_host(url) else {
            return Ok(());
        };
        if self.allow_plaintext {
            warn!(
                %host,
                "plain http:// to another machine: the enrolment token and results cross the network unencrypted"
            );
            return Ok(());
        }
        bail!(
            "{url} is plain http:// to another machine ({host}): the token and results would cross the network unencrypted. \
             Use https:// (the coordinator's `serve --tls-self-signed` makes a certificate; pass its CA with --ca-cert), \
             or add --allow-plaintext on a network you trust"
        )
    }
}

fn read_token_file(path: &Path) -> Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the token file {}", path.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if let Ok(meta) = std::fs::metadata(path)
            && meta.mode() & 0o077 != 0
        {
            warn!(
                file = %path.display(),
                mode = format!("{:o}", meta.mode() & 0o777),
                "the token file can be read by other users: chmod 600 it"
            );
        }
    }
    let token = text.lines().next().unwrap_or("").trim().to_string();
    if token.is_empty() {
        bail!("the token file {} is empty", path.display());
    }
    Ok(token)
}

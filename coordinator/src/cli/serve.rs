//! `serve`: run the coordinator.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use e2fleet_coordinator::fleet::{
    AccountLimits, Fleet, FleetConfig, TrustPolicy, random_token, system_clock,
};
use e2fleet_coordinator::store::{Database, Store};
use tracing::info;

use super::args::ServeArgs;
use crate::outln;

fn hostname() -> String {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// The TLS configuration the flags ask for, and the names it serves (empty: no TLS, or
/// certificates the operator brought).
fn tls_config(
    args: &ServeArgs,
) -> Result<(
    Option<std::sync::Arc<tokio_rustls::rustls::ServerConfig>>,
    Vec<String>,
)> {
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        let config = e2fleet_coordinator::tls::server_config(cert, key)
            .map_err(|e| anyhow::anyhow!("TLS: {e}"))?;
        return Ok((Some(config), Vec::new()));
    }
    if !args.tls_self_signed {
        return Ok((None, Vec::new()));
    }
    let names = if args.tls_name.is_empty() {
        vec![hostname(), "localhost".into(), "127.0.0.1".into()]
    } else {
        args.tls_name.clone()
    };
    let dir = args.tls_dir.clone().unwrap_or_else(|| {
        let beside = match &args.db {
            Database::Sqlite(path) => path.parent().filter(|d| !d.as_os_str().is_empty()),
            // several coordinators on one database: give them --tls-dir on a shared disk
            Database::Postgres(_) => None,
        };
        beside.unwrap_or(std::path::Path::new(".")).join("tls")
    });
    let files = e2fleet_coordinator::tls::self_signed(&dir, &names)
        .map_err(|e| anyhow::anyhow!("TLS: {e}"))?;
    if files.created {
        outln!(
            "made a TLS certificate for {} signed by the fleet's own CA ({})",
            names.join(", "),
            dir.display()
        );
    }
    outln!(
        "clients trust this coordinator with: --ca-cert {}",
        files.ca.display()
    );
    let config = e2fleet_coordinator::tls::server_config(&files.cert, &files.key)
        .map_err(|e| anyhow::anyhow!("TLS: {e}"))?;
    Ok((Some(config), names))
}

/// Runs the coordinator until SIGINT or SIGTERM.
pub async fn serve(args: ServeArgs) -> Result<()> {
    e2fleet_proto::logs::init(args.log_format, "info");
    let enroll_token = args.enroll_token.clone().unwrap_or_else(random_token);
    let admin_token = args.admin_token.clone().unwrap_or_else(random_token);
    if args.enroll_token.is_none() {
        outln!("E2FLEET_ENROLL_TOKEN={enroll_token}");
    }
    if args.admin_token.is_none() {
        outln!("E2FLEET_ADMIN_TOKEN={admin_token}");
    }
    let (tls, tls_names) = tls_config(&args)?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let config = FleetConfig {
        lease: Duration::from_secs(args.lease_seconds.max(1)),
        quarantine_after: args.quarantine_after.max(1),
        enroll_token,
        admin_token,
        trust: TrustPolicy {
            trust_after: args.trust_after,
            recheck: args.trusted_recheck,
            account_quarantine_after: args.account_quarantine_after.max(1),
            recheck_history: !args.no_history_recheck,
        },
        archive_after: (args.archive_after_s > 0)
            .then(|| Duration::from_secs(args.archive_after_s)),
        accounts: AccountLimits {
            identities_per_day: args.account_identities.max(1),
            leases: args.account_leases.max(1),
        },
    };
    config.validate().map_err(anyhow::Error::msg)?;
    let store = Store::connect(&args.db).await?;
    let fleet = Arc::new(
        Fleet::new(store, config, system_clock())
            .with_releases(e2fleet_coordinator::releases::Releases::new(&args.releases)),
    );
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    info!(%addr, db = %args.db, "coordinator listening");
    // an unspecified address (0.0.0.0) is where it listens, not where anyone reaches it
    let reach = if addr.ip().is_unspecified() {
        let host = tls_names.first().cloned().unwrap_or_else(hostname);
        format!("{host}:{}", addr.port())
    } else {
        addr.to_string()
    };
    outln!("coordinator listening on {scheme}://{addr} (dashboard: {scheme}://{reach}/)");
    // SIGINT (Ctrl-C) or SIGTERM (systemd, docker, Kubernetes): stop accepting, finish
    // the requests in flight; every write is a committed transaction either way
    let shutdown = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        info!("shutting down");
    };
    e2fleet_coordinator::server::serve_with(listener, fleet, shutdown, tls).await?;
    Ok(())
}

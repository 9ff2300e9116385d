//! `serve`: run the coordinator.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use e2fleet_coordinator::fleet::{Fleet, FleetConfig, random_token, system_clock};
use e2fleet_coordinator::store::Store;
use tracing::info;

use super::args::ServeArgs;
use crate::outln;

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
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(
            e2fleet_coordinator::tls::server_config(cert, key)
                .map_err(|e| anyhow::anyhow!("TLS: {e}"))?,
        ),
        _ => None,
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let store = Store::open(&args.db).await?;
    let fleet = Arc::new(Fleet::new(
        store,
        FleetConfig {
            lease: Duration::from_secs(args.lease_seconds.max(1)),
            quarantine_after: args.quarantine_after.max(1),
            enroll_token,
            admin_token,
        },
        system_clock(),
    ));
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    info!(%addr, db = %args.db.display(), "coordinator listening");
    outln!("coordinator listening on {scheme}://{addr} (dashboard: {scheme}://{addr}/)");
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

//! One port for gRPC (HTTP/2) and the HTTP JSON API (HTTP/1.1 or 2): tonic's routes merged
//! into an axum router. `serve` takes a bound listener and a shutdown future, so tests bind
//! `127.0.0.1:0` and run everything in one process.
//!
//! - [`listener`]: the accept loop, where connections are bounded (count, per address,
//!   handshake, headers, idle);
//! - [`guard`]: authentication and body limits per gRPC method, before any body is read,
//!   and what calls without a token may hold; [`deadline`]: bodies with a deadline for
//!   the whole of them;
//! - [`grpc`]: the tonic services (thin: convert, call, convert, map the error), plus the
//!   standard `grpc.health.v1` and reflection services;
//! - [`http`]: the JSON API (public reads, cached a second, concurrency-limited);
//!   [`metrics`]: `/metrics`;
//! - [`errors`]: the one error -> gRPC code / HTTP status table and the bearer parser.

pub mod deadline;
pub mod downloads;
pub mod errors;
pub mod grpc;
pub mod guard;
pub mod http;
pub mod listener;
pub mod metrics;

pub use listener::ServerLimits;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::{get, post};
use e2fleet_proto::MAX_MESSAGE_BYTES;
use e2fleet_proto::v2::operator_service_server::OperatorServiceServer;
use e2fleet_proto::v2::worker_service_server::WorkerServiceServer;
use tokio::net::TcpListener;
use tracing::{info, warn};

use crate::fleet::Fleet;
use grpc::{OperatorApi, WorkerApi};

/// Public HTTP requests (API, dashboard, metrics) handled at once; more are answered 503.
pub const MAX_PUBLIC_REQUESTS: usize = 64;

/// The whole router: gRPC services (behind [`guard`]) plus the JSON API, `/metrics` and
/// the dashboard.
pub fn router(fleet: Arc<Fleet>) -> axum::Router {
    let (health_reporter, health) = tonic_health::server::health_reporter();
    tokio::spawn(async move {
        health_reporter
            .set_serving::<WorkerServiceServer<WorkerApi>>()
            .await;
        health_reporter
            .set_serving::<OperatorServiceServer<OperatorApi>>()
            .await;
    });
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(e2fleet_proto::v2::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .expect("the descriptor sets are valid");
    let grpc = tonic::service::Routes::new(
        WorkerServiceServer::new(WorkerApi(fleet.clone()))
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES),
    )
    .add_service(
        OperatorServiceServer::new(OperatorApi(fleet.clone()))
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES),
    )
    .add_service(health)
    .add_service(reflection)
    .into_axum_router()
    .layer(axum::middleware::from_fn_with_state(
        Arc::new(guard::Guard::new(fleet.clone())),
        guard::guard,
    ));
    let api = axum::Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/api/jobs", get(http::jobs))
        .route("/api/jobs/{id}", get(http::job))
        .route("/api/jobs/{id}/puzzle", get(http::job_puzzle))
        .route("/api/jobs/{id}/best", get(http::best_boards))
        .route("/api/jobs/{id}/audits", get(http::job_audits))
        .route("/api/jobs/{id}/certificate", get(http::certificate))
        .route("/api/jobs/{id}/cancel", post(http::cancel_job))
        .route("/api/hosts/{hostname}/release", post(http::release_host))
        .route("/api/studies", get(http::studies))
        .route("/api/studies/{id}", get(http::study))
        .route("/api/fleet", get(http::fleet_status))
        .route("/api/workers", get(http::workers))
        .route("/api/stats", get(http::stats))
        .route("/api/verification", get(http::verification))
        .route("/api/releases", get(http::releases))
        .route("/metrics", get(metrics::metrics))
        .route("/downloads/{*path}", get(downloads::download))
        .merge(crate::dashboard::routes())
        .with_state(fleet)
        .layer(
            tower::ServiceBuilder::new()
                .layer(axum::error_handling::HandleErrorLayer::new(
                    |_: tower::BoxError| async {
                        (
                            axum::http::StatusCode::SERVICE_UNAVAILABLE,
                            "busy; retry later",
                        )
                    },
                ))
                .load_shed()
                .concurrency_limit(MAX_PUBLIC_REQUESTS),
        );
    grpc.merge(api)
}

/// Serves until `shutdown` resolves. Also expires leases and archives decided units in
/// the background.
pub async fn serve(
    listener: TcpListener,
    fleet: Arc<Fleet>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, fleet, shutdown, None).await
}

/// [`serve`], over TLS when `tls` is given (see [`crate::tls`]).
pub async fn serve_with(
    listener: TcpListener,
    fleet: Arc<Fleet>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
) -> std::io::Result<()> {
    serve_with_limits(listener, fleet, shutdown, tls, ServerLimits::default()).await
}

/// [`serve_with`], with connection limits of its own.
pub async fn serve_with_limits(
    listener: TcpListener,
    fleet: Arc<Fleet>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
    limits: ServerLimits,
) -> std::io::Result<()> {
    let expiry_fleet = fleet.clone();
    let period = (fleet.config().lease / 4).max(Duration::from_millis(100));
    let expiry = tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        loop {
            tick.tick().await;
            if let Err(e) = expiry_fleet.expire_leases().await {
                warn!(error = %e, "lease expiry failed");
            }
        }
    });
    let archive_fleet = fleet.clone();
    let archiver = tokio::spawn(async move {
        if archive_fleet.config().archive_after.is_none() {
            return;
        }
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            // several coordinators on one database: one archives (the others would find
            // the same units and queue behind its writes for nothing)
            if !archive_fleet.does_upkeep() {
                continue;
            }
            if let Err(e) = archive_fleet.archive_decided().await {
                warn!(error = %e, "archiving decided units failed");
            }
        }
    });
    let studies_fleet = fleet.clone();
    let studies = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(2));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if !studies_fleet.does_upkeep() {
                continue;
            }
            if let Err(e) = studies_fleet.settle_studies().await {
                warn!(error = %e, "settling studies failed");
            }
        }
    });
    let tokens_fleet = fleet.clone();
    let tokens = tokio::spawn(async move {
        // the workers' tokens in use are read again before they run out, so no call
        // waits for its own (`fleet/token_cache.rs`)
        let mut tick = tokio::time::interval(crate::fleet::TOKEN_REFRESH_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match tokens_fleet.refresh_tokens(std::time::Instant::now()).await {
                Ok(pass) if pass.dropped > 0 => {
                    info!(
                        dropped = pass.dropped,
                        "workers' tokens no longer good (replaced or revoked elsewhere): dropped"
                    );
                }
                Ok(_) => {}
                Err(e) => warn!(error = %e, "reading the workers' tokens again failed"),
            }
        }
    });
    let refusals = fleet.refusals.clone();
    let result = listener::serve(listener, router(fleet), shutdown, tls, limits, refusals).await;
    expiry.abort();
    archiver.abort();
    studies.abort();
    tokens.abort();
    result
}

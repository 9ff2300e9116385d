//! One port for gRPC (HTTP/2) and the HTTP JSON API (HTTP/1.1 or 2): tonic's routes merged
//! into an axum router. `serve` takes a bound listener and a shutdown future, so tests bind
//! `127.0.0.1:0` and run everything in one process.
//!
//! - [`grpc`]: the tonic services (thin: convert, call, convert, map the error);
//! - [`http`]: the JSON API; [`metrics`]: `/metrics`;
//! - [`errors`]: the one error -> gRPC code / HTTP status table and the bearer parser.

pub mod errors;
pub mod grpc;
pub mod http;
pub mod metrics;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::{get, post};
use e2fleet_proto::MAX_MESSAGE_BYTES;
use e2fleet_proto::v2::operator_service_server::OperatorServiceServer;
use e2fleet_proto::v2::worker_service_server::WorkerServiceServer;
use tokio::net::TcpListener;
use tracing::warn;

use crate::fleet::Fleet;
use grpc::{OperatorApi, WorkerApi};

/// The whole router: gRPC services plus the JSON API, `/metrics` and the dashboard.
pub fn router(fleet: Arc<Fleet>) -> axum::Router {
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
    .into_axum_router();
    let api = axum::Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/api/jobs", get(http::jobs))
        .route("/api/jobs/{id}", get(http::job))
        .route("/api/jobs/{id}/puzzle", get(http::job_puzzle))
        .route("/api/jobs/{id}/cancel", post(http::cancel_job))
        .route("/api/hosts/{hostname}/release", post(http::release_host))
        .route("/api/fleet", get(http::fleet_status))
        .route("/api/workers", get(http::workers))
        .route("/api/verification", get(http::verification))
        .route("/metrics", get(metrics::metrics))
        .merge(crate::dashboard::routes())
        .with_state(fleet);
    grpc.merge(api)
}

/// Serves until `shutdown` resolves. Also expires leases in the background.
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
    // gRPC is many small request/response pairs: without TCP_NODELAY, Nagle's algorithm
    // and delayed ACKs hold a response written in pieces for ~40 ms
    let result = match tls {
        Some(config) => {
            let listener = crate::tls::TlsListener::new(listener, config)?;
            axum::serve(listener, router(fleet))
                .with_graceful_shutdown(shutdown)
                .await
        }
        None => {
            let listener =
                axum::serve::ListenerExt::tap_io(listener, |tcp: &mut tokio::net::TcpStream| {
                    if let Err(e) = tcp.set_nodelay(true) {
                        warn!(error = %e, "cannot set TCP_NODELAY");
                    }
                });
            axum::serve(listener, router(fleet))
                .with_graceful_shutdown(shutdown)
                .await
        }
    };
    expiry.abort();
    result
}

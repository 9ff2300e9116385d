//! One port for gRPC (HTTP/2) and the HTTP JSON API (HTTP/1.1 or 2): tonic's routes merged
//! into an axum router. `serve` takes a bound listener and a shutdown future, so tests bind
//! `127.0.0.1:0` and run everything in one process.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{get, post};
use e2fleet_proto::MAX_MESSAGE_BYTES;
use e2fleet_proto::v1::operator_service_server::OperatorServiceServer;
use e2fleet_proto::v1::worker_service_server::WorkerServiceServer;
use tokio::net::TcpListener;
use tracing::warn;

use crate::fleet::{Fleet, FleetError};
use crate::service::{OperatorApi, WorkerApi};
use crate::store::StoreError;

fn http_error(e: FleetError) -> Response {
    let code = match &e {
        FleetError::NotFound(_) => StatusCode::NOT_FOUND,
        FleetError::InvalidArgument(_) => StatusCode::BAD_REQUEST,
        FleetError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
        FleetError::PermissionDenied(_) => StatusCode::FORBIDDEN,
        FleetError::FailedPrecondition(_) => StatusCode::CONFLICT,
        FleetError::Store(StoreError::Busy) => StatusCode::SERVICE_UNAVAILABLE,
        FleetError::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let message = match e {
        FleetError::Store(StoreError::Busy) => "busy; retry later".to_string(),
        FleetError::Store(_) => "internal error".to_string(),
        other => other.to_string(),
    };
    (code, Json(serde_json::json!({"error": message}))).into_response()
}

async fn api_jobs(State(fleet): State<Arc<Fleet>>) -> Response {
    match fleet.list_jobs().await {
        Ok(v) => Json(v).into_response(),
        Err(e) => http_error(e),
    }
}

async fn api_job(State(fleet): State<Arc<Fleet>>, Path(id): Path<String>) -> Response {
    match fleet.job_status(&id).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => http_error(e),
    }
}

async fn api_job_puzzle(State(fleet): State<Arc<Fleet>>, Path(id): Path<String>) -> Response {
    match fleet.job_puzzle(&id).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => http_error(e),
    }
}

/// The bearer token of a request, if any.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

/// `POST /api/jobs/{id}/cancel` with the admin token.
async fn api_cancel_job(
    State(fleet): State<Arc<Fleet>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let result = match fleet.check_admin(bearer(&headers)) {
        Ok(()) => fleet.cancel_job(&id).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => Json(serde_json::json!({"job_id": id, "state": "cancelled"})).into_response(),
        Err(e) => http_error(e),
    }
}

/// `POST /api/hosts/{hostname}/release` with the admin token.
async fn api_release_host(
    State(fleet): State<Arc<Fleet>>,
    Path(host): Path<String>,
    headers: HeaderMap,
) -> Response {
    let result = match fleet.check_admin(bearer(&headers)) {
        Ok(()) => fleet.release_host(&host).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(n) => Json(serde_json::json!({"hostname": host, "workers_released": n})).into_response(),
        Err(e) => http_error(e),
    }
}

#[derive(serde::Deserialize)]
struct SuiteQuery {
    #[serde(default)]
    suite: String,
}

async fn api_verification(
    State(fleet): State<Arc<Fleet>>,
    axum::extract::Query(q): axum::extract::Query<SuiteQuery>,
) -> Response {
    match fleet.verification_matrix(&q.suite).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => http_error(e),
    }
}

async fn api_fleet(State(fleet): State<Arc<Fleet>>) -> Response {
    match fleet.fleet_status().await {
        Ok(v) => Json(v).into_response(),
        Err(e) => http_error(e),
    }
}

async fn api_workers(State(fleet): State<Arc<Fleet>>) -> Response {
    match fleet.list_workers().await {
        Ok(v) => Json(v).into_response(),
        Err(e) => http_error(e),
    }
}

/// Prometheus text exposition of the fleet: both rates (kept as separate metrics),
/// workers by state, units and leases per minute, wrong results, per-job progress.
async fn metrics(State(fleet): State<Arc<Fleet>>) -> Response {
    let (fleet_doc, jobs) = match (fleet.fleet_status().await, fleet.list_jobs().await) {
        (Ok(f), Ok(j)) => (f, j),
        (Err(e), _) | (_, Err(e)) => return http_error(e),
    };
    let mut out = String::new();
    let mut metric = |name: &str, help: &str, kind: &str, samples: Vec<(String, f64)>| {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
        for (labels, v) in samples {
            out.push_str(&format!("{name}{labels} {v}\n"));
        }
    };
    let num = |v: &serde_json::Value| v.as_f64().unwrap_or(0.0);
    let w = &fleet_doc["workers"];
    metric(
        "e2fleet_workers",
        "Workers by state.",
        "gauge",
        ["online", "idle", "offline", "quarantined"]
            .iter()
            .map(|s| (format!("{{state=\"{s}\"}}"), num(&w[*s])))
            .collect(),
    );
    let agg = &fleet_doc["aggregate_nodes_per_s"];
    metric(
        "e2fleet_aggregate_nodes_per_second",
        "Fleet aggregate: nodes received per wall-clock second over the last 60 s (not a per-core figure).",
        "gauge",
        vec![
            ("{kind=\"raw\"}".into(), num(&agg["raw"])),
            ("{kind=\"verified\"}".into(), num(&agg["verified"])),
        ],
    );
    let per_core = &fleet_doc["per_core_nodes_per_s"];
    let mut samples = vec![("{group=\"all\"}".to_string(), num(&per_core["overall"]))];
    for g in per_core["by_engine_kind"].as_array().into_iter().flatten() {
        let key = g["key"]
            .as_str()
            .unwrap_or("")
            .replace(['"', '\\', '\n'], "_");
        samples.push((
            format!("{{engine_kind=\"{key}\"}}"),
            num(&g["median_nodes_per_s"]),
        ));
    }
    for g in per_core["by_cpu_model"].as_array().into_iter().flatten() {
        let key = g["key"]
            .as_str()
            .unwrap_or("")
            .replace(['"', '\\', '\n'], "_");
        samples.push((
            format!("{{cpu_model=\"{key}\"}}"),
            num(&g["median_nodes_per_s"]),
        ));
    }
    metric(
        "e2fleet_per_core_nodes_per_second",
        "Median nodes per engine-thread second over results of the last hour (one core, not the fleet).",
        "gauge",
        samples,
    );
    let ws = fleet.writer_stats();
    for (name, help, value) in [
        (
            "e2fleet_writer_jobs_total",
            "Write jobs (leases, reports, heartbeats, ...) run by the writer thread.",
            ws.jobs as f64,
        ),
        (
            "e2fleet_writer_queued_seconds_total",
            "Seconds write jobs spent queued for the writer thread, summed.",
            ws.queued_us as f64 / 1e6,
        ),
        (
            "e2fleet_writer_running_seconds_total",
            "Seconds write jobs spent running, summed.",
            ws.running_us as f64 / 1e6,
        ),
        (
            "e2fleet_writer_commits_total",
            "Transactions committed by the writer thread (one per batch of jobs).",
            ws.batches as f64,
        ),
    ] {
        metric(name, help, "counter", vec![(String::new(), value)]);
    }
    let u = &fleet_doc["units_last_minute"];
    metric(
        "e2fleet_units_last_minute",
        "Units leased, completed and expired in the last minute.",
        "gauge",
        ["leased", "completed", "expired"]
            .iter()
            .map(|s| (format!("{{event=\"{s}\"}}"), num(&u[*s])))
            .collect(),
    );
    metric(
        "e2fleet_wrong_results_total",
        "Results marked wrong (cross-check losers and failed verifications).",
        "counter",
        vec![(String::new(), num(&fleet_doc["wrong_results"]))],
    );
    let mut nodes = Vec::new();
    let mut units = Vec::new();
    for j in &jobs {
        let id = j["job_id"].as_str().unwrap_or("");
        nodes.push((format!("{{job=\"{id}\"}}"), num(&j["nodes_total"])));
        for state in ["open", "leased", "done"] {
            units.push((
                format!("{{job=\"{id}\",state=\"{state}\"}}"),
                num(&j["units"][state]),
            ));
        }
    }
    metric(
        "e2fleet_job_nodes",
        "Exact nodes counted so far per job.",
        "gauge",
        nodes,
    );
    metric(
        "e2fleet_job_units",
        "Units per job and state.",
        "gauge",
        units,
    );
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        out,
    )
        .into_response()
}

/// The whole router: gRPC services plus the read-only JSON API.
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
    let http = axum::Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/api/jobs", get(api_jobs))
        .route("/api/jobs/{id}", get(api_job))
        .route("/api/jobs/{id}/puzzle", get(api_job_puzzle))
        .route("/api/jobs/{id}/cancel", post(api_cancel_job))
        .route("/api/hosts/{hostname}/release", post(api_release_host))
        .route("/api/fleet", get(api_fleet))
        .route("/api/workers", get(api_workers))
        .route("/api/verification", get(api_verification))
        .route("/metrics", get(metrics))
        .merge(crate::dashboard::routes())
        .with_state(fleet);
    grpc.merge(http)
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

//! The JSON API under `/api/` (what the dashboard reads; documented in
//! docs/operator-guide.md): the same read models gRPC serves, as JSON.

use std::sync::Arc;

use axum::extract::{Extension, Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Json, Response};
use e2fleet_proto::api::{JobId, StudyId};
use serde::Serialize;

use super::errors::{bearer, http_error};
use super::listener::Peer;
use crate::fleet::auth_limits::Secret;
use crate::fleet::{Fleet, FleetError};

fn reply<T: Serialize>(r: Result<T, FleetError>) -> Response {
    match r {
        Ok(v) => Json(v).into_response(),
        Err(e) => http_error(e),
    }
}

fn job_id(text: &str) -> Result<JobId, FleetError> {
    Ok(text.parse::<JobId>()?)
}

/// The bearer token of a request.
fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    bearer(
        headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok()),
    )
}

/// The caller's address (put on every request by the listener).
pub type Caller = Option<Extension<Peer>>;

/// Checks the admin token of a JSON API call, as the gRPC gate does: an address that
/// kept guessing is refused before the token is looked at, and every wrong one counts.
fn admin(fleet: &Fleet, headers: &HeaderMap, caller: &Caller) -> Result<(), FleetError> {
    let ip = caller.as_ref().map(|Extension(p)| p.0.ip());
    if fleet.auth_failures.is_shut_out(ip, Secret::Admin) {
        return Err(FleetError::TooMany(
            "too many failed attempts from this address; retry in a minute".into(),
        ));
    }
    let checked = fleet.check_admin(bearer_token(headers));
    if checked.is_err() {
        fleet.auth_failures.failed(ip, Secret::Admin);
    }
    checked
}

/// Checks the worker token of an HTTP call (a download of a worker binary), as the gRPC
/// gate does: an address that kept guessing is refused before the token is looked at, and
/// every wrong one counts.
pub async fn worker(
    fleet: &Fleet,
    headers: &HeaderMap,
    caller: &Caller,
) -> Result<crate::store::WorkerRecord, FleetError> {
    let ip = caller.as_ref().map(|Extension(p)| p.0.ip());
    if fleet.auth_failures.is_shut_out(ip, Secret::Worker) {
        return Err(FleetError::TooMany(
            "too many failed attempts from this address; retry in a minute".into(),
        ));
    }
    let checked = fleet.worker_by_token(bearer_token(headers)).await;
    if checked.is_err() {
        fleet.auth_failures.failed(ip, Secret::Worker);
    }
    checked
}

/// `GET /api/studies`: every order study, newest first, with its ranking.
pub async fn studies(State(fleet): State<Arc<Fleet>>) -> Response {
    reply(fleet.list_studies().await)
}

/// `GET /api/studies/{id}`: one study, its orders best first.
pub async fn study(State(fleet): State<Arc<Fleet>>, Path(id): Path<String>) -> Response {
    match id.parse::<StudyId>() {
        Ok(id) => reply(fleet.study_status(id).await),
        Err(e) => http_error(e.into()),
    }
}

/// `GET /api/jobs`
pub async fn jobs(State(fleet): State<Arc<Fleet>>) -> Response {
    reply(fleet.list_jobs().await)
}

/// `GET /api/jobs/{id}`
pub async fn job(State(fleet): State<Arc<Fleet>>, Path(id): Path<String>) -> Response {
    reply(async { fleet.job_status(job_id(&id)?).await }.await)
}

/// `GET /api/jobs/{id}/audits`
pub async fn job_audits(State(fleet): State<Arc<Fleet>>, Path(id): Path<String>) -> Response {
    reply(async { fleet.job_audits(job_id(&id)?).await }.await)
}

/// `GET /api/jobs/{id}/certificate[?partial=true]` with the admin token: the certificate
/// file (building one reads every unit of the job, so it is not open to everyone).
pub async fn certificate(
    State(fleet): State<Arc<Fleet>>,
    Path(id): Path<String>,
    Query(q): Query<CertificateQuery>,
    headers: HeaderMap,
    caller: Caller,
) -> Response {
    let file = async {
        admin(&fleet, &headers, &caller)?;
        let id = job_id(&id)?;
        Ok::<_, FleetError>((id, fleet.certificate(id, q.partial).await?))
    }
    .await;
    match file {
        Ok((id, bytes)) => (
            [
                (
                    axum::http::header::CONTENT_TYPE,
                    "application/gzip".to_string(),
                ),
                (
                    axum::http::header::CONTENT_DISPOSITION,
                    format!("attachment; filename=\"{id}.e2cert\""),
                ),
            ],
            bytes,
        )
            .into_response(),
        Err(e) => http_error(e),
    }
}

/// Query of [`certificate`].
#[derive(serde::Deserialize)]
pub struct CertificateQuery {
    /// Also a job that is not complete.
    #[serde(default)]
    partial: bool,
}

/// `GET /api/jobs/{id}/puzzle`
pub async fn job_puzzle(State(fleet): State<Arc<Fleet>>, Path(id): Path<String>) -> Response {
    reply(async { fleet.job_puzzle(job_id(&id)?).await }.await)
}

/// `POST /api/jobs/{id}/cancel` with the admin token.
pub async fn cancel_job(
    State(fleet): State<Arc<Fleet>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    caller: Caller,
) -> Response {
    reply(
        async {
            admin(&fleet, &headers, &caller)?;
            let id = job_id(&id)?;
            fleet.cancel_job(id).await?;
            Ok(serde_json::json!({"job_id": id, "state": "cancelled"}))
        }
        .await,
    )
}

/// `POST /api/hosts/{hostname}/release` with the admin token.
pub async fn release_host(
    State(fleet): State<Arc<Fleet>>,
    Path(host): Path<String>,
    headers: HeaderMap,
    caller: Caller,
) -> Response {
    reply(
        async {
            admin(&fleet, &headers, &caller)?;
            let n = fleet.release_host(&host).await?;
            Ok(serde_json::json!({"hostname": host, "workers_released": n}))
        }
        .await,
    )
}

/// `?suite=NAME` (default: the built-in suite).
#[derive(serde::Deserialize)]
pub struct SuiteQuery {
    #[serde(default)]
    suite: String,
}

/// `GET /api/verification?suite=NAME`
pub async fn verification(
    State(fleet): State<Arc<Fleet>>,
    Query(q): Query<SuiteQuery>,
) -> Response {
    reply(
        fleet
            .verification_matrix(&q.suite)
            .await
            .map(|m| m.public()),
    )
}

/// `GET /api/fleet`
pub async fn fleet_status(State(fleet): State<Arc<Fleet>>) -> Response {
    reply(fleet.fleet_status().await)
}

/// `GET /api/workers`
pub async fn workers(
    State(fleet): State<Arc<Fleet>>,
    Query(page): Query<Page>,
    headers: HeaderMap,
    caller: Caller,
) -> Response {
    // the full view (CPU features, hardware class) for the operator; labels for anyone
    // (a wrong token is a wrong token: counted, and refused)
    let full = match bearer_token(&headers) {
        None => false,
        Some(_) => match admin(&fleet, &headers, &caller) {
            Ok(()) => true,
            Err(e) => return http_error(e),
        },
    };
    reply(fleet.list_workers().await.map(|all| {
        let offset = page.offset.unwrap_or(0);
        let limit = page.limit.unwrap_or(MAX_PAGE).min(MAX_PAGE);
        all.into_iter()
            .skip(offset)
            .take(limit)
            .map(|w| if full { w } else { w.public() })
            .collect::<Vec<_>>()
    }))
}

/// Most workers one `GET /api/workers` returns (`?offset=N&limit=M` pages through more).
pub const MAX_PAGE: usize = 1000;

/// A page of a long list.
#[derive(serde::Deserialize)]
pub struct Page {
    offset: Option<usize>,
    limit: Option<usize>,
}

/// `GET /api/jobs/{id}/best`: the job's best boards.
pub async fn best_boards(State(fleet): State<Arc<Fleet>>, Path(id): Path<String>) -> Response {
    reply(async { fleet.best_boards(job_id(&id)?).await }.await)
}

/// `GET /api/stats`: credit per volunteer account (public, like the rest of the reads).
pub async fn stats(State(fleet): State<Arc<Fleet>>) -> Response {
    reply(fleet.stats().await)
}

/// `GET /api/releases`: the worker releases offered, by platform (`{"offered": [Manifest]}`).
pub async fn releases(State(fleet): State<Arc<Fleet>>) -> Response {
    let offered = fleet
        .releases()
        .map(|r| crate::releases::all_manifests(r.dir()))
        .unwrap_or_default();
    Json(serde_json::json!({ "offered": offered })).into_response()
}

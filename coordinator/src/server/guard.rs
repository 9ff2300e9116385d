//! The gate every gRPC request passes before its body is read: who it is (the admin
//! token for operator calls; a worker token for worker calls, the worker it names put in
//! the request's extensions for the handler), how big its body may be (per method: a
//! report is kilobytes, a job's puzzle megabytes), and how fast it must arrive. A caller
//! without a token costs a header lookup, never a body.
//!
//! Addresses that keep failing to authenticate, or keep registering, are slowed down per
//! IP ([`Guard::strangers`]): each attempt costs a database read or write otherwise.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, Limited};
use tonic::{Code, Status};

use super::errors::{bearer, status_of};
use super::listener::Peer;
use crate::fleet::Fleet;

/// How a gRPC method is guarded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Auth {
    /// Anyone (registration carries its enrolment token in the body; health, reflection).
    Open,
    /// A worker token.
    Worker,
    /// The admin token.
    Admin,
}

/// Longest a request body may take to arrive between two of its frames.
pub const BODY_FRAME_TIMEOUT: Duration = Duration::from_secs(20);

/// The rule for a gRPC path: who may call, and the largest body.
fn rule(path: &str) -> Option<(Auth, usize)> {
    const KIB: usize = 1024;
    const MIB: usize = 1024 * KIB;
    let (service, method) = path.strip_prefix('/')?.split_once('/')?;
    Some(match (service, method) {
        ("e2fleet.v2.WorkerService", "RegisterWorker") => (Auth::Open, 16 * KIB),
        ("e2fleet.v2.WorkerService", "ReportResult") => (Auth::Worker, 2 * MIB),
        ("e2fleet.v2.WorkerService", "SubmitVerification") => (Auth::Worker, 4 * MIB),
        ("e2fleet.v2.WorkerService", "Heartbeat" | "ReleaseLeases") => (Auth::Worker, 256 * KIB),
        ("e2fleet.v2.WorkerService", _) => (Auth::Worker, 64 * KIB),
        ("e2fleet.v2.OperatorService", "SubmitJob") => (Auth::Admin, 17 * MIB),
        ("e2fleet.v2.OperatorService", "SubmitSuite") => (Auth::Admin, 4 * MIB),
        ("e2fleet.v2.OperatorService", _) => (Auth::Admin, 64 * KIB),
        (s, _) if s.starts_with("grpc.health.") || s.starts_with("grpc.reflection.") => {
            (Auth::Open, 16 * KIB)
        }
        _ => return None,
    })
}

/// The gate's state: the fleet (for tokens) and per-address limits on strangers.
pub struct Guard {
    fleet: Arc<Fleet>,
    /// Failed authentications and registrations per address.
    strangers: governor::DefaultKeyedRateLimiter<IpAddr>,
}

impl Guard {
    /// A gate for `fleet`: an address may fail to authenticate (or register) 20 times a
    /// second, in bursts of 100.
    pub fn new(fleet: Arc<Fleet>) -> Guard {
        let quota = governor::Quota::per_second(std::num::NonZeroU32::new(20).expect("20"))
            .allow_burst(std::num::NonZeroU32::new(100).expect("100"));
        Guard {
            fleet,
            strangers: governor::RateLimiter::keyed(quota),
        }
    }

    /// Whether `ip` may try once more.
    fn stranger_may(&self, ip: Option<IpAddr>) -> bool {
        ip.is_none_or(|ip| self.strangers.check_key(&ip).is_ok())
    }
}

fn refuse(status: Status) -> Response {
    status.into_http::<Body>().into_response()
}

/// The middleware (`axum::middleware::from_fn_with_state`).
pub async fn guard(State(g): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    let Some((auth, limit)) = rule(request.uri().path()) else {
        return next.run(request).await;
    };
    let ip = request.extensions().get::<Peer>().map(|p| p.0.ip());
    let token = bearer(
        request
            .headers()
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok()),
    )
    .map(str::to_string);
    let mut request = request;
    match auth {
        Auth::Open => {
            if request.uri().path().ends_with("/RegisterWorker") && !g.stranger_may(ip) {
                return refuse(Status::resource_exhausted(
                    "too many registrations from this address; retry later",
                ));
            }
        }
        Auth::Admin => {
            if let Err(e) = g.fleet.check_admin(token.as_deref()) {
                if !g.stranger_may(ip) {
                    return refuse(Status::resource_exhausted("too many failed attempts"));
                }
                return refuse(status_of(e));
            }
        }
        Auth::Worker => match g.fleet.worker_by_token(token.as_deref()).await {
            Ok(worker) => {
                request.extensions_mut().insert(worker);
            }
            Err(e) => {
                if !g.stranger_may(ip) {
                    return refuse(Status::resource_exhausted("too many failed attempts"));
                }
                return refuse(status_of(e));
            }
        },
    }
    // the body, read only now: at most `limit` bytes, each frame within the timeout
    let (parts, body) = request.into_parts();
    let body =
        Limited::new(body, limit).map_err(|e| Status::new(Code::ResourceExhausted, e.to_string()));
    let body = tower_http::timeout::TimeoutBody::new(BODY_FRAME_TIMEOUT, body);
    next.run(Request::from_parts(parts, Body::new(body))).await
}

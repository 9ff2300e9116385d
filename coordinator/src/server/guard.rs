//! The gate every gRPC request passes before its body is read: who it is (the admin
//! token for operator calls; a worker token for worker calls, the worker it names put in
//! the request's extensions for the handler), how big its body may be (per method: a
//! report is kilobytes, a job's puzzle megabytes), and how fast it must arrive. A caller
//! without a token costs a header lookup, never a body.
//!
//! Addresses that keep failing to authenticate (a wrong admin, worker or enrolment token)
//! are shut out for a few seconds (`Guard::failed`): a shut-out address is refused before
//! any token is looked up, so a stranger's guesses cost a header lookup each. Valid
//! registrations are not limited per address (a cluster behind one NAT address starts
//! its workers together); new identities are limited per volunteer account instead.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

/// How long an address that failed too often is refused.
pub const SHUT_OUT: Duration = Duration::from_secs(5);

/// Most addresses remembered as shut out (older entries are dropped first when full).
const SHUT_OUT_MAX: usize = 100_000;

/// The gate's state: the fleet (for tokens) and per-address limits on strangers.
pub struct Guard {
    fleet: Arc<Fleet>,
    /// Failed authentications per address: 20 a second, in bursts of 100.
    failures: governor::DefaultKeyedRateLimiter<IpAddr>,
    /// Addresses past that, and until when they are refused.
    shut_out: Mutex<HashMap<IpAddr, Instant>>,
}

impl Guard {
    /// A gate for `fleet`.
    pub fn new(fleet: Arc<Fleet>) -> Guard {
        let quota = governor::Quota::per_second(std::num::NonZeroU32::new(20).expect("20"))
            .allow_burst(std::num::NonZeroU32::new(100).expect("100"));
        Guard {
            fleet,
            failures: governor::RateLimiter::keyed(quota),
            shut_out: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `ip` is shut out now.
    fn is_shut_out(&self, ip: Option<IpAddr>) -> bool {
        let Some(ip) = ip else { return false };
        let shut = self.shut_out.lock().expect("shut-out addresses");
        shut.get(&ip).is_some_and(|&until| Instant::now() < until)
    }

    /// Counts a failed authentication from `ip`; past the limit the address is shut out
    /// for [`SHUT_OUT`].
    fn failed(&self, ip: Option<IpAddr>) {
        let Some(ip) = ip else { return };
        if self.failures.check_key(&ip).is_ok() {
            return;
        }
        let now = Instant::now();
        let mut shut = self.shut_out.lock().expect("shut-out addresses");
        if shut.len() >= SHUT_OUT_MAX {
            shut.retain(|_, until| now < *until);
            if shut.len() >= SHUT_OUT_MAX {
                shut.clear();
            }
        }
        shut.insert(ip, now + SHUT_OUT);
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
    let shut_out = || {
        refuse(Status::resource_exhausted(
            "too many failed attempts from this address; retry in a few seconds",
        ))
    };
    let mut request = request;
    let registering = request.uri().path().ends_with("/RegisterWorker");
    match auth {
        Auth::Open => {
            if registering && g.is_shut_out(ip) {
                return shut_out();
            }
        }
        // a constant-time comparison: cheap, only counted
        Auth::Admin => {
            if let Err(e) = g.fleet.check_admin(token.as_deref()) {
                g.failed(ip);
                return refuse(status_of(e));
            }
        }
        // a known token is in memory; an unknown one costs a database read, which a
        // shut-out address does not get
        Auth::Worker => {
            let worker = match g.fleet.cached_worker(token.as_deref()) {
                Some(w) => Ok(w),
                None if g.is_shut_out(ip) => return shut_out(),
                None => g.fleet.worker_by_token(token.as_deref()).await,
            };
            match worker {
                Ok(worker) => {
                    request.extensions_mut().insert(worker);
                }
                Err(e) => {
                    g.failed(ip);
                    return refuse(status_of(e));
                }
            }
        }
    }
    // the body, read only now: at most `limit` bytes, each frame within the timeout
    let (parts, body) = request.into_parts();
    let body =
        Limited::new(body, limit).map_err(|e| Status::new(Code::ResourceExhausted, e.to_string()));
    let body = tower_http::timeout::TimeoutBody::new(BODY_FRAME_TIMEOUT, body);
    let response = next.run(Request::from_parts(parts, Body::new(body))).await;
    // a registration's token is in its body: its failure shows in the answer (an error
    // is a trailers-only response, its status in the headers)
    if registering
        && response
            .headers()
            .get("grpc-status")
            .is_some_and(|s| s.as_bytes() == b"16")
    {
        g.failed(ip);
    }
    response
}

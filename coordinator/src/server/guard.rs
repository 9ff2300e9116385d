//! The gate every gRPC request passes before its body is read: who it is (the admin
//! token for operator calls; a worker token for worker calls, the worker it names put in
//! the request's extensions for the handler), how big its body may be (per method: a
//! report is kilobytes, a job's puzzle megabytes), and how fast it must arrive. A caller
//! without a token costs a header lookup, never a body.
//!
//! Addresses that keep failing to authenticate (a wrong admin, worker or enrolment token)
//! are shut out for a while ([`crate::fleet::auth_limits`]): a shut-out address is refused
//! before any token is looked up, so a stranger's guesses cost a header lookup each. Valid
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
use e2fleet_proto::api::WorkerId;
use http_body_util::{BodyExt, Limited};
use tokio::sync::Semaphore;
use tonic::{Code, Status};

use super::deadline::{RequestDeadline, ResponseDeadline};
use super::errors::{bearer, status_of};
use super::listener::{Peer, Trust};
use crate::fleet::Fleet;
use crate::fleet::auth_limits::Secret;
use crate::fleet::call_times::Call;
use crate::fleet::refusals::Call as Refused;

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

/// Longest a call without a token (a registration, a health check) may take to send its
/// body: a stranger dripping a byte every few seconds is cut off here.
pub const OPEN_BODY_TIME: Duration = Duration::from_secs(10);
/// Longest a call without a token may last at all (a health `Watch` stream ends then
/// with `DEADLINE_EXCEEDED`; the client calls again).
pub const OPEN_CALL_TIME: Duration = Duration::from_secs(30);
/// Longest a worker's or operator's request body may take to arrive (a 17 MiB puzzle
/// over a slow link; a report is kilobytes).
pub const BODY_TIME: Duration = Duration::from_secs(300);

/// Calls without a token in flight at once, from everyone.
pub const OPEN_IN_FLIGHT: usize = 256;
/// Calls without a token in flight at once from one address (a lab behind one address
/// registering its workers together is refused past this and retries: a registration
/// takes milliseconds). Eight addresses at this limit fill a quarter of
/// [`OPEN_IN_FLIGHT`].
pub const OPEN_IN_FLIGHT_PER_IP: usize = 8;
/// Verification and audit submissions (the heavy bodies) in flight at once, from
/// everyone; each identity has one at a time.
pub const HEAVY_IN_FLIGHT: usize = 4;

/// Whether a worker method's body is heavy: decoded large, stored, compared.
fn heavy(path: &str) -> bool {
    path.ends_with("/SubmitVerification") || path.ends_with("/SubmitAudit")
}

/// The rule for a gRPC path: who may call, and the largest body.
fn rule(path: &str) -> Option<(Auth, usize)> {
    const KIB: usize = 1024;
    const MIB: usize = 1024 * KIB;
    let (service, method) = path.strip_prefix('/')?.split_once('/')?;
    Some(match (service, method) {
        ("e2fleet.v2.WorkerService", "RegisterWorker") => (Auth::Open, 16 * KIB),
        ("e2fleet.v2.WorkerService", "ReportResult") => (Auth::Worker, 2 * MIB),
        ("e2fleet.v2.WorkerService", "SubmitVerification") => (Auth::Worker, 2 * MIB),
        ("e2fleet.v2.WorkerService", "SubmitAudit") => (Auth::Worker, 4 * MIB),
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

/// The gate's state: the fleet (for tokens and the per-address limits on strangers,
/// [`crate::fleet::auth_limits`]), and what is in flight.
pub struct Guard {
    fleet: Arc<Fleet>,
    /// Calls without a token in flight.
    open: Arc<Semaphore>,
    /// The same per address.
    open_by_ip: Counts<IpAddr>,
    /// Heavy submissions in flight.
    heavy: Arc<Semaphore>,
    /// Identities with a heavy submission in flight.
    heavy_by_worker: Counts<WorkerId>,
}

/// How many of something each key holds, taken and given back by [`Slot`]s.
#[derive(Clone)]
struct Counts<K: std::hash::Hash + Eq + Copy>(Arc<Mutex<HashMap<K, usize>>>);

impl<K: std::hash::Hash + Eq + Copy> Default for Counts<K> {
    fn default() -> Counts<K> {
        Counts(Arc::new(Mutex::new(HashMap::new())))
    }
}

/// One of a key's places in [`Counts`], given back when dropped.
struct Slot<K: std::hash::Hash + Eq + Copy> {
    counts: Counts<K>,
    key: K,
}

impl<K: std::hash::Hash + Eq + Copy> Counts<K> {
    /// A place for `key` if it holds fewer than `most`.
    fn take(&self, key: K, most: usize) -> Option<Slot<K>> {
        let mut map = self.0.lock().expect("counts");
        let n = map.entry(key).or_insert(0);
        if *n >= most {
            return None;
        }
        *n += 1;
        Some(Slot {
            counts: self.clone(),
            key,
        })
    }
}

impl<K: std::hash::Hash + Eq + Copy> Drop for Slot<K> {
    fn drop(&mut self) {
        let mut map = self.counts.0.lock().expect("counts");
        if let Some(n) = map.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.key);
            }
        }
    }
}

impl Guard {
    /// A gate for `fleet`.
    pub fn new(fleet: Arc<Fleet>) -> Guard {
        Guard {
            fleet,
            open: Arc::new(Semaphore::new(OPEN_IN_FLIGHT)),
            open_by_ip: Counts::default(),
            heavy: Arc::new(Semaphore::new(HEAVY_IN_FLIGHT)),
            heavy_by_worker: Counts::default(),
        }
    }

    fn is_shut_out(&self, ip: Option<IpAddr>, secret: Secret) -> bool {
        self.fleet.auth_failures.is_shut_out(ip, secret)
    }

    fn failed(&self, ip: Option<IpAddr>, secret: Secret) {
        self.fleet.auth_failures.failed(ip, secret)
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
    let (call, arrived) = (Call::of_path(request.uri().path()), Instant::now());
    let ip = request.extensions().get::<Peer>().map(|p| p.0.ip());
    let token = bearer(
        request
            .headers()
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok()),
    )
    .map(str::to_string);
    let shut_out = || {
        g.fleet.refusals.call(Refused::ShutOut);
        refuse(Status::resource_exhausted(
            "too many failed attempts from this address; retry in a few seconds",
        ))
    };
    let mut request = request;
    let registering = request.uri().path().ends_with("/RegisterWorker");
    let heavy_call = heavy(request.uri().path());
    let trust = request.extensions().get::<Trust>().cloned();
    let busy = |what: &str| {
        refuse(Status::resource_exhausted(format!(
            "{what}; retry in a few seconds"
        )))
    };
    // what a call holds while it is in flight (given back when its answer has gone out)
    let mut held: Vec<Box<dyn std::any::Any + Send + Sync>> = Vec::new();
    let body_time = match auth {
        Auth::Open => {
            if registering && g.is_shut_out(ip, Secret::Worker) {
                return shut_out();
            }
            let Ok(permit) = g.open.clone().try_acquire_owned() else {
                g.fleet.refusals.call(Refused::OpenFull);
                return busy("too many calls without a token in flight");
            };
            held.push(Box::new(permit));
            if let Some(ip) = ip {
                let Some(slot) = g.open_by_ip.take(ip, OPEN_IN_FLIGHT_PER_IP) else {
                    g.fleet.refusals.call(Refused::OpenAddressFull);
                    return busy("too many calls without a token from this address");
                };
                held.push(Box::new(slot));
            }
            OPEN_BODY_TIME
        }
        // a constant-time comparison: cheap, but counted, and refused to an address
        // that kept guessing
        Auth::Admin => {
            if g.is_shut_out(ip, Secret::Admin) {
                return shut_out();
            }
            if let Err(e) = g.fleet.check_admin(token.as_deref()) {
                g.fleet.refusals.call(Refused::BadToken);
                g.failed(ip, Secret::Admin);
                return refuse(status_of(e));
            }
            trusted(&trust);
            BODY_TIME
        }
        // a known token is in memory; an unknown one costs a database read, which a
        // shut-out address does not get
        Auth::Worker => {
            let worker = match g.fleet.cached_worker(token.as_deref()) {
                Some(w) => Ok(w),
                None if g.is_shut_out(ip, Secret::Worker) => return shut_out(),
                None => g.fleet.worker_by_token(token.as_deref()).await,
            };
            let worker = match worker {
                Ok(worker) => worker,
                Err(e) => {
                    if matches!(e, crate::fleet::FleetError::Unauthenticated(_)) {
                        g.fleet.refusals.call(Refused::BadToken);
                    }
                    g.failed(ip, Secret::Worker);
                    return refuse(status_of(e));
                }
            };
            trusted(&trust);
            // a heavy body is decoded only within its identity's and account's rate,
            // one at a time per identity, a few at a time in all
            if heavy_call {
                if let Err(e) = g.fleet.submission_allowed(&worker) {
                    g.fleet.refusals.call(Refused::SubmissionBusy);
                    return refuse(status_of(e));
                }
                let Some(slot) = g.heavy_by_worker.take(worker.id, 1) else {
                    g.fleet.refusals.call(Refused::SubmissionBusy);
                    return busy("one verification or audit submission at a time");
                };
                held.push(Box::new(slot));
                let Ok(permit) = g.heavy.clone().try_acquire_owned() else {
                    g.fleet.refusals.call(Refused::SubmissionBusy);
                    return busy("the coordinator is judging other submissions");
                };
                held.push(Box::new(permit));
            }
            request.extensions_mut().insert(worker);
            BODY_TIME
        }
    };
    // the body, read only now: at most `limit` bytes, each frame within the timeout, all
    // of it within `body_time`
    let (parts, body) = request.into_parts();
    let body =
        Limited::new(body, limit).map_err(|e| Status::new(Code::ResourceExhausted, e.to_string()));
    let body = RequestDeadline::new(body, body_time);
    let body = tower_http::timeout::TimeoutBody::new(BODY_FRAME_TIMEOUT, body);
    let response = next.run(Request::from_parts(parts, Body::new(body))).await;
    if registering {
        // a registration's token is in its body: its failure shows in the answer (an
        // error is a trailers-only response, its status in the headers); a success has
        // no status in its headers
        match response.headers().get("grpc-status") {
            Some(s) if s.as_bytes() == b"16" => g.failed(ip, Secret::Worker),
            None if response.status().is_success() => trusted(&trust),
            _ => {}
        }
    }
    g.fleet.call_times.record(call, arrived.elapsed());
    if auth != Auth::Open {
        drop(held);
        return response;
    }
    // a call without a token ends within its time, stream or not, and holds its place
    // until its answer is out
    let (parts, body) = response.into_parts();
    Response::from_parts(
        parts,
        Body::new(ResponseDeadline::new(body, OPEN_CALL_TIME, held)),
    )
}

/// Marks the call's connection as one that showed a valid token (a connection that never
/// does is closed after a while: [`super::listener`]).
fn trusted(trust: &Option<Trust>) {
    if let Some(t) = trust {
        t.set();
    }
}

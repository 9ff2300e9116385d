//! The worker's side of the fleet API as typed calls: every wire message is converted at
//! this edge, so `run` and `verify` handle leases, specs and outcomes as domain values.
//! Calls answer `tonic::Status` so callers can tell transient failures (retry with
//! backoff) from refusals; a malformed answer from the coordinator is `INTERNAL`.

use std::path::Path;
use std::time::Duration;

use e2fleet_engine::engine::EngineKind;
use e2fleet_engine::suite::SuiteUnit;
use e2fleet_proto::api::{
    AuditOutcome, AuditSubmission, Heartbeat, HostInfo, JobId, JobSpec, Lease, LeaseId, Report,
    ReportOutcome, SuiteResult, VerificationOutcome, WorkerId,
};
use e2fleet_proto::client::{authed, endpoint};
use e2fleet_proto::convert::{WireError, engine_kind_to_wire, suite_unit_from_wire};
use e2fleet_proto::v2;
use e2fleet_proto::v2::worker_service_client::WorkerServiceClient;
use tonic::transport::Channel;
use tonic::{Code, Request, Status};

/// How long one call may take before it is abandoned (and retried), enforced here (the
/// channel's own timeout: a call on a link that went silent ends even though the server
/// never saw it) and told to the server (`grpc-timeout`): long enough for a job spec over
/// a slow link, short enough that the loop hears of a dead link soon.
const CALL_TIMEOUT: Duration = Duration::from_secs(20);

/// Longest wait for the next chunk of a download.
pub const DOWNLOAD_CHUNK_TIME: Duration = Duration::from_secs(60);
/// Longest a download may take.
pub const DOWNLOAD_TIME: Duration = Duration::from_secs(900);

/// Why a download failed.
#[derive(Debug, thiserror::Error)]
pub enum DownloadError {
    /// Not there, or not what was asked for (too large): asking again will not help.
    #[error("{0}")]
    Refused(String),
    /// The coordinator is away or busy, or the transfer broke: try again later.
    #[error("{0}")]
    Unavailable(String),
    /// This machine could not keep what came (a full disk).
    #[error("{0}")]
    Local(String),
}

/// Most lease ids read from one heartbeat answer's list (a worker holds at most 64).
const MAX_LEASE_IDS: usize = 1024;

/// What a heartbeat answered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BeatReply {
    /// Leases to drop without a report.
    pub drop: Vec<LeaseId>,
    /// Leases to stop at their exact cursor and report (their units are split for
    /// threads that are idle elsewhere).
    pub yield_now: Vec<LeaseId>,
    /// The worker release offered to this platform (a version; empty: none).
    pub offered_release: String,
}

/// A version string from the coordinator, kept only if it could be one.
fn bounded(version: String) -> String {
    if e2fleet_proto::release::is_path_safe(&version) {
        version
    } else {
        String::new()
    }
}

fn malformed(e: WireError) -> Status {
    Status::internal(format!("malformed answer from the coordinator: {e}"))
}

/// Whether a failed call is worth retrying later (the coordinator is away, overloaded or
/// restarting), as opposed to a refusal.
pub fn is_transient(s: &Status) -> bool {
    matches!(
        s.code(),
        Code::Unavailable
            | Code::DeadlineExceeded
            | Code::Unknown
            | Code::Cancelled
            | Code::Internal
            | Code::ResourceExhausted
    )
}

/// The URLs of a `--coordinator` value: one, or a comma-separated list.
pub fn urls(value: &str) -> Vec<&str> {
    let list: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .collect();
    if list.is_empty() { vec![value] } else { list }
}

/// What registration hands back.
#[derive(Clone, Debug)]
pub struct Registration {
    /// The worker's identity.
    pub worker_id: WorkerId,
    /// Its own token.
    pub token: String,
    /// Lease length; heartbeat well within it.
    pub lease: Duration,
    /// The worker release offered to this platform (a version; empty: none).
    pub offered_release: String,
}

/// A channel to a coordinator and, once registered, the worker's token.
#[derive(Clone)]
pub struct Coordinator {
    client: WorkerServiceClient<Channel>,
    /// The same channel, for plain HTTP downloads on the coordinator's one port.
    channel: Channel,
    /// The worker token (empty until registered).
    pub token: String,
    /// The coordinator's URL, for messages.
    pub url: String,
}

impl Coordinator {
    /// A coordinator at `url`, connecting on first use (and again after a failure). A
    /// comma-separated list of URLs (coordinators of one fleet sharing a database) makes
    /// one channel balanced over them: a call goes to one that is up.
    pub fn lazy(url: &str, ca_cert: Option<&Path>) -> Result<Coordinator, String> {
        let channel = match urls(url).as_slice() {
            [one] => endpoint(one, ca_cert)?.timeout(CALL_TIMEOUT).connect_lazy(),
            many => {
                let endpoints = many
                    .iter()
                    .map(|u| endpoint(u, ca_cert).map(|e| e.timeout(CALL_TIMEOUT)))
                    .collect::<Result<Vec<_>, _>>()?;
                Channel::balance_list(endpoints.into_iter())
            }
        };
        Ok(Self::with_channel(url, channel))
    }

    /// A coordinator at `url`, connected now.
    pub async fn connect(url: &str, ca_cert: Option<&Path>) -> Result<Coordinator, String> {
        let channel = endpoint(url, ca_cert)?
            .timeout(CALL_TIMEOUT)
            .connect()
            .await
            .map_err(|e| e2fleet_proto::client::explain_connect_error(url, &e))?;
        Ok(Self::with_channel(url, channel))
    }

    fn with_channel(url: &str, channel: Channel) -> Coordinator {
        Coordinator {
            channel: channel.clone(),
            client: WorkerServiceClient::new(channel)
                .max_decoding_message_size(e2fleet_proto::MAX_MESSAGE_BYTES)
                .max_encoding_message_size(e2fleet_proto::MAX_MESSAGE_BYTES),
            token: String::new(),
            url: url.to_string(),
        }
    }

    fn req<T>(&self, message: T) -> Request<T> {
        let mut r = authed(&self.token, message);
        r.set_timeout(CALL_TIMEOUT);
        r
    }

    /// Enrols with `enroll_token`, keeping `previous` (an identity and its current token)
    /// when the coordinator still knows it; the new token is kept for every later call.
    pub async fn register(
        &mut self,
        enroll_token: &str,
        host: &HostInfo,
        previous: Option<(WorkerId, &str)>,
    ) -> Result<Registration, Status> {
        let mut request = Request::new(v2::RegisterWorkerRequest {
            enroll_token: enroll_token.to_string(),
            host: Some(host.into()),
            previous_worker_id: previous.map(|p| p.0.to_string()).unwrap_or_default(),
            previous_worker_token: previous.map(|p| p.1.to_string()).unwrap_or_default(),
        });
        request.set_timeout(CALL_TIMEOUT);
        let r = self.client.register_worker(request).await?.into_inner();
        let worker_id = r
            .worker_id
            .parse()
            .map_err(|e: e2fleet_proto::api::BadId| malformed(e.into()))?;
        self.token = r.worker_token.clone();
        Ok(Registration {
            worker_id,
            token: r.worker_token,
            lease: Duration::from_secs(r.lease_seconds.max(1) as u64),
            offered_release: bounded(r.worker_release),
        })
    }

    /// A verification suite's units (all, or those this class has not run); (suite,
    /// units, this worker's hardware class).
    pub async fn suite(
        &mut self,
        suite: &str,
        only_missing: bool,
    ) -> Result<(String, Vec<SuiteUnit>, String), Status> {
        let r = self
            .client
            .get_suite(self.req(v2::GetSuiteRequest {
                suite: suite.to_string(),
                only_missing,
            }))
            .await?
            .into_inner();
        let units = r.units.iter().map(suite_unit_from_wire).collect();
        Ok((r.suite, units, r.class_id))
    }

    /// Submits verification results.
    pub async fn submit_verification(
        &mut self,
        suite: &str,
        results: &[SuiteResult],
    ) -> Result<VerificationOutcome, Status> {
        let r = self
            .client
            .submit_verification(self.req(v2::SubmitVerificationRequest {
                suite: suite.to_string(),
                results: results.iter().map(Into::into).collect(),
            }))
            .await?
            .into_inner();
        VerificationOutcome::try_from(&r).map_err(malformed)
    }

    /// Submits an audit of a job's certificate.
    pub async fn submit_audit(&mut self, audit: &AuditSubmission) -> Result<AuditOutcome, Status> {
        let r = self
            .client
            .submit_audit(self.req(v2::SubmitAuditRequest::from(audit)))
            .await?
            .into_inner();
        Ok(AuditOutcome::from(&r))
    }

    /// Puts this worker's volunteer account in `team` (empty: in none); the team's
    /// accounts after the change.
    pub async fn set_team(&mut self, team: &str) -> Result<u64, Status> {
        let r = self
            .client
            .set_team(self.req(v2::SetTeamRequest {
                team: team.to_string(),
            }))
            .await?
            .into_inner();
        Ok(r.members)
    }

    /// A job's puzzle, order and self-tests.
    pub async fn job_spec(&mut self, job: JobId) -> Result<JobSpec, Status> {
        let r = self
            .client
            .get_job_spec(self.req(v2::GetJobSpecRequest {
                job_id: job.to_string(),
            }))
            .await?
            .into_inner();
        JobSpec::try_from(&r).map_err(malformed)
    }

    /// Up to `max` units for an engine of `kind`; when none, how long to wait.
    pub async fn lease(
        &mut self,
        max: usize,
        kind: EngineKind,
    ) -> Result<(Vec<Lease>, Duration), Status> {
        let r = self
            .client
            .lease_units(self.req(v2::LeaseUnitsRequest {
                max_units: max as u32,
                engine_kind: engine_kind_to_wire(kind).into(),
                engine_build: String::new(),
                probes: true,
            }))
            .await?
            .into_inner();
        let leases = r
            .leases
            .iter()
            .map(Lease::try_from)
            .collect::<Result<Vec<_>, _>>()
            .map_err(malformed)?;
        Ok((leases, Duration::from_millis(r.retry_after_ms as u64)))
    }

    /// Keeps the leases a heartbeat names alive; the leases to drop and to yield.
    pub async fn heartbeat(&mut self, beat: &Heartbeat) -> Result<BeatReply, Status> {
        let r = self
            .client
            .heartbeat(self.req(v2::HeartbeatRequest::from(beat)))
            .await?
            .into_inner();
        let ids = |ids: &[String]| {
            ids.iter()
                .take(MAX_LEASE_IDS)
                .map(|s| s.parse::<LeaseId>().map_err(|e| malformed(e.into())))
                .collect::<Result<Vec<_>, Status>>()
        };
        Ok(BeatReply {
            drop: ids(&r.stop_lease_ids)?,
            yield_now: ids(&r.yield_lease_ids)?,
            offered_release: bounded(r.worker_release),
        })
    }

    /// `GET path` on the coordinator's port (over the same connection as the calls):
    /// the body goes to `sink` chunk by chunk. Refused once it passes `max` bytes; each
    /// chunk must come within [`DOWNLOAD_CHUNK_TIME`] and the whole within
    /// [`DOWNLOAD_TIME`]. Returns the bytes read.
    pub async fn download(
        &self,
        path: &str,
        max: u64,
        mut sink: impl FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<u64, DownloadError> {
        use http_body_util::BodyExt;
        use tower::ServiceExt;
        let mut request = tonic::codegen::http::Request::builder()
            .method("GET")
            .uri(path);
        if !self.token.is_empty() {
            // binaries are served to workers only
            request = request.header("authorization", format!("Bearer {}", self.token));
        }
        let request = request
            .body(tonic::body::Body::default())
            .map_err(|e| DownloadError::Refused(format!("bad download path {path:?}: {e}")))?;
        let until = tokio::time::Instant::now() + DOWNLOAD_TIME;
        let response = tokio::time::timeout(CALL_TIMEOUT, self.channel.clone().oneshot(request))
            .await
            .map_err(|_| DownloadError::Unavailable(format!("GET {path}: no answer")))?
            .map_err(|e| DownloadError::Unavailable(format!("GET {path}: {e}")))?;
        let status = response.status();
        if !status.is_success() {
            let text = format!("GET {path}: the coordinator answered {status}");
            return Err(if status.is_server_error() {
                DownloadError::Unavailable(text)
            } else {
                DownloadError::Refused(text)
            });
        }
        let mut body = response.into_body();
        let mut read = 0u64;
        loop {
            let next = tokio::time::timeout_at(
                until.min(tokio::time::Instant::now() + DOWNLOAD_CHUNK_TIME),
                body.frame(),
            )
            .await
            .map_err(|_| DownloadError::Unavailable(format!("GET {path}: the download stalled")))?;
            let Some(frame) = next else {
                return Ok(read);
            };
            let frame = frame
                .map_err(|e| DownloadError::Unavailable(format!("GET {path}: cut off: {e}")))?;
            if let Ok(data) = frame.into_data() {
                read += data.len() as u64;
                if read > max {
                    return Err(DownloadError::Refused(format!(
                        "GET {path}: larger than the {max} bytes expected"
                    )));
                }
                sink(&data).map_err(DownloadError::Local)?;
            }
        }
    }

    /// Reports one result.
    pub async fn report(&mut self, report: &Report) -> Result<ReportOutcome, Status> {
        let r = self
            .client
            .report_result(self.req(v2::ReportResultRequest::from(report)))
            .await?
            .into_inner();
        ReportOutcome::try_from(&r).map_err(malformed)
    }

    /// Gives back unstarted leases; how many went back.
    pub async fn release(&mut self, leases: &[LeaseId]) -> Result<u32, Status> {
        let r = self
            .client
            .release_leases(self.req(v2::ReleaseLeasesRequest {
                lease_ids: leases.iter().map(ToString::to_string).collect(),
            }))
            .await?
            .into_inner();
        Ok(r.released)
    }

    /// Tells the coordinator a build of a job's engine failed its self-test.
    pub async fn build_failure(
        &mut self,
        job: JobId,
        build: &str,
        detail: &str,
    ) -> Result<(), Status> {
        self.client
            .report_build_failure(self.req(v2::ReportBuildFailureRequest {
                job_id: job.to_string(),
                engine_build: build.to_string(),
                detail: detail.to_string(),
            }))
            .await?;
        Ok(())
    }
}

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
}

/// A channel to a coordinator and, once registered, the worker's token.
#[derive(Clone)]
pub struct Coordinator {
    client: WorkerServiceClient<Channel>,
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
        })
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

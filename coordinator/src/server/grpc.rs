//! The tonic services: convert the wire request ([`e2fleet_proto::convert`]), call a
//! [`Fleet`] method, convert the answer, map the error ([`super::errors`]). No logic.

use std::sync::Arc;

use e2fleet_proto::api::{
    AuditSubmission, Heartbeat, HostInfo, JobId, JobRequest, LeaseId, Report, StudyId,
    StudyRequest, SuiteResult, WorkerId,
};
use e2fleet_proto::convert::{engine_kind_from_wire, suite_unit_to_wire};
use e2fleet_proto::v2;
use e2fleet_proto::v2::operator_service_server::OperatorService;
use e2fleet_proto::v2::worker_service_server::WorkerService;
use tonic::{Request, Response, Status};
use tracing::{instrument, warn};

use super::errors::{bearer, status_of};
use crate::fleet::{Fleet, FleetError};
use crate::store::WorkerRecord;

fn token<T>(request: &Request<T>) -> Option<&str> {
    bearer(
        request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok()),
    )
}

/// Refuses a worker-supplied string longer than [`MAX_LABEL_BYTES`].
fn capped(field: &str, value: &str) -> Result<(), Status> {
    crate::fleet::check_label(field, value).map_err(status_of)
}

/// Parses a wire value at the edge; a bad one is the caller's error.
fn wire<T, E: Into<FleetError>>(r: Result<T, E>) -> Result<T, Status> {
    r.map_err(|e| status_of(e.into()))
}

fn lease_ids(ids: &[String]) -> Result<Vec<LeaseId>, Status> {
    ids.iter().map(|s| wire(s.parse::<LeaseId>())).collect()
}

/// The worker-facing service.
pub struct WorkerApi(pub Arc<Fleet>);

impl WorkerApi {
    /// The calling worker: put there by [`super::guard`] before the body was read (or
    /// authenticated here when the service runs without it).
    async fn worker<T>(&self, request: &Request<T>) -> Result<WorkerRecord, Status> {
        if let Some(worker) = request.extensions().get::<WorkerRecord>() {
            return Ok(worker.clone());
        }
        self.0
            .worker_by_token(token(request))
            .await
            .map_err(status_of)
    }
}

#[tonic::async_trait]
impl WorkerService for WorkerApi {
    #[instrument(skip_all)]
    async fn register_worker(
        &self,
        request: Request<v2::RegisterWorkerRequest>,
    ) -> Result<Response<v2::RegisterWorkerResponse>, Status> {
        let r = request.into_inner();
        // the enrolment token first: nothing else of a stranger's request is looked at
        self.0
            .enrollment_account(&r.enroll_token)
            .await
            .map_err(status_of)?;
        let host: HostInfo = wire(HostInfo::try_from(&r.host.unwrap_or_default()))?;
        let worker_release = self
            .0
            .offered_release(&e2fleet_proto::release::platform(&host.arch, &host.os));
        // an id that does not parse names no earlier identity: a new one is made
        let previous = r
            .previous_worker_id
            .parse::<WorkerId>()
            .ok()
            .map(|id| (id, r.previous_worker_token.clone()));
        let (worker_id, worker_token) = self
            .0
            .register_worker(&r.enroll_token, host, previous)
            .await
            .map_err(status_of)?;
        Ok(Response::new(v2::RegisterWorkerResponse {
            worker_id: worker_id.to_string(),
            worker_token,
            lease_seconds: self.0.config().lease.as_secs().max(1) as u32,
            worker_release,
        }))
    }

    #[instrument(skip_all)]
    async fn get_suite(
        &self,
        request: Request<v2::GetSuiteRequest>,
    ) -> Result<Response<v2::GetSuiteResponse>, Status> {
        let worker = self.worker(&request).await?;
        let r = request.into_inner();
        let (suite, units, class_id) = self
            .0
            .suite_for_worker(&worker, &r.suite, r.only_missing)
            .await
            .map_err(status_of)?;
        Ok(Response::new(v2::GetSuiteResponse {
            suite,
            class_id,
            units: units.iter().map(suite_unit_to_wire).collect(),
        }))
    }

    #[instrument(skip_all)]
    async fn submit_verification(
        &self,
        request: Request<v2::SubmitVerificationRequest>,
    ) -> Result<Response<v2::SubmitVerificationResponse>, Status> {
        let worker = self.worker(&request).await?;
        let r = request.into_inner();
        let results = r
            .results
            .iter()
            .map(|v| wire(SuiteResult::try_from(v)))
            .collect::<Result<Vec<_>, _>>()?;
        let outcome = self
            .0
            .submit_verification(&worker, &r.suite, results)
            .await
            .map_err(status_of)?;
        Ok(Response::new((&outcome).into()))
    }

    #[instrument(skip_all, fields(job_id))]
    async fn get_job_spec(
        &self,
        request: Request<v2::GetJobSpecRequest>,
    ) -> Result<Response<v2::GetJobSpecResponse>, Status> {
        self.worker(&request).await?;
        let job_id: JobId = wire(request.get_ref().job_id.parse::<JobId>())?;
        tracing::Span::current().record("job_id", tracing::field::display(job_id));
        let spec = self.0.job_spec(job_id).await.map_err(status_of)?;
        Ok(Response::new((&spec).into()))
    }

    #[instrument(skip_all)]
    async fn lease_units(
        &self,
        request: Request<v2::LeaseUnitsRequest>,
    ) -> Result<Response<v2::LeaseUnitsResponse>, Status> {
        let worker = self.worker(&request).await?;
        let r = request.into_inner();
        capped("engine_build", &r.engine_build)?;
        // not given: the worker's engine stays what it last said
        let engine = match r.engine_kind {
            0 => None,
            raw => Some((
                wire(engine_kind_from_wire(raw, "engine_kind"))?,
                r.engine_build.as_str(),
            )),
        };
        let grants = self
            .0
            .lease_units(&worker, r.max_units as usize, engine, r.probes)
            .await
            .map_err(status_of)?;
        let retry_after_ms = if grants.is_empty() { 2_000 } else { 0 };
        Ok(Response::new(v2::LeaseUnitsResponse {
            leases: grants.iter().map(Into::into).collect(),
            retry_after_ms,
        }))
    }

    #[instrument(skip_all)]
    async fn heartbeat(
        &self,
        request: Request<v2::HeartbeatRequest>,
    ) -> Result<Response<v2::HeartbeatResponse>, Status> {
        let worker = self.worker(&request).await?;
        let beat = wire(Heartbeat::try_from(request.get_ref()))?;
        let answer = self.0.heartbeat(&worker, &beat).await.map_err(status_of)?;
        Ok(Response::new(v2::HeartbeatResponse {
            deadline_unix_ms: answer.deadline_ms,
            stop_lease_ids: answer.stop.iter().map(ToString::to_string).collect(),
            yield_lease_ids: answer.yield_now.iter().map(ToString::to_string).collect(),
            worker_release: self.0.offered_release(&beat.platform),
        }))
    }

    #[instrument(skip_all)]
    async fn set_team(
        &self,
        request: Request<v2::SetTeamRequest>,
    ) -> Result<Response<v2::SetTeamResponse>, Status> {
        let worker = self.worker(&request).await?;
        let members = self
            .0
            .set_own_team(&worker, &request.get_ref().team)
            .await
            .map_err(status_of)?;
        Ok(Response::new(v2::SetTeamResponse { members }))
    }

    // (the fleet's `report` carries the span with the lease and unit)
    async fn report_result(
        &self,
        request: Request<v2::ReportResultRequest>,
    ) -> Result<Response<v2::ReportResultResponse>, Status> {
        let worker = self.worker(&request).await?;
        capped("engine_build", &request.get_ref().engine_build)?;
        let report = wire(Report::try_from(request.get_ref()))?;
        let outcome = self.0.report(&worker, report).await.map_err(status_of)?;
        Ok(Response::new((&outcome).into()))
    }

    #[instrument(skip_all)]
    async fn release_leases(
        &self,
        request: Request<v2::ReleaseLeasesRequest>,
    ) -> Result<Response<v2::ReleaseLeasesResponse>, Status> {
        let worker = self.worker(&request).await?;
        let ids = lease_ids(&request.get_ref().lease_ids)?;
        let n = self
            .0
            .release_leases(&worker, &ids)
            .await
            .map_err(status_of)?;
        Ok(Response::new(v2::ReleaseLeasesResponse {
            released: n as u32,
        }))
    }

    #[instrument(skip_all)]
    async fn report_build_failure(
        &self,
        request: Request<v2::ReportBuildFailureRequest>,
    ) -> Result<Response<v2::ReportBuildFailureResponse>, Status> {
        let worker = self.worker(&request).await?;
        let r = request.into_inner();
        let job_id = wire(r.job_id.parse::<JobId>())?;
        capped("engine_build", &r.engine_build)?;
        // a detail is for the log: kept short
        let detail: String = r.detail.chars().take(1024).collect();
        // (the detail is the worker's text: logged escaped)
        warn!(worker_id = %worker.id, account = %worker.account_id, %job_id, engine_build = %r.engine_build, detail = ?detail, "engine build failed its self-test");
        Ok(Response::new(v2::ReportBuildFailureResponse {}))
    }

    #[instrument(skip_all, fields(job_id))]
    async fn submit_audit(
        &self,
        request: Request<v2::SubmitAuditRequest>,
    ) -> Result<Response<v2::SubmitAuditResponse>, Status> {
        let worker = self.worker(&request).await?;
        let audit = wire(AuditSubmission::try_from(request.get_ref()))?;
        tracing::Span::current().record("job_id", tracing::field::display(audit.job_id));
        let outcome = self
            .0
            .submit_audit(&worker, audit)
            .await
            .map_err(status_of)?;
        Ok(Response::new((&outcome).into()))
    }
}

/// Bytes per certificate chunk on the wire.
const CERTIFICATE_CHUNK: usize = 1 << 20;

/// The operator-facing service.
pub struct OperatorApi(pub Arc<Fleet>);

impl OperatorApi {
    fn admin<T>(&self, request: &Request<T>) -> Result<(), Status> {
        self.0.check_admin(token(request)).map_err(status_of)
    }
}

#[tonic::async_trait]
impl OperatorService for OperatorApi {
    type ExportCertificateStream = std::pin::Pin<
        Box<dyn tokio_stream::Stream<Item = Result<v2::CertificateChunk, Status>> + Send>,
    >;

    #[instrument(skip_all, fields(job_id))]
    async fn export_certificate(
        &self,
        request: Request<v2::ExportCertificateRequest>,
    ) -> Result<Response<Self::ExportCertificateStream>, Status> {
        self.admin(&request)?;
        let r = request.into_inner();
        let job_id = wire(r.job_id.parse::<JobId>())?;
        tracing::Span::current().record("job_id", tracing::field::display(job_id));
        let file = self
            .0
            .certificate(job_id, r.partial)
            .await
            .map_err(status_of)?;
        let chunks: Vec<Result<v2::CertificateChunk, Status>> = file
            .chunks(CERTIFICATE_CHUNK)
            .map(|c| Ok(v2::CertificateChunk { data: c.to_vec() }))
            .collect();
        Ok(Response::new(Box::pin(tokio_stream::iter(chunks))))
    }

    #[instrument(skip_all)]
    async fn submit_suite(
        &self,
        request: Request<v2::SubmitSuiteRequest>,
    ) -> Result<Response<v2::SubmitSuiteResponse>, Status> {
        self.admin(&request)?;
        let r = request.into_inner();
        let (units, with_expected) = self
            .0
            .submit_suite(&r.name, &r.suite_json)
            .await
            .map_err(status_of)?;
        Ok(Response::new(v2::SubmitSuiteResponse {
            name: r.name,
            units,
            with_expected,
        }))
    }

    #[instrument(skip_all)]
    async fn verification_matrix(
        &self,
        request: Request<v2::VerificationMatrixRequest>,
    ) -> Result<Response<v2::VerificationMatrixResponse>, Status> {
        self.admin(&request)?;
        let matrix = self
            .0
            .verification_matrix(&request.get_ref().suite)
            .await
            .map_err(status_of)?;
        Ok(Response::new((&matrix).into()))
    }

    #[instrument(skip_all)]
    async fn submit_job(
        &self,
        request: Request<v2::SubmitJobRequest>,
    ) -> Result<Response<v2::SubmitJobResponse>, Status> {
        self.admin(&request)?;
        let job = JobRequest::from(request.get_ref());
        let created = self.0.submit_job(job).await.map_err(status_of)?;
        Ok(Response::new((&created).into()))
    }

    #[instrument(skip_all)]
    async fn submit_study(
        &self,
        request: Request<v2::SubmitStudyRequest>,
    ) -> Result<Response<v2::SubmitStudyResponse>, Status> {
        self.admin(&request)?;
        let study = StudyRequest::from(request.get_ref());
        let created = self.0.submit_study(study).await.map_err(status_of)?;
        Ok(Response::new((&created).into()))
    }

    #[instrument(skip_all)]
    async fn list_studies(
        &self,
        request: Request<v2::ListStudiesRequest>,
    ) -> Result<Response<v2::ListStudiesResponse>, Status> {
        self.admin(&request)?;
        let studies = self.0.list_studies().await.map_err(status_of)?;
        Ok(Response::new(v2::ListStudiesResponse {
            studies: studies.iter().map(Into::into).collect(),
        }))
    }

    #[instrument(skip_all)]
    async fn cancel_study(
        &self,
        request: Request<v2::CancelStudyRequest>,
    ) -> Result<Response<v2::CancelStudyResponse>, Status> {
        self.admin(&request)?;
        let id = wire(request.get_ref().study_id.parse::<StudyId>())?;
        self.0.cancel_study(id).await.map_err(status_of)?;
        Ok(Response::new(v2::CancelStudyResponse {}))
    }

    #[instrument(skip_all)]
    async fn get_study(
        &self,
        request: Request<v2::GetStudyRequest>,
    ) -> Result<Response<v2::StudyStatus>, Status> {
        self.admin(&request)?;
        let id = wire(request.get_ref().study_id.parse::<StudyId>())?;
        let status = self.0.study_status(id).await.map_err(status_of)?;
        Ok(Response::new((&status).into()))
    }

    #[instrument(skip_all)]
    async fn list_jobs(
        &self,
        request: Request<v2::ListJobsRequest>,
    ) -> Result<Response<v2::ListJobsResponse>, Status> {
        self.admin(&request)?;
        let jobs = self.0.list_jobs().await.map_err(status_of)?;
        Ok(Response::new(v2::ListJobsResponse {
            jobs: jobs.iter().map(Into::into).collect(),
        }))
    }

    #[instrument(skip_all)]
    async fn get_job(
        &self,
        request: Request<v2::GetJobRequest>,
    ) -> Result<Response<v2::JobStatus>, Status> {
        self.admin(&request)?;
        let job_id = wire(request.get_ref().job_id.parse::<JobId>())?;
        let status = self.0.job_status(job_id).await.map_err(status_of)?;
        Ok(Response::new((&status).into()))
    }

    #[instrument(skip_all)]
    async fn cancel_job(
        &self,
        request: Request<v2::CancelJobRequest>,
    ) -> Result<Response<v2::CancelJobResponse>, Status> {
        self.admin(&request)?;
        let job_id = wire(request.get_ref().job_id.parse::<JobId>())?;
        self.0.cancel_job(job_id).await.map_err(status_of)?;
        Ok(Response::new(v2::CancelJobResponse {}))
    }

    #[instrument(skip_all)]
    async fn set_job_schedule(
        &self,
        request: Request<v2::SetJobScheduleRequest>,
    ) -> Result<Response<v2::SetJobScheduleResponse>, Status> {
        self.admin(&request)?;
        let r = request.get_ref();
        let job_id = wire(r.job_id.parse::<JobId>())?;
        let change = e2fleet_proto::api::ScheduleChange {
            priority: r.priority,
            share: r.share,
            paused: r.paused,
        };
        self.0
            .set_schedule(job_id, change)
            .await
            .map_err(status_of)?;
        Ok(Response::new(v2::SetJobScheduleResponse {}))
    }

    #[instrument(skip_all)]
    async fn fleet_status(
        &self,
        request: Request<v2::FleetStatusRequest>,
    ) -> Result<Response<v2::FleetStatusResponse>, Status> {
        self.admin(&request)?;
        let status = self.0.fleet_status().await.map_err(status_of)?;
        Ok(Response::new((&status).into()))
    }

    #[instrument(skip_all)]
    async fn list_workers(
        &self,
        request: Request<v2::ListWorkersRequest>,
    ) -> Result<Response<v2::ListWorkersResponse>, Status> {
        self.admin(&request)?;
        let workers = self.0.list_workers().await.map_err(status_of)?;
        Ok(Response::new(v2::ListWorkersResponse {
            workers: workers.iter().map(Into::into).collect(),
        }))
    }

    #[instrument(skip_all)]
    async fn release_worker(
        &self,
        request: Request<v2::ReleaseWorkerRequest>,
    ) -> Result<Response<v2::ReleaseWorkerResponse>, Status> {
        self.admin(&request)?;
        let id = wire(request.get_ref().worker_id.parse::<WorkerId>())?;
        self.0.release_worker(id).await.map_err(status_of)?;
        Ok(Response::new(v2::ReleaseWorkerResponse {}))
    }

    #[instrument(skip_all)]
    async fn add_account(
        &self,
        request: Request<v2::AddAccountRequest>,
    ) -> Result<Response<v2::AddAccountResponse>, Status> {
        self.admin(&request)?;
        let r = request.get_ref();
        let (account, token) = self
            .0
            .add_account(&r.name, &r.team)
            .await
            .map_err(status_of)?;
        Ok(Response::new(v2::AddAccountResponse {
            account: account.to_string(),
            enroll_token: token,
        }))
    }

    #[instrument(skip_all)]
    async fn list_accounts(
        &self,
        request: Request<v2::ListAccountsRequest>,
    ) -> Result<Response<v2::ListAccountsResponse>, Status> {
        self.admin(&request)?;
        let accounts = self.0.list_accounts().await.map_err(status_of)?;
        Ok(Response::new(v2::ListAccountsResponse {
            accounts: accounts.iter().map(Into::into).collect(),
        }))
    }

    #[instrument(skip_all)]
    async fn set_account_team(
        &self,
        request: Request<v2::SetAccountTeamRequest>,
    ) -> Result<Response<v2::SetAccountTeamResponse>, Status> {
        self.admin(&request)?;
        let r = request.get_ref();
        let members = self
            .0
            .set_account_team(&r.name, &r.team)
            .await
            .map_err(status_of)?;
        Ok(Response::new(v2::SetAccountTeamResponse { members }))
    }

    #[instrument(skip_all)]
    async fn revoke_account(
        &self,
        request: Request<v2::RevokeAccountRequest>,
    ) -> Result<Response<v2::RevokeAccountResponse>, Status> {
        self.admin(&request)?;
        self.0
            .revoke_account(&request.get_ref().name)
            .await
            .map_err(status_of)?;
        Ok(Response::new(v2::RevokeAccountResponse {}))
    }

    #[instrument(skip_all)]
    async fn release_account(
        &self,
        request: Request<v2::ReleaseAccountRequest>,
    ) -> Result<Response<v2::ReleaseAccountResponse>, Status> {
        self.admin(&request)?;
        self.0
            .release_account(&request.get_ref().name)
            .await
            .map_err(status_of)?;
        Ok(Response::new(v2::ReleaseAccountResponse {}))
    }

    #[instrument(skip_all)]
    async fn unflag_class(
        &self,
        request: Request<v2::UnflagClassRequest>,
    ) -> Result<Response<v2::UnflagClassResponse>, Status> {
        self.admin(&request)?;
        self.0
            .unflag_class(&request.get_ref().class_id)
            .await
            .map_err(status_of)?;
        Ok(Response::new(v2::UnflagClassResponse {}))
    }

    #[instrument(skip_all)]
    async fn release_host(
        &self,
        request: Request<v2::ReleaseHostRequest>,
    ) -> Result<Response<v2::ReleaseHostResponse>, Status> {
        self.admin(&request)?;
        let n = self
            .0
            .release_host(&request.get_ref().hostname)
            .await
            .map_err(status_of)?;
        Ok(Response::new(v2::ReleaseHostResponse {
            released: n as u32,
        }))
    }
}

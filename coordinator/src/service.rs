//! The tonic services: convert the wire request, call a [`Fleet`] method, map the error.
//! [`status_of`] is the one table from domain errors to gRPC codes; internal details never
//! reach a client.

use std::sync::Arc;

use e2fleet_proto::convert::{path_to_wire, result_from_wire, result_to_wire, suite_unit_to_wire};
use e2fleet_proto::v1;
use e2fleet_proto::v1::operator_service_server::OperatorService;
use e2fleet_proto::v1::worker_service_server::WorkerService;
use tonic::{Request, Response, Status};
use tracing::{error, warn};

use crate::fleet::{Fleet, FleetError, Host, JobRequest, Report};
use crate::store::StoreError;

/// Maps a domain error to a gRPC status.
pub fn status_of(e: FleetError) -> Status {
    match e {
        FleetError::Unauthenticated(m) => Status::unauthenticated(m),
        FleetError::PermissionDenied(m) => Status::permission_denied(m),
        FleetError::NotFound(m) => Status::not_found(m),
        FleetError::InvalidArgument(m) => Status::invalid_argument(m),
        FleetError::FailedPrecondition(m) => Status::failed_precondition(m),
        FleetError::Store(StoreError::Busy) => {
            warn!("store busy: a request was refused (load shed)");
            Status::unavailable("the coordinator is busy; retry with backoff")
        }
        FleetError::Store(e) => {
            error!(error = %e, "store failure");
            Status::internal("internal error")
        }
    }
}

fn bearer<T>(request: &Request<T>) -> Option<String> {
    request
        .metadata()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| t.trim().to_string())
}

/// The worker-facing service.
pub struct WorkerApi(pub Arc<Fleet>);

#[tonic::async_trait]
impl WorkerService for WorkerApi {
    async fn register_worker(
        &self,
        request: Request<v1::RegisterWorkerRequest>,
    ) -> Result<Response<v1::RegisterWorkerResponse>, Status> {
        let r = request.into_inner();
        let h = r.host.unwrap_or_default();
        let host = Host {
            hostname: h.hostname,
            cpu_model: h.cpu_model,
            cores: h.cores,
            arch: h.arch,
            os: h.os,
            rustc_version: h.rustc_version,
            worker_version: h.worker_version,
            target_features: h.target_features,
            engine_kind: h.engine_kind,
            engine_release: h.engine_release,
        };
        let previous = (!r.previous_worker_id.is_empty()).then_some(r.previous_worker_id.as_str());
        let (worker_id, worker_token) = self
            .0
            .register_worker(&r.enroll_token, host, previous)
            .await
            .map_err(status_of)?;
        Ok(Response::new(v1::RegisterWorkerResponse {
            worker_id,
            worker_token,
            lease_seconds: self.0.config().lease.as_secs().max(1) as u32,
        }))
    }

    async fn get_suite(
        &self,
        request: Request<v1::GetSuiteRequest>,
    ) -> Result<Response<v1::GetSuiteResponse>, Status> {
        let worker = self
            .0
            .worker_by_token(bearer(&request).as_deref())
            .await
            .map_err(status_of)?;
        let r = request.into_inner();
        let (suite, units, class_id) = self
            .0
            .suite_for_worker(&worker, &r.suite, r.only_missing)
            .await
            .map_err(status_of)?;
        Ok(Response::new(v1::GetSuiteResponse {
            suite,
            class_id,
            units: units.iter().map(suite_unit_to_wire).collect(),
        }))
    }

    async fn submit_verification(
        &self,
        request: Request<v1::SubmitVerificationRequest>,
    ) -> Result<Response<v1::SubmitVerificationResponse>, Status> {
        let worker = self
            .0
            .worker_by_token(bearer(&request).as_deref())
            .await
            .map_err(status_of)?;
        let r = request.into_inner();
        let mut results = Vec::with_capacity(r.results.len());
        for v in r.results {
            let wire = v
                .result
                .ok_or_else(|| Status::invalid_argument(format!("unit {}: no result", v.unit)))?;
            let result = result_from_wire(&wire, wire.nodes_by_depth.len())
                .map_err(|e| Status::invalid_argument(format!("unit {}: {e}", v.unit)))?;
            results.push((v.unit, result, v.engine_seconds, v.engine_build));
        }
        let (class_id, verdicts, class_flagged) = self
            .0
            .submit_verification(&worker, &r.suite, results)
            .await
            .map_err(status_of)?;
        Ok(Response::new(v1::SubmitVerificationResponse {
            class_id,
            class_flagged,
            verdicts: verdicts
                .into_iter()
                .map(|v| v1::UnitVerdict {
                    unit: v.unit,
                    verdict: v.verdict.into(),
                    detail: v.detail,
                })
                .collect(),
        }))
    }

    async fn get_job_spec(
        &self,
        request: Request<v1::GetJobSpecRequest>,
    ) -> Result<Response<v1::GetJobSpecResponse>, Status> {
        self.0
            .worker_by_token(bearer(&request).as_deref())
            .await
            .map_err(status_of)?;
        let job_id = request.into_inner().job_id;
        let spec = self.0.job_spec(&job_id).await.map_err(status_of)?;
        Ok(Response::new(v1::GetJobSpecResponse {
            job_id,
            puzzle_json: spec.puzzle_json,
            order: spec.order,
            self_tests: spec
                .self_tests
                .iter()
                .map(|t| v1::SelfTest {
                    prefix: path_to_wire(&t.unit.prefix),
                    cursor: path_to_wire(&t.unit.cursor),
                    budget: t.budget.unwrap_or(0),
                    expected: Some(result_to_wire(&t.expected)),
                })
                .collect(),
        }))
    }

    async fn lease_units(
        &self,
        request: Request<v1::LeaseUnitsRequest>,
    ) -> Result<Response<v1::LeaseUnitsResponse>, Status> {
        let worker = self
            .0
            .worker_by_token(bearer(&request).as_deref())
            .await
            .map_err(status_of)?;
        let r = request.into_inner();
        let grants = self
            .0
            .lease_units(
                &worker,
                r.max_units as usize,
                (&r.engine_kind, &r.engine_build),
            )
            .await
            .map_err(status_of)?;
        let retry_after_ms = if grants.is_empty() { 2_000 } else { 0 };
        Ok(Response::new(v1::LeaseUnitsResponse {
            leases: grants
                .into_iter()
                .map(|g| v1::Lease {
                    lease_id: g.lease_id,
                    unit_id: g.unit_id,
                    job_id: g.job_id,
                    prefix: path_to_wire(&g.unit.prefix),
                    cursor: path_to_wire(&g.unit.cursor),
                    budget: g.budget.unwrap_or(0),
                    deadline_unix_ms: g.deadline_ms,
                })
                .collect(),
            retry_after_ms,
        }))
    }

    async fn heartbeat(
        &self,
        request: Request<v1::HeartbeatRequest>,
    ) -> Result<Response<v1::HeartbeatResponse>, Status> {
        let worker = self
            .0
            .worker_by_token(bearer(&request).as_deref())
            .await
            .map_err(status_of)?;
        let r = request.into_inner();
        let ids: Vec<String> = r.leases.into_iter().map(|l| l.lease_id).collect();
        let (deadline, stop) = self
            .0
            .heartbeat(&worker, &ids, r.per_core_nodes_per_s, r.threads)
            .await
            .map_err(status_of)?;
        Ok(Response::new(v1::HeartbeatResponse {
            deadline_unix_ms: deadline,
            stop_lease_ids: stop,
        }))
    }

    async fn report_result(
        &self,
        request: Request<v1::ReportResultRequest>,
    ) -> Result<Response<v1::ReportResultResponse>, Status> {
        let worker = self
            .0
            .worker_by_token(bearer(&request).as_deref())
            .await
            .map_err(status_of)?;
        let r = request.into_inner();
        let wire = r
            .result
            .ok_or_else(|| Status::invalid_argument("missing result"))?;
        let depths = wire.nodes_by_depth.len();
        let result =
            result_from_wire(&wire, depths).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let outcome = self
            .0
            .report(
                &worker,
                Report {
                    lease_id: r.lease_id,
                    unit_id: r.unit_id,
                    result,
                    engine_seconds: r.engine_seconds,
                    engine_kind: r.engine_kind,
                    engine_build: r.engine_build,
                },
            )
            .await
            .map_err(status_of)?;
        Ok(Response::new(v1::ReportResultResponse {
            status: outcome.status.into(),
            detail: outcome.detail,
        }))
    }

    async fn release_leases(
        &self,
        request: Request<v1::ReleaseLeasesRequest>,
    ) -> Result<Response<v1::ReleaseLeasesResponse>, Status> {
        let worker = self
            .0
            .worker_by_token(bearer(&request).as_deref())
            .await
            .map_err(status_of)?;
        let ids = request.into_inner().lease_ids;
        let n = self
            .0
            .release_leases(&worker, &ids)
            .await
            .map_err(status_of)?;
        Ok(Response::new(v1::ReleaseLeasesResponse {
            released: n as u32,
        }))
    }

    async fn report_build_failure(
        &self,
        request: Request<v1::ReportBuildFailureRequest>,
    ) -> Result<Response<v1::ReportBuildFailureResponse>, Status> {
        let worker = self
            .0
            .worker_by_token(bearer(&request).as_deref())
            .await
            .map_err(status_of)?;
        let r = request.into_inner();
        warn!(worker_id = %worker.id, hostname = %worker.hostname, job_id = %r.job_id, engine_build = %r.engine_build, detail = %r.detail, "engine build failed its self-test");
        Ok(Response::new(v1::ReportBuildFailureResponse {}))
    }
}

/// The operator-facing service.
pub struct OperatorApi(pub Arc<Fleet>);

impl OperatorApi {
    fn admin<T>(&self, request: &Request<T>) -> Result<(), Status> {
        self.0
            .check_admin(bearer(request).as_deref())
            .map_err(status_of)
    }
}

#[tonic::async_trait]
impl OperatorService for OperatorApi {
    async fn submit_suite(
        &self,
        request: Request<v1::SubmitSuiteRequest>,
    ) -> Result<Response<v1::SubmitSuiteResponse>, Status> {
        self.admin(&request)?;
        let r = request.into_inner();
        let (units, with_expected) = self
            .0
            .submit_suite(&r.name, &r.suite_json)
            .await
            .map_err(status_of)?;
        Ok(Response::new(v1::SubmitSuiteResponse {
            name: r.name,
            units,
            with_expected,
        }))
    }

    async fn verification_matrix(
        &self,
        request: Request<v1::VerificationMatrixRequest>,
    ) -> Result<Response<v1::VerificationMatrixResponse>, Status> {
        self.admin(&request)?;
        let suite = request.into_inner().suite;
        let doc = self
            .0
            .verification_matrix(&suite)
            .await
            .map_err(status_of)?;
        Ok(Response::new(v1::VerificationMatrixResponse {
            json: doc.to_string(),
        }))
    }

    async fn submit_job(
        &self,
        request: Request<v1::SubmitJobRequest>,
    ) -> Result<Response<v1::SubmitJobResponse>, Status> {
        self.admin(&request)?;
        let r = request.into_inner();
        let (job_id, units, depth) = self
            .0
            .submit_job(JobRequest {
                name: r.name,
                puzzle_json: r.puzzle_json,
                order: if r.order.is_empty() {
                    "row-major".into()
                } else {
                    r.order
                },
                split_depth: (r.split_depth > 0).then_some(r.split_depth as usize),
                target_units: if r.target_units == 0 {
                    1000
                } else {
                    r.target_units as usize
                },
                budget: (r.budget > 0).then_some(r.budget),
                replicas: r.replicas.max(1),
                spot_check: r.spot_check,
            })
            .await
            .map_err(status_of)?;
        Ok(Response::new(v1::SubmitJobResponse {
            job_id,
            units: units as u64,
            split_depth: depth as u32,
        }))
    }

    async fn list_jobs(
        &self,
        request: Request<v1::ListJobsRequest>,
    ) -> Result<Response<v1::ListJobsResponse>, Status> {
        self.admin(&request)?;
        let jobs = self.0.list_jobs().await.map_err(status_of)?;
        Ok(Response::new(v1::ListJobsResponse {
            jobs: jobs
                .into_iter()
                .map(|j| v1::JobStatus {
                    job_id: j["job_id"].as_str().unwrap_or_default().to_string(),
                    json: j.to_string(),
                })
                .collect(),
        }))
    }

    async fn get_job(
        &self,
        request: Request<v1::GetJobRequest>,
    ) -> Result<Response<v1::JobStatus>, Status> {
        self.admin(&request)?;
        let job_id = request.into_inner().job_id;
        let doc = self.0.job_status(&job_id).await.map_err(status_of)?;
        Ok(Response::new(v1::JobStatus {
            job_id,
            json: doc.to_string(),
        }))
    }

    async fn cancel_job(
        &self,
        request: Request<v1::CancelJobRequest>,
    ) -> Result<Response<v1::CancelJobResponse>, Status> {
        self.admin(&request)?;
        self.0
            .cancel_job(&request.into_inner().job_id)
            .await
            .map_err(status_of)?;
        Ok(Response::new(v1::CancelJobResponse {}))
    }

    async fn fleet_status(
        &self,
        request: Request<v1::FleetStatusRequest>,
    ) -> Result<Response<v1::FleetStatusResponse>, Status> {
        self.admin(&request)?;
        let doc = self.0.fleet_status().await.map_err(status_of)?;
        Ok(Response::new(v1::FleetStatusResponse {
            json: doc.to_string(),
        }))
    }

    async fn list_workers(
        &self,
        request: Request<v1::ListWorkersRequest>,
    ) -> Result<Response<v1::ListWorkersResponse>, Status> {
        self.admin(&request)?;
        let doc = self.0.list_workers().await.map_err(status_of)?;
        Ok(Response::new(v1::ListWorkersResponse {
            json: doc.to_string(),
        }))
    }

    async fn release_host(
        &self,
        request: Request<v1::ReleaseHostRequest>,
    ) -> Result<Response<v1::ReleaseHostResponse>, Status> {
        self.admin(&request)?;
        let n = self
            .0
            .release_host(&request.into_inner().hostname)
            .await
            .map_err(status_of)?;
        Ok(Response::new(v1::ReleaseHostResponse {
            released: n as u32,
        }))
    }
}

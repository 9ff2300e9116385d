//! The operator API as typed calls: what the admin CLI (and tests) use to talk to a
//! coordinator. Wire messages are converted at this edge; callers see domain values.

use std::path::Path;

use e2fleet_proto::api::status::{FleetStatus, JobStatus, VerificationMatrix, WorkerStatus};
use e2fleet_proto::api::{JobCreated, JobId, JobRequest};
use e2fleet_proto::client::{authed, endpoint};
use e2fleet_proto::convert::WireError;
use e2fleet_proto::v2;
use e2fleet_proto::v2::operator_service_client::OperatorServiceClient;
use tonic::transport::Channel;

/// Why an operator call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The coordinator could not be reached.
    #[error("{0}")]
    Connect(String),
    /// The coordinator refused or failed the call.
    #[error("{}", describe(.0))]
    Status(#[from] tonic::Status),
    /// The coordinator's answer does not make a valid value.
    #[error("malformed answer from the coordinator: {0}")]
    Wire(#[from] WireError),
}

/// A gRPC status as one line: what the coordinator said, without the code's boilerplate.
fn describe(s: &tonic::Status) -> String {
    use tonic::Code;
    let what = match s.code() {
        Code::Unauthenticated => "refused: wrong or missing admin token",
        Code::NotFound => "not found",
        Code::InvalidArgument => "invalid request",
        Code::FailedPrecondition => "not possible now",
        Code::PermissionDenied => "not allowed",
        Code::Unavailable => "the coordinator is unavailable",
        Code::Unimplemented => {
            "the coordinator does not know this call (an older or newer protocol version: upgrade the side that is behind)"
        }
        _ => "the coordinator failed",
    };
    if s.message().is_empty() {
        what.to_string()
    } else {
        format!("{what}: {}", s.message())
    }
}

/// A connection to a coordinator's operator API with the admin token.
pub struct Operator {
    client: OperatorServiceClient<Channel>,
    token: String,
}

impl Operator {
    /// Connects to `url` (`ca_cert`: a PEM file to trust for `https://`).
    pub async fn connect(
        url: &str,
        ca_cert: Option<&Path>,
        token: &str,
    ) -> Result<Operator, ClientError> {
        let channel = endpoint(url, ca_cert)
            .map_err(ClientError::Connect)?
            .connect()
            .await
            .map_err(|e| ClientError::Connect(crate::client::connect_error(url, &e)))?;
        Ok(Operator {
            client: OperatorServiceClient::new(channel)
                .max_decoding_message_size(e2fleet_proto::MAX_MESSAGE_BYTES),
            token: token.to_string(),
        })
    }

    /// Submits a job.
    pub async fn submit(&mut self, job: &JobRequest) -> Result<JobCreated, ClientError> {
        let r = self
            .client
            .submit_job(authed(&self.token, v2::SubmitJobRequest::from(job)))
            .await?
            .into_inner();
        Ok(JobCreated::try_from(&r)?)
    }

    /// Every job, newest first.
    pub async fn jobs(&mut self) -> Result<Vec<JobStatus>, ClientError> {
        let r = self
            .client
            .list_jobs(authed(&self.token, v2::ListJobsRequest {}))
            .await?
            .into_inner();
        Ok(r.jobs
            .iter()
            .map(JobStatus::try_from)
            .collect::<Result<_, _>>()?)
    }

    /// One job.
    pub async fn job(&mut self, id: JobId) -> Result<JobStatus, ClientError> {
        let r = self
            .client
            .get_job(authed(
                &self.token,
                v2::GetJobRequest {
                    job_id: id.to_string(),
                },
            ))
            .await?
            .into_inner();
        Ok(JobStatus::try_from(&r)?)
    }

    /// Cancels a job.
    pub async fn cancel(&mut self, id: JobId) -> Result<(), ClientError> {
        self.client
            .cancel_job(authed(
                &self.token,
                v2::CancelJobRequest {
                    job_id: id.to_string(),
                },
            ))
            .await?;
        Ok(())
    }

    /// Every worker.
    pub async fn workers(&mut self) -> Result<Vec<WorkerStatus>, ClientError> {
        let r = self
            .client
            .list_workers(authed(&self.token, v2::ListWorkersRequest {}))
            .await?
            .into_inner();
        Ok(r.workers
            .iter()
            .map(WorkerStatus::try_from)
            .collect::<Result<_, _>>()?)
    }

    /// The fleet summary.
    pub async fn fleet(&mut self) -> Result<FleetStatus, ClientError> {
        let r = self
            .client
            .fleet_status(authed(&self.token, v2::FleetStatusRequest {}))
            .await?
            .into_inner();
        Ok(FleetStatus::from(&r))
    }

    /// Lifts a host's quarantine; the workers released.
    pub async fn release_host(&mut self, hostname: &str) -> Result<u32, ClientError> {
        let r = self
            .client
            .release_host(authed(
                &self.token,
                v2::ReleaseHostRequest {
                    hostname: hostname.to_string(),
                },
            ))
            .await?
            .into_inner();
        Ok(r.released)
    }

    /// Stores a verification suite; (units, units with an expected result).
    pub async fn submit_suite(
        &mut self,
        name: &str,
        json: &str,
    ) -> Result<(u32, u32), ClientError> {
        let r = self
            .client
            .submit_suite(authed(
                &self.token,
                v2::SubmitSuiteRequest {
                    name: name.to_string(),
                    suite_json: json.to_string(),
                },
            ))
            .await?
            .into_inner();
        Ok((r.units, r.with_expected))
    }

    /// A suite's conformance matrix.
    pub async fn matrix(&mut self, suite: &str) -> Result<VerificationMatrix, ClientError> {
        let r = self
            .client
            .verification_matrix(authed(
                &self.token,
                v2::VerificationMatrixRequest {
                    suite: suite.to_string(),
                },
            ))
            .await?
            .into_inner();
        Ok(VerificationMatrix::try_from(&r)?)
    }
}

/// A failed connection as one line: the URL, and the likely cause.
pub fn connect_error(url: &str, e: &tonic::transport::Error) -> String {
    e2fleet_proto::client::explain_connect_error(url, e)
}

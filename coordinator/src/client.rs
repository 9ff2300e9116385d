//! The operator API as typed calls: what the admin CLI (and tests) use to talk to a
//! coordinator. Wire messages are converted at this edge; callers see domain values.

use std::path::Path;

use e2fleet_proto::api::status::{
    AccountStatus, FleetStatus, JobStatus, VerificationMatrix, WorkerStatus,
};
use e2fleet_proto::api::{
    JobCreated, JobId, JobRequest, StudyCreated, StudyId, StudyRequest, StudyStatus, WorkerId,
};
use e2fleet_proto::client::{authed, endpoint, explain_connect_error, explain_status};
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
    /// The coordinator refused or failed the call (the text names it and says why).
    #[error("{0}")]
    Call(String),
    /// The coordinator's answer does not make a valid value.
    #[error("malformed answer from the coordinator: {0}")]
    Wire(WireError),
}

// the message names the cause itself ("{0}"), so it is not also a `source()`: an error
// chain then says each cause once
impl From<WireError> for ClientError {
    fn from(e: WireError) -> Self {
        ClientError::Wire(e)
    }
}

/// A connection to a coordinator's operator API with the admin token.
pub struct Operator {
    client: OperatorServiceClient<Channel>,
    token: String,
    url: String,
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
            .map_err(|e| ClientError::Connect(explain_connect_error(url, &e)))?;
        Ok(Operator {
            client: OperatorServiceClient::new(channel)
                .max_decoding_message_size(e2fleet_proto::MAX_MESSAGE_BYTES),
            token: token.to_string(),
            url: url.to_string(),
        })
    }

    fn failed(&self, s: tonic::Status) -> ClientError {
        ClientError::Call(explain_status(&self.url, &s))
    }

    /// Submits a job.
    pub async fn submit(&mut self, job: &JobRequest) -> Result<JobCreated, ClientError> {
        let r = self
            .client
            .submit_job(authed(&self.token, v2::SubmitJobRequest::from(job)))
            .await
            .map_err(|s| self.failed(s))?
            .into_inner();
        Ok(JobCreated::try_from(&r)?)
    }

    /// Starts an order study.
    pub async fn submit_study(
        &mut self,
        study: &StudyRequest,
    ) -> Result<StudyCreated, ClientError> {
        let r = self
            .client
            .submit_study(authed(&self.token, v2::SubmitStudyRequest::from(study)))
            .await
            .map_err(|s| self.failed(s))?
            .into_inner();
        Ok(StudyCreated::try_from(&r)?)
    }

    /// Every study, newest first.
    pub async fn studies(&mut self) -> Result<Vec<StudyStatus>, ClientError> {
        let r = self
            .client
            .list_studies(authed(&self.token, v2::ListStudiesRequest {}))
            .await
            .map_err(|s| self.failed(s))?
            .into_inner();
        Ok(r.studies
            .iter()
            .map(StudyStatus::try_from)
            .collect::<Result<_, _>>()?)
    }

    /// Stops a running study.
    pub async fn cancel_study(&mut self, id: StudyId) -> Result<(), ClientError> {
        self.client
            .cancel_study(authed(
                &self.token,
                v2::CancelStudyRequest {
                    study_id: id.to_string(),
                },
            ))
            .await
            .map_err(|s| self.failed(s))?;
        Ok(())
    }

    /// One study, its orders best first.
    pub async fn study(&mut self, id: StudyId) -> Result<StudyStatus, ClientError> {
        let r = self
            .client
            .get_study(authed(
                &self.token,
                v2::GetStudyRequest {
                    study_id: id.to_string(),
                },
            ))
            .await
            .map_err(|s| self.failed(s))?
            .into_inner();
        Ok(StudyStatus::try_from(&r)?)
    }

    /// Every job, newest first.
    pub async fn jobs(&mut self) -> Result<Vec<JobStatus>, ClientError> {
        let r = self
            .client
            .list_jobs(authed(&self.token, v2::ListJobsRequest {}))
            .await
            .map_err(|s| self.failed(s))?
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
            .await
            .map_err(|s| self.failed(s))?
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
            .await
            .map_err(|s| self.failed(s))?;
        Ok(())
    }

    /// Changes a job's priority, share or pause.
    pub async fn set_schedule(
        &mut self,
        id: JobId,
        change: e2fleet_proto::api::ScheduleChange,
    ) -> Result<(), ClientError> {
        self.client
            .set_job_schedule(authed(
                &self.token,
                v2::SetJobScheduleRequest {
                    job_id: id.to_string(),
                    priority: change.priority,
                    share: change.share,
                    paused: change.paused,
                },
            ))
            .await
            .map_err(|s| self.failed(s))?;
        Ok(())
    }

    /// Every worker.
    pub async fn workers(&mut self) -> Result<Vec<WorkerStatus>, ClientError> {
        let r = self
            .client
            .list_workers(authed(&self.token, v2::ListWorkersRequest {}))
            .await
            .map_err(|s| self.failed(s))?
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
            .await
            .map_err(|s| self.failed(s))?
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
            .await
            .map_err(|s| self.failed(s))?
            .into_inner();
        Ok(r.released)
    }

    /// Lifts one worker identity's quarantine.
    pub async fn release_worker(&mut self, id: WorkerId) -> Result<(), ClientError> {
        self.client
            .release_worker(authed(
                &self.token,
                v2::ReleaseWorkerRequest {
                    worker_id: id.to_string(),
                },
            ))
            .await
            .map_err(|s| self.failed(s))?;
        Ok(())
    }

    /// Issues a volunteer account; (its name, its enrolment token).
    pub async fn add_account(&mut self, name: &str) -> Result<(String, String), ClientError> {
        self.add_account_in(name, None).await
    }

    /// Issues a volunteer account in `team` (if any); (its name, its enrolment token).
    pub async fn add_account_in(
        &mut self,
        name: &str,
        team: Option<&str>,
    ) -> Result<(String, String), ClientError> {
        let r = self
            .client
            .add_account(authed(
                &self.token,
                v2::AddAccountRequest {
                    name: name.to_string(),
                    team: team.unwrap_or_default().to_string(),
                },
            ))
            .await
            .map_err(|s| self.failed(s))?
            .into_inner();
        Ok((r.account, r.enroll_token))
    }

    /// Puts a volunteer account in `team`, or in none; the team's accounts after it.
    pub async fn set_account_team(
        &mut self,
        name: &str,
        team: Option<&str>,
    ) -> Result<u64, ClientError> {
        let r = self
            .client
            .set_account_team(authed(
                &self.token,
                v2::SetAccountTeamRequest {
                    name: name.to_string(),
                    team: team.unwrap_or_default().to_string(),
                },
            ))
            .await
            .map_err(|s| self.failed(s))?
            .into_inner();
        Ok(r.members)
    }

    /// Every account.
    pub async fn accounts(&mut self) -> Result<Vec<AccountStatus>, ClientError> {
        let r = self
            .client
            .list_accounts(authed(&self.token, v2::ListAccountsRequest {}))
            .await
            .map_err(|s| self.failed(s))?
            .into_inner();
        Ok(r.accounts
            .iter()
            .map(AccountStatus::try_from)
            .collect::<Result<_, _>>()?)
    }

    /// Revokes a volunteer account.
    pub async fn revoke_account(&mut self, name: &str) -> Result<(), ClientError> {
        self.client
            .revoke_account(authed(
                &self.token,
                v2::RevokeAccountRequest {
                    name: name.to_string(),
                },
            ))
            .await
            .map_err(|s| self.failed(s))?;
        Ok(())
    }

    /// Lifts an account's quarantine.
    pub async fn release_account(&mut self, name: &str) -> Result<(), ClientError> {
        self.client
            .release_account(authed(
                &self.token,
                v2::ReleaseAccountRequest {
                    name: name.to_string(),
                },
            ))
            .await
            .map_err(|s| self.failed(s))?;
        Ok(())
    }

    /// Lifts a hardware class's flag.
    pub async fn unflag_class(&mut self, class: &str) -> Result<(), ClientError> {
        self.client
            .unflag_class(authed(
                &self.token,
                v2::UnflagClassRequest {
                    class_id: class.to_string(),
                },
            ))
            .await
            .map_err(|s| self.failed(s))?;
        Ok(())
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
            .await
            .map_err(|s| self.failed(s))?
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
            .await
            .map_err(|s| self.failed(s))?
            .into_inner();
        Ok(VerificationMatrix::try_from(&r)?)
    }

    /// A job's certificate file (`partial`: also of a job that is not complete).
    pub async fn export_certificate(
        &mut self,
        id: JobId,
        partial: bool,
    ) -> Result<Vec<u8>, ClientError> {
        let mut stream = self
            .client
            .export_certificate(authed(
                &self.token,
                v2::ExportCertificateRequest {
                    job_id: id.to_string(),
                    partial,
                },
            ))
            .await
            .map_err(|s| self.failed(s))?
            .into_inner();
        let mut file = Vec::new();
        while let Some(chunk) = stream.message().await.map_err(|s| self.failed(s))? {
            file.extend_from_slice(&chunk.data);
        }
        Ok(file)
    }
}

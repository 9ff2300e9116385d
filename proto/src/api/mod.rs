//! The API's domain values: what the coordinator and workers say to each other and what
//! operators read, as plain Rust types (serde for JSON). Nothing outside
//! [`crate::convert`] sees a wire message.
//!
//! - [`ids`]: `JobId`, `WorkerId`, `LeaseId`, `UnitId`.
//! - [`states`]: report status, verdicts, job and worker states.
//! - [`work`]: host labels, job requests, leases, specs, reports, verification results.
//! - [`status`]: the read models (job, fleet, workers, verification matrix).
//! - [`study`]: order studies (requests and their ranking).

pub mod ids;
pub mod states;
pub mod status;
pub mod study;
pub mod work;

pub use ids::{AccountId, BadId, JobId, LeaseId, StudyId, TeamId, UnitId, WorkerId};
pub use states::{
    AccountKind, JobState, ReportStatus, ResultVerdict, UnknownState, Verdict, WorkerState,
};
pub use status::UnitCounts;
pub use study::{StudyCreated, StudyOrder, StudyRequest, StudyStatus};
pub use work::{
    AuditOutcome, AuditSubmission, AuditedUnit, Heartbeat, HostInfo, JobCreated, JobRequest,
    JobSpec, Lease, Probe, Report, ReportOutcome, ScheduleChange, SelfTest, SuiteResult,
    UnitVerdict, VerificationOutcome,
};

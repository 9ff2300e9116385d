//! The API's domain values: what the coordinator and workers say to each other and what
//! operators read, as plain Rust types (serde for JSON). Nothing outside
//! [`crate::convert`] sees a wire message.
//!
//! - [`ids`]: `JobId`, `WorkerId`, `LeaseId`, `UnitId`.
//! - [`states`]: report status, verdicts, job and worker states.
//! - [`work`]: host labels, job requests, leases, specs, reports, verification results.
//! - [`status`]: the read models (job, fleet, workers, verification matrix).

pub mod ids;
pub mod states;
pub mod status;
pub mod work;

pub use ids::{AccountId, BadId, JobId, LeaseId, TeamId, UnitId, WorkerId};
pub use states::{
    AccountKind, JobState, ReportStatus, ResultVerdict, UnknownState, Verdict, WorkerState,
};
pub use status::UnitCounts;
pub use work::{
    AuditOutcome, AuditSubmission, AuditedUnit, Heartbeat, HostInfo, JobCreated, JobRequest,
    JobSpec, Lease, Report, ReportOutcome, ScheduleChange, SelfTest, SuiteResult, UnitVerdict,
    VerificationOutcome,
};

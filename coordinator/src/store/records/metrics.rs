//! Aggregates read for the status pages and `/metrics`.

use e2fleet_engine::engine::EngineKind;
use e2fleet_proto::api::ResultVerdict;

/// One result's contribution to a per-core rate.
#[derive(Clone, Debug, PartialEq)]
pub struct RateSample {
    /// Committed nodes.
    pub committed: u64,
    /// Engine-thread seconds.
    pub engine_seconds: f64,
    /// Host name (a label).
    pub hostname: String,
    /// CPU model (a label).
    pub cpu_model: String,
    /// Engine kind.
    pub engine_kind: EngineKind,
}

impl RateSample {
    /// Nodes per engine-thread second.
    pub fn rate(&self) -> f64 {
        self.committed as f64 / self.engine_seconds
    }
}

/// Nodes received in a window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodesReceived {
    /// Every result.
    pub raw: u64,
    /// Accepted or agreeing results.
    pub verified: u64,
}

/// One minute of results.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResultMinute {
    /// Minutes since the epoch.
    pub minute: i64,
    /// Nodes of every result.
    pub raw_nodes: u64,
    /// Nodes of accepted or agreeing results.
    pub verified_nodes: u64,
    /// Results.
    pub results: u64,
}

/// One minute of leases.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaseMinute {
    /// Minutes since the epoch.
    pub minute: i64,
    /// Leases created.
    pub created: u64,
    /// Leases expired.
    pub expired: u64,
}

/// Results of a job with one verdict and engine build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResultBreakdown {
    /// The verdict.
    pub verdict: ResultVerdict,
    /// Engine kind.
    pub engine_kind: EngineKind,
    /// Engine build id.
    pub engine_build: String,
    /// Results.
    pub results: u64,
    /// Nodes they committed.
    pub nodes: u64,
}

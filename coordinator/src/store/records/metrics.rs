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

/// Results shorter than this are too short to time one by one (start-up and clock reads
/// weigh on them); they count toward a per-core rate only pooled, when nothing longer is
/// there.
pub const MIN_TIMED_SECONDS: f64 = 0.01;

impl RateSample {
    /// Nodes per engine-thread second.
    pub fn rate(&self) -> f64 {
        self.committed as f64 / self.engine_seconds
    }

    /// The per-core rate of a set of results: the median of the results long enough to
    /// time ([`MIN_TIMED_SECONDS`]); when every result is shorter (a job split into tiny
    /// units), all their nodes over all their engine seconds. `None` without any timed
    /// engine second.
    pub fn per_core<'a>(samples: impl IntoIterator<Item = &'a RateSample>) -> Option<f64> {
        let (mut timed, mut nodes, mut seconds) = (Vec::new(), 0u64, 0f64);
        for s in samples {
            if s.engine_seconds >= MIN_TIMED_SECONDS {
                timed.push(s.rate());
            } else if s.engine_seconds > 0.0 {
                nodes += s.committed;
                seconds += s.engine_seconds;
            }
        }
        if !timed.is_empty() {
            return e2fleet_proto::api::status::median(timed);
        }
        (seconds > 0.0).then(|| nodes as f64 / seconds)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(committed: u64, engine_seconds: f64) -> RateSample {
        RateSample {
            committed,
            engine_seconds,
            hostname: "h".into(),
            cpu_model: "c".into(),
            engine_kind: EngineKind::Compiled,
        }
    }

    #[test]
    fn per_core_is_the_median_of_timed_results_and_pools_only_when_all_are_short() {
        // timed results decide; short ones are left out
        let mixed = [sample(100, 1.0), sample(300, 1.0), sample(1, 0.001)];
        assert_eq!(RateSample::per_core(&mixed), Some(300.0));
        // every result short: all nodes over all seconds
        let short = [sample(10, 0.001), sample(30, 0.003), sample(0, 0.0)];
        assert_eq!(RateSample::per_core(&short), Some(40.0 / 0.004));
        assert_eq!(RateSample::per_core(&[sample(5, 0.0)]), None);
        assert_eq!(RateSample::per_core(&[]), None);
    }
}

//! How long the coordinator took to answer the calls its gRPC gate let in: one histogram
//! per kind of call, from the moment a request's headers reached the gate to the moment
//! its answer was ready (authentication, reading the body, the batch queue, the database
//! write; not the network on either side, and not the time the answer takes to reach the
//! worker). Calls the gate refuses (no token, too many in flight) are not timed; they are
//! counted by reason in [`super::refusals`].
//!
//! `/metrics` shows it as the Prometheus histogram `e2fleet_call_seconds{call=...}`; the
//! load bench prints its quantiles beside the latencies its simulated workers saw, so a
//! tail can be placed: in the coordinator, or in the machine the workers share with it.
//!
//! Counting is a few relaxed atomic adds a call; the buckets are fixed (finer where
//! answers usually fall), so the memory is the same however many calls are counted.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Upper bounds of the buckets, in microseconds (the last bucket holds everything
/// slower than the last bound).
pub const BOUNDS_US: [u64; 25] = [
    500, 1_000, 2_000, 3_000, 5_000, 7_500, 10_000, 15_000, 20_000, 30_000, 40_000, 50_000, 60_000,
    75_000, 100_000, 125_000, 150_000, 200_000, 300_000, 500_000, 750_000, 1_000_000, 2_500_000,
    5_000_000, 10_000_000,
];
const BUCKETS: usize = BOUNDS_US.len() + 1;

/// The kinds of calls timed apart (the rest are timed together as [`Call::Other`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// `LeaseUnits`.
    Lease,
    /// `ReportResult`.
    Report,
    /// `Heartbeat`.
    Heartbeat,
    /// `RegisterWorker`.
    Register,
    /// Every other worker or operator call.
    Other,
}

impl Call {
    /// Every kind, in the order [`CallTimes::snapshot`] lists them.
    pub const ALL: [Call; 5] = [
        Call::Lease,
        Call::Report,
        Call::Heartbeat,
        Call::Register,
        Call::Other,
    ];

    /// The kind of the gRPC method at `path` (`/package.Service/Method`).
    pub fn of_path(path: &str) -> Call {
        match path.rsplit_once('/').map(|(_, m)| m) {
            Some("LeaseUnits") if path.starts_with("/e2fleet.") => Call::Lease,
            Some("ReportResult") if path.starts_with("/e2fleet.") => Call::Report,
            Some("Heartbeat") if path.starts_with("/e2fleet.") => Call::Heartbeat,
            Some("RegisterWorker") if path.starts_with("/e2fleet.") => Call::Register,
            _ => Call::Other,
        }
    }

    /// The `call` label's value.
    pub fn label(self) -> &'static str {
        match self {
            Call::Lease => "lease",
            Call::Report => "report",
            Call::Heartbeat => "heartbeat",
            Call::Register => "register",
            Call::Other => "other",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One histogram's counters: times recorded into the buckets of [`BOUNDS_US`] (also
/// what [`super::BatchTimes`] are counted with: the batch queues' waits and writes).
#[derive(Default)]
pub struct Times {
    buckets: [AtomicU64; BUCKETS],
    sum_us: AtomicU64,
}

impl Times {
    /// Counts one time.
    pub fn record(&self, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let bucket = BOUNDS_US.partition_point(|&b| b < us);
        self.buckets[bucket].fetch_add(1, Relaxed);
        self.sum_us.fetch_add(us, Relaxed);
    }

    /// The counts so far.
    pub fn histogram(&self) -> Histogram {
        Histogram {
            buckets: self.buckets.iter().map(|b| b.load(Relaxed)).collect(),
            sum_us: self.sum_us.load(Relaxed),
        }
    }
}

/// The call times of one coordinator (kept by its [`super::Fleet`]).
#[derive(Default)]
pub struct CallTimes {
    calls: [Times; Call::ALL.len()],
}

impl CallTimes {
    /// Counts one call of `call` that took `took`.
    pub fn record(&self, call: Call, took: Duration) {
        self.calls[call.index()].record(took);
    }

    /// The counts so far, per kind of call in [`Call::ALL`]'s order.
    pub fn snapshot(&self) -> Vec<(Call, Histogram)> {
        Call::ALL
            .iter()
            .map(|&call| (call, self.calls[call.index()].histogram()))
            .collect()
    }
}

/// One kind of call's counts: calls per bucket of [`BOUNDS_US`] (not cumulative; the last
/// is the overflow), and their summed time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Histogram {
    /// Calls per bucket.
    pub buckets: Vec<u64>,
    /// Their times summed, in microseconds.
    pub sum_us: u64,
}

impl Histogram {
    /// Calls counted.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The calls counted since `earlier` (a snapshot of the same counters).
    pub fn since(&self, earlier: &Histogram) -> Histogram {
        let at = |h: &Histogram, i: usize| h.buckets.get(i).copied().unwrap_or(0);
        Histogram {
            buckets: (0..BUCKETS)
                .map(|i| at(self, i).saturating_sub(at(earlier, i)))
                .collect(),
            sum_us: self.sum_us.saturating_sub(earlier.sum_us),
        }
    }

    /// Both histograms' calls together (e.g. of several coordinators).
    pub fn plus(&self, other: &Histogram) -> Histogram {
        let at = |h: &Histogram, i: usize| h.buckets.get(i).copied().unwrap_or(0);
        Histogram {
            buckets: (0..BUCKETS).map(|i| at(self, i) + at(other, i)).collect(),
            sum_us: self.sum_us + other.sum_us,
        }
    }

    /// An upper bound of the `q` quantile (0..=1): the upper bound of the bucket it falls
    /// in; `None` with no calls counted, or when it falls past the last bound.
    pub fn quantile_at_most(&self, q: f64) -> Option<Duration> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        // the rank of the quantile's call, 1-based
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return BOUNDS_US.get(i).map(|&us| Duration::from_micros(us));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_fall_in_the_bucket_of_their_bound_and_quantiles_are_upper_bounds() {
        let times = CallTimes::default();
        // 98 quick leases, one at a bound exactly, one slow
        for _ in 0..98 {
            times.record(Call::Lease, Duration::from_micros(800));
        }
        times.record(Call::Lease, Duration::from_millis(100));
        times.record(Call::Lease, Duration::from_millis(101));
        times.record(Call::Report, Duration::from_secs(60));
        let snap = times.snapshot();
        let lease = &snap[0].1;
        assert_eq!(snap[0].0, Call::Lease);
        assert_eq!(lease.count(), 100);
        assert_eq!(lease.sum_us, 98 * 800 + 100_000 + 101_000);
        assert_eq!(lease.quantile_at_most(0.5), Some(Duration::from_millis(1)));
        assert_eq!(
            lease.quantile_at_most(0.99),
            Some(Duration::from_millis(100))
        );
        assert_eq!(
            lease.quantile_at_most(1.0),
            Some(Duration::from_millis(125))
        );
        // past the last bound: no upper bound to give
        assert_eq!(snap[1].1.count(), 1);
        assert_eq!(snap[1].1.quantile_at_most(0.5), None);
        assert_eq!(snap[2].1.quantile_at_most(0.5), None);
    }

    #[test]
    fn a_window_is_the_difference_of_two_snapshots() {
        let times = CallTimes::default();
        times.record(Call::Report, Duration::from_millis(400));
        let before = times.snapshot();
        times.record(Call::Report, Duration::from_millis(4));
        let after = times.snapshot();
        let window = after[1].1.since(&before[1].1);
        assert_eq!(window.count(), 1);
        assert_eq!(window.sum_us, 4_000);
        assert_eq!(
            window.quantile_at_most(0.99),
            Some(Duration::from_millis(5))
        );
        assert_eq!(window.plus(&window).count(), 2);
    }

    #[test]
    fn paths_name_their_kind() {
        let kind = Call::of_path;
        assert_eq!(kind("/e2fleet.v2.WorkerService/LeaseUnits"), Call::Lease);
        assert_eq!(kind("/e2fleet.v2.WorkerService/ReportResult"), Call::Report);
        assert_eq!(kind("/e2fleet.v2.WorkerService/Heartbeat"), Call::Heartbeat);
        assert_eq!(
            kind("/e2fleet.v2.WorkerService/RegisterWorker"),
            Call::Register
        );
        assert_eq!(kind("/e2fleet.v2.OperatorService/ListJobs"), Call::Other);
        assert_eq!(kind("/other.Service/LeaseUnits"), Call::Other);
        assert_eq!(kind("garbage"), Call::Other);
    }
}

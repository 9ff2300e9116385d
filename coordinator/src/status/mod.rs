//! Read models: job status, fleet status and the worker list, built once here as the
//! typed values of [`e2fleet_proto::api::status`] that the JSON API, gRPC, `/metrics`,
//! the dashboard and the CLI all show.
//!
//! Two rates are kept apart everywhere: `per_core_nodes_per_s` is the median over
//! accepted results of committed nodes / engine seconds (how fast one engine thread
//! walks); `aggregate_nodes_per_s` is nodes received per wall-clock second across the
//! fleet over a window. Neither is ever computed from the other.

pub mod audits;
pub mod best;
mod fleet;
mod job;
pub mod stats;

use e2fleet_proto::api::WorkerState;

use crate::store::WorkerRecord;

/// Window of the aggregate rate.
pub const RATE_WINDOW_MS: i64 = 60_000;

/// A worker's state as shown everywhere: quarantined, offline (not seen for two lease
/// periods), idle (seen, holding no lease) or online (seen, working).
pub fn worker_state(w: &WorkerRecord, now: i64, lease_ms: i64) -> WorkerState {
    if w.quarantined {
        WorkerState::Quarantined
    } else if now - w.last_seen_ms > 2 * lease_ms {
        WorkerState::Offline
    } else if w.leases_held == 0 {
        WorkerState::Idle
    } else {
        WorkerState::Online
    }
}

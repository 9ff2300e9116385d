//! The fleet's defaults and limits, in one place: what a job gets when its submitter says
//! nothing, how many units a request may take, which units are cross-checked.

use e2fleet_proto::api::JobId;
use sha2::{Digest, Sha256};

/// Fill order of a job submitted without one.
pub const DEFAULT_ORDER: &str = "row-major";

/// Units a job is split into when its submitter gives neither a depth nor a count.
pub const DEFAULT_TARGET_UNITS: usize = 1000;

/// Most units a job may be split into.
pub const MAX_UNITS_PER_JOB: usize = 5_000_000;

/// Most runs per unit a job may ask for.
pub const MAX_REPLICAS: u32 = 9;

/// Most units one lease request may take.
pub const MAX_LEASES_PER_REQUEST: usize = 256;

/// Most leases one heartbeat or release may name (the rest are ignored).
pub const MAX_LEASES_PER_CALL: usize = 1024;

/// Self-test budgets: a few slices of the tree, each continuing where the last stopped.
pub const SELF_TEST_BUDGETS: [u64; 3] = [5_000, 50_000, 200_000];

/// The quorum of a new unit: the job's replicas, or 2 for a spot-checked unit (chosen by a
/// hash of the job and the unit's index, so it is the same on every coordinator).
pub fn quorum_for(job: JobId, index: u64, replicas: u32, spot_check: f64) -> u32 {
    if replicas > 1 {
        return replicas;
    }
    if spot_check <= 0.0 {
        return 1;
    }
    let h = Sha256::digest(format!("{job}/{index}").as_bytes());
    let x = u64::from_le_bytes(h[..8].try_into().expect("8 bytes")) as f64 / u64::MAX as f64;
    if x < spot_check { 2 } else { 1 }
}

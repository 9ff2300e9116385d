//! What the store hands out and takes in: domain records with decoded values (a unit's
//! prefix and cursor as placements, counts as numbers, states as enums), never the
//! columns' encodings. Every backend converts at its own edge.

// the fleet's one text-enum macro, as proto declares its states with
use e2fleet_proto::text_enum as stored_enum;
use serde::Serialize;

mod metrics;
mod people;
mod verification;
mod work;

pub use metrics::*;
pub use people::*;
pub use verification::*;
pub use work::*;

/// A stored result (a row number).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResultId(pub i64);

stored_enum!(
    /// How a unit came to be.
    UnitKind, "unit kind" {
        /// A prefix of the job's enumeration.
        Root = "root",
        /// What an accepted budget-stopped result left to walk (same prefix, a cursor).
        Continuation = "continuation",
        /// A sibling prefix split off a continuation for idle workers.
        Split = "split",
    }
);

stored_enum!(
    /// Where a unit is in its life.
    UnitState, "unit state" {
        /// More runs are needed than are out: leasable.
        Open = "open",
        /// Every run it needs is out.
        Busy = "busy",
        /// Decided: a quorum accepted a result.
        Done = "done",
        /// Its job was cancelled, or it was revoked with a wrong result.
        Cancelled = "cancelled",
    }
);

stored_enum!(
    /// Where a lease is in its life.
    LeaseState, "lease state" {
        /// Held by its worker.
        Active = "active",
        /// Its result arrived.
        Reported = "reported",
        /// Its deadline passed without a heartbeat.
        Expired = "expired",
        /// Its job was cancelled.
        Cancelled = "cancelled",
        /// Given back unstarted.
        Released = "released",
        /// Lost to its worker: its unit changed after it expired (a split moved part of
        /// the unit elsewhere), or another run decided the unit while it was out. A
        /// result on it answers a unit that is no longer there: it is not compared.
        Superseded = "superseded",
    }
);

stored_enum!(
    /// How a result may count.
    Standing, "standing" {
        /// From the operator, or from an account that earned trust: counts alone.
        Trusted = "trusted",
        /// From an account that has not earned trust: counts only when another account
        /// agrees.
        Untrusted = "untrusted",
    }
);

/// Whether a unit's next run must come from an account that has not run it yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AccountNeed {
    /// Any identity that has not run it.
    None = 0,
    /// Another account when the fleet has one, else another identity (replicas).
    Preferred = 1,
    /// Another account, whatever the wait: only that can confirm what it has (results
    /// that count only when another account agrees).
    Required = 2,
}

impl AccountNeed {
    /// From its stored number.
    pub fn from_stored(n: i64) -> AccountNeed {
        match n {
            2 => AccountNeed::Required,
            1 => AccountNeed::Preferred,
            _ => AccountNeed::None,
        }
    }
}

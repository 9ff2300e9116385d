//! The fleet's defaults and limits, in one place: what a job gets when its submitter says
//! nothing, how many units a request may take, which units are cross-checked.

use e2fleet_proto::api::JobId;
use sha2::{Digest, Sha256};

/// Fill order of a job submitted without one.
pub const DEFAULT_ORDER: &str = "row-major";

/// Units a job with a budget (or too big a tree to size by time) is split into when its
/// submitter gives neither a depth nor a count.
pub const DEFAULT_TARGET_UNITS: usize = 1000;

/// Seconds of one core a unit of a job submitted without a depth, count or budget takes,
/// by the tree estimate (see `submission::size_by_time`).
pub const UNIT_SECONDS: f64 = 60.0;

/// How long a unit must have run before it is asked to stop at its cursor so the rest can
/// be split for idle threads, ms (the worker hears it at its next heartbeat).
pub const YIELD_AFTER_MS: i64 = 10_000;
/// How long one job waits for a unit asked to yield before asking another, ms (a unit
/// answers at its worker's next heartbeat, a third of a lease).
pub const YIELD_PATIENCE_MS: i64 = 30_000;
/// Most cursor levels one split of a waiting continuation takes apart at once (every
/// level of a 16x16 board's).
pub const MAX_SPLIT_LEVELS: usize = 256;
/// How often lease calls that found nothing look for a running unit to split, ms.
pub const YIELD_LOOK_EVERY_MS: i64 = 1_000;

/// Per-core nodes/s assumed for sizing units when no result of the last hour was timed.
pub const DEFAULT_PER_CORE_NODES_PER_S: f64 = 100e6;

/// Most units a job may be split into.
pub const MAX_UNITS_PER_JOB: usize = 5_000_000;

/// Most runs per unit a job may ask for.
pub const MAX_REPLICAS: u32 = 9;

/// Most units one lease request may take.
pub const MAX_LEASES_PER_REQUEST: usize = 256;

/// Most leases one heartbeat or release may name (the rest are ignored).
pub const MAX_LEASES_PER_CALL: usize = 1024;

/// Characters kept of the pause reason a heartbeat gives (a label for the dashboard).
pub const MAX_PAUSED_CHARS: usize = 120;

/// Best boards (the deepest placements found) a job keeps and shows.
pub const BEST_BOARDS: usize = 10;

/// How long a count of leases out per job is reused, ms (see `sharing`).
pub const SHARES_EVERY_MS: i64 = 500;

/// Largest share a job may have (shares are relative: 1 is the default).
pub const MAX_SHARE: f64 = 1_000_000.0;

/// What a job's tree estimate spends (the population estimator, about a second of one
/// core on a 16x16 board).
pub const TREE_EFFORT: e2fleet_engine::search::estimate::Effort =
    e2fleet_engine::search::estimate::Effort::JOB;

/// How long a count of live parties is reused, ms.
pub const LIVE_PARTIES_EVERY_MS: i64 = 2_000;

/// Most active leases a worker identity may hold: about five per engine thread it
/// reported (the lane engine walks up to four at once on 16x16 boards, and one waits
/// queued) plus slack; at least [`MIN_LEASES_HELD`], at most [`MAX_LEASES_HELD`] whatever
/// it claims.
pub fn lease_cap(threads: u32, cores: u32) -> u64 {
    let threads = if threads > 0 { threads } else { cores.max(1) } as u64;
    (5 * threads + 2).clamp(MIN_LEASES_HELD, MAX_LEASES_HELD)
}

/// Worker identities one volunteer account may have seen in a day, by default (`serve
/// --account-identities`): a lab's machines, not a botnet's.
pub const ACCOUNT_IDENTITIES_PER_DAY: u64 = 256;

/// Leases one volunteer account may hold at once over all its identities, by default
/// (`serve --account-leases`): a dozen 8-thread machines' worth (an identity holds about
/// five a thread); a larger lab asks the operator for more.
pub const ACCOUNT_LEASES: u64 = 512;

/// Fewest leases any identity may hold.
pub const MIN_LEASES_HELD: u64 = 4;
/// Most leases one identity may hold.
pub const MAX_LEASES_HELD: u64 = 64;

/// Lease calls one identity may make per second (twice that in a burst), whatever they
/// return: a backstop. A worker asks once per `threads` finished units, and what it may
/// *hold* is bounded by [`lease_cap`], so calls that hand out units are paced by the
/// worker's own reports.
pub const LEASES_PER_SECOND_PER_WORKER: u32 = 200;
/// Lease calls that found nothing one identity may make per second (twice that in a
/// burst): polling an empty queue (or a full lease cap) is what a misbehaving client
/// repeats. Past it, the identity's lease calls are refused for a tenth of a second
/// (`1000 / EMPTY_LEASES_PER_SECOND_PER_WORKER` ms) after each empty call.
pub const EMPTY_LEASES_PER_SECOND_PER_WORKER: u32 = 10;
/// Lease calls one volunteer account's identities may make per second, together (the
/// operator's own fleet is not limited: it is the operator's).
pub const LEASES_PER_SECOND_PER_ACCOUNT: u32 = 400;

/// In-memory rate limits on lease calls: one bucket per identity, one per volunteer
/// account, and a pause for an identity that keeps finding nothing.
pub struct LeaseLimits {
    per_worker: governor::DefaultKeyedRateLimiter<e2fleet_proto::api::WorkerId>,
    per_account: governor::DefaultKeyedRateLimiter<e2fleet_proto::api::AccountId>,
    empty: governor::DefaultKeyedRateLimiter<e2fleet_proto::api::WorkerId>,
    /// Identity -> when it may poll again after a call that found nothing (real time,
    /// like the buckets: rate limits do not follow the fleet's clock).
    quiet_until: std::sync::Mutex<
        std::collections::HashMap<e2fleet_proto::api::WorkerId, std::time::Instant>,
    >,
}

impl LeaseLimits {
    /// The limits of [`LEASES_PER_SECOND_PER_WORKER`], [`LEASES_PER_SECOND_PER_ACCOUNT`]
    /// and [`EMPTY_LEASES_PER_SECOND_PER_WORKER`].
    pub fn new() -> LeaseLimits {
        let quota = |n: u32| {
            governor::Quota::per_second(std::num::NonZeroU32::new(n).expect("positive"))
                .allow_burst(std::num::NonZeroU32::new(2 * n).expect("positive"))
        };
        LeaseLimits {
            per_worker: governor::RateLimiter::keyed(quota(LEASES_PER_SECOND_PER_WORKER)),
            per_account: governor::RateLimiter::keyed(quota(LEASES_PER_SECOND_PER_ACCOUNT)),
            empty: governor::RateLimiter::keyed(quota(EMPTY_LEASES_PER_SECOND_PER_WORKER)),
            quiet_until: Default::default(),
        }
    }

    /// Whether this lease call may go ahead now.
    pub fn allow(
        &self,
        worker: &e2fleet_proto::api::WorkerId,
        account: &e2fleet_proto::api::AccountId,
    ) -> bool {
        let quiet = self.quiet_until.lock().expect("quiet map");
        if quiet
            .get(worker)
            .is_some_and(|&until| std::time::Instant::now() < until)
        {
            return false;
        }
        drop(quiet);
        if self.per_worker.check_key(worker).is_err() {
            return false;
        }
        account.is_operator() || self.per_account.check_key(account).is_ok()
    }

    /// A call by `worker` found nothing: past [`EMPTY_LEASES_PER_SECOND_PER_WORKER`] its
    /// lease calls are refused for `1000 / EMPTY_LEASES_PER_SECOND_PER_WORKER` ms.
    pub fn found_nothing(&self, worker: e2fleet_proto::api::WorkerId) {
        if self.empty.check_key(&worker).is_ok() {
            return;
        }
        let now = std::time::Instant::now();
        let mut quiet = self.quiet_until.lock().expect("quiet map");
        if quiet.len() >= 100_000 {
            quiet.retain(|_, until| *until > now);
        }
        let pause =
            std::time::Duration::from_millis(1000 / EMPTY_LEASES_PER_SECOND_PER_WORKER as u64);
        quiet.insert(worker, now + pause);
    }
}

impl Default for LeaseLimits {
    fn default() -> LeaseLimits {
        LeaseLimits::new()
    }
}

/// Verification submissions one identity may make: one a second on average, ten at once
/// (a worker submits one per suite when it joins; each costs the coordinator a suite
/// read).
pub fn verification_quota() -> governor::Quota {
    governor::Quota::per_second(std::num::NonZeroU32::new(1).expect("1"))
        .allow_burst(std::num::NonZeroU32::new(10).expect("10"))
}

/// Verification and audit submissions one volunteer account may make over all its
/// identities: two a second, 20 at once.
pub fn account_submission_quota() -> governor::Quota {
    governor::Quota::per_second(std::num::NonZeroU32::new(2).expect("2"))
        .allow_burst(std::num::NonZeroU32::new(20).expect("20"))
}

/// New identities one volunteer account may register: 5 a second, 200 at once (a lab
/// starting its machines together; the workers retry). The operator's are not limited.
pub fn registration_quota() -> governor::Quota {
    governor::Quota::per_second(std::num::NonZeroU32::new(5).expect("5"))
        .allow_burst(std::num::NonZeroU32::new(200).expect("200"))
}

/// Team changes one volunteer account's workers may ask for (`SetTeam`): one a minute, 5
/// at once. A team is a label, but each change is a write.
pub fn team_change_quota() -> governor::Quota {
    governor::Quota::per_minute(std::num::NonZeroU32::new(1).expect("1"))
        .allow_burst(std::num::NonZeroU32::new(5).expect("5"))
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use e2fleet_proto::api::{AccountId, WorkerId};

    /// A worker on short units asks often and gets units each time: only the backstop
    /// applies, well above what a worker asking once per `threads` units needs.
    #[test]
    fn calls_that_hand_out_units_are_not_slowed_by_the_empty_poll_rule() {
        let limits = LeaseLimits::new();
        let (worker, account) = (WorkerId::random(), "lab".parse::<AccountId>().unwrap());
        let allowed = (0..2 * LEASES_PER_SECOND_PER_WORKER)
            .filter(|_| limits.allow(&worker, &account))
            .count();
        assert_eq!(allowed, 2 * LEASES_PER_SECOND_PER_WORKER as usize);
    }

    /// Polling an empty queue is let through for a burst, then refused for a while; other
    /// identities are not affected.
    #[test]
    fn an_identity_polling_an_empty_queue_is_paused_after_its_burst() {
        let limits = LeaseLimits::new();
        let account = AccountId::operator();
        let (poller, other) = (WorkerId::random(), WorkerId::random());
        for _ in 0..2 * EMPTY_LEASES_PER_SECOND_PER_WORKER {
            assert!(limits.allow(&poller, &account));
            limits.found_nothing(poller);
        }
        assert!(
            limits.allow(&poller, &account),
            "the burst is not used up yet"
        );
        limits.found_nothing(poller);
        assert!(!limits.allow(&poller, &account), "past the burst: paused");
        assert!(limits.allow(&other, &account));
        std::thread::sleep(std::time::Duration::from_millis(
            1000 / EMPTY_LEASES_PER_SECOND_PER_WORKER as u64 + 20,
        ));
        assert!(limits.allow(&poller, &account), "the pause ends");
    }
}

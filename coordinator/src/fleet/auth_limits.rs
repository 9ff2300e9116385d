//! Failed authentications per address: an address that keeps presenting wrong tokens is
//! shut out for a while, and while it is, its calls are refused before any token is
//! looked up (a guess costs a header lookup). Worker and enrolment tokens and the admin
//! token are counted apart: a worker fleet behind one NAT address may fail now and then
//! (a restored database, an old identity), while the admin token is one secret that
//! nobody should be guessing at.
//!
//! The gRPC gate ([`crate::server::guard`]) and the JSON API's admin calls both go
//! through here, so the limits hold whichever door a guess comes through.

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Which secret failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Secret {
    /// A worker or enrolment token.
    Worker,
    /// The admin token.
    Admin,
}

/// Failed worker or enrolment tokens an address may present: 20 a second, in bursts of
/// 100; past that it is shut out for [`WORKER_SHUT_OUT`].
const WORKER_FAILURES_PER_SECOND: u32 = 20;
/// How long an address past its worker-token failure rate is refused.
pub const WORKER_SHUT_OUT: Duration = Duration::from_secs(5);
/// Wrong admin tokens an address may present: one a second, in bursts of 10; past that
/// it is shut out for [`ADMIN_SHUT_OUT`].
const ADMIN_FAILURES_PER_SECOND: u32 = 1;
/// How long an address past its admin-token failure rate is refused admin calls.
pub const ADMIN_SHUT_OUT: Duration = Duration::from_secs(60);

/// Most addresses remembered as shut out (expired entries are dropped first when full).
const SHUT_OUT_MAX: usize = 100_000;

/// Per-address limits on failed authentication.
pub struct AuthFailures {
    worker: governor::DefaultKeyedRateLimiter<IpAddr>,
    admin: governor::DefaultKeyedRateLimiter<IpAddr>,
    /// (address, secret) -> refused until.
    shut_out: Mutex<HashMap<(IpAddr, bool), Instant>>,
}

impl Default for AuthFailures {
    fn default() -> AuthFailures {
        let quota = |n: u32, burst: u32| {
            governor::Quota::per_second(NonZeroU32::new(n).expect("positive"))
                .allow_burst(NonZeroU32::new(burst).expect("positive"))
        };
        AuthFailures {
            worker: governor::RateLimiter::keyed(quota(WORKER_FAILURES_PER_SECOND, 100)),
            admin: governor::RateLimiter::keyed(quota(ADMIN_FAILURES_PER_SECOND, 10)),
            shut_out: Mutex::new(HashMap::new()),
        }
    }
}

impl AuthFailures {
    /// Whether `ip` is shut out from presenting `secret` now.
    pub fn is_shut_out(&self, ip: Option<IpAddr>, secret: Secret) -> bool {
        let Some(ip) = ip else { return false };
        let shut = self.shut_out.lock().expect("shut-out addresses");
        shut.get(&(ip, secret == Secret::Admin))
            .is_some_and(|&until| Instant::now() < until)
    }

    /// Counts a failed `secret` from `ip`; past its limit the address is shut out.
    pub fn failed(&self, ip: Option<IpAddr>, secret: Secret) {
        let Some(ip) = ip else { return };
        let (limiter, pause) = match secret {
            Secret::Worker => (&self.worker, WORKER_SHUT_OUT),
            Secret::Admin => (&self.admin, ADMIN_SHUT_OUT),
        };
        if limiter.check_key(&ip).is_ok() {
            return;
        }
        let now = Instant::now();
        let mut shut = self.shut_out.lock().expect("shut-out addresses");
        if shut.len() >= SHUT_OUT_MAX {
            shut.retain(|_, until| now < *until);
            if shut.len() >= SHUT_OUT_MAX {
                shut.clear();
            }
        }
        shut.insert((ip, secret == Secret::Admin), now + pause);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_guessing_the_admin_token_is_shut_out_and_others_are_not() {
        let limits = AuthFailures::default();
        let guesser: Option<IpAddr> = Some("192.0.2.7".parse().unwrap());
        let other: Option<IpAddr> = Some("192.0.2.8".parse().unwrap());
        for _ in 0..10 {
            assert!(!limits.is_shut_out(guesser, Secret::Admin));
            limits.failed(guesser, Secret::Admin);
        }
        limits.failed(guesser, Secret::Admin);
        assert!(limits.is_shut_out(guesser, Secret::Admin));
        // its workers (a worker token) and other addresses go on
        assert!(!limits.is_shut_out(guesser, Secret::Worker));
        assert!(!limits.is_shut_out(other, Secret::Admin));
    }
}

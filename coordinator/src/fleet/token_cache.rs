//! The workers' tokens the coordinator believes without a database read.
//!
//! Every worker call names its worker by a bearer token; the store keeps the token's
//! hash. Reading it on every call would cost the database a transaction a call, so a
//! token's worker is remembered, and believed for at most [`TOKEN_CACHE_TTL`]: several
//! coordinators may share one database, and a token another of them replaced (the worker
//! registered again) or whose account it revoked must stop working here within that.
//!
//! # Read again before it runs out
//! A token past its life is read again by the call that finds it so, and that call waits
//! for the read. Workers that came together (a fleet started at once, a coordinator
//! restarted, every worker reconnecting) would then all wait for the database in the same
//! second, every [`TOKEN_CACHE_TTL`]: a thousand reads at once on the read connections,
//! with the lease and report calls queued behind them (the load bench's slowest seconds
//! were those, docs/benchmarks.md). So a token still in use is read again in the
//! background before its life runs out ([`Fleet::refresh_tokens`], every
//! [`TOKEN_REFRESH_EVERY`]): all that are due in one read transaction, and a call waits
//! only for a token it has not used for a while. When it is read again is drawn for each
//! entry between [`REFRESH_FROM`] and [`REFRESH_TO`] of its life, so entries cached in
//! the same second drift apart and the background reads spread out. Entries not used
//! since they were read are left to run out, and are dropped then.
//!
//! [`Fleet::refresh_tokens`]: super::Fleet::refresh_tokens

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::store::WorkerRecord;

/// Most worker tokens kept in memory.
pub const TOKEN_CACHE_MAX: usize = 200_000;

/// How long a cached token is believed without a database read, at most (see the module
/// docs).
pub const TOKEN_CACHE_TTL: Duration = Duration::from_secs(10);

/// How often the coordinator reads again the tokens in use that are due.
pub const TOKEN_REFRESH_EVERY: Duration = Duration::from_secs(1);

/// Most tokens read again in one pass (one read transaction): with
/// [`TOKEN_REFRESH_EVERY`], enough for ~30,000 workers calling at least every few
/// seconds. Past that, calls read their own tokens again, as without the passes.
pub const TOKEN_REFRESH_MAX: usize = 5_000;

/// The earliest part of an entry's life at which it is read again.
const REFRESH_FROM: f64 = 0.4;
/// The latest part of an entry's life at which it is read again (a pass then has the
/// rest of its life, seconds, to finish).
const REFRESH_TO: f64 = 0.7;

/// One remembered token.
struct Entry {
    worker: WorkerRecord,
    /// Believed before this.
    until: Instant,
    /// Read again from this, when used.
    refresh_from: Instant,
    /// Used since it was read.
    used: bool,
}

impl Entry {
    /// An entry for `worker` as the store held it at `read_at` (a read started then).
    fn new(worker: WorkerRecord, read_at: Instant) -> Entry {
        let part = rand::random_range(REFRESH_FROM..REFRESH_TO);
        Entry {
            worker,
            until: read_at + TOKEN_CACHE_TTL,
            refresh_from: read_at + TOKEN_CACHE_TTL.mul_f64(part),
            used: false,
        }
    }
}

/// Token hash -> its worker (see the module docs). Only identity fields are used from a
/// cached worker; quarantine is always read from the store.
#[derive(Default)]
pub(crate) struct TokenCache {
    entries: Mutex<HashMap<String, Entry>>,
}

/// What one pass of [`Fleet::refresh_tokens`](super::Fleet::refresh_tokens) did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TokenRefresh {
    /// Tokens read again and still good: believed for another [`TOKEN_CACHE_TTL`].
    pub refreshed: usize,
    /// Tokens read again and no longer good (replaced, or the account revoked): dropped,
    /// so their next call is refused.
    pub dropped: usize,
    /// Entries that ran out unused, dropped.
    pub expired: usize,
}

impl TokenCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().expect("token cache")
    }

    /// The worker of a token hash while its entry is believed at `now`.
    pub(crate) fn get(&self, hash: &str, now: Instant) -> Option<WorkerRecord> {
        let mut entries = self.lock();
        let entry = entries.get_mut(hash)?;
        if now >= entry.until {
            return None;
        }
        entry.used = true;
        Some(entry.worker.clone())
    }

    /// Remembers a token's worker as read at `read_at` (the cache is emptied when it
    /// passes [`TOKEN_CACHE_MAX`] entries: it refills from the database as workers call).
    pub(crate) fn insert(&self, hash: String, worker: WorkerRecord, read_at: Instant) {
        let mut entries = self.lock();
        if entries.len() >= TOKEN_CACHE_MAX {
            entries.clear();
        }
        entries.insert(hash, Entry::new(worker, read_at));
    }

    /// Forgets every token of workers `keep` refuses.
    pub(crate) fn retain(&self, keep: impl Fn(&WorkerRecord) -> bool) {
        self.lock().retain(|_, e| keep(&e.worker));
    }

    /// Drops the entries run out at `now`, and gives the hashes of those used since they
    /// were read and due to be read again (at most [`TOKEN_REFRESH_MAX`]), with how many
    /// were dropped.
    pub(crate) fn due(&self, now: Instant) -> (Vec<String>, usize) {
        let mut entries = self.lock();
        let before = entries.len();
        entries.retain(|_, e| now < e.until);
        let expired = before - entries.len();
        let due = entries
            .iter()
            .filter(|(_, e)| e.used && now >= e.refresh_from)
            .map(|(hash, _)| hash.clone())
            .take(TOKEN_REFRESH_MAX)
            .collect();
        (due, expired)
    }

    /// Applies what a read started at `read_at` found for tokens [`TokenCache::due`]
    /// gave: a worker (still good) is believed again from `read_at`, `None` is dropped.
    /// An entry forgotten meanwhile stays forgotten.
    pub(crate) fn refreshed(
        &self,
        found: Vec<(String, Option<WorkerRecord>)>,
        read_at: Instant,
    ) -> TokenRefresh {
        let mut entries = self.lock();
        let mut pass = TokenRefresh::default();
        for (hash, worker) in found {
            match worker {
                Some(worker) => {
                    if let Some(entry) = entries.get_mut(&hash) {
                        *entry = Entry::new(worker, read_at);
                        pass.refreshed += 1;
                    }
                }
                None => {
                    if entries.remove(&hash).is_some() {
                        pass.dropped += 1;
                    }
                }
            }
        }
        pass
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(n: u8) -> WorkerRecord {
        let host = e2fleet_proto::api::HostInfo {
            hostname: format!("host-{n}"),
            cpu_model: String::new(),
            cores: 1,
            arch: String::new(),
            os: String::new(),
            rustc_version: String::new(),
            worker_version: String::new(),
            target_features: String::new(),
            engine_kind: e2fleet_engine::engine::EngineKind::Reference,
            engine_release: String::new(),
        };
        let (id, account) = (
            e2fleet_proto::api::WorkerId::random(),
            e2fleet_proto::api::AccountId::operator(),
        );
        WorkerRecord::registered(id, account, String::new(), host, String::new(), 0)
    }

    #[test]
    fn an_entry_is_believed_for_its_life_and_read_again_only_when_used_and_due() {
        let cache = TokenCache::default();
        let t0 = Instant::now();
        cache.insert("a".into(), worker(1), t0);
        cache.insert("b".into(), worker(2), t0);
        // used once; "b" never after it was read
        assert!(cache.get("a", t0).is_some());
        let early = t0 + TOKEN_CACHE_TTL.mul_f64(REFRESH_FROM * 0.9);
        assert_eq!(cache.due(early), (vec![], 0), "nothing due before its time");
        let late = t0 + TOKEN_CACHE_TTL.mul_f64(REFRESH_TO);
        assert_eq!(cache.due(late), (vec!["a".to_string()], 0));
        // past its life an entry is not believed, and a pass drops it
        let out = t0 + TOKEN_CACHE_TTL;
        assert!(cache.get("b", out).is_none());
        assert_eq!(cache.due(out), (vec![], 2));
    }

    #[test]
    fn a_pass_believes_good_tokens_again_and_drops_the_others() {
        let cache = TokenCache::default();
        let t0 = Instant::now();
        for (hash, n) in [("good", 1), ("gone", 2), ("forgotten", 3)] {
            cache.insert(hash.into(), worker(n), t0);
            cache.get(hash, t0);
        }
        let read_at = t0 + TOKEN_CACHE_TTL.mul_f64(REFRESH_TO);
        let (mut due, _) = cache.due(read_at);
        due.sort();
        assert_eq!(due, ["forgotten", "gone", "good"]);
        // the account of "forgotten" was revoked here while the pass read
        cache.retain(|w| w.host.hostname != "host-3");
        let pass = cache.refreshed(
            vec![
                ("good".into(), Some(worker(1))),
                ("gone".into(), None),
                ("forgotten".into(), Some(worker(3))),
            ],
            read_at,
        );
        assert_eq!(
            pass,
            TokenRefresh {
                refreshed: 1,
                dropped: 1,
                expired: 0
            }
        );
        // "good" is believed a whole life from the read; the others are gone
        let later = t0 + TOKEN_CACHE_TTL + TOKEN_CACHE_TTL.mul_f64(0.5);
        assert!(cache.get("good", later).is_some());
        assert!(cache.get("gone", read_at).is_none());
        assert!(cache.get("forgotten", read_at).is_none());
    }
}

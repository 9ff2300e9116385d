//! Worker identities: enrolment (an enrolment token names an account), per-worker tokens
//! (stored hashed), re-registration (only with the identity's current token), and the
//! authentication of every worker and operator call.
//!
//! A worker *is* its server-assigned id and its secret. Its host name, CPU and fingerprint
//! are labels: shown, grouped by, never trusted.

use std::collections::HashMap;

use tracing::info;

use e2fleet_proto::api::{AccountId, AccountKind, HostInfo, WorkerId};

use super::tokens::{random_token, sha256_hex};
use super::{Fleet, FleetError};
use crate::store::{AccountRecord, WorkerRecord};

/// A day, ms.
const DAY_MS: i64 = 86_400_000;

/// Whether a worker's account lets its token work: stored and not revoked.
fn account_live(account: Option<&AccountRecord>) -> bool {
    account.is_some_and(|a| a.revoked_ms.is_none())
}

/// Longest label (host name, CPU model, versions, ...) a worker may send, in bytes.
pub const MAX_LABEL_BYTES: usize = 256;

/// Compares two secrets in time independent of where they differ.
pub(crate) fn constant_time_eq(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// Whether `c` has no business in a label: a control character (a newline would forge a
/// log line, an escape sequence would drive the operator's terminal) or a Unicode
/// direction override (text that reads otherwise than it is).
fn unprintable(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Checks the labels a worker sends: each at most [`MAX_LABEL_BYTES`], printable, a host
/// name given.
pub(crate) fn check_labels(host: &HostInfo) -> Result<(), FleetError> {
    if host.hostname.is_empty() {
        return Err(FleetError::InvalidArgument("host.hostname is empty".into()));
    }
    for (field, value) in [
        ("hostname", &host.hostname),
        ("cpu_model", &host.cpu_model),
        ("arch", &host.arch),
        ("os", &host.os),
        ("rustc_version", &host.rustc_version),
        ("worker_version", &host.worker_version),
        ("target_features", &host.target_features),
        ("engine_release", &host.engine_release),
    ] {
        check_label(&format!("host.{field}"), value)?;
    }
    Ok(())
}

/// Checks one label a worker sends (a host name, an engine build): at most
/// [`MAX_LABEL_BYTES`], printable.
pub fn check_label(field: &str, value: &str) -> Result<(), FleetError> {
    if value.len() > MAX_LABEL_BYTES {
        return Err(FleetError::InvalidArgument(format!(
            "{field} is {} bytes; the limit is {MAX_LABEL_BYTES}",
            value.len()
        )));
    }
    if value.chars().any(unprintable) {
        return Err(FleetError::InvalidArgument(format!(
            "{field} holds a control character or a direction override; labels are printable text"
        )));
    }
    Ok(())
}

impl Fleet {
    /// Checks the admin token.
    pub fn check_admin(&self, token: Option<&str>) -> Result<(), FleetError> {
        match token {
            Some(t) if constant_time_eq(t, &self.config.admin_token) => Ok(()),
            Some(_) => Err(FleetError::Unauthenticated("wrong admin token".into())),
            None => Err(FleetError::Unauthenticated("missing admin token".into())),
        }
    }

    /// The account an enrolment token belongs to (before anything else of a
    /// registration is read): the operator's, or an active volunteer account's.
    pub async fn enrollment_account(&self, token: &str) -> Result<AccountRecord, FleetError> {
        let operator = constant_time_eq(token, &self.config.enroll_token);
        let hash = sha256_hex(token.as_bytes());
        let account = self
            .store
            .read(move |tx| {
                if operator {
                    tx.account(&AccountId::operator())
                } else {
                    tx.account_by_token_hash(&hash)
                }
            })
            .await?
            .ok_or_else(|| FleetError::Unauthenticated("wrong enrolment token".into()))?;
        if account.revoked_ms.is_some() {
            return Err(FleetError::Unauthenticated(format!(
                "the account {} of this enrolment token was revoked",
                account.id
            )));
        }
        Ok(account)
    }

    /// The worker a token belongs to when it is in the in-memory cache (no database read).
    pub fn cached_worker(&self, token: Option<&str>) -> Option<WorkerRecord> {
        self.tokens
            .get(&sha256_hex(token?.as_bytes()), std::time::Instant::now())
    }

    /// Reads again, in one read transaction, the tokens in use whose cached entries are
    /// due at `now` (see `token_cache.rs`): a token still good is believed for another
    /// [`super::TOKEN_CACHE_TTL`] from the read, one replaced or of a revoked account is
    /// dropped (its next call is refused), and entries run out unused are dropped. The
    /// server runs it every [`super::TOKEN_REFRESH_EVERY`].
    pub async fn refresh_tokens(
        &self,
        now: std::time::Instant,
    ) -> Result<super::TokenRefresh, FleetError> {
        let (due, expired) = self.tokens.due(now);
        if due.is_empty() {
            return Ok(super::TokenRefresh {
                expired,
                ..Default::default()
            });
        }
        let read_at = std::time::Instant::now().min(now);
        let found = self
            .store
            .read(move |tx| {
                // an account's standing, read once a pass
                let mut live: HashMap<AccountId, bool> = HashMap::new();
                let mut found = Vec::with_capacity(due.len());
                for hash in due {
                    let worker = tx.worker_by_token_hash(&hash)?;
                    let good = match &worker {
                        Some(w) if !live.contains_key(&w.account_id) => {
                            let good = account_live(tx.account(&w.account_id)?.as_ref());
                            live.insert(w.account_id.clone(), good);
                            good
                        }
                        Some(w) => live[&w.account_id],
                        None => false,
                    };
                    found.push((hash, worker.filter(|_| good)));
                }
                Ok::<_, FleetError>(found)
            })
            .await?;
        Ok(super::TokenRefresh {
            expired,
            ..self.tokens.refreshed(found, read_at)
        })
    }

    /// The worker a bearer token belongs to.
    pub async fn worker_by_token(&self, token: Option<&str>) -> Result<WorkerRecord, FleetError> {
        let token =
            token.ok_or_else(|| FleetError::Unauthenticated("missing worker token".into()))?;
        let hash = sha256_hex(token.as_bytes());
        if let Some(w) = self.tokens.get(&hash, std::time::Instant::now()) {
            return Ok(w);
        }
        let lookup = hash.clone();
        let read_at = std::time::Instant::now();
        let (worker, account) = self
            .store
            .read(move |tx| {
                let Some(worker) = tx.worker_by_token_hash(&lookup)? else {
                    return Ok::<_, FleetError>(None);
                };
                let account = tx.account(&worker.account_id)?;
                Ok(Some((worker, account)))
            })
            .await?
            .ok_or_else(|| {
                FleetError::Unauthenticated("unknown worker token; register again".into())
            })?;
        if !account_live(account.as_ref()) {
            return Err(FleetError::Unauthenticated(format!(
                "the account {} of this worker was revoked",
                worker.account_id
            )));
        }
        self.tokens.insert(hash, worker.clone(), read_at);
        Ok(worker)
    }

    /// Enrols a worker with an enrolment token; returns its id and its own token. Keeping
    /// an earlier identity (`previous`) needs that identity's current token: an id alone
    /// proves nothing.
    pub async fn register_worker(
        &self,
        enroll_token: &str,
        host: HostInfo,
        previous: Option<(WorkerId, String)>,
    ) -> Result<(WorkerId, String), FleetError> {
        let account = self.enrollment_account(enroll_token).await?;
        check_labels(&host)?;
        if !account.id.is_operator() {
            // a new identity is one the account does not already hold (naming a made-up
            // earlier identity makes a new one too, and counts as one)
            let known = match &previous {
                Some((prev, _)) => {
                    let (prev, account_id) = (*prev, account.id.clone());
                    self.store
                        .read(move |tx| {
                            Ok::<_, FleetError>(
                                tx.worker(prev)?.is_some_and(|w| w.account_id == account_id),
                            )
                        })
                        .await?
                }
                None => false,
            };
            if !known {
                if self.registration_limits.check_key(&account.id).is_err() {
                    return Err(FleetError::TooMany(format!(
                        "account {} is registering new workers too fast; retry in a few seconds",
                        account.id
                    )));
                }
                let (account_id, since) = (account.id.clone(), self.now() - DAY_MS);
                let seen = self
                    .store
                    .read(move |tx| tx.identities_of_account_since(&account_id, since))
                    .await?;
                if seen >= self.config.accounts.identities_per_day {
                    return Err(FleetError::TooMany(format!(
                        "account {} has {seen} worker identities seen in the last day, its limit; a worker keeps its identity in its data directory (keep the directory), or ask the operator for more",
                        account.id
                    )));
                }
            }
        }
        let token = random_token();
        let now = self.now();
        let class_id = super::verification::class_id(&host);
        let record = WorkerRecord::registered(
            WorkerId::random(),
            account.id.clone(),
            sha256_hex(token.as_bytes()),
            host,
            class_id,
            now,
        );
        let fresh = previous.is_none().then(|| record.clone());
        let written_at = std::time::Instant::now();
        let (id, hostname) = self
            .store
            .write(move |tx| {
                let mut record = record;
                if let Some((prev, prev_token)) = previous
                    && let Some(old) = tx.worker(prev)?
                {
                    let proof = sha256_hex(prev_token.as_bytes());
                    if !constant_time_eq(&proof, &old.token_hash) {
                        return Err(FleetError::PermissionDenied(format!(
                            "worker {prev} is registered; keeping it needs its current token (a worker that lost it registers as a new worker)"
                        )));
                    }
                    if old.account_id != record.account_id {
                        return Err(FleetError::PermissionDenied(format!(
                            "worker {prev} belongs to another account"
                        )));
                    }
                    record.id = prev;
                }
                tx.upsert_class(&record.class_id, &record.host, now)?;
                tx.upsert_worker(&record)?;
                Ok::<_, FleetError>((record.id, record.host.hostname))
            })
            .await?;
        match fresh {
            // a new identity: known at once, so its first call needs no database read
            Some(record) if record.id == id => {
                self.tokens
                    .insert(record.token_hash.clone(), record, written_at)
            }
            // a re-registration replaces the worker's token: forget the old one
            _ => self.tokens.retain(|w| w.id != id),
        }
        info!(worker_id = %id, account = %account.id, %hostname, "worker registered");
        Ok((id, token))
    }

    /// Whether results from this account count alone.
    pub(crate) fn trusted(&self, account: &AccountRecord) -> bool {
        account.kind == AccountKind::Operator
            || account.confirmed_streak >= self.config.trust.trust_after
    }
}

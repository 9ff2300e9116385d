//! Worker identities: enrolment, per-worker tokens (stored hashed), authentication of
//! every worker and operator call, and lifting a host's quarantine.

use rand::RngCore;
use sha2::{Digest, Sha256};
use tracing::info;

use e2fleet_proto::api::{HostInfo, WorkerId};

use super::{Fleet, FleetError};
use crate::store::WorkerRecord;

/// Lowercase hex SHA-256.
pub(crate) fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A fresh random token (192 bits, hex).
pub fn random_token() -> String {
    let mut bytes = [0u8; 24];
    rand::rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Compares two secrets in time independent of where they differ.
pub(crate) fn constant_time_eq(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
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

    /// Checks an enrolment token (before anything else of a registration is read).
    pub fn check_enrollment(&self, token: &str) -> Result<(), FleetError> {
        if constant_time_eq(token, &self.config.enroll_token) {
            Ok(())
        } else {
            Err(FleetError::Unauthenticated("wrong enrolment token".into()))
        }
    }

    /// The worker a bearer token belongs to.
    pub async fn worker_by_token(&self, token: Option<&str>) -> Result<WorkerRecord, FleetError> {
        let token =
            token.ok_or_else(|| FleetError::Unauthenticated("missing worker token".into()))?;
        let hash = sha256_hex(token.as_bytes());
        if let Some(w) = self.tokens.lock().expect("token cache").get(&hash) {
            return Ok(w.clone());
        }
        let lookup = hash.clone();
        let worker = self
            .store
            .read(move |tx| tx.worker_by_token_hash(&lookup))
            .await?
            .ok_or_else(|| {
                FleetError::Unauthenticated("unknown worker token; register again".into())
            })?;
        self.tokens
            .lock()
            .expect("token cache")
            .insert(hash, worker.clone());
        Ok(worker)
    }

    /// Enrols a worker; returns its id and its own token.
    pub async fn register_worker(
        &self,
        enroll_token: &str,
        host: HostInfo,
        previous: Option<WorkerId>,
    ) -> Result<(WorkerId, String), FleetError> {
        self.check_enrollment(enroll_token)?;
        if host.hostname.is_empty() || host.hostname.len() > 255 {
            return Err(FleetError::InvalidArgument(
                "hostname must be 1..=255 bytes".into(),
            ));
        }
        let token = random_token();
        let now = self.now();
        let class_id = super::verification::class_id(&host);
        let record = WorkerRecord {
            id: WorkerId::random(),
            token_hash: sha256_hex(token.as_bytes()),
            engine_build: host.engine_release.clone(),
            host,
            class_id,
            registered_ms: now,
            last_seen_ms: now,
            per_core_rate: 0.0,
            threads: 0,
            units_done: 0,
            errors: 0,
            quarantined: false,
            leases_held: 0,
        };
        let id = self
            .store
            .write(move |tx| {
                let mut record = record;
                if let Some(prev) = previous
                    && tx.worker(prev)?.is_some()
                {
                    record.id = prev;
                }
                tx.upsert_class(&record.class_id, &record.host, now)?;
                tx.upsert_worker(&record)?;
                Ok::<_, FleetError>((record.id, record.host.hostname))
            })
            .await?;
        let (id, hostname) = id;
        // a re-registration replaces the worker's token: forget the old one
        self.tokens
            .lock()
            .expect("token cache")
            .retain(|_, w| w.id != id);
        info!(worker_id = %id, %hostname, "worker registered");
        Ok((id, token))
    }

    /// Lifts a host's quarantine; the workers released.
    pub async fn release_host(&self, hostname: &str) -> Result<u64, FleetError> {
        let host = hostname.to_string();
        let n = self
            .store
            .write(move |tx| Ok::<_, FleetError>(tx.release_host(&host)?))
            .await?;
        info!(%hostname, released = n, "host released");
        Ok(n)
    }
}

//! Verification units: suites of small, fixed pieces of real trees with exact results,
//! run by every hardware class (CPU model, arch, OS, rustc, CPU features, engine kind and
//! release) before it is trusted, and the conformance matrix of who agrees.
//!
//! - The default suite (`engine/suite/default.json`, expected results included) is
//!   stored on first use; operators add or replace suites with [`Fleet::submit_suite`].
//!   A unit submitted without an expected result gets one as soon as two different
//!   classes report the same exact result (same digest).
//! - Workers fetch the units their class has not run ([`Fleet::suite_for_worker`]), run
//!   them with the engine they would use for real work and submit the results
//!   ([`Fleet::submit_verification`]); `e2fleet-worker verify --coordinator` does the same
//!   on demand.
//! - A class whose latest result on any unit differs from the expected one is flagged:
//!   its workers get no real units ([`Fleet::flagged_reason`], checked when leasing)
//!   until a fixed build — a new class — agrees.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;

use e2fleet_engine::suite::{SuiteUnit, default_suite, resolve};
use e2fleet_engine::unit::result_digest;
use e2fleet_proto::api::{HostInfo, SuiteResult, UnitVerdict, Verdict, VerificationOutcome};
use tracing::{info, warn};

use super::tokens::sha256_hex;
use super::{Fleet, FleetError};
use crate::store::{NewVerification, ResultBody, SuiteUnitRecord, WorkerRecord};

/// The suite stored from `engine/suite/default.json`.
pub const DEFAULT_SUITE: &str = "default";

/// Most units a submitted suite may have.
pub const MAX_SUITE_UNITS: usize = 500;

/// Different results one identity may store for one unit of a suite (a flaky machine's
/// disagreements are kept as evidence; an identity making up results stores no more).
pub const MAX_RESULTS_PER_IDENTITY: u64 = 3;

/// Deepest prefix a suite unit may name (the coordinator enumerates up to it).
pub const MAX_PREFIX_DEPTH: usize = 10;

/// The hardware class of a host: a short SHA-256 of everything that must match for two
/// results to count as "the same hardware and build".
pub fn class_id(h: &HostInfo) -> String {
    let fields = [
        h.cpu_model.as_str(),
        &h.arch,
        &h.os,
        &h.rustc_version,
        &h.target_features,
        h.engine_kind.as_str(),
        &h.engine_release,
    ];
    sha256_hex(fields.join("\u{1f}").as_bytes())[..12].to_string()
}

fn suite_name(name: &str) -> &str {
    if name.is_empty() { DEFAULT_SUITE } else { name }
}

/// Suite units as stored (a given expected result is "given").
fn suite_records(units: &[SuiteUnit]) -> Vec<SuiteUnitRecord> {
    units
        .iter()
        .map(|u| {
            let mut spec = u.clone();
            spec.expected = None;
            SuiteUnitRecord {
                name: u.name.clone(),
                spec,
                expected: u.expected.clone(),
                expected_source: if u.expected.is_some() {
                    "given".into()
                } else {
                    String::new()
                },
            }
        })
        .collect()
}

mod agreement;
mod flags;
mod matrix;

use agreement::agreements;
pub use flags::Flags;

/// How long the flagged classes are believed before they are computed again: another
/// coordinator on the same database (PostgreSQL) may have taken a verification result
/// that flags or clears a class (this coordinator's own results clear the cache at once).
pub const FLAGS_TTL: std::time::Duration = std::time::Duration::from_secs(10);

impl Fleet {
    /// Stores the default suite if this database has none (once per process).
    pub(crate) async fn ensure_default_suite(&self) -> Result<(), FleetError> {
        if self.default_suite_ready.load(Ordering::Acquire) {
            return Ok(());
        }
        let units = suite_records(&default_suite());
        let now = self.now();
        let changed = self
            .store
            .write(move |tx| {
                // a coordinator upgrade may ship a different built-in suite: store it
                // (results stay and are judged against the new units)
                let changed = tx.suite_units(DEFAULT_SUITE)? != units;
                if changed {
                    tx.replace_suite(DEFAULT_SUITE, &units, now)?;
                    info!(units = units.len(), "built-in verification suite stored");
                }
                Ok::<_, FleetError>(changed)
            })
            .await?;
        if changed {
            self.invalidate_flagged();
        }
        self.default_suite_ready.store(true, Ordering::Release);
        Ok(())
    }

    /// Stores (or replaces) a suite from its JSON: an array of units with optional
    /// expected results. Every unit is resolved first (puzzle, order, prefix), so a bad
    /// suite is refused whole with the unit named. Returns (units, with expected).
    pub async fn submit_suite(&self, name: &str, json: &str) -> Result<(u32, u32), FleetError> {
        let bad = |m: String| FleetError::InvalidArgument(m);
        if name.is_empty()
            || name.len() > 64
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(bad(
                "suite name: 1-64 characters of letters, digits, '-', '_', '.'".into(),
            ));
        }
        if name == DEFAULT_SUITE {
            return Err(bad(format!(
                "{DEFAULT_SUITE:?} is the built-in suite (engine/suite/default.json); give yours another name"
            )));
        }
        let units: Vec<SuiteUnit> =
            serde_json::from_str(json).map_err(|e| bad(format!("suite JSON: {e}")))?;
        if units.is_empty() || units.len() > MAX_SUITE_UNITS {
            return Err(bad(format!(
                "a suite has 1..={MAX_SUITE_UNITS} units, this one {}",
                units.len()
            )));
        }
        let mut names = BTreeSet::new();
        for u in &units {
            if u.name.is_empty() || !names.insert(u.name.clone()) {
                return Err(bad(format!(
                    "unit names must be unique and non-empty: {:?}",
                    u.name
                )));
            }
            if u.prefix_depth > MAX_PREFIX_DEPTH {
                return Err(bad(format!(
                    "unit {}: prefix_depth {} is deeper than {MAX_PREFIX_DEPTH}",
                    u.name, u.prefix_depth
                )));
            }
            let resolved = resolve(u).map_err(|e| bad(format!("unit {}: {e}", u.name)))?;
            if let Some(e) = &u.expected
                && e.nodes_by_depth.len() != resolved.plan.len()
            {
                return Err(bad(format!(
                    "unit {}: expected nodes_by_depth has {} depths, the puzzle {}",
                    u.name,
                    e.nodes_by_depth.len(),
                    resolved.plan.len()
                )));
            }
        }
        let records = suite_records(&units);
        let (suite, now) = (name.to_string(), self.now());
        self.store
            .write(move |tx| Ok::<_, FleetError>(tx.replace_suite(&suite, &records, now)?))
            .await?;
        self.invalidate_flagged();
        info!(suite = name, units = units.len(), "suite stored");
        let with_expected = units.iter().filter(|u| u.expected.is_some()).count();
        Ok((units.len() as u32, with_expected as u32))
    }

    async fn suite(&self, name: &str) -> Result<Vec<SuiteUnitRecord>, FleetError> {
        self.ensure_default_suite().await?;
        let suite = name.to_string();
        let rows = self.store.read(move |tx| tx.suite_units(&suite)).await?;
        if rows.is_empty() {
            return Err(FleetError::NotFound(format!("suite {name}")));
        }
        Ok(rows)
    }

    /// A suite's units for a worker (expected results withheld), optionally only those
    /// its hardware class has not run yet. Returns (suite, units, class id).
    pub async fn suite_for_worker(
        &self,
        worker: &WorkerRecord,
        suite: &str,
        only_missing: bool,
    ) -> Result<(String, Vec<SuiteUnit>, String), FleetError> {
        let suite = suite_name(suite).to_string();
        let rows = self.suite(&suite).await?;
        let done: BTreeSet<String> = if only_missing {
            let (s, class) = (suite.clone(), worker.class_id.clone());
            self.store
                .read(move |tx| tx.verifications_of_suite(&s))
                .await?
                .into_iter()
                .filter(|r| r.class_id == class)
                .map(|r| r.unit)
                .collect()
        } else {
            BTreeSet::new()
        };
        let units = rows
            .into_iter()
            .filter(|r| !done.contains(&r.name))
            .map(|r| r.spec)
            .collect();
        Ok((suite, units, worker.class_id.clone()))
    }

    /// Whether `worker` may make a verification or audit submission now (checked before
    /// its body is read: [`crate::server::guard`]): one a second per identity, ten at
    /// once, and for a volunteer account two a second over all its identities.
    pub fn submission_allowed(&self, worker: &WorkerRecord) -> Result<(), FleetError> {
        let identity = self.verification_limits.check_key(&worker.id).is_ok();
        let account = worker.account_id.is_operator()
            || self
                .account_submission_limits
                .check_key(&worker.account_id)
                .is_ok();
        if identity && account {
            Ok(())
        } else {
            Err(FleetError::TooMany(
                "too many verification or audit submissions; retry in a few seconds".into(),
            ))
        }
    }

    /// Records a worker's suite results under its hardware class (one row per identity
    /// and unit: a repeat replaces it), fixes expected results that two classes now agree
    /// on, and judges each result.
    pub async fn submit_verification(
        &self,
        worker: &WorkerRecord,
        suite: &str,
        results: Vec<SuiteResult>,
    ) -> Result<VerificationOutcome, FleetError> {
        let suite = suite_name(suite).to_string();
        let rows = self.suite(&suite).await?;
        let by_name: BTreeMap<&str, &SuiteUnitRecord> =
            rows.iter().map(|r| (r.name.as_str(), r)).collect();
        if results.is_empty() || results.len() > MAX_SUITE_UNITS {
            return Err(FleetError::InvalidArgument(format!(
                "1..={MAX_SUITE_UNITS} results per submission"
            )));
        }
        let now = self.now();
        let mut new = Vec::with_capacity(results.len());
        let mut seen = BTreeSet::new();
        for r in &results {
            if !seen.insert(r.unit.as_str()) {
                return Err(FleetError::InvalidArgument(format!(
                    "unit {:?} appears twice in one submission",
                    r.unit
                )));
            }
            let row = by_name.get(r.unit.as_str()).ok_or_else(|| {
                FleetError::InvalidArgument(format!("suite {suite} has no unit {:?}", r.unit))
            })?;
            if r.engine_build.len() > super::registration::MAX_LABEL_BYTES {
                return Err(FleetError::InvalidArgument(format!(
                    "unit {}: engine_build is longer than {} bytes",
                    r.unit,
                    super::registration::MAX_LABEL_BYTES
                )));
            }
            let depths = self.suite_depths(&row.spec)?;
            if r.result.nodes_by_depth.len() != depths
                || r.result.nodes_by_depth.iter().sum::<u64>() != r.result.committed
                || !r.engine_seconds.is_finite()
                || r.engine_seconds < 0.0
            {
                return Err(FleetError::InvalidArgument(format!(
                    "unit {}: malformed result (depths, committed sum or seconds)",
                    r.unit
                )));
            }
            new.push(NewVerification {
                suite: suite.clone(),
                unit: r.unit.clone(),
                class_id: worker.class_id.clone(),
                worker_id: worker.id,
                account_id: worker.account_id.clone(),
                hostname: worker.host.hostname.clone(),
                engine_build: r.engine_build.clone(),
                digest: result_digest(&r.result),
                body: ResultBody::encode(&r.result),
                nodes: r.result.committed,
                engine_seconds: r.engine_seconds,
                received_ms: now,
            });
        }
        // the write stores the results, nothing more; agreement is worked out on a read
        // and the few expected results it fixes are written after (a fix is idempotent)
        self.store
            .write(move |tx| {
                // checked before the first write: a refusal must not undo the batch
                for v in &new {
                    if tx.verification_results_of_identity(
                        &v.suite,
                        &v.unit,
                        &v.class_id,
                        v.worker_id,
                    )? >= MAX_RESULTS_PER_IDENTITY
                    {
                        return Err(FleetError::FailedPrecondition(format!(
                            "unit {}: this identity has sent {MAX_RESULTS_PER_IDENTITY} different results for it already; no more are stored",
                            v.unit
                        )));
                    }
                }
                for v in &new {
                    tx.insert_verification(v)?;
                }
                Ok::<_, FleetError>(())
            })
            .await?;
        let s = suite.clone();
        let (mut fixed, to_fix) = self.store.read(move |tx| agreements(tx, &s)).await?;
        if !to_fix.is_empty() {
            let s = suite.clone();
            self.store
                .write(move |tx| {
                    for (unit, expected, source) in &to_fix {
                        tx.set_expected(&s, unit, expected, source)?;
                        info!(suite = %s, %unit, %source, "expected result fixed");
                    }
                    Ok::<_, FleetError>(to_fix)
                })
                .await?
                .into_iter()
                .for_each(|(unit, expected, _)| {
                    fixed.insert(unit, expected);
                });
        }
        self.invalidate_flagged();
        let verdicts = results
            .iter()
            .map(|r| {
                let (verdict, detail) = match fixed.get(&r.unit) {
                    None => (
                        Verdict::Pending,
                        "no expected result yet: fixed when two hardware classes agree".into(),
                    ),
                    Some(e) => match e.disagreement(&r.result) {
                        None => (Verdict::Agrees, String::new()),
                        Some(d) => (Verdict::Disagrees, d),
                    },
                };
                UnitVerdict {
                    unit: r.unit.clone(),
                    verdict,
                    detail,
                }
            })
            .collect();
        let class_flagged = self.flagged_reason(worker).await?.is_some();
        if class_flagged {
            warn!(class_id = %worker.class_id, hostname = %worker.host.hostname, "hardware class disagrees with a verification unit: no real work for it");
        }
        Ok(VerificationOutcome {
            class_id: worker.class_id.clone(),
            verdicts,
            class_flagged,
        })
    }

    /// The depths of a suite unit's puzzle (resolved once per unit: it loads the puzzle
    /// and enumerates to the unit's prefix).
    fn suite_depths(&self, spec: &SuiteUnit) -> Result<usize, FleetError> {
        let key = serde_json::to_string(spec).expect("suite units serialise");
        if let Some(&d) = self.suite_depths.lock().expect("suite depths").get(&key) {
            return Ok(d);
        }
        let depths = resolve(spec)
            .map_err(|e| FleetError::InvalidArgument(format!("unit {}: {e}", spec.name)))?
            .plan
            .len();
        self.suite_depths
            .lock()
            .expect("suite depths")
            .insert(key, depths);
        Ok(depths)
    }

    fn invalidate_flagged(&self) {
        *self.flagged.lock().expect("flagged cache") = None;
    }

    /// Lifts a class's flag: its disagreements so far no longer count (a new one flags it
    /// again).
    pub async fn unflag_class(&self, class_id: &str) -> Result<(), FleetError> {
        let (class, now) = (class_id.to_string(), self.now());
        self.store
            .write(move |tx| Ok::<_, FleetError>(tx.unflag_class(&class, now)?))
            .await?;
        self.invalidate_flagged();
        info!(class_id, "hardware class unflagged");
        Ok(())
    }

    /// Why a worker gets no real work, if it does not: its hardware class disagrees with
    /// an exact result (see [`Flags`]), or its own latest result does.
    pub async fn flagged_reason(
        &self,
        worker: &WorkerRecord,
    ) -> Result<Option<String>, FleetError> {
        if worker.class_id.is_empty() {
            return Ok(None);
        }
        if let Some((flags, at)) = self.flagged.lock().expect("flagged cache").as_ref()
            && at.elapsed() < FLAGS_TTL
        {
            return Ok(flags.reason(worker));
        }
        let flags = self.store.read(|tx| Flags::compute(tx)).await?;
        let answer = flags.reason(worker);
        *self.flagged.lock().expect("flagged cache") = Some((flags, std::time::Instant::now()));
        Ok(answer)
    }
}

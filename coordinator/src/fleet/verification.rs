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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::Ordering;

use e2fleet_engine::suite::{SuiteExpected, SuiteUnit, default_suite, resolve};
use e2fleet_engine::unit::result_digest;
use e2fleet_proto::api::status::{
    ExpectedSummary, MATRIX_WHAT, MatrixCell, MatrixClass, MatrixUnit, VerificationMatrix, median,
};
use e2fleet_proto::api::{
    AccountId, HostInfo, SuiteResult, UnitVerdict, Verdict, VerificationOutcome, WorkerId,
};
use tracing::{info, warn};

use super::registration::sha256_hex;
use super::{Fleet, FleetError};
use crate::store::{
    NewVerification, ResultBody, SuiteUnitRecord, VerificationRecord, WorkerRecord,
};

/// The suite stored from `engine/suite/default.json`.
pub const DEFAULT_SUITE: &str = "default";

/// Most units a submitted suite may have.
pub const MAX_SUITE_UNITS: usize = 500;

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

/// The exact results of a suite's units: those known, and those two independent classes
/// now agree on (to store: unit, expected result, where it came from) — the first digest
/// two classes share, reported by two accounts (or only by the operator): one volunteer's
/// two fake classes fix nothing.
#[allow(clippy::type_complexity)]
fn agreements(
    tx: &mut dyn crate::store::Tx,
    suite: &str,
) -> Result<
    (
        BTreeMap<String, SuiteExpected>,
        Vec<(String, SuiteExpected, String)>,
    ),
    FleetError,
> {
    let all = tx.verifications_of_suite(suite)?;
    let mut known = BTreeMap::new();
    let mut to_fix = Vec::new();
    for r in tx.suite_units(suite)? {
        if let Some(e) = r.expected {
            known.insert(r.name, e);
            continue;
        }
        let mut classes: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        let mut accounts: BTreeMap<&str, BTreeSet<&AccountId>> = BTreeMap::new();
        let mut order: Vec<&str> = Vec::new();
        for v in all.iter().filter(|v| v.unit == r.name) {
            if !classes.contains_key(v.digest.as_str()) {
                order.push(&v.digest);
            }
            classes.entry(&v.digest).or_default().insert(&v.class_id);
            accounts.entry(&v.digest).or_default().insert(&v.account_id);
        }
        let independent = |d: &&str| {
            classes[d].len() >= 2
                && (accounts[d].len() >= 2 || accounts[d].iter().all(|a| a.is_operator()))
        };
        if let Some(digest) = order.into_iter().find(independent) {
            let result = tx
                .verification_body(suite, &r.name, digest)?
                .expect("a result with this digest exists");
            let agreed: Vec<&str> = classes[digest].iter().copied().collect();
            let source = format!("agreement of classes {}", agreed.join(", "));
            to_fix.push((r.name, SuiteExpected::of(&result), source));
        }
    }
    Ok((known, to_fix))
}

/// Latest result per (class, identity, unit) among `rows` (oldest first), leaving out
/// those from before their class was last unflagged.
fn latest<'r>(
    rows: &'r [VerificationRecord],
    unflagged: &HashMap<String, i64>,
) -> BTreeMap<(String, WorkerId, String), &'r VerificationRecord> {
    let mut out = BTreeMap::new();
    for r in rows {
        if unflagged
            .get(&r.class_id)
            .is_some_and(|&t| r.received_ms <= t)
        {
            continue;
        }
        out.insert((r.class_id.clone(), r.worker_id, r.unit.clone()), r);
    }
    out
}

/// Which hardware classes and identities get no real work, and why.
///
/// A class is flagged when identities of at least two accounts (or one of the
/// operator's) have a latest result that disagrees with an exact result: one volunteer
/// cannot flag a class by registering with its labels and lying. A lone disagreement
/// marks only the identity that made it. An operator lifts a class's flag with
/// `verify unflag CLASS` (earlier disagreements stop counting).
pub struct Flags {
    /// Class -> (unit -> why).
    classes: HashMap<String, BTreeMap<String, String>>,
    /// (identity, class) -> why.
    identities: HashMap<(WorkerId, String), String>,
}

impl Flags {
    /// Reads every suite's results.
    fn compute(tx: &mut dyn crate::store::Tx) -> Result<Flags, FleetError> {
        let unflagged: HashMap<String, i64> = tx.class_unflags()?.into_iter().collect();
        let mut against: HashMap<(String, String), (BTreeSet<AccountId>, String)> = HashMap::new();
        let mut identities = HashMap::new();
        for suite in tx.suite_names()? {
            let expected: BTreeMap<String, String> = tx
                .suite_units(&suite)?
                .into_iter()
                .filter_map(|u| Some((u.name, u.expected?.digest)))
                .collect();
            let rows = tx.verifications_of_suite(&suite)?;
            for ((class, worker, unit), r) in latest(&rows, &unflagged) {
                if expected.get(&unit).is_some_and(|d| *d != r.digest) {
                    let why = format!(
                        "its result on verification unit {suite}/{unit} differs from the exact result"
                    );
                    identities
                        .entry((worker, class.clone()))
                        .or_insert_with(|| format!("this worker's own {why}"));
                    against
                        .entry((class, format!("{suite}/{unit}")))
                        .or_insert_with(|| (BTreeSet::new(), why))
                        .0
                        .insert(r.account_id.clone());
                }
            }
        }
        let mut classes: HashMap<String, BTreeMap<String, String>> = HashMap::new();
        for ((class, unit), (accounts, why)) in against {
            if accounts.len() >= 2 || accounts.iter().any(AccountId::is_operator) {
                classes.entry(class).or_default().insert(unit, why);
            }
        }
        Ok(Flags {
            classes,
            identities,
        })
    }

    /// Why `worker` gets no real work, if it does not.
    fn reason(&self, worker: &WorkerRecord) -> Option<String> {
        if let Some(units) = self.classes.get(&worker.class_id) {
            return units.values().next().cloned();
        }
        self.identities
            .get(&(worker.id, worker.class_id.clone()))
            .cloned()
    }

    /// Whether a class is flagged on a unit (`suite/unit`).
    fn class_flagged_on(&self, class: &str, unit: &str) -> bool {
        self.classes
            .get(class)
            .is_some_and(|u| u.contains_key(unit))
    }
}

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

    /// Records a worker's suite results under its hardware class, fixes expected results
    /// that two classes now agree on, and judges each result.
    pub async fn submit_verification(
        &self,
        worker: &WorkerRecord,
        suite: &str,
        results: Vec<SuiteResult>,
    ) -> Result<VerificationOutcome, FleetError> {
        if self.verification_limits.check_key(&worker.id).is_err() {
            return Err(FleetError::TooMany(
                "too many verification submissions; retry in a few seconds".into(),
            ));
        }
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
        for r in &results {
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
        if let Some(flags) = self.flagged.lock().expect("flagged cache").as_ref() {
            return Ok(flags.reason(worker));
        }
        let flags = self.store.read(|tx| Flags::compute(tx)).await?;
        let answer = flags.reason(worker);
        *self.flagged.lock().expect("flagged cache") = Some(flags);
        Ok(answer)
    }

    /// The conformance matrix of a suite: hardware classes x units, each cell agrees /
    /// DISAGREES / pending / not run with the per-core rate; flagged classes; the speed
    /// table (per-core placements/s per class on the suite's speed units).
    pub async fn verification_matrix(&self, suite: &str) -> Result<VerificationMatrix, FleetError> {
        let suite = suite_name(suite).to_string();
        let units = self.suite(&suite).await?;
        let s = suite.clone();
        let (classes, rows, workers, flags, unflagged) = self
            .store
            .read(move |tx| {
                Ok::<_, FleetError>((
                    tx.classes_of_suite(&s)?,
                    tx.verifications_of_suite(&s)?,
                    tx.list_workers()?,
                    Flags::compute(tx)?,
                    tx.class_unflags()?.into_iter().collect::<HashMap<_, _>>(),
                ))
            })
            .await?;
        let mut hosts: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for w in workers {
            hosts.entry(w.class_id).or_default().insert(w.host.hostname);
        }
        let latest = latest(&rows, &unflagged);
        let mut class_rows = Vec::new();
        for class in &classes {
            let mut cells = BTreeMap::new();
            let mut speed_rates = Vec::new();
            for u in &units {
                let mine: Vec<&VerificationRecord> = rows
                    .iter()
                    .filter(|r| r.class_id == class.id && r.unit == u.name)
                    .collect();
                let Some(last) = mine.last() else {
                    cells.insert(u.name.clone(), MatrixCell::not_run());
                    continue;
                };
                // the class's judgement: disagrees when its flag says so; agrees when
                // some identity's latest result agrees (a lone liar flags only itself)
                let latest_of_class = latest
                    .iter()
                    .filter(|((c, _, unit), _)| *c == class.id && *unit == u.name)
                    .map(|(_, r)| *r);
                let verdict = match &u.expected {
                    None => Verdict::Pending,
                    Some(_)
                        if flags.class_flagged_on(&class.id, &format!("{suite}/{}", u.name)) =>
                    {
                        Verdict::Disagrees
                    }
                    Some(e) if latest_of_class.clone().any(|r| r.digest == e.digest) => {
                        Verdict::Agrees
                    }
                    Some(_) => Verdict::Disagrees,
                };
                let rate = median(
                    mine.iter()
                        .filter(|r| r.engine_seconds > 0.0)
                        .map(|r| r.nodes as f64 / r.engine_seconds)
                        .collect(),
                );
                if u.spec.speed
                    && let Some(r) = rate
                {
                    speed_rates.push(r);
                }
                let hosts_ran: BTreeSet<&str> = mine.iter().map(|r| r.hostname.as_str()).collect();
                cells.insert(
                    u.name.clone(),
                    MatrixCell {
                        verdict,
                        results: mine.len() as u64,
                        nodes: last.nodes,
                        per_core_nodes_per_s: rate,
                        engine_build: last.engine_build.clone(),
                        hosts: hosts_ran.into_iter().map(str::to_string).collect(),
                        last_ms: last.received_ms,
                    },
                );
            }
            class_rows.push(MatrixClass {
                id: class.id.clone(),
                cpu_model: class.cpu_model.clone(),
                arch: class.arch.clone(),
                os: class.os.clone(),
                rustc_version: class.rustc_version.clone(),
                target_features: class.target_features.clone(),
                engine_kind: class.engine_kind,
                engine_release: class.engine_release.clone(),
                first_seen_ms: class.first_seen_ms,
                flagged: flags.classes.contains_key(&class.id),
                hosts: hosts
                    .get(&class.id)
                    .map(|h| h.iter().cloned().collect())
                    .unwrap_or_default(),
                cells,
                speed_nodes_per_s: median(speed_rates),
            });
        }
        let unit_rows = units
            .iter()
            .map(|u| MatrixUnit {
                name: u.name.clone(),
                puzzle: u.spec.puzzle.clone(),
                order: u.spec.order.clone(),
                prefix_depth: u.spec.prefix_depth,
                prefix_index: u.spec.prefix_index,
                budget: u.spec.budget,
                speed: u.spec.speed,
                expected: u.expected.as_ref().map(|e| ExpectedSummary {
                    committed: e.committed,
                    solutions_count: e.solutions_count,
                    digest: e.digest.clone(),
                }),
                expected_source: u.expected_source.clone(),
            })
            .collect();
        Ok(VerificationMatrix {
            suite,
            what: MATRIX_WHAT.into(),
            units: unit_rows,
            speed_table: VerificationMatrix::speed_table_of(&class_rows),
            classes: class_rows,
        })
    }
}

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

use e2fleet_engine::UnitResult;
use e2fleet_engine::suite::{SuiteExpected, SuiteUnit, default_suite, resolve};
use e2fleet_engine::unit::result_digest;
use serde_json::{Value, json};

use std::sync::atomic::Ordering;

use super::*;
use crate::store::verification::{self as vstore, NewVerification, VerificationRow};

/// The suite stored from `engine/suite/default.json`.
pub const DEFAULT_SUITE: &str = "default";

/// Most units a submitted suite may have.
pub const MAX_SUITE_UNITS: usize = 500;

/// Deepest prefix a suite unit may name (the coordinator enumerates up to it).
pub const MAX_PREFIX_DEPTH: usize = 10;

/// A unit's verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Unit name.
    pub unit: String,
    /// `agrees`, `DISAGREES` or `pending`.
    pub verdict: &'static str,
    /// What differs.
    pub detail: String,
}

fn suite_name(name: &str) -> &str {
    if name.is_empty() { DEFAULT_SUITE } else { name }
}

/// Suite units as stored: (name, spec JSON, expected result JSON).
fn suite_rows(units: &[SuiteUnit]) -> Vec<(String, String, Option<String>)> {
    units
        .iter()
        .map(|u| {
            (
                u.name.clone(),
                spec_json(u),
                u.expected.as_ref().map(to_json),
            )
        })
        .collect()
}

fn spec_json(u: &SuiteUnit) -> String {
    let mut spec = u.clone();
    spec.expected = None;
    serde_json::to_string(&spec).expect("suite units serialise")
}

/// Latest result per (class, unit) among `rows` (oldest first).
fn latest(rows: &[VerificationRow]) -> BTreeMap<(String, String), &VerificationRow> {
    let mut out = BTreeMap::new();
    for r in rows {
        out.insert((r.class_id.clone(), r.unit.clone()), r);
    }
    out
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

impl Fleet {
    /// Stores the default suite if this database has none (once per process).
    pub(crate) async fn ensure_default_suite(&self) -> Result<(), FleetError> {
        if self.default_suite_ready.load(Ordering::Acquire) {
            return Ok(());
        }
        let units = suite_rows(&default_suite());
        let mut tx = self.store.begin().await?;
        // a coordinator upgrade may ship a different built-in suite: store it (results
        // stay and are judged against the new units)
        let stored: Vec<(String, String, Option<String>)> =
            vstore::suite_units(&mut tx, DEFAULT_SUITE)
                .await?
                .into_iter()
                .map(|u| (u.name, u.spec_json, u.expected_json))
                .collect();
        let changed = stored != units;
        if changed {
            vstore::replace_suite(&mut tx, DEFAULT_SUITE, &units, self.now()).await?;
            info!(units = units.len(), "built-in verification suite stored");
        }
        tx.commit().await?;
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
        let rows = suite_rows(&units);
        let mut tx = self.store.begin().await?;
        vstore::replace_suite(&mut tx, name, &rows, self.now()).await?;
        tx.commit().await?;
        self.invalidate_flagged();
        info!(suite = name, units = units.len(), "suite stored");
        let with_expected = units.iter().filter(|u| u.expected.is_some()).count();
        Ok((units.len() as u32, with_expected as u32))
    }

    async fn suite(&self, name: &str) -> Result<Vec<vstore::SuiteUnitRow>, FleetError> {
        self.ensure_default_suite().await?;
        let mut c = self.store.pool().acquire().await?;
        let rows = vstore::suite_units(&mut c, name).await?;
        if rows.is_empty() {
            return Err(FleetError::NotFound(format!("suite {name}")));
        }
        Ok(rows)
    }

    /// A suite's units for a worker (expected results withheld), optionally only those
    /// its hardware class has not run yet. Returns (suite, units, class id).
    pub async fn suite_for_worker(
        &self,
        worker: &WorkerRow,
        suite: &str,
        only_missing: bool,
    ) -> Result<(String, Vec<SuiteUnit>, String), FleetError> {
        let suite = suite_name(suite).to_string();
        let rows = self.suite(&suite).await?;
        let done: BTreeSet<String> = if only_missing {
            let mut c = self.store.pool().acquire().await?;
            vstore::of_suite(&mut c, &suite)
                .await?
                .into_iter()
                .filter(|r| r.class_id == worker.class_id)
                .map(|r| r.unit)
                .collect()
        } else {
            BTreeSet::new()
        };
        let mut units = Vec::new();
        for r in rows {
            if done.contains(&r.name) {
                continue;
            }
            units.push(parse_json::<SuiteUnit>(&r.spec_json, "suite unit")?);
        }
        Ok((suite, units, worker.class_id.clone()))
    }

    /// Records a worker's suite results under its hardware class, fixes expected results
    /// that two classes now agree on, and judges each result.
    pub async fn submit_verification(
        &self,
        worker: &WorkerRow,
        suite: &str,
        results: Vec<(String, UnitResult, f64, String)>,
    ) -> Result<(String, Vec<Verdict>, bool), FleetError> {
        let suite = suite_name(suite).to_string();
        let rows = self.suite(&suite).await?;
        let by_name: BTreeMap<&str, &vstore::SuiteUnitRow> =
            rows.iter().map(|r| (r.name.as_str(), r)).collect();
        if results.is_empty() || results.len() > MAX_SUITE_UNITS {
            return Err(FleetError::InvalidArgument(format!(
                "1..={MAX_SUITE_UNITS} results per submission"
            )));
        }
        let now = self.now();
        let mut tx = self.store.begin().await?;
        for (unit, result, seconds, build) in &results {
            let row = by_name.get(unit.as_str()).ok_or_else(|| {
                FleetError::InvalidArgument(format!("suite {suite} has no unit {unit:?}"))
            })?;
            let spec: SuiteUnit = parse_json(&row.spec_json, "suite unit")?;
            let depths = resolve(&spec)
                .map_err(|e| FleetError::InvalidArgument(format!("unit {unit}: {e}")))?
                .plan
                .len();
            if result.nodes_by_depth.len() != depths
                || result.nodes_by_depth.iter().sum::<u64>() != result.committed
                || !seconds.is_finite()
                || *seconds < 0.0
            {
                return Err(FleetError::InvalidArgument(format!(
                    "unit {unit}: malformed result (depths, committed sum or seconds)"
                )));
            }
            vstore::insert(
                &mut tx,
                &NewVerification {
                    suite: &suite,
                    unit,
                    class_id: &worker.class_id,
                    worker_id: &worker.id,
                    hostname: &worker.hostname,
                    engine_build: build,
                    digest: &result_digest(result),
                    result_json: &to_json(result),
                    nodes: result.committed as i64,
                    engine_seconds: *seconds,
                    received_ms: now,
                },
            )
            .await?;
        }
        // expected results fixed by agreement: the first digest two classes share
        let all = vstore::of_suite(&mut tx, &suite).await?;
        let mut fixed: BTreeMap<String, SuiteExpected> = BTreeMap::new();
        for r in &rows {
            if let Some(e) = &r.expected_json {
                fixed.insert(r.name.clone(), parse_json(e, "expected result")?);
                continue;
            }
            let mut classes: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
            let mut order: Vec<&str> = Vec::new();
            for v in all.iter().filter(|v| v.unit == r.name) {
                if !classes.contains_key(v.digest.as_str()) {
                    order.push(&v.digest);
                }
                classes.entry(&v.digest).or_default().insert(&v.class_id);
            }
            if let Some(digest) = order.into_iter().find(|d| classes[d].len() >= 2) {
                let json = vstore::result_json_with_digest(&mut tx, &suite, &r.name, digest)
                    .await?
                    .expect("a result with this digest exists");
                let result: UnitResult = parse_json(&json, "result")?;
                let expected = SuiteExpected::of(&result);
                let agreed: Vec<&str> = classes[digest].iter().copied().collect();
                let source = format!("agreement of classes {}", agreed.join(", "));
                vstore::set_expected(&mut tx, &suite, &r.name, &to_json(&expected), &source)
                    .await?;
                info!(suite = %suite, unit = %r.name, %source, "expected result fixed");
                fixed.insert(r.name.clone(), expected);
            }
        }
        tx.commit().await?;
        self.invalidate_flagged();
        let verdicts = results
            .iter()
            .map(|(unit, result, _, _)| match fixed.get(unit) {
                None => Verdict {
                    unit: unit.clone(),
                    verdict: "pending",
                    detail: "no expected result yet: fixed when two hardware classes agree".into(),
                },
                Some(e) => match e.disagreement(result) {
                    None => Verdict {
                        unit: unit.clone(),
                        verdict: "agrees",
                        detail: String::new(),
                    },
                    Some(d) => Verdict {
                        unit: unit.clone(),
                        verdict: "DISAGREES",
                        detail: d,
                    },
                },
            })
            .collect::<Vec<_>>();
        let flagged = self.flagged_reason(&worker.class_id).await?.is_some();
        if flagged {
            warn!(class_id = %worker.class_id, hostname = %worker.hostname, "hardware class disagrees with a verification unit: no real work for it");
        }
        Ok((worker.class_id.clone(), verdicts, flagged))
    }

    fn invalidate_flagged(&self) {
        *self.flagged.lock().expect("flagged cache") = None;
    }

    /// Why a hardware class gets no real work, if it does not: its latest result on some
    /// suite unit differs from the unit's exact result.
    pub async fn flagged_reason(&self, class_id: &str) -> Result<Option<String>, FleetError> {
        if class_id.is_empty() {
            return Ok(None);
        }
        if let Some(map) = self.flagged.lock().expect("flagged cache").as_ref() {
            return Ok(map.get(class_id).cloned());
        }
        let mut c = self.store.pool().acquire().await?;
        let mut map = HashMap::new();
        for suite in vstore::suite_names(&mut c).await? {
            let expected: BTreeMap<String, String> = vstore::suite_units(&mut c, &suite)
                .await?
                .into_iter()
                .filter_map(|u| {
                    let e: SuiteExpected =
                        serde_json::from_str(u.expected_json.as_deref()?).ok()?;
                    Some((u.name, e.digest))
                })
                .collect();
            for ((class, unit), r) in latest(&vstore::of_suite(&mut c, &suite).await?) {
                if expected.get(&unit).is_some_and(|d| *d != r.digest) {
                    map.entry(class).or_insert_with(|| {
                        format!("its result on verification unit {suite}/{unit} differs from the exact result")
                    });
                }
            }
        }
        let answer = map.get(class_id).cloned();
        *self.flagged.lock().expect("flagged cache") = Some(map);
        Ok(answer)
    }

    /// The conformance matrix of a suite: hardware classes x units, each cell agrees /
    /// DISAGREES / pending / not run with the per-core rate; flagged classes; the speed
    /// table (per-core placements/s per class on the suite's speed units).
    pub async fn verification_matrix(&self, suite: &str) -> Result<Value, FleetError> {
        let suite = suite_name(suite).to_string();
        let units = self.suite(&suite).await?;
        let mut c = self.store.pool().acquire().await?;
        let classes = vstore::classes_of_suite(&mut c, &suite).await?;
        let rows = vstore::of_suite(&mut c, &suite).await?;
        let hosts = {
            let mut m: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            for w in workers::list(&mut c).await? {
                m.entry(w.class_id).or_default().insert(w.hostname);
            }
            m
        };
        drop(c);
        let specs: Vec<(SuiteUnit, Option<SuiteExpected>, String)> = units
            .iter()
            .map(|u| {
                Ok((
                    parse_json::<SuiteUnit>(&u.spec_json, "suite unit")?,
                    match &u.expected_json {
                        Some(e) => Some(parse_json::<SuiteExpected>(e, "expected")?),
                        None => None,
                    },
                    u.expected_source.clone(),
                ))
            })
            .collect::<Result<_, StoreError>>()?;
        let latest = latest(&rows);
        let mut class_docs = Vec::new();
        let mut speed_table = Vec::new();
        for class in &classes {
            let mut cells = serde_json::Map::new();
            let mut flagged = false;
            let mut speed_rates = Vec::new();
            for (spec, expected, _) in &specs {
                let mine: Vec<&VerificationRow> = rows
                    .iter()
                    .filter(|r| r.class_id == class.id && r.unit == spec.name)
                    .collect();
                let Some(last) = latest.get(&(class.id.clone(), spec.name.clone())) else {
                    cells.insert(spec.name.clone(), json!({"verdict": "not run"}));
                    continue;
                };
                let verdict = match expected {
                    None => "pending",
                    Some(e) if e.digest == last.digest => "agrees",
                    Some(_) => "DISAGREES",
                };
                flagged |= verdict == "DISAGREES";
                let rate = median(
                    mine.iter()
                        .filter(|r| r.engine_seconds > 0.0)
                        .map(|r| r.nodes as f64 / r.engine_seconds)
                        .collect(),
                );
                if spec.speed
                    && let Some(r) = rate
                {
                    speed_rates.push(r);
                }
                let hosts_ran: BTreeSet<&str> = mine.iter().map(|r| r.hostname.as_str()).collect();
                cells.insert(
                    spec.name.clone(),
                    json!({
                        "verdict": verdict,
                        "results": mine.len(),
                        "nodes": last.nodes,
                        "per_core_nodes_per_s": rate,
                        "engine_build": last.engine_build,
                        "hosts": hosts_ran,
                        "last_ms": last.received_ms,
                    }),
                );
            }
            let speed = median(speed_rates);
            speed_table.push(json!({
                "class_id": class.id,
                "cpu_model": class.cpu_model,
                "arch": class.arch,
                "rustc_version": class.rustc_version,
                "engine_kind": class.engine_kind,
                "engine_release": class.engine_release,
                "per_core_nodes_per_s": speed,
            }));
            let mut doc = serde_json::to_value(class).expect("class serialises");
            doc["flagged"] = json!(flagged);
            doc["hosts"] = json!(hosts.get(&class.id).cloned().unwrap_or_default());
            doc["cells"] = Value::Object(cells);
            doc["speed_nodes_per_s"] = json!(speed);
            class_docs.push(doc);
        }
        speed_table.sort_by(|a, b| {
            let x = a["per_core_nodes_per_s"].as_f64().unwrap_or(-1.0);
            let y = b["per_core_nodes_per_s"].as_f64().unwrap_or(-1.0);
            y.total_cmp(&x)
        });
        let unit_docs: Vec<Value> = specs
            .iter()
            .map(|(spec, expected, source)| {
                json!({
                    "name": spec.name,
                    "puzzle": spec.puzzle,
                    "order": spec.order,
                    "prefix_depth": spec.prefix_depth,
                    "prefix_index": spec.prefix_index,
                    "budget": spec.budget,
                    "speed": spec.speed,
                    "expected": expected.as_ref().map(|e| json!({"committed": e.committed, "solutions_count": e.solutions_count, "digest": e.digest})),
                    "expected_source": source,
                })
            })
            .collect();
        Ok(json!({
            "suite": suite,
            "what": "rows: hardware classes (CPU model, arch, OS, rustc, CPU features, engine kind and release); columns: suite units; a cell is the class's latest result: agrees / DISAGREES / pending (no expected result yet) / not run, with its per-core rate",
            "units": unit_docs,
            "classes": class_docs,
            "speed_table": speed_table,
        }))
    }
}

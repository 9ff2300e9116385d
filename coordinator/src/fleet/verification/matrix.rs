//! The conformance matrix: hardware classes x suite units.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use e2fleet_proto::api::Verdict;
use e2fleet_proto::api::status::{
    ExpectedSummary, MATRIX_WHAT, MatrixCell, MatrixClass, MatrixUnit, VerificationMatrix, median,
};

use super::flags::{Flags, latest};
use super::suite_name;
use crate::fleet::{Fleet, FleetError};
use crate::store::VerificationRecord;

impl Fleet {
    /// The conformance matrix of a suite: hardware classes x units, each cell agrees /
    /// DISAGREES / pending / not run with the per-core rate; flagged classes; the speed
    /// table (per-core nodes/s per class on the suite's speed units).
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

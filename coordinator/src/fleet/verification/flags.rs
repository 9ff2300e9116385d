//! Flags: which hardware classes and identities get no real work because a verification
//! result of theirs differs from an exact one.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use e2fleet_proto::api::{AccountId, WorkerId};

use crate::fleet::FleetError;
use crate::store::{VerificationRecord, WorkerRecord};

/// Latest result per (class, identity, unit) among `rows` (oldest first), leaving out
/// those from before their class was last unflagged.
pub(super) fn latest<'r>(
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
    pub(super) classes: HashMap<String, BTreeMap<String, String>>,
    /// (identity, class) -> why.
    identities: HashMap<(WorkerId, String), String>,
}

impl Flags {
    /// Reads every suite's results.
    pub(super) fn compute(tx: &mut dyn crate::store::Tx) -> Result<Flags, FleetError> {
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
    pub(super) fn reason(&self, worker: &WorkerRecord) -> Option<String> {
        if let Some(units) = self.classes.get(&worker.class_id) {
            return units.values().next().cloned();
        }
        self.identities
            .get(&(worker.id, worker.class_id.clone()))
            .cloned()
    }

    /// Whether a class is flagged on a unit (`suite/unit`).
    pub(super) fn class_flagged_on(&self, class: &str, unit: &str) -> bool {
        self.classes
            .get(class)
            .is_some_and(|u| u.contains_key(unit))
    }
}

//! Expected results from agreement: a suite unit submitted without one gets the first
//! exact result two independent classes share.

use std::collections::{BTreeMap, BTreeSet};

use e2fleet_engine::suite::SuiteExpected;
use e2fleet_proto::api::AccountId;

use crate::fleet::FleetError;

/// The exact results of a suite's units: those known, and those two independent classes
/// now agree on (to store: unit, expected result, where it came from) — the first digest
/// two classes share, reported by two accounts (or only by the operator): one volunteer's
/// two fake classes fix nothing.
#[allow(clippy::type_complexity)]
pub(super) fn agreements(
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

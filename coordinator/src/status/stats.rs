//! The public stats page's read model: credit per volunteer account, as distributed.net
//! and BOINC projects show it. A result earns credit when it counts — accepted, on a
//! trusted account's word or confirmed by another party, or agreeing with the accepted
//! one — and loses it if it is later found wrong or voided (`fleet/quorum.rs`); what
//! another party confirmed is shown beside it. The operator's own machines are not
//! ranked. Teams are ranked too, each by its accounts' credit (an account that changes
//! team takes its credit along, so a team's figures are always its accounts' sum).

use std::collections::HashMap;

use e2fleet_proto::api::{AccountId, AccountKind, TeamId};
use serde::Serialize;

use crate::fleet::{Fleet, FleetError};
use crate::store::DAY_MS;

/// Days of history each account carries.
pub const STATS_DAYS: i64 = 30;

/// One day of an account's credit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DayCredit {
    /// Days since the epoch (UTC).
    pub day: i64,
    /// Credited nodes.
    pub nodes: u64,
    /// Credited results.
    pub results: u64,
}

/// One account on the stats page.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AccountStats {
    /// 1 = most credit.
    pub rank: usize,
    /// The account.
    pub id: AccountId,
    /// Credited nodes: its results' that count, net of any later found wrong.
    pub credit_nodes: u64,
    /// Credited results.
    pub credit_results: u64,
    /// Of the credited work, nodes another party confirmed, ever.
    pub confirmed_nodes: u64,
    /// Results another party confirmed, ever.
    pub confirmed_results: u64,
    /// Its results count alone now.
    pub trusted: bool,
    /// Revoked or quarantined: earns nothing now.
    pub inactive: bool,
    /// First and last day with credit (days since the epoch, UTC).
    pub first_day: Option<i64>,
    /// Last day with credit.
    pub last_day: Option<i64>,
    /// Credit per day over the last [`STATS_DAYS`] days, oldest first, days without any
    /// left out.
    pub days: Vec<DayCredit>,
    /// Its team, if it is in one.
    pub team: Option<TeamId>,
}

/// One team on the stats page: its accounts' figures added up.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TeamStats {
    /// 1 = most credit.
    pub rank: usize,
    /// The team.
    pub id: TeamId,
    /// Its volunteer accounts.
    pub accounts: u64,
    /// Its accounts' credited nodes.
    pub credit_nodes: u64,
    /// Their credited results.
    pub credit_results: u64,
    /// Of the credited work, nodes another party confirmed.
    pub confirmed_nodes: u64,
    /// Its accounts' credit per day over the last [`STATS_DAYS`] days, oldest first.
    pub days: Vec<DayCredit>,
}

/// The stats page.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Stats {
    /// Today (days since the epoch, UTC).
    pub today: i64,
    /// Volunteer accounts, most credit first.
    pub accounts: Vec<AccountStats>,
    /// Teams, most credit first.
    pub teams: Vec<TeamStats>,
    /// Credited nodes of all volunteer accounts per day, last [`STATS_DAYS`] days.
    pub days: Vec<DayCredit>,
}

impl Fleet {
    /// Credit per volunteer account: totals, first and last day, the last 30 days.
    pub async fn stats(&self) -> Result<Stats, FleetError> {
        let today = self.now().div_euclid(DAY_MS);
        let since = today - STATS_DAYS + 1;
        let (accounts, days, spans) = self
            .store
            .read(move |tx| {
                Ok::<_, FleetError>((
                    tx.list_accounts()?,
                    tx.credit_days(since)?,
                    tx.credit_spans()?,
                ))
            })
            .await?;
        let spans: HashMap<AccountId, (i64, i64)> =
            spans.into_iter().map(|(a, f, l)| (a, (f, l))).collect();
        let mut per_account: HashMap<AccountId, Vec<DayCredit>> = HashMap::new();
        for d in days {
            per_account.entry(d.account).or_default().push(DayCredit {
                day: d.day,
                nodes: d.nodes,
                results: d.results,
            });
        }
        let total = by_day(per_account.values().flatten());
        let mut ranked: Vec<AccountStats> = accounts
            .into_iter()
            .filter(|a| a.kind == AccountKind::Volunteer)
            .map(|a| AccountStats {
                rank: 0,
                trusted: self.trusted(&a),
                inactive: a.revoked_ms.is_some() || a.quarantined,
                first_day: spans.get(&a.id).map(|s| s.0),
                last_day: spans.get(&a.id).map(|s| s.1),
                days: per_account.remove(&a.id).unwrap_or_default(),
                credit_nodes: a.credit_nodes,
                credit_results: a.credit_results,
                confirmed_nodes: a.confirmed_nodes,
                confirmed_results: a.confirmed_results,
                id: a.id,
                team: a.team,
            })
            .collect();
        ranked.sort_by(|a, b| {
            b.credit_nodes
                .cmp(&a.credit_nodes)
                .then_with(|| a.id.cmp(&b.id))
        });
        for (i, a) in ranked.iter_mut().enumerate() {
            a.rank = i + 1;
        }
        Ok(Stats {
            today,
            teams: teams_of(&ranked),
            accounts: ranked,
            days: total,
        })
    }
}

/// Credit per day added up over `days`, oldest first.
fn by_day<'a>(days: impl IntoIterator<Item = &'a DayCredit>) -> Vec<DayCredit> {
    let mut sum: std::collections::BTreeMap<i64, DayCredit> = Default::default();
    for d in days {
        let e = sum.entry(d.day).or_insert(DayCredit {
            day: d.day,
            nodes: 0,
            results: 0,
        });
        e.nodes += d.nodes;
        e.results += d.results;
    }
    sum.into_values().collect()
}

/// The teams of `accounts`, most credit first: each its accounts' figures added up.
fn teams_of(accounts: &[AccountStats]) -> Vec<TeamStats> {
    let mut teams: std::collections::BTreeMap<&TeamId, (TeamStats, Vec<&DayCredit>)> =
        Default::default();
    for a in accounts {
        let Some(id) = &a.team else { continue };
        let (t, days) = teams.entry(id).or_insert_with(|| {
            let t = TeamStats {
                rank: 0,
                id: id.clone(),
                accounts: 0,
                credit_nodes: 0,
                credit_results: 0,
                confirmed_nodes: 0,
                days: Vec::new(),
            };
            (t, Vec::new())
        });
        t.accounts += 1;
        t.credit_nodes += a.credit_nodes;
        t.credit_results += a.credit_results;
        t.confirmed_nodes += a.confirmed_nodes;
        days.extend(&a.days);
    }
    let mut ranked: Vec<TeamStats> = teams
        .into_values()
        .map(|(t, days)| TeamStats {
            days: by_day(days),
            ..t
        })
        .collect();
    // ties by name (the map's order, kept by a stable sort)
    ranked.sort_by_key(|t| std::cmp::Reverse(t.credit_nodes));
    for (i, t) in ranked.iter_mut().enumerate() {
        t.rank = i + 1;
    }
    ranked
}

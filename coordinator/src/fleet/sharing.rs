//! Several jobs on one fleet: which job a lease call serves.
//!
//! Jobs of a higher priority are served first; among running jobs of equal priority each
//! gets engines in proportion to its share, measured by the leases it has out (an engine
//! holds about two, so leases out are the fleet's engines at work). A lease call's batch
//! is split across the jobs of one priority by water-filling: each job is topped up
//! towards `share / total share` of (leases out + this batch), the most behind first. What
//! a job cannot use (no unit this worker may run) goes to the others, then to the next
//! priority. Paused jobs get nothing; their leases out finish.
//!
//! Leases out per job are counted from the store at most every
//! [`policy::SHARES_EVERY_MS`] and kept current in between by the grants made here (a
//! lease that ends is seen at the next count).

use std::collections::HashMap;
use std::sync::Mutex;

use e2fleet_proto::api::{JobId, ScheduleChange};

use super::policy::{self, MAX_SHARE};
use super::{Fleet, FleetError};
use crate::store::{Schedule, Tx};

/// What one lease call should take: per priority (highest first), each job's part.
pub(crate) type LeasePlan = Vec<Vec<(JobId, usize)>>;

/// The running jobs and their leases out, as last counted.
#[derive(Default)]
pub(crate) struct Shares(Mutex<Option<Snapshot>>);

struct Snapshot {
    at_ms: i64,
    /// Running jobs, oldest first.
    jobs: Vec<(JobId, Schedule)>,
    out: HashMap<JobId, f64>,
}

impl Fleet {
    /// How many units of each job a lease call for `max` units should take, in the order
    /// to ask: `None` when at most one job is running (any open unit will do).
    pub(crate) fn lease_plan(
        &self,
        tx: &mut dyn Tx,
        now: i64,
        max: usize,
    ) -> Result<Option<LeasePlan>, FleetError> {
        let mut guard = self.shares.0.lock().expect("shares");
        let stale = guard
            .as_ref()
            .is_none_or(|s| (now - s.at_ms).abs() >= policy::SHARES_EVERY_MS);
        if stale {
            let jobs = tx.running_schedules()?;
            let out = if jobs.len() > 1 {
                tx.active_leases_by_job()?
                    .into_iter()
                    .map(|(j, n)| (j, n as f64))
                    .collect()
            } else {
                HashMap::new()
            };
            *guard = Some(Snapshot {
                at_ms: now,
                jobs,
                out,
            });
        }
        let snap = guard.as_ref().expect("just set");
        let live: Vec<&(JobId, Schedule)> = snap.jobs.iter().filter(|(_, s)| !s.paused).collect();
        if snap.jobs.len() <= 1 && live.len() == snap.jobs.len() {
            return Ok(None);
        }
        // priority groups, highest first
        let mut priorities: Vec<i32> = live.iter().map(|(_, s)| s.priority).collect();
        priorities.sort_unstable_by(|a, b| b.cmp(a));
        priorities.dedup();
        let plan = priorities
            .into_iter()
            .map(|p| {
                let group: Vec<(JobId, f64, f64)> = live
                    .iter()
                    .filter(|(_, s)| s.priority == p)
                    .map(|(j, s)| (*j, s.share, snap.out.get(j).copied().unwrap_or(0.0)))
                    .collect();
                water_fill(&group, max)
            })
            .collect();
        Ok(Some(plan))
    }

    /// Units of `job` were just leased: counted as out until the next count.
    pub(crate) fn shares_granted(&self, job: JobId, n: usize) {
        if let Some(s) = self.shares.0.lock().expect("shares").as_mut() {
            *s.out.entry(job).or_default() += n as f64;
        }
    }

    /// Jobs or schedules changed: count again at the next lease call.
    pub(crate) fn shares_changed(&self) {
        *self.shares.0.lock().expect("shares") = None;
    }

    /// Changes how a job shares the fleet (priority, share, pause).
    pub async fn set_schedule(&self, job: JobId, change: ScheduleChange) -> Result<(), FleetError> {
        if let Some(share) = change.share
            && !(share.is_finite() && share > 0.0 && share <= MAX_SHARE)
        {
            return Err(FleetError::InvalidArgument(format!(
                "a share must be a number above 0 and at most {MAX_SHARE}, not {share}"
            )));
        }
        self.store
            .write(move |tx| {
                let record = tx
                    .job(job)?
                    .ok_or_else(|| FleetError::NotFound(format!("job {job}")))?;
                let old = record.schedule;
                let new = Schedule {
                    priority: change.priority.unwrap_or(old.priority),
                    share: change.share.unwrap_or(old.share),
                    paused: change.paused.unwrap_or(old.paused),
                };
                tx.set_schedule(job, &new)?;
                Ok::<(), FleetError>(())
            })
            .await?;
        self.shares_changed();
        Ok(())
    }
}

/// Splits `max` units across `group` = (job, share, leases out): each job is brought
/// towards its share of (all leases out + `max`), the furthest behind first; every job
/// appears (with what it should take first), so a job without units leaves its part to
/// the next ones.
fn water_fill(group: &[(JobId, f64, f64)], max: usize) -> Vec<(JobId, usize)> {
    let total_share: f64 = group.iter().map(|g| g.1).sum();
    let total_out: f64 = group.iter().map(|g| g.2).sum::<f64>() + max as f64;
    let mut wants: Vec<(JobId, f64)> = group
        .iter()
        .map(|&(j, share, out)| (j, total_out * share / total_share - out))
        .collect();
    wants.sort_by(|a, b| b.1.total_cmp(&a.1));
    let positive: f64 = wants.iter().map(|w| w.1.max(0.0)).sum();
    let mut left = max;
    wants
        .into_iter()
        .map(|(j, want)| {
            let n = if positive > 0.0 {
                ((want.max(0.0) / positive) * max as f64).ceil() as usize
            } else {
                0
            };
            let n = n.min(left);
            left -= n;
            (j, n)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_goes_to_the_jobs_furthest_below_their_share() {
        let (a, b) = (JobId::random(), JobId::random());
        // equal shares, nothing out: half each
        let plan = water_fill(&[(a, 1.0, 0.0), (b, 1.0, 0.0)], 8);
        assert_eq!(plan.iter().map(|p| p.1).sum::<usize>(), 8);
        assert!(plan.iter().all(|p| p.1 == 4), "{plan:?}");
        // share 3:1 with b already holding 6: everything to a
        let plan = water_fill(&[(a, 3.0, 0.0), (b, 1.0, 6.0)], 4);
        assert_eq!(plan[0], (a, 4));
        assert_eq!(plan[1], (b, 0));
    }
}

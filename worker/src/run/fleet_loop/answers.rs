//! What comes back to the loop: an engine's outcome (journalled, then queued to send) and
//! each call's answer (leases, report outcomes, heartbeat instructions, releases,
//! prepared engines), and failures that back off.

use std::time::{Duration, Instant};

use anyhow::Result;
use e2fleet_proto::api::{LeaseId, ReportOutcome, ReportStatus};
use tonic::{Code, Status};
use tracing::{debug, error, info, warn};

use super::{Answer, FleetLoop};
use crate::api::is_transient;
use crate::run::executor::{Executor, Outcome, Yielded};
use crate::run::jobs::{JobEngine, Prepared};
use crate::run::journal::Entry;

impl FleetLoop {
    /// A finished unit: journalled (fsync'd) first, then queued for sending.
    pub(super) fn collect(&mut self, outcome: Outcome) -> Result<()> {
        match outcome {
            Outcome::Done(mut entry) => {
                if self.config.fault_misreport
                    && let Some(n) = entry.result.nodes_by_depth.iter_mut().find(|n| **n > 0)
                {
                    *n += 1;
                    entry.result.committed += 1;
                }
                self.pace.record(entry.engine_seconds);
                self.journal.write(&entry)?;
                self.outbox.push_back(*entry);
            }
            Outcome::Dropped { lease_id } => {
                debug!(%lease_id, "a dropped unit's run ended");
            }
            Outcome::Failed { lease_id, error } => {
                warn!(%lease_id, %error, "unit failed; its lease will expire and be re-run");
            }
        }
        Ok(())
    }

    /// Handles a call's answer.
    pub(super) async fn answer(&mut self, answer: Answer, executor: &Executor) -> Result<()> {
        match answer {
            Answer::Leased {
                took,
                generation,
                answer,
            } => {
                self.leases_out.answered();
                let mut retry_after = Duration::ZERO;
                match answer {
                    Ok((leases, wait)) => {
                        self.conn.ok(took);
                        if leases.is_empty() {
                            // new units often come soon (a continuation when a result
                            // lands): ask again quickly at first, then less and less
                            // often, up to what the coordinator says
                            self.no_work = self.no_work.saturating_add(1);
                            let soon = Duration::from_millis(100 << self.no_work.min(8));
                            retry_after = soon
                                .min(wait)
                                .clamp(Duration::from_millis(100), Duration::from_secs(30));
                        } else {
                            self.no_work = 0;
                        }
                        self.units_taken += leases.len() as u64;
                        if self.stopping.is_some() {
                            // an answer that crossed the stop: hand these back at once
                            self.release(leases.into_iter().map(|l| l.lease_id).collect());
                        } else {
                            self.waiting.extend(leases);
                        }
                    }
                    // asked too often (many short units): not a failure, just ask later
                    Err(s) if s.code() == Code::ResourceExhausted => {
                        debug!(
                            message = s.message(),
                            "lease calls slowed down by the coordinator"
                        );
                        retry_after = Duration::from_millis(250);
                    }
                    Err(s) => self.failed("lease", &s, took, generation).await,
                }
                self.lease_after = Instant::now() + retry_after;
            }
            Answer::Reported {
                took,
                generation,
                entry,
                answer,
            } => {
                if self.sending.remove(&entry.lease_id).is_none() {
                    // the other copy of a hedged report was answered first
                    return Ok(());
                }
                match answer {
                    Ok(outcome) => {
                        self.conn.ok(took);
                        self.reported(&entry, &outcome)?;
                    }
                    Err(s) if is_transient(&s) || s.code() == Code::Unauthenticated => {
                        self.failed("report", &s, took, generation).await;
                        self.outbox.push_front(*entry);
                    }
                    Err(s) => {
                        error!(lease_id = %entry.lease_id, code = ?s.code(), message = s.message(), "the coordinator refused a result; kept in journal/rejected");
                        self.journal.reject(entry.lease_id)?;
                    }
                }
            }
            Answer::Heartbeat {
                took,
                generation,
                answer,
            } => {
                self.heartbeats_out.answered();
                match answer {
                    Ok(reply) => {
                        self.conn.ok(took);
                        self.last_heartbeat = Instant::now();
                        self.drop_leases(&reply.drop, executor)?;
                        self.yield_leases(&reply.yield_now, executor);
                        self.updater.offered(&reply.offered_release, &self.conn.api);
                    }
                    Err(s) => {
                        self.heartbeat_now = true;
                        self.failed("heartbeat", &s, took, generation).await;
                    }
                }
            }
            Answer::Released { answer } => {
                self.releases_out = self.releases_out.saturating_sub(1);
                match answer {
                    Ok(n) => debug!(released = n, "leases released"),
                    Err(s) => {
                        warn!(code = ?s.code(), "could not release unstarted leases; they will expire")
                    }
                }
            }
            Answer::Prepared { job_id, prepared } => {
                self.preparing.remove(&job_id);
                match prepared {
                    Prepared::Ready(engine) => {
                        self.jobs.insert(job_id, JobEngine::Ready(engine));
                    }
                    Prepared::Never(why) => {
                        self.jobs.insert(job_id, JobEngine::Broken(why));
                    }
                    // tried again at the next turn the coordinator is up
                    Prepared::Later(s) => {
                        let generation = self.conn.generation;
                        self.failed("job spec", &s, Duration::ZERO, generation)
                            .await;
                    }
                }
            }
        }
        Ok(())
    }

    /// A call failed: back off; an unknown token (the coordinator lost this identity, or
    /// replaced its token) registers again, once for all the calls that carried the old
    /// token.
    pub(super) async fn failed(&mut self, what: &str, s: &Status, took: Duration, generation: u64) {
        self.conn.fail(what, s, Instant::now() - took);
        if s.code() == Code::Unauthenticated && generation == self.conn.generation {
            let _ = self.conn.register().await;
        }
    }

    /// A report the coordinator answered: acknowledged, out of the journal.
    pub(super) fn reported(&mut self, entry: &Entry, outcome: &ReportOutcome) -> Result<()> {
        match outcome.status {
            ReportStatus::Late => {
                info!(lease_id = %entry.lease_id, unit_id = %entry.unit_id, detail = %outcome.detail, "result too late to count (no fault of this worker)");
            }
            status => {
                info!(lease_id = %entry.lease_id, unit_id = %entry.unit_id, committed = entry.result.committed, %status, "result reported");
            }
        }
        self.journal.remove(entry.lease_id)?;
        self.units_reported += 1;
        Ok(())
    }

    /// Leases the coordinator says are lost, decided elsewhere or cancelled: their runs
    /// stop without a report, and finished results on them are not sent.
    pub(super) fn drop_leases(&mut self, leases: &[LeaseId], executor: &Executor) -> Result<()> {
        for id in leases {
            let held = executor.abandon(*id);
            let waited = self.waiting.len();
            self.waiting.retain(|l| l.lease_id != *id);
            let unsent = self.outbox.len();
            self.outbox.retain(|e| e.lease_id != *id);
            if self.outbox.len() < unsent {
                self.journal.remove(*id)?;
            }
            if held || self.waiting.len() < waited || self.outbox.len() < unsent {
                info!(lease_id = %id, "lease dropped: the coordinator says its unit went elsewhere or needs no more runs");
            }
        }
        Ok(())
    }

    /// Leases the coordinator wants split for idle threads elsewhere: a running unit
    /// stops at its exact cursor and reports it (the coordinator counts the run and
    /// splits the rest); a unit not started yet goes back whole.
    pub(super) fn yield_leases(&mut self, leases: &[LeaseId], executor: &Executor) {
        let mut back = Vec::new();
        for id in leases {
            match executor.yield_lease(*id) {
                Yielded::Stopping => {
                    info!(lease_id = %id, "unit stopped at its cursor: the coordinator splits the rest for idle threads")
                }
                Yielded::Dequeued => back.push(*id),
                Yielded::NotHeld => {
                    let waited = self.waiting.len();
                    self.waiting.retain(|l| l.lease_id != *id);
                    if self.waiting.len() < waited {
                        back.push(*id);
                    }
                }
            }
        }
        if !back.is_empty() {
            self.release(back);
        }
    }
}

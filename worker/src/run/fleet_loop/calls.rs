//! The calls a turn starts without waiting for them: reports of finished results (with a
//! hedged second copy), the heartbeat, the spec and engine of a job whose leases wait, a
//! lease call when the queue runs low; and the engines fed from the waiting leases.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use e2fleet_proto::api::{Heartbeat, JobId};
use tracing::{debug, warn};

use super::{
    Answer, FleetLoop, IDLE_HEARTBEAT, MAX_LEASES_PER_CALL, MAX_REPORTS_IN_FLIGHT,
    MIN_REPORTS_IN_FLIGHT, Sending,
};
use crate::run::executor::{Executor, Task};
use crate::run::jobs::{JobEngine, prepare_job};
use crate::run::journal::Entry;
use crate::run::pacing::{Idle, queue_target};

impl FleetLoop {
    /// Reports in flight at once: enough for the pace results come at over this link.
    pub(super) fn reports_in_flight(&self) -> usize {
        let per_second = match self.pace.unit_seconds() {
            Some(secs) if secs > 0.0 => self.config.threads as f64 / secs,
            _ => 0.0,
        };
        let rtt = self.conn.round_trip().unwrap_or_default().as_secs_f64();
        ((2.0 * per_second * rtt).ceil() as usize)
            .clamp(MIN_REPORTS_IN_FLIGHT, MAX_REPORTS_IN_FLIGHT)
    }

    /// Sends journalled results, several at once, and a second copy of any report out
    /// for longer than a hedge.
    pub(super) fn send_reports(&mut self) {
        if !self.conn.up() {
            return;
        }
        let hedge = self.hedge_after();
        let slow: Vec<Entry> = self
            .sending
            .values_mut()
            .filter(|s| !s.hedged && s.sent.elapsed() >= hedge)
            .map(|s| {
                s.hedged = true;
                s.entry.clone()
            })
            .collect();
        for entry in slow {
            debug!(lease_id = %entry.lease_id, "a report is slow to be answered; sending it again");
            self.spawn_report(entry);
        }
        let most = self.reports_in_flight();
        while self.sending.len() < most {
            let Some(entry) = self.outbox.pop_front() else {
                break;
            };
            self.sending.insert(
                entry.lease_id,
                Sending {
                    sent: Instant::now(),
                    hedged: false,
                    entry: entry.clone(),
                },
            );
            self.spawn_report(entry);
        }
    }

    pub(super) fn spawn_report(&mut self, entry: Entry) {
        let mut api = self.conn.api.clone();
        let generation = self.conn.generation;
        self.calls.spawn(async move {
            let sent = Instant::now();
            let answer = api.report(&entry.report()).await;
            Answer::Reported {
                took: sent.elapsed(),
                generation,
                entry: Box::new(entry),
                answer,
            }
        });
    }

    /// Heartbeats well within the lease, every [`IDLE_HEARTBEAT`] while a thread is idle
    /// (and at once after a pause change or a gap):
    /// every lease held, running, queued, waiting for its engine, or finished and not
    /// yet acknowledged (the coordinator keeps those alive, or revives them).
    pub(super) fn send_heartbeat(&mut self, executor: &Executor) {
        // an engine thread without a unit heartbeats more often: the coordinator may be
        // about to split a unit this worker runs for it (a heartbeat is how it hears)
        let mut every = (self.conn.lease / 3).max(Duration::from_secs(1));
        if executor.idle_threads() > 0 {
            every = every.min(IDLE_HEARTBEAT);
        }
        if !self.heartbeats_out.may_send(self.hedge_after())
            || !self.conn.up()
            || !(self.heartbeat_now || self.last_heartbeat.elapsed() >= every)
        {
            return;
        }
        let mut leases = executor.held();
        leases.extend(self.waiting.iter().map(|l| (l.lease_id, 0)));
        leases.extend(self.outbox.iter().map(|e| (e.lease_id, e.result.committed)));
        let beat = Heartbeat {
            leases,
            per_core_rate: executor.per_core_rate(),
            threads: if self.pause.is_some() {
                0
            } else {
                executor.threads() as u32
            },
            paused: self.pause.map(|r| r.to_string()).unwrap_or_default(),
            network_wait: self.idle.take(Instant::now(), executor.threads()),
            round_trip_ms: self
                .conn
                .round_trip()
                .map_or(0.0, |d| d.as_secs_f64() * 1000.0),
            platform: e2fleet_proto::release::this_platform(),
        };
        self.heartbeats_out.sent();
        self.heartbeat_now = false;
        let mut api = self.conn.api.clone();
        let generation = self.conn.generation;
        self.calls.spawn(async move {
            let sent = Instant::now();
            let answer = api.heartbeat(&beat).await;
            Answer::Heartbeat {
                took: sent.elapsed(),
                generation,
                answer,
            }
        });
    }

    /// Starts preparing the jobs of waiting leases (spec, engine build, self-test), each
    /// in the background once.
    pub(super) fn prepare_jobs(&mut self) {
        if self.stopping.is_some() || !self.conn.up() {
            return;
        }
        let jobs: HashSet<JobId> = self.waiting.iter().map(|l| l.job_id).collect();
        for job_id in jobs {
            if self.jobs.contains_key(&job_id) || !self.preparing.insert(job_id) {
                continue;
            }
            let (api, engine, console) = (
                self.conn.api.clone(),
                self.engine.clone(),
                self.console.clone(),
            );
            self.calls.spawn(async move {
                Answer::Prepared {
                    job_id,
                    prepared: prepare_job(api, job_id, engine, console).await,
                }
            });
        }
    }

    /// Hands waiting leases whose job engine is ready to the engines (and drops those of
    /// jobs this worker cannot run: their leases expire and go elsewhere).
    pub(super) fn feed_engines(&mut self, executor: &Executor) {
        if self.stopping.is_some() {
            return;
        }
        let jobs = &self.jobs;
        self.waiting.retain(|lease| match jobs.get(&lease.job_id) {
            Some(JobEngine::Ready(engine)) => {
                executor.push(Task {
                    lease: lease.clone(),
                    engine: engine.clone(),
                });
                false
            }
            Some(JobEngine::Broken(why)) => {
                warn!(job_id = %lease.job_id, %why, "skipping a unit of a job this worker cannot run");
                false
            }
            None => true,
        });
    }

    /// Units held now: running, queued, waiting for their engine, and finished but not
    /// yet acknowledged (their leases are still out at the coordinator); a report out
    /// longer than a hedge is stuck on a silent link and does not count (it would keep
    /// the engines from more work for as long as the link takes to be given up).
    pub(super) fn held(&self, executor: &Executor) -> usize {
        let (queued, running) = executor.load();
        let hedge = self.hedge_after();
        let reporting = self
            .sending
            .values()
            .filter(|s| s.sent.elapsed() < hedge)
            .count();
        queued + running + self.waiting.len() + self.outbox.len() + reporting
    }

    /// Leases more units when the queue runs low: enough that every engine is full and
    /// the queue covers two round trips at the pace units finish.
    pub(super) fn send_lease(&mut self, executor: &Executor) {
        if !self.leases_out.may_send(self.hedge_after())
            || self.stopping.is_some()
            || self.at_limit()
            || self.pause.is_some()
            || !self.conn.up()
            || Instant::now() < self.lease_after
        {
            return;
        }
        let threads = executor.threads();
        let target = queue_target(
            threads,
            executor.in_hand(),
            self.conn.round_trip(),
            self.pace.unit_seconds(),
        );
        let room = target.saturating_sub(self.held(executor));
        // on many threads ask in batches of at least half the thread count
        if room == 0 || 2 * room < threads.min(target) {
            return;
        }
        let remaining = self
            .config
            .stop_after_units
            .map_or(u64::MAX, |n| n.saturating_sub(self.units_taken));
        let want = room.min(MAX_LEASES_PER_CALL).min(remaining as usize);
        if want == 0 {
            return;
        }
        self.leases_out.sent();
        let mut api = self.conn.api.clone();
        let kind = self.engine.kind();
        let generation = self.conn.generation;
        self.calls.spawn(async move {
            let sent = Instant::now();
            let answer = api.lease(want, kind).await;
            Answer::Leased {
                took: sent.elapsed(),
                generation,
                answer,
            }
        });
    }

    /// Counts engine-thread time without a unit by why, for the heartbeat's network wait.
    pub(super) fn account_idle(&mut self, executor: &Executor) {
        let why = if self.pause.is_some() || self.stopping.is_some() {
            Idle::Paused
        } else if !self.waiting.is_empty() || !self.preparing.is_empty() {
            Idle::Preparing
        } else if self.no_work > 0 {
            Idle::NoWork
        } else {
            Idle::Network
        };
        self.idle.turn(Instant::now(), executor.idle_threads(), why);
    }
}

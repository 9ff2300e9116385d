//! The store's operations, as the fleet logic sees them: named, synchronous, in domain
//! terms. A write job ([`crate::store::Store::write`]) and a read
//! ([`crate::store::Store::read`]) each get one `&mut dyn Tx`: everything it does happens
//! in one transaction. Each backend implements the traits at its own edge.
//!
//! The traits are split by what they touch, so a reader finds "what can be done to a
//! lease" in one place.

use e2fleet_engine::UnitResult;
use e2fleet_engine::suite::SuiteExpected;
use e2fleet_proto::api::{
    AccountId, HostInfo, JobId, JobState, LeaseId, ResultVerdict, StudyId, TeamId, UnitCounts,
    UnitId, WorkerId,
};

use super::StoreError;
use super::records::*;

/// Shorthand for the store's results.
pub type StoreResult<T> = Result<T, StoreError>;

/// Jobs: creation, state and the running per-depth totals.
pub trait Jobs {
    /// Stores a new job.
    fn insert_job(&mut self, job: &NewJob) -> StoreResult<()>;
    /// One job, without its puzzle.
    fn job(&mut self, id: JobId) -> StoreResult<Option<JobRecord>>;
    /// Every job, newest first, without their puzzles.
    fn list_jobs(&mut self) -> StoreResult<Vec<JobRecord>>;
    /// What a job's search context is built from.
    fn job_source(&mut self, id: JobId) -> StoreResult<Option<JobSource>>;
    /// What the report path needs of a job.
    fn job_head(&mut self, id: JobId) -> StoreResult<Option<JobHead>>;
    /// Adds an accepted result's counts to the job's running totals.
    fn add_accepted(&mut self, id: JobId, nodes: &[u64], solutions: u64) -> StoreResult<()>;
    /// Takes an overturned result's counts back out of the job's running totals.
    fn subtract_accepted(&mut self, id: JobId, nodes: &[u64], solutions: u64) -> StoreResult<()>;
    /// Adds `count` prefix nodes at depth index `depth` (a split; negative: revoked).
    fn add_split_nodes(&mut self, id: JobId, depth: usize, count: i64) -> StoreResult<()>;
    /// Marks a running job complete or cancelled.
    fn finish_job(
        &mut self,
        id: JobId,
        state: JobState,
        now_ms: i64,
        conservation_ok: Option<bool>,
    ) -> StoreResult<()>;
    /// Re-opens a completed job (a late result disputes one of its units); `true` if it was.
    fn reopen_job(&mut self, id: JobId) -> StoreResult<bool>;
    /// Sets how a job shares the fleet; `false` when there is no such job.
    fn set_schedule(&mut self, id: JobId, schedule: &Schedule) -> StoreResult<bool>;
    /// Every running job's schedule, oldest job first.
    fn running_schedules(&mut self) -> StoreResult<Vec<(JobId, Schedule)>>;
}

/// Units: creation, the leasable queue, counters and decisions.
pub trait Units {
    /// Stores units of a job (all open).
    fn insert_units(&mut self, job: JobId, units: &[NewUnit], now_ms: i64) -> StoreResult<()>;
    /// One unit.
    fn unit(&mut self, id: UnitId) -> StoreResult<Option<UnitRecord>>;
    /// Up to `limit` open units of running, unpaused jobs (of `job` only, if given)
    /// `worker` may run, oldest first (disputed ones first for a `trusted` worker): not one
    /// it holds or has a valid result for, nor one its account holds or has a valid result
    /// for when the unit requires a new account ([`AccountNeed::Required`]), or prefers one
    /// and the fleet has more than one live account.
    fn leasable_units(
        &mut self,
        who: &Leasing<'_>,
        job: Option<JobId>,
        limit: usize,
    ) -> StoreResult<Vec<UnitRecord>>;
    /// Active leases per job.
    fn active_leases_by_job(&mut self) -> StoreResult<Vec<(JobId, u64)>>;
    /// An open continuation nobody holds and no result names, to split for idle workers.
    fn splittable_unit(&mut self) -> StoreResult<Option<UnitRecord>>;
    /// Rewrites a unit's prefix and cursor (after a split).
    fn set_unit_path(&mut self, id: UnitId, unit: &e2fleet_engine::Unit) -> StoreResult<()>;
    /// A lease on the unit was handed out.
    fn lease_taken(&mut self, id: UnitId) -> StoreResult<()>;
    /// A lease on the unit ended without a result (expired, released, cancelled).
    fn lease_returned(&mut self, id: UnitId) -> StoreResult<()>;
    /// A valid result on the unit was recorded; `lease_was_active`: its lease was still out.
    fn result_recorded(&mut self, id: UnitId, lease_was_active: bool) -> StoreResult<()>;
    /// Counts a unit's valid results again (some were voided); with `reopen`, its accepted
    /// result is gone too: it is open for one more run than it has.
    fn recount_unit(&mut self, id: UnitId, reopen: bool) -> StoreResult<()>;
    /// Marks a unit decided by `result` at `now_ms` (the archive's clock starts there).
    fn mark_unit_done(&mut self, id: UnitId, result: ResultId, now_ms: i64) -> StoreResult<()>;
    /// [`Units::result_recorded`] and [`Units::mark_unit_done`] in one change, for the
    /// result on `lease` (named by its lease: its id is not read back).
    fn unit_decided_by_lease(
        &mut self,
        id: UnitId,
        lease: LeaseId,
        lease_was_active: bool,
        now_ms: i64,
    ) -> StoreResult<()>;
    /// Asks for one more run of a unit (its results disagree, or lack independence; also a
    /// done one: its accepted result stays counted until a quorum decides otherwise).
    fn request_run(&mut self, id: UnitId, more: &MoreRuns) -> StoreResult<()>;
    /// Units created from `parent` (continuations and split siblings).
    fn unit_children(&mut self, parent: UnitId) -> StoreResult<Vec<UnitRecord>>;
    /// Cancels a unit (revoked with a wrong result).
    fn cancel_unit(&mut self, id: UnitId) -> StoreResult<()>;
    /// Cancels every unfinished unit of a job.
    fn cancel_job_units(&mut self, job: JobId) -> StoreResult<()>;
    /// Whether the job has an open or busy unit.
    fn job_has_unfinished_units(&mut self, job: JobId) -> StoreResult<bool>;
    /// A job's units by state.
    fn unit_counts(&mut self, job: JobId) -> StoreResult<UnitCounts>;
    /// A job's open units that wait for another worker or account (the counts of
    /// [`e2fleet_proto::api::status::Waiting`]; who is online is filled in by the caller).
    fn waiting_units(&mut self, job: JobId) -> StoreResult<e2fleet_proto::api::status::Waiting>;
}

/// Leases: grants, expiry, extension, release.
pub trait Leases {
    /// Whether this write now excludes every other write, as expiring leases, splitting
    /// a continuation or asking a run to yield need (they change what a report is
    /// decided against). A lease batch runs beside report batches
    /// ([`crate::store::WriteLock::Leases`]): it then tries to exclude them too, without
    /// waiting, and `false` says a report batch is writing (leave that work to a later
    /// write). Always `true` for any other write, and on SQLite (one writer).
    fn run_alone(&mut self) -> StoreResult<bool>;
    /// Stores a new lease.
    fn insert_lease(&mut self, lease: &LeaseRecord) -> StoreResult<()>;
    /// What a lease request by `worker` of `account` is weighed against, in one read:
    /// whether the worker is quarantined, its account, and the active leases the worker
    /// and (a volunteer account's only) all the account's identities hold. `None`: no such
    /// worker.
    fn lease_view(
        &mut self,
        worker: WorkerId,
        account: &AccountId,
    ) -> StoreResult<Option<LeaseView>>;
    /// A lease with the unit it was granted on.
    fn lease_with_unit(&mut self, id: LeaseId) -> StoreResult<Option<(LeaseRecord, UnitRecord)>>;
    /// Marks active leases past their deadline expired; returns their units.
    fn expire_overdue_leases(&mut self, now_ms: i64) -> StoreResult<Vec<UnitId>>;
    /// Sets a lease's state.
    fn set_lease_state(&mut self, id: LeaseId, state: LeaseState) -> StoreResult<()>;
    /// Extends a worker's active lease; `false` if it is no longer active (or not its own).
    fn extend_lease(
        &mut self,
        id: LeaseId,
        worker: WorkerId,
        deadline_ms: i64,
    ) -> StoreResult<bool>;
    /// Brings a worker's expired lease back to life with a new deadline when nothing
    /// happened to its unit meanwhile (open, no result, no other lease out: a worker that
    /// slept past its deadline and nobody took the unit); its unit if it did.
    fn revive_lease(
        &mut self,
        id: LeaseId,
        worker: WorkerId,
        deadline_ms: i64,
    ) -> StoreResult<Option<UnitId>>;
    /// Marks a unit's expired leases superseded (the unit is about to change: a result
    /// on one of them would answer a unit that is no longer there); how many.
    fn supersede_expired_leases(&mut self, unit: UnitId) -> StoreResult<usize>;
    /// Marks a worker's active leases whose unit is decided or cancelled superseded (the
    /// run is not needed any more); their ids and units.
    fn supersede_decided_leases(&mut self, worker: WorkerId)
    -> StoreResult<Vec<(LeaseId, UnitId)>>;
    /// The running unit best split for idle threads: the oldest active lease, created
    /// before `started_before`, not yet asked to yield, on a running unpaused job with no
    /// other lease asked to yield since `asked_since`, whose unit a stopped run of the
    /// operator's counts alone (quorum one, no result, no other lease out). Its id.
    fn yield_candidate(
        &mut self,
        started_before: i64,
        asked_since: i64,
    ) -> StoreResult<Option<LeaseId>>;
    /// Asks an active lease to stop at its cursor and report (at `now_ms`).
    fn request_yield(&mut self, id: LeaseId, now_ms: i64) -> StoreResult<()>;
    /// A worker's active leases asked to yield.
    fn yields_of_worker(&mut self, worker: WorkerId) -> StoreResult<Vec<LeaseId>>;
    /// Releases a worker's active lease; its unit if it was active.
    fn release_lease(&mut self, id: LeaseId, worker: WorkerId) -> StoreResult<Option<UnitId>>;
    /// Cancels the active leases of a job's units; how many.
    fn cancel_job_leases(&mut self, job: JobId) -> StoreResult<usize>;
    /// When a job's first unit was leased (work started).
    fn first_lease_of_job(&mut self, job: JobId) -> StoreResult<Option<i64>>;
    /// Leases created and expired since `since_ms`, per minute.
    fn lease_minutes(&mut self, since_ms: i64) -> StoreResult<Vec<LeaseMinute>>;
    /// Leases created and leases expired since `since_ms`.
    fn lease_counts_since(&mut self, since_ms: i64) -> StoreResult<(u64, u64)>;
}

/// Results: every report, its digest and its verdict.
pub trait Results {
    /// Stores a result (a held change: its id is not read back; its lease names it).
    fn insert_result(&mut self, result: &NewResult) -> StoreResult<()>;
    /// Stores a result already decided, in its final form (its verdict in the record;
    /// its body only when `keep_body`; a held change, its lease names it): the first
    /// acceptance of a unit is written once instead of inserted pending and then updated
    /// (see [`crate::fleet`]'s quorum rules, `accept_alone`).
    fn insert_decided_result(&mut self, result: &NewResult, keep_body: bool) -> StoreResult<()>;
    /// The id of the result recorded on `lease`; there must be one.
    fn result_id_by_lease(&mut self, lease: LeaseId) -> StoreResult<ResultId>;
    /// Everything a report on `lease` by a worker of `account` is checked against, in one
    /// read (on PostgreSQL one round trip instead of five), with the job's kept boards at
    /// `kept_boards_at.0` or deeper counted up to `kept_boards_at.1` (0: not counted);
    /// `None` when the lease (or its unit) is not stored.
    fn report_view(
        &mut self,
        lease: LeaseId,
        account: &AccountId,
        kept_boards_at: (usize, usize),
    ) -> StoreResult<Option<ReportView>>;
    /// One result.
    fn result(&mut self, id: ResultId) -> StoreResult<Option<ResultRecord>>;
    /// One result's body.
    fn result_body(&mut self, id: ResultId) -> StoreResult<Option<UnitResult>>;
    /// The valid (not wrong) results of a unit, in arrival order.
    fn valid_results_of_unit(&mut self, unit: UnitId) -> StoreResult<Vec<ResultRecord>>;
    /// Sets a result's verdict; a result found [`ResultVerdict::Wrong`] or
    /// [`ResultVerdict::Void`] gives back the credit it held (see [`Results::credit_result`]).
    fn set_result_verdict(&mut self, id: ResultId, verdict: ResultVerdict) -> StoreResult<()>;
    /// Credits a volunteer's result that counts (accepted, or agreeing with the accepted
    /// one) to its account: its nodes on the account's totals and on its line for the UTC
    /// day of `now_ms`. Nothing happens if the result holds credit already, if another
    /// result of the same account on the same unit does, or if it is the operator's.
    /// Whether it was credited now.
    fn credit_result(&mut self, id: ResultId, now_ms: i64) -> StoreResult<bool>;
    /// Takes back the credit result `id` holds, if any (its unit no longer counts: a
    /// continuation cancelled with the overturned result it continued).
    fn withdraw_credit(&mut self, id: ResultId) -> StoreResult<()>;
    /// Accepted results of an account that no result from another account agrees with
    /// (they counted on the account's own standing).
    fn unconfirmed_accepted_of_account(
        &mut self,
        account: &AccountId,
    ) -> StoreResult<Vec<ResultRecord>>;
    /// Accepted results of a worker identity that no result from another identity agrees
    /// with (they counted on that one machine's word).
    fn unconfirmed_accepted_of_worker(
        &mut self,
        worker: WorkerId,
    ) -> StoreResult<Vec<ResultRecord>>;
    /// Results of an account that counted on nothing yet or only agreed (pending, agree).
    fn pending_results_of_account(&mut self, account: &AccountId)
    -> StoreResult<Vec<ResultRecord>>;
    /// The bodies of a job's accepted results (for the conservation check).
    fn accepted_bodies_of_job(&mut self, job: JobId) -> StoreResult<Vec<UnitResult>>;
    /// The first `limit` accepted results of a job that carry solutions.
    fn solution_bodies_of_job(&mut self, job: JobId, limit: usize) -> StoreResult<Vec<UnitResult>>;
    /// The accepted result of a job that went deepest (earliest unit on ties).
    fn deepest_body_of_job(&mut self, job: JobId) -> StoreResult<Option<UnitResult>>;
    /// A job's `limit` accepted results that went deepest (earliest received first on
    /// ties), with who reported them and when.
    fn deepest_results_of_job(&mut self, job: JobId, limit: usize) -> StoreResult<Vec<FoundBoard>>;
    /// Per-core rate samples of accepted or agreeing results since `since_ms` with a
    /// measurable run time; `job` narrows to one job.
    fn rate_samples(&mut self, job: Option<JobId>, since_ms: i64) -> StoreResult<Vec<RateSample>>;
    /// Nodes received since `since_ms`; `job` narrows to one job.
    fn nodes_since(&mut self, job: Option<JobId>, since_ms: i64) -> StoreResult<NodesReceived>;
    /// Results received since `since_ms`.
    fn results_since(&mut self, since_ms: i64) -> StoreResult<u64>;
    /// Results per minute since `since_ms`.
    fn result_minutes(&mut self, since_ms: i64) -> StoreResult<Vec<ResultMinute>>;
    /// Results marked wrong, ever.
    fn wrong_results(&mut self) -> StoreResult<u64>;
    /// A job's results per (verdict, engine kind, engine build).
    fn result_breakdown(&mut self, job: JobId) -> StoreResult<Vec<ResultBreakdown>>;
    /// Every unit of a job that is not cancelled, by id, with its accepted result (a
    /// certificate's units).
    fn certificate_rows(&mut self, job: JobId) -> StoreResult<Vec<CertificateRow>>;
    /// Folds the results of a decided unit: every accepted or agreeing one except `keep`
    /// drops its body and keeps its core ([`ResultCore`]).
    fn fold_results(&mut self, unit: UnitId, keep: Option<ResultId>) -> StoreResult<()>;
    /// Folds the kept accepted results of a job that are neither among its `keep` deepest
    /// boards nor carry solutions; how many.
    fn fold_surplus_boards(&mut self, job: JobId, keep: usize) -> StoreResult<u64>;
    /// Up to `limit`: accepted results of a job other than `other_than` that reached
    /// `depth` or deeper and still have their body (the best boards kept).
    fn boards_kept_at_least(
        &mut self,
        job: JobId,
        depth: usize,
        other_than: ResultId,
        limit: usize,
    ) -> StoreResult<usize>;
    /// The digest of each unit's accepted result (`None`: no such unit in the job, or not
    /// decided), in the order asked.
    fn accepted_digests(
        &mut self,
        job: JobId,
        units: &[UnitId],
    ) -> StoreResult<Vec<Option<String>>>;
}

/// Workers: identities, tokens, liveness, errors and quarantine.
pub trait Workers {
    /// Inserts a worker, or replaces a re-registering one's token and labels (its record
    /// of errors and units stays).
    fn upsert_worker(&mut self, worker: &WorkerRecord) -> StoreResult<()>;
    /// One worker.
    fn worker(&mut self, id: WorkerId) -> StoreResult<Option<WorkerRecord>>;
    /// The worker a token hash belongs to.
    fn worker_by_token_hash(&mut self, hash: &str) -> StoreResult<Option<WorkerRecord>>;
    /// Every worker with the leases it holds, by host name.
    fn list_workers(&mut self) -> StoreResult<Vec<WorkerRecord>>;
    /// An account's worker identities registered or seen since `since_ms`.
    fn identities_of_account_since(
        &mut self,
        account: &AccountId,
        since_ms: i64,
    ) -> StoreResult<u64>;
    /// Records a call from a worker, with its rate and engine when given (a held change:
    /// nothing is read back).
    fn worker_seen(&mut self, id: WorkerId, now_ms: i64, seen: &Seen<'_>) -> StoreResult<()>;
    /// Counts a unit decided by a worker's result.
    fn worker_unit_done(&mut self, id: WorkerId) -> StoreResult<()>;
    /// Counts a wrong result against a worker identity; quarantines it past `threshold`.
    /// `true` when it is now quarantined.
    fn worker_error(&mut self, id: WorkerId, threshold: u64) -> StoreResult<bool>;
    /// Lifts the quarantine of the quarantined workers whose host label is `hostname`
    /// and clears their errors; how many were released.
    fn release_host(&mut self, hostname: &str) -> StoreResult<u64>;
    /// Lifts one worker identity's quarantine and clears its errors; whether it was.
    fn release_worker(&mut self, id: WorkerId) -> StoreResult<bool>;
}

/// Accounts: who enrolment tokens belong to, and the trust their results earned.
pub trait Accounts {
    /// Stores a new account with the SHA-256 of its enrolment token.
    fn insert_account(&mut self, account: &AccountRecord, token_hash: &str) -> StoreResult<()>;
    /// One account.
    fn account(&mut self, id: &AccountId) -> StoreResult<Option<AccountRecord>>;
    /// The account an enrolment token hash belongs to.
    fn account_by_token_hash(&mut self, hash: &str) -> StoreResult<Option<AccountRecord>>;
    /// Every account with its number of worker identities.
    fn list_accounts(&mut self) -> StoreResult<Vec<AccountRecord>>;
    /// Puts a volunteer account in `team` (`None`: in none); the team's accounts after
    /// the change (0 for none), or `None` when there is no such volunteer account.
    fn set_account_team(
        &mut self,
        id: &AccountId,
        team: Option<&TeamId>,
    ) -> StoreResult<Option<u64>>;
    /// Revokes an account; whether it was active.
    fn revoke_account(&mut self, id: &AccountId, now_ms: i64) -> StoreResult<bool>;
    /// Lifts an account's quarantine and clears its errors; whether it was quarantined.
    fn release_account(&mut self, id: &AccountId) -> StoreResult<bool>;
    /// Another party confirmed one of its results (`nodes` committed): its streak towards
    /// trust, and its confirmed results and nodes (credit is [`Results::credit_result`]'s).
    fn account_confirmed(&mut self, id: &AccountId, nodes: u64) -> StoreResult<()>;
    /// Credit per account and day, from day `since_day` (days since the epoch, UTC).
    fn credit_days(&mut self, since_day: i64) -> StoreResult<Vec<CreditDay>>;
    /// Each credited account's first and last day of credit.
    fn credit_spans(&mut self) -> StoreResult<Vec<(AccountId, i64, i64)>>;
    /// One of its results was wrong: its trust streak restarts; a volunteer account is
    /// quarantined at `threshold` errors. `true` when this error quarantined it.
    fn account_error(&mut self, id: &AccountId, threshold: u64) -> StoreResult<bool>;
    /// Independent parties with a worker seen since `since_ms`: active volunteer accounts
    /// (however many identities each has) plus the operator's identities (it vouches for
    /// each of its machines).
    fn live_parties(&mut self, since_ms: i64) -> StoreResult<u32>;
    /// Worker identities seen since `since_ms`, not quarantined, of active accounts.
    fn live_workers(&mut self, since_ms: i64) -> StoreResult<u32>;
}

/// Verification: hardware classes, suites and suite results.
pub trait Verifications {
    /// Stores a hardware class if it is new.
    fn upsert_class(&mut self, id: &str, host: &HostInfo, now_ms: i64) -> StoreResult<()>;
    /// Every class that ran some unit of `suite`, oldest first.
    fn classes_of_suite(&mut self, suite: &str) -> StoreResult<Vec<ClassRecord>>;
    /// Replaces a suite's units (earlier results stay, judged against the new units).
    fn replace_suite(
        &mut self,
        suite: &str,
        units: &[SuiteUnitRecord],
        now_ms: i64,
    ) -> StoreResult<()>;
    /// A suite's units in order.
    fn suite_units(&mut self, suite: &str) -> StoreResult<Vec<SuiteUnitRecord>>;
    /// Every suite name.
    fn suite_names(&mut self) -> StoreResult<Vec<String>>;
    /// Fixes a unit's exact result, if it has none yet.
    fn set_expected(
        &mut self,
        suite: &str,
        unit: &str,
        expected: &SuiteExpected,
        source: &str,
    ) -> StoreResult<()>;
    /// Different results an identity has stored for a unit of a suite under a class.
    fn verification_results_of_identity(
        &mut self,
        suite: &str,
        unit: &str,
        class_id: &str,
        worker: WorkerId,
    ) -> StoreResult<u64>;
    /// Stores a verification result (the same result again from the same identity adds
    /// nothing).
    fn insert_verification(&mut self, v: &NewVerification) -> StoreResult<()>;
    /// Every result of a suite, oldest first.
    fn verifications_of_suite(&mut self, suite: &str) -> StoreResult<Vec<VerificationRecord>>;
    /// The body of the first result of `unit` with `digest`.
    fn verification_body(
        &mut self,
        suite: &str,
        unit: &str,
        digest: &str,
    ) -> StoreResult<Option<UnitResult>>;
    /// Lifts a class's flag: disagreements before now no longer flag it.
    fn unflag_class(&mut self, class: &str, now_ms: i64) -> StoreResult<()>;
    /// When each unflagged class was last unflagged.
    fn class_unflags(&mut self) -> StoreResult<Vec<(String, i64)>>;
    /// Stores an audit of a job's certificate.
    fn insert_audit(&mut self, audit: &AuditRecord) -> StoreResult<()>;
    /// A job's audits, oldest first.
    fn audits_of_job(&mut self, job: JobId) -> StoreResult<Vec<AuditRecord>>;
}

/// Who is asking to lease, for [`Units::leasable_units`].
#[derive(Clone, Debug)]
pub struct Leasing<'a> {
    /// The worker identity.
    pub worker: WorkerId,
    /// Its account.
    pub account: &'a AccountId,
    /// Whether its results count alone (disputed units go to such workers first).
    pub trusted: bool,
    /// Live independent parties ([`Accounts::live_parties`]): with one, identities stand
    /// in for accounts where a unit only prefers another account.
    pub live_parties: u32,
}

/// An open unit as a batch of lease requests sees it ([`Batches::open_units_with_runs`]).
#[derive(Clone, Debug)]
pub struct OpenUnit {
    /// The unit.
    pub unit: UnitRecord,
    /// Whether it came as a disputed unit (for trusted workers first).
    pub disputed: bool,
    /// Its `needs_new_account` (0: any party; 1: another account preferred; 2: required).
    pub needs_new_account: i64,
    /// The worker identity and account of each active lease and valid result on it.
    pub runs: Vec<(WorkerId, AccountId)>,
}

impl OpenUnit {
    /// Whether `who` may run it: the rule of [`Units::leasable_units`] (its `ELIGIBLE`
    /// condition in `sql/units.rs`), on the runs read with it. The
    /// identity never runs a unit twice; a volunteer account not either when the unit
    /// requires another party's run, or prefers one and the fleet has another party.
    pub fn open_to(&self, who: &Leasing<'_>) -> bool {
        let account_barred = !who.account.is_operator()
            && (self.needs_new_account == 2
                || (self.needs_new_account == 1 && who.live_parties > 1));
        !self
            .runs
            .iter()
            .any(|(w, a)| *w == who.worker || (account_barred && a == who.account))
    }
}

/// What a unit needs next, for [`Units::request_run`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoreRuns {
    /// Agreeing results required (raised, never lowered).
    pub quorum: u32,
    /// Whether the next run must come from an account that has not run it.
    pub account_need: AccountNeed,
    /// Its results disagree.
    pub disputed: bool,
}

/// Everything a transaction can do.
/// The archive (`migrations/sqlite/0013_archive.sql`): decided units past the detail window,
/// one compact row each. Every other operation sees an archived unit as a done unit: it
/// is counted, certified and audited from its row, and restored (rows and all) when a
/// recheck or an overturn reaches it.
pub trait Archive {
    /// Archives up to `limit` done units decided at or before `cutoff_ms`, looked at in
    /// order of decision after `after` (a decision time and a unit id). Units that cannot
    /// go yet (a lease out, a result undecided or wrong, a body kept) are passed over.
    fn archive_decided(
        &mut self,
        cutoff_ms: i64,
        after: (i64, i64),
        limit: usize,
    ) -> StoreResult<ArchivePass>;
    /// Archived units, all jobs.
    fn archived_units(&mut self) -> StoreResult<u64>;
    /// Whether unit `unit` (of any job) is archived.
    fn is_archived(&mut self, unit: UnitId) -> StoreResult<bool>;
}

/// Order studies (`migrations/sqlite/0021_studies.sql`): a study row, and its orders as
/// jobs whose units are probes.
pub trait Studies {
    /// Stores a new study (its jobs are inserted as jobs).
    fn insert_study(&mut self, study: &StudyRecord) -> StoreResult<()>;
    /// One study.
    fn study(&mut self, id: StudyId) -> StoreResult<Option<StudyRecord>>;
    /// Every study, newest first.
    fn list_studies(&mut self) -> StoreResult<Vec<StudyRecord>>;
    /// The studies still running.
    fn running_studies(&mut self) -> StoreResult<Vec<StudyId>>;
    /// A study's jobs, in the order they were submitted.
    fn study_jobs(&mut self, id: StudyId) -> StoreResult<Vec<JobRecord>>;
    /// Ends a running study in `state` (`converged`, `exhausted` or `cancelled`); whether
    /// it was running.
    fn end_study(&mut self, id: StudyId, state: &str, now_ms: i64) -> StoreResult<bool>;
    /// The accepted probes of a study's job: each unit's prefix (its stratum) and the
    /// children its population listed per depth, in unit order.
    fn accepted_probes(&mut self, job: JobId) -> StoreResult<Vec<AcceptedProbe>>;
}

/// What a batch of lease requests or reports reads and writes in one statement each
/// (see `crate::fleet::batches`): on PostgreSQL each is one set-based statement, so a
/// batch of reports costs a few statements, not a few per report; on SQLite each is the
/// per-row statement run per row (a statement there costs microseconds). Rows named twice
/// in one call are the caller's to avoid: a set-based update changes each row once.
pub trait Batches {
    /// [`Results::report_view`] for each report, in order (`None` where its lease is not
    /// stored). Unlike it, remembers nothing for later statements.
    fn report_views(&mut self, asks: &[ViewAsk<'_>]) -> StoreResult<Vec<Option<ReportView>>>;
    /// [`Results::insert_decided_result`] for each, keeping its body where `keep_body`
    /// says (at its index); a result with a time in `credit_at` (at its index) earns its account credit for that time's day as
    /// [`Results::credit_result`] gives it, which the caller has made sure it would: the
    /// result is the only valid one on its unit, and only a valid result holds credit. On
    /// PostgreSQL it is inserted credited (a later update of its row would copy it to
    /// another page, with an entry in every index of `results`).
    fn insert_decided_results(
        &mut self,
        results: &[NewResult],
        keep_body: &[bool],
        credit_at: &[Option<i64>],
    ) -> StoreResult<()>;
    /// [`Units::unit_decided_by_lease`] for each `(unit, lease, lease_was_active, now_ms)`;
    /// the units are distinct.
    fn units_decided_by_leases(
        &mut self,
        decided: &[(UnitId, LeaseId, bool, i64)],
    ) -> StoreResult<()>;
    /// [`Leases::set_lease_state`] for each lease.
    fn set_leases_state(&mut self, ids: &[LeaseId], state: LeaseState) -> StoreResult<()>;
    /// Adds `n` to each worker's units done; the workers are distinct.
    fn workers_units_done(&mut self, done: &[(WorkerId, u64)]) -> StoreResult<()>;
    /// [`Leases::lease_view`] for each `(worker, account)`, in order.
    fn lease_views(
        &mut self,
        who: &[(WorkerId, &AccountId)],
    ) -> StoreResult<Vec<Option<LeaseView>>>;
    /// The oldest open units of running, unpaused jobs (at most `open`), after the
    /// disputed ones (at most `disputed`; a disputed unit is open too, so it may come
    /// twice), each with the runs that bar a worker from it ([`OpenUnit::open_to`]), and
    /// each claimed as [`Batches::claim_open_units`] claims it: on PostgreSQL the read
    /// passes over a unit whose row a report batch holds and takes the next one instead.
    fn open_units_with_runs(&mut self, open: usize, disputed: usize) -> StoreResult<Vec<OpenUnit>>;
    /// Of `units`, read open for a lease, those still open, each now held by this write
    /// until its commit. On PostgreSQL a unit whose row a report batch beside this write
    /// holds is left out (it waits for the next lease write), so a lease write never
    /// waits for a report batch's row: the two never wait on each other
    /// ([`crate::store::WriteLock`]). All of them where one writer runs at a time.
    fn claim_open_units(&mut self, units: &[UnitId]) -> StoreResult<Vec<UnitId>>;
    /// [`Leases::insert_lease`] for each, with [`Units::lease_taken`] for its unit; the
    /// units are distinct.
    fn insert_leases(&mut self, leases: &[LeaseRecord]) -> StoreResult<()>;
    /// [`Workers::worker_seen`] at `now_ms` with what a lease request tells (the engine
    /// it runs) for each worker; the workers are distinct. On PostgreSQL a worker whose
    /// row a report batch beside this write holds is left as it is (its next lease
    /// request tells the same): a lease batch never waits for a report batch's row here.
    fn workers_seen_leasing(
        &mut self,
        seen: &[(WorkerId, Option<(e2fleet_engine::engine::EngineKind, &str)>)],
        now_ms: i64,
    ) -> StoreResult<()>;
    /// A heartbeat's part that runs beside report batches (under the lease batches'
    /// lock): [`Leases::extend_lease`] of each of `leases` that `worker` holds active, to
    /// `deadline_ms`; returns how many it extended. On PostgreSQL a lease whose row a
    /// report batch holds is left as it is (it is being reported; the heartbeat then
    /// takes the single way, which waits for that batch): a heartbeat never waits for a
    /// report batch's row.
    fn extend_leases_beside_reports(
        &mut self,
        worker: WorkerId,
        leases: &[LeaseId],
        deadline_ms: i64,
    ) -> StoreResult<usize>;
    /// [`Workers::worker_seen`], skipping the row on PostgreSQL when a report batch holds
    /// it (the worker's next heartbeat tells the same).
    fn worker_seen_beside_reports(
        &mut self,
        worker: WorkerId,
        now_ms: i64,
        seen: &Seen<'_>,
    ) -> StoreResult<()>;
    /// Whether `worker` holds an active lease on a unit that is done or cancelled (a
    /// heartbeat supersedes those, which only the single way does).
    fn holds_decided_leases(&mut self, worker: WorkerId) -> StoreResult<bool>;
}

/// One report's [`Results::report_view`] arguments.
#[derive(Clone, Copy, Debug)]
pub struct ViewAsk<'a> {
    /// The lease the report names.
    pub lease: LeaseId,
    /// The reporting worker's account.
    pub account: &'a AccountId,
    /// The result's deepest depth and the most kept boards to count there.
    pub boards: (usize, usize),
}

/// Every operation, in one transaction.
pub trait Tx:
    Jobs + Units + Leases + Results + Workers + Accounts + Verifications + Archive + Studies + Batches
{
}

impl<T> Tx for T where
    T: Jobs
        + Units
        + Leases
        + Results
        + Workers
        + Accounts
        + Verifications
        + Archive
        + Studies
        + Batches
{
}

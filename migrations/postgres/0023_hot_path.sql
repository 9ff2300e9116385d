-- The write path's tables without the checks it already makes, and with room for
-- updates in place.
--
-- Foreign keys on the rows every lease and report writes (units, leases, results and
-- result bodies) cost each insert a locking read of the row it names (`FOR KEY SHARE`):
-- about 17 such reads a completed unit, and every one of them takes a share lock on the
-- same job row. The coordinator writes these rows only from rows it has just read in
-- the same transaction (a unit from its job, a lease from its unit and worker, a result
-- from its lease), and removes them only by archiving, children before parents, so the
-- checks never fire; without them the load bench completes ~15% more units a second
-- on one server (docs/benchmarks.md). The keys of the slow-moving tables (suites,
-- hardware classes, job-level rows) stay.
ALTER TABLE results
    DROP CONSTRAINT results_job_id_fkey,
    DROP CONSTRAINT results_lease_id_fkey,
    DROP CONSTRAINT results_unit_id_fkey,
    DROP CONSTRAINT results_worker_id_fkey;
ALTER TABLE leases
    DROP CONSTRAINT leases_unit_id_fkey,
    DROP CONSTRAINT leases_worker_id_fkey;
ALTER TABLE units DROP CONSTRAINT units_job_id_fkey;
ALTER TABLE result_bodies DROP CONSTRAINT result_bodies_result_id_fkey;

-- `leases_by_unit_state` (unit_id, state) answers everything `leases_by_unit` did.
DROP INDEX leases_by_unit;

-- A unit's counters change on every lease and report and are in no index: with free
-- room in its page the new row version stays there and no index is written (a HOT
-- update). New rows leave a fifth of each page for that.
ALTER TABLE units SET (fillfactor = 80);
ALTER TABLE leases SET (fillfactor = 80);

-- A lease changes state once in its life (active, then reported, expired, released...),
-- and each change writes a new row version into every index whose columns or predicate
-- include the state. Every query that finds leases by worker, account or deadline asks
-- for the active ones (or, for the dashboard's minutes, the expired ones), so those
-- indexes hold only them: a lease that ends is written into three indexes, not six.
DROP INDEX leases_by_state;
DROP INDEX leases_by_account;
DROP INDEX leases_by_worker;
CREATE INDEX leases_active_by_worker ON leases(worker_id) WHERE state = 'active';
CREATE INDEX leases_active_by_account ON leases(account_id) WHERE state = 'active';
CREATE INDEX leases_active_by_deadline ON leases(deadline_ms) WHERE state = 'active';
CREATE INDEX leases_expired_by_deadline ON leases(deadline_ms) WHERE state = 'expired';

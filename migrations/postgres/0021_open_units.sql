-- Indexes over the few live rows of tables that grow for the whole life of a job.
--
-- The hot queries ask for open units, unfinished units and active leases; the full
-- indexes that serve them also hold every done unit and every ended lease. A prepared
-- statement's generic plan is made from the statistics of its moment: on a job's first
-- minutes (every unit open, no lease ended yet) PostgreSQL chose scans that filtered out
-- each done unit or ended lease in turn, and they stayed chosen, so a lease cost grew
-- with the job (~2-3 ms after 4,000 units). Partial indexes over the live rows are
-- small, ordered as the queries read them, and cheaper than any scan whatever the
-- statistics say.
CREATE INDEX units_open ON units(id) WHERE state = 'open';
CREATE INDEX units_open_by_job ON units(job_id, id) WHERE state = 'open';
CREATE INDEX units_unfinished_by_job ON units(job_id, id) WHERE state IN ('open', 'busy');
CREATE INDEX leases_active_by_unit ON leases(unit_id) WHERE state = 'active';

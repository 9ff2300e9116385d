-- A job's best boards (status/best.rs): its accepted results, deepest first, read without
-- sorting every result of a months-long job.
CREATE INDEX results_by_job_depth ON results(job_id, max_depth);

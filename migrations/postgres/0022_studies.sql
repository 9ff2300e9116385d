-- Order studies: probe units that estimate the tree of each candidate fill order. A
-- study's orders are jobs (one each) whose units are probes; a counting job has no study.
CREATE TABLE studies (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    puzzle_json TEXT NOT NULL,
    particles BIGINT NOT NULL,        -- boards in each probe's population
    rounds BIGINT NOT NULL,           -- probes per stratum at most
    state TEXT NOT NULL,               -- running | converged | exhausted | cancelled
    created_ms BIGINT NOT NULL,
    finished_ms BIGINT
);

ALTER TABLE jobs ADD COLUMN study_id TEXT;
ALTER TABLE jobs ADD COLUMN probe_particles BIGINT;   -- NULL: a counting job
CREATE INDEX jobs_by_study ON jobs(study_id) WHERE study_id IS NOT NULL;

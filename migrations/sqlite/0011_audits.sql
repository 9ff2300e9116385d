-- Audits of published certificates (fleet/audits.rs): someone re-ran a sample of a job's
-- units on their machine and reported the digests; each row says which hardware class
-- re-checked how many units and whether they agreed with the accepted results.
CREATE TABLE audits (
    id INTEGER PRIMARY KEY,
    job_id TEXT NOT NULL REFERENCES jobs(id),
    worker_id TEXT NOT NULL,
    account_id TEXT NOT NULL,
    class_id TEXT NOT NULL,
    hostname TEXT NOT NULL,
    engine_kind TEXT NOT NULL,
    engine_build TEXT NOT NULL,
    certificate_sha256 TEXT NOT NULL,
    merkle_root TEXT NOT NULL,
    structure_ok INTEGER NOT NULL,
    units_checked INTEGER NOT NULL,
    units_agreed INTEGER NOT NULL,
    disagreed_json TEXT NOT NULL,       -- unit ids whose re-run differs from the accepted result
    unknown INTEGER NOT NULL,           -- unit ids the job does not have (or not decided)
    engine_seconds REAL NOT NULL,
    received_ms INTEGER NOT NULL
);
CREATE INDEX audits_by_job ON audits(job_id, received_ms);

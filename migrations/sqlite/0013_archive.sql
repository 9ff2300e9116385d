-- The archive (store/sqlite/archive.rs): a unit decided longer ago than the coordinator's
-- detail window (`serve --archive-after-s`) leaves `units`, `results` and `leases` for one
-- compact row keyed by small integers. It keeps what overturns, conservation, audits and
-- certificates need — the accepted digest (32 bytes), counters, per-depth counts, the
-- budget stop, who ran it (worker numbers, engine numbers, standing) and when — and a
-- continuation whose parent is archived stores neither prefix nor cursor (they are the
-- parent's prefix and the parent's stop). A recheck or an overturn that reaches an
-- archived unit restores it first, rows and all.
--
-- Archived parents leave children behind in `units`, so `units.parent_id` can no longer
-- be a foreign key. Dropping a FOREIGN KEY constraint does not change what is on disk, and
-- SQLite documents editing the schema text for it (https://sqlite.org/lang_altertable.html,
-- "making other kinds of table schema changes"); a rebuild of the table would need foreign
-- keys off, which cannot be switched inside a migration's transaction. RESET makes this
-- connection read the edited schema at once.
PRAGMA writable_schema = ON;
UPDATE sqlite_schema SET sql = replace(sql, 'parent_id INTEGER REFERENCES units(id),', 'parent_id INTEGER,')
    WHERE type = 'table' AND name = 'units';
PRAGMA writable_schema = RESET;
ALTER TABLE units ADD COLUMN decided_ms INTEGER;   -- when it was decided (done units)
UPDATE units SET decided_ms = 0 WHERE state = 'done';
-- the archiver's queue: done units, oldest decision first
CREATE INDEX units_decided ON units(decided_ms, id) WHERE state = 'done';

-- small numbers for long keys, so that an archived row carries no UUID or build text
CREATE TABLE archive_jobs (
    num INTEGER PRIMARY KEY,
    job_id TEXT NOT NULL UNIQUE REFERENCES jobs(id),
    units INTEGER NOT NULL DEFAULT 0    -- archived units of the job (done, each)
);
CREATE TABLE archive_workers (
    num INTEGER PRIMARY KEY,
    worker_id TEXT NOT NULL UNIQUE REFERENCES workers(id)
);
CREATE TABLE archive_engines (
    num INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    build TEXT NOT NULL,
    UNIQUE (kind, build)
);
-- what the archived results add to a job's breakdown by verdict and engine
CREATE TABLE archive_tallies (
    job INTEGER NOT NULL,
    verdict TEXT NOT NULL,
    engine INTEGER NOT NULL,
    results INTEGER NOT NULL,
    nodes INTEGER NOT NULL,
    PRIMARY KEY (job, verdict, engine)
) WITHOUT ROWID;
CREATE TABLE archive (
    job INTEGER NOT NULL,               -- archive_jobs.num
    unit INTEGER NOT NULL,              -- the unit's id, kept
    parent INTEGER,
    kind INTEGER NOT NULL,              -- 0 root, 1 continuation, 2 split
    quorum INTEGER NOT NULL,
    prefix BLOB,                        -- NULL: a continuation of an archived parent
    cursor BLOB,
    digest BLOB NOT NULL,               -- the accepted result's SHA-256, 32 bytes
    committed INTEGER NOT NULL,
    solutions INTEGER NOT NULL,
    max_depth INTEGER NOT NULL,
    counts TEXT NOT NULL,               -- sparse per-depth counts (codec.rs)
    stop BLOB,                          -- the budget stop, against this unit's cursor (codec.rs)
    stop_tag INTEGER,                   -- the stop's 64-bit fingerprint (codec.rs path_tag)
    worker INTEGER NOT NULL,            -- the accepted result's worker (archive_workers.num)
    runners TEXT NOT NULL,              -- every agreeing result, accepted first: worker.engine.standing
    alone INTEGER NOT NULL,             -- 1: no other identity agreed, 2: no other account agreed
    decided_ms INTEGER NOT NULL,
    PRIMARY KEY (job, unit)
) WITHOUT ROWID;
CREATE INDEX archive_by_parent ON archive(parent) WHERE parent IS NOT NULL;
-- what a history recheck or a voided account reaches: results nobody else confirmed
CREATE INDEX archive_unconfirmed ON archive(worker) WHERE alone > 0;

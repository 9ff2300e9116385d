-- Bounded storage (fleet/quorum.rs): once a unit is decided, its results keep only what
-- overturns, conservation and certificates need — the digest and counters in their
-- columns, plus the per-depth counts (`counts`, `[first depth index, n...]`) and a budget
-- stop's cursor (`stop`, the path codes of store/sqlite/codec.rs) — and the full body
-- goes, unless the result carries solutions or one of the job's best boards.
--
-- Bodies live in a table of their own, so that dropping one frees whole pages for new
-- ones (shrinking a row in place would leave every page of `results` half empty).
CREATE TABLE result_bodies (
    result_id INTEGER PRIMARY KEY REFERENCES results(id),
    json TEXT NOT NULL
);
INSERT INTO result_bodies (result_id, json) SELECT id, result_json FROM results;
ALTER TABLE results ADD COLUMN counts TEXT;      -- NULL in rows from before: never folded
ALTER TABLE results ADD COLUMN stop TEXT;
ALTER TABLE results ADD COLUMN body_kept INTEGER NOT NULL DEFAULT 1;
DROP INDEX results_by_job_depth;
ALTER TABLE results DROP COLUMN result_json;
-- The results that still have their body among a job's accepted ones, by depth: the best
-- boards are read from it, and deciding whether a new result's body is kept counts the
-- kept ones at its depth or deeper (never the folded ones, however many).
CREATE INDEX results_kept_boards ON results(job_id, max_depth) WHERE verdict = 'accepted' AND body_kept = 1;

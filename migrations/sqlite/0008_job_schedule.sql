-- Several jobs share one fleet (fleet/leasing.rs): a job's priority (higher first), its
-- share of the fleet's engines among jobs of equal priority, and whether it is paused
-- (no new leases; the ones out finish).
ALTER TABLE jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN share REAL NOT NULL DEFAULT 1;
ALTER TABLE jobs ADD COLUMN paused INTEGER NOT NULL DEFAULT 0;

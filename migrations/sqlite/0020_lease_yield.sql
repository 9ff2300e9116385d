-- A running unit the coordinator wants split: when its lease was asked to stop at its
-- cursor and report, so the rest can be re-split for idle threads (NULL: not asked).
ALTER TABLE leases ADD COLUMN yield_ms INTEGER;

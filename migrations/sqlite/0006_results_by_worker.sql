-- A worker identity that loses a cross-check has every result it got accepted on its own
-- word run again by someone else (fleet/quorum.rs, "history recheck"): find them by worker.
CREATE INDEX results_by_worker ON results(worker_id, verdict);

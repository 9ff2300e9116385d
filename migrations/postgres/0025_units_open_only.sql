-- `units_by_state` (state, id) gets a new entry at every state change of a unit (open,
-- busy, done: three a completed unit, as it is inserted, leased and decided). On
-- PostgreSQL every query it served reads open units in id order (`units_open`) or done
-- units by when they were decided (`units_decided`), and a job's units by state
-- (`units_by_job`). SQLite keeps it: its queries name it in their planner hints
-- (`INDEXED BY`), and it has no `units_open`.
DROP INDEX units_by_state;

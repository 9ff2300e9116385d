-- Disputed units go to trusted workers first (store/sqlite/units.rs, leasable_units): a
-- partial index keeps that lookup to the few disputed units, and the ordinary lease
-- query walks units_by_state in id order.
CREATE INDEX units_disputed ON units(id) WHERE state = 'open' AND disputed = 1;

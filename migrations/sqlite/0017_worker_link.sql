-- How a worker's link to the coordinator behaves, from its last heartbeat: the share of
-- its engine threads' time spent without a unit while it waited on the coordinator, and
-- the median round trip of its calls (ms). Labels for the dashboard and `workers`, so an
-- operator sees which volunteers a slow link keeps idle; they decide nothing.
ALTER TABLE workers ADD COLUMN network_wait REAL NOT NULL DEFAULT 0;
ALTER TABLE workers ADD COLUMN round_trip_ms REAL NOT NULL DEFAULT 0;

-- The dashboard's per-minute lease series and the fleet page's "leased in the last
-- minute" count read leases by creation time; without this they scan every lease.
CREATE INDEX leases_by_created ON leases(created_ms);

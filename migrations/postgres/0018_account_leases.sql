-- A volunteer account's leases over all its identities are counted at every lease call
-- (an account may hold only so many, however many identities it registers).
CREATE INDEX leases_by_account ON leases(account_id, state);

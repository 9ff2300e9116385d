-- Accounts and trust. A worker is its server-assigned id plus its secret; an
-- enrolment token belongs to an account. Nothing a worker says about itself (host name,
-- CPU, fingerprint) decides trust, replicas, quarantine or flags: those read accounts,
-- identities and results.

CREATE TABLE accounts (
    id TEXT PRIMARY KEY,                 -- the account's name ('operator': the operator's token)
    kind TEXT NOT NULL,                  -- operator | volunteer
    token_hash TEXT UNIQUE,              -- SHA-256 of its enrolment token (NULL for operator: config)
    created_ms INTEGER NOT NULL,
    revoked_ms INTEGER,                  -- set: its workers get no work, unconfirmed results stop counting
    confirmed_streak INTEGER NOT NULL DEFAULT 0,  -- consecutive results another account confirmed
    confirmed_results INTEGER NOT NULL DEFAULT 0, -- results another account confirmed, ever
    confirmed_nodes INTEGER NOT NULL DEFAULT 0,   -- their nodes (credit)
    errors INTEGER NOT NULL DEFAULT 0,   -- wrong results of its identities
    quarantined INTEGER NOT NULL DEFAULT 0
);
INSERT INTO accounts (id, kind, created_ms) VALUES ('operator', 'operator', 0);

-- every existing worker enrolled with the operator's token
ALTER TABLE workers ADD COLUMN account_id TEXT NOT NULL DEFAULT 'operator';
CREATE INDEX workers_by_account ON workers(account_id);

-- who held a lease and who reported a result, by account; how a result may count:
-- 'trusted' (the operator's, or an account that earned trust: counts alone) or
-- 'untrusted' (counts only when another account agrees)
ALTER TABLE leases ADD COLUMN account_id TEXT NOT NULL DEFAULT 'operator';
ALTER TABLE results ADD COLUMN account_id TEXT NOT NULL DEFAULT 'operator';
ALTER TABLE results ADD COLUMN standing TEXT NOT NULL DEFAULT 'trusted';
CREATE INDEX results_by_account ON results(account_id, verdict);
CREATE INDEX leases_by_unit_state ON leases(unit_id, state);

-- a unit whose next run must come from an account that has not run it (cross-checks);
-- a disputed unit's deciding run goes to trusted accounts first
ALTER TABLE units ADD COLUMN needs_new_account INTEGER NOT NULL DEFAULT 0;
ALTER TABLE units ADD COLUMN disputed INTEGER NOT NULL DEFAULT 0;

-- verification results by account; a class flagged by disagreements before an operator
-- lifted it (`verify unflag`) is not flagged by them again
ALTER TABLE verifications ADD COLUMN account_id TEXT NOT NULL DEFAULT 'operator';
CREATE TABLE class_unflags (
    class_id TEXT PRIMARY KEY,
    unflagged_ms INTEGER NOT NULL
);

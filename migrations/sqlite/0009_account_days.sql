-- Credit per volunteer account and day (UTC days since the epoch): confirmed nodes and
-- results, added where the account's totals are (fleet/quorum.rs), for the stats page.
CREATE TABLE account_days (
    account_id TEXT NOT NULL,
    day INTEGER NOT NULL,
    nodes INTEGER NOT NULL DEFAULT 0,
    results INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (account_id, day)
) WITHOUT ROWID;

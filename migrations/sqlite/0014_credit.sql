-- Credit for accepted work (fleet/quorum.rs, store/sql/results.rs): a volunteer result
-- earns its account credit once it counts — accepted into a total, on a trusted account's
-- word alone or confirmed by another party, or agreeing with the accepted result — and
-- loses it when its verdict becomes wrong or void. Before this, only results another
-- party confirmed earned credit, so a trusted account earned almost nothing for the
-- results that counted on its word (BOINC's adaptive replication credits those too).
--
-- `results.credited_day`: the UTC day (days since the epoch) whose `account_days` row
-- holds the result's credit, or NULL while it has none; one result per account and unit
-- holds it. `accounts.credit_nodes` / `credit_results`: the account's credit, net of what
-- was taken back. `confirmed_*` keep counting what another party confirmed (trust).
ALTER TABLE results ADD COLUMN credited_day INTEGER;
ALTER TABLE accounts ADD COLUMN credit_nodes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE accounts ADD COLUMN credit_results INTEGER NOT NULL DEFAULT 0;
UPDATE accounts SET credit_nodes = confirmed_nodes, credit_results = confirmed_results;
-- what earned credit before: a volunteer's valid result another account agreed with; its
-- day is not recorded, so the day it was received stands for it. Results a trusted account
-- got accepted alone before this version stay without credit (most of them are archived,
-- where the same rule applies on restore: store/sql/archive.rs).
UPDATE results SET credited_day = received_ms / 86400000
    WHERE verdict IN ('accepted', 'agree') AND account_id <> 'operator'
      AND EXISTS (SELECT 1 FROM results o WHERE o.unit_id = results.unit_id
                  AND o.digest = results.digest AND o.verdict IN ('accepted', 'agree')
                  AND o.account_id <> results.account_id);

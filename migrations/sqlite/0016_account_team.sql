-- Teams (docs/operator-guide.md, "Accounts and trust"): a volunteer account may be in one
-- team, named by the operator (`account add NAME --team T`, `account team NAME T`); the
-- stats page ranks teams by their accounts' credit beside the accounts, as BOINC and
-- distributed.net do. A team is there while an account is in it, so it needs no table of
-- its own. A label: nothing that decides trust, quorum or work reads it.
ALTER TABLE accounts ADD COLUMN team TEXT;

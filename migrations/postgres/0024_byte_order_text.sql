-- Every text column compares and orders its bytes (the "C" collation), as SQLite's do.
--
-- The keys the hot path joins and looks up (job, unit, lease, result, worker and account
-- ids, states, verdicts) are ASCII that the coordinator writes itself, and nothing orders
-- them for a reader's language. In a database whose default collation is a locale's,
-- every index insert and lookup on them compared through the locale's rules (`strcoll`)
-- all the same: on the load bench on one machine the server spent ~15% less CPU a
-- completed unit with byte comparisons, on another no measurable difference
-- (docs/benchmarks.md). And the two stores now order text alike (a dashboard's list, an
-- export). All text columns change together, so that a key and
-- every column it is joined with share a collation and each side's index still serves the
-- join; names a person typed (hostnames, account names) now sort by their bytes, as they
-- always did on SQLite. Each changed column's indexes are rebuilt once, here.
DO $$
DECLARE
    col record;
BEGIN
    FOR col IN
        SELECT c.table_name, c.column_name
        FROM information_schema.columns AS c
        JOIN information_schema.tables AS t
            ON t.table_schema = c.table_schema AND t.table_name = c.table_name
        WHERE c.table_schema = current_schema()
          AND t.table_type = 'BASE TABLE'
          AND c.data_type = 'text'
          AND c.table_name NOT LIKE '\_sqlx%'
          AND c.collation_name IS DISTINCT FROM 'C'
        ORDER BY c.table_name, c.ordinal_position
    LOOP
        EXECUTE format('ALTER TABLE %I ALTER COLUMN %I TYPE text COLLATE "C"',
                       col.table_name, col.column_name);
    END LOOP;
END
$$;

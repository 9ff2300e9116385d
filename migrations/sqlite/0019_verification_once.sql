-- A verification result is stored once per identity, unit and result: sending the same
-- result again adds nothing (a flood of repeats used to grow the table without bound).
-- An identity may hold a few different results for a unit (a flaky machine's evidence is
-- kept), and no more (the store refuses past that).
DELETE FROM verifications WHERE id NOT IN (
    SELECT MIN(id) FROM verifications GROUP BY suite, unit, class_id, worker_id, digest
);
CREATE UNIQUE INDEX verifications_once ON verifications(suite, unit, class_id, worker_id, digest);

-- Verification units: suites with exact expected results, hardware classes, and the
-- results each class produced. Verdicts are computed when read (digest vs expected), so
-- an expected result fixed later by agreement re-judges every stored result.

ALTER TABLE workers ADD COLUMN target_features TEXT NOT NULL DEFAULT '';
ALTER TABLE workers ADD COLUMN class_id TEXT NOT NULL DEFAULT '';

-- What two results must share to count as the same hardware: CPU model, arch, OS, rustc,
-- CPU features, engine kind and engine release. id = short SHA-256 of those fields.
CREATE TABLE hw_classes (
    id TEXT PRIMARY KEY,
    cpu_model TEXT NOT NULL,
    arch TEXT NOT NULL,
    os TEXT NOT NULL,
    rustc_version TEXT NOT NULL,
    target_features TEXT NOT NULL,
    engine_kind TEXT NOT NULL,
    engine_release TEXT NOT NULL,
    first_seen_ms INTEGER NOT NULL
);

CREATE TABLE suites (
    name TEXT PRIMARY KEY,
    created_ms INTEGER NOT NULL
);

CREATE TABLE suite_units (
    suite TEXT NOT NULL REFERENCES suites(name),
    name TEXT NOT NULL,
    position INTEGER NOT NULL,
    spec_json TEXT NOT NULL,            -- engine::suite::SuiteUnit without `expected`
    expected_json TEXT,                 -- engine::suite::SuiteExpected, NULL until known
    expected_source TEXT NOT NULL DEFAULT '', -- "given", or the classes that agreed
    PRIMARY KEY (suite, name)
);

CREATE TABLE verifications (
    id INTEGER PRIMARY KEY,
    suite TEXT NOT NULL,
    unit TEXT NOT NULL,
    class_id TEXT NOT NULL REFERENCES hw_classes(id),
    worker_id TEXT NOT NULL,
    hostname TEXT NOT NULL,
    engine_build TEXT NOT NULL,
    digest TEXT NOT NULL,               -- engine::unit::result_digest of the result
    result_json TEXT NOT NULL,
    nodes INTEGER NOT NULL,
    engine_seconds REAL NOT NULL,
    received_ms INTEGER NOT NULL
);
CREATE INDEX verifications_by_cell ON verifications(suite, class_id, unit, id);

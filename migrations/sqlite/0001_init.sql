-- e2fleet coordinator schema, version 1. Forward-only: never edit once landed.

CREATE TABLE jobs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    puzzle_json TEXT NOT NULL,
    order_spec TEXT NOT NULL,
    depths INTEGER NOT NULL,
    split_depth INTEGER NOT NULL,
    budget INTEGER NOT NULL,            -- node budget per run, 0 = none
    replicas INTEGER NOT NULL,
    spot_check REAL NOT NULL,
    state TEXT NOT NULL,                -- running | complete | cancelled
    created_ms INTEGER NOT NULL,
    finished_ms INTEGER,
    enumeration_json TEXT NOT NULL,     -- nodes per depth committed by the split enumeration
    enumeration_solutions INTEGER NOT NULL,
    split_json TEXT NOT NULL,           -- nodes per depth created by continuation splits
    accepted_json TEXT NOT NULL,        -- running sum of accepted unit results, per depth
    accepted_solutions INTEGER NOT NULL DEFAULT 0,
    conservation_ok INTEGER             -- NULL while running
);

CREATE TABLE units (
    id INTEGER PRIMARY KEY,
    job_id TEXT NOT NULL REFERENCES jobs(id),
    prefix_json TEXT NOT NULL,
    cursor_json TEXT NOT NULL DEFAULT '[]',
    parent_id INTEGER REFERENCES units(id),
    kind TEXT NOT NULL,                 -- root | continuation | split
    quorum INTEGER NOT NULL,            -- agreeing results required to accept
    needed INTEGER NOT NULL,            -- runs to collect before deciding
    state TEXT NOT NULL,                -- open (leasable) | busy (all runs out) | done | cancelled
    active_leases INTEGER NOT NULL DEFAULT 0,
    results INTEGER NOT NULL DEFAULT 0, -- valid results received
    accepted_result_id INTEGER,
    created_ms INTEGER NOT NULL
);
CREATE INDEX units_by_state ON units(state, id);
CREATE INDEX units_by_job ON units(job_id, state);
CREATE INDEX units_by_parent ON units(parent_id);

CREATE TABLE workers (
    id TEXT PRIMARY KEY,
    token_hash TEXT NOT NULL UNIQUE,
    hostname TEXT NOT NULL,
    cpu_model TEXT NOT NULL,
    cores INTEGER NOT NULL,
    arch TEXT NOT NULL,
    os TEXT NOT NULL,
    rustc_version TEXT NOT NULL,
    worker_version TEXT NOT NULL,
    engine_kind TEXT NOT NULL DEFAULT '',
    engine_build TEXT NOT NULL DEFAULT '',
    registered_ms INTEGER NOT NULL,
    last_seen_ms INTEGER NOT NULL,
    per_core_rate REAL NOT NULL DEFAULT 0,
    threads INTEGER NOT NULL DEFAULT 0,
    units_done INTEGER NOT NULL DEFAULT 0,
    errors INTEGER NOT NULL DEFAULT 0,
    quarantined INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX workers_by_host ON workers(hostname);

CREATE TABLE leases (
    id TEXT PRIMARY KEY,
    unit_id INTEGER NOT NULL REFERENCES units(id),
    worker_id TEXT NOT NULL REFERENCES workers(id),
    hostname TEXT NOT NULL,
    budget INTEGER NOT NULL,
    created_ms INTEGER NOT NULL,
    deadline_ms INTEGER NOT NULL,
    state TEXT NOT NULL                 -- active | reported | expired | cancelled | released
);
CREATE INDEX leases_by_state ON leases(state, deadline_ms);
CREATE INDEX leases_by_unit ON leases(unit_id);
CREATE INDEX leases_by_worker ON leases(worker_id, state);

CREATE TABLE results (
    id INTEGER PRIMARY KEY,
    job_id TEXT NOT NULL REFERENCES jobs(id),
    unit_id INTEGER NOT NULL REFERENCES units(id),
    lease_id TEXT NOT NULL UNIQUE REFERENCES leases(id),
    worker_id TEXT NOT NULL REFERENCES workers(id),
    hostname TEXT NOT NULL,
    cpu_model TEXT NOT NULL,
    engine_kind TEXT NOT NULL,
    engine_build TEXT NOT NULL,
    digest TEXT NOT NULL,               -- SHA-256 of the canonical result: equal = agree
    result_json TEXT NOT NULL,
    committed INTEGER NOT NULL,
    solutions INTEGER NOT NULL,
    max_depth INTEGER NOT NULL,
    engine_seconds REAL NOT NULL,
    verdict TEXT NOT NULL,              -- pending | accepted | agree | wrong
    received_ms INTEGER NOT NULL
);
CREATE INDEX results_by_unit ON results(unit_id);
CREATE INDEX results_by_time ON results(received_ms);
CREATE INDEX results_by_job ON results(job_id, verdict);

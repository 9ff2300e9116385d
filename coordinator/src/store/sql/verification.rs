//! Verification (`migrations/sqlite/0003_verification.sql`): hardware classes, suites and their
//! units, suite results.

use e2fleet_engine::UnitResult;
use e2fleet_engine::suite::{SuiteExpected, SuiteUnit};
use e2fleet_proto::api::{HostInfo, JobId, WorkerId};

use super::{ConnExt, Row, SqlTx, args};
use crate::store::tx::{StoreResult, Verifications};
use crate::store::{
    AuditRecord, ClassRecord, NewVerification, ResultBody, SuiteUnitRecord, VerificationRecord,
    parse_json,
};

fn verification_from_row(r: &Row) -> StoreResult<VerificationRecord> {
    Ok(VerificationRecord {
        id: r.get(0)?,
        suite: r.get(1)?,
        unit: r.get(2)?,
        class_id: r.get(3)?,
        hostname: r.get(4)?,
        engine_build: r.get(5)?,
        digest: r.get(6)?,
        nodes: r.get::<i64>(7)? as u64,
        engine_seconds: r.get(8)?,
        received_ms: r.get(9)?,
        worker_id: r.parsed(10)?,
        account_id: r.parsed(11)?,
    })
}

fn spec_json(u: &SuiteUnit) -> String {
    let mut spec = u.clone();
    spec.expected = None;
    serde_json::to_string(&spec).expect("suite units serialise")
}

impl Verifications for SqlTx<'_> {
    fn upsert_class(&mut self, id: &str, h: &HostInfo, now_ms: i64) -> StoreResult<()> {
        self.c.execute("INSERT INTO hw_classes (id, cpu_model, arch, os, rustc_version, target_features, engine_kind, engine_release, first_seen_ms) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING", args![
            id,
            h.cpu_model,
            h.arch,
            h.os,
            h.rustc_version,
            h.target_features,
            h.engine_kind.as_str(),
            h.engine_release,
            now_ms
        ])?;
        Ok(())
    }

    fn classes_of_suite(&mut self, suite: &str) -> StoreResult<Vec<ClassRecord>> {
        let rows = self.c.map("SELECT id, cpu_model, arch, os, rustc_version, target_features, engine_kind, engine_release, first_seen_ms \
             FROM hw_classes WHERE id IN (SELECT DISTINCT class_id FROM verifications WHERE suite = ?) ORDER BY first_seen_ms, id", args![suite], |r| {
            Ok(ClassRecord {
                id: r.get(0)?,
                cpu_model: r.get(1)?,
                arch: r.get(2)?,
                os: r.get(3)?,
                rustc_version: r.get(4)?,
                target_features: r.get(5)?,
                engine_kind: r.parsed(6)?,
                engine_release: r.get(7)?,
                first_seen_ms: r.get(8)?,
            })
        })?;
        Ok(rows)
    }

    fn replace_suite(
        &mut self,
        suite: &str,
        units: &[SuiteUnitRecord],
        now_ms: i64,
    ) -> StoreResult<()> {
        self.c
            .execute("DELETE FROM suite_units WHERE suite = ?", args![suite])?;
        self.c.execute("INSERT INTO suites (name, created_ms) VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET created_ms = excluded.created_ms", args![suite, now_ms])?;
        let insert = "INSERT INTO suite_units (suite, name, position, spec_json, expected_json, expected_source) VALUES (?, ?, ?, ?, ?, ?)";
        for (position, u) in units.iter().enumerate() {
            self.c.execute(
                insert,
                args![
                    suite,
                    u.name,
                    position as i64,
                    spec_json(&u.spec),
                    u.expected
                        .as_ref()
                        .map(|e| serde_json::to_string(e).expect("expected results serialise")),
                    u.expected_source
                ],
            )?;
        }
        Ok(())
    }

    fn suite_units(&mut self, suite: &str) -> StoreResult<Vec<SuiteUnitRecord>> {
        let rows = self.c.map("SELECT name, spec_json, expected_json, expected_source FROM suite_units WHERE suite = ? ORDER BY position", args![suite], |r| {
            let spec: String = r.get(1)?;
            let expected: Option<String> = r.get(2)?;
            Ok(SuiteUnitRecord {
                name: r.get(0)?,
                spec: parse_json(&spec, "suite unit")?,
                expected: expected
                    .map(|e| parse_json::<SuiteExpected>(&e, "expected result"))
                    .transpose()
                    ?,
                expected_source: r.get(3)?,
            })
        })?;
        Ok(rows)
    }

    fn suite_names(&mut self) -> StoreResult<Vec<String>> {
        let rows = self.c.map(
            "SELECT name FROM suites ORDER BY created_ms, name",
            &[],
            |r| r.get(0),
        )?;
        Ok(rows)
    }

    fn set_expected(
        &mut self,
        suite: &str,
        unit: &str,
        expected: &SuiteExpected,
        source: &str,
    ) -> StoreResult<()> {
        self.c.execute("UPDATE suite_units SET expected_json = ?, expected_source = ? WHERE suite = ? AND name = ? AND expected_json IS NULL", args![
            serde_json::to_string(expected).expect("expected results serialise"),
            source,
            suite,
            unit
        ])?;
        Ok(())
    }

    fn verification_results_of_identity(
        &mut self,
        suite: &str,
        unit: &str,
        class_id: &str,
        worker: WorkerId,
    ) -> StoreResult<u64> {
        let n: i64 = self.c.one(
            "SELECT COUNT(*) FROM verifications WHERE suite = ? AND unit = ? AND class_id = ? AND worker_id = ?",
            args![suite, unit, class_id, worker.to_string()],
        )?;
        Ok(n as u64)
    }

    fn insert_verification(&mut self, v: &NewVerification) -> StoreResult<()> {
        // the same result again from the same identity adds nothing
        self.c.execute("INSERT INTO verifications (suite, unit, class_id, worker_id, hostname, engine_build, digest, result_json, nodes, engine_seconds, received_ms, account_id) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
             ON CONFLICT (suite, unit, class_id, worker_id, digest) DO NOTHING", args![
            v.suite,
            v.unit,
            v.class_id,
            v.worker_id.to_string(),
            v.hostname,
            v.engine_build,
            v.digest,
            v.body.0,
            v.nodes as i64,
            v.engine_seconds,
            v.received_ms,
            v.account_id.as_str()
        ])?;
        Ok(())
    }

    fn verifications_of_suite(&mut self, suite: &str) -> StoreResult<Vec<VerificationRecord>> {
        let rows = self.c.map("SELECT id, suite, unit, class_id, hostname, engine_build, digest, nodes, engine_seconds, received_ms, \
               worker_id, account_id FROM verifications WHERE suite = ? ORDER BY id", args![suite], verification_from_row)?;
        Ok(rows)
    }

    fn verification_body(
        &mut self,
        suite: &str,
        unit: &str,
        digest: &str,
    ) -> StoreResult<Option<UnitResult>> {
        let body: Option<String> = self.c.map_row("SELECT result_json FROM verifications WHERE suite = ? AND unit = ? AND digest = ? ORDER BY id LIMIT 1", args![suite, unit, digest], |r| r.get(0))?;
        body.map(|b| ResultBody(b).decode()).transpose()
    }

    fn unflag_class(&mut self, class: &str, now_ms: i64) -> StoreResult<()> {
        self.c.execute(
            "INSERT INTO class_unflags (class_id, unflagged_ms) VALUES (?1, ?2) \
                 ON CONFLICT(class_id) DO UPDATE SET unflagged_ms = excluded.unflagged_ms",
            args![class, now_ms],
        )?;
        Ok(())
    }

    fn class_unflags(&mut self) -> StoreResult<Vec<(String, i64)>> {
        let rows = self.c.map(
            "SELECT class_id, unflagged_ms FROM class_unflags",
            &[],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        Ok(rows)
    }

    fn insert_audit(&mut self, a: &AuditRecord) -> StoreResult<()> {
        self.c
            .execute("INSERT INTO audits (job_id, worker_id, account_id, class_id, hostname, engine_kind, engine_build, \
                 certificate_sha256, merkle_root, structure_ok, units_checked, units_agreed, disagreed_json, unknown, \
                 engine_seconds, received_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", args![
                a.job_id.to_string(),
                a.worker_id.to_string(),
                a.account_id.to_string(),
                a.class_id,
                a.hostname,
                a.engine_kind.as_str(),
                a.engine_build,
                a.certificate_sha256,
                a.merkle_root,
                a.structure_ok,
                a.units_checked as i64,
                a.units_agreed as i64,
                serde_json::to_string(&a.disagreed).expect("ids serialise"),
                a.unknown as i64,
                a.engine_seconds,
                a.received_ms
            ])?;
        Ok(())
    }

    fn audits_of_job(&mut self, job: JobId) -> StoreResult<Vec<AuditRecord>> {
        let rows = self.c.map("SELECT job_id, worker_id, account_id, class_id, hostname, engine_kind, engine_build, certificate_sha256, \
             merkle_root, structure_ok, units_checked, units_agreed, disagreed_json, unknown, engine_seconds, received_ms \
             FROM audits WHERE job_id = ? ORDER BY received_ms, id", args![job.to_string()], |r| {
            Ok((
                AuditRecord {
                    job_id: r.parsed(0)?,
                    worker_id: r.parsed(1)?,
                    account_id: r.parsed(2)?,
                    class_id: r.get(3)?,
                    hostname: r.get(4)?,
                    engine_kind: r.parsed(5)?,
                    engine_build: r.get(6)?,
                    certificate_sha256: r.get(7)?,
                    merkle_root: r.get(8)?,
                    structure_ok: r.get(9)?,
                    units_checked: r.get::<i64>(10)? as u64,
                    units_agreed: r.get::<i64>(11)? as u64,
                    disagreed: Vec::new(),
                    unknown: r.get::<i64>(13)? as u64,
                    engine_seconds: r.get(14)?,
                    received_ms: r.get(15)?,
                },
                r.get::<String>(12)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (mut audit, disagreed) = row;
            audit.disagreed = parse_json(&disagreed, "audit units")?;
            out.push(audit);
        }
        Ok(out)
    }
}

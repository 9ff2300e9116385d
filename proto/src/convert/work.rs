//! Conversions of what workers and the coordinator exchange.

use e2fleet_engine::Unit;
use e2fleet_engine::suite::SuiteUnit;

use super::*;
use crate::api::{
    AuditOutcome, AuditSubmission, AuditedUnit, Heartbeat, HostInfo, JobCreated, JobRequest,
    JobSpec, Lease, Probe, Report, ReportOutcome, SelfTest, SuiteResult, UnitId, UnitVerdict,
    VerificationOutcome,
};

impl From<&HostInfo> for v2::HostInfo {
    fn from(h: &HostInfo) -> v2::HostInfo {
        v2::HostInfo {
            hostname: h.hostname.clone(),
            cpu_model: h.cpu_model.clone(),
            cores: h.cores,
            arch: h.arch.clone(),
            os: h.os.clone(),
            rustc_version: h.rustc_version.clone(),
            worker_version: h.worker_version.clone(),
            target_features: h.target_features.clone(),
            engine_kind: engine_kind_to_wire(h.engine_kind).into(),
            engine_release: h.engine_release.clone(),
        }
    }
}

impl TryFrom<&v2::HostInfo> for HostInfo {
    type Error = WireError;
    fn try_from(h: &v2::HostInfo) -> Result<HostInfo, WireError> {
        Ok(HostInfo {
            hostname: h.hostname.clone(),
            cpu_model: h.cpu_model.clone(),
            cores: h.cores,
            arch: h.arch.clone(),
            os: h.os.clone(),
            rustc_version: h.rustc_version.clone(),
            worker_version: h.worker_version.clone(),
            target_features: h.target_features.clone(),
            engine_kind: engine_kind_from_wire(h.engine_kind, "host.engine_kind")?,
            engine_release: h.engine_release.clone(),
        })
    }
}

impl From<&JobRequest> for v2::SubmitJobRequest {
    fn from(r: &JobRequest) -> v2::SubmitJobRequest {
        v2::SubmitJobRequest {
            name: r.name.clone(),
            puzzle_json: r.puzzle_json.clone(),
            order: r.order.clone().unwrap_or_default(),
            split_depth: r.split_depth.unwrap_or(0) as u32,
            target_units: r.target_units.unwrap_or(0) as u32,
            budget: r.budget.unwrap_or(0),
            replicas: r.replicas,
            spot_check: r.spot_check,
            priority: r.priority,
            share: r.share,
        }
    }
}

impl From<&v2::SubmitJobRequest> for JobRequest {
    fn from(r: &v2::SubmitJobRequest) -> JobRequest {
        JobRequest {
            name: r.name.clone(),
            puzzle_json: r.puzzle_json.clone(),
            order: (!r.order.is_empty()).then(|| r.order.clone()),
            split_depth: (r.split_depth > 0).then_some(r.split_depth as usize),
            target_units: (r.target_units > 0).then_some(r.target_units as usize),
            budget: (r.budget > 0).then_some(r.budget),
            replicas: r.replicas.max(1),
            spot_check: r.spot_check,
            priority: r.priority,
            share: if r.share == 0.0 { 1.0 } else { r.share },
        }
    }
}

impl From<&JobCreated> for v2::SubmitJobResponse {
    fn from(c: &JobCreated) -> v2::SubmitJobResponse {
        v2::SubmitJobResponse {
            job_id: c.job_id.to_string(),
            units: c.units as u64,
            split_depth: c.split_depth as u32,
            warnings: c.warnings.clone(),
        }
    }
}

impl TryFrom<&v2::SubmitJobResponse> for JobCreated {
    type Error = WireError;
    fn try_from(r: &v2::SubmitJobResponse) -> Result<JobCreated, WireError> {
        Ok(JobCreated {
            job_id: id_from_wire(&r.job_id)?,
            units: r.units as usize,
            split_depth: r.split_depth as usize,
            warnings: r.warnings.clone(),
        })
    }
}

fn unit_from_wire(prefix: &[v2::Placement], cursor: &[v2::Placement]) -> Result<Unit, WireError> {
    Ok(Unit {
        prefix: path_from_wire(prefix, "prefix")?,
        cursor: path_from_wire(cursor, "cursor")?,
    })
}

impl From<&Lease> for v2::Lease {
    fn from(l: &Lease) -> v2::Lease {
        v2::Lease {
            lease_id: l.lease_id.to_string(),
            unit_id: l.unit_id.0,
            job_id: l.job_id.to_string(),
            prefix: path_to_wire(&l.unit.prefix),
            cursor: path_to_wire(&l.unit.cursor),
            budget: l.budget.unwrap_or(0),
            deadline_unix_ms: l.deadline_ms,
            probe: l.probe.map(|p| v2::Probe {
                particles: p.particles,
                seed: p.seed,
            }),
        }
    }
}

impl TryFrom<&v2::Lease> for Lease {
    type Error = WireError;
    fn try_from(l: &v2::Lease) -> Result<Lease, WireError> {
        Ok(Lease {
            lease_id: id_from_wire(&l.lease_id)?,
            unit_id: UnitId(l.unit_id),
            job_id: id_from_wire(&l.job_id)?,
            unit: unit_from_wire(&l.prefix, &l.cursor)?,
            budget: (l.budget > 0).then_some(l.budget),
            deadline_ms: l.deadline_unix_ms,
            probe: match &l.probe {
                None => None,
                Some(p) if p.particles == 0 => {
                    return Err(invalid("a probe of no boards".into()));
                }
                Some(p) => Some(Probe {
                    particles: p.particles,
                    seed: p.seed,
                }),
            },
        })
    }
}

impl From<&SelfTest> for v2::SelfTest {
    fn from(t: &SelfTest) -> v2::SelfTest {
        v2::SelfTest {
            prefix: path_to_wire(&t.unit.prefix),
            cursor: path_to_wire(&t.unit.cursor),
            budget: t.budget.unwrap_or(0),
            expected: Some(result_to_wire(&t.expected)),
        }
    }
}

impl From<&JobSpec> for v2::GetJobSpecResponse {
    fn from(s: &JobSpec) -> v2::GetJobSpecResponse {
        v2::GetJobSpecResponse {
            job_id: s.job_id.to_string(),
            puzzle_json: s.puzzle_json.clone(),
            order: s.order.clone(),
            self_tests: s.self_tests.iter().map(Into::into).collect(),
            probe_particles: s.probe_particles.unwrap_or(0),
        }
    }
}

impl TryFrom<&v2::GetJobSpecResponse> for JobSpec {
    type Error = WireError;
    fn try_from(s: &v2::GetJobSpecResponse) -> Result<JobSpec, WireError> {
        let self_tests = s
            .self_tests
            .iter()
            .map(|t| {
                let expected = t
                    .expected
                    .as_ref()
                    .ok_or_else(|| invalid("a self-test without its expected result".into()))?;
                Ok(SelfTest {
                    unit: unit_from_wire(&t.prefix, &t.cursor)?,
                    budget: (t.budget > 0).then_some(t.budget),
                    expected: result_from_wire(expected, expected.nodes_by_depth.len())?,
                })
            })
            .collect::<Result<_, WireError>>()?;
        Ok(JobSpec {
            job_id: id_from_wire(&s.job_id)?,
            puzzle_json: s.puzzle_json.clone(),
            order: s.order.clone(),
            self_tests,
            probe_particles: (s.probe_particles > 0).then_some(s.probe_particles),
        })
    }
}

impl From<&Report> for v2::ReportResultRequest {
    fn from(r: &Report) -> v2::ReportResultRequest {
        v2::ReportResultRequest {
            lease_id: r.lease_id.to_string(),
            unit_id: r.unit_id.0,
            result: Some(result_to_wire(&r.result)),
            engine_seconds: r.engine_seconds,
            engine_kind: engine_kind_to_wire(r.engine_kind).into(),
            engine_build: r.engine_build.clone(),
        }
    }
}

impl TryFrom<&v2::ReportResultRequest> for Report {
    type Error = WireError;
    fn try_from(r: &v2::ReportResultRequest) -> Result<Report, WireError> {
        let wire = r
            .result
            .as_ref()
            .ok_or_else(|| invalid("missing result".into()))?;
        Ok(Report {
            lease_id: id_from_wire(&r.lease_id)?,
            unit_id: UnitId(r.unit_id),
            // the length is checked against the job's plan by the coordinator
            result: result_from_wire(wire, wire.nodes_by_depth.len())?,
            engine_seconds: r.engine_seconds,
            engine_kind: engine_kind_from_wire(r.engine_kind, "engine_kind")?,
            engine_build: r.engine_build.clone(),
        })
    }
}

impl From<&Heartbeat> for v2::HeartbeatRequest {
    fn from(h: &Heartbeat) -> v2::HeartbeatRequest {
        v2::HeartbeatRequest {
            leases: h
                .leases
                .iter()
                .map(|(id, committed)| v2::LeaseProgress {
                    lease_id: id.to_string(),
                    committed: *committed,
                })
                .collect(),
            per_core_nodes_per_s: h.per_core_rate,
            threads: h.threads,
            paused: h.paused.clone(),
            network_wait: h.network_wait,
            round_trip_ms: h.round_trip_ms,
            platform: h.platform.clone(),
        }
    }
}

/// A finite number clamped to `low..=high`; 0 for NaN or an infinity (a label a client
/// sends must not poison an average).
fn label_number(x: f64, low: f64, high: f64) -> f64 {
    if x.is_finite() {
        x.clamp(low, high)
    } else {
        0.0
    }
}

impl TryFrom<&v2::HeartbeatRequest> for Heartbeat {
    type Error = WireError;
    fn try_from(r: &v2::HeartbeatRequest) -> Result<Heartbeat, WireError> {
        Ok(Heartbeat {
            leases: r
                .leases
                .iter()
                .map(|l| Ok((id_from_wire(&l.lease_id)?, l.committed)))
                .collect::<Result<_, WireError>>()?,
            per_core_rate: r.per_core_nodes_per_s,
            threads: r.threads,
            paused: r.paused.clone(),
            network_wait: label_number(r.network_wait, 0.0, 1.0),
            round_trip_ms: label_number(r.round_trip_ms, 0.0, 3_600_000.0),
            // a label only (which release to offer): anything that cannot name one is none
            platform: if crate::release::is_path_safe(&r.platform) {
                r.platform.clone()
            } else {
                String::new()
            },
        })
    }
}

impl From<&ReportOutcome> for v2::ReportResultResponse {
    fn from(o: &ReportOutcome) -> v2::ReportResultResponse {
        v2::ReportResultResponse {
            status: report_status_to_wire(o.status).into(),
            detail: o.detail.clone(),
        }
    }
}

impl TryFrom<&v2::ReportResultResponse> for ReportOutcome {
    type Error = WireError;
    fn try_from(o: &v2::ReportResultResponse) -> Result<ReportOutcome, WireError> {
        Ok(ReportOutcome {
            status: report_status_from_wire(o.status)?,
            detail: o.detail.clone(),
        })
    }
}

/// A verification unit as handed to workers (its expected result is not sent).
pub fn suite_unit_to_wire(u: &SuiteUnit) -> v2::SuiteUnitSpec {
    v2::SuiteUnitSpec {
        name: u.name.clone(),
        puzzle: u.puzzle.clone(),
        order: u.order.clone(),
        prefix_depth: u.prefix_depth as u32,
        prefix_index: u.prefix_index as u64,
        budget: u.budget.unwrap_or(0),
        speed: u.speed,
    }
}

/// A verification unit from the wire, without an expected result.
pub fn suite_unit_from_wire(u: &v2::SuiteUnitSpec) -> SuiteUnit {
    SuiteUnit {
        name: u.name.clone(),
        puzzle: u.puzzle.clone(),
        order: u.order.clone(),
        prefix_depth: u.prefix_depth as usize,
        prefix_index: u.prefix_index as usize,
        budget: (u.budget > 0).then_some(u.budget),
        speed: u.speed,
        expected: None,
    }
}

impl From<&SuiteResult> for v2::VerificationResult {
    fn from(r: &SuiteResult) -> v2::VerificationResult {
        v2::VerificationResult {
            unit: r.unit.clone(),
            result: Some(result_to_wire(&r.result)),
            engine_seconds: r.engine_seconds,
            engine_build: r.engine_build.clone(),
        }
    }
}

impl TryFrom<&v2::VerificationResult> for SuiteResult {
    type Error = WireError;
    fn try_from(v: &v2::VerificationResult) -> Result<SuiteResult, WireError> {
        let wire = v
            .result
            .as_ref()
            .ok_or_else(|| invalid(format!("unit {}: no result", v.unit)))?;
        Ok(SuiteResult {
            unit: v.unit.clone(),
            result: result_from_wire(wire, wire.nodes_by_depth.len())
                .map_err(|e| invalid(format!("unit {}: {e}", v.unit)))?,
            engine_seconds: v.engine_seconds,
            engine_build: v.engine_build.clone(),
        })
    }
}

impl From<&VerificationOutcome> for v2::SubmitVerificationResponse {
    fn from(o: &VerificationOutcome) -> v2::SubmitVerificationResponse {
        v2::SubmitVerificationResponse {
            class_id: o.class_id.clone(),
            class_flagged: o.class_flagged,
            verdicts: o
                .verdicts
                .iter()
                .map(|v| v2::UnitVerdict {
                    unit: v.unit.clone(),
                    verdict: verdict_to_wire(v.verdict).into(),
                    detail: v.detail.clone(),
                })
                .collect(),
        }
    }
}

impl TryFrom<&v2::SubmitVerificationResponse> for VerificationOutcome {
    type Error = WireError;
    fn try_from(o: &v2::SubmitVerificationResponse) -> Result<VerificationOutcome, WireError> {
        Ok(VerificationOutcome {
            class_id: o.class_id.clone(),
            class_flagged: o.class_flagged,
            verdicts: o
                .verdicts
                .iter()
                .map(|v| {
                    Ok(UnitVerdict {
                        unit: v.unit.clone(),
                        verdict: verdict_from_wire(v.verdict)?,
                        detail: v.detail.clone(),
                    })
                })
                .collect::<Result<_, WireError>>()?,
        })
    }
}

impl From<&AuditSubmission> for v2::SubmitAuditRequest {
    fn from(a: &AuditSubmission) -> v2::SubmitAuditRequest {
        v2::SubmitAuditRequest {
            job_id: a.job_id.to_string(),
            certificate_sha256: a.certificate_sha256.clone(),
            merkle_root: a.merkle_root.clone(),
            structure_ok: a.structure_ok,
            units: a
                .units
                .iter()
                .map(|u| v2::AuditedUnit {
                    unit_id: u.unit.0,
                    digest: u.digest.clone(),
                    nodes: u.nodes,
                })
                .collect(),
            engine_kind: engine_kind_to_wire(a.engine_kind).into(),
            engine_build: a.engine_build.clone(),
            engine_seconds: a.engine_seconds,
        }
    }
}

/// A SHA-256 in hex, as digests and roots are written.
fn sha256_hex(text: &str, field: &str) -> Result<String, WireError> {
    if text.len() == 64
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        Ok(text.to_string())
    } else {
        Err(invalid(format!("{field}: not a SHA-256 in lower-case hex")))
    }
}

impl TryFrom<&v2::SubmitAuditRequest> for AuditSubmission {
    type Error = WireError;
    fn try_from(a: &v2::SubmitAuditRequest) -> Result<AuditSubmission, WireError> {
        if !a.engine_seconds.is_finite() || a.engine_seconds < 0.0 {
            return Err(invalid("engine_seconds: not a duration".into()));
        }
        Ok(AuditSubmission {
            job_id: id_from_wire(&a.job_id)?,
            certificate_sha256: sha256_hex(&a.certificate_sha256, "certificate_sha256")?,
            merkle_root: sha256_hex(&a.merkle_root, "merkle_root")?,
            structure_ok: a.structure_ok,
            units: a
                .units
                .iter()
                .map(|u| {
                    Ok(AuditedUnit {
                        unit: UnitId(u.unit_id),
                        digest: sha256_hex(&u.digest, "units.digest")?,
                        nodes: u.nodes,
                    })
                })
                .collect::<Result<_, WireError>>()?,
            engine_kind: engine_kind_from_wire(a.engine_kind, "engine_kind")?,
            engine_build: a.engine_build.clone(),
            engine_seconds: a.engine_seconds,
        })
    }
}

impl From<&AuditOutcome> for v2::SubmitAuditResponse {
    fn from(o: &AuditOutcome) -> v2::SubmitAuditResponse {
        v2::SubmitAuditResponse {
            class_id: o.class_id.clone(),
            agreed: o.agreed,
            disagreed: o.disagreed.iter().map(|u| u.0).collect(),
            unknown: o.unknown.iter().map(|u| u.0).collect(),
        }
    }
}

impl From<&v2::SubmitAuditResponse> for AuditOutcome {
    fn from(o: &v2::SubmitAuditResponse) -> AuditOutcome {
        AuditOutcome {
            class_id: o.class_id.clone(),
            agreed: o.agreed,
            disagreed: o.disagreed.iter().copied().map(UnitId).collect(),
            unknown: o.unknown.iter().copied().map(UnitId).collect(),
        }
    }
}

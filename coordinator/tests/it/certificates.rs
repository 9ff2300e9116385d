//! Certificates and audits through the real API: a budgeted job walked by simulated
//! workers, exported (gRPC stream and HTTP), audited whole with the reference walker,
//! and audits sent back (agreeing, disagreeing, naming units the job does not have).

use e2fleet_engine::certificate::audit::{check_structure, compare_run, spec, unit_of};
use e2fleet_engine::certificate::{Certificate, decode};
use e2fleet_engine::search::{NoControl, RunOptions, Walker};
use e2fleet_engine::unit::result_digest;
use e2fleet_proto::v2;

use crate::harness::*;
use crate::http_api::get;

const SET1_5X5: &str = "brendan/set1/pieces_05x05.txt";

/// Re-runs every decided unit; (unit id, digest) of each, after checking it to the digit.
fn rerun_all(cert: &Certificate) -> Vec<(u64, String)> {
    let s = spec(cert).unwrap();
    let options = RunOptions {
        budget: cert.budget,
        max_solutions: cert.solutions_cap,
    };
    cert.units
        .iter()
        .filter(|u| u.result.is_some())
        .map(|u| {
            let r = Walker::new(&s.plan)
                .run(&unit_of(&s, u).unwrap(), options, &mut NoControl)
                .unwrap();
            compare_run(&s, u, &r).unwrap();
            (u.id, result_digest(&r))
        })
        .collect()
}

fn audit_request(job: &str, cert: &Certificate, units: &[(u64, String)]) -> v2::SubmitAuditRequest {
    v2::SubmitAuditRequest {
        job_id: job.into(),
        certificate_sha256: cert.digest(),
        merkle_root: cert.merkle_root.clone(),
        structure_ok: true,
        units: units
            .iter()
            .map(|(id, digest)| v2::AuditedUnit {
                unit_id: *id as i64,
                digest: digest.clone(),
                nodes: 0,
            })
            .collect(),
        engine_kind: v2::EngineKind::Reference.into(),
        engine_build: "sim".into(),
        engine_seconds: 0.5,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_job_exports_a_certificate_that_audits_whole_and_audits_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let job = c.submit(SET1_5X5, 2, 2_000, 1).await;
    let job_id = job.parse().unwrap();

    // a running job has no final certificate; a partial one lists every unit open
    let mut admin_api = c.admin().await;
    let refused = admin_api
        .export_certificate(job_id, false)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("complete"), "{refused}");
    let partial = decode(&admin_api.export_certificate(job_id, true).await.unwrap()).unwrap();
    assert!(!partial.job.complete);
    assert!(partial.units.iter().all(|u| u.result.is_none()));
    let s = spec(&partial).unwrap();
    let structure = check_structure(&partial, &s).unwrap();
    assert_eq!(structure.decided, 0);

    let mut w = SimWorker::register(&c.url, "w1", Behaviour::Honest).await;
    while w.work(50).await > 0 {}
    let doc = c.job(&job).await;
    assert_eq!(doc["state"], "complete", "{doc}");

    let file = admin_api.export_certificate(job_id, false).await.unwrap();
    let cert = decode(&file).unwrap();
    assert!(cert.job.complete);
    assert_eq!(cert.totals.iter().sum::<u64>(), 113_211);
    assert_eq!(cert.solutions_count, 16);
    assert_eq!(cert.solutions.len(), 16);
    assert!(
        cert.units.iter().any(|u| !u.cursor.is_empty()),
        "continuations exported"
    );
    let structure = check_structure(&cert, &spec(&cert).unwrap()).unwrap();
    assert_eq!(structure.nodes, 113_211);
    assert_eq!(structure.decided, cert.units.len());
    let reruns = rerun_all(&cert);
    assert_eq!(reruns.len(), cert.units.len());

    // the same file over HTTP, with the admin token only
    let path = format!("/api/jobs/{job}/certificate");
    assert_eq!(get(&c.url, &path).await.0, 401);

    // an agreeing audit, then one with a wrong digest and a unit the job does not have
    let r = w
        .client
        .submit_audit(w.req(audit_request(&job, &cert, &reruns)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.agreed as usize, reruns.len());
    assert!(r.disagreed.is_empty() && r.unknown.is_empty());
    let mut forged = reruns[..3].to_vec();
    forged[1].1 = "0".repeat(64);
    forged.push((999_999, "1".repeat(64)));
    let r = w
        .client
        .submit_audit(w.req(audit_request(&job, &cert, &forged)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.agreed, 2);
    assert_eq!(r.disagreed, vec![forged[1].0 as i64]);
    assert_eq!(r.unknown, vec![999_999]);

    // the job's audit record: one class, both audits, the disagreement named
    let (status, body) = get(&c.url, &format!("/api/jobs/{job}/audits")).await;
    assert_eq!(status, 200, "{body}");
    let audits: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(audits["total"], 2);
    let class = &audits["classes"][0];
    assert_eq!(class["audits"], 2);
    assert_eq!(class["units_checked"], reruns.len() as u64 + 4);
    assert_eq!(class["units_agreed"], reruns.len() as u64 + 2);
    assert_eq!(class["disagreed"][0], forged[1].0);
    assert_eq!(audits["audits"][0]["certificate_sha256"], cert.digest());

    // a malformed audit is refused before anything is stored
    let mut bad = audit_request(&job, &cert, &reruns[..1]);
    bad.merkle_root = "not hex".into();
    let err = w.client.submit_audit(w.req(bad)).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
    c.stop().await;
}

//! A coordinator on the open internet, tried as an attacker would: identities without
//! limit, lease hoarding, verification floods, token guessing through either door, labels
//! that forge log lines, the public worker list as a fingerprint source, secrets in help
//! texts. Each test is the attack, and what it must not achieve. (Holding connections and
//! streams is `hostile_connections.rs`'s.)

use std::process::Command;

use e2fleet_coordinator::fleet::AccountLimits;
use e2fleet_proto::v2;
use tonic::Code;

use crate::harness::*;

/// A registration of `account`'s token naming an earlier identity it never had.
async fn register_claiming(url: &str, enroll: &str, host: &str) -> Result<(), tonic::Status> {
    let mut client = v2::worker_service_client::WorkerServiceClient::connect(url.to_string())
        .await
        .unwrap();
    client
        .register_worker(v2::RegisterWorkerRequest {
            enroll_token: enroll.into(),
            host: Some(v2::HostInfo {
                hostname: host.into(),
                cpu_model: "x".into(),
                cores: 64,
                arch: "x86_64".into(),
                os: "linux".into(),
                worker_version: "test".into(),
                engine_kind: v2::EngineKind::Reference.into(),
                engine_release: "reference-test".into(),
                ..Default::default()
            }),
            previous_worker_id: uuid::Uuid::new_v4().to_string(),
            previous_worker_token: "made-up".into(),
        })
        .await
        .map(|_| ())
}

/// Naming a made-up earlier identity made a new one without counting it: an account
/// registered thousands in seconds. Every new identity counts now, and an account has
/// only so many a day.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_made_up_earlier_identity_is_a_new_one_and_counts() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start_with_accounts(
        &temp_db(&dir),
        AccountLimits {
            identities_per_day: 40,
            leases: 512,
        },
    )
    .await;
    let (_, token) = c.admin().await.add_account("mallory").await.unwrap();
    let mut made = 0;
    let mut refused = Vec::new();
    for i in 0..60 {
        match register_claiming(&c.url, &token, &format!("m-{i}")).await {
            Ok(()) => made += 1,
            Err(e) => refused.push(e),
        }
    }
    assert_eq!(made, 40, "{refused:?}");
    assert!(
        refused
            .iter()
            .all(|e| e.code() == Code::ResourceExhausted && e.message().contains("identities")),
        "{refused:?}"
    );
    c.stop().await;
}

/// A coordinator whose accounts hold at most 100 leases, a 6x6 job split at depth 4, and
/// nine identities (64 leases each) of the account "hoarder"; the job's id.
async fn hoarder(dir: &tempfile::TempDir) -> (Coordinator, String, Vec<SimWorker>) {
    let c = Coordinator::start_with_accounts(
        &temp_db(dir),
        AccountLimits {
            identities_per_day: 256,
            leases: 100,
        },
    )
    .await;
    let job = c.submit("brendan/set1/pieces_06x06.txt", 4, 0, 1).await;
    let (_, token) = c.admin().await.add_account("hoarder").await.unwrap();
    let mut identities = Vec::new();
    for i in 0..9 {
        let name = format!("h-{i}");
        identities.push(
            SimWorker::register_with(&c.url, &token, &name, "x", 64, Behaviour::Honest).await,
        );
    }
    (c, job, identities)
}

/// Nine identities of one account (64 leases each) held a whole job while an honest
/// worker got nothing. An account holds at most its share now, however many identities.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_account_cannot_hold_a_whole_job() {
    let dir = tempfile::tempdir().unwrap();
    let (c, job, identities) = hoarder(&dir).await;
    let total = c.job(&job).await["units"]["open"].as_u64().unwrap();
    assert!(total > 300, "{total} units");
    let mut held = 0;
    for mut w in identities {
        for _ in 0..4 {
            held += w.lease(64).await.map(|l| l.len()).unwrap_or(0);
        }
    }
    assert_eq!(held, 100, "the account holds its share");
    let started = std::time::Instant::now();
    let mut honest = SimWorker::register(&c.url, "honest", Behaviour::Honest).await;
    let got = honest.lease(8).await.unwrap();
    assert_eq!(got.len(), 8);
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
    c.stop().await;
}

/// The same with the nine identities asking at once, again and again: their requests are
/// written in the same lease batches, each weighed with what the batch granted the
/// account before it, so the account still holds exactly its share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_account_asking_with_all_its_identities_at_once_holds_its_share() {
    let dir = tempfile::tempdir().unwrap();
    let (c, _, identities) = hoarder(&dir).await;
    let (before, _) = c.fleet.batch_totals();
    let asking: Vec<_> = identities
        .into_iter()
        .map(|mut w| {
            tokio::spawn(async move {
                let mut held = 0;
                for _ in 0..4 {
                    held += w.lease(16).await.map(|l| l.len()).unwrap_or(0);
                }
                held
            })
        })
        .collect();
    let mut held = 0;
    for a in asking {
        held += a.await.unwrap();
    }
    assert_eq!(held, 100, "the account holds its share");
    let (after, _) = c.fleet.batch_totals();
    assert!(
        after.requests - before.requests > after.batches - before.batches,
        "the identities' requests went one a batch: {before:?} {after:?}"
    );
    c.stop().await;
}

/// A verification flood: the same results sent again and again, and made-up ones. The
/// first are stored once; past a few different results an identity stores no more; and
/// an identity's submissions are refused before their bodies are read when it sends
/// faster than its rate, or more than one at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verification_flood_stores_nothing_new() {
    use e2fleet_coordinator::store::testing::{database_for, scalar};
    let dir = tempfile::tempdir().unwrap();
    let db = temp_db(&dir);
    let c = Coordinator::start(&db, 3).await;
    let mut w = SimWorker::register(&c.url, "flooder", Behaviour::Honest).await;
    let units = w
        .client
        .get_suite(w.req(v2::GetSuiteRequest {
            suite: String::new(),
            only_missing: false,
        }))
        .await
        .unwrap()
        .into_inner()
        .units;
    let unit = units.first().expect("the default suite").clone();
    let result = |committed: u64, depths: usize| v2::VerificationResult {
        unit: unit.name.clone(),
        result: Some(v2::UnitResult {
            nodes_by_depth: {
                let mut v = vec![0; depths];
                v[depths - 1] = committed;
                v
            },
            committed,
            solutions_count: committed,
            ..Default::default()
        }),
        engine_seconds: 0.1,
        engine_build: "x".into(),
    };
    let depths = {
        use e2fleet_engine::formats::{LoadOptions, parse_str};
        let text = e2fleet_engine::suite::builtin_puzzle(&unit.puzzle).unwrap();
        let label = e2fleet_engine::suite::builtin_label(&unit.puzzle, text);
        let puzzle = parse_str(text, &label, &LoadOptions::default()).unwrap();
        let order = e2fleet_engine::FillOrder::new(&puzzle, &unit.order.parse().unwrap()).unwrap();
        e2fleet_engine::plan::SearchPlan::new(&puzzle, &order).len()
    };
    let submit = |r: v2::VerificationResult| {
        let mut client = w.client.clone();
        let req = w.req(v2::SubmitVerificationRequest {
            suite: String::new(),
            results: vec![r],
        });
        async move { client.submit_verification(req).await.map(|_| ()) }
    };
    // the same result ten times (one a second: each within the identity's rate)
    for _ in 0..3 {
        submit(result(1, depths)).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    }
    let store = database_for(&db).await;
    let rows = || scalar(&store, "SELECT COUNT(*) FROM verifications");
    assert_eq!(rows().await, 1, "stored once");
    // made-up results: three are kept as evidence, the fourth is refused
    for k in 2..=3 {
        submit(result(k, depths)).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    }
    let err = submit(result(4, depths)).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err}");
    assert_eq!(rows().await, 3);
    // many at once from one identity: refused before their bodies are read
    let many: Vec<_> = (0..32).map(|k| submit(result(100 + k, depths))).collect();
    let answers = futures_join_all(many).await;
    let refused = answers
        .iter()
        .filter(|a| matches!(a, Err(e) if e.code() == Code::ResourceExhausted))
        .count();
    assert!(refused >= 28, "{answers:?}");
    assert_eq!(rows().await, 3);
    c.stop().await;
}

/// Runs futures side by side; their outputs in order.
async fn futures_join_all<F: std::future::Future + Send + 'static>(fs: Vec<F>) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let handles: Vec<_> = fs.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

/// Admin-token guesses, through gRPC and through the JSON API: an address is shut out
/// after a handful, and its right token is refused too until the pause ends; another
/// address is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guessing_the_admin_token_shuts_the_address_out_through_either_door() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let mut op = v2::operator_service_client::OperatorServiceClient::connect(c.url.clone())
        .await
        .unwrap();
    let mut codes = Vec::new();
    for i in 0..20 {
        let r = op
            .list_jobs(e2fleet_proto::client::authed(
                &format!("guess-{i:016}"),
                v2::ListJobsRequest {},
            ))
            .await;
        codes.push(r.unwrap_err().code());
    }
    assert!(
        codes[..10].iter().all(|c| *c == Code::Unauthenticated)
            && codes[12..].iter().all(|c| *c == Code::ResourceExhausted),
        "{codes:?}"
    );
    // the JSON API's admin calls are the same door
    let (status, _) = crate::http_api::post_with(
        &c.url,
        "/api/jobs/0f8fad5b-d9cb-469f-a165-70867728950e/cancel",
        ADMIN,
    )
    .await;
    assert_eq!(status, 429, "shut out, whatever the token");
    c.stop().await;
}

/// Labels with newlines or escape sequences would forge log lines and drive the
/// operator's terminal: refused at registration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_that_would_forge_a_log_line_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    for bad in [
        "node-1\n2026-12-05T12:00:00Z INFO forged",
        "node-1\u{1b}[2J",
        "node-\u{202e}1",
    ] {
        let err = SimWorker::try_register(&c.url, ENROLL, bad, "x", 2, Behaviour::Honest)
            .await
            .err()
            .expect("refused");
        assert_eq!(err.code(), Code::InvalidArgument, "{bad:?}: {err}");
    }
    SimWorker::try_register(&c.url, ENROLL, "node-1 (lab)", "x", 2, Behaviour::Honest)
        .await
        .unwrap();
    c.stop().await;
}

/// The public worker list carried every machine's CPU features and full compiler
/// version: enough to rebuild its hardware class. Anyone now gets labels; the operator
/// (with the admin token) everything; and a page has a bounded size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_public_worker_list_has_labels_not_fingerprints() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let mut client = v2::worker_service_client::WorkerServiceClient::connect(c.url.clone())
        .await
        .unwrap();
    client
        .register_worker(v2::RegisterWorkerRequest {
            enroll_token: ENROLL.into(),
            host: Some(v2::HostInfo {
                hostname: "lab-7".into(),
                cpu_model: "AMD EPYC".into(),
                cores: 2,
                arch: "x86_64".into(),
                os: "linux".into(),
                rustc_version: "rustc 1.95.0 (59807616e 2026-04-14)".into(),
                worker_version: "0.1.0".into(),
                engine_kind: v2::EngineKind::Compiled.into(),
                engine_release: "compiled-0.1.0-abc".into(),
                target_features: "avx2,bmi1,bmi2".into(),
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    let (status, body) = crate::http_api::get(&c.url, "/api/workers").await;
    assert_eq!(status, 200);
    assert!(
        body.contains("lab-7") && body.contains("rustc 1.95"),
        "{body}"
    );
    for secret in ["avx2", "59807616e", "compiled-0.1.0-abc"] {
        assert!(!body.contains(secret), "{secret} in {body}");
    }
    let (_, full) = crate::http_api::get_with(&c.url, "/api/workers", ADMIN).await;
    assert!(
        full.contains("avx2") && full.contains("59807616e"),
        "{full}"
    );
    let (_, page) = crate::http_api::get(&c.url, "/api/workers?offset=1&limit=5").await;
    assert_eq!(page.trim(), "[]");
    c.stop().await;
}

/// Help texts printed the admin and enrolment tokens and the database password from the
/// environment; none of any subcommand's help does now.
#[test]
fn no_help_text_prints_a_secret_from_the_environment() {
    let bin = env!("CARGO_BIN_EXE_e2fleet-coordinator");
    let help = |args: &[&str]| {
        let out = Command::new(bin)
            .args(args)
            .env("E2FLEET_ADMIN_TOKEN", "admin-SECRET-0123456789")
            .env("E2FLEET_ENROLL_TOKEN", "enroll-SECRET-0123456789")
            .env("E2FLEET_DB", "postgres://fleet:db-SECRET@db.internal/fleet")
            .output()
            .unwrap();
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    // every subcommand (and sub-subcommand) named in the help
    let mut todo: Vec<Vec<String>> = vec![vec![]];
    let mut seen = 0;
    while let Some(path) = todo.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let text = help(&args);
        seen += 1;
        assert!(
            !text.contains("SECRET"),
            "{args:?} prints a secret:\n{text}"
        );
        let mut in_commands = false;
        for line in text.lines() {
            if line.trim_end() == "Commands:" {
                in_commands = true;
                continue;
            }
            if in_commands {
                match line.split_whitespace().next() {
                    Some(name) if line.starts_with("  ") && name != "help" => {
                        let mut next = path.clone();
                        next.push(name.to_string());
                        todo.push(next);
                    }
                    Some(_) => {}
                    None => in_commands = false,
                }
            }
        }
    }
    assert!(seen > 10, "only {seen} help texts read");
}

/// The admin CLI sent the admin token over plain http:// to another machine without a
/// word; it refuses now, as the worker does, unless told the network is trusted.
#[test]
fn the_admin_cli_refuses_plain_http_to_another_machine() {
    let out = Command::new(env!("CARGO_BIN_EXE_e2fleet-coordinator"))
        .args(["jobs", "--coordinator", "http://192.0.2.1:7733"])
        .env("E2FLEET_ADMIN_TOKEN", "admin-token-0123456789")
        .env_remove("E2FLEET_ALLOW_PLAINTEXT")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("unencrypted") && err.contains("--allow-plaintext"),
        "{err}"
    );
}

/// A volunteer posted made-up audits (nothing re-run), and the public job page showed
/// every unit of an exact job as "disagree", with no sign of who said so. A volunteer's
/// audit is labelled as its account's word now, apart from the operator's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volunteers_made_up_audit_is_its_own_word() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let job = c.submit("brendan/set1/pieces_04x04.txt", 2, 0, 1).await;
    let mut op = SimWorker::register(&c.url, "op-1", Behaviour::Honest).await;
    op.work(100).await;
    assert_eq!(c.job(&job).await["state"], "complete");
    let (_, token) = c.admin().await.add_account("mallory").await.unwrap();
    let mut m = SimWorker::register_with(&c.url, &token, "m-1", "x", 2, Behaviour::Honest).await;
    let units: Vec<v2::AuditedUnit> = (1..=10)
        .map(|id| v2::AuditedUnit {
            unit_id: id,
            digest: "ab".repeat(32),
            nodes: 1,
        })
        .collect();
    m.client
        .submit_audit(m.req(v2::SubmitAuditRequest {
            job_id: job.clone(),
            certificate_sha256: "cd".repeat(32),
            merkle_root: "ef".repeat(32),
            structure_ok: true,
            units,
            engine_kind: v2::EngineKind::Reference.into(),
            engine_build: "made-up".into(),
            engine_seconds: 1.0,
        }))
        .await
        .unwrap();
    let (status, body) = crate::http_api::get(&c.url, &format!("/api/jobs/{job}/audits")).await;
    assert_eq!(status, 200);
    let audits: serde_json::Value = serde_json::from_str(&body).unwrap();
    let row = &audits["classes"][0];
    assert_eq!(row["account"], "mallory", "{audits}");
    assert_eq!(row["operator"], false, "{audits}");
    assert!(!row["disagreed"].as_array().unwrap().is_empty());
    // the job itself is untouched: still complete and exact
    let doc = c.job(&job).await;
    assert_eq!(doc["state"], "complete");
    assert_eq!(doc["nodes_total"], 4_470);
    c.stop().await;
}

/// A volunteer account lying against the operator's one machine once stalled the job
/// ("disputed", waiting for a third party that was not online) and cost the liar nothing.
/// The operator vouches for its machines: the lie is wrong at once, and the job ends exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lie_against_the_operators_machine_costs_the_liar_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 100).await;
    let job = c.submit("brendan/set1/pieces_04x04.txt", 2, 0, 1).await;
    let (_, token) = c.admin().await.add_account("liar").await.unwrap();
    let mut liar = SimWorker::register_with(&c.url, &token, "l-1", "x", 2, Behaviour::Liar).await;
    liar.work(100).await;
    let mut op = SimWorker::register(&c.url, "op-1", Behaviour::Honest).await;
    op.work(100).await;
    let doc = c.job(&job).await;
    assert_eq!(doc["state"], "complete", "{}", doc["waiting"]);
    assert_eq!(doc["nodes_total"], 4_470);
    assert_eq!(doc["conservation_ok"], true);
    let workers = c.workers().await;
    let liar_errors = workers
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["hostname"] == "l-1")
        .unwrap()["errors"]
        .as_u64()
        .unwrap();
    assert!(liar_errors > 0, "{workers}");
    c.stop().await;
}

/// Two volunteer accounts that disagree, and no third party online: the job says which
/// unit waits for whom, by name, until a third party decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispute_names_the_parties_it_waits_on() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 100).await;
    let job = c.submit("brendan/set1/pieces_04x04.txt", 2, 0, 1).await;
    let admin = || async { c.admin().await };
    let (_, t1) = admin().await.add_account("alice").await.unwrap();
    let (_, t2) = admin().await.add_account("mallory").await.unwrap();
    let mut alice = SimWorker::register_with(&c.url, &t1, "a-1", "x", 2, Behaviour::Honest).await;
    let mut mallory = SimWorker::register_with(&c.url, &t2, "m-1", "x", 2, Behaviour::Liar).await;
    alice.work(100).await;
    mallory.work(100).await;
    let doc = c.job(&job).await;
    assert_eq!(doc["state"], "running");
    let disputes = doc["waiting"]["disputes"].as_array().unwrap();
    assert!(!disputes.is_empty(), "{}", doc["waiting"]);
    let parties: Vec<&str> = disputes[0]["parties"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert!(
        parties.contains(&"alice") && parties.contains(&"mallory"),
        "{parties:?}"
    );
    let reason = doc["waiting"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("alice") && reason.contains("mallory"),
        "{reason}"
    );
    // a third party decides: the liar loses, the job ends exact
    let mut op = SimWorker::register(&c.url, "op-1", Behaviour::Honest).await;
    op.work(100).await;
    alice.work(100).await;
    let doc = c.job(&job).await;
    assert_eq!(doc["state"], "complete", "{}", doc["waiting"]);
    assert_eq!(doc["nodes_total"], 4_470);
    c.stop().await;
}

/// A token replaced behind this coordinator's back (another coordinator on the same
/// database registered its worker again, or revoked its account) is believed only until
/// the next pass that reads the tokens in use again: that pass drops it, and its next
/// call is refused. A good token in use stays believed, its call reading nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_in_use_are_read_again_and_a_replaced_one_is_refused() {
    use e2fleet_coordinator::fleet::TOKEN_CACHE_TTL;
    use e2fleet_coordinator::store::testing::{database_for, scalar};

    let dir = tempfile::tempdir().unwrap();
    let path = temp_db(&dir);
    let c = Coordinator::start(&path, 3).await;
    let good = SimWorker::register(&c.url, "good", Behaviour::Honest).await;
    let replaced = SimWorker::register(&c.url, "replaced", Behaviour::Honest).await;
    for w in [&good, &replaced] {
        // known from its registration, then used
        c.fleet.worker_by_token(Some(&w.token)).await.unwrap();
    }
    let db = database_for(&path).await;
    let sql = format!(
        "UPDATE workers SET token_hash = 'replaced elsewhere' WHERE id = '{}' RETURNING CAST(1 AS BIGINT)",
        replaced.id
    );
    assert_eq!(scalar(&db, &sql).await, 1);
    assert!(
        c.fleet.cached_worker(Some(&replaced.token)).is_some(),
        "believed within its life, without a read"
    );
    let due = std::time::Instant::now() + TOKEN_CACHE_TTL.mul_f64(0.9);
    c.fleet.refresh_tokens(due).await.unwrap();
    assert!(c.fleet.cached_worker(Some(&replaced.token)).is_none());
    let refused = c.fleet.worker_by_token(Some(&replaced.token)).await;
    assert!(refused.is_err(), "a replaced token still works");
    let kept = c
        .fleet
        .cached_worker(Some(&good.token))
        .expect("a good token kept");
    assert_eq!(kept.id.to_string(), good.id);
    c.stop().await;
}

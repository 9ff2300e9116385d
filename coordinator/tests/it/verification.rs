//! Verification units on the coordinator: hardware classes run suites, the conformance
//! matrix shows who agrees, a class that disagrees gets no real work, and a suite
//! submitted without expected results gets them from two agreeing classes.

use e2fleet_engine::UnitResult;
use e2fleet_engine::search::{NoControl, RunOptions, Walker};
use e2fleet_engine::suite::resolve;
use e2fleet_proto::api::{Verdict, VerificationOutcome};
use e2fleet_proto::convert::{result_to_wire, suite_unit_from_wire};
use e2fleet_proto::v2;

use crate::harness::*;

/// The exact result of a suite unit (the reference walker).
fn run_unit(spec: &v2::SuiteUnitSpec) -> UnitResult {
    let unit = suite_unit_from_wire(spec);
    let resolved = resolve(&unit).unwrap();
    Walker::new(&resolved.plan)
        .run(
            &resolved.unit,
            RunOptions {
                budget: unit.budget,
                max_solutions: e2fleet_proto::REPORT_MAX_SOLUTIONS,
            },
            &mut NoControl,
        )
        .unwrap()
}

impl SimWorker {
    /// Fetches the suite (only what this class lacks), runs it, lying on `lie_on` units,
    /// and submits; returns the coordinator's answer.
    pub async fn verify(&mut self, suite: &str, lie_on: &[&str]) -> VerificationOutcome {
        self.verify_units(suite, lie_on, true).await
    }

    /// [`SimWorker::verify`] on the whole suite (what its class ran already included).
    pub async fn verify_all(&mut self, suite: &str, lie_on: &[&str]) -> VerificationOutcome {
        self.verify_units(suite, lie_on, false).await
    }

    async fn verify_units(
        &mut self,
        suite: &str,
        lie_on: &[&str],
        only_missing: bool,
    ) -> VerificationOutcome {
        let r = self
            .client
            .get_suite(self.req(v2::GetSuiteRequest {
                suite: suite.into(),
                only_missing,
            }))
            .await
            .unwrap()
            .into_inner();
        if r.units.is_empty() {
            return VerificationOutcome::try_from(&v2::SubmitVerificationResponse::default())
                .unwrap();
        }
        let results = r
            .units
            .iter()
            .map(|u| {
                let mut result = run_unit(u);
                if lie_on.contains(&u.name.as_str()) {
                    let d = result.nodes_by_depth.iter().position(|n| *n > 0).unwrap();
                    result.nodes_by_depth[d] += 1;
                    result.committed += 1;
                }
                v2::VerificationResult {
                    unit: u.name.clone(),
                    result: Some(result_to_wire(&result)),
                    engine_seconds: 0.01,
                    engine_build: "test-build".into(),
                }
            })
            .collect();
        let answer = self
            .client
            .submit_verification(self.req(v2::SubmitVerificationRequest {
                suite: r.suite,
                results,
            }))
            .await
            .unwrap()
            .into_inner();
        VerificationOutcome::try_from(&answer).unwrap()
    }
}

async fn matrix(c: &Coordinator, suite: &str) -> serde_json::Value {
    let r = c
        .operator()
        .await
        .verification_matrix(admin(v2::VerificationMatrixRequest {
            suite: suite.into(),
        }))
        .await
        .unwrap()
        .into_inner();
    let matrix = e2fleet_proto::api::status::VerificationMatrix::try_from(&r).unwrap();
    serde_json::to_value(matrix).unwrap()
}

fn class_of<'a>(m: &'a serde_json::Value, cpu: &str) -> &'a serde_json::Value {
    m["classes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["cpu_model"] == cpu)
        .unwrap_or_else(|| panic!("no class for {cpu}: {m}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_classes_agree_a_third_disagrees_and_gets_no_real_work() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let mut a = SimWorker::register_as(&c.url, "a1", "CPU Alpha", Behaviour::Honest).await;
    let mut b = SimWorker::register_as(&c.url, "b1", "CPU Beta", Behaviour::Honest).await;
    let mut bad = SimWorker::register_as(&c.url, "g1", "CPU Gamma", Behaviour::Honest).await;

    // the default suite ships with exact results: each class is judged at once
    let ra = a.verify("", &[]).await;
    assert!(!ra.class_flagged);
    assert_eq!(
        ra.verdicts.len(),
        12,
        "the whole default suite is handed out"
    );
    assert!(
        ra.verdicts.iter().all(|v| v.verdict == Verdict::Agrees),
        "{:?}",
        ra.verdicts
    );
    assert!(!b.verify("", &[]).await.class_flagged);
    let rg = bad.verify("", &["easy-root-budget"]).await;
    assert!(rg.class_flagged);
    let v = rg
        .verdicts
        .iter()
        .find(|v| v.unit == "easy-root-budget")
        .unwrap();
    assert_eq!(v.verdict, Verdict::Disagrees);
    assert!(v.detail.contains("first differing depth"), "{}", v.detail);

    // a class that has run everything gets nothing more to run
    let again = a
        .client
        .get_suite(a.req(v2::GetSuiteRequest {
            suite: String::new(),
            only_missing: true,
        }))
        .await
        .unwrap()
        .into_inner();
    assert!(again.units.is_empty());

    let m = matrix(&c, "default").await;
    assert_eq!(m["classes"].as_array().unwrap().len(), 3);
    for cpu in ["CPU Alpha", "CPU Beta"] {
        let class = class_of(&m, cpu);
        assert_eq!(class["flagged"], false);
        for (unit, cell) in class["cells"].as_object().unwrap() {
            assert_eq!(cell["verdict"], "agrees", "{cpu} {unit}");
            assert!(cell["per_core_nodes_per_s"].as_f64().unwrap() > 0.0);
        }
    }
    let gamma = class_of(&m, "CPU Gamma");
    assert_eq!(gamma["flagged"], true);
    assert_eq!(gamma["cells"]["easy-root-budget"]["verdict"], "DISAGREES");
    assert_eq!(gamma["cells"]["brendan1-5x5-whole"]["verdict"], "agrees");
    assert_eq!(gamma["hosts"][0], "g1");
    assert_eq!(m["speed_table"].as_array().unwrap().len(), 3);

    // real work: the disagreeing class gets none, with the reason; the others do
    let _job = c.submit("brendan/set1/pieces_05x05.txt", 3, 0, 1).await;
    let err = bad.lease(4).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    assert!(
        err.message().contains("easy-root-budget"),
        "{}",
        err.message()
    );
    assert!(!a.lease(4).await.unwrap().is_empty());

    // a fixed build is a new class: it verifies and works
    let mut fixed = SimWorker::register_as(&c.url, "g1", "CPU Gamma v2", Behaviour::Honest).await;
    assert!(!fixed.verify("", &[]).await.class_flagged);
    assert!(!fixed.lease(4).await.unwrap().is_empty());
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expected_results_are_fixed_by_two_agreeing_classes() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let suite = r#"[
      {"name":"b5-budget","puzzle":"brendan-set1-05x05","order":"row-major","prefix_depth":1,"prefix_index":0,"budget":5000,"speed":true,"expected":null},
      {"name":"b4-comb","puzzle":"brendan-set1-04x04","order":"comb:2","prefix_depth":0,"prefix_index":0,"budget":null,"speed":false,"expected":null}
    ]"#;
    let r = c
        .operator()
        .await
        .submit_suite(admin(v2::SubmitSuiteRequest {
            name: "mine".into(),
            suite_json: suite.into(),
        }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.units, r.with_expected), (2, 0));

    let mut a1 = SimWorker::register_as(&c.url, "a1", "CPU Alpha", Behaviour::Honest).await;
    let mut a2 = SimWorker::register_as(&c.url, "a2", "CPU Alpha", Behaviour::Honest).await;
    let mut b = SimWorker::register_as(&c.url, "b1", "CPU Beta", Behaviour::Honest).await;
    let mut g = SimWorker::register_as(&c.url, "g1", "CPU Gamma", Behaviour::Honest).await;
    let first = a1.verify("mine", &[]).await;
    assert!(first.verdicts.iter().all(|v| v.verdict == Verdict::Pending));
    assert!(!first.class_flagged, "nothing to disagree with yet");
    // a second host of the same class is not independent confirmation
    let same_class = a2
        .client
        .submit_verification(a2.req(v2::SubmitVerificationRequest {
            suite: "mine".into(),
            results: vec![],
        }))
        .await
        .unwrap_err();
    assert_eq!(same_class.code(), tonic::Code::InvalidArgument);
    assert!(
        a2.verify("mine", &[]).await.verdicts.is_empty(),
        "its class already ran the suite"
    );
    let m = matrix(&c, "mine").await;
    assert!(
        m["units"]
            .as_array()
            .unwrap()
            .iter()
            .all(|u| u["expected"].is_null())
    );

    let second = b.verify("mine", &[]).await;
    assert!(
        second.verdicts.iter().all(|v| v.verdict == Verdict::Agrees),
        "{:?}",
        second.verdicts
    );
    let m = matrix(&c, "mine").await;
    for u in m["units"].as_array().unwrap() {
        assert!(u["expected"]["committed"].as_u64().unwrap() > 0, "{u}");
        assert!(
            u["expected_source"]
                .as_str()
                .unwrap()
                .starts_with("agreement of classes"),
            "{u}"
        );
    }
    assert_eq!(
        class_of(&m, "CPU Alpha")["cells"]["b5-budget"]["verdict"],
        "agrees"
    );

    let third = g.verify("mine", &["b4-comb"]).await;
    assert!(third.class_flagged);
    let m = matrix(&c, "mine").await;
    assert_eq!(
        class_of(&m, "CPU Gamma")["cells"]["b4-comb"]["verdict"],
        "DISAGREES"
    );
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_suites_are_refused_with_the_unit_named() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    for (json, wanted) in [
        ("not json", "suite JSON"),
        ("[]", "1..="),
        (
            r#"[{"name":"x","puzzle":"no-such-puzzle","order":"row-major","prefix_depth":0,"prefix_index":0,"budget":null,"expected":null}]"#,
            "unit x: unknown built-in puzzle",
        ),
        (
            r#"[{"name":"x","puzzle":"brendan-set1-04x04","order":"row-major","prefix_depth":0,"prefix_index":0,"budget":null,"expected":null},
                {"name":"x","puzzle":"brendan-set1-04x04","order":"row-major","prefix_depth":0,"prefix_index":0,"budget":null,"expected":null}]"#,
            "unique",
        ),
        (
            r#"[{"name":"deep","puzzle":"brendan-set1-04x04","order":"row-major","prefix_depth":3,"prefix_index":99999,"budget":null,"expected":null}]"#,
            "unit deep",
        ),
    ] {
        let err = c
            .operator()
            .await
            .submit_suite(admin(v2::SubmitSuiteRequest {
                name: "bad".into(),
                suite_json: json.into(),
            }))
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{json}");
        assert!(err.message().contains(wanted), "{json}: {}", err.message());
    }
    // the built-in suite's name is taken
    let err = c
        .operator()
        .await
        .submit_suite(admin(v2::SubmitSuiteRequest {
            name: "default".into(),
            suite_json: "[]".into(),
        }))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("built-in"), "{}", err.message());
    // without the admin token
    let err = c
        .operator()
        .await
        .submit_suite(v2::SubmitSuiteRequest {
            name: "x".into(),
            suite_json: "[]".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgraded_built_in_suite_replaces_the_stored_one() {
    let dir = tempfile::tempdir().unwrap();
    let db = temp_db(&dir);
    let c = Coordinator::start(&db, 3).await;
    assert_eq!(matrix(&c, "").await["units"].as_array().unwrap().len(), 12);
    c.stop().await;
    // as an older coordinator would have left it: a different default suite
    {
        let store = e2fleet_coordinator::store::Store::connect(
            &e2fleet_coordinator::store::testing::database_for(&db).await,
        )
        .await
        .unwrap();
        let old = e2fleet_coordinator::store::SuiteUnitRecord {
            name: "old-unit".into(),
            spec: serde_json::from_str(r#"{"name":"old-unit","puzzle":"brendan-set1-04x04","order":"row-major","prefix_depth":0,"prefix_index":0,"budget":null,"speed":false,"expected":null}"#).unwrap(),
            expected: None,
            expected_source: String::new(),
        };
        store
            .write(move |tx| tx.replace_suite("default", &[old], 1))
            .await
            .unwrap();
    }
    let c = Coordinator::start(&db, 3).await;
    let m = matrix(&c, "").await;
    let names: Vec<&str> = m["units"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 12, "{names:?}");
    assert!(!names.contains(&"old-unit"));
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_volunteer_cannot_poison_an_honest_hardware_class() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    c.submit("brendan/set1/pieces_04x04.txt", 2, 0, 1).await;
    let mut honest = SimWorker::register_as(&c.url, "h1", "CPU Alpha", Behaviour::Honest).await;
    assert!(!honest.verify("", &[]).await.class_flagged);
    // a volunteer registers with the honest class's labels (same CPU, same build: the
    // same class id) and lies on a verification unit
    let (_, token) = c.admin().await.add_account("mallory").await.unwrap();
    let mut m1 =
        SimWorker::register_with(&c.url, &token, "m1", "CPU Alpha", 2, Behaviour::Honest).await;
    let answer = m1.verify_all("", &["easy-root-budget"]).await;
    assert!(
        answer.class_flagged,
        "the liar is told it gets no work (its own identity is marked)"
    );
    // ... but the class is not flagged: the honest worker keeps working
    assert!(!honest.lease(1).await.unwrap().is_empty());
    let err = m1.lease(1).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err}");
    let m = matrix(&c, "").await;
    assert_eq!(class_of(&m, "CPU Alpha")["flagged"], false);
    // a second identity of the same account changes nothing
    let mut m2 =
        SimWorker::register_with(&c.url, &token, "m2", "CPU Alpha", 2, Behaviour::Honest).await;
    m2.verify_all("", &["easy-root-budget"]).await;
    assert!(!honest.lease(1).await.unwrap().is_empty());
    // a second account seeing the same disagreement does flag the class; the operator
    // can lift the flag once the build is fixed
    let (_, token2) = c.admin().await.add_account("trent").await.unwrap();
    let mut t =
        SimWorker::register_with(&c.url, &token2, "t1", "CPU Alpha", 2, Behaviour::Honest).await;
    assert!(t.verify_all("", &["easy-root-budget"]).await.class_flagged);
    assert_eq!(
        honest.lease(1).await.unwrap_err().code(),
        tonic::Code::FailedPrecondition
    );
    let class = m["classes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["cpu_model"] == "CPU Alpha")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    c.admin().await.unflag_class(&class).await.unwrap();
    assert!(!honest.lease(1).await.unwrap().is_empty());
    // anyone can read the matrix, but not the whole fingerprint of a class
    let (status, body) = crate::http_api::get(&c.url, "/api/verification").await;
    assert_eq!(status, 200);
    let public: serde_json::Value = serde_json::from_str(&body).unwrap();
    let alpha = class_of(&public, "CPU Alpha");
    assert_eq!(alpha["engine_release"], "reference-te…", "{alpha}");
    assert_eq!(alpha["target_features"], "");
    assert_eq!(
        class_of(&m, "CPU Alpha")["engine_release"],
        "reference-test"
    );
    c.stop().await;
}

//! The HTTP side of the coordinator's port: every JSON API endpoint and the Prometheus
//! metrics, against a coordinator with a running job and connected workers.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::*;

/// A plain HTTP/1.1 GET; returns (status, body).
pub async fn get(url: &str, path: &str) -> (u16, String) {
    get_token(url, path, None).await
}

/// [`get`] with the admin token.
#[allow(dead_code)]
pub async fn get_with(url: &str, path: &str, token: &str) -> (u16, String) {
    get_token(url, path, Some(token)).await
}

/// [`post`] with a token.
#[allow(dead_code)]
pub async fn post_with(url: &str, path: &str, token: &str) -> (u16, String) {
    post(url, path, Some(token)).await
}

async fn get_token(url: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let text = raw_get(url, path, token).await;
    let status = text.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    // de-chunk when needed
    let body = if text
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut out = String::new();
        let mut rest = body.as_str();
        while let Some((size, tail)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 {
                break;
            }
            out.push_str(&tail[..n]);
            rest = &tail[n + 2..];
        }
        out
    } else {
        body
    };
    (status, body)
}

/// A plain HTTP/1.1 GET; returns the whole response, headers included.
async fn raw_get(url: &str, path: &str, token: Option<&str>) -> String {
    let addr = url.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    String::from_utf8_lossy(&raw).into_owned()
}

/// A plain HTTP/1.1 POST with an optional bearer token; returns (status, body).
async fn post(url: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let addr = url.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    s.write_all(
        format!("POST {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Length: 0\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_answers_with_a_running_job() {
    let dir = tempfile::tempdir().unwrap();
    let db = temp_db(&dir);
    let c = Coordinator::start(&db, 3).await;
    let job = c.submit("brendan/set1/pieces_05x05.txt", 3, 0, 1).await;
    let mut w = SimWorker::register(&c.url, "api-host", Behaviour::Honest).await;
    w.work(2).await;
    // a call with a wrong token, turned away at the gate (counted in `/metrics`)
    let token = std::mem::replace(&mut w.token, "wrong".into());
    assert_eq!(
        w.lease(1).await.unwrap_err().code(),
        tonic::Code::Unauthenticated
    );
    w.token = token;

    let (status, body) = get(&c.url, "/healthz").await;
    assert_eq!((status, body.as_str()), (200, "ok"));

    let (status, body) = get(&c.url, "/api/jobs").await;
    assert_eq!(status, 200);
    let jobs: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(jobs[0]["job_id"], job.as_str());
    assert_eq!(jobs[0]["state"], "running");

    let (status, body) = get(&c.url, &format!("/api/jobs/{job}")).await;
    assert_eq!(status, 200);
    let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(doc["units"]["done"].as_u64().unwrap() > 0);
    assert!(doc["nodes_total"].as_u64().unwrap() > 0);
    assert!(
        doc.get("per_core_nodes_per_s").is_some() && doc.get("aggregate_nodes_per_s").is_some()
    );

    let (status, body) = get(&c.url, "/api/jobs/no-such-job").await;
    assert_eq!(status, 404);
    assert!(body.contains("not found"), "{body}");

    let (status, body) = get(&c.url, "/api/fleet").await;
    assert_eq!(status, 200);
    let fleet: serde_json::Value = serde_json::from_str(&body).unwrap();
    // the worker holds no lease between rounds: seen, but idle
    assert_eq!(fleet["workers"]["idle"], 1);
    assert_eq!(fleet["workers"]["online"], 0);
    let series = fleet["aggregate_series"].as_array().unwrap();
    assert!(
        series
            .iter()
            .any(|m| m["units_completed"].as_i64().unwrap() > 0)
    );
    assert!(
        series
            .iter()
            .any(|m| m["leases_created"].as_i64().unwrap() > 0)
    );
    assert!(fleet["aggregate_nodes_per_s"]["verified"].as_f64().unwrap() > 0.0);
    assert!(fleet["per_core_nodes_per_s"].get("overall").is_some());

    let (status, body) = get(&c.url, "/api/workers").await;
    assert_eq!(status, 200);
    let workers: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(workers[0]["hostname"], "api-host");
    assert!(
        workers[0].get("token_hash").is_none(),
        "secrets never leave the server"
    );

    let (status, body) = get(&c.url, "/metrics").await;
    assert_eq!(status, 200);
    let store = match e2fleet_coordinator::store::testing::database_for(&db).await {
        e2fleet_coordinator::store::Database::Sqlite(_) => "sqlite",
        e2fleet_coordinator::store::Database::Postgres(_) => "postgres",
    };
    for name in [
        &format!("e2fleet_store_info{{store=\"{store}\"}} 1"),
        "e2fleet_upkeep_leader",
        "e2fleet_workers{state=\"idle\"} 1",
        "e2fleet_workers_paused 0",
        "e2fleet_aggregate_nodes_per_second{kind=\"verified\"}",
        "e2fleet_per_core_nodes_per_second{group=\"all\"}",
        "e2fleet_units_last_minute{event=\"completed\"}",
        "e2fleet_wrong_results_total 0",
        &format!("e2fleet_job_units{{job=\"{job}\",state=\"done\"}}"),
    ] {
        assert!(body.contains(name), "missing {name} in\n{body}");
    }
    // what the gate and the accept loop turned away, every reason listed
    assert!(body.contains("e2fleet_refused_calls_total{reason=\"bad_token\"} 1\n"));
    assert!(body.contains("e2fleet_refused_calls_total{reason=\"shut_out\"} 0\n"));
    for reason in [
        "new_too_fast",
        "full",
        "address_full",
        "silent",
        "tls_failed",
        "stranger",
    ] {
        let line = format!("e2fleet_refused_connections_total{{reason=\"{reason}\"}} ");
        assert!(body.contains(&line), "missing {line} in\n{body}");
    }
    // the worker's calls, timed by the gate: a histogram per kind of call
    let counted = |name: &str, label: &str| -> u64 {
        let line = format!("{name}_count{{{label}}} ");
        body.lines()
            .find_map(|l| l.strip_prefix(line.as_str()))
            .unwrap_or_else(|| panic!("missing {line} in\n{body}"))
            .parse()
            .unwrap()
    };
    let count = |call: &str| counted("e2fleet_call_seconds", &format!("call=\"{call}\""));
    assert!(count("lease") >= 2 && count("report") >= 2 && count("register") == 1);
    assert!(body.contains("# TYPE e2fleet_call_seconds histogram"));
    assert!(body.contains(&format!(
        "e2fleet_call_seconds_bucket{{call=\"report\",le=\"+Inf\"}} {}",
        count("report")
    )));
    // and where they spent it: each request's wait for its batch, each batch's write
    let series = |name: &str, queue: &str| counted(name, &format!("queue=\"{queue}\""));
    for queue in ["lease", "report"] {
        let waits = series("e2fleet_batch_wait_seconds", queue);
        let writes = series("e2fleet_batch_write_seconds", queue);
        assert!(waits >= 2, "{queue}: {waits} waits timed");
        assert!(
            (1..=waits).contains(&writes),
            "{queue}: {writes} writes, {waits} waits"
        );
    }
    assert!(body.contains("# TYPE e2fleet_batch_wait_seconds histogram"));

    // the verification matrix (the default suite is there before anyone ran it)
    let (status, body) = get(&c.url, "/api/verification").await;
    assert_eq!(status, 200, "{body}");
    let m: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(m["suite"], "default");
    assert_eq!(m["units"].as_array().unwrap().len(), 12);
    let (status, _) = get(&c.url, "/api/verification?suite=nope").await;
    assert_eq!(status, 404);

    // what the dashboard draws boards with
    let (status, body) = get(&c.url, &format!("/api/jobs/{job}/puzzle")).await;
    assert_eq!(status, 200);
    let puzzle: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (puzzle["width"].as_u64(), puzzle["height"].as_u64()),
        (Some(5), Some(5))
    );
    assert_eq!(puzzle["pieces"].as_array().unwrap().len(), 25);
    assert_eq!(puzzle["pieces"][0].as_array().unwrap().len(), 4);
    assert_eq!(puzzle["fill_order"].as_array().unwrap().len(), 25);

    // the dashboard pages and assets, with a script policy that forbids inline script
    for path in ["/", "/jobs", &format!("/jobs/{job}"), "/workers"] {
        let (status, body) = get(&c.url, path).await;
        assert_eq!(status, 200, "{path}");
        assert!(body.contains("<script src=\"/assets/app.js\""), "{path}");
    }
    let csp = raw_get(&c.url, "/", None).await;
    assert!(
        csp.to_ascii_lowercase()
            .contains("content-security-policy: default-src 'none'; script-src 'self'"),
        "{csp}"
    );
    for asset in ["/assets/app.js", "/assets/style.css", "/assets/favicon.svg"] {
        let (status, body) = get(&c.url, asset).await;
        assert_eq!(status, 200, "{asset}");
        assert!(body.len() > 100, "{asset}");
    }

    // actions need the admin token
    let cancel = format!("/api/jobs/{job}/cancel");
    assert_eq!(post(&c.url, &cancel, None).await.0, 401);
    assert_eq!(post(&c.url, &cancel, Some("wrong")).await.0, 401);
    assert_eq!(
        post(&c.url, "/api/hosts/api-host/release", None).await.0,
        401
    );
    let (status, body) = post(&c.url, "/api/hosts/api-host/release", Some(ADMIN)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"workers_released\":"), "{body}");
    let (status, body) = post(&c.url, &cancel, Some(ADMIN)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(c.job(&job).await["state"], "cancelled");
    let (status, body) = post(&c.url, &cancel, Some(ADMIN)).await;
    assert_eq!(status, 409, "cancelling twice is a conflict: {body}");
    c.stop().await;
}

/// A finished Brendan 6x6 job's best boards: its solutions first (depth 36 of 36, all 60
/// inner edges matched), deepest first, each with who found it and when.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_lists_its_best_boards_deepest_first_with_their_finders() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let job = c.submit("brendan/set1/pieces_06x06.txt", 4, 0, 1).await;
    let mut w = SimWorker::register(&c.url, "finder", Behaviour::Honest).await;
    w.work(200).await;
    assert_eq!(c.job(&job).await["state"], "complete");
    let (status, body) = get(&c.url, &format!("/api/jobs/{job}/best")).await;
    assert_eq!(status, 200, "{body}");
    let best: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
    assert_eq!(best.len(), 10);
    assert_eq!(best[0]["rank"], 1);
    assert_eq!(best[0]["depth"], 36);
    assert_eq!(
        (best[0]["score"].as_u64(), best[0]["max_score"].as_u64()),
        (Some(60), Some(60))
    );
    assert_eq!(best[0]["board"].as_array().unwrap().len(), 36);
    assert_eq!(best[0]["hostname"], "finder");
    assert_eq!(best[0]["account"], "operator");
    let depths: Vec<u64> = best.iter().map(|b| b["depth"].as_u64().unwrap()).collect();
    assert!(depths.windows(2).all(|p| p[0] >= p[1]), "{depths:?}");
    let (missing, _) = get(
        &c.url,
        "/api/jobs/00000000-0000-0000-0000-000000000000/best",
    )
    .await;
    assert_eq!(missing, 404);
}

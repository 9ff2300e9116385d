//! What a client without a token can cost the coordinator: connections are bounded in
//! number and time, and requests are refused before their bodies are read.

use std::time::{Duration, Instant};

use e2fleet_coordinator::server::ServerLimits;
use e2fleet_proto::v2;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tonic::Code;

use crate::harness::*;

fn quick_limits() -> ServerLimits {
    ServerLimits {
        handshake_timeout: Duration::from_millis(500),
        header_read_timeout: Duration::from_millis(500),
        max_connections_per_ip: 6,
        ..ServerLimits::default()
    }
}

/// Reads until the peer closes; how long that took (panics after `limit`).
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(limit, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return started.elapsed(),
            Ok(Ok(_)) => continue,
            Err(_) => panic!("the connection was still open after {limit:?}"),
        }
    }
}

fn addr(c: &Coordinator) -> String {
    c.url.trim_start_matches("http://").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_half_sent_connections_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start_limited(&temp_db(&dir), quick_limits()).await;
    // a TCP connection that never says anything
    let mut silent = TcpStream::connect(addr(&c)).await.unwrap();
    let took = closed_within(&mut silent, Duration::from_secs(5)).await;
    assert!(took >= Duration::from_millis(400), "{took:?}");
    // an HTTP/1 request whose headers never end
    let mut half = TcpStream::connect(addr(&c)).await.unwrap();
    half.write_all(b"GET /api/jobs HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    closed_within(&mut half, Duration::from_secs(5)).await;
    // the coordinator is fine
    let (status, _) = crate::http_api::get(&c.url, "/healthz").await;
    assert_eq!(status, 200);
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_per_address_limit_are_closed_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let limits = ServerLimits {
        handshake_timeout: Duration::from_secs(30),
        ..quick_limits()
    };
    let c = Coordinator::start_limited(&temp_db(&dir), limits).await;
    let mut held = Vec::new();
    for _ in 0..6 {
        held.push(TcpStream::connect(addr(&c)).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut extra = TcpStream::connect(addr(&c)).await.unwrap();
    let took = closed_within(&mut extra, Duration::from_secs(5)).await;
    assert!(took < Duration::from_secs(2), "{took:?}");
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (status, _) = crate::http_api::get(&c.url, "/healthz").await;
    assert_eq!(status, 200, "slots come back when connections close");
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_a_token_are_refused_before_their_bodies_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let channel = tonic::transport::Endpoint::from_shared(c.url.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut worker = v2::worker_service_client::WorkerServiceClient::new(channel.clone())
        .max_encoding_message_size(64 << 20);
    let mut operator = v2::operator_service_client::OperatorServiceClient::new(channel)
        .max_encoding_message_size(64 << 20);
    let big = "x".repeat(15 << 20);
    let started = Instant::now();
    let err = worker
        .report_result(v2::ReportResultRequest {
            lease_id: big.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err}");
    let err = operator
        .submit_job(v2::SubmitJobRequest {
            puzzle_json: big.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err}");
    // registration is open, and small: a 15 MiB one is cut off at 16 KiB
    let err = worker
        .register_worker(v2::RegisterWorkerRequest {
            enroll_token: big,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(
        matches!(
            err.code(),
            Code::ResourceExhausted
                | Code::OutOfRange
                | Code::Internal
                | Code::Unknown
                | Code::Cancelled
        ),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    // health and reflection answer anyone
    let mut health = tonic_health::pb::health_client::HealthClient::new(
        tonic::transport::Endpoint::from_shared(c.url.clone())
            .unwrap()
            .connect()
            .await
            .unwrap(),
    );
    let serving = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "e2fleet.v2.WorkerService".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        serving.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_labels_paused_reasons_and_verification_floods_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    // every string a worker says about itself is a label of at most 256 bytes
    let long = "x".repeat(4096);
    let err = SimWorker::try_register(&c.url, ENROLL, "w", &long, 2, Behaviour::Honest)
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    assert!(err.message().contains("256"), "{err}");
    let err = SimWorker::try_register(&c.url, ENROLL, &long, "cpu", 2, Behaviour::Honest)
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    // verification submissions are rate-limited per identity (a burst of 10, then 1/s):
    // a flood is refused before any of it is judged
    let mut w = SimWorker::register(&c.url, "w", Behaviour::Honest).await;
    // why a worker is paused is a label too, and kept to 120 characters
    for paused in ["p".repeat(10_000), "on battery".to_string(), String::new()] {
        w.client
            .heartbeat(w.req(v2::HeartbeatRequest {
                paused: paused.clone(),
                ..Default::default()
            }))
            .await
            .unwrap();
        let shown = c.workers().await[0]["paused"].as_str().unwrap().to_string();
        assert_eq!(shown, paused.chars().take(120).collect::<String>());
    }
    let mut refused = 0;
    for _ in 0..30 {
        let r = w
            .client
            .submit_verification(w.req(v2::SubmitVerificationRequest {
                suite: "default".into(),
                results: vec![],
            }))
            .await;
        // within the burst, the (empty) submission is judged and refused as such
        match r {
            Err(e) if e.code() == Code::ResourceExhausted => refused += 1,
            Err(e) => assert_eq!(e.code(), Code::InvalidArgument, "{e}"),
            Ok(_) => panic!("an empty submission was accepted"),
        }
    }
    assert!(refused >= 15, "only {refused} of 30 refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guessing_shuts_an_address_out_and_valid_registrations_are_not_limited_per_address() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    // a cluster behind one address starts 300 of the operator's workers at once
    let mut first = None;
    for i in 0..300 {
        let w = SimWorker::register(&c.url, &format!("node-{i}"), Behaviour::Honest).await;
        first.get_or_insert(w);
    }
    let mut known = first.unwrap();
    // a volunteer account makes new identities at a bounded rate (a burst of 200, then 5/s)
    let (_, token) = c.admin().await.add_account("many").await.unwrap();
    let mut refused = 0;
    for i in 0..260 {
        match SimWorker::try_register(
            &c.url,
            &token,
            &format!("v-{i}"),
            "cpu",
            2,
            Behaviour::Honest,
        )
        .await
        {
            Ok(_) => {}
            Err(e) if e.code() == Code::ResourceExhausted => refused += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert!((20..=60).contains(&refused), "{refused} of 260 refused");
    // a stranger at the same address guesses worker tokens: shut out after ~100 guesses
    let mut guesser = v2::worker_service_client::WorkerServiceClient::connect(c.url.clone())
        .await
        .unwrap();
    let mut codes = Vec::new();
    for i in 0..200 {
        let r = guesser
            .heartbeat(e2fleet_proto::client::authed(
                &format!("guess-{i}"),
                v2::HeartbeatRequest::default(),
            ))
            .await;
        codes.push(r.unwrap_err().code());
    }
    let exhausted = codes
        .iter()
        .filter(|c| **c == Code::ResourceExhausted)
        .count();
    assert!(
        codes[..50].iter().all(|c| *c == Code::Unauthenticated) && exhausted >= 80,
        "{codes:?}"
    );
    // ... a bad registration too; but a worker whose token the coordinator knows keeps
    // working from that address
    let err = SimWorker::try_register(
        &c.url,
        "not-the-token-0123456789",
        "x",
        "cpu",
        2,
        Behaviour::Honest,
    )
    .await
    .err()
    .unwrap();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
    known.lease(1).await.unwrap();
    c.stop().await;
}

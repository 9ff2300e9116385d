//! A stranger without a token holding every connection and stream the coordinator lets
//! it: `grpc.health.v1.Health/Watch` streams from a stock gRPC client (which never
//! ended), and registrations whose bodies drip a byte every few seconds (which once held
//! their streams for as long as the stranger liked). Against the coordinator program, so
//! its memory is its own: a legitimate worker still registers and leases within a second,
//! and the coordinator's peak memory stays under the figure `docs/security.md` states.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use e2fleet_proto::api::JobRequest;
use tokio::net::TcpSocket;
use tonic::transport::Endpoint;

use crate::harness::*;

/// The coordinator program on a port of its own (SQLite in a temporary folder).
struct Served {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Served {
    async fn start() -> Served {
        // a port found free may be taken before the coordinator binds it (another
        // suite's attack opens thousands of connections, each on an ephemeral port): a
        // coordinator that exits at once is started again on another
        for _ in 0..5 {
            let dir = tempfile::tempdir().unwrap();
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let child = Command::new(env!("CARGO_BIN_EXE_e2fleet-coordinator"))
                .args(["serve", "--listen", &format!("0.0.0.0:{port}"), "--db"])
                .arg(dir.path().join("e2fleet.db"))
                .env("E2FLEET_ENROLL_TOKEN", ENROLL)
                .env("E2FLEET_ADMIN_TOKEN", ADMIN)
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let mut served = Served {
                child,
                port,
                _dir: dir,
            };
            let started = Instant::now();
            loop {
                if tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .is_ok()
                {
                    return served;
                }
                if served.child.try_wait().unwrap().is_some() {
                    break;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "no coordinator"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        panic!("the coordinator would not start on five ports in a row")
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The coordinator's peak resident memory so far, MB.
    fn peak_mb(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kb: f64 = status
            .lines()
            .find(|l| l.starts_with("VmHWM:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap();
        kb / 1024.0
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One of the stranger's connections, from `from`: as many health `Watch` streams as the
/// coordinator lets it open, and two registrations dripping a byte every three seconds.
async fn hold(port: u16, from: IpAddr, streams: usize) {
    let endpoint = Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .local_address(Some(from));
    let Ok(channel) = endpoint.connect().await else {
        return;
    };
    // streams one after another, until the coordinator refuses one: then as many as it
    // let this connection hold are held
    for _ in 0..streams {
        let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
        let Ok(watch) = health
            .watch(tonic_health::pb::HealthCheckRequest {
                service: String::new(),
            })
            .await
        else {
            break;
        };
        tokio::spawn(async move {
            let mut stream = watch.into_inner();
            while let Ok(Some(_)) = stream.message().await {}
        });
    }
    for _ in 0..2 {
        tokio::spawn(drip(port, from));
    }
    std::future::pending::<()>().await;
}

/// A registration whose body drips a byte every three seconds; how long until the
/// coordinator ended it.
async fn drip(port: u16, from: IpAddr) -> Option<Duration> {
    let socket = TcpSocket::new_v4().ok()?;
    socket.bind(SocketAddr::new(from, 0)).ok()?;
    let tcp = socket
        .connect(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port))
        .await
        .ok()?;
    let (client, connection) = h2::client::handshake(tcp).await.ok()?;
    tokio::spawn(connection);
    let mut client = client.ready().await.ok()?;
    let request = http::Request::post(format!(
        "http://127.0.0.1:{port}/e2fleet.v2.WorkerService/RegisterWorker"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(())
    .ok()?;
    let started = Instant::now();
    let (response, mut body) = client.send_request(request, false).ok()?;
    let dripping = async {
        loop {
            if body.send_data(Bytes::from_static(b"\0"), false).is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(3)).await;
        }
    };
    tokio::select! {
        _ = dripping => {}
        _ = response => {}
    }
    Some(started.elapsed())
}

/// A legitimate worker, from 127.0.0.1: registers and leases; how long that took.
async fn honest_worker(url: &str) -> Duration {
    let started = Instant::now();
    let mut w = SimWorker::register(url, "honest", Behaviour::Honest).await;
    let got = w.lease(4).await.unwrap();
    assert!(!got.is_empty(), "the honest worker got no unit");
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stranger_holding_every_slot_cannot_keep_a_worker_out() {
    let c = Served::start().await;
    let mut op = e2fleet_coordinator::client::Operator::connect(&c.url(), None, ADMIN)
        .await
        .unwrap();
    let puzzle = e2fleet_engine::formats::load_file(
        &puzzle_path("brendan/set1/pieces_06x06.txt"),
        &Default::default(),
    )
    .unwrap();
    op.submit(&JobRequest {
        name: "target".into(),
        puzzle_json: e2fleet_engine::formats::to_site_json(&puzzle),
        order: None,
        split_depth: Some(4),
        target_units: None,
        budget: None,
        replicas: 1,
        spot_check: 0.0,
        priority: 0,
        share: 1.0,
    })
    .await
    .unwrap();
    // a dripping registration alone: cut off at the open calls' body time
    let took = drip(c.port, IpAddr::V4(Ipv4Addr::new(127, 0, 0, 50)))
        .await
        .expect("it ran");
    assert!(
        took <= e2fleet_coordinator::server::guard::OPEN_BODY_TIME + Duration::from_secs(4),
        "a dripping body held its stream {took:?}"
    );
    for (addresses, budget_mb) in [(1u8, 200.0), (8, 500.0)] {
        let mut attack = tokio::task::JoinSet::new();
        for a in 0..addresses {
            let from = IpAddr::V4(Ipv4Addr::new(127, 0, 1, 2 + a));
            // what the coordinator once let an address hold: 1,024 connections of 256
            // streams each (it took the coordinator to gigabytes)
            for _ in 0..1024 {
                attack.spawn(hold(c.port, from, 256));
            }
        }
        tokio::time::sleep(Duration::from_secs(8)).await;
        let took = honest_worker(&c.url()).await;
        let peak = c.peak_mb();
        println!(
            "{addresses} address(es) holding connections and streams: a worker registered and leased in {took:?}; the coordinator's peak memory {peak:.0} MB"
        );
        assert!(took < Duration::from_secs(1), "{took:?}");
        assert!(peak < budget_mb, "peak memory {peak:.0} MB");
        attack.shutdown().await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // the coordinator is fine
    let (status, _) = crate::http_api::get(&c.url(), "/healthz").await;
    assert_eq!(status, 200);
    // and says what it turned away: connections past an address's share, streams past
    // its calls without a token in flight
    let (_, metrics) = crate::http_api::get(&c.url(), "/metrics").await;
    let count = |line: &str| -> u64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(line))
            .unwrap_or_else(|| panic!("missing {line} in\n{metrics}"))
            .trim()
            .parse()
            .unwrap()
    };
    assert!(count("e2fleet_refused_connections_total{reason=\"address_full\"}") > 0);
    assert!(count("e2fleet_refused_calls_total{reason=\"open_address_full\"}") > 0);
}

/// A health `Watch` stream without a token ends within the open calls' time (a stock
/// client's never ended), with `DEADLINE_EXCEEDED`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_watch_without_a_token_ends() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let channel = Endpoint::from_shared(c.url.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let started = Instant::now();
    let mut stream = health
        .watch(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let end = loop {
        match stream.message().await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("ended without a status"),
            Err(e) => break e,
        }
    };
    assert_eq!(end.code(), tonic::Code::DeadlineExceeded, "{end}");
    let limit = e2fleet_coordinator::server::guard::OPEN_CALL_TIME;
    assert!(started.elapsed() < limit + Duration::from_secs(3));
    c.stop().await;
}

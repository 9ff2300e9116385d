//! The reconnection storm: a thousand simulated workers behind slow links, and the
//! coordinator killed and started again under them. Each simulated worker is a real gRPC
//! client with a connection of its own (TLS, by name) that registers, leases one unit,
//! "thinks" as an engine would, walks the unit for real with the reference walker (every
//! result is genuine, so the job must end exact) and reports it; on a failed call it
//! backs off exactly as `e2fleet-worker` does ([`e2fleet_proto::client::Backoff`]).
//!
//! What it measures: the calls that failed while the coordinator was away, how the
//! returning calls spread out in time (a stampede would bring them all in the first
//! second), the lease latency after the restart (p50, p99) against before it, and the
//! job's exact total at the end.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use e2fleet_engine::formats::{LoadOptions, parse_str};
use e2fleet_engine::plan::SearchPlan;
use e2fleet_engine::search::{NoControl, RunOptions, Walker};
use e2fleet_engine::{FillOrder, Unit};
use e2fleet_proto::client::Backoff;
use e2fleet_proto::convert::{path_from_wire, result_to_wire};
use e2fleet_proto::v2;
use e2fleet_proto::v2::worker_service_client::WorkerServiceClient;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};
use tonic::{Code, Request, Status};

use crate::fleet::{ENROLL, Fleet, FleetSpec, PORT, coordinator_name};
use crate::link::{Link, Shape};

/// What the storm found.
#[derive(Debug)]
pub struct Storm {
    /// Calls that failed, in all.
    pub failed_calls: u64,
    /// Lease latencies (ms) before the restart: p50, p99.
    pub before_ms: (f64, f64),
    /// Lease latencies (ms) in the minute after the restart: p50, p99.
    pub after_ms: (f64, f64),
    /// Seconds after the coordinator answered again by which 50%, 90% and 100% of the
    /// simulated workers had a call go through.
    pub returned_s: (f64, f64, f64),
}

#[derive(Default)]
struct Shared {
    failed: AtomicU64,
    /// (time since the storm's start, lease latency) of every lease call that went through.
    leases: Mutex<Vec<(f64, f64)>>,
    /// Per worker, the first time (since the start) a call went through after the restart.
    back: Mutex<Vec<Option<f64>>>,
    /// When the coordinator answered again (since the start), once it did.
    restarted_at: Mutex<Option<f64>>,
}

/// Runs the storm on `fleet` (one coordinator, no worker programs): `workers` simulated
/// workers over links of round trip `rtt`, each thinking `think` per unit, on a job of
/// `puzzle` in units of `budget` nodes; the coordinator is killed after `before`, kept
/// away for `down`. Returns what it measured once the job is complete.
#[allow(clippy::too_many_arguments)]
pub async fn storm(
    fleet: &mut Fleet,
    workers: usize,
    rtt: Duration,
    think: Duration,
    puzzle: &std::path::Path,
    budget: u64,
    before: Duration,
    down: Duration,
) -> Result<(Storm, e2fleet_proto::api::status::JobStatus)> {
    let job = {
        let p = e2fleet_engine::formats::load_file(puzzle, &LoadOptions::default())
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        fleet
            .admin(0)
            .await?
            .submit(&e2fleet_proto::api::JobRequest {
                name: "storm".into(),
                puzzle_json: e2fleet_engine::formats::to_site_json(&p),
                order: None,
                split_depth: None,
                target_units: Some(workers * 3),
                budget: Some(budget),
                replicas: 1,
                spot_check: 0.0,
                priority: 0,
                share: 1.0,
            })
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .job_id
    };
    // eight links from eight addresses of their own: a thousand hosts behind a few
    // providers, not one address holding every connection
    let coordinator = fleet.coordinators[0].host.clone();
    let mut links = Vec::new();
    for k in 0..8u16 {
        let source = fleet.add_far_address(0, 100 + k as u8)?;
        links.push(
            Link::start(
                SocketAddr::new(IpAddr::V4(coordinator.far), 7800 + k),
                SocketAddr::new(IpAddr::V4(coordinator.addr), PORT),
                Some(IpAddr::V4(source)),
                Shape::rtt(rtt),
            )
            .await?,
        );
    }
    let ca = std::fs::read(fleet.ca())?;
    let shared = Arc::new(Shared {
        back: Mutex::new(vec![None; workers]),
        ..Shared::default()
    });
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..workers {
        let link = links[i % links.len()].addr();
        let (ca, shared) = (ca.clone(), shared.clone());
        // arrivals spread over one think time, as a fleet's would be
        let delay = think.mul_f64(i as f64 / workers as f64);
        tasks.spawn(async move {
            tokio::time::sleep(delay).await;
            sim_worker(i, link, ca, think, shared, start).await
        });
    }
    tokio::time::sleep(before).await;
    fleet.kill_coordinator(0);
    tokio::time::sleep(down).await;
    fleet.start_coordinator(0).await?;
    *shared.restarted_at.lock().expect("restart") = Some(start.elapsed().as_secs_f64());
    let status = fleet.wait_complete(job, Duration::from_secs(900)).await?;
    tasks.abort_all();
    let restarted = shared.restarted_at.lock().expect("restart").unwrap_or(0.0);
    let leases = shared.leases.lock().expect("leases").clone();
    let pick = |from: f64, to: f64| -> (f64, f64) {
        let mut v: Vec<f64> = leases
            .iter()
            .filter(|(t, _)| *t >= from && *t < to)
            .map(|(_, ms)| *ms)
            .collect();
        v.sort_by(f64::total_cmp);
        let at = |p: f64| {
            v.get(((v.len().max(1) - 1) as f64 * p) as usize)
                .copied()
                .unwrap_or(0.0)
        };
        (at(0.5), at(0.99))
    };
    let kill_at = before.as_secs_f64();
    let mut back: Vec<f64> = shared
        .back
        .lock()
        .expect("back")
        .iter()
        .flatten()
        .map(|t| (t - restarted).max(0.0))
        .collect();
    back.sort_by(f64::total_cmp);
    ensure!(!back.is_empty(), "no simulated worker came back");
    let q = |p: f64| back[((back.len() - 1) as f64 * p) as usize];
    Ok((
        Storm {
            failed_calls: shared.failed.load(Ordering::Relaxed),
            before_ms: pick(0.0, kill_at),
            after_ms: pick(restarted, restarted + 60.0),
            returned_s: (q(0.5), q(0.9), q(1.0)),
        },
        status,
    ))
}

/// A fleet for the storm: one coordinator, no worker programs.
pub async fn storm_fleet(lease: Duration) -> Result<Fleet> {
    Fleet::start(FleetSpec {
        coordinators: 1,
        lease_seconds: lease.as_secs(),
        workers: Vec::new(),
        engine: "reference".into(),
    })
    .await
}

/// One simulated worker: register, then lease, think, walk, report, for ever; every
/// failed call backs off and is tried again.
async fn sim_worker(
    i: usize,
    link: SocketAddr,
    ca: Vec<u8>,
    think: Duration,
    shared: Arc<Shared>,
    start: Instant,
) -> Result<()> {
    let channel = Endpoint::from_shared(format!("https://{link}"))?
        .tls_config(
            ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(ca))
                .domain_name(coordinator_name(0)),
        )?
        .connect_timeout(e2fleet_proto::client::CONNECT_TIMEOUT)
        .http2_keep_alive_interval(e2fleet_proto::client::KEEPALIVE_INTERVAL)
        .keep_alive_timeout(e2fleet_proto::client::KEEPALIVE_TIMEOUT)
        .timeout(Duration::from_secs(20))
        .connect_lazy();
    let mut client = WorkerServiceClient::new(channel);
    let mut backoff = Backoff::worker();
    let mut token = String::new();
    let mut plans: std::collections::HashMap<String, Arc<SearchPlan>> = Default::default();
    let mut held: Option<(v2::Lease, e2fleet_engine::UnitResult)> = None;
    loop {
        let step: Result<(), Status> = async {
            if token.is_empty() {
                let r = client
                    .register_worker(Request::new(v2::RegisterWorkerRequest {
                        enroll_token: ENROLL.into(),
                        host: Some(v2::HostInfo {
                            hostname: format!("sim-{i}"),
                            cpu_model: "simulated".into(),
                            cores: 1,
                            arch: std::env::consts::ARCH.into(),
                            os: std::env::consts::OS.into(),
                            worker_version: "sim".into(),
                            engine_kind: v2::EngineKind::Reference.into(),
                            engine_release: "reference-0.1.0".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }))
                    .await?
                    .into_inner();
                token = r.worker_token;
                return Ok(());
            }
            if let Some((lease, result)) = &held {
                client
                    .report_result(e2fleet_proto::client::authed(
                        &token,
                        v2::ReportResultRequest {
                            lease_id: lease.lease_id.clone(),
                            unit_id: lease.unit_id,
                            result: Some(result_to_wire(result)),
                            engine_seconds: think.as_secs_f64(),
                            engine_kind: v2::EngineKind::Reference.into(),
                            engine_build: "reference-0.1.0".into(),
                        },
                    ))
                    .await?;
                held = None;
                return Ok(());
            }
            let sent = Instant::now();
            let r = client
                .lease_units(e2fleet_proto::client::authed(
                    &token,
                    v2::LeaseUnitsRequest {
                        max_units: 1,
                        engine_kind: v2::EngineKind::Reference.into(),
                        engine_build: String::new(),
                        probes: false,
                    },
                ))
                .await?
                .into_inner();
            let ms = sent.elapsed().as_secs_f64() * 1000.0;
            shared
                .leases
                .lock()
                .expect("leases")
                .push((start.elapsed().as_secs_f64(), ms));
            let Some(lease) = r.leases.into_iter().next() else {
                tokio::time::sleep(Duration::from_millis(r.retry_after_ms.max(100) as u64)).await;
                return Ok(());
            };
            let plan = match plans.get(&lease.job_id) {
                Some(p) => p.clone(),
                None => {
                    let spec = client
                        .get_job_spec(e2fleet_proto::client::authed(
                            &token,
                            v2::GetJobSpecRequest {
                                job_id: lease.job_id.clone(),
                            },
                        ))
                        .await?
                        .into_inner();
                    let puzzle = parse_str(&spec.puzzle_json, "job.json", &LoadOptions::default())
                        .map_err(|e| Status::internal(e.to_string()))?;
                    let order = FillOrder::new(
                        &puzzle,
                        &spec.order.parse().map_err(|_| Status::internal("order"))?,
                    )
                    .map_err(|e| Status::internal(e.to_string()))?;
                    let plan = Arc::new(SearchPlan::new(&puzzle, &order));
                    plans.insert(lease.job_id.clone(), plan.clone());
                    plan
                }
            };
            tokio::time::sleep(think).await;
            let unit = Unit {
                prefix: path_from_wire(&lease.prefix, "prefix")
                    .map_err(|e| Status::internal(e.to_string()))?,
                cursor: path_from_wire(&lease.cursor, "cursor")
                    .map_err(|e| Status::internal(e.to_string()))?,
            };
            let options = RunOptions {
                budget: (lease.budget > 0).then_some(lease.budget),
                max_solutions: e2fleet_proto::REPORT_MAX_SOLUTIONS,
            };
            let result = Walker::new(&plan)
                .run(&unit, options, &mut NoControl)
                .map_err(|e| Status::internal(e.to_string()))?;
            held = Some((lease, result));
            Ok(())
        }
        .await;
        match step {
            Ok(()) => {
                backoff.succeeded();
                let restarted = shared.restarted_at.lock().expect("restart").is_some();
                if restarted {
                    let mut back = shared.back.lock().expect("back");
                    back[i].get_or_insert(start.elapsed().as_secs_f64());
                }
            }
            Err(s) => {
                shared.failed.fetch_add(1, Ordering::Relaxed);
                if s.code() == Code::Unauthenticated {
                    token.clear();
                }
                tokio::time::sleep(backoff.failed()).await;
            }
        }
    }
}

/// Where a storm's puzzle lives.
pub fn puzzle() -> Result<PathBuf> {
    Ok(crate::scenarios::puzzles_dir()?.join("brendan/set1/pieces_06x06.txt"))
}

//! Coordinator load benchmark (not a test): an in-process coordinator on a real SQLite
//! file, driven over loopback gRPC by many simulated workers.
//!
//! Each simulated worker has its own identity and token and loops: lease one unit, "think"
//! (the time a real engine would spend), walk it for real with a 1-node budget (so every
//! report is a genuine, verifiable result whose cursor becomes the next continuation
//! unit: an endless supply), report. A think time is drawn uniformly within
//! `--think-jitter-pct` (default 5%) of `--think-ms`: real units differ in length (a
//! budgeted minute on one machine and the next differs by far more than the 20 ms that
//! 5% of 400 ms is), and workers that all think exactly as long fall into step. The
//! workers one batch answers together then lease together, report together 400 ms
//! later and join the next cohort that arrives while they wait, so the batches grow into
//! bursts with idle gaps between them (a third of report batches found the queue empty
//! behind them), and latency grows over the run; `--think-jitter-pct 0` measures that
//! lockstep fleet (docs/benchmarks.md). Workers share a pool of HTTP/2 connections; they
//! start spread over one think time and run on their own runtime at nice 19
//! (`--workers-nice N`), the coordinator on another. Throughput and latencies are taken
//! over the same steady window, after one think time of warm-up.
//!
//! ```sh
//! cargo bench -p e2fleet-coordinator --bench load -- --workers 1000 --think-ms 400 --seconds 20
//! (`--jobs N`: N jobs side by side with equal shares)
//! cargo bench -p e2fleet-coordinator --bench load -- --workers 200 --think-ms 0 --campaign 10000000
//! (`--campaign N`: run until N units are done, printing at every tenth the database's
//! bytes per unit and the units/s of that tenth: storage and speed over a long campaign;
//! `--db FILE` keeps the database there; `--archive-after-s N` archives units decided N s
//! ago, as `serve` does by default after an hour)
//! cargo bench -p e2fleet-coordinator --bench load -- --workers 1000 --think-ms 400 --seconds 20 --volunteers 50
//! (`--volunteers N`: the workers enrol with N volunteer accounts, round robin, trusted
//! from their first result (`trust_after` 0, 5% drawn for a recheck by another account):
//! every accepted result takes the volunteer path, credit included)
//! cargo bench -p e2fleet-coordinator --bench load -- --workers 1000 --think-ms 400 --seconds 20 --heartbeat-s 20
//! (`--heartbeat-s N`: each worker also heartbeats its lease every N s, as a worker does
//! at a third of its lease: 20 s with `serve`'s default 60 s lease; their latencies printed)
//! cargo bench -p e2fleet-coordinator --bench load -- --workers 1000 --think-ms 400 --seconds 20 --timeline
//! (`--timeline`: also each second of the window, its calls and their p50 and p99: a
//! tail made of a few bad seconds reads differently from a steady one)
//! cargo bench -p e2fleet-coordinator --bench load -- --db postgres://postgres@127.0.0.1/postgres --coordinators 2
//! (`--db postgres://SERVER/DB`: on a fresh database of that PostgreSQL server, dropped
//! at the end unless `--keep`;
//! `--coordinators N`: N coordinators on it, each with its own port, writer connection
//! and caches, the workers spread over them round robin)
//! ```
//! Prints completed units/s, lease/report latency percentiles as the workers saw them and
//! as the coordinators timed them (from a request's arrival to its answer: the difference
//! is the scheduling of the shared cores and loopback), the writer thread's figures (queue wait, run time per job, commits, how much of the
//! window transactions were open), and on PostgreSQL the round trips and statements per
//! completed unit (counted by the store) and the server's CPU time per unit (its
//! processes' times, when it runs on this machine).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use e2fleet_coordinator::fleet::call_times::{Call, Histogram};
use e2fleet_coordinator::fleet::{BatchTimes, BatchTotals, Fleet, FleetConfig, system_clock};
use e2fleet_coordinator::store::{Database, Store, TrafficTotals, WriterTotals};
use e2fleet_engine::formats::{LoadOptions, load_file, to_site_json};
use e2fleet_engine::plan::SearchPlan;
use e2fleet_engine::search::{NoControl, RunOptions, Walker};
use e2fleet_engine::{FillOrder, Unit};
use e2fleet_proto::api::{JobId, JobRequest};
use e2fleet_proto::convert::{path_from_wire, result_to_wire};
use e2fleet_proto::v2;
use e2fleet_proto::v2::worker_service_client::WorkerServiceClient;
use tonic::Request;
use tonic::transport::Channel;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn auth<T>(token: &str, m: T) -> Request<T> {
    e2fleet_proto::client::authed(token, m)
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p) as usize] as f64 / 1000.0
}

/// A measured call's sample: when it was answered (microseconds from `origin`) and how
/// long it took.
fn sample(origin: Instant, sent: Instant) -> (u64, u64) {
    let now = Instant::now();
    (
        now.duration_since(origin).as_micros() as u64,
        now.duration_since(sent).as_micros() as u64,
    )
}

/// `--timeline`: each second of the window, the calls answered in it and their p50 and
/// p99, to tell a steady tail from a few bad seconds (a stall of the server, the machine
/// or the coordinator's periodic work).
fn print_timeline(leases: &[(u64, u64)], reports: &[(u64, u64)], from: u64, seconds: u64) {
    // each second's latencies, sorted, in one pass over the samples
    let by_second = |samples: &[(u64, u64)]| {
        let mut seconds = vec![Vec::new(); seconds as usize];
        for &(at, lat) in samples {
            if let Some(second) = at
                .checked_sub(from)
                .and_then(|t| seconds.get_mut((t / 1_000_000) as usize))
            {
                second.push(lat);
            }
        }
        for second in &mut seconds {
            second.sort_unstable();
        }
        seconds
    };
    let (leases, reports) = (by_second(leases), by_second(reports));
    println!("second  leases  p50 ms  p99 ms  reports  p50 ms  p99 ms");
    for (s, (l, r)) in leases.iter().zip(&reports).enumerate() {
        println!(
            "{s:>6}  {:>6}  {:>6.1}  {:>6.1}  {:>7}  {:>6.1}  {:>6.1}",
            l.len(),
            pct(l, 0.5),
            pct(l, 0.99),
            r.len(),
            pct(r, 0.5),
            pct(r, 0.99)
        );
    }
}

fn main() {
    // the simulated workers stand in for machines elsewhere: their threads run at the
    // lowest priority (nice 19; `--workers-nice 0` to share the CPU equally) so that on
    // this one 2-core machine they load the coordinator without crowding it off the CPU.
    // They still get all the CPU the coordinator leaves, and their latencies are
    // measured on their side (a late wake-up of theirs counts against the coordinator).
    let nice = arg("--workers-nice", 19) as i32;
    tokio::runtime::Builder::new_multi_thread()
        .thread_name("sim-workers")
        .on_thread_start(move || renice_this_thread(nice))
        .enable_all()
        .build()
        .unwrap()
        .block_on(run());
}

/// The database's bytes on disk: a SQLite file and its write-ahead log, or PostgreSQL's
/// `pg_database_size` (tables, indexes and TOAST; not the server's shared WAL).
async fn db_bytes(db: &Database) -> u64 {
    match db {
        Database::Sqlite(path) => {
            let size = |p: std::path::PathBuf| std::fs::metadata(p).map_or(0, |m| m.len());
            let mut wal = path.as_os_str().to_owned();
            wal.push("-wal");
            size(path.to_path_buf()) + size(wal.into())
        }
        Database::Postgres(_) => e2fleet_coordinator::store::testing::scalar(
            db,
            "SELECT pg_database_size(current_database())",
        )
        .await
        .max(0) as u64,
    }
}

/// Waits until `target` units are done, printing storage and speed at every tenth.
async fn run_campaign(done: &AtomicU64, target: u64, db: &Database, fleet: &Fleet) {
    let step = (target / 10).max(1);
    let (mut last_done, mut last_at) = (done.load(Ordering::Relaxed), Instant::now());
    let start = Instant::now();
    println!(
        "campaign: {target} units; at every tenth: units done, database bytes, bytes per unit, units/s of the tenth, units archived"
    );
    while last_done < target {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now_done = done.load(Ordering::Relaxed);
        if now_done >= last_done + step || now_done >= target {
            let bytes = db_bytes(db).await;
            let archived: u64 = fleet
                .store()
                .read(|tx| tx.archived_units())
                .await
                .unwrap_or_default();
            println!(
                "  {:>10} units  {:>6.0} s  {:>14} bytes  {:>7.0} bytes/unit  {:>6.0} units/s  {:>10} archived",
                now_done,
                start.elapsed().as_secs_f64(),
                bytes,
                bytes as f64 / now_done.max(1) as f64,
                (now_done - last_done) as f64 / last_at.elapsed().as_secs_f64(),
                archived,
            );
            (last_done, last_at) = (now_done, Instant::now());
        }
    }
}

/// Lowers the calling thread's priority (Linux: `renice` takes a thread id).
fn renice_this_thread(nice: i32) {
    let tid = std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name()?.to_str()?.parse::<u32>().ok());
    if let Some(tid) = tid {
        let _ = std::process::Command::new("renice")
            .args(["-n", &nice.to_string(), "-p", &tid.to_string()])
            .stdout(std::process::Stdio::null())
            .status();
    }
}

async fn run() {
    // a subscriber as the coordinator binary has one (without it, tracing hands every
    // span to the `log` crate: work a real coordinator does not do)
    e2fleet_proto::logs::init(e2fleet_proto::logs::LogFormat::Text, "warn");
    let workers = arg("--workers", 1000) as usize;
    let think = Duration::from_millis(arg("--think-ms", 100));
    // each unit's think drawn within this fraction of `think` (see the module docs)
    let jitter = arg("--think-jitter-pct", 5).min(100) as f64 / 100.0;
    let seconds = arg("--seconds", 20);
    let channels = arg("--connections", 32) as usize;
    // jobs running side by side (equal shares): the lease path then follows the shares
    let jobs = arg("--jobs", 1).max(1) as usize;

    // the coordinator gets a runtime (threads) of its own, as it would as its own
    // process; the simulated workers run on this one
    let coordinator = tokio::runtime::Builder::new_multi_thread()
        .thread_name("coordinator")
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db: Database = match std::env::args().skip_while(|a| a != "--db").nth(1) {
        Some(db) => db.parse().unwrap(),
        None => Database::Sqlite(dir.path().join("load.db")),
    };
    // a fresh database of that server for each run, dropped at the end unless `--keep`
    let mut fresh = None;
    let db = match db {
        Database::Postgres(server) => {
            let name = format!("e2fleet_load_{}", uuid::Uuid::new_v4().simple());
            let url = e2fleet_coordinator::store::testing::create_database(&server, &name)
                .await
                .unwrap();
            eprintln!("on PostgreSQL: database {name}");
            fresh = Some((server, name));
            Database::Postgres(url)
        }
        db => db,
    };
    let coordinators = arg("--coordinators", 1).max(1) as usize;
    assert!(
        coordinators == 1 || matches!(db, Database::Postgres(_)),
        "several coordinators share a PostgreSQL database, not a SQLite file"
    );
    let measured = db.clone();
    let campaign = arg("--campaign", 0);
    // `--archive-after-s N`: the detail window, as `serve --archive-after-s` (0: no archive)
    let archive_after_s = arg("--archive-after-s", 0);
    let volunteers = arg("--volunteers", 0) as usize;
    let Started {
        fleets,
        urls,
        job_id,
        units,
        depth,
        enrol,
    } = start_coordinators(
        &coordinator,
        db,
        Shape {
            coordinators,
            workers,
            jobs,
            volunteers,
            archive_after_s,
        },
    )
    .await;
    let fleet = fleets[0].clone();
    let puzzle_path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../puzzles/bench/bench-hard.json");
    let puzzle = load_file(&puzzle_path, &LoadOptions::default()).unwrap();
    let plan = Arc::new(SearchPlan::new(&puzzle, &FillOrder::row_major(&puzzle)));
    eprintln!(
        "job {job_id}: {units} units at depth {depth}; {workers} workers, think {think:?}, {seconds} s"
    );

    let pool = connections(&urls, channels.max(1).max(coordinators)).await;
    let stop = Arc::new(AtomicBool::new(false));
    // latencies are taken in the same steady window as the throughput
    let measuring = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let lease_lat = Arc::new(std::sync::Mutex::new(Vec::new()));
    let report_lat = Arc::new(std::sync::Mutex::new(Vec::new()));
    let beat_lat = Arc::new(std::sync::Mutex::new(Vec::new()));
    // `--heartbeat-s N`: each worker heartbeats its lease every N s, as a worker does at a
    // third of the lease (20 s with `serve`'s default 60 s lease); 0: none
    let beat = Some(Duration::from_secs(arg("--heartbeat-s", 0))).filter(|d| !d.is_zero());
    // register every worker first (64 at a time), so that registration does not queue
    // behind the load the first workers already make
    let registered_at = Instant::now();
    let origin = registered_at;
    let tokens = register_workers(&pool, workers, &enrol).await;
    eprintln!(
        "{workers} workers registered in {:.1} s",
        registered_at.elapsed().as_secs_f64()
    );
    let sim = Sim {
        workers,
        think,
        jitter,
        stop: stop.clone(),
        done: done.clone(),
        measuring: measuring.clone(),
        lease_lat: lease_lat.clone(),
        report_lat: report_lat.clone(),
        origin,
        beat,
        beat_lat: beat_lat.clone(),
    };
    let mut tasks = Vec::new();
    for (i, reg) in tokens.into_iter().enumerate() {
        let client = WorkerServiceClient::new(pool[i % pool.len()].clone());
        tasks.push(tokio::spawn(sim_worker(
            i,
            client,
            reg.worker_token,
            plan.clone(),
            sim.clone(),
        )));
    }
    // measure a steady window after one think time of warm-up
    tokio::time::sleep(think + Duration::from_secs(1)).await;
    measuring.store(true, Ordering::Relaxed);
    let start_done = done.load(Ordering::Relaxed);
    let writers = |fleets: &[Arc<Fleet>]| {
        fleets
            .iter()
            .map(|f| f.writer_stats())
            .fold(Default::default(), add_totals)
    };
    let w0 = writers(&fleets);
    let batches = |fleets: &[Arc<Fleet>]| {
        fleets.iter().map(|f| f.batch_totals()).fold(
            (BatchTotals::default(), BatchTotals::default()),
            |(a, b), (c, d)| (add_batches(a, c), add_batches(b, d)),
        )
    };
    let batch_times = |fleets: &[Arc<Fleet>]| {
        fleets.iter().map(|f| f.batch_times()).fold(
            (BatchTimes::default(), BatchTimes::default()),
            |(a, b), (c, d)| (a.plus(&c), b.plus(&d)),
        )
    };
    let b0 = (batches(&fleets), batch_times(&fleets));
    let traffic = |fleets: &[Arc<Fleet>]| {
        fleets
            .iter()
            .filter_map(|f| f.db_traffic())
            .fold(TrafficTotals::default(), |a, b| a + b)
    };
    let calls = |fleets: &[Arc<Fleet>]| {
        let kind = |call| {
            fleets
                .iter()
                .map(|f| f.call_times.snapshot()[call as usize].1.clone())
                .fold(Histogram::default(), |a, b| a.plus(&b))
        };
        (kind(Call::Lease), kind(Call::Report))
    };
    let c0 = calls(&fleets);
    let (t0, cpu0, own0) = (traffic(&fleets), server_cpu_s(), own_cpu_s());
    let started = Instant::now();
    if campaign > 0 {
        run_campaign(&done, campaign, &measured, &fleet).await;
    } else {
        tokio::time::sleep(Duration::from_secs(seconds)).await;
    }
    let completed = done.load(Ordering::Relaxed) - start_done;
    measuring.store(false, Ordering::Relaxed);
    let w1 = writers(&fleets);
    let b1 = (batches(&fleets), batch_times(&fleets));
    let c1 = calls(&fleets);
    let (t1, cpu1, own1) = (traffic(&fleets), server_cpu_s(), own_cpu_s());
    let elapsed = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let leases = std::mem::take(&mut *lease_lat.lock().unwrap());
    let reports = std::mem::take(&mut *report_lat.lock().unwrap());
    let sorted = |samples: &[(u64, u64)]| {
        let mut lat: Vec<u64> = samples.iter().map(|s| s.1).collect();
        lat.sort_unstable();
        lat
    };
    let (l, r) = (sorted(&leases), sorted(&reports));
    let status_fleet = fleet.clone();
    let doc = coordinator
        .spawn(async move { status_fleet.job_status(job_id).await.unwrap() })
        .await
        .unwrap();
    println!(
        "coordinators {coordinators} ({})  workers {workers}  think {} ms ±{:.0}%  completed {:.0} units/s  lease p50 {:.1} ms p99 {:.1} ms  report p50 {:.1} ms p99 {:.1} ms  (job nodes {}, units done {})",
        fleet.store_backend(),
        think.as_millis(),
        jitter * 100.0,
        completed as f64 / elapsed,
        pct(&l, 0.5),
        pct(&l, 0.99),
        pct(&r, 0.5),
        pct(&r, 0.99),
        doc.nodes_total,
        doc.units.done,
    );
    print_calls(c1.0.since(&c0.0), c1.1.since(&c0.1));
    if std::env::args().any(|a| a == "--timeline") {
        let from = started.duration_since(origin).as_micros() as u64;
        print_timeline(&leases, &reports, from, seconds);
    }
    if let Some(beat) = beat {
        let mut b = beat_lat.lock().unwrap().clone();
        b.sort_unstable();
        println!(
            "heartbeats every {} s a worker: {} in the window, p50 {:.1} ms p99 {:.1} ms",
            beat.as_secs(),
            b.len(),
            pct(&b, 0.5),
            pct(&b, 0.99)
        );
    }
    print_writers(&w0, &w1, elapsed);
    print_batches(&b0, &b1);
    println!(
        "this process (coordinators and simulated workers): CPU {:.0} us per completed unit",
        (own1 - own0) * 1e6 / completed.max(1) as f64
    );
    if fleet.db_traffic().is_some() {
        print_database(t1 - t0, cpu0.zip(cpu1).map(|(a, b)| b - a), completed);
    }
    coordinator.shutdown_background();
    if let Some((server, name)) = fresh.filter(|_| !std::env::args().any(|a| a == "--keep"))
        && let Err(e) = e2fleet_coordinator::store::testing::drop_database(&server, &name).await
    {
        eprintln!("database {name} not dropped: {e}");
    }
}

/// How many coordinators, workers, jobs and volunteer accounts the bench runs.
struct Shape {
    coordinators: usize,
    workers: usize,
    jobs: usize,
    volunteers: usize,
    archive_after_s: u64,
}

/// The coordinators the bench started, the first one's job and the volunteers' tokens.
struct Started {
    fleets: Vec<Arc<Fleet>>,
    urls: Vec<String>,
    job_id: JobId,
    units: usize,
    depth: usize,
    enrol: Vec<String>,
}

/// Starts `shape.coordinators` coordinators on `db`, on the coordinators' runtime; the
/// first submits the job (bench-hard with a 1-node budget: every report carries a cursor
/// and spawns the next unit) and enrols the volunteer accounts.
async fn start_coordinators(
    coordinator: &tokio::runtime::Runtime,
    db: Database,
    shape: Shape,
) -> Started {
    let Shape {
        coordinators,
        workers,
        jobs,
        volunteers,
        archive_after_s,
    } = shape;
    let mut fleets = Vec::new();
    let mut urls = Vec::new();
    for _ in 1..coordinators {
        let db = db.clone();
        let (fleet, url) = coordinator
            .spawn(async move {
                let fleet = Arc::new(Fleet::new(
                    Store::connect(&db).await.unwrap(),
                    bench_config(archive_after_s, volunteers > 0),
                    system_clock(),
                ));
                let url = serve(fleet.clone()).await;
                (fleet, url)
            })
            .await
            .unwrap();
        fleets.push(fleet);
        urls.push(url);
    }
    let (fleet, url, job_id, units, depth, enrol) = coordinator
        .spawn(async move {
            let store = Store::connect(&db).await.unwrap();
            let fleet = Arc::new(Fleet::new(
                store,
                bench_config(archive_after_s, volunteers > 0),
                system_clock(),
            ));
            let puzzle_path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../puzzles/bench/bench-hard.json");
            let puzzle = load_file(&puzzle_path, &LoadOptions::default()).unwrap();
            // a 1-node budget: every report carries a cursor and spawns the next unit
            let request = JobRequest {
                name: "load".into(),
                puzzle_json: to_site_json(&puzzle),
                order: None,
                split_depth: None,
                target_units: Some(workers * 2),
                budget: Some(1),
                replicas: 1,
                spot_check: 0.0,
                priority: 0,
                share: 1.0,
            };
            let created = fleet.submit_job(request.clone()).await.unwrap();
            for _ in 1..jobs {
                fleet.submit_job(request.clone()).await.unwrap();
            }
            let (job_id, units, depth) = (created.job_id, created.units, created.split_depth);
            let mut enrol = Vec::new();
            for k in 0..volunteers {
                enrol.push(fleet.add_account(&format!("vol-{k}"), "").await.unwrap().1);
            }
            let url = serve(fleet.clone()).await;
            (fleet, url, job_id, units, depth, enrol)
        })
        .await
        .unwrap();
    fleets.insert(0, fleet.clone());
    urls.insert(0, url);
    Started {
        fleets,
        urls,
        job_id,
        units,
        depth,
        enrol,
    }
}

/// What every simulated worker shares: the load's shape, the stop flag, the counters.
#[derive(Clone)]
struct Sim {
    workers: usize,
    think: Duration,
    /// Each unit's think is drawn uniformly within this fraction of `think`.
    jitter: f64,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    measuring: Arc<AtomicBool>,
    /// Each measured call's answer time (from `origin`) and latency, in microseconds.
    lease_lat: Arc<std::sync::Mutex<Vec<(u64, u64)>>>,
    report_lat: Arc<std::sync::Mutex<Vec<(u64, u64)>>>,
    /// What the answer times count from.
    origin: Instant,
    /// Every how long a worker heartbeats (`None`: never).
    beat: Option<Duration>,
    beat_lat: Arc<std::sync::Mutex<Vec<u64>>>,
}

/// Registers every worker first (64 at a time), so that registration does not queue
/// behind the load the first workers already make.
async fn register_workers(
    pool: &[Channel],
    workers: usize,
    enrol: &[String],
) -> Vec<v2::RegisterWorkerResponse> {
    let mut tokens = Vec::with_capacity(workers);
    for chunk in (0..workers).collect::<Vec<_>>().chunks(64) {
        let mut batch = Vec::new();
        for &i in chunk {
            let mut client = WorkerServiceClient::new(pool[i % pool.len()].clone());
            let enroll_token = if enrol.is_empty() {
                "enroll-load-bench-0123".to_string()
            } else {
                enrol[i % enrol.len()].clone()
            };
            batch.push(tokio::spawn(async move {
                // the coordinator takes few registrations at once from one address:
                // refused ones are retried (sooner than a worker would, so the bench
                // measures leases and reports, not its own back-off)
                let mut backoff = e2fleet_proto::client::Backoff::new(
                    std::time::Duration::from_millis(20),
                    std::time::Duration::from_secs(1),
                );
                loop {
                    match client
                        .register_worker(v2::RegisterWorkerRequest {
                            enroll_token: enroll_token.clone(),
                            host: Some(v2::HostInfo {
                                hostname: format!("sim-{i}"),
                                engine_kind: v2::EngineKind::Reference.into(),
                                ..Default::default()
                            }),
                            previous_worker_id: String::new(),
                            previous_worker_token: String::new(),
                        })
                        .await
                    {
                        Ok(r) => break r.into_inner(),
                        Err(s) if s.code() == tonic::Code::ResourceExhausted => {
                            tokio::time::sleep(backoff.failed()).await
                        }
                        Err(s) => panic!("{s}"),
                    }
                }
            }));
        }
        for b in batch {
            tokens.push(b.await.unwrap());
        }
    }
    tokens
}

/// Simulated worker `i`: leases one unit, thinks, walks it for real (a 1-node budget) and
/// reports, until the stop flag; its latencies while `measuring`.
async fn sim_worker(
    i: usize,
    mut client: WorkerServiceClient<Channel>,
    token: String,
    plan: Arc<SearchPlan>,
    sim: Sim,
) {
    let Sim {
        workers,
        think,
        jitter,
        stop,
        done,
        measuring,
        lease_lat,
        report_lat,
        origin,
        beat,
        beat_lat,
    } = sim;
    // the lease held, for the heartbeats
    let held: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
    let beats = beat.map(|every| {
        let (mut client, token, held) = (client.clone(), token.clone(), held.clone());
        let (stop, measuring) = (stop.clone(), measuring.clone());
        tokio::spawn(async move {
            // spread over one period, as workers started at different times
            tokio::time::sleep(every.mul_f64(i as f64 / workers as f64)).await;
            let mut lat = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let leases: Vec<_> = (held.lock().unwrap().iter())
                    .map(|id| v2::LeaseProgress {
                        lease_id: id.clone(),
                        committed: 0,
                    })
                    .collect();
                let request = v2::HeartbeatRequest {
                    leases,
                    per_core_nodes_per_s: 1.0,
                    threads: 1,
                    ..Default::default()
                };
                let t = Instant::now();
                if client.heartbeat(auth(&token, request)).await.is_err() {
                    break;
                }
                if measuring.load(Ordering::Relaxed) {
                    lat.push(t.elapsed().as_micros() as u64);
                }
                tokio::time::sleep(every).await;
            }
            beat_lat.lock().unwrap().extend(lat);
        })
    });
    // spread the start over one think time
    tokio::time::sleep(think.mul_f64(i as f64 / workers as f64)).await;
    let (mut ll, mut rl) = (Vec::new(), Vec::new());
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        let Ok(r) = client
            .lease_units(auth(
                &token,
                v2::LeaseUnitsRequest {
                    max_units: 1,
                    ..Default::default()
                },
            ))
            .await
        else {
            break;
        };
        if measuring.load(Ordering::Relaxed) {
            ll.push(sample(origin, t));
        }
        let Some(lease) = r.into_inner().leases.pop() else {
            tokio::time::sleep(think).await;
            continue;
        };
        *held.lock().unwrap() = Some(lease.lease_id.clone());
        let thought = think.mul_f64(1.0 + jitter * (2.0 * rand::random::<f64>() - 1.0));
        tokio::time::sleep(thought).await;
        let unit = Unit {
            prefix: path_from_wire(&lease.prefix, "p").unwrap(),
            cursor: path_from_wire(&lease.cursor, "c").unwrap(),
        };
        let options = RunOptions {
            budget: Some(1),
            max_solutions: e2fleet_proto::REPORT_MAX_SOLUTIONS,
        };
        let result = Walker::new(&plan)
            .run(&unit, options, &mut NoControl)
            .unwrap();
        let t = Instant::now();
        let ok = client
            .report_result(auth(
                &token,
                v2::ReportResultRequest {
                    lease_id: lease.lease_id,
                    unit_id: lease.unit_id,
                    result: Some(result_to_wire(&result)),
                    engine_seconds: thought.as_secs_f64(),
                    engine_kind: v2::EngineKind::Reference.into(),
                    engine_build: "load".into(),
                },
            ))
            .await
            .is_ok();
        if measuring.load(Ordering::Relaxed) {
            rl.push(sample(origin, t));
        }
        *held.lock().unwrap() = None;
        if ok {
            done.fetch_add(1, Ordering::Relaxed);
        }
    }
    if let Some(beats) = beats {
        let _ = beats.await;
    }
    lease_lat.lock().unwrap().extend(ll);
    report_lat.lock().unwrap().extend(rl);
}

/// The calls of the measured window as the coordinators timed them, from a request's
/// arrival to its answer (the simulated workers' latencies add both runtimes' scheduling
/// on the shared cores and the loopback connection).
fn print_calls(lease: Histogram, report: Histogram) {
    let mean = |h: &Histogram| h.sum_us as f64 / h.count().max(1) as f64 / 1e3;
    println!(
        "inside the coordinators: lease mean {:.1} ms, p50 {}, p99 {}; report mean {:.1} ms, p50 {}, p99 {}",
        mean(&lease),
        at_most(&lease, 0.5),
        at_most(&lease, 0.99),
        mean(&report),
        at_most(&report, 0.5),
        at_most(&report, 0.99),
    );
}

/// An upper bound of a timed quantile, as the bench prints it.
fn at_most(h: &Histogram, q: f64) -> String {
    h.quantile_at_most(q).map_or("> 10 s".into(), |d| {
        format!("<= {:.1} ms", d.as_secs_f64() * 1e3)
    })
}

fn add_batches(a: BatchTotals, b: BatchTotals) -> BatchTotals {
    BatchTotals {
        batches: a.batches + b.batches,
        requests: a.requests + b.requests,
    }
}

/// Lease-request and report batches: how many, and what they timed.
type Batches = ((BatchTotals, BatchTotals), (BatchTimes, BatchTimes));

/// The lease-request and report batches of the measured window (`b0` to `b1`): how many
/// and how full, each request's wait to be taken into one, and each one's write.
fn print_batches(b0: &Batches, b1: &Batches) {
    let line = |a: BatchTotals, b: BatchTotals, ta: &BatchTimes, tb: &BatchTimes| {
        let n = b.batches - a.batches;
        let BatchTimes { waited, written } = tb.since(ta);
        format!(
            "{n} of {:.1} requests (waited p50 {}, p99 {}; written p50 {}, p99 {})",
            (b.requests - a.requests) as f64 / n.max(1) as f64,
            at_most(&waited, 0.5),
            at_most(&waited, 0.99),
            at_most(&written, 0.5),
            at_most(&written, 0.99),
        )
    };
    println!(
        "batches: leases {}; reports {}",
        line(b0.0.0, b1.0.0, &b0.1.0, &b1.1.0),
        line(b0.0.1, b1.0.1, &b0.1.1, &b1.1.1)
    );
}

/// What the database server was asked and spent per completed unit.
fn print_database(t: TrafficTotals, server_cpu_s: Option<f64>, completed: u64) {
    let per = |n: u64| n as f64 / completed.max(1) as f64;
    let cpu = match server_cpu_s {
        Some(s) => format!(
            "server CPU {:.0} us per unit (the postgres processes of this machine)",
            s * 1e6 / completed.max(1) as f64
        ),
        None => "server CPU not measured (no postgres process on this machine)".into(),
    };
    println!(
        "database: {:.1} round trips and {:.1} statements per completed unit (lease and report, reads included); {cpu}",
        per(t.round_trips),
        per(t.statements),
    );
}

/// CPU seconds this process has used (user and system).
fn own_cpu_s() -> f64 {
    let tick = clock_ticks();
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            let (_, rest) = stat.rsplit_once(')')?;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            // utime, stime: fields 14-15 of proc(5), 11-12 here
            Some(
                fields
                    .get(11..13)?
                    .iter()
                    .filter_map(|v| v.parse::<u64>().ok())
                    .sum::<u64>() as f64
                    / tick,
            )
        })
        .unwrap_or(0.0)
}

/// The kernel's clock ticks a second (`getconf CLK_TCK`).
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse::<f64>().ok())
        .unwrap_or(100.0)
}

/// CPU seconds this machine's PostgreSQL server processes have used (those that exited
/// are in the postmaster's children's times); `None` when none runs here.
fn server_cpu_s() -> Option<f64> {
    let tick = clock_ticks();
    let mut ticks = 0u64;
    let mut found = false;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // "pid (comm) state ppid ...": fields after the command's closing parenthesis
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        if !head.ends_with("(postgres") {
            continue;
        }
        found = true;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // utime, stime, cutime, cstime: fields 14-17 of proc(5), 11-14 here
        ticks += fields
            .get(11..15)
            .map(|f| f.iter().filter_map(|v| v.parse::<u64>().ok()).sum())
            .unwrap_or(0);
    }
    found.then(|| ticks as f64 / tick)
}

/// The writer threads' figures over the measured window (`w0` to `w1`).
fn print_writers(w0: &WriterTotals, w1: &WriterTotals, elapsed: f64) {
    let jobs = (w1.jobs - w0.jobs).max(1);
    let batches = (w1.batches - w0.batches).max(1);
    println!(
        "writer threads: {} jobs, queued {:.2} ms and ran {:.0} us on average; {} commits of {:.1} jobs, transactions open {:.0}% of the window (summed over the threads); longest queue wait {:.1} ms, longest batch {:.1} ms (since start); {} WAL resets",
        w1.jobs - w0.jobs,
        (w1.queued_us - w0.queued_us) as f64 / jobs as f64 / 1000.0,
        (w1.running_us - w0.running_us) as f64 / jobs as f64,
        w1.batches - w0.batches,
        jobs as f64 / batches as f64,
        (w1.batch_us - w0.batch_us) as f64 / 1e6 / elapsed * 100.0,
        w1.max_queued_us as f64 / 1000.0,
        w1.max_batch_us as f64 / 1000.0,
        w1.wal_resets - w0.wal_resets,
    );
}

/// `n` connections spread over the coordinators: worker i uses `pool[i % len]`, so the
/// workers are spread round robin too.
async fn connections(urls: &[String], n: usize) -> Vec<Channel> {
    let mut pool = Vec::new();
    for c in 0..n {
        pool.push(
            Channel::from_shared(urls[c % urls.len()].clone())
                .unwrap()
                .tcp_nodelay(true)
                .connect()
                .await
                .unwrap(),
        );
    }
    pool
}

/// The fleet settings of every coordinator in the bench.
fn bench_config(archive_after_s: u64, volunteers: bool) -> FleetConfig {
    FleetConfig {
        lease: Duration::from_secs(300),
        quarantine_after: 3,
        // volunteers trusted from the start: the accepted-alone path, with its rechecks
        trust: if volunteers {
            e2fleet_coordinator::fleet::TrustPolicy {
                trust_after: 0,
                ..Default::default()
            }
        } else {
            Default::default()
        },
        archive_after: (archive_after_s > 0).then(|| Duration::from_secs(archive_after_s)),
        accounts: Default::default(),
        enroll_token: "enroll-load-bench-0123".into(),
        admin_token: "admin-load-bench-0123".into(),
    }
}

/// Serves `fleet` on a free loopback port; its URL.
async fn serve(fleet: Arc<Fleet>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        e2fleet_coordinator::server::serve(listener, fleet, std::future::pending())
            .await
            .unwrap();
    });
    url
}

fn add_totals(a: WriterTotals, b: WriterTotals) -> WriterTotals {
    WriterTotals {
        jobs: a.jobs + b.jobs,
        queued_us: a.queued_us + b.queued_us,
        running_us: a.running_us + b.running_us,
        batches: a.batches + b.batches,
        batch_us: a.batch_us + b.batch_us,
        max_queued_us: a.max_queued_us.max(b.max_queued_us),
        max_batch_us: a.max_batch_us.max(b.max_batch_us),
        wal_resets: a.wal_resets + b.wal_resets,
    }
}

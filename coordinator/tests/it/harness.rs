//! Test harness: a coordinator with a manual clock, and simulated workers.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use e2fleet_coordinator::fleet::{Fleet, FleetConfig};
use e2fleet_coordinator::store::testing::database_for;
use e2fleet_coordinator::store::{Database, Store};
use e2fleet_engine::formats::{LoadOptions, load_file, parse_str, to_site_json};
use e2fleet_engine::plan::SearchPlan;
use e2fleet_engine::search::{NoControl, RunOptions, Walker};
use e2fleet_engine::{FillOrder, Unit, UnitResult};
use e2fleet_proto::convert::{path_from_wire, result_to_wire};
use e2fleet_proto::v2;
use e2fleet_proto::v2::operator_service_client::OperatorServiceClient;
use e2fleet_proto::v2::worker_service_client::WorkerServiceClient;
use tonic::transport::Channel;
use tonic::{Request, Status};

pub const ENROLL: &str = "enroll-secret-0123456789";
pub const ADMIN: &str = "admin-secret-0123456789";
/// The detail window of [`Coordinator::start_archiving`].
#[allow(dead_code)]
pub const ARCHIVE_WINDOW_MS: i64 = 3_600_000;

/// A running coordinator.
pub struct Coordinator {
    pub url: String,
    pub clock: Arc<AtomicI64>,
    #[allow(dead_code)]
    pub fleet: Arc<Fleet>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Coordinator {
    pub async fn start(db: &Path, quarantine_after: i64) -> Coordinator {
        Self::start_with_clock(db, quarantine_after, Arc::new(AtomicI64::new(1_000_000))).await
    }

    pub async fn start_with_clock(
        db: &Path,
        quarantine_after: i64,
        clock: Arc<AtomicI64>,
    ) -> Coordinator {
        Self::start_with(db, quarantine_after, Default::default(), clock).await
    }

    /// A coordinator with a trust policy.
    pub async fn start_with(
        db: &Path,
        quarantine_after: i64,
        trust: e2fleet_coordinator::fleet::TrustPolicy,
        clock: Arc<AtomicI64>,
    ) -> Coordinator {
        Self::start_full(db, quarantine_after, trust, clock, Default::default(), None).await
    }

    /// A coordinator that archives decided units [`ARCHIVE_WINDOW_MS`] after their
    /// decision whenever [`Fleet::archive_decided`] runs (its background tick, or a
    /// test's call): a test advances the clock past the window, then archives.
    #[allow(dead_code)]
    pub async fn start_archiving(
        db: &Path,
        trust: e2fleet_coordinator::fleet::TrustPolicy,
        clock: Arc<AtomicI64>,
    ) -> Coordinator {
        Self::start_full(
            db,
            100,
            trust,
            clock,
            Default::default(),
            Some(Duration::from_millis(ARCHIVE_WINDOW_MS as u64)),
        )
        .await
    }

    /// A coordinator that archives units decided `window` before its clock.
    #[allow(dead_code)]
    pub async fn start_archiving_after(
        db: &Path,
        window: Duration,
        clock: Arc<AtomicI64>,
    ) -> Coordinator {
        Self::start_full(
            db,
            100,
            Default::default(),
            clock,
            Default::default(),
            Some(window),
        )
        .await
    }

    /// A coordinator with connection limits of its own.
    #[allow(dead_code)]
    pub async fn start_limited(
        db: &Path,
        limits: e2fleet_coordinator::server::ServerLimits,
    ) -> Coordinator {
        Self::start_full(
            db,
            3,
            Default::default(),
            Arc::new(AtomicI64::new(1_000_000)),
            limits,
            None,
        )
        .await
    }

    async fn start_full(
        db: &Path,
        quarantine_after: i64,
        trust: e2fleet_coordinator::fleet::TrustPolicy,
        clock: Arc<AtomicI64>,
        limits: e2fleet_coordinator::server::ServerLimits,
        archive_after: Option<Duration>,
    ) -> Coordinator {
        let database = database_for(db).await;
        Self::start_database(
            &database,
            quarantine_after,
            trust,
            clock,
            limits,
            archive_after,
            Default::default(),
        )
        .await
    }

    /// A coordinator whose volunteer accounts may hold only so much.
    #[allow(dead_code)]
    pub async fn start_with_accounts(
        db: &Path,
        accounts: e2fleet_coordinator::fleet::AccountLimits,
    ) -> Coordinator {
        let database = database_for(db).await;
        Self::start_database(
            &database,
            3,
            Default::default(),
            Arc::new(AtomicI64::new(1_000_000)),
            Default::default(),
            None,
            accounts,
        )
        .await
    }

    /// A coordinator on `database` (several may share one PostgreSQL database), reading
    /// the time from `clock`.
    #[allow(dead_code)]
    pub async fn start_on(database: &Database, clock: Arc<AtomicI64>) -> Coordinator {
        Self::start_database(
            database,
            3,
            Default::default(),
            clock,
            Default::default(),
            None,
            Default::default(),
        )
        .await
    }

    async fn start_database(
        database: &Database,
        quarantine_after: i64,
        trust: e2fleet_coordinator::fleet::TrustPolicy,
        clock: Arc<AtomicI64>,
        limits: e2fleet_coordinator::server::ServerLimits,
        archive_after: Option<Duration>,
        accounts: e2fleet_coordinator::fleet::AccountLimits,
    ) -> Coordinator {
        let store = Store::connect(database).await.unwrap();
        let c = clock.clone();
        let fleet = Arc::new(Fleet::new(
            store,
            FleetConfig {
                lease: Duration::from_secs(30),
                quarantine_after: quarantine_after as u64,
                trust,
                archive_after,
                accounts,
                enroll_token: ENROLL.into(),
                admin_token: ADMIN.into(),
            },
            Arc::new(move || c.load(Ordering::SeqCst)),
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let f = fleet.clone();
        let task = tokio::spawn(async move {
            e2fleet_coordinator::server::serve_with_limits(
                listener,
                f,
                async {
                    let _ = rx.await;
                },
                None,
                limits,
            )
            .await
            .unwrap();
        });
        Coordinator {
            url,
            clock,
            fleet,
            stop: Some(tx),
            task: Some(task),
        }
    }

    pub fn advance(&self, ms: i64) {
        self.clock.fetch_add(ms, Ordering::SeqCst);
    }

    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.take().unwrap().await.unwrap();
    }

    pub async fn operator(&self) -> OperatorServiceClient<Channel> {
        OperatorServiceClient::connect(self.url.clone())
            .await
            .unwrap()
    }

    pub async fn submit(
        &self,
        puzzle: &str,
        split_depth: u32,
        budget: u64,
        replicas: u32,
    ) -> String {
        let name = load_file(&puzzle_path(puzzle), &LoadOptions::default())
            .unwrap()
            .name()
            .to_string();
        self.submit_full(puzzle, &name, split_depth, budget, replicas)
            .await
    }

    /// A job on `puzzle` under another name (split depth 3, no budget, one replica).
    #[allow(dead_code)]
    pub async fn submit_named(&self, puzzle: &str, name: &str) -> String {
        self.submit_full(puzzle, name, 3, 0, 1).await
    }

    pub async fn submit_full(
        &self,
        puzzle: &str,
        name: &str,
        split_depth: u32,
        budget: u64,
        replicas: u32,
    ) -> String {
        let p = load_file(&puzzle_path(puzzle), &LoadOptions::default()).unwrap();
        let r = self
            .operator()
            .await
            .submit_job(admin(v2::SubmitJobRequest {
                name: name.into(),
                puzzle_json: to_site_json(&p),
                order: "row-major".into(),
                split_depth,
                target_units: 0,
                budget,
                replicas,
                spot_check: 0.0,
                ..Default::default()
            }))
            .await
            .unwrap()
            .into_inner();
        r.job_id
    }

    /// A job's status as the JSON the API serves (tests index it by key).
    /// A typed operator client.
    #[allow(dead_code)]
    pub async fn admin(&self) -> e2fleet_coordinator::client::Operator {
        e2fleet_coordinator::client::Operator::connect(&self.url, None, ADMIN)
            .await
            .unwrap()
    }

    pub async fn job(&self, id: &str) -> serde_json::Value {
        let r = self
            .operator()
            .await
            .get_job(admin(v2::GetJobRequest { job_id: id.into() }))
            .await
            .unwrap()
            .into_inner();
        let status = e2fleet_proto::api::status::JobStatus::try_from(&r).unwrap();
        serde_json::to_value(status).unwrap()
    }

    /// The workers as the JSON the API serves.
    #[allow(dead_code)]
    pub async fn workers(&self) -> serde_json::Value {
        let r = self
            .operator()
            .await
            .list_workers(admin(v2::ListWorkersRequest {}))
            .await
            .unwrap()
            .into_inner();
        let workers: Vec<e2fleet_proto::api::status::WorkerStatus> =
            r.workers.iter().map(|w| w.try_into().unwrap()).collect();
        serde_json::to_value(workers).unwrap()
    }
}

pub fn admin<T>(m: T) -> Request<T> {
    e2fleet_proto::client::authed(ADMIN, m)
}

pub fn puzzle_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../puzzles")
        .join(rel)
}

pub fn temp_db(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("e2fleet.db")
}

/// How a simulated worker behaves.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    Honest,
    /// Adds one node at a middle depth of every result it reports.
    Liar,
    /// Reports every unit as walked with nothing below it: all-zero counts, no solution
    /// (a forgery that passes every check a result can get without being re-run).
    Zeros,
}

/// A simulated worker speaking the real protocol.
pub struct SimWorker {
    pub client: WorkerServiceClient<Channel>,
    #[allow(dead_code)]
    pub id: String,
    pub token: String,
    #[allow(dead_code)]
    pub hostname: String,
    pub behaviour: Behaviour,
    /// Says it runs a study's probe units (and runs them as the worker does).
    pub probes: bool,
    plans: HashMap<String, Arc<SearchPlan>>,
}

impl SimWorker {
    pub async fn register(url: &str, hostname: &str, behaviour: Behaviour) -> SimWorker {
        Self::register_as(url, hostname, &format!("Sim CPU {hostname}"), behaviour).await
    }

    /// A simulated worker on a given CPU model (its hardware class follows from it).
    pub async fn register_as(
        url: &str,
        hostname: &str,
        cpu_model: &str,
        behaviour: Behaviour,
    ) -> SimWorker {
        Self::register_with(url, ENROLL, hostname, cpu_model, 2, behaviour).await
    }

    /// A simulated worker enrolled with `enroll` (an account's token), saying it has
    /// `cores` cores.
    pub async fn register_with(
        url: &str,
        enroll: &str,
        hostname: &str,
        cpu_model: &str,
        cores: u32,
        behaviour: Behaviour,
    ) -> SimWorker {
        Self::try_register(url, enroll, hostname, cpu_model, cores, behaviour)
            .await
            .unwrap()
    }

    /// [`SimWorker::register_with`], answering the coordinator's refusal.
    pub async fn try_register(
        url: &str,
        enroll: &str,
        hostname: &str,
        cpu_model: &str,
        cores: u32,
        behaviour: Behaviour,
    ) -> Result<SimWorker, Status> {
        let mut client = WorkerServiceClient::connect(url.to_string()).await.unwrap();
        let r = client
            .register_worker(v2::RegisterWorkerRequest {
                enroll_token: enroll.into(),
                host: Some(v2::HostInfo {
                    hostname: hostname.into(),
                    cpu_model: cpu_model.into(),
                    cores,
                    arch: "x86_64".into(),
                    os: "linux".into(),
                    rustc_version: String::new(),
                    worker_version: "test".into(),
                    engine_kind: v2::EngineKind::Reference.into(),
                    engine_release: "reference-test".into(),
                    target_features: String::new(),
                }),
                previous_worker_id: String::new(),
                previous_worker_token: String::new(),
            })
            .await?
            .into_inner();
        Ok(SimWorker {
            client,
            id: r.worker_id,
            token: r.worker_token,
            hostname: hostname.into(),
            behaviour,
            probes: false,
            plans: HashMap::new(),
        })
    }

    pub fn req<T>(&self, m: T) -> Request<T> {
        e2fleet_proto::client::authed(&self.token, m)
    }

    pub async fn lease(&mut self, n: u32) -> Result<Vec<v2::Lease>, Status> {
        let r = self
            .client
            .lease_units(self.req(v2::LeaseUnitsRequest {
                max_units: n,
                engine_kind: v2::EngineKind::Reference.into(),
                engine_build: "sim".into(),
                probes: self.probes,
            }))
            .await?;
        Ok(r.into_inner().leases)
    }

    async fn plan(&mut self, job_id: &str) -> Arc<SearchPlan> {
        if let Some(p) = self.plans.get(job_id) {
            return p.clone();
        }
        let spec = self
            .client
            .get_job_spec(self.req(v2::GetJobSpecRequest {
                job_id: job_id.into(),
            }))
            .await
            .unwrap()
            .into_inner();
        let puzzle = parse_str(&spec.puzzle_json, "job.json", &LoadOptions::default()).unwrap();
        let order = FillOrder::new(&puzzle, &spec.order.parse().unwrap()).unwrap();
        let plan = Arc::new(SearchPlan::new(&puzzle, &order));
        self.plans.insert(job_id.into(), plan.clone());
        plan
    }

    /// Walks a leased unit as the worker would.
    pub async fn compute(&mut self, lease: &v2::Lease) -> UnitResult {
        let plan = self.plan(&lease.job_id).await;
        let unit = Unit {
            prefix: path_from_wire(&lease.prefix, "prefix").unwrap(),
            cursor: path_from_wire(&lease.cursor, "cursor").unwrap(),
        };
        if let Some(probe) = &lease.probe {
            let mut r = e2fleet_engine::search::estimate::probe::probe(
                &plan,
                &unit.prefix,
                probe.particles as usize,
                probe.seed,
            )
            .unwrap();
            if self.behaviour == Behaviour::Liar {
                // a probe that claims more children at its first depth than it found
                let d = unit.prefix.len();
                r.nodes_by_depth[d] += 1;
                r.committed += 1;
            }
            return r;
        }
        let options = RunOptions {
            budget: (lease.budget > 0).then_some(lease.budget),
            max_solutions: e2fleet_coordinator::fleet::REPORT_MAX_SOLUTIONS,
        };
        let mut r = Walker::new(&plan)
            .run(&unit, options, &mut NoControl)
            .unwrap();
        if self.behaviour == Behaviour::Zeros && unit.cursor.is_empty() {
            return UnitResult {
                nodes_by_depth: vec![0; plan.len()],
                committed: 0,
                solutions_count: 0,
                solutions: Vec::new(),
                max_depth: unit.prefix.len(),
                deepest: unit.prefix.clone(),
                cursor: None,
                stop: Some(e2fleet_engine::unit::StopReason::Finished),
            };
        }
        if self.behaviour == Behaviour::Liar {
            let d = plan.len() / 2;
            r.nodes_by_depth[d] += 1;
            r.committed += 1;
        }
        r
    }

    /// Walks a leased unit as a worker that stops after `nodes` nodes (a shutdown, a unit
    /// given back): a requested stop at that node, with its exact cursor.
    #[allow(dead_code)]
    pub async fn compute_stopped(&mut self, lease: &v2::Lease, nodes: u64) -> UnitResult {
        let mut stopped = lease.clone();
        stopped.budget = nodes;
        let mut r = self.compute(&stopped).await;
        assert!(r.cursor.is_some(), "the unit has more than {nodes} nodes");
        r.stop = Some(e2fleet_engine::unit::StopReason::Requested);
        r
    }

    /// Heartbeats `leases`; the ids of those the coordinator says to drop.
    #[allow(dead_code)]
    pub async fn heartbeat(&mut self, leases: &[&v2::Lease]) -> Result<Vec<String>, Status> {
        Ok(self.beat(leases).await?.stop_lease_ids)
    }

    /// Heartbeats `leases`; the whole answer.
    #[allow(dead_code)]
    pub async fn beat(&mut self, leases: &[&v2::Lease]) -> Result<v2::HeartbeatResponse, Status> {
        let r = self
            .client
            .heartbeat(
                self.req(v2::HeartbeatRequest {
                    leases: leases
                        .iter()
                        .map(|l| v2::LeaseProgress {
                            lease_id: l.lease_id.clone(),
                            committed: 0,
                        })
                        .collect(),
                    per_core_nodes_per_s: 1e6,
                    threads: 1,
                    ..Default::default()
                }),
            )
            .await?;
        Ok(r.into_inner())
    }

    pub async fn report(&mut self, lease: &v2::Lease, r: &UnitResult) -> Result<String, Status> {
        let resp = self
            .client
            .report_result(self.req(v2::ReportResultRequest {
                lease_id: lease.lease_id.clone(),
                unit_id: lease.unit_id,
                result: Some(result_to_wire(r)),
                engine_seconds: 0.1,
                engine_kind: v2::EngineKind::Reference.into(),
                engine_build: "sim".into(),
            }))
            .await?;
        let status = e2fleet_proto::convert::report_status_from_wire(resp.into_inner().status)
            .expect("a known status");
        Ok(status.as_str().to_string())
    }

    /// Leases, computes and reports until no work is left for it; returns units done.
    pub async fn work(&mut self, max_rounds: usize) -> usize {
        let mut done = 0;
        for _ in 0..max_rounds {
            let leases = self.lease(8).await.unwrap();
            if leases.is_empty() {
                break;
            }
            for l in &leases {
                let r = self.compute(l).await;
                self.report(l, &r).await.unwrap();
                done += 1;
            }
        }
        done
    }
}

/// The whole-tree result of a puzzle on one machine.
pub fn single_machine(rel: &str) -> UnitResult {
    let p = load_file(&puzzle_path(rel), &LoadOptions::default()).unwrap();
    let plan = SearchPlan::new(&p, &FillOrder::row_major(&p));
    Walker::new(&plan)
        .run(&Unit::root(), RunOptions::default(), &mut NoControl)
        .unwrap()
}

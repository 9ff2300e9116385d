//! `e2fleet-worker audit FILE`: checks a job's certificate on this machine, trusting
//! neither the coordinator that wrote it nor any worker that ran it.
//!
//! 1. The file's digest (any changed byte fails here), and `--root` if a published Merkle
//!    root is given.
//! 2. The structure (`e2fleet_engine::certificate::audit::check_structure`): the
//!    enumeration re-derived, the units tiling the tree exactly, the per-depth sums, every
//!    solution and best board verified.
//! 3. A sample of units (`--sample N`, or `--all`) re-run here with this machine's engine
//!    and compared to the digit; the output says how likely a certificate with forged
//!    units would have passed the sample.
//!
//! With `--coordinator URL`, the audit is sent to the coordinator, which compares the
//! re-run digests with its accepted results and shows the audit on the job's page.
//! Exit status 1 when anything fails.

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use e2fleet_engine::certificate::audit::{
    Structure, check_structure_within, choose_sample, compare_run, pass_probability, spec, unit_of,
};
use e2fleet_engine::certificate::{self, Certificate};
use e2fleet_engine::engine::EngineKind;
use e2fleet_engine::search::{NoControl, RunOptions};
use e2fleet_engine::unit::result_digest;
use e2fleet_engine::{SearchSpec, UnitResult};
use e2fleet_proto::api::{AuditOutcome, AuditSubmission, AuditedUnit, JobId, UnitId};
use e2fleet_proto::text::count;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::connect_args::ConnectArgs;
use crate::engine_args::EngineArgs;

/// Flags of `audit`.
#[derive(Args, Debug)]
pub struct AuditArgs {
    /// The certificate file (`e2fleet-coordinator export JOB --out FILE`).
    file: PathBuf,
    /// Units to re-run, drawn at random.
    #[arg(long, default_value_t = 20, conflicts_with = "all")]
    sample: usize,
    /// Re-run every unit.
    #[arg(long)]
    all: bool,
    /// Seed of the sample (default: random; printed, so an audit can be repeated).
    #[arg(long)]
    seed: Option<u64>,
    /// The published Merkle root to check the certificate against.
    #[arg(long)]
    root: Option<String>,
    /// Engine threads (default: every core).
    #[arg(long)]
    threads: Option<usize>,
    /// Send the audit to this coordinator (it compares the re-runs with its accepted
    /// results and shows the audit on the job's page). Only when given here: an audit is
    /// yours until you choose to send it.
    #[arg(long)]
    coordinator: Option<String>,
    /// Largest certificate file to read, MiB.
    #[arg(long, default_value_t = 512)]
    max_file_mib: u64,
    /// Largest body the file may unpack to, MiB (a small gzip can unpack to gigabytes;
    /// it is cut off here).
    #[arg(long, default_value_t = 4096)]
    max_body_mib: u64,
    /// Most units a certificate may list.
    #[arg(long, default_value_t = 20_000_000)]
    max_units: usize,
    /// Most nodes of the enumeration to re-derive (the tree above the split depth, walked
    /// here on one core at ~20-50 M nodes a second); a certificate that states more is
    /// refused before any walking, and the walk stops if the tree has more than stated.
    #[arg(long, default_value_t = 2_000_000_000)]
    max_enumeration: u64,
    /// Most nodes the sample may re-walk, in all (each unit is re-walked for at most the
    /// nodes its certificate states, and one more); a sample past it is refused before
    /// any walking.
    #[arg(long, default_value_t = 200_000_000_000)]
    max_rerun_nodes: u64,
    #[command(flatten)]
    connect: ConnectArgs,
    /// Report this host name instead of the detected one.
    #[arg(long, env = "E2FLEET_HOSTNAME")]
    hostname: Option<String>,
    #[command(flatten)]
    engine: EngineArgs,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// One unit re-run here.
struct Rerun {
    index: usize,
    result: UnitResult,
    seconds: f64,
    /// How it differs from the certificate's entry.
    mismatch: Option<String>,
}

/// What the audit found, as printed with `--json`.
#[derive(Serialize)]
struct AuditReport {
    file: String,
    job_id: String,
    job_name: String,
    complete: bool,
    sha256: String,
    merkle_root: String,
    passed: bool,
    failure: Option<String>,
    structure_ok: bool,
    mismatched: Vec<u64>,
    units: usize,
    decided: usize,
    prefixes: usize,
    continuations: usize,
    split_nodes: u64,
    nodes: u64,
    solutions: u64,
    solutions_verified: usize,
    boards_verified: usize,
    seed: u64,
    rerun: usize,
    rerun_agreed: usize,
    rerun_nodes: u64,
    engine: Option<EngineKind>,
    engine_build: Option<String>,
    engine_seconds: f64,
    /// (forged units, probability a certificate with that many passes this sample).
    pass_probability: Vec<(usize, f64)>,
    coordinator: Option<CoordinatorAnswer>,
}

#[derive(Serialize)]
struct CoordinatorAnswer {
    class_id: String,
    agreed: u32,
    disagreed: Vec<i64>,
    unknown: Vec<i64>,
}

/// Runs `audit`.
pub fn run(args: AuditArgs) -> Result<()> {
    let limits = certificate::Limits {
        file_bytes: args.max_file_mib.saturating_mul(1 << 20),
        body_bytes: args.max_body_mib.saturating_mul(1 << 20),
        units: args.max_units,
        enumeration_nodes: args.max_enumeration,
    };
    // the size first: a file past the limit is not read at all
    let size = std::fs::metadata(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?
        .len();
    if size > limits.file_bytes {
        return fail_early(
            args.json,
            format!(
                "{} is {size} bytes; --max-file-mib allows {} MiB",
                args.file.display(),
                args.max_file_mib
            ),
        );
    }
    let bytes = std::fs::read(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let cert = match certificate::decode_within(&bytes, &limits) {
        Ok(cert) => cert,
        Err(e) => return fail_early(args.json, format!("{}: {e}", args.file.display())),
    };
    let digest = cert.digest();
    if let Some(root) = &args.root
        && !root.eq_ignore_ascii_case(&cert.merkle_root)
    {
        return fail_early(
            args.json,
            format!(
                "the certificate's Merkle root is {}, not the published {root}: this is not the published result",
                cert.merkle_root
            ),
        );
    }
    let seed = args.seed.unwrap_or_else(rand::random);
    let mut report = AuditReport {
        file: args.file.display().to_string(),
        job_id: cert.job.id.clone(),
        job_name: cert.job.name.clone(),
        complete: cert.job.complete,
        sha256: digest,
        merkle_root: cert.merkle_root.clone(),
        passed: false,
        failure: None,
        structure_ok: false,
        mismatched: Vec::new(),
        units: cert.units.len(),
        decided: 0,
        prefixes: 0,
        continuations: 0,
        split_nodes: 0,
        nodes: cert.totals.iter().sum(),
        solutions: cert.solutions_count,
        solutions_verified: 0,
        boards_verified: 0,
        seed,
        rerun: 0,
        rerun_agreed: 0,
        rerun_nodes: 0,
        engine: None,
        engine_build: None,
        engine_seconds: 0.0,
        pass_probability: Vec::new(),
        coordinator: None,
    };
    if !args.json {
        eprintln!(
            "certificate of job {} ({}): {} units\n  sha256      {}\n  merkle root {}",
            cert.job.name,
            cert.job.id,
            cert.units.len(),
            report.sha256,
            cert.merkle_root
        );
    }
    let mut reruns = Vec::new();
    let outcome = audit(&args, &cert, &mut report, &mut reruns);
    if let Err(e) = &outcome {
        report.failure = Some(format!("{e:#}"));
    }
    report.passed = outcome.is_ok();
    if let Some(url) = args.coordinator.clone() {
        match submit(&args, &url, &cert, &report, &reruns) {
            Ok(answer) => report.coordinator = Some(answer),
            Err(e) => eprintln!("warning: the audit was not recorded at {url}: {e:#}"),
        }
    }
    print(&report, args.json);
    match outcome {
        Ok(_) => Ok(()),
        Err(e) => bail!("audit FAILED: {e}"),
    }
}

/// A failure before anything could be checked (the file or its root).
fn fail_early(json: bool, failure: String) -> Result<()> {
    if json {
        println!(
            "{}",
            serde_json::json!({"passed": false, "failure": failure})
        );
    }
    bail!("audit FAILED: {failure}")
}

/// Structure, then the re-runs (kept in `reruns`, agreeing or not).
fn audit(
    args: &AuditArgs,
    cert: &Certificate,
    report: &mut AuditReport,
    reruns: &mut Vec<Rerun>,
) -> Result<()> {
    let spec = spec(cert)?;
    let limits = certificate::Limits {
        file_bytes: args.max_file_mib.saturating_mul(1 << 20),
        body_bytes: args.max_body_mib.saturating_mul(1 << 20),
        units: args.max_units,
        enumeration_nodes: args.max_enumeration,
    };
    let structure: Structure = check_structure_within(cert, &spec, &limits)?;
    report.structure_ok = true;
    report.decided = structure.decided;
    report.prefixes = structure.prefixes;
    report.continuations = structure.continuations;
    report.split_nodes = structure.split_nodes;
    report.solutions_verified = structure.solutions_verified;
    report.boards_verified = structure.boards_verified;
    if !args.json {
        eprintln!(
            "structure: ok ({} prefixes re-derived, {} units tile the tree, {} split nodes, sums equal the totals, {} solutions and {} best boards verified)",
            structure.prefixes,
            structure.units,
            structure.split_nodes,
            structure.solutions_verified,
            structure.boards_verified
        );
    }
    let wanted = if args.all { usize::MAX } else { args.sample };
    let sample = choose_sample(cert, wanted, report.seed);
    report.rerun = sample.len();
    let n = structure.decided;
    report.pass_probability = [1, n.div_ceil(1000), n.div_ceil(100), n.div_ceil(10)]
        .into_iter()
        .filter(|&k| k >= 1 && k <= n)
        .fold(Vec::new(), |mut v, k| {
            if v.last().map(|&(last, _)| last) != Some(k) {
                v.push((k, pass_probability(n, k, sample.len())));
            }
            v
        });
    // the re-walks never cost more than the certificate states (checked before walking)
    let stated: u64 = sample
        .iter()
        .map(|&i| rerun_budget(cert, &cert.units[i]).unwrap_or(0))
        .fold(0u64, u64::saturating_add);
    if stated > args.max_rerun_nodes {
        bail!(
            "the sample would re-walk {stated} nodes; --max-rerun-nodes allows {} (draw fewer with --sample, or raise it)",
            args.max_rerun_nodes
        );
    }
    *reruns = rerun(args, cert, &spec, &sample, report)?;
    let wrong: Vec<&Rerun> = reruns.iter().filter(|r| r.mismatch.is_some()).collect();
    report.mismatched = wrong.iter().map(|r| cert.units[r.index].id).collect();
    if let Some(first) = wrong.first() {
        bail!(
            "{} of {} re-run units differ from the certificate; the first: {}",
            wrong.len(),
            reruns.len(),
            first.mismatch.as_deref().unwrap_or_default()
        );
    }
    Ok(())
}

/// Re-runs the sampled units on every thread and compares each with its entry.
fn rerun(
    args: &AuditArgs,
    cert: &Certificate,
    spec: &SearchSpec,
    sample: &[usize],
    report: &mut AuditReport,
) -> Result<Vec<Rerun>> {
    if sample.is_empty() {
        return Ok(Vec::new());
    }
    let factory = args.engine.factory(&spec.plan, !args.json)?;
    let threads = args
        .threads
        .unwrap_or_else(crate::host::cores)
        .clamp(1, sample.len());

    let bar = if args.json {
        ProgressBar::hidden()
    } else {
        let bar = ProgressBar::new(sample.len() as u64);
        bar.set_style(
            ProgressStyle::with_template("re-running {pos}/{len} units {bar:30} {elapsed_precise}")
                .expect("valid template"),
        );
        bar.enable_steady_tick(Duration::from_millis(200));
        bar
    };
    let next = AtomicUsize::new(0);
    let done: Mutex<Vec<Rerun>> = Mutex::new(Vec::with_capacity(sample.len()));
    let failure: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    let engine_id: Mutex<Option<(EngineKind, String)>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut engine = factory.make();
                *engine_id.lock().expect("engine id") = Some((engine.kind(), engine.build_id()));
                loop {
                    if failure.lock().expect("failure").is_some() {
                        return;
                    }
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&index) = sample.get(i) else { return };
                    let entry = &cert.units[index];
                    let outcome =
                        unit_of(spec, entry)
                            .map_err(anyhow::Error::from)
                            .and_then(|unit| {
                                let t = Instant::now();
                                let options = RunOptions {
                                    budget: rerun_budget(cert, entry),
                                    max_solutions: cert.solutions_cap,
                                };
                                let result = engine
                                    .run(&unit, options, &mut NoControl)
                                    .with_context(|| format!("unit {}", entry.id))?;
                                let mismatch = compare_run(spec, entry, &result)
                                    .err()
                                    .map(|e| e.to_string());
                                Ok(Rerun {
                                    index,
                                    result,
                                    seconds: t.elapsed().as_secs_f64(),
                                    mismatch,
                                })
                            });
                    match outcome {
                        Ok(r) => done.lock().expect("done").push(r),
                        Err(e) => {
                            failure.lock().expect("failure").get_or_insert(e);
                            return;
                        }
                    }
                    bar.inc(1);
                }
            });
        }
    });
    bar.finish_and_clear();
    if let Some((kind, build)) = engine_id.into_inner().expect("engine id") {
        report.engine = Some(kind);
        report.engine_build = Some(build);
    }
    let mut done = done.into_inner().expect("done");
    done.sort_by_key(|r| r.index);
    report.rerun_agreed = done.iter().filter(|r| r.mismatch.is_none()).count();
    report.rerun_nodes = done.iter().map(|r| r.result.committed).sum();
    report.engine_seconds = done.iter().map(|r| r.seconds).sum();
    if let Some(e) = failure.into_inner().expect("failure") {
        return Err(e);
    }
    Ok(done)
}

/// The budget a unit is re-walked with: the job's, and never more than one node past
/// what the certificate states for it (a result that finished with `c` nodes is
/// re-walked with `c + 1`: an honest subtree of `c` nodes finishes the same, a bigger one
/// stops there and differs). A certificate cannot make its auditor walk more than it
/// claims.
fn rerun_budget(cert: &Certificate, u: &certificate::CertUnit) -> Option<u64> {
    let stated = u.result.as_ref().map(|r| r.committed().saturating_add(1));
    match (cert.budget, stated) {
        (Some(b), Some(s)) => Some(b.min(s)),
        (b, s) => b.or(s),
    }
}

/// Registers with the coordinator and sends the audit.
fn submit(
    args: &AuditArgs,
    url: &str,
    cert: &Certificate,
    report: &AuditReport,
    reruns: &[Rerun],
) -> Result<CoordinatorAnswer> {
    args.connect.check_transport(url)?;
    let token = args.connect.token()?;
    let job_id: JobId = cert
        .job
        .id
        .parse()
        .map_err(|e| anyhow::anyhow!("the certificate's job id: {e}"))?;
    let audit = AuditSubmission {
        job_id,
        certificate_sha256: report.sha256.clone(),
        merkle_root: cert.merkle_root.clone(),
        structure_ok: report.structure_ok,
        units: reruns
            .iter()
            .map(|r| AuditedUnit {
                unit: UnitId(cert.units[r.index].id as i64),
                digest: result_digest(&r.result),
                nodes: r.result.committed,
            })
            .collect(),
        engine_kind: report.engine.unwrap_or(args.engine.kind()),
        engine_build: report.engine_build.clone().unwrap_or_default(),
        engine_seconds: report.engine_seconds,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let outcome: AuditOutcome = runtime.block_on(async {
        let mut api = crate::api::Coordinator::connect(url, args.connect.ca_cert.as_deref())
            .await
            .map_err(anyhow::Error::msg)?;
        let host = crate::host::host_info(args.hostname.as_deref(), &args.engine);
        api.register(&token, &host, None)
            .await
            .with_context(|| format!("the coordinator at {url} refused the registration"))?;
        api.submit_audit(&audit)
            .await
            .context("the coordinator refused the audit")
    })?;
    Ok(CoordinatorAnswer {
        class_id: outcome.class_id,
        agreed: outcome.agreed,
        disagreed: outcome.disagreed.iter().map(|u| u.0).collect(),
        unknown: outcome.unknown.iter().map(|u| u.0).collect(),
    })
}

fn print(r: &AuditReport, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::to_string(r).expect("the report serialises")
        );
        return;
    }
    let mut out = String::new();
    if r.passed {
        out.push_str(&format!(
            "re-run: {} of {} decided units on this machine ({} nodes, {:.1} engine-s{}), seed {}: every one equal to the digit\n",
            r.rerun,
            r.decided,
            r.rerun_nodes,
            r.engine_seconds,
            r.engine_build
                .as_ref()
                .map(|b| format!(", engine {b}"))
                .unwrap_or_default(),
            r.seed
        ));
        if r.rerun < r.decided {
            out.push_str(
                "chance that a certificate with forged units passes a sample this size:\n",
            );
            for (k, p) in &r.pass_probability {
                out.push_str(&format!(
                    "  {k} forged of {}: {}\n",
                    r.decided,
                    if *p < 1e-4 {
                        format!("{p:.1e}")
                    } else {
                        format!("{:.2}%", p * 100.0)
                    }
                ));
            }
        }
        out.push_str(&format!(
            "PASS: job {} — {}, {}{}\n",
            r.job_name,
            count(r.nodes, "node", "nodes"),
            count(r.solutions, "solution", "solutions"),
            if r.complete {
                String::new()
            } else {
                " (partial certificate: the totals cover the units decided so far)".to_string()
            }
        ));
    } else {
        out.push_str(&format!(
            "FAIL: {}\n",
            r.failure.as_deref().unwrap_or("unknown")
        ));
    }
    if let Some(c) = &r.coordinator {
        out.push_str(&format!(
            "recorded at the coordinator (hardware class {}): {} agree with its accepted results{}{}\n",
            c.class_id,
            c.agreed,
            if c.disagreed.is_empty() {
                String::new()
            } else {
                format!(", DISAGREE: units {:?}", c.disagreed)
            },
            if c.unknown.is_empty() {
                String::new()
            } else {
                format!(", unknown to it: units {:?}", c.unknown)
            }
        ));
    }
    print!("{out}");
}

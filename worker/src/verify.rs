//! `e2fleet-worker verify`: runs a verification suite with this machine's engine (the
//! same engine `run` would build) and reports per-unit verdicts and per-core rates.
//!
//! - `--offline`: the built-in suite, judged here against its exact results.
//! - `--coordinator URL --token T`: the coordinator's suite (default, or `--suite`); the
//!   results go to the coordinator with this machine's fingerprint, which judges them and
//!   adds this hardware class to its conformance matrix.
//!
//! Exit status 1 when any unit disagrees. [`run_units`] is also what `run` uses when the
//! coordinator hands a new hardware class its suite units.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use e2fleet_engine::UnitResult;
use e2fleet_engine::engine::EngineKind;
use e2fleet_engine::search::{Control, RunOptions};
use e2fleet_engine::suite::{SuiteUnit, default_suite, resolve};
use e2fleet_proto::REPORT_MAX_SOLUTIONS;
use e2fleet_proto::api::{SuiteResult, Verdict};
use serde::Serialize;

use crate::connect_args::ConnectArgs;
use crate::engine_args::{EngineArgs, EngineFactory};

/// Flags of `verify`.
#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// Run the built-in suite on this machine only and judge it here (wins over
    /// --coordinator / E2FLEET_COORDINATOR).
    #[arg(long)]
    offline: bool,
    /// Run the coordinator's suite and submit the results there.
    #[arg(long, env = "E2FLEET_COORDINATOR")]
    coordinator: Option<String>,
    #[command(flatten)]
    connect: ConnectArgs,
    /// Suite name on the coordinator.
    #[arg(long, default_value = "default")]
    suite: String,
    /// Report this host name instead of the detected one.
    #[arg(long, env = "E2FLEET_HOSTNAME")]
    hostname: Option<String>,
    #[command(flatten)]
    engine: EngineArgs,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// One suite unit run on this machine.
pub struct UnitRun {
    /// The unit.
    pub unit: SuiteUnit,
    /// Its exact result.
    pub result: UnitResult,
    /// Engine-thread seconds.
    pub seconds: f64,
    /// Engine kind used.
    pub engine_kind: EngineKind,
    /// Engine build id.
    pub engine_build: String,
}

impl UnitRun {
    /// What is submitted of it to a coordinator.
    pub fn submission(&self) -> SuiteResult {
        SuiteResult {
            unit: self.unit.name.clone(),
            result: self.result.clone(),
            engine_seconds: self.seconds,
            engine_build: self.engine_build.clone(),
        }
    }
}

/// Runs suite units with the engine `engine` chooses, one after another on one thread
/// (their engines built first, two at a time: `build_engines`). The suite checks counts, not speed: where `engine` leaves the walk to a race (`--walk
/// auto`), a 16x16 unit runs the slot walk without racing the list walk for it (a race is
/// ~2.5 s a puzzle, and five of the suite's puzzles are 16x16). The list walk runs the
/// suite's smaller boards, and every job's race compares the two walks' results on that
/// job's own units before either walks one.
///
/// While `hold` is set (`run`'s pause conditions, SIGUSR1 among them) nothing new starts,
/// neither a build nor a unit, and a running unit holds still at its next poll, its
/// engine told to pause; the time held is not the unit's engine time.
pub fn run_units(
    units: &[SuiteUnit],
    engine: &EngineArgs,
    hold: &AtomicBool,
) -> Result<Vec<UnitRun>> {
    let engine = &engine.unraced();
    let resolved = units
        .iter()
        .map(|u| resolve(u).map_err(anyhow::Error::msg))
        .collect::<Result<Vec<_>>>()?;
    let factories = build_engines(units, &resolved, engine, hold)?;
    let mut out = Vec::new();
    for ((u, resolved), factory) in units.iter().zip(&resolved).zip(&factories) {
        wait_while(hold);
        let mut e = factory.make();
        let t = Instant::now();
        let mut control = Held {
            hold,
            held_for: Duration::ZERO,
        };
        let result = e
            .run(
                &resolved.unit,
                RunOptions {
                    budget: u.budget,
                    max_solutions: REPORT_MAX_SOLUTIONS,
                },
                &mut control,
            )
            .with_context(|| format!("suite unit {}", u.name))?;
        out.push(UnitRun {
            unit: u.clone(),
            result,
            seconds: t.elapsed().saturating_sub(control.held_for).as_secs_f64(),
            engine_kind: e.kind(),
            engine_build: e.build_id(),
        });
    }
    Ok(out)
}

/// Waits while `hold` is set; how long it waited.
fn wait_while(hold: &AtomicBool) -> Duration {
    let since = Instant::now();
    while hold.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
    }
    since.elapsed()
}

/// A suite unit's [`Control`]: held while `hold` is set.
struct Held<'a> {
    hold: &'a AtomicBool,
    held_for: Duration,
}

impl Control for Held<'_> {
    fn poll(&mut self, _committed: u64) -> bool {
        self.held_for += wait_while(self.hold);
        false
    }

    fn paused(&mut self) -> bool {
        self.hold.load(Ordering::SeqCst)
    }
}

/// One engine per distinct puzzle and order of `units` (in their order), built two at a
/// time: one rustc leaves a core idle through its serial front end, and the suite has eleven
/// puzzles to build on a machine's first start. The first is built alone (it builds the
/// runtime library the others link).
fn build_engines(
    units: &[SuiteUnit],
    resolved: &[e2fleet_engine::suite::Resolved],
    engine: &EngineArgs,
    hold: &AtomicBool,
) -> Result<Vec<Arc<EngineFactory>>> {
    let mut first_of: Vec<usize> = Vec::with_capacity(units.len());
    for (i, u) in units.iter().enumerate() {
        let first = units[..i]
            .iter()
            .position(|v| v.puzzle == u.puzzle && v.order == u.order)
            .unwrap_or(i);
        first_of.push(first);
    }
    let distinct: Vec<usize> = (0..units.len()).filter(|&i| first_of[i] == i).collect();
    let build = |i: usize| {
        wait_while(hold);
        engine.factory(&resolved[i].plan, false).map(Arc::new)
    };
    let mut built: Vec<Option<Result<Arc<EngineFactory>>>> =
        (0..units.len()).map(|_| None).collect();
    if let Some(&head) = distinct.first() {
        // a first build that fails (no rustc, a runtime that does not build) would fail
        // the same way for the rest
        built[head] = Some(Ok(build(head)?));
    }
    let rest = distinct.get(1..).unwrap_or_default();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(2));
    let done: Vec<(usize, Result<Arc<EngineFactory>>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&i) = rest.get(k) else { break mine };
                        mine.push((i, build(i)));
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("an engine build panicked"))
            .collect()
    });
    for (i, r) in done {
        built[i] = Some(r);
    }
    (0..units.len())
        .map(|i| match &built[first_of[i]] {
            Some(Ok(f)) => Ok(f.clone()),
            Some(Err(e)) => Err(anyhow::anyhow!("{e:#}")),
            None => unreachable!("every distinct puzzle is built"),
        })
        .collect()
}

#[derive(Serialize)]
struct UnitReport {
    name: String,
    verdict: Verdict,
    detail: Option<String>,
    nodes: u64,
    seconds: f64,
    nodes_per_s: f64,
    speed_unit: bool,
    engine: EngineKind,
    engine_build: String,
}

impl UnitReport {
    fn new(run: &UnitRun, verdict: Verdict, detail: Option<String>) -> UnitReport {
        UnitReport {
            name: run.unit.name.clone(),
            verdict,
            detail,
            nodes: run.result.committed,
            seconds: run.seconds,
            nodes_per_s: run.result.committed as f64 / run.seconds.max(1e-9),
            speed_unit: run.unit.speed,
            engine: run.engine_kind,
            engine_build: run.engine_build.clone(),
        }
    }
}

/// Runs the built-in suite on this machine with `engine` and judges it here.
fn judge_offline(engine: &EngineArgs) -> Result<Vec<UnitReport>> {
    let expected = default_suite();
    let runs = run_units(&expected, engine, &AtomicBool::new(false))?;
    Ok(runs
        .iter()
        .zip(&expected)
        .map(|(run, u)| {
            let detail = match &u.expected {
                Some(e) => e.disagreement(&run.result),
                None => Some("the suite has no expected result for this unit".into()),
            };
            let verdict = if detail.is_none() {
                Verdict::Agrees
            } else {
                Verdict::Disagrees
            };
            UnitReport::new(run, verdict, detail)
        })
        .collect())
}

/// Whether `engine` agrees with every unit of the built-in suite on this machine (what a
/// freshly updated worker checks before it joins); the first disagreement otherwise.
pub fn check_offline(engine: &EngineArgs) -> Result<(), String> {
    let reports = judge_offline(engine).map_err(|e| format!("{e:#}"))?;
    match reports.iter().find(|r| r.verdict != Verdict::Agrees) {
        None => Ok(()),
        Some(r) => Err(format!(
            "verification unit {} disagrees: {}",
            r.name,
            r.detail.as_deref().unwrap_or("")
        )),
    }
}

/// Runs `verify`.
pub fn run(args: VerifyArgs) -> Result<()> {
    let started = Instant::now();
    if !args.offline && args.coordinator.is_none() {
        bail!("say where to verify: --offline, or --coordinator URL (or E2FLEET_COORDINATOR)");
    }
    let (reports, class) = match &args.coordinator {
        Some(url) if !args.offline => {
            args.connect.check_transport(url)?;
            let token = args.connect.token()?;
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
                .block_on(with_coordinator(&args, url, &token))?
        }
        _ => (judge_offline(&args.engine)?, None),
    };
    if !args.json {
        for r in &reports {
            println!(
                "{:<22} {:<9} {:>10} nodes {:>8.1} M/s per core  {}{}",
                r.name,
                r.verdict.as_str(),
                r.nodes,
                r.nodes_per_s / 1e6,
                r.engine_build,
                r.detail
                    .as_ref()
                    .map(|d| format!("  ({d})"))
                    .unwrap_or_default()
            );
        }
    }
    let failed: Vec<&UnitReport> = reports
        .iter()
        .filter(|r| r.verdict == Verdict::Disagrees)
        .collect();
    let pending = reports
        .iter()
        .filter(|r| r.verdict == Verdict::Pending)
        .count();
    let median = e2fleet_proto::api::status::median(
        reports
            .iter()
            .filter(|r| r.speed_unit)
            .map(|r| r.nodes_per_s)
            .collect(),
    )
    .unwrap_or(0.0);
    let class_note = class
        .as_ref()
        .map(|(id, _)| format!(" (hardware class {id})"))
        .unwrap_or_default();
    let verdict = if failed.is_empty() {
        format!(
            "VERIFIED{class_note}: {} units agree with their exact results{}; speed units {:.1} M nodes/s per core (median); {:.1} s",
            if pending > 0 {
                format!("{} of {}", reports.len() - pending, reports.len())
            } else {
                format!("all {}", reports.len())
            },
            if pending > 0 {
                format!(", {pending} pending (no expected result yet)")
            } else {
                String::new()
            },
            median / 1e6,
            started.elapsed().as_secs_f64()
        )
    } else {
        format!(
            "FAILED{class_note}: {} of {} units disagree; first: {} ({})",
            failed.len(),
            reports.len(),
            failed[0].name,
            failed[0].detail.clone().unwrap_or_default()
        )
    };
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "verified": failed.is_empty(),
                "verdict": verdict,
                "class_id": class.as_ref().map(|c| c.0.clone()),
                "class_flagged": class.as_ref().map(|c| c.1),
                "per_core_nodes_per_s": median,
                "units": reports,
            })
        );
    } else {
        println!("{verdict}");
    }
    if !failed.is_empty() {
        bail!("this engine build disagrees with the known results: do not use it for real work");
    }
    Ok(())
}

/// Registers with the coordinator, runs its suite and submits the results; returns the
/// per-unit reports and (class id, flagged).
async fn with_coordinator(
    args: &VerifyArgs,
    url: &str,
    token: &str,
) -> Result<(Vec<UnitReport>, Option<(String, bool)>)> {
    let mut api = crate::api::Coordinator::connect(url, args.connect.ca_cert.as_deref())
        .await
        .map_err(anyhow::Error::msg)?;
    let host = crate::host::host_info(args.hostname.as_deref(), &args.engine);
    api.register(token, &host, None)
        .await
        .with_context(|| format!("the coordinator at {url} refused the registration"))?;
    let (suite, units, _class) = api
        .suite(&args.suite, false)
        .await
        .context("cannot fetch the suite")?;
    let engine = args.engine.clone();
    let runs =
        tokio::task::spawn_blocking(move || run_units(&units, &engine, &AtomicBool::new(false)))
            .await??;
    let results: Vec<SuiteResult> = runs.iter().map(UnitRun::submission).collect();
    let answer = api
        .submit_verification(&suite, &results)
        .await
        .context("the coordinator refused the results")?;
    let reports = runs
        .iter()
        .zip(&answer.verdicts)
        .map(|(run, v)| {
            UnitReport::new(
                run,
                v.verdict,
                (!v.detail.is_empty()).then(|| v.detail.clone()),
            )
        })
        .collect();
    Ok((reports, Some((answer.class_id, answer.class_flagged))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        engine: EngineArgs,
    }

    /// Suite units held from the start walk nothing until the hold ends, then agree with
    /// their exact results.
    #[test]
    fn held_suite_units_wait_and_then_agree() {
        let flags = Flags::parse_from(["t", "--engine", "reference"]);
        let units: Vec<SuiteUnit> = default_suite()
            .into_iter()
            .filter(|u| u.name == "easy-rows0-5-whole" || u.name == "brendan1-5x5-whole")
            .collect();
        assert_eq!(units.len(), 2);
        let hold = Arc::new(AtomicBool::new(true));
        let run = {
            let (units, hold) = (units.clone(), hold.clone());
            std::thread::spawn(move || run_units(&units, &flags.engine, &hold))
        };
        std::thread::sleep(Duration::from_secs(1));
        assert!(!run.is_finished(), "held units ran");
        hold.store(false, Ordering::SeqCst);
        let runs = run.join().unwrap().unwrap();
        for (run, u) in runs.iter().zip(&units) {
            let expected = u.expected.as_ref().unwrap();
            assert_eq!(expected.disagreement(&run.result), None, "{}", u.name);
            assert!(run.seconds < 1.0, "{}: {} s", u.name, run.seconds);
        }
    }

    /// A unit's control holds while the hold is set, says so to an engine that asks, and
    /// leaves the time held out of the unit's.
    #[test]
    fn a_held_unit_waits_at_its_poll_and_the_wait_is_not_engine_time() {
        let hold = AtomicBool::new(true);
        let mut control = Held {
            hold: &hold,
            held_for: Duration::ZERO,
        };
        assert!(control.paused());
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(300));
                hold.store(false, Ordering::SeqCst);
            });
            assert!(!control.poll(1), "a hold is not a stop");
        });
        assert!(control.held_for >= Duration::from_millis(300));
        assert!(!control.paused());
        let held = control.held_for;
        assert!(!control.poll(2));
        assert!(control.held_for - held < Duration::from_millis(50));
    }
}

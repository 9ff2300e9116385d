//! Getting ready to work: this hardware class's verification units, and for each job its
//! spec, a local engine build (cached) and that build's self-test against units with
//! known exact results. A build that fails its self-test is reported and never used (the
//! reference engine takes its place).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::Result;
use e2fleet_engine::SearchSpec;
use e2fleet_engine::compiled::CompileError;
use e2fleet_engine::search::{NoControl, RunOptions};
use e2fleet_proto::REPORT_MAX_SOLUTIONS;
use e2fleet_proto::api::{JobId, SelfTest, SuiteResult, Verdict};
use tonic::Code;
use tracing::{error, info, warn};

use super::connection::Connection;
use super::signals::Console;
use crate::api::{Coordinator, is_transient};
use crate::engine_args::{EngineArgs, EngineChoice, EngineFactory};

/// A site-JSON puzzle's width and height (for messages).
fn spec_size(json: &str) -> (u64, u64) {
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or_default();
    (
        v["width"].as_u64().unwrap_or(0),
        v["height"].as_u64().unwrap_or(0),
    )
}

/// A job the worker has prepared an engine for (or failed to).
pub enum JobEngine {
    /// Ready to run units.
    Ready(Arc<EngineFactory>),
    /// This worker cannot run the job (why).
    Broken(String),
}

/// What preparing a job came to.
pub enum Prepared {
    /// Its engine.
    Ready(Arc<EngineFactory>),
    /// This worker cannot run the job (why).
    Never(String),
    /// Try again later: the coordinator did not answer (or wants a new registration).
    Later(tonic::Status),
}

/// Runs the verification units this hardware class has not run yet (the coordinator
/// hands them out) with the engine real work would use (with `--engine lanes`, the lane
/// engine on the units' boards it takes and `auto`'s engine on the others), and submits
/// them. A compiled or lane build that disagrees is dropped for the reference engine (a
/// new class, verified in turn); a class that still disagrees gets no real work from the coordinator, which
/// says so on every lease request. While `hold` is set (a pause) the units and their
/// builds hold still ([`crate::verify::run_units`]).
pub async fn verify_class(
    link: &mut Connection,
    engine: &mut EngineArgs,
    hostname: Option<&str>,
    console: &Console,
    hold: Arc<AtomicBool>,
) -> Result<()> {
    loop {
        let (suite, units, class_id) = link.api.suite("", true).await?;
        if units.is_empty() {
            return Ok(());
        }
        console.say(&format!(
            "checking this machine and engine build (hardware class {class_id}) against {} verification units with exact results; once per class, a few seconds (compiles their engines the first time)",
            units.len()
        ));
        info!(%suite, units = units.len(), %class_id, "running verification units for this hardware class");
        let e = engine.clone();
        let hold = hold.clone();
        let runs = tokio::task::spawn_blocking(move || crate::verify::run_units(&units, &e, &hold))
            .await??;
        let results: Vec<SuiteResult> = runs
            .iter()
            .map(crate::verify::UnitRun::submission)
            .collect();
        let answer = link.api.submit_verification(&suite, &results).await?;
        for v in answer
            .verdicts
            .iter()
            .filter(|v| v.verdict == Verdict::Disagrees)
        {
            error!(unit = %v.unit, detail = %v.detail, "this engine build disagrees with the verification suite");
        }
        if !answer.class_flagged {
            console.say(&format!("hardware class {} verified", answer.class_id));
            return Ok(());
        }
        if engine.engine == EngineChoice::Reference {
            error!(class_id = %answer.class_id, "this hardware class disagrees with the verification suite: the coordinator gives it no real work until a fixed build agrees");
            return Ok(());
        }
        let kind = engine.kind();
        warn!(
            "the {kind} engine disagrees with the verification suite; using the reference engine"
        );
        engine.engine = EngineChoice::Reference;
        link.host = crate::host::host_info(hostname, engine);
        link.register().await?;
    }
}

/// Checks a freshly built engine against units with known exact results.
pub fn self_test(factory: &EngineFactory, tests: &[SelfTest]) -> Result<(), String> {
    let mut engine = factory.make();
    for (i, t) in tests.iter().enumerate() {
        let options = RunOptions {
            budget: t.budget,
            max_solutions: REPORT_MAX_SOLUTIONS,
        };
        let got = engine
            .run(&t.unit, options, &mut NoControl)
            .map_err(|e| e.to_string())?;
        if got != t.expected {
            let depth = got
                .nodes_by_depth
                .iter()
                .zip(&t.expected.nodes_by_depth)
                .position(|(a, b)| a != b)
                .map(|d| format!("first differing depth {}", d + 1))
                .unwrap_or_else(|| "counts agree, cursor/solutions/deepest differ".into());
            return Err(format!(
                "self-test {i} disagrees with the known result ({depth})"
            ));
        }
    }
    Ok(())
}

/// Fetches a job's spec, builds its engine and self-tests it (the caller does this once
/// per job and keeps the answer).
pub async fn prepare_job(
    mut api: Coordinator,
    job_id: JobId,
    engine_args: EngineArgs,
    console: Console,
) -> Prepared {
    let spec = match api.job_spec(job_id).await {
        Ok(s) => s,
        Err(s) if is_transient(&s) || s.code() == Code::Unauthenticated => {
            return Prepared::Later(s);
        }
        Err(s) => return Prepared::Never(format!("the coordinator refused the job's spec: {s}")),
    };
    let plan = match SearchSpec::from_site_json(&spec.puzzle_json, &spec.order) {
        Ok(s) => s.plan,
        Err(e) => {
            error!(%job_id, error = %e, "the job's puzzle is invalid; refusing its units");
            let _ = api
                .build_failure(job_id, "", &format!("invalid puzzle or order: {e}"))
                .await;
            return Prepared::Never(e.to_string());
        }
    };
    if spec.probe_particles.is_some() {
        // a study's job: its units are probes, which run the population estimator on the
        // plan itself; there is no engine to build or self-test
        info!(%job_id, order = %spec.order, "a study's probe job: no engine to build");
        return Prepared::Ready(Arc::new(EngineFactory::reference(&plan)));
    }
    if engine_args.engine != EngineChoice::Reference && !engine_args.lanes_take(&plan) {
        console.say(&format!(
            "compiling the engine for job {job_id} ({}x{} puzzle, order {}): ~1-2 s the first time (~5-10 s on a 16x16 board, where two walks are built and raced), cached after",
            spec_size(&spec.puzzle_json).0,
            spec_size(&spec.puzzle_json).1,
            spec.order
        ));
    }
    let args = engine_args.clone();
    let tests = spec.self_tests.clone();
    let plan_c = plan.clone();
    let built = tokio::task::spawn_blocking(move || {
        let factory = args.factory(&plan_c, false).map_err(|e| {
            // two engines raced on the job's own units disagreed: one of them is wrong,
            // which the coordinator hears of like a failed self-test
            let disagreed = e.chain().any(|c| {
                matches!(
                    c.downcast_ref::<CompileError>(),
                    Some(CompileError::Disagreement(_))
                )
            });
            (format!("{e:#}"), disagreed)
        })?;
        let check = self_test(&factory, &tests);
        Ok::<_, (String, bool)>((factory, check))
    })
    .await
    .unwrap_or_else(|e| Err((e.to_string(), false)));
    let factory = match built {
        Ok((factory, Ok(()))) => {
            let engine = factory.make();
            let walk = factory.built().map(|b| b.describe());
            info!(%job_id, engine = %engine.kind(), build = %engine.build_id(), walk = walk.as_deref().unwrap_or("-"), "engine built and self-tested");
            console.say(&format!(
                "engine for job {job_id} ready ({} engine{}, self-tested against exact results)",
                engine.kind(),
                walk.map(|w| format!(", {w}")).unwrap_or_default()
            ));
            factory
        }
        Ok((factory, Err(why))) => {
            let build = factory.make().build_id();
            error!(%job_id, %build, %why, "engine build failed its self-test; it will not be used");
            let _ = api.build_failure(job_id, &build, &why).await;
            EngineFactory::reference(&plan)
        }
        Err((why, true)) => {
            error!(%job_id, %why, "engines raced on the job's units disagree; neither will be used");
            let _ = api.build_failure(job_id, "", &why).await;
            EngineFactory::reference(&plan)
        }
        Err((why, false)) => {
            warn!(%job_id, %why, "cannot build the compiled engine; using the reference engine");
            EngineFactory::reference(&plan)
        }
    };
    Prepared::Ready(Arc::new(factory))
}

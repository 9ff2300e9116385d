//! `study`, `studies` and `study-status`: comparing fill orders on the fleet.

use std::time::Duration;

use anyhow::{Result, bail};
use e2fleet_coordinator::client::Operator;
use e2fleet_engine::OrderSpec;
use e2fleet_engine::formats;
use e2fleet_engine::search::estimate::improve::improve_order;
use e2fleet_proto::api::{StudyId, StudyRequest, StudyStatus};

use super::args::StudyArgs;
use super::print;
use crate::outln;

/// How often `--wait` asks how a study stands.
const POLL: Duration = Duration::from_secs(2);

fn study_id(text: &str) -> Result<StudyId> {
    text.parse::<StudyId>().map_err(|e| {
        anyhow::anyhow!(
            "{e}: study ids look like 0f8fad5b-d9cb-469f-a165-70867728950e (see `studies`)"
        )
    })
}

/// `study PUZZLE --order ... [--all-scanlines] [--candidates] [--improve N] [--wait]`.
pub async fn study(args: StudyArgs) -> Result<()> {
    let loaded = args.puzzle.load()?;
    for note in &loaded.notes {
        eprintln!("note: {note}");
    }
    let puzzle = loaded.puzzle;
    let mut orders: Vec<String> = args.orders.clone();
    if args.all_scanlines {
        orders.extend(OrderSpec::scanlines().iter().map(ToString::to_string));
    }
    if args.candidates {
        orders.extend(
            OrderSpec::candidates(&puzzle)
                .iter()
                .map(ToString::to_string),
        );
    }
    // the same order named twice is studied once
    let mut seen = std::collections::HashSet::new();
    orders.retain(|o| seen.insert(o.trim().to_string()));
    if let Some(moves) = args.improve {
        let start = orders
            .first()
            .map(|o| o.parse::<OrderSpec>())
            .transpose()?
            .unwrap_or_default();
        eprintln!(
            "searching for a better order than {start} by {moves} local moves on this machine..."
        );
        let p = puzzle.clone();
        let found =
            tokio::task::spawn_blocking(move || improve_order(&p, &start, moves, 1)).await??;
        eprintln!(
            "kept {} of {} moves: estimated {:.3e} nodes against {:.3e} for the start (a quick score; the study judges it)",
            found.kept, found.tried, found.score, found.start_score
        );
        if found.kept > 0 {
            orders.push(found.order.to_string());
        }
    }
    if orders.len() < 2 {
        bail!(
            "a study compares at least two orders: give --order twice, or --all-scanlines, or --candidates"
        );
    }
    let request = StudyRequest {
        name: args
            .name
            .clone()
            .unwrap_or_else(|| puzzle.name().to_string()),
        puzzle_json: formats::to_site_json(&puzzle),
        orders,
        particles: args.particles,
        rounds: args.rounds,
        replicas: args.replicas,
        spot_check: args.spot_check.unwrap_or(0.0),
        priority: args.priority,
    };
    let mut op = super::admin::connect(&args.admin).await?;
    let created = op.submit_study(&request).await?;
    if !args.wait {
        if args.admin.json {
            outln!(
                "{}",
                serde_json::json!({"study": created.study_id, "units": created.units})
            );
        } else {
            outln!(
                "study {} submitted: {} orders, {} probe units; `study-status {}` shows the ranking",
                created.study_id,
                request.orders.len(),
                created.units,
                created.study_id
            );
        }
        return Ok(());
    }
    if !args.admin.json {
        eprintln!(
            "study {} submitted: {} orders, {} probe units; waiting for it to settle",
            created.study_id,
            request.orders.len(),
            created.units
        );
    }
    let status = wait(&mut op, created.study_id).await?;
    print::study(&status, args.admin.json);
    Ok(())
}

/// `study-status ID [--wait]`.
pub async fn status(id: &str, wait_for_end: bool, mut op: Operator, json: bool) -> Result<()> {
    let id = study_id(id)?;
    let status = if wait_for_end {
        wait(&mut op, id).await?
    } else {
        op.study(id).await?
    };
    print::study(&status, json);
    Ok(())
}

/// `study-cancel ID`.
pub async fn cancel(id: &str, mut op: Operator) -> Result<()> {
    let id = study_id(id)?;
    op.cancel_study(id).await?;
    outln!("study {id} cancelled");
    Ok(())
}

/// `studies`.
pub async fn list(mut op: Operator, json: bool) -> Result<()> {
    for s in op.studies().await? {
        if json {
            print::study(&s, true);
        } else {
            let best = s.orders.first().map(|o| o.order.as_str()).unwrap_or("-");
            outln!(
                "{}  {:<10} {:>3} orders  best so far {best}  {}",
                s.study_id,
                s.state,
                s.orders.len(),
                s.name
            );
        }
    }
    Ok(())
}

/// Polls a study until it has ended.
async fn wait(op: &mut Operator, id: StudyId) -> Result<StudyStatus> {
    loop {
        let status = op.study(id).await?;
        if status.ended() {
            return Ok(status);
        }
        tokio::time::sleep(POLL).await;
    }
}

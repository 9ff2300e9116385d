//! Text output of the operator commands (`--json` prints the values as they are).

use std::fmt::Write;
use std::time::Duration;

use e2fleet_proto::api::status::{
    AccountStatus, FleetStatus, JobStatus, VerificationMatrix, WorkerStatus,
};
use e2fleet_proto::api::{StudyStatus, Verdict};
use e2fleet_proto::text::thousands;

use crate::outln;

/// A rate in M nodes/s, or why there is none.
fn rate(v: Option<f64>, what: &str, none: &str) -> String {
    match v {
        Some(r) => format!("{:.1} M nodes/s {what}", r / 1e6),
        None => format!("n/a ({none})"),
    }
}

/// A study's ranking as text, or as one line of JSON: `{"study", "state", "orders":
/// [{"order", "estimate", "low", "high", "at_least", ...}]}`, best first (`low` and
/// `high`, the 95% interval, are null where only the lower bound is stated).
pub fn study(s: &StudyStatus, json: bool) {
    if json {
        let orders: Vec<serde_json::Value> = s
            .orders
            .iter()
            .map(|o| {
                serde_json::json!({
                    "order": o.order,
                    "estimate": o.estimate,
                    "low": o.low,
                    "high": o.high,
                    "at_least": o.at_least,
                    "rank": o.rank,
                    "separated": o.separated,
                    "rounds": o.rounds,
                    "job_id": o.job_id,
                })
            })
            .collect();
        outln!(
            "{}",
            serde_json::json!({"study": s.study_id, "name": s.name, "state": s.state, "particles": s.particles, "orders": orders})
        );
        return;
    }
    outln!("study {}  {}  ({})", s.study_id, s.name, s.state);
    outln!(
        "  {:>4}  {:<24} {:>10} {:>23} {:>10} {:>7}  ",
        "rank",
        "order",
        "estimate",
        "95% interval",
        "at least",
        "rounds"
    );
    for o in &s.orders {
        let interval = match (o.low, o.high) {
            (Some(l), Some(h)) => format!("{} - {}", sci(l), sci(h)),
            _ => "(tail not seen)".to_string(),
        };
        let mut order = o.order.clone();
        if order.len() > 24 {
            order.truncate(21);
            order.push_str("...");
        }
        outln!(
            "  {:>4}  {order:<24} {:>10} {interval:>23} {:>10} {:>3}/{:<3}  {}",
            o.rank,
            sci(o.estimate),
            sci(o.at_least),
            o.rounds,
            o.rounds_planned,
            if o.rank == 1 {
                "best"
            } else if o.separated {
                "worse than the best at 95%"
            } else {
                "not separated from the best"
            }
        );
    }
    if let Some(best) = s.orders.first() {
        let mut order = best.order.clone();
        if order.len() > 60 {
            order.truncate(57);
            order.push_str("...");
        }
        outln!("  best: {order} ({})", best.how);
        if best.low.is_none() {
            outln!(
                "  no interval is stated: the probes did not see the bottom of these trees, so the ranking by mean is a guess; orders marked worse are so at 95% by their lower bounds"
            );
        }
        outln!(
            "  submit it with: submit PUZZLE --order study:{}",
            s.study_id
        );
    }
}

/// A job as text (or one line of JSON).
/// A node count for reading: exact below a million, else three digits and a power of ten.
fn sci(v: f64) -> String {
    if v < 1e6 {
        format!("{:.0}", v.max(0.0))
    } else {
        format!("{v:.2e}")
    }
}

/// Seconds as the largest unit that keeps them readable.
fn duration(s: f64) -> String {
    const UNITS: [(f64, &str); 5] = [
        (365.25 * 86400.0, "years"),
        (86400.0, "days"),
        (3600.0, "hours"),
        (60.0, "minutes"),
        (1.0, "seconds"),
    ];
    for (size, name) in UNITS {
        if s >= size || size == 1.0 {
            let n = s / size;
            return if n >= 1e6 {
                format!("{n:.2e} {name}")
            } else {
                format!("{n:.1} {name}")
            };
        }
    }
    unreachable!("the last unit always matches")
}

pub fn job(j: &JobStatus, json: bool) {
    if json {
        outln!(
            "{}",
            serde_json::to_string(j).expect("job status serialises")
        );
        return;
    }
    let u = &j.units;
    outln!(
        "{}  {}  {}\n  units: {} done, {} leased, {} open\n  nodes: {} (enumeration {} + split {} + units {})\n  solutions: {}   deepest: {}\n  conservation: {}\n  per-core rate: {}   aggregate rate: {}",
        j.job_id,
        j.name,
        j.state,
        thousands(u.done),
        thousands(u.leased),
        thousands(u.open),
        thousands(j.nodes_total),
        thousands(j.enumeration_nodes),
        thousands(j.split_nodes),
        thousands(j.unit_nodes),
        thousands(j.solutions_count),
        j.deepest.depth,
        match j.conservation_ok {
            Some(true) =>
                "holds: the total is exact (enumeration + split + units, recomputed from stored results)",
            Some(false) => "BROKEN",
            None => "checked at completion",
        },
        rate(
            j.per_core_nodes_per_s,
            "per core",
            "no timed result accepted yet"
        ),
        rate(Some(j.aggregate_nodes_per_s), "fleet", ""),
    );
    if let Some(e) = &j.estimate
        && let Some(tree) = e.tree_nodes
    {
        let (size, eta) = match (e.tree_low, e.tree_high) {
            (Some(low), Some(high)) => (
                format!(
                    "tree ~{} nodes (95% interval {} - {}), ~{} left",
                    sci(tree),
                    sci(low),
                    sci(high),
                    sci(tree - j.nodes_total as f64)
                ),
                e.eta_seconds.map_or("no rate yet".to_string(), |s| {
                    format!("~{} at this job's rate", duration(s))
                }),
            ),
            _ => (
                format!(
                    "tree at least {} nodes (95%; the samples' mean ~{} is a guess)",
                    sci(e.tree_at_least.unwrap_or(tree)),
                    sci(tree)
                ),
                "time to go unknown".to_string(),
            ),
        };
        outln!("  estimate: {size}, {eta}");
        outln!("  estimated by: {}", e.tree_how);
    }
    if j.paused {
        outln!("  paused: no new leases (`resume {}` goes on)", j.job_id);
    }
    if j.priority != 0 || j.share != 1.0 {
        outln!("  schedule: priority {}, share {}", j.priority, j.share);
    }
    if let Some(why) = &j.waiting.reason {
        outln!("  waiting: {why}");
    }
}

/// One line of `job --watch`.
pub fn progress(j: &JobStatus, elapsed: Duration) -> String {
    let u = &j.units;
    let mut line = format!(
        "[{:>5.0} s] units {}/{}  nodes {}  {}  {}",
        elapsed.as_secs_f64(),
        thousands(u.done),
        thousands(u.done + u.open + u.leased),
        thousands(j.nodes_total),
        rate(j.per_core_nodes_per_s, "per core", "none accepted yet"),
        rate(Some(j.aggregate_nodes_per_s), "fleet aggregate", ""),
    );
    if let Some(why) = &j.waiting.reason {
        line.push_str(&format!("\n  waiting: {why}"));
    }
    line
}

/// One account as a line.
pub fn account(a: &AccountStatus) -> String {
    let standing = if a.revoked_ms.is_some() {
        "REVOKED".to_string()
    } else if a.quarantined {
        "QUARANTINED".to_string()
    } else if a.trusted {
        "trusted".to_string()
    } else {
        format!("earning trust ({} confirmed in a row)", a.confirmed_streak)
    };
    let team = a
        .team
        .as_ref()
        .map(|t| format!("  team {t}"))
        .unwrap_or_default();
    format!(
        "{:<20} {:<10} {:<36} {:>4} workers  {:>16} nodes credited ({} results; {} confirmed by another party)  {} errors{team}",
        a.id,
        a.kind,
        standing,
        a.workers,
        a.credit_nodes,
        a.credit_results,
        a.confirmed_results,
        a.errors
    )
}

/// A label a worker chose, as a terminal may show it: control characters and direction
/// overrides escaped (the coordinator refuses them at registration; older rows may hold
/// them).
pub fn label(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// One worker as a line (a paused one, seen lately, says why at the end).
pub fn worker(w: &WorkerStatus) -> String {
    let paused = w.paused_now();
    format!(
        "{}  {:<16} {:<20} {:<12} {:<28} cores {:>3}  {:>8} units  {} errors  {:.1} M/s per core  {}  {}{}",
        w.id,
        w.account,
        label(&w.host.hostname),
        if paused.is_some() {
            "paused".to_string()
        } else {
            w.state.to_string()
        },
        label(&w.host.cpu_model),
        w.host.cores,
        w.units_done,
        w.errors,
        w.per_core_rate / 1e6,
        if w.round_trip_ms > 0.0 {
            format!(
                "link {:.0} ms, {:.1}% waiting",
                w.round_trip_ms,
                100.0 * w.network_wait
            )
        } else {
            "link -".to_string()
        },
        label(&w.engine_build),
        paused.map_or(String::new(), |p| format!("  (paused: {})", label(p))),
    )
}

/// The fleet summary as text.
pub fn fleet(f: &FleetStatus) -> String {
    let mut out = String::new();
    let w = &f.workers;
    let _ = writeln!(
        out,
        "workers: {} ({} online, {} idle, {} offline, {} quarantined){}",
        w.total,
        w.online,
        w.idle,
        w.offline,
        w.quarantined,
        if w.paused > 0 {
            format!("; {} of them paused", w.paused)
        } else {
            String::new()
        }
    );
    let a = &f.aggregate_nodes_per_s;
    let _ = writeln!(
        out,
        "aggregate (whole fleet, last 60 s): {:.1} M nodes/s verified, {:.1} M nodes/s received",
        a.verified / 1e6,
        a.raw / 1e6
    );
    let p = &f.per_core_nodes_per_s;
    let _ = writeln!(
        out,
        "per core (one engine thread, median of the last hour): {}",
        rate(p.overall, "", "no timed result accepted in the last hour")
    );
    for g in &p.by_cpu_model {
        let _ = writeln!(
            out,
            "  {:<40} {:>6} results  {}",
            label(&g.key),
            g.results,
            rate(g.median_nodes_per_s, "", "none")
        );
    }
    let u = &f.units_last_minute;
    let _ = writeln!(
        out,
        "last minute: {} units leased, {} completed, {} leases expired",
        u.leased, u.completed, u.expired
    );
    let _ = writeln!(out, "wrong results (all time): {}", f.wrong_results);
    out
}

/// The conformance matrix as text: one row per hardware class, one column per unit.
pub fn matrix(m: &VerificationMatrix) -> String {
    let mut out = String::new();
    let classes = m.classes.len();
    let _ = writeln!(
        out,
        "suite {}: {} units, {} hardware class{}",
        m.suite,
        m.units.len(),
        classes,
        if classes == 1 { "" } else { "es" }
    );
    for (i, u) in m.units.iter().enumerate() {
        let _ = writeln!(
            out,
            "  U{:<3} {:<24} {}",
            i + 1,
            u.name,
            if u.expected_source.is_empty() {
                "expected: not yet known".to_string()
            } else {
                format!("expected: {}", u.expected_source)
            }
        );
    }
    let _ = write!(out, "\n{:<13} {:<9}", "class", "status");
    for i in 0..m.units.len() {
        let _ = write!(out, " {:>5}", format!("U{}", i + 1));
    }
    let _ = writeln!(out, "  per-core (speed units)  what");
    for c in &m.classes {
        let _ = write!(
            out,
            "{:<13} {:<9}",
            c.id,
            if c.flagged { "FLAGGED" } else { "ok" }
        );
        for u in &m.units {
            let mark = match c.cells.get(&u.name).map(|cell| cell.verdict) {
                Some(Verdict::Agrees) => "ok",
                Some(Verdict::Disagrees) => "DIFF",
                Some(Verdict::Pending) => "?",
                Some(Verdict::NotRun) | None => "-",
            };
            let _ = write!(out, " {mark:>5}");
        }
        let speed = c
            .speed_nodes_per_s
            .map(|v| format!("{:.1} M/s", v / 1e6))
            .unwrap_or_else(|| "-".into());
        let _ = writeln!(
            out,
            "  {:>22}  {} / {} {} / {} / {} [{}]",
            speed,
            label(&c.cpu_model),
            label(&c.arch),
            label(&c.os),
            label(&c.rustc_version),
            label(&c.engine_release),
            label(&c.target_features),
        );
    }
    let _ = writeln!(
        out,
        "\nok = agrees with the exact result, DIFF = disagrees (the class gets no real work), ? = no expected result yet, - = not run"
    );
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_label_cannot_drive_a_terminal_or_forge_a_line() {
        let shown = super::label("host\n2026-12-05 INFO forged \u{1b}[2J\u{202e}txt");
        assert!(!shown.contains('\n') && !shown.contains('\u{1b}') && !shown.contains('\u{202e}'));
        assert!(
            shown.contains("\\u{a}") && shown.contains("\\u{1b}"),
            "{shown}"
        );
        assert_eq!(super::label("lab-pc-7 (AMD EPYC)"), "lab-pc-7 (AMD EPYC)");
    }
}

//! What the scenarios measure, read from the workers' own logs (one JSON object a line)
//! rather than from the worker's own accounting: when each unit started and ended, so
//! the time each engine thread spent walking, and what the worker said when.
//!
//! **Efficiency** is `aggregate / (threads x per-core)`: the share of the fleet's
//! engine-thread time spent walking. Over a window, it is the walking time of every
//! worker divided by the window's length times the threads. The window is the fleet's
//! steady state: from the moment the last worker started its first unit to the moment the
//! first worker finished its last one (after that the job runs out of units, which has
//! nothing to do with the links).

use std::collections::HashMap;
use std::path::Path;

/// One log line.
#[derive(Clone, Debug)]
pub struct Event {
    /// Seconds since the epoch.
    pub t: f64,
    /// Its message.
    pub message: String,
    /// Its fields.
    pub fields: serde_json::Value,
    /// The lease of its `unit` span, if any.
    pub lease: Option<String>,
}

/// Every event of a JSON log (lines that are not JSON are skipped).
pub fn events(log: &Path) -> Vec<Event> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Event> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let t = v["timestamp"]
        .as_str()?
        .parse::<jiff::Timestamp>()
        .ok()?
        .as_microsecond() as f64
        / 1e6;
    let fields = v["fields"].clone();
    let message = fields["message"].as_str().unwrap_or("").to_string();
    let lease = v["span"]["lease_id"].as_str().map(str::to_string);
    Some(Event {
        t,
        message,
        fields,
        lease,
    })
}

/// The times a worker's engines walked units, merged: `[start, end)` pairs, in order.
pub fn walking(events: &[Event]) -> Vec<(f64, f64)> {
    let mut open: HashMap<String, f64> = HashMap::new();
    let mut spans = Vec::new();
    for e in events {
        let Some(lease) = &e.lease else { continue };
        match e.message.as_str() {
            "unit started" => {
                open.insert(lease.clone(), e.t);
            }
            "unit walked" | "unit dropped on the coordinator's word; not reported" => {
                if let Some(s) = open.remove(lease) {
                    spans.push((s, e.t));
                }
            }
            _ => {}
        }
    }
    merge(spans)
}

fn merge(mut spans: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Vec<(f64, f64)> = Vec::new();
    for (s, e) in spans {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// Seconds of `spans` inside `window`.
pub fn within(spans: &[(f64, f64)], window: (f64, f64)) -> f64 {
    spans
        .iter()
        .map(|&(s, e)| (e.min(window.1) - s.max(window.0)).max(0.0))
        .sum()
}

/// The fleet's steady state (see the module docs), if every worker walked.
pub fn steady_window(workers: &[Vec<(f64, f64)>]) -> Option<(f64, f64)> {
    let start = workers
        .iter()
        .map(|w| w.first().map(|s| s.0))
        .collect::<Option<Vec<f64>>>()?
        .into_iter()
        .fold(f64::MIN, f64::max);
    let end = workers
        .iter()
        .map(|w| w.last().map(|s| s.1))
        .collect::<Option<Vec<f64>>>()?
        .into_iter()
        .fold(f64::MAX, f64::min);
    (end > start).then_some((start, end))
}

/// Efficiency over `window` of workers with `threads[i]` engine threads each walking
/// `workers[i]`.
pub fn efficiency(workers: &[Vec<(f64, f64)>], threads: &[usize], window: (f64, f64)) -> f64 {
    let walked: f64 = workers.iter().map(|w| within(w, window)).sum();
    let capacity = (window.1 - window.0) * threads.iter().sum::<usize>() as f64;
    if capacity <= 0.0 {
        0.0
    } else {
        walked / capacity
    }
}

/// The first event at or after `since` whose message contains `text`.
pub fn first_after<'e>(events: &'e [Event], since: f64, text: &str) -> Option<&'e Event> {
    events
        .iter()
        .find(|e| e.t >= since && e.message.contains(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(t: f64, message: &str, lease: &str) -> Event {
        Event {
            t,
            message: message.into(),
            fields: serde_json::Value::Null,
            lease: Some(lease.into()),
        }
    }

    #[test]
    fn walking_time_merges_overlapping_units_and_efficiency_counts_it_in_the_window() {
        let a = walking(&[
            ev(0.0, "unit started", "x"),
            ev(1.0, "unit started", "y"),
            ev(2.0, "unit walked", "x"),
            ev(3.0, "unit walked", "y"),
            ev(5.0, "unit started", "z"),
            ev(6.0, "unit walked", "z"),
        ]);
        assert_eq!(a, vec![(0.0, 3.0), (5.0, 6.0)]);
        let b = vec![(1.0, 6.0)];
        let window = steady_window(&[a.clone(), b.clone()]).unwrap();
        assert_eq!(window, (1.0, 6.0));
        // a walks 2 + 1 of the 5 s, b all 5: 8 of 10
        assert!((efficiency(&[a, b], &[1, 1], window) - 0.8).abs() < 1e-9);
    }

    #[test]
    fn a_json_log_line_is_read() {
        let line = r#"{"timestamp":"2026-12-05T12:00:01.500000Z","level":"INFO","fields":{"message":"unit walked","committed":5},"target":"w","span":{"lease_id":"abc","name":"unit"}}"#;
        let e = parse_line(line).unwrap();
        assert_eq!(e.message, "unit walked");
        assert_eq!(e.lease.as_deref(), Some("abc"));
        assert_eq!(e.fields["committed"], 5);
        assert!((e.t.fract() - 0.5).abs() < 1e-6);
    }
}

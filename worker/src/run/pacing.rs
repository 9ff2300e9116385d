//! How far ahead the worker leases, and what its link costs it: pure bookkeeping the loop
//! feeds with what it sees, kept apart so it can be tested without a network.
//!
//! - [`queue_target`]: how many units to hold so that no engine thread waits on a round
//!   trip for its next unit: every engine full, plus enough queued per thread to cover
//!   three round trips at the pace units finish (one for the lease call that refills the
//!   queue, one for the reports still on their way, whose leases count as held until they
//!   land, and one to spare: a 300 ms link and units of 0.25 s want four queued per
//!   thread; a LAN and units of a minute want one).
//! - [`UnitPace`]: the pace a thread finishes units, from the results' engine seconds.
//! - [`IdleLedger`]: engine-thread time spent without a unit, by why (waiting on the
//!   coordinator, no work to lease, paused, preparing an engine); the first is what a
//!   heartbeat reports as the worker's network wait.
//! - [`WakeWatch`]: a loop turn that comes much later than it should, or a wall clock
//!   that moved far more than the monotonic one: the machine slept or the process was
//!   stopped, and the worker should ask at once which of its leases still hold.

use std::time::{Duration, Instant, SystemTime};

/// Most units queued per engine thread beyond what its engine holds.
const MAX_QUEUED_PER_THREAD: usize = 6;

/// Most leases a worker identity may hold at the coordinator with `threads` engine
/// threads (the coordinator's `fleet::policy::lease_cap`: five a thread plus two, 4 to
/// 64); asking for more only gets fewer.
pub fn lease_cap(threads: usize) -> usize {
    (5 * threads + 2).clamp(4, 64)
}

/// Units to hold (running, queued, and reported but not yet acknowledged) with `threads`
/// engine threads whose engines hold `in_hand` units each, over a link of round trip
/// `round_trip`, when a thread finishes a unit every `unit_seconds` of engine time.
pub fn queue_target(
    threads: usize,
    in_hand: usize,
    round_trip: Option<Duration>,
    unit_seconds: Option<f64>,
) -> usize {
    let threads = threads.max(1);
    let queued_per_thread = match (round_trip, unit_seconds) {
        (Some(rtt), Some(secs)) if secs > 0.0 => {
            ((3.0 * rtt.as_secs_f64() / secs).ceil() as usize).clamp(1, MAX_QUEUED_PER_THREAD)
        }
        _ => 1,
    };
    (threads * (in_hand.max(1) + queued_per_thread)).min(lease_cap(threads))
}

/// The pace units finish at on one engine thread: an exponentially weighted mean of
/// their engine seconds (the lane engine's units share a thread's time, and their
/// seconds are their shares, so the mean is a thread's time per unit either way).
#[derive(Clone, Debug, Default)]
pub struct UnitPace {
    mean: Option<f64>,
}

impl UnitPace {
    /// A finished unit took `seconds` of engine time.
    pub fn record(&mut self, seconds: f64) {
        if !seconds.is_finite() || seconds < 0.0 {
            return;
        }
        self.mean = Some(match self.mean {
            None => seconds,
            Some(m) => 0.8 * m + 0.2 * seconds,
        });
    }

    /// Engine seconds a unit takes, once one finished.
    pub fn unit_seconds(&self) -> Option<f64> {
        self.mean
    }
}

/// Calls of one kind in flight (a lease call, a heartbeat). One at a time, but a call
/// out for longer than [`Outstanding::hedge_after`] may be joined by a second: with
/// several coordinators, one whose host went silent holds a call until the keepalive
/// gives its connection up, and the second goes to another.
#[derive(Debug, Default)]
pub struct Outstanding {
    count: usize,
    last_sent: Option<Instant>,
}

impl Outstanding {
    /// How long a call may be out before a second may join it, on a link of round trip
    /// `rtt`: five round trips, at least two seconds.
    pub fn hedge_after(rtt: Option<Duration>) -> Duration {
        (rtt.unwrap_or_default() * 5).max(Duration::from_secs(2))
    }

    /// Whether another call may go out now.
    pub fn may_send(&self, hedge_after: Duration) -> bool {
        match self.count {
            0 => true,
            1 => self.last_sent.is_some_and(|t| t.elapsed() >= hedge_after),
            _ => false,
        }
    }

    /// Whether any call is out.
    pub fn any(&self) -> bool {
        self.count > 0
    }

    /// A call went out.
    pub fn sent(&mut self) {
        self.count += 1;
        self.last_sent = Some(Instant::now());
    }

    /// A call came back.
    pub fn answered(&mut self) {
        self.count = self.count.saturating_sub(1);
    }
}

/// Why engine threads sit without a unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Idle {
    /// A lease call is out, or the coordinator cannot be reached.
    Network,
    /// The coordinator had no unit to lease.
    NoWork,
    /// The engines are paused, or the worker is stopping.
    Paused,
    /// A job's engine is being built or its spec fetched.
    Preparing,
}

/// Engine-thread time without a unit, by [`Idle`] reason, integrated over the loop's
/// turns: between two turns, the threads idle at the first count against the reason that
/// held then. [`IdleLedger::take`] gives the share of the last minute or so (the periods
/// between its calls, as long as they add up to [`IdleLedger::WINDOW`]), so one slow
/// round trip at the end of a job does not paint a worker red.
#[derive(Debug)]
pub struct IdleLedger {
    last: Instant,
    idle_threads: usize,
    why: Idle,
    /// Thread-nanoseconds waiting on the network since the last [`IdleLedger::take`].
    network: u128,
    since: Instant,
    /// Past periods: (their end, network thread-ns, all thread-ns).
    periods: std::collections::VecDeque<(Instant, u128, u128)>,
}

impl IdleLedger {
    /// How far back [`IdleLedger::take`] looks.
    pub const WINDOW: Duration = Duration::from_secs(60);

    /// A ledger starting now.
    pub fn new(now: Instant) -> IdleLedger {
        IdleLedger {
            last: now,
            idle_threads: 0,
            why: Idle::Network,
            network: 0,
            since: now,
            periods: std::collections::VecDeque::new(),
        }
    }

    /// A turn at `now`: `idle_threads` threads have no unit, because of `why`.
    pub fn turn(&mut self, now: Instant, idle_threads: usize, why: Idle) {
        let dt = now.saturating_duration_since(self.last);
        if self.why == Idle::Network {
            self.network += dt.as_nanos() * self.idle_threads as u128;
        }
        (self.last, self.idle_threads, self.why) = (now, idle_threads, why);
    }

    /// The share (0 to 1) of `threads` threads' time spent waiting on the network over
    /// the last [`IdleLedger::WINDOW`] (the periods between calls that end within it);
    /// starts the next period.
    pub fn take(&mut self, now: Instant, threads: usize) -> f64 {
        self.turn(now, self.idle_threads, self.why);
        let span = now.saturating_duration_since(self.since).as_nanos() * threads.max(1) as u128;
        self.periods.push_back((now, self.network, span));
        (self.network, self.since) = (0, now);
        while self
            .periods
            .front()
            .is_some_and(|p| now.saturating_duration_since(p.0) > Self::WINDOW)
        {
            self.periods.pop_front();
        }
        let (network, all) = self
            .periods
            .iter()
            .fold((0u128, 0u128), |(n, a), p| (n + p.1, a + p.2));
        if all == 0 {
            0.0
        } else {
            (network as f64 / all as f64).clamp(0.0, 1.0)
        }
    }
}

/// Notices a gap in the worker's own time: the machine slept (the wall clock moved on
/// while the monotonic clock, on Linux, stood still) or the process was stopped (both
/// moved, but the loop, which turns at least every second, did not).
#[derive(Debug)]
pub struct WakeWatch {
    mono: Instant,
    wall: SystemTime,
}

/// A turn this much later than the loop's longest sleep is a gap.
const GAP: Duration = Duration::from_secs(10);

impl WakeWatch {
    /// Watching from now.
    pub fn new() -> WakeWatch {
        WakeWatch {
            mono: Instant::now(),
            wall: SystemTime::now(),
        }
    }

    /// A turn: how long the worker was away, if it was.
    pub fn turn(&mut self) -> Option<Duration> {
        self.turn_at(Instant::now(), SystemTime::now())
    }

    fn turn_at(&mut self, mono: Instant, wall: SystemTime) -> Option<Duration> {
        let d_mono = mono.saturating_duration_since(self.mono);
        let d_wall = wall.duration_since(self.wall).unwrap_or_default();
        (self.mono, self.wall) = (mono, wall);
        let away = d_mono.max(d_wall);
        (d_mono >= GAP || d_wall.saturating_sub(d_mono) >= GAP).then_some(away)
    }
}

impl Default for WakeWatch {
    fn default() -> WakeWatch {
        WakeWatch::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_link_and_short_units_queue_more() {
        // a LAN, or no measurement yet: one queued per thread
        assert_eq!(queue_target(2, 1, None, None), 4);
        assert_eq!(
            queue_target(2, 1, Some(Duration::from_millis(1)), Some(60.0)),
            4
        );
        // 300 ms and units of 0.25 s: four queued per thread
        assert_eq!(
            queue_target(2, 1, Some(Duration::from_millis(300)), Some(0.25)),
            10
        );
        // never past what the coordinator lets an identity hold
        assert_eq!(
            queue_target(1, 4, Some(Duration::from_secs(1)), Some(0.01)),
            7
        );
        assert_eq!(lease_cap(100), 64);
    }

    #[test]
    fn a_slow_call_may_be_joined_by_one_more() {
        let mut o = Outstanding::default();
        let hedge = Duration::from_millis(30);
        assert!(o.may_send(hedge) && !o.any());
        o.sent();
        assert!(!o.may_send(hedge) && o.any());
        std::thread::sleep(hedge);
        assert!(o.may_send(hedge));
        o.sent();
        assert!(!o.may_send(Duration::ZERO), "never a third");
        o.answered();
        o.answered();
        assert!(!o.any());
        assert_eq!(
            Outstanding::hedge_after(Some(Duration::from_secs(1))),
            Duration::from_secs(5)
        );
        assert_eq!(Outstanding::hedge_after(None), Duration::from_secs(2));
    }

    #[test]
    fn pace_is_a_weighted_mean_that_ignores_nonsense() {
        let mut p = UnitPace::default();
        assert_eq!(p.unit_seconds(), None);
        p.record(1.0);
        p.record(f64::NAN);
        p.record(-3.0);
        assert_eq!(p.unit_seconds(), Some(1.0));
        p.record(2.0);
        assert!((p.unit_seconds().unwrap() - 1.2).abs() < 1e-9);
    }

    #[test]
    fn only_idle_time_waiting_on_the_network_counts() {
        let t0 = Instant::now();
        let mut l = IdleLedger::new(t0);
        // 2 threads: one idle on the network for 1 s, then both idle with no work for 1 s
        l.turn(t0, 1, Idle::Network);
        l.turn(t0 + Duration::from_secs(1), 2, Idle::NoWork);
        let share = l.take(t0 + Duration::from_secs(2), 2);
        assert!((share - 0.25).abs() < 1e-9, "{share}");
        // the next period adds its own: none waiting over 2 more seconds
        let share = l.take(t0 + Duration::from_secs(4), 2);
        assert!((share - 0.125).abs() < 1e-9, "{share}");
        // a minute later only what is recent counts
        let share = l.take(t0 + Duration::from_secs(100), 2);
        assert_eq!(share, 0.0);
    }

    #[test]
    fn a_gap_in_time_is_noticed() {
        let (m, w) = (Instant::now(), SystemTime::now());
        let mut watch = WakeWatch { mono: m, wall: w };
        assert_eq!(
            watch.turn_at(m + Duration::from_secs(1), w + Duration::from_secs(1)),
            None
        );
        // stopped for a minute: both clocks moved
        let away = watch.turn_at(m + Duration::from_secs(61), w + Duration::from_secs(61));
        assert_eq!(away, Some(Duration::from_secs(60)));
        // suspended: only the wall clock moved
        let away = watch.turn_at(m + Duration::from_secs(62), w + Duration::from_secs(3662));
        assert_eq!(away, Some(Duration::from_secs(3601)));
    }
}

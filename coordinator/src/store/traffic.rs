//! What a backend asks of a database server: statements sent and round trips waited for.
//! On PostgreSQL each round trip is a network wait (70-200 µs to a server on the same
//! machine, 0.1-0.5 ms across a network) that the writer pays while holding its batch
//! open, so round trips per completed unit bound what one coordinator can feed. The load
//! bench prints both per unit; embedded SQLite has no server and counts nothing.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

/// Running counts, shared by the writer and the read pool of one store.
#[derive(Debug, Default)]
pub struct Traffic {
    statements: AtomicU64,
    round_trips: AtomicU64,
}

/// A copy of [`Traffic`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrafficTotals {
    /// Statements sent (transaction control included).
    pub statements: u64,
    /// Times the store waited for the server's answer.
    pub round_trips: u64,
}

impl Traffic {
    /// `statements` sent together, answered in one round trip.
    pub fn exchanged(&self, statements: u64) {
        self.statements.fetch_add(statements, Relaxed);
        self.round_trips.fetch_add(1, Relaxed);
    }

    /// The totals so far.
    pub fn totals(&self) -> TrafficTotals {
        TrafficTotals {
            statements: self.statements.load(Relaxed),
            round_trips: self.round_trips.load(Relaxed),
        }
    }
}

impl std::ops::Add for TrafficTotals {
    type Output = TrafficTotals;

    fn add(self, o: TrafficTotals) -> TrafficTotals {
        TrafficTotals {
            statements: self.statements + o.statements,
            round_trips: self.round_trips + o.round_trips,
        }
    }
}

impl std::ops::Sub for TrafficTotals {
    type Output = TrafficTotals;

    fn sub(self, o: TrafficTotals) -> TrafficTotals {
        TrafficTotals {
            statements: self.statements.saturating_sub(o.statements),
            round_trips: self.round_trips.saturating_sub(o.round_trips),
        }
    }
}

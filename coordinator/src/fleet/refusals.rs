//! What the coordinator turned away before any handler ran: connections its accept loop
//! refused or closed ([`crate::server::listener`]) and calls its gRPC gate refused
//! ([`crate::server::guard`]), counted by reason.
//!
//! `/metrics` shows them as `e2fleet_refused_connections_total{reason=...}` and
//! `e2fleet_refused_calls_total{reason=...}`: an operator sees a stranger holding slots,
//! a lab behind one address hitting its per-address limits, or a wrong token in a
//! deployment, without reading the debug log. A refused call is not in
//! [`super::call_times`] (those time the calls let in).
//!
//! One relaxed atomic add a refusal; the reasons are fixed, so the memory is the same
//! whatever a stranger sends.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Why a connection was refused or closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Connection {
    /// The address opened new connections faster than its rate.
    NewTooFast,
    /// Every connection slot was taken.
    Full,
    /// The address already held its share of connections that showed no token.
    AddressFull,
    /// No TLS handshake or first bytes in time (a silent TCP connection).
    Silent,
    /// The TLS handshake failed (a client speaking plain HTTP/2 to a TLS port, or not
    /// trusting its certificate).
    TlsFailed,
    /// Closed: it never showed a valid token within its lifetime.
    Stranger,
}

impl Connection {
    /// Every reason, in the order [`Refusals::connections`] lists them.
    pub const ALL: [Connection; 6] = [
        Connection::NewTooFast,
        Connection::Full,
        Connection::AddressFull,
        Connection::Silent,
        Connection::TlsFailed,
        Connection::Stranger,
    ];

    /// The `reason` label's value.
    pub fn label(self) -> &'static str {
        match self {
            Connection::NewTooFast => "new_too_fast",
            Connection::Full => "full",
            Connection::AddressFull => "address_full",
            Connection::Silent => "silent",
            Connection::TlsFailed => "tls_failed",
            Connection::Stranger => "stranger",
        }
    }
}

/// Why a call was refused at the gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// The address is shut out after failed tokens.
    ShutOut,
    /// A missing or wrong worker or admin token.
    BadToken,
    /// Too many calls without a token in flight from everyone.
    OpenFull,
    /// Too many calls without a token in flight from the address.
    OpenAddressFull,
    /// A verification or audit submission while others are judged, or past the
    /// identity's or account's rate.
    SubmissionBusy,
}

impl Call {
    /// Every reason, in the order [`Refusals::calls`] lists them.
    pub const ALL: [Call; 5] = [
        Call::ShutOut,
        Call::BadToken,
        Call::OpenFull,
        Call::OpenAddressFull,
        Call::SubmissionBusy,
    ];

    /// The `reason` label's value.
    pub fn label(self) -> &'static str {
        match self {
            Call::ShutOut => "shut_out",
            Call::BadToken => "bad_token",
            Call::OpenFull => "open_full",
            Call::OpenAddressFull => "open_address_full",
            Call::SubmissionBusy => "submission_busy",
        }
    }
}

/// The counts, since the coordinator started.
#[derive(Default)]
pub struct Refusals {
    connections: [AtomicU64; Connection::ALL.len()],
    calls: [AtomicU64; Call::ALL.len()],
}

impl Refusals {
    /// Counts a refused or closed connection.
    pub fn connection(&self, why: Connection) {
        self.connections[why as usize].fetch_add(1, Relaxed);
    }

    /// Counts a refused call.
    pub fn call(&self, why: Call) {
        self.calls[why as usize].fetch_add(1, Relaxed);
    }

    /// Connections refused or closed, by reason (every reason, zero or not).
    pub fn connections(&self) -> Vec<(Connection, u64)> {
        Connection::ALL
            .iter()
            .map(|&c| (c, self.connections[c as usize].load(Relaxed)))
            .collect()
    }

    /// Calls refused, by reason (every reason, zero or not).
    pub fn calls(&self) -> Vec<(Call, u64)> {
        Call::ALL
            .iter()
            .map(|&c| (c, self.calls[c as usize].load(Relaxed)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_counts_apart_and_every_reason_is_listed() {
        let r = Refusals::default();
        r.connection(Connection::Silent);
        r.connection(Connection::Silent);
        r.connection(Connection::Full);
        r.call(Call::BadToken);
        let connections = r.connections();
        assert_eq!(connections.len(), Connection::ALL.len());
        for (c, n) in connections {
            let want = match c {
                Connection::Silent => 2,
                Connection::Full => 1,
                _ => 0,
            };
            assert_eq!(n, want, "{c:?}");
        }
        let calls = r.calls();
        assert_eq!(calls.len(), Call::ALL.len());
        for (c, n) in calls {
            assert_eq!(n, u64::from(c == Call::BadToken), "{c:?}");
        }
        // labels are distinct (they are the metric's label values)
        let mut labels: Vec<_> = Connection::ALL.iter().map(|c| c.label()).collect();
        labels.extend(Call::ALL.iter().map(|c| c.label()));
        let n = labels.len();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), n);
    }
}

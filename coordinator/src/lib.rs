//! # e2fleet-coordinator
//!
//! The heart of the fleet: takes a puzzle, splits its search tree into prefix units,
//! leases them to workers, adds every result up exactly once, and catches wrong answers by
//! comparing exact counts across hosts.
//!
//! # Layout
//! - [`fleet`]: the domain logic, no network: `fleet/mod.rs` (types, errors, auth,
//!   registration), `submission.rs` (jobs), `leasing.rs` (leases, splitting, heartbeats),
//!   `reports.rs` (results, quorums, overturns, accounting checks).
//! - [`status`]: read models (job, fleet, workers) and the conservation check.
//! - [`store`]: all SQL (SQLite through sqlx, migrations in `../migrations`).
//! - [`service`]: the thin tonic services and the error-to-status table.
//! - [`server`]: one port for gRPC and HTTP (`serve(listener, fleet, shutdown)`): the
//!   JSON API under `/api/`, `/metrics`, and the pages of [`dashboard`].
//! - [`dashboard`]: the operators' web pages, assets compiled into the binary.
//! - [`tls`]: the optional TLS listener (`--tls-cert/--tls-key`).
//!
//! Dependencies point one way: `service` -> `fleet` -> `store`; the engine crate supplies
//! the puzzle model, enumeration, splitting and the verifier; `e2fleet-proto` the wire.

pub mod dashboard;
pub mod fleet;
pub mod server;
pub mod service;
pub mod status;
pub mod store;
pub mod tls;

//! # e2fleet-coordinator
//!
//! The heart of the fleet: takes a puzzle, splits its search tree into prefix units,
//! leases them to workers, adds every result up exactly once, and catches wrong answers by
//! comparing exact counts across hosts.
//!
//! # Layout
//! - [`fleet`]: the domain logic, no network: jobs, leases, reports, quorums, accounting,
//!   verification classes (`fleet/mod.rs` lists its files).
//! - [`status`]: the read models (job, fleet, workers) every output shows.
//! - [`store`]: all storage, behind named operations in domain terms (`store/tx.rs`), the
//!   SQL in `store/sql/`, run by `store/sqlite/` (one writer thread) or `store/postgres/`;
//!   migrations in `../migrations`.
//! - [`releases`]: signed worker releases: the key, publishing, what is offered and
//!   served under `/downloads/`.
//! - [`server`]: one port for gRPC and HTTP (`serve(listener, fleet, shutdown)`): the
//!   tonic services, the JSON API under `/api/`, `/metrics`, the pages of [`dashboard`],
//!   the guard in front of every call, limits on connections, and the one error table.
//! - [`dashboard`]: the operators' web pages, assets compiled into the binary.
//! - [`tls`]: TLS for the listener: the operator's certificate or the fleet's own CA.
//! - [`client`]: the admin command line's calls to a running coordinator.
//! - `cli/` (in the binary, beside `main.rs`): the command line (`serve`, `submit`, `jobs`,
//!   ...) over all of the above.
//!
//! Dependencies point one way: `server` -> `fleet` / `status` -> `store`, and `server` /
//! `fleet` -> `releases` (files only); the engine crate supplies the puzzle model,
//! enumeration, splitting and the verifier; `e2fleet-proto` the API's values and the wire.

pub mod client;
pub mod dashboard;
pub mod fleet;
pub mod releases;
pub mod server;
pub mod status;
pub mod store;
pub mod tls;

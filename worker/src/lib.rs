//! # e2fleet-worker
//!
//! The program volunteers run, as a library: `run` joins a fleet ([`run::run`] takes a
//! [`run::RunConfig`] and [`run::Controls`], so tests and embedders drive a worker in
//! their own process); `solve` walks a puzzle on this machine (whole or split into units,
//! with exact per-depth counts); `bench` measures per-core speed; `verify` checks the
//! engine against known results; `audit` checks a published job; `team` puts a
//! volunteer's account in a team. The binary (`main.rs`) is the command line over them.
//!
//! # Layout
//! - [`api`]: the fleet API as typed calls (used by `run`, `verify`, `audit`, `team`);
//! - [`run`]: the fleet client: its configuration, identity, connection, loop, engine
//!   threads, journal, pause rules and signals;
//! - [`control`]: `status`, `pause`, `resume`, `stop` of a running worker;
//! - [`service`]: `service install`, the worker as a systemd user service;
//! - [`update`]: signed updates from the fleet (fetch, verify, switch, roll back);
//! - [`solve`], [`mod@bench`], [`verify`], [`audit`], [`team`]: the other commands;
//! - [`files`]: writing the worker's own files whole and private;
//! - [`engine_args`]: flags that choose and build an engine; [`connect_args`]: the token,
//!   the CA and the plaintext policy; [`host`]: what this machine is (labels sent at
//!   registration).

pub mod api;
pub mod audit;
pub mod bench;
pub mod connect_args;
pub mod control;
pub mod engine_args;
pub mod files;
pub mod host;
pub mod run;
pub mod service;
pub mod solve;
pub mod team;
pub mod update;
pub mod verify;

//! The coordinator in one process on 127.0.0.1:0 with a real SQLite file, driven over
//! gRPC by simulated workers: honest ones (the reference engine), slow ones that miss
//! deadlines, ones that report twice or late, liars, and callers with wrong tokens.
//!
//! [`postgres`] runs this whole suite again on a PostgreSQL server, and several
//! coordinators on one database.

mod archive;
mod batches;
mod bounds;
mod certificates;
mod dashboard;
mod folding;
mod harness;
mod hostile;
mod hostile_connections;
mod http_api;
mod late;
mod postgres;
mod report_reads;
mod running_split;
mod scenarios;
mod sharing;
mod studies;
mod trust;
mod verification;
mod written_once;

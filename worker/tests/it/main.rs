//! The worker binary against an in-process coordinator on 127.0.0.1, on real puzzles:
//! exact totals, SIGKILL and lease expiry, SIGTERM with cursors, the coordinator going
//! away and coming back, journal replay, and a build that fails its self-test.

mod audit;
mod first_hour;
mod harness;
mod hostile;
mod postgres;
mod processes;
mod scenarios;
mod studies;
mod teams;
mod tls;
mod updates;
mod verify;

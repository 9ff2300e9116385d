//! # e2fleet-proto
//!
//! The fleet API (`e2fleet.v1`): the protobuf messages and tonic services generated from
//! `proto/e2fleet/v1/fleet.proto`, and the one module ([`convert`]) that turns wire
//! messages into engine domain types and back, so nothing else handles raw messages.
//! Knows nothing of SQL or of how the coordinator stores things.

#![allow(missing_docs)]

/// Generated code for `e2fleet.v1`.
pub mod v1 {
    tonic::include_proto!("e2fleet.v1");
}

pub mod convert;
pub mod endpoint;

/// Solutions kept per reported result; coordinator and workers use the same cap so that
/// result digests compare.
pub const REPORT_MAX_SOLUTIONS: usize = 64;

/// Largest message either side accepts, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

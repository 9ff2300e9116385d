//! # e2fleet-proto
//!
//! The fleet API that the coordinator and workers meet through, and nothing else: it
//! knows nothing of SQL or of how the coordinator stores things.
//!
//! # Layout
//! - [`v2`]: the protobuf messages and tonic services generated from
//!   `proto/e2fleet/v2/fleet.proto` (see `docs/protocol.md` for v1 -> v2).
//! - [`api`]: the same API as plain domain values: ids, states, leases, reports and the
//!   operators' read models (serde for the JSON API).
//! - [`convert`]: the one place wire messages become domain values and back.
//! - [`client`]: URL checks, channels (TLS or not) and authenticated requests.
//! - [`release`]: signed worker releases as both sides see them (the manifest, the
//!   signed statement, platforms, the version stamp in a worker binary).
//! - [`text`]: counts as the programs print them for people.
//! - `logs` (feature `cli`): the log set-up both programs share.

#![allow(missing_docs)]

/// Generated code for `e2fleet.v2`.
pub mod v2 {
    tonic::include_proto!("e2fleet.v2");

    /// The encoded `FileDescriptorSet` of `e2fleet.v2`, for gRPC reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/e2fleet_v2_descriptor.bin"));
}

pub mod api;
pub mod client;
pub mod convert;
#[cfg(feature = "cli")]
pub mod logs;
pub mod release;
pub mod text;

/// Solutions kept per reported result; coordinator and workers use the same cap so that
/// result digests compare.
pub const REPORT_MAX_SOLUTIONS: usize = 64;

/// Largest message either side accepts, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

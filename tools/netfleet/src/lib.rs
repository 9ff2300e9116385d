//! # e2fleet-netfleet
//!
//! A fleet of many hosts on one machine, to try e2fleet across the links it will meet on
//! other people's networks: latency, jitter, thin bandwidth, partitions, links that go
//! silent, resets, sleeping laptops, a coordinator's host cut off. The kernel's `netem` is
//! not needed: links are emulated in userspace.
//!
//! # Layout
//! - [`hosts`]: hosts as network namespaces, each with its address, `/etc/hosts` and
//!   host name, reaching only the far end of its own link;
//! - [`link`]: the link emulator, a TCP relay per link (delay, jitter, bandwidth,
//!   partition, blackhole, reset);
//! - [`fleet`]: coordinators and workers as the real programs on their hosts, TLS by
//!   name, PostgreSQL behind links of its own;
//! - [`measure`]: what the workers' logs say (walking time, efficiency, when);
//! - [`scenarios`]: the scenarios, each checked to the digit against a known count;
//!   [`storm`]: the reconnection storm's simulated workers.
//!
//! Run one with `tools/netfleet/run.sh NAME` (or `e2fleet-netfleet run NAME`); the test
//! suite runs each in its quick form.

pub mod fleet;
pub mod hosts;
pub mod link;
pub mod measure;
pub mod scenarios;
pub mod storm;

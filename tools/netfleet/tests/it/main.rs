//! Every scenario of a fleet across the internet, in its quick form, each exact to the
//! digit: hosts in network namespaces (root), links emulated in userspace, the real
//! coordinator and worker programs. One at a time (they measure time and share two
//! cores).
//!
//! Where hosts cannot be made (not root, no `ip`), the tests are ignored with the reason
//! (`cfg(has_netns)`, `cfg(has_postgres)` for the scenario on PostgreSQL; CI sets
//! `E2FLEET_REQUIRE_NETNS` and `E2FLEET_REQUIRE_POSTGRES`, and a missing tool is a build
//! error there).

use std::sync::Mutex;

use e2fleet_netfleet::hosts;
use e2fleet_netfleet::scenarios::{self, Options};

/// Scenarios run one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs scenario `name` in its quick form, or says why it cannot run here.
fn scenario(name: &str) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(why) = hosts::unavailable() {
        panic!("{name}: hosts cannot be made here: {why}");
    }
    let opts = Options {
        quick: true,
        engine: "reference".into(),
    };
    println!("{name} (quick):");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    if let Err(e) = runtime.block_on(scenarios::run(name, &opts)) {
        panic!("{name}: {e:#}");
    }
}

#[test]
#[cfg_attr(
    not(has_netns),
    ignore = "network namespaces need root and iproute2's `ip`"
)]
fn four_hosts_at_20_to_300_ms_walk_as_much_as_on_loopback() {
    scenario("rtt-mix");
}

#[test]
#[cfg_attr(
    not(has_netns),
    ignore = "network namespaces need root and iproute2's `ip`"
)]
fn a_cut_shorter_than_a_lease_loses_nothing() {
    scenario("partition-short");
}

#[test]
#[cfg_attr(
    not(has_netns),
    ignore = "network namespaces need root and iproute2's `ip`"
)]
fn a_cut_of_three_leases_is_handled_exactly() {
    scenario("partition-long");
}

#[test]
#[cfg_attr(
    not(has_netns),
    ignore = "network namespaces need root and iproute2's `ip`"
)]
fn a_silent_link_is_found_and_freed() {
    scenario("blackhole");
}

#[test]
#[cfg_attr(
    not(has_netns),
    ignore = "network namespaces need root and iproute2's `ip`"
)]
fn a_reset_link_reconnects_at_once() {
    scenario("reset");
}

#[test]
#[cfg_attr(
    not(has_netns),
    ignore = "network namespaces need root and iproute2's `ip`"
)]
fn a_sleeping_laptop_wakes_to_an_exact_job() {
    scenario("sleep");
}

#[test]
#[cfg_attr(
    not(all(has_netns, has_postgres)),
    ignore = "needs network namespaces (root, iproute2) and PostgreSQL's server programs (apt-get install postgresql)"
)]
fn a_coordinator_cut_off_leaves_the_fleet_on_the_other() {
    scenario("failover");
}

#[test]
#[cfg_attr(
    not(has_netns),
    ignore = "network namespaces need root and iproute2's `ip`"
)]
fn a_thousand_workers_return_to_a_restarted_coordinator_without_a_stampede() {
    scenario("storm");
}

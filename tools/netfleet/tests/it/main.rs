//! Every scenario of a fleet across the internet, in its quick form, each exact to the
//! digit: hosts in network namespaces (root), links emulated in userspace, the real
//! coordinator and worker programs. One at a time (they measure time and share two
//! cores).
//!
//! Where hosts cannot be made (not root, no `ip netns`), each test says why and passes,
//! unless `E2FLEET_REQUIRE_NETNS` is set (CI sets it); the scenario that needs PostgreSQL
//! does the same with `E2FLEET_REQUIRE_POSTGRES`.

use std::sync::Mutex;

use e2fleet_netfleet::hosts;
use e2fleet_netfleet::scenarios::{self, Options};

/// Scenarios run one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs scenario `name` in its quick form, or says why it cannot run here.
fn scenario(name: &str) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(why) = hosts::unavailable() {
        assert!(
            std::env::var_os("E2FLEET_REQUIRE_NETNS").is_none(),
            "E2FLEET_REQUIRE_NETNS is set, but hosts cannot be made here: {why}"
        );
        eprintln!("skipped: {name}: {why}");
        return;
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
fn four_hosts_at_20_to_300_ms_walk_as_much_as_on_loopback() {
    scenario("rtt-mix");
}

#[test]
fn a_cut_shorter_than_a_lease_loses_nothing() {
    scenario("partition-short");
}

#[test]
fn a_cut_of_three_leases_is_handled_exactly() {
    scenario("partition-long");
}

#[test]
fn a_silent_link_is_found_and_freed() {
    scenario("blackhole");
}

#[test]
fn a_reset_link_reconnects_at_once() {
    scenario("reset");
}

#[test]
fn a_sleeping_laptop_wakes_to_an_exact_job() {
    scenario("sleep");
}

#[test]
fn a_coordinator_cut_off_leaves_the_fleet_on_the_other() {
    if e2fleet_coordinator::store::testing::PostgresServer::start_or_skip("netfleet failover")
        .is_none()
    {
        return;
    }
    scenario("failover");
}

#[test]
fn a_thousand_workers_return_to_a_restarted_coordinator_without_a_stampede() {
    scenario("storm");
}

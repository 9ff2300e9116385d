//! `e2fleet-worker team`: the volunteer puts their account in a team (or takes it out)
//! with the identity a `run` saved, so the stats page counts their credit with the
//! team's. A team is a label: it decides nothing about trust or work.

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Args;

use crate::api::Coordinator;
use crate::connect_args::ConnectArgs;
use crate::run::identity::Identity;

/// `team` flags.
#[derive(Args, Debug)]
pub struct TeamArgs {
    /// The team: 1-64 letters, digits, '.', '_' or '-' (a team is there while an account
    /// is in it: naming a new one founds it).
    #[arg(required_unless_present = "none", conflicts_with = "none")]
    team: Option<String>,
    /// Take the account out of its team.
    #[arg(long)]
    none: bool,
    /// Coordinator URL (as `run` was given it).
    #[arg(long, env = "E2FLEET_COORDINATOR")]
    coordinator: String,
    /// CA certificate (PEM) to trust for an https:// coordinator (default: system roots).
    #[arg(long, env = "E2FLEET_CA_CERT")]
    ca_cert: Option<PathBuf>,
    /// Allow plain http:// to a coordinator on another machine (as `run`).
    #[arg(long, env = "E2FLEET_ALLOW_PLAINTEXT")]
    allow_plaintext: bool,
    /// The data directory of a worker that has joined (its identity speaks for the
    /// account).
    #[arg(long, env = "E2FLEET_DATA_DIR", default_value = "e2fleet-worker-data")]
    data_dir: PathBuf,
}

/// Runs `team`.
pub fn run(args: TeamArgs) -> Result<()> {
    // the identity speaks for the account: no enrolment token here
    let connect = ConnectArgs {
        token: None,
        token_file: None,
        ca_cert: args.ca_cert.clone(),
        allow_plaintext: args.allow_plaintext,
    };
    connect.check_transport(&args.coordinator)?;
    let path = args.data_dir.join("identity.json");
    let Some(identity) = Identity::load(&path, &args.coordinator) else {
        bail!(
            "no identity for {} in {}: start `e2fleet-worker run` with this data directory once, so the worker joins; then name the team",
            args.coordinator,
            args.data_dir.display()
        );
    };
    let team = args.team.unwrap_or_default();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let mut api = Coordinator::lazy(&args.coordinator, args.ca_cert.as_deref())
                .map_err(anyhow::Error::msg)?;
            api.token = identity.worker_token;
            let members = api
                .set_team(&team)
                .await
                .map_err(|s| anyhow::anyhow!("the coordinator refused: {}", s.message()))?;
            if team.is_empty() {
                println!("your account is in no team now");
            } else {
                // the size shows a misspelt name at once (a team of one)
                println!("your account is in team {team}, which has {members} account(s)");
            }
            Ok(())
        })
}

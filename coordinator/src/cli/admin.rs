//! The operator commands: each is one or two typed calls through
//! [`e2fleet_coordinator::client::Operator`], printed by [`super::print`].

use std::time::Duration;

use anyhow::{Context, Result, bail};
use e2fleet_coordinator::client::Operator;
use e2fleet_engine::formats;
use e2fleet_proto::api::{JobId, JobRequest, JobState, ScheduleChange, WorkerId};

use super::args::{
    AccountCommand, AdminArgs, Command, JobAction, JobArgs, SubmitArgs, VerifyCommand,
};
use super::print;
use crate::{out, outln};

pub(super) async fn connect(admin: &AdminArgs) -> Result<Operator> {
    // the admin token must not cross another machine's network in clear (workers refuse
    // the same for theirs)
    if let Some(host) = e2fleet_proto::client::plaintext_remote_host(&admin.coordinator)
        && !admin.allow_plaintext
    {
        bail!(
            "{} is plain http:// to another machine ({host}): the admin token would cross the network unencrypted. \
             Use https:// (serve --tls-self-signed, and --ca-cert here), or add --allow-plaintext on a network you trust",
            admin.coordinator
        );
    }
    Ok(Operator::connect(
        &admin.coordinator,
        admin.ca_cert.as_deref(),
        &admin.admin_token,
    )
    .await?)
}

fn job_id(text: &str) -> Result<JobId> {
    text.parse::<JobId>().map_err(|e| {
        anyhow::anyhow!("{e}: job ids look like 0f8fad5b-d9cb-469f-a165-70867728950e (see `jobs`)")
    })
}

async fn submit(args: SubmitArgs) -> Result<()> {
    let loaded = args.puzzle.load()?;
    for note in &loaded.notes {
        eprintln!("note: {note}");
    }
    let (puzzle, notes) = (loaded.puzzle, loaded.notes);
    let request = JobRequest {
        name: args
            .name
            .clone()
            .unwrap_or_else(|| puzzle.name().to_string()),
        puzzle_json: formats::to_site_json(&puzzle),
        order: args.order.clone(),
        split_depth: args.split_depth,
        target_units: args.units,
        budget: args.budget,
        replicas: args.replicas,
        spot_check: args.spot_check.unwrap_or(0.0),
        priority: args.priority,
        share: args.share,
    };
    let created = connect(&args.admin).await?.submit(&request).await?;
    // (the loader already said what it saw in the file)
    for w in created.warnings.iter().filter(|w| !notes.contains(w)) {
        eprintln!("warning: {w}");
    }
    if args.admin.json {
        outln!(
            "{}",
            serde_json::json!({"job_id": created.job_id, "units": created.units, "split_depth": created.split_depth, "warnings": created.warnings})
        );
    } else {
        outln!(
            "job {} submitted: {} units at depth {}",
            created.job_id,
            created.units,
            created.split_depth
        );
    }
    Ok(())
}

async fn account(action: AccountCommand) -> Result<()> {
    match action {
        AccountCommand::Add { name, team, admin } => {
            let (account, token) = connect(&admin)
                .await?
                .add_account_in(&name, team.as_deref())
                .await?;
            if admin.json {
                outln!(
                    "{}",
                    serde_json::json!({"account": account, "token": token, "team": team})
                );
            } else {
                let team = team.map(|t| format!(" in team {t}")).unwrap_or_default();
                outln!(
                    "account {account} added{team}; its volunteers' workers enrol with this token (shown once, keep it):\n{token}"
                );
            }
        }
        AccountCommand::Team {
            name,
            team,
            none: _,
            admin,
        } => {
            let members = connect(&admin)
                .await?
                .set_account_team(&name, team.as_deref())
                .await?;
            if admin.json {
                outln!(
                    "{}",
                    serde_json::json!({"account": name, "team": team, "members": members})
                );
            } else {
                match team {
                    // the count shows a misspelt name at once (a team of one)
                    Some(t) => {
                        outln!("account {name} is in team {t}, which has {members} account(s)")
                    }
                    None => outln!("account {name} is in no team"),
                }
            }
        }
        AccountCommand::List(admin) => {
            let accounts = connect(&admin).await?.accounts().await?;
            if admin.json {
                outln!("{}", serde_json::to_string(&accounts)?);
            } else {
                for a in &accounts {
                    outln!("{}", print::account(a));
                }
            }
        }
        AccountCommand::Revoke { name, admin } => {
            connect(&admin).await?.revoke_account(&name).await?;
            outln!(
                "account {name} revoked: its workers get no more work, and its results no other account confirmed no longer count"
            );
        }
        AccountCommand::Release { name, admin } => {
            connect(&admin).await?.release_account(&name).await?;
            outln!("account {name} released from quarantine");
        }
    }
    Ok(())
}

/// Runs an operator command.
/// Pauses (`pause`) or resumes a job.
async fn pause(id: &str, admin: &AdminArgs, pause: bool) -> Result<()> {
    let id = job_id(id)?;
    let change = ScheduleChange {
        paused: Some(pause),
        ..ScheduleChange::default()
    };
    connect(admin).await?.set_schedule(id, change).await?;
    if pause {
        outln!("job {id} paused: no new leases (the ones out finish); `resume {id}` goes on");
    } else {
        outln!("job {id} resumed");
    }
    Ok(())
}

async fn export(id: &str, out: &std::path::Path, partial: bool, admin: &AdminArgs) -> Result<()> {
    let id = job_id(id)?;
    let file = connect(admin)
        .await?
        .export_certificate(id, partial)
        .await?;
    let cert = e2fleet_engine::certificate::decode(&file)
        .context("the coordinator sent a certificate that does not read back")?;
    std::fs::write(out, &file).with_context(|| format!("cannot write {}", out.display()))?;
    // what `sha256sum FILE` prints: the figure to publish beside the file (the digest
    // line inside it seals the content, not the gzip around it)
    let file_sha256: String = {
        use sha2::{Digest, Sha256};
        hex::encode(Sha256::digest(&file))
    };
    if admin.json {
        outln!(
            "{}",
            serde_json::json!({
                "file": out.display().to_string(),
                "bytes": file.len(),
                "units": cert.units.len(),
                "complete": cert.job.complete,
                "sha256": file_sha256,
                "content_sha256": cert.digest(),
                "merkle_root": cert.merkle_root,
                "nodes": cert.totals.iter().sum::<u64>(),
                "solutions": cert.solutions_count,
            })
        );
    } else {
        outln!(
            "wrote {} ({} bytes): job {id}, {} units{}\n  nodes {}, solutions {}\n  sha256      {} (the file's, as sha256sum prints it)\n  merkle root {}\nanyone can check it: e2fleet-worker audit {} --sample 100",
            out.display(),
            file.len(),
            cert.units.len(),
            if cert.job.complete {
                ""
            } else {
                " (partial: the job is not complete)"
            },
            cert.totals.iter().sum::<u64>(),
            cert.solutions_count,
            file_sha256,
            cert.merkle_root,
            out.display()
        );
    }
    Ok(())
}

pub async fn run(command: Command) -> Result<()> {
    match command {
        Command::Serve(_)
        | Command::MigrateStore { .. }
        | Command::ReleaseKey { .. }
        | Command::Release { .. } => {
            unreachable!("serve and migrate-store are not operator commands")
        }
        Command::Submit(args) => submit(args).await,
        Command::Study(args) => super::study::study(args).await,
        Command::Studies(admin) => super::study::list(connect(&admin).await?, admin.json).await,
        Command::StudyCancel { id, admin } => {
            super::study::cancel(&id, connect(&admin).await?).await
        }
        Command::StudyStatus { id, wait, admin } => {
            super::study::status(&id, wait, connect(&admin).await?, admin.json).await
        }
        Command::Jobs(admin) => {
            for j in connect(&admin).await?.jobs().await? {
                print::job(&j, admin.json);
            }
            Ok(())
        }
        Command::Job(JobArgs {
            action:
                Some(JobAction::Set {
                    id,
                    priority,
                    share,
                    admin,
                }),
            ..
        }) => set_schedule(&id, priority, share, &admin).await,
        Command::Job(JobArgs {
            id, watch, admin, ..
        }) => {
            let admin = admin.expect("clap requires the admin flags without a subcommand");
            job(&id.unwrap_or_default(), watch, &admin).await
        }
        Command::Export {
            id,
            out,
            partial,
            admin,
        } => export(&id, &out, partial, &admin).await,
        Command::Workers(admin) => {
            let workers = connect(&admin).await?.workers().await?;
            if admin.json {
                outln!("{}", serde_json::to_string(&workers)?);
            } else {
                for w in &workers {
                    outln!("{}", print::worker(w));
                }
            }
            Ok(())
        }
        Command::Fleet(admin) => {
            let fleet = connect(&admin).await?.fleet().await?;
            if admin.json {
                outln!("{}", serde_json::to_string(&fleet)?);
            } else {
                out!("{}", print::fleet(&fleet));
            }
            Ok(())
        }
        Command::Pause { id, admin } => pause(&id, &admin, true).await,
        Command::Resume { id, admin } => pause(&id, &admin, false).await,
        Command::Cancel { id, admin } => {
            let id = job_id(&id)?;
            connect(&admin).await?.cancel(id).await?;
            outln!("job {id} cancelled");
            Ok(())
        }
        Command::ReleaseHost { hostname, admin } => {
            let released = connect(&admin).await?.release_host(&hostname).await?;
            if released == 0 {
                bail!("no quarantined worker has host name {hostname:?} (see `workers`)");
            }
            outln!("released {released} worker(s) on {hostname}");
            Ok(())
        }
        Command::ReleaseWorker { id, admin } => {
            let worker: WorkerId = id
                .parse()
                .map_err(|e| anyhow::anyhow!("{e}: worker ids are listed by `workers`"))?;
            connect(&admin).await?.release_worker(worker).await?;
            outln!("worker {worker} released");
            Ok(())
        }
        Command::Account { action } => account(action).await,
        Command::Verify { action } => verify(action).await,
    }
}

/// `job set ID --priority P --share S`.
async fn set_schedule(
    id: &str,
    priority: Option<i32>,
    share: Option<f64>,
    admin: &AdminArgs,
) -> Result<()> {
    let id = job_id(id)?;
    if priority.is_none() && share.is_none() {
        bail!("give --priority, --share or both (`pause` and `resume` pause a job)");
    }
    let change = ScheduleChange {
        priority,
        share,
        paused: None,
    };
    let mut c = connect(admin).await?;
    c.set_schedule(id, change).await?;
    let job = c.job(id).await?;
    outln!(
        "job {id}: priority {}, share {}{}",
        job.priority,
        job.share,
        if job.paused { ", paused" } else { "" }
    );
    Ok(())
}

/// `job ID [--watch]`: the job's status, or its progress until it is no longer running.
async fn job(id: &str, watch: bool, admin: &AdminArgs) -> Result<()> {
    let id = job_id(id)?;
    let mut c = connect(admin).await?;
    let started = std::time::Instant::now();
    loop {
        let job = c.job(id).await?;
        if !watch || job.state != JobState::Running {
            if watch {
                eprintln!();
            }
            print::job(&job, admin.json);
            return Ok(());
        }
        eprint!("\r{}   ", print::progress(&job, started.elapsed()));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// `verify unflag | submit | matrix`.
async fn verify(action: VerifyCommand) -> Result<()> {
    match action {
        VerifyCommand::Unflag { class, admin } => {
            connect(&admin).await?.unflag_class(&class).await?;
            outln!("hardware class {class} unflagged: its disagreements so far no longer count");
            Ok(())
        }
        VerifyCommand::Submit { file, name, admin } => {
            let suite_json = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            let name = name.unwrap_or_else(|| {
                file.file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default()
            });
            let (units, with_expected) = connect(&admin)
                .await?
                .submit_suite(&name, &suite_json)
                .await?;
            if admin.json {
                outln!(
                    "{}",
                    serde_json::json!({"suite": name, "units": units, "with_expected": with_expected})
                );
            } else {
                outln!(
                    "suite {name}: {units} units, {with_expected} with expected results (the rest are fixed when two hardware classes agree)"
                );
            }
            Ok(())
        }
        VerifyCommand::Matrix { suite, admin } => {
            let matrix = connect(&admin).await?.matrix(&suite).await?;
            if admin.json {
                outln!("{}", serde_json::to_string(&matrix)?);
            } else {
                out!("{}", print::matrix(&matrix));
            }
            Ok(())
        }
    }
}

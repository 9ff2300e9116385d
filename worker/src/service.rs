//! `e2fleet-worker service install | uninstall`: the worker as a systemd *user* service,
//! for a volunteer without root (the package installs a system service instead).
//!
//! `install` writes, for the user who runs it:
//! - `~/.config/e2fleet/worker.env`: the coordinator's URL, where the token is, updates on
//!   (kept if it exists: the user's edits win);
//! - `~/.config/e2fleet/worker.token` (0600): the enrolment token, from `--token-file`,
//!   or empty until the user fills it (the service is skipped until then);
//! - `~/.config/systemd/user/e2fleet-worker.service`: this binary's `run`, its data in
//!   `~/.local/share/e2fleet-worker`, its engines in `~/.cache/e2fleet-worker`, at the
//!   lowest priority, restarted on failure;
//!
//! then enables and starts it with `systemctl --user` (unless `--no-start`). A user
//! service runs while its user is logged in; `loginctl enable-linger` keeps it running
//! after logout.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};

/// `service` subcommands.
#[derive(Subcommand, Debug)]
pub enum ServiceCommand {
    /// Install (or update) the worker as a systemd user service of the current user, and
    /// start it.
    Install(InstallArgs),
    /// Stop and remove the user service (its data directory, identity and journal stay).
    Uninstall,
}

/// Flags of `service install`.
#[derive(Args, Debug)]
pub struct InstallArgs {
    /// The coordinator's URL (written to worker.env when it is created).
    #[arg(long, env = "E2FLEET_COORDINATOR")]
    coordinator: Option<String>,
    /// Copy the enrolment token from this file (its first line) into the service's
    /// private token file.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Write the files only: do not call systemctl.
    #[arg(long)]
    no_start: bool,
}

/// Where the user service's files go.
#[derive(Debug)]
pub struct Paths {
    /// `~/.config/e2fleet`
    pub config: PathBuf,
    /// `~/.config/systemd/user/e2fleet-worker.service`
    pub unit: PathBuf,
}

impl Paths {
    /// For the user whose home is `$HOME` (or `$XDG_CONFIG_HOME`).
    pub fn of_this_user() -> Result<Paths> {
        let config_home = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
            Some(dir) => PathBuf::from(dir),
            None => {
                PathBuf::from(std::env::var_os("HOME").context("HOME is not set")?).join(".config")
            }
        };
        Ok(Paths {
            config: config_home.join("e2fleet"),
            unit: config_home.join("systemd/user/e2fleet-worker.service"),
        })
    }
}

/// The unit for `binary`.
pub fn unit_text(binary: &Path, config: &Path) -> String {
    format!(
        "# e2fleet worker as a user service, written by `e2fleet-worker service install`.
[Unit]
Description=e2fleet worker (searches leased units on spare CPU)
After=network-online.target
ConditionFileNotEmpty={config}/worker.token

[Service]
Type=exec
EnvironmentFile={config}/worker.env
ExecStart={binary} run --data-dir %h/.local/share/e2fleet-worker --cache-dir %h/.cache/e2fleet-worker --nice 0 --log-format json
Nice=19
CPUSchedulingPolicy=batch
IOSchedulingClass=idle
# SIGTERM to the worker only: running units report their exact cursors
KillSignal=SIGTERM
KillMode=mixed
TimeoutStopSec=60s
Restart=on-failure
RestartSec=30s

[Install]
WantedBy=default.target
",
        config = config.display(),
        binary = binary.display(),
    )
}

fn env_text(coordinator: &str, config: &Path) -> String {
    format!(
        "# e2fleet worker (user service): where its fleet is. The token is in worker.token.
E2FLEET_COORDINATOR={coordinator}
E2FLEET_ENROLL_TOKEN_FILE={config}/worker.token
# signed updates from the fleet (docs/volunteer-guide.md, \"Updates\")
E2FLEET_UPDATES=on
# keep out of your way: e.g. walk half the time, pause while a game or a call runs
#E2FLEET_CPU_PERCENT=50
#E2FLEET_PAUSE_WHILE=steam,zoom
",
        config = config.display()
    )
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    crate::files::save_private(path, bytes)
        .with_context(|| format!("cannot write {}", path.display()))
}

fn systemctl(args: &[&str]) -> Result<()> {
    let status = Command::new("systemctl")
        .arg("--user")
        .args(args)
        .status()
        .context("cannot run systemctl (is systemd this system's init?)")?;
    if !status.success() {
        bail!("systemctl --user {} failed", args.join(" "));
    }
    Ok(())
}

/// Runs `service ...`.
pub fn run(command: ServiceCommand) -> Result<()> {
    let paths = Paths::of_this_user()?;
    match command {
        ServiceCommand::Install(args) => install(&paths, &args),
        ServiceCommand::Uninstall => {
            let _ = systemctl(&["disable", "--now", "e2fleet-worker.service"]);
            match std::fs::remove_file(&paths.unit) {
                Ok(()) => println!("removed {}", paths.unit.display()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    println!("no user service installed")
                }
                Err(e) => return Err(e).context(format!("cannot remove {}", paths.unit.display())),
            }
            let _ = systemctl(&["daemon-reload"]);
            Ok(())
        }
    }
}

fn install(paths: &Paths, args: &InstallArgs) -> Result<()> {
    let binary = std::env::current_exe()
        .context("cannot tell where this binary is")?
        .canonicalize()?;
    let mut private = std::fs::DirBuilder::new();
    private.recursive(true);
    std::os::unix::fs::DirBuilderExt::mode(&mut private, 0o700);
    private.create(&paths.config)?;
    std::fs::create_dir_all(paths.unit.parent().context("the unit has a folder")?)?;
    let env = paths.config.join("worker.env");
    if !env.exists() {
        let coordinator = args
            .coordinator
            .as_deref()
            .unwrap_or("https://coordinator.example.org:7733");
        write_private(&env, env_text(coordinator, &paths.config).as_bytes())?;
    }
    let token = paths.config.join("worker.token");
    match &args.token_file {
        Some(from) => {
            let text = std::fs::read_to_string(from)
                .with_context(|| format!("cannot read {}", from.display()))?;
            let line = text.lines().next().unwrap_or("").trim();
            if line.is_empty() {
                bail!("{} is empty", from.display());
            }
            write_private(&token, format!("{line}\n").as_bytes())?;
        }
        None if !token.exists() => write_private(&token, b"")?,
        None => {}
    }
    std::fs::write(&paths.unit, unit_text(&binary, &paths.config))
        .with_context(|| format!("cannot write {}", paths.unit.display()))?;
    println!("wrote {}", paths.unit.display());
    println!("settings: {} (token: {})", env.display(), token.display());
    let token_missing = std::fs::metadata(&token)
        .map(|m| m.len() == 0)
        .unwrap_or(true);
    if token_missing {
        println!(
            "put your enrolment token in {} (the service waits for it)",
            token.display()
        );
    }
    if args.no_start {
        println!(
            "start it with: systemctl --user daemon-reload && systemctl --user enable --now e2fleet-worker"
        );
        return Ok(());
    }
    systemctl(&["daemon-reload"])?;
    systemctl(&["enable", "--now", "e2fleet-worker.service"])?;
    println!(
        "started: `e2fleet-worker status --data-dir ~/.local/share/e2fleet-worker` shows it; `loginctl enable-linger` keeps it running after you log out"
    );
    Ok(())
}

//! The command line: every command and flag (clap derive).

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use e2fleet_coordinator::store::Database;
use e2fleet_engine::formats::PuzzleArgs;
use e2fleet_proto::logs::LogFormat;

/// e2fleet coordinator: splits puzzles into units, leases them, adds results up exactly.
#[derive(Parser)]
#[command(version)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Subcommand)]
pub enum Command {
    /// Run the coordinator (gRPC and the HTTP API on one port).
    Serve(ServeArgs),
    /// Move a stopped fleet's whole state from its SQLite file to an empty PostgreSQL
    /// database (one way; then serve with `--db postgres://...`).
    MigrateStore {
        /// The SQLite file the coordinator served from (stop it first).
        #[arg(long)]
        from: PathBuf,
        /// The PostgreSQL database: `postgres://user:password@host:5432/database`.
        #[arg(long)]
        to: String,
    },
    /// The fleet's release key, which signs the worker releases it offers.
    ReleaseKey {
        #[command(subcommand)]
        action: ReleaseKeyCommand,
    },
    /// Signed worker releases: publish a worker binary for the fleet's workers to update
    /// to, or show what is offered.
    Release {
        #[command(subcommand)]
        action: ReleaseCommand,
    },
    /// Submit a puzzle as a job.
    Submit(SubmitArgs),
    /// Compare fill orders before a long search: the fleet estimates each order's tree
    /// with probe units and ranks them (`--wait` prints the ranking when it is settled;
    /// `submit --order study:ID` then takes the winner).
    Study(StudyArgs),
    /// List order studies.
    Studies(AdminArgs),
    /// Stop a running study (its remaining probes are cancelled; what ran is kept).
    StudyCancel {
        /// The study id.
        id: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Show one study's ranking.
    StudyStatus {
        /// The study id.
        id: String,
        /// Wait until the study has ended (converged or run every probe).
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// List jobs.
    Jobs(AdminArgs),
    /// Show one job (`job ID`), or change how it shares the fleet (`job set ID ...`).
    Job(JobArgs),
    /// Write a job's certificate: every unit with its exact counts and a Merkle root, a
    /// file anyone can check with `e2fleet-worker audit FILE`.
    Export {
        /// The job id.
        id: String,
        /// Where to write it (conventionally NAME.e2cert).
        #[arg(long)]
        out: PathBuf,
        /// Also a job that is not complete: its open units are listed without results
        /// and its totals are exact for the part walked so far.
        #[arg(long)]
        partial: bool,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// List workers.
    Workers(AdminArgs),
    /// Fleet summary: workers and both rates.
    Fleet(AdminArgs),
    /// Pause a job: no new leases (the ones out finish); `resume` goes on.
    Pause {
        /// The job id.
        id: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Resume a paused job.
    Resume {
        /// The job id.
        id: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Cancel a job.
    Cancel {
        /// The job id.
        id: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Lift the quarantine of the workers with this host label (an operator's
    /// convenience: host names are what workers say, so prefer `release-worker`).
    ReleaseHost {
        /// Host name.
        hostname: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Lift one worker identity's quarantine.
    ReleaseWorker {
        /// The worker id (see `workers`).
        id: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Volunteer accounts: each has its own enrolment token, trust and credit.
    Account {
        #[command(subcommand)]
        action: AccountCommand,
    },
    /// Verification suites and the conformance matrix of hardware classes.
    Verify {
        #[command(subcommand)]
        action: VerifyCommand,
    },
}

/// `account` subcommands.
#[derive(Subcommand)]
pub enum AccountCommand {
    /// Issue a volunteer account and print its enrolment token (shown once).
    Add {
        /// Its name: 1-64 letters, digits, '.', '_' or '-'.
        name: String,
        /// Its team (the same rule): the stats page adds a team's credit up.
        #[arg(long)]
        team: Option<String>,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Every account with its trust, credit, team and workers.
    List(AdminArgs),
    /// Put a volunteer account in a team (a team is there while an account is in it),
    /// or with --none take it out of its team. Its credit goes with it.
    Team {
        /// The account.
        name: String,
        /// The team: 1-64 letters, digits, '.', '_' or '-'.
        #[arg(required_unless_present = "none", conflicts_with = "none")]
        team: Option<String>,
        /// Take the account out of its team.
        #[arg(long)]
        none: bool,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Revoke an account: its workers get no work, its unconfirmed results stop counting.
    Revoke {
        /// The account.
        name: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Lift an account's quarantine.
    Release {
        /// The account.
        name: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
}

/// `verify` subcommands.
#[derive(Subcommand)]
pub enum VerifyCommand {
    /// Store (or replace) a suite: a JSON array of units {name, puzzle, order,
    /// prefix_depth, prefix_index, budget, speed, expected?}. Units without an expected
    /// result get one when two hardware classes agree.
    Submit {
        /// The suite file.
        file: std::path::PathBuf,
        /// Suite name (default: the file name without extension).
        #[arg(long)]
        name: Option<String>,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Lift a hardware class's flag (after its build was fixed): its disagreements so far
    /// stop counting.
    Unflag {
        /// The class id (see `verify matrix`).
        class: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Hardware classes x suite units: agrees / DISAGREES / pending / not run, with
    /// per-core rates, and the speed table.
    Matrix {
        /// Suite name.
        #[arg(long, default_value = "default")]
        suite: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
}

/// `release-key` subcommands.
#[derive(Subcommand)]
pub enum ReleaseKeyCommand {
    /// Make a new key pair: `release.key` (secret, 0600; keep it off shared machines) and
    /// `release.pub` (what workers trust) in a new folder.
    Generate {
        /// The folder to write them into.
        #[arg(long, default_value = "release-key")]
        dir: PathBuf,
    },
}

/// `release` subcommands.
#[derive(Subcommand)]
pub enum ReleaseCommand {
    /// Sign a worker binary and offer it to the fleet's workers of its platform: its
    /// version is read from the binary itself; workers with updates on switch to it if it
    /// is newer than theirs.
    Publish {
        /// The e2fleet-worker binary.
        binary: PathBuf,
        /// The secret key (`release-key generate`, or `minisign -G` with its password in
        /// E2FLEET_RELEASE_KEY_PASSWORD).
        #[arg(long)]
        key: PathBuf,
        /// The releases folder the coordinator serves (its `serve --releases`).
        #[arg(long, env = "E2FLEET_RELEASES", default_value = "releases")]
        releases: PathBuf,
        /// The platform the binary is for, ARCH-OS (default: this machine's).
        #[arg(long)]
        platform: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Sign any file with the release key (FILE.minisig beside it; `minisign -Vm FILE -P
    /// KEY` checks it): e.g. the worker tarball for systems without packages.
    Sign {
        /// The file.
        file: PathBuf,
        /// The secret key.
        #[arg(long)]
        key: PathBuf,
    },
    /// The release offered to each platform.
    Show {
        /// The releases folder.
        #[arg(long, env = "E2FLEET_RELEASES", default_value = "releases")]
        releases: PathBuf,
    },
}

/// Flags of `serve`.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "E2FLEET_LISTEN", default_value = "127.0.0.1:7733")]
    pub listen: String,
    /// The signed worker releases to offer and serve under /downloads/ (see `release
    /// publish`); a folder that does not exist offers none.
    #[arg(long, env = "E2FLEET_RELEASES", default_value = "releases")]
    pub releases: PathBuf,
    /// The database: a SQLite file (a path, the default), or PostgreSQL
    /// (`postgres://user:password@host:5432/database`: several coordinators may share it).
    #[arg(
        long,
        env = "E2FLEET_DB",
        default_value = "e2fleet.db",
        hide_env_values = true
    )]
    pub db: Database,
    /// Token workers enrol with (generated and printed if not given).
    #[arg(long, env = "E2FLEET_ENROLL_TOKEN", hide_env_values = true)]
    pub enroll_token: Option<String>,
    /// Token operator calls need (generated and printed if not given).
    #[arg(long, env = "E2FLEET_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Lease length in seconds.
    #[arg(long, env = "E2FLEET_LEASE_SECONDS", default_value_t = 60)]
    pub lease_seconds: u64,
    /// Wrong results after which a worker identity is quarantined.
    #[arg(long, env = "E2FLEET_QUARANTINE_AFTER", default_value_t = 3)]
    pub quarantine_after: u64,
    /// Consecutive results another account confirmed before a volunteer account's results
    /// count alone.
    #[arg(long, env = "E2FLEET_TRUST_AFTER", default_value_t = 10)]
    pub trust_after: u64,
    /// Fraction of a trusted volunteer account's results still run by another account.
    #[arg(long, env = "E2FLEET_TRUSTED_RECHECK", default_value_t = 0.05)]
    pub trusted_recheck: f64,
    /// Wrong results of a volunteer account's workers before the account is quarantined.
    #[arg(long, env = "E2FLEET_ACCOUNT_QUARANTINE_AFTER", default_value_t = 5)]
    pub account_quarantine_after: u64,
    /// Worker identities one volunteer account may have seen in a day (its machines; a
    /// worker keeps its identity in its data directory).
    #[arg(long, env = "E2FLEET_ACCOUNT_IDENTITIES", default_value_t = e2fleet_coordinator::fleet::policy::ACCOUNT_IDENTITIES_PER_DAY)]
    pub account_identities: u64,
    /// Leases one volunteer account may hold at once over all its identities.
    #[arg(long, env = "E2FLEET_ACCOUNT_LEASES", default_value_t = e2fleet_coordinator::fleet::policy::ACCOUNT_LEASES)]
    pub account_leases: u64,
    /// Do not re-run the unconfirmed past results of a party that loses a cross-check
    /// (cheaper; a forged or broken result that was never drawn for a recheck then stays).
    #[arg(long, env = "E2FLEET_NO_HISTORY_RECHECK")]
    pub no_history_recheck: bool,
    /// The detail window, in seconds: a unit decided longer ago moves to the archive (one
    /// compact row: digest, counts, stop, who and when; restored if a recheck reaches it),
    /// and its result, lease and unit rows go. The dashboard's recent rates and history
    /// read the window. 0 keeps every row whole.
    #[arg(long, env = "E2FLEET_ARCHIVE_AFTER_S", default_value_t = 3600)]
    pub archive_after_s: u64,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Serve TLS with this certificate chain (PEM); needs --tls-key.
    #[arg(
        long,
        env = "E2FLEET_TLS_CERT",
        requires = "tls_key",
        conflicts_with = "tls_self_signed"
    )]
    pub tls_cert: Option<PathBuf>,
    /// Serve TLS with the fleet's own CA, made once in --tls-dir: prints the CA file every
    /// worker and admin command then passes as --ca-cert.
    #[arg(long, env = "E2FLEET_TLS_SELF_SIGNED")]
    pub tls_self_signed: bool,
    /// Names the coordinator is reached by, for --tls-self-signed: host names and IP
    /// addresses, comma-separated (default: this machine's host name, localhost, 127.0.0.1).
    #[arg(
        long,
        env = "E2FLEET_TLS_NAME",
        value_delimiter = ',',
        requires = "tls_self_signed"
    )]
    pub tls_name: Vec<String>,
    /// Where --tls-self-signed keeps its files (default: `tls/` next to the database).
    #[arg(long, env = "E2FLEET_TLS_DIR", requires = "tls_self_signed")]
    pub tls_dir: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, env = "E2FLEET_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

/// Flags every operator command takes.
#[derive(clap::Args, Clone)]
pub struct AdminArgs {
    /// Coordinator URL.
    #[arg(
        long,
        env = "E2FLEET_COORDINATOR",
        default_value = "http://127.0.0.1:7733"
    )]
    pub coordinator: String,
    /// Admin token.
    #[arg(long, env = "E2FLEET_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: String,
    /// CA certificate (PEM) to trust for an https:// coordinator (default: system roots).
    #[arg(long, env = "E2FLEET_CA_CERT")]
    pub ca_cert: Option<PathBuf>,
    /// Allow plain http:// to a coordinator on another machine (only on a network you
    /// trust: the admin token crosses it unencrypted).
    #[arg(long, env = "E2FLEET_ALLOW_PLAINTEXT")]
    pub allow_plaintext: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `job ID [--watch]` or `job set ID [--priority P] [--share S]`.
#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct JobArgs {
    /// What to change instead of showing the job.
    #[command(subcommand)]
    pub action: Option<JobAction>,
    /// The job id.
    #[arg(required = true)]
    pub id: Option<String>,
    /// Keep showing live progress until the job ends.
    #[arg(long)]
    pub watch: bool,
    /// (`None` only with a subcommand, which has its own)
    #[command(flatten)]
    pub admin: Option<AdminArgs>,
}

/// Changes to a job.
#[derive(Subcommand)]
pub enum JobAction {
    /// Set how a job shares the fleet with other running jobs: jobs of a higher priority
    /// get units first; among equal priorities each gets engines in proportion to its
    /// share (`pause` and `resume` stop and restart its leases).
    Set {
        /// The job id.
        id: String,
        /// Jobs of a higher priority get units first (default 0).
        #[arg(long, allow_hyphen_values = true)]
        priority: Option<i32>,
        /// Share of the fleet among jobs of equal priority (default 1).
        #[arg(long)]
        share: Option<f64>,
        #[command(flatten)]
        admin: AdminArgs,
    },
}

/// Flags of `submit`.
#[derive(clap::Args)]
pub struct SubmitArgs {
    /// The puzzle and how to read it.
    #[command(flatten)]
    pub puzzle: PuzzleArgs,
    /// Job name (default: the puzzle's name).
    #[arg(long)]
    pub name: Option<String>,
    /// Fill order: row-major (the default), rows:tl|tr|bl|br, cols:..., spiral:...,
    /// around:CELL, comb:K, cells:..., or study:ID (the order that study ranked best).
    #[arg(long)]
    pub order: Option<String>,
    /// Split depth.
    #[arg(long, conflicts_with = "units")]
    pub split_depth: Option<usize>,
    /// Target number of units (the coordinator picks the depth). Default: with a budget,
    /// 1000; without, units of about a minute of one core by the tree estimate.
    #[arg(long)]
    pub units: Option<usize>,
    /// Node budget per run (budget stops become continuation units).
    #[arg(long)]
    pub budget: Option<u64>,
    /// Run every unit on this many different hosts.
    #[arg(long, default_value_t = 1, conflicts_with = "spot_check")]
    pub replicas: u32,
    /// Run this fraction of units twice.
    #[arg(long)]
    pub spot_check: Option<f64>,
    /// Jobs of a higher priority get units first (see `job set`).
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    pub priority: i32,
    /// Share of the fleet's engines among running jobs of equal priority.
    #[arg(long, default_value_t = 1.0)]
    pub share: f64,
    #[command(flatten)]
    pub admin: AdminArgs,
}

/// Flags of `study`.
#[derive(clap::Args)]
pub struct StudyArgs {
    /// The puzzle and how to read it.
    #[command(flatten)]
    pub puzzle: PuzzleArgs,
    /// Study name (default: the puzzle's name).
    #[arg(long)]
    pub name: Option<String>,
    /// A fill order to compare (repeat it): row-major, rows:tl|tr|bl|br, cols:...,
    /// spiral:tl|tr|bl|br, around:CELL, comb:K, cells:...
    #[arg(long = "order")]
    pub orders: Vec<String>,
    /// Add the eight scanline orientations (rows and columns from each corner).
    #[arg(long)]
    pub all_scanlines: bool,
    /// Add every built-in candidate: the scanlines, the four spirals, comb orders and
    /// outwards from each hint.
    #[arg(long)]
    pub candidates: bool,
    /// Also search for a better order by this many local moves from the best candidate
    /// (scored on this machine by the tree estimate) and study what it finds.
    #[arg(long, value_name = "MOVES")]
    pub improve: Option<usize>,
    /// Boards in each probe's population (default 4096).
    #[arg(long)]
    pub particles: Option<u32>,
    /// Probes per stratum at most (default 16; the study stops sooner once settled).
    #[arg(long)]
    pub rounds: Option<u32>,
    /// Run every probe on this many different hosts.
    #[arg(long, default_value_t = 1, conflicts_with = "spot_check")]
    pub replicas: u32,
    /// Run this fraction of probes twice.
    #[arg(long)]
    pub spot_check: Option<f64>,
    /// Priority among jobs (a study's probes are jobs).
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    pub priority: i32,
    /// Wait until the study has ended and print its ranking.
    #[arg(long)]
    pub wait: bool,
    #[command(flatten)]
    pub admin: AdminArgs,
}

//! Running the test suites against either store.
//!
//! A suite names its databases by path, as for SQLite; [`database_for`] turns a path into
//! the database to use:
//! - by default, the SQLite file at that path;
//! - with [`SERVER_ENV`] set to a PostgreSQL server's address (a user that may create
//!   databases, e.g. `postgres://postgres@127.0.0.1:5432/postgres`), a database of its
//!   own on that server, named after the path (the same path reaches the same database
//!   again, as a coordinator restarted on the same file does) and after the machine and
//!   the test process. A suite's databases are left on the server when it ends (a test
//!   may be read afterwards); the first database a later run makes drops those of test
//!   processes of the same machine that are no longer running, so a developer's own
//!   server does not fill up run after run (it once held 2,155 of them, 19 GB, and its
//!   statistics made every statement slower).
//!
//! [`PostgresServer`] starts a throwaway server for a test (`initdb` and `postgres` from
//! the PATH or Debian's `/usr/lib/postgresql/*/bin`, run as the `postgres` user when the
//! tests run as root, in a temporary folder, on a free local port; stopped when dropped).
//! Tests that need it are marked ignored, with the install command, where the server
//! programs are missing (`cfg(has_postgres)`, `tools/build/optional_tools.rs`; CI sets
//! `E2FLEET_REQUIRE_POSTGRES` and a missing server is a build error there).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use sqlx::{Connection, Executor, PgConnection};

use super::Database;

/// The PostgreSQL server the suites run against instead of SQLite.
pub const SERVER_ENV: &str = "E2FLEET_TEST_POSTGRES";

/// The database a test's `path` stands for (see the module docs).
pub async fn database_for(path: &Path) -> Database {
    match std::env::var(SERVER_ENV) {
        Ok(server) if !server.is_empty() => {
            static SWEPT: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
            SWEPT.get_or_init(|| sweep(&server)).await;
            Database::Postgres(
                create_database(&server, &name_for(path))
                    .await
                    .unwrap_or_else(|e| panic!("cannot create a test database on {server}: {e}")),
            )
        }
        _ => Database::Sqlite(path.to_path_buf()),
    }
}

/// The prefix of the test databases: `e2fleet_t_`.
const PREFIX: &str = "e2fleet_t_";

/// A database name for a path: [`PREFIX`], this machine's mark, this process's id and a
/// hash of the path.
fn name_for(path: &Path) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(path.to_string_lossy().as_bytes());
    let hex: String = digest[..10].iter().map(|b| format!("{b:02x}")).collect();
    format!("{PREFIX}{}_{}_{hex}", machine(), std::process::id())
}

/// A short mark of this machine (from `/etc/machine-id`, else the host name): a test
/// process's id means something only on the machine it runs on.
fn machine() -> String {
    use sha2::Digest;
    let id = std::fs::read_to_string("/etc/machine-id")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .unwrap_or_default();
    let digest = sha2::Sha256::digest(id.trim().as_bytes());
    digest[..4].iter().map(|b| format!("{b:02x}")).collect()
}

/// The process that made test database `name`, when it is this machine's.
fn maker(name: &str, machine: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?.strip_prefix(machine)?;
    let (pid, _hex) = rest.strip_prefix('_')?.split_once('_')?;
    pid.parse().ok()
}

/// Drops the test databases on `server` that test processes of this machine made and
/// that are no longer running (best effort: a failure leaves them for the next run).
async fn sweep(server: &str) {
    let Ok(mut c) = PgConnection::connect(server).await else {
        return;
    };
    let names: Vec<String> =
        sqlx::query_scalar("SELECT datname FROM pg_database WHERE starts_with(datname, $1)")
            .bind(PREFIX)
            .fetch_all(&mut c)
            .await
            .unwrap_or_default();
    let _ = c.close().await;
    let (machine, me) = (machine(), std::process::id());
    for name in names {
        let Some(pid) = maker(&name, &machine) else {
            continue;
        };
        if pid == me || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        if let Err(e) = drop_database(server, &name).await {
            eprintln!("cannot drop the old test database {name}: {e}");
        }
    }
}

/// Creates database `name` on `server` if it does not exist; its address.
pub async fn create_database(server: &str, name: &str) -> Result<String, String> {
    let mut url = url::Url::parse(server).map_err(|e| e.to_string())?;
    let mut c = PgConnection::connect(server)
        .await
        .map_err(|e| e.to_string())?;
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(name)
            .fetch_one(&mut c)
            .await
            .map_err(|e| e.to_string())?;
    if !exists {
        match c.execute(format!("CREATE DATABASE {name}").as_str()).await {
            Ok(_) => {}
            // created meanwhile by another test on the same path
            Err(e) if e.to_string().contains("already exists") => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    let _ = c.close().await;
    url.set_path(&format!("/{name}"));
    Ok(url.to_string())
}

/// Drops database `name` of `server`, closing whatever connections it still has.
pub async fn drop_database(server: &str, name: &str) -> Result<(), String> {
    let mut c = PgConnection::connect(server)
        .await
        .map_err(|e| e.to_string())?;
    c.execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
        .await
        .map_err(|e| e.to_string())?;
    let _ = c.close().await;
    Ok(())
}

/// One integer from a query on `db` (tests that look at what is stored: counts of rows).
pub async fn scalar(db: &Database, sql: &str) -> i64 {
    match db {
        Database::Sqlite(path) => {
            let (path, sql) = (path.clone(), sql.to_string());
            tokio::task::spawn_blocking(move || {
                let c = rusqlite::Connection::open(path).expect("open the database");
                c.query_row(&sql, [], |r| r.get::<_, i64>(0))
                    .expect("the query")
            })
            .await
            .expect("the query ran")
        }
        Database::Postgres(url) => {
            let mut c = PgConnection::connect(url).await.expect("connect");
            let n: i64 = sqlx::query_scalar(sql)
                .fetch_one(&mut c)
                .await
                .expect("the query");
            let _ = c.close().await;
            n
        }
    }
}

/// The first column of every row of a query on `db`, as text (tests that compare what
/// two databases hold: the query builds each row's text with `||` and `CAST`).
pub async fn texts(db: &Database, sql: &str) -> Vec<String> {
    match db {
        Database::Sqlite(path) => {
            let (path, sql) = (path.clone(), sql.to_string());
            tokio::task::spawn_blocking(move || {
                let c = rusqlite::Connection::open(path).expect("open the database");
                let mut q = c.prepare(&sql).expect("the query");
                q.query_map([], |r| r.get::<_, String>(0))
                    .expect("the query")
                    .collect::<Result<Vec<_>, _>>()
                    .expect("the rows")
            })
            .await
            .expect("the query ran")
        }
        Database::Postgres(url) => {
            let mut c = PgConnection::connect(url).await.expect("connect");
            let rows: Vec<String> = sqlx::query_scalar(sql)
                .fetch_all(&mut c)
                .await
                .expect("the query");
            let _ = c.close().await;
            rows
        }
    }
}

/// A throwaway PostgreSQL server (see the module docs).
pub struct PostgresServer {
    data: tempfile::TempDir,
    bin: PathBuf,
    as_postgres: bool,
    url: String,
}

impl PostgresServer {
    /// Starts one, or says why it cannot.
    pub fn start() -> Result<PostgresServer, String> {
        PostgresServer::start_with(None)
    }

    /// Starts one that also offers TLS with this certificate (chain) and key, both PEM.
    pub fn start_with_tls(cert_pem: &str, key_pem: &str) -> Result<PostgresServer, String> {
        PostgresServer::start_with(Some((cert_pem, key_pem)))
    }

    fn start_with(tls: Option<(&str, &str)>) -> Result<PostgresServer, String> {
        let bin = binaries().ok_or(
            "no PostgreSQL server binaries (initdb, pg_ctl) found: apt-get install postgresql",
        )?;
        let root = is_root();
        let data = tempfile::Builder::new()
            .prefix("e2fleet-pg-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        if root {
            run(Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(data.path()))?;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        let server = PostgresServer {
            url: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
            data,
            bin,
            as_postgres: root,
        };
        let dir = server.data.path().join("data");
        server.pg(
            "initdb",
            &[
                "-D".as_ref(),
                dir.as_os_str(),
                "-U".as_ref(),
                "postgres".as_ref(),
                "--auth=trust".as_ref(),
                "--no-sync".as_ref(),
            ],
        )?;
        let mut options = format!(
            "-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} \
             -c max_connections=400 -c fsync=off -c synchronous_commit=off -c full_page_writes=off",
            server.data.path().display()
        );
        if let Some((cert, key)) = tls {
            // in the data folder, which the server owns: it refuses a key others may read
            for (name, pem) in [("server.crt", cert), ("server.key", key)] {
                let path = dir.join(name);
                std::fs::write(&path, pem).map_err(|e| e.to_string())?;
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                    .map_err(|e| e.to_string())?;
                if root {
                    run(Command::new("chown").arg("postgres:postgres").arg(&path))?;
                }
            }
            options.push_str(" -c ssl=on");
        }
        let log = server.data.path().join("log");
        server.pg(
            "pg_ctl",
            &[
                "-D".as_ref(),
                dir.as_os_str(),
                "-l".as_ref(),
                log.as_os_str(),
                "-o".as_ref(),
                options.as_ref(),
                "-w".as_ref(),
                "-t".as_ref(),
                "60".as_ref(),
                "start".as_ref(),
            ],
        )?;
        server.stop_when_gone()?;
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if started.elapsed() > Duration::from_secs(30) {
                return Err("the PostgreSQL server did not start listening".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(server)
    }

    /// Starts one for `test`, or panics saying why: tests that need it are marked ignored
    /// where the server programs are missing (`cfg(has_postgres)`, set by the build
    /// script), so here they are present and a failure to start is a failure.
    pub fn start_for(test: &str) -> PostgresServer {
        PostgresServer::start()
            .unwrap_or_else(|why| panic!("{test}: PostgreSQL cannot start here: {why}"))
    }

    /// Restarts the server (a fast shutdown: open transactions roll back, connections
    /// drop), on the same port.
    pub fn restart(&self) -> Result<(), String> {
        let dir = self.data.path().join("data");
        // (with its log file again: a server writing to pg_ctl's output would hold that
        // pipe open, and waiting for pg_ctl's output would never end)
        let log = self.data.path().join("log");
        self.pg(
            "pg_ctl",
            &[
                "-D".as_ref(),
                dir.as_os_str(),
                "-l".as_ref(),
                log.as_os_str(),
                "-m".as_ref(),
                "fast".as_ref(),
                "-w".as_ref(),
                "restart".as_ref(),
            ],
        )
    }

    /// The server's address (the `postgres` superuser, database `postgres`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A watcher that stops the server when this process ends without dropping it (a
    /// test killed by a timeout, a panic that aborts), so no server outlives its tests.
    fn stop_when_gone(&self) -> Result<(), String> {
        let as_user = if self.as_postgres {
            "runuser -u postgres -- "
        } else {
            ""
        };
        let watch = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
             {as_user}'{pg_ctl}' -D '{data}' -m immediate stop >/dev/null 2>&1",
            pid = std::process::id(),
            pg_ctl = self.bin.join("pg_ctl").display(),
            data = self.data.path().join("data").display(),
        );
        Command::new("sh")
            .arg("-c")
            .arg(watch)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map(drop)
            .map_err(|e| format!("cannot watch the server: {e}"))
    }

    fn pg(&self, tool: &str, args: &[&std::ffi::OsStr]) -> Result<(), String> {
        let path = self.bin.join(tool);
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        };
        run(cmd.args(args))
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        let dir = self.data.path().join("data");
        let _ = self.pg(
            "pg_ctl",
            &[
                "-D".as_ref(),
                dir.as_os_str(),
                "-m".as_ref(),
                "immediate".as_ref(),
                "stop".as_ref(),
            ],
        );
    }
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{:?}: {e}", cmd.get_program()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{:?} failed: {}{}",
            cmd.get_program(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The folder with `initdb` and `pg_ctl`: on the PATH, or Debian's newest.
fn binaries() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .find(|d| d.join("initdb").is_file() && d.join("pg_ctl").is_file())
    });
    on_path.or_else(|| {
        let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .filter(|d| d.join("initdb").is_file())
            .collect();
        versions.sort_by_key(|d| {
            d.parent()
                .and_then(|v| v.file_name()?.to_str()?.parse::<u32>().ok())
                .unwrap_or(0)
        });
        versions.pop()
    })
}

/// Whether this process runs as root (PostgreSQL refuses to).
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_database_names_its_machine_and_process() {
        let name = name_for(Path::new("/tmp/x/e2fleet.db"));
        assert!(
            name.len() < 64,
            "{name}: PostgreSQL's names are at most 63 bytes"
        );
        assert_eq!(maker(&name, &machine()), Some(std::process::id()));
        assert_eq!(maker(&name, "00000000"), None, "another machine's");
        assert_eq!(maker("e2fleet_t_0123456789abcdef0123", &machine()), None);
    }

    #[test]
    #[cfg_attr(
        not(has_postgres),
        ignore = "no PostgreSQL server programs: apt-get install postgresql"
    )]
    fn a_run_drops_the_databases_of_this_machines_finished_test_processes() {
        let server = PostgresServer::start_for("sweep");
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            // a process id no process has (above the kernel's largest)
            let gone = 4_194_305;
            assert!(!Path::new(&format!("/proc/{gone}")).exists());
            let finished = format!("{PREFIX}{}_{gone}_00", machine());
            let mine = format!("{PREFIX}{}_{}_00", machine(), std::process::id());
            let elsewhere = format!("{PREFIX}00000000_{gone}_00");
            for name in [&finished, &mine, &elsewhere] {
                create_database(server.url(), name).await.unwrap();
            }
            sweep(server.url()).await;
            let mut c = PgConnection::connect(server.url()).await.unwrap();
            let left: Vec<String> = sqlx::query_scalar(
                "SELECT datname FROM pg_database WHERE starts_with(datname, $1) ORDER BY 1",
            )
            .bind(PREFIX)
            .fetch_all(&mut c)
            .await
            .unwrap();
            let mut want = vec![mine, elsewhere];
            want.sort();
            assert_eq!(left, want);
        });
    }
}

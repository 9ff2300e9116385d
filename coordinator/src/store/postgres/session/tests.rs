//! The writer's session against a throwaway server: pipelining, the batch locks, a
//! connection that dies between batches.

use super::*;

use crate::store::postgres::writer_config;
use crate::store::sql::{ConnExt, args};
use crate::store::testing::{PostgresServer, create_database};
use crate::store::writer::Writer;

/// Adds a row to the test table `t`.
const INSERT: &str = "INSERT INTO t (v) VALUES (?)";

fn count(c: &mut dyn Conn) -> StoreResult<i64> {
    c.one("SELECT COUNT(*) FROM t", &[])
}

/// A writer with `threads` sessions on a fresh database `name` of `server`, and the
/// traffic its sessions count.
async fn writer_on(server: &PostgresServer, name: &str, threads: usize) -> (Writer, Arc<Traffic>) {
    let url = create_database(server.url(), name).await.unwrap();
    let traffic = Arc::new(Traffic::default());
    let sessions = (0..threads)
        .map(|_| PgSession::connect(writer_config(&url).unwrap(), traffic.clone()))
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    (Writer::start_many(sessions, 16).unwrap(), traffic)
}

/// [`writer_on`] with one session, and the test table `t` created.
async fn writer_with_table(server: &PostgresServer, name: &str) -> (Writer, Arc<Traffic>) {
    let (writer, traffic) = writer_on(server, name, 1).await;
    writer
        .write(|c| c.execute("CREATE TABLE t (v BIGINT PRIMARY KEY)", &[]))
        .await
        .unwrap();
    (writer, traffic)
}
#[test]
#[cfg_attr(
    not(has_postgres),
    ignore = "no PostgreSQL server programs: apt-get install postgresql"
)]
fn held_changes_go_with_the_next_statement_and_one_that_fails_fails_its_batch() {
    let server = PostgresServer::start_for("held_changes");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (writer, traffic) = writer_with_table(&server, "e2fleet_held").await;
        // a held change is applied before the statement after it, in one round
        // trip with it (the statements are prepared by now on the second run)
        for v in [1i64, 2] {
            let before = traffic.totals();
            let n = writer
                .write(move |c| {
                    c.execute_deferred(INSERT, args![v])?;
                    count(c)
                })
                .await
                .unwrap();
            assert_eq!(n, v);
            let spent = traffic.totals() - before;
            if v == 2 {
                // BEGIN and the lock; the change and the count; COMMIT
                assert_eq!(spent.round_trips, 3, "{spent:?}");
                assert_eq!(spent.statements, 4, "{spent:?}");
            }
        }
        // a lease or report batch begins with its first statement: BEGIN, the lock,
        // the change and the count; COMMIT
        for lock in [WriteLock::Reports, WriteLock::Leases] {
            let before = traffic.totals();
            let n = writer
                .write_with(lock, move |c| {
                    c.execute_deferred(
                        INSERT,
                        args![if lock == WriteLock::Reports {
                            10i64
                        } else {
                            11
                        }],
                    )?;
                    count(c)
                })
                .await
                .unwrap();
            let spent = traffic.totals() - before;
            assert_eq!(spent.round_trips, 2, "{lock:?}: {spent:?}");
            assert_eq!(spent.statements, 4, "{lock:?}: {spent:?}");
            assert_eq!(n, if lock == WriteLock::Reports { 3 } else { 4 });
        }
        let n = writer
            .write_with(WriteLock::Reports, |c| {
                c.execute("DELETE FROM t WHERE v >= 10", &[])
            })
            .await
            .unwrap();
        assert_eq!(n, 2);
        // a held change that fails makes the next statement fail; the batch rolls back
        let failed = writer
            .write(move |c| {
                c.execute_deferred(INSERT, args![3i64])?;
                c.execute_deferred(INSERT, args![1i64])?;
                count(c)
            })
            .await;
        assert!(matches!(failed, Err(StoreError::Postgres(_))), "{failed:?}");
        // one still held at the end fails the commit: its caller is told, nothing
        // of the batch is applied
        let failed = writer
            .write(move |c| {
                c.execute_deferred(INSERT, args![4i64])?;
                c.execute_deferred(INSERT, args![2i64])
            })
            .await;
        assert!(matches!(failed, Err(StoreError::Writer(_))), "{failed:?}");
        let n = writer.write(count).await.unwrap();
        assert_eq!(n, 2, "only the first two rows are in");
    });
}

#[test]
#[cfg_attr(
    not(has_postgres),
    ignore = "no PostgreSQL server programs: apt-get install postgresql"
)]
fn a_batch_whose_connection_died_between_batches_begins_again_on_a_new_one() {
    let server = PostgresServer::start_for("dead_between");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (writer, traffic) = writer_with_table(&server, "e2fleet_dead_between").await;
        for (i, lock) in [WriteLock::Reports, WriteLock::Leases, WriteLock::All]
            .into_iter()
            .enumerate()
        {
            // the writer's connection ends between two batches, as when the server
            // restarts (a held change and a read begin the next batch)
            let killed: i64 = {
                let (client, connection) =
                    tokio_postgres::connect(server.url(), NoTls).await.unwrap();
                tokio::spawn(connection);
                let row = client
                    .query_one(
                        "SELECT COUNT(pg_terminate_backend(pid))::BIGINT FROM pg_stat_activity \
                         WHERE datname = 'e2fleet_dead_between' AND pid <> pg_backend_pid()",
                        &[],
                    )
                    .await
                    .unwrap();
                row.get(0)
            };
            assert!(killed >= 1, "the writer's connection was ended");
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            let before = traffic.totals();
            let v = i as i64;
            let n = writer
                .write_with(lock, move |c| {
                    c.execute_deferred(INSERT, args![v])?;
                    count(c)
                })
                .await
                .unwrap_or_else(|e| panic!("{lock:?}: {e}"));
            assert_eq!(n, v + 1, "{lock:?}: the change ran once, before the count");
            assert!(traffic.totals().round_trips > before.round_trips);
        }
    });
}

#[test]
#[cfg_attr(
    not(has_postgres),
    ignore = "no PostgreSQL server programs: apt-get install postgresql"
)]
fn lease_and_report_writes_run_side_by_side_and_every_other_write_excludes_both() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;
    use std::time::Duration;

    use crate::store::writer::WriteLock;

    let server = PostgresServer::start_for("write_locks");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (writer, _) = writer_on(&server, "e2fleet_write_locks", 3).await;
        let (lease_ran, wait_lease) = mpsc::channel::<bool>();
        let (go_on, wait_go) = mpsc::channel::<()>();
        let report_done = Arc::new(AtomicBool::new(false));
        let done = report_done.clone();
        // a report write that holds its lock (from its first statement) until a lease
        // write has run beside it
        let report = writer.write_with(WriteLock::Reports, move |c| {
            c.one::<i64>("SELECT 1", &[])?;
            let alone = wait_lease
                .recv_timeout(Duration::from_secs(20))
                .expect("a lease write runs while a report write is open");
            wait_go.recv_timeout(Duration::from_secs(20)).unwrap();
            done.store(true, Ordering::SeqCst);
            c.run_alone().map(|me| (alone, me))
        });
        let rest = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            writer
                .write_with(WriteLock::Leases, move |c| {
                    // it cannot exclude the report write now, and does not wait for it
                    let _ = lease_ran.send(c.run_alone()?);
                    Ok::<_, StoreError>(())
                })
                .await
                .unwrap();
            // a write of any other kind waits for the report write's commit
            let seen = report_done.clone();
            let all = writer
                .write(move |_c: &mut dyn Conn| Ok::<_, StoreError>(seen.load(Ordering::SeqCst)));
            let release = async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                go_on.send(()).unwrap();
            };
            let (all, ()) = tokio::join!(all, release);
            all.unwrap()
        };
        let (report, saw_report_done) = tokio::join!(report, rest);
        let (lease_alone, report_alone) = report.unwrap();
        assert!(
            !lease_alone,
            "a lease write beside a report write does not run alone"
        );
        // (the write of every kind waiting for it holds the leases lock, taken first)
        assert!(
            !report_alone,
            "the report write took the leases lock a waiting write holds"
        );
        assert!(
            saw_report_done,
            "a write of any other kind ran beside the report write"
        );
        // alone, a lease write takes the reports lock without waiting
        let alone = writer
            .write_with(WriteLock::Leases, |c| c.run_alone())
            .await
            .unwrap();
        assert!(alone, "a lease write with no report write open runs alone");
    });
}

/// A test CA, and a server certificate and key it signed for `localhost` (PEM).
fn certificates() -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "e2fleet test CA");
    let ca = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

/// Whether the writer's connection to `address` is encrypted (an error: it could not
/// connect).
fn writer_encrypted(rt: &tokio::runtime::Runtime, address: &str) -> Result<bool, StoreError> {
    let session = PgSession::connect(writer_config(address)?, Arc::new(Traffic::default()))?;
    let writer = Writer::start(session, 4)?;
    let ssl: i64 = rt.block_on(writer.write(|c| {
        c.one(
            "SELECT CASE WHEN ssl THEN 1 ELSE 0 END FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
    }))?;
    Ok(ssl == 1)
}

/// The writer reads `sslmode` and `sslrootcert` as libpq does (the read pool, sqlx, reads
/// them itself): plain, encrypted unchecked, encrypted with the chain checked, and with
/// the host's name too; a certificate that fails the check is a connection refused. A
/// whole store opened with `verify-full` has every connection encrypted.
#[test]
#[cfg_attr(
    not(has_postgres),
    ignore = "no PostgreSQL server programs: apt-get install postgresql"
)]
fn the_links_are_encrypted_and_checked_as_the_address_asks() {
    let (ca, cert, key) = certificates();
    let (other_ca, _, _) = certificates();
    let server = PostgresServer::start_with_tls(&cert, &key)
        .unwrap_or_else(|why| panic!("PostgreSQL cannot start here: {why}"));
    let dir = tempfile::tempdir().unwrap();
    let (ca_path, other_path) = (dir.path().join("ca.pem"), dir.path().join("other.pem"));
    std::fs::write(&ca_path, ca).unwrap();
    std::fs::write(&other_path, other_ca).unwrap();
    let (ca, other) = (ca_path.display(), other_path.display());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let url = rt
        .block_on(create_database(server.url(), "e2fleet_tls"))
        .unwrap();
    // the certificate names localhost, not the address 127.0.0.1
    let named = url.replace("127.0.0.1", "localhost");
    assert!(named.contains("localhost"), "{named}");
    for (address, encrypted) in [
        (format!("{url}?sslmode=disable"), false),
        (url.clone(), true),
        (format!("{url}?sslmode=require"), true),
        (format!("{url}?sslmode=verify-ca&sslrootcert={ca}"), true),
        (
            format!("{named}?sslmode=verify-full&sslrootcert={ca}"),
            true,
        ),
    ] {
        assert_eq!(
            writer_encrypted(&rt, &address).unwrap_or_else(|e| panic!("{address}: {e}")),
            encrypted,
            "{address}"
        );
    }
    for address in [
        format!("{url}?sslmode=verify-full&sslrootcert={ca}"),
        format!("{named}?sslmode=verify-ca&sslrootcert={other}"),
    ] {
        let refused = writer_encrypted(&rt, &address);
        assert!(
            matches!(&refused, Err(e) if e.to_string().contains("certificate")),
            "{address}: {refused:?}"
        );
    }

    // the whole store: the read pool and both writer connections
    let store = rt
        .block_on(super::super::PgStore::open(&format!(
            "{named}?sslmode=verify-full&sslrootcert={ca}"
        )))
        .unwrap();
    let (plain, all): (i64, i64) = rt.block_on(async {
        let mut c = <sqlx::PgConnection as sqlx::Connection>::connect(&url)
            .await
            .unwrap();
        sqlx::query_as(
            "SELECT COUNT(*) FILTER (WHERE NOT s.ssl), COUNT(*) FROM pg_stat_ssl s \
             JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'e2fleet-coordinator'",
        )
        .fetch_one(&mut c)
        .await
        .unwrap()
    });
    assert_eq!(plain, 0, "every connection of the store is encrypted");
    assert!(all >= 3, "the read pool and two writers: {all} connections");
    drop(store);
}

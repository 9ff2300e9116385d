//! The writer's connection to PostgreSQL ([`PgSession`]): one per coordinator, driven by
//! the writer thread ([`crate::store::writer`]) on a single-threaded runtime of its own
//! (a round trip then never crosses threads).
//!
//! # Pipelining
//! A write job is read-then-write Rust code, so most of its statements wait for the one
//! before. Its changes whose row counts nobody reads do not ([`Conn::execute_deferred`]:
//! inserting a lease, a unit's counters, a result's body...). They are held and sent
//! together with the next statement that must answer (a read, a change whose count is
//! used, or the batch's `COMMIT`), and the server runs them in order before it: one round
//! trip for the lot instead of one each. A held change that fails fails that next
//! statement (or the commit), and the writer rolls the whole batch back, as it does for
//! any failure after a change; nothing is half-applied and no reply goes out before the
//! commit.
//!
//! This runs on tokio-postgres rather than sqlx, which waits for each statement's answer
//! before it sends the next. Statements are prepared once per connection, with the
//! parameter types of their values (as sqlx did), and kept.

use std::collections::HashMap;
use std::error::Error;
use std::future::Future;
use std::sync::Arc;

use bytes::BytesMut;
use futures_util::StreamExt;
use futures_util::future::join_all;
use tokio::runtime::Runtime;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};
use tokio_postgres::{Client, NoTls, Statement};
use tracing::warn;

use super::{BATCH_TIME, LEASES_LOCK, REPORTS_LOCK, STATEMENT_LIMIT, silent};
use crate::store::StoreError;
use crate::store::sql::{Conn, ConnExt, Kind, Row, Value, for_postgres};
use crate::store::traffic::Traffic;
use crate::store::tx::StoreResult;
use crate::store::writer::{Session, WriteLock};

/// Most changes held before they are sent on their own (a job that writes many rows in
/// a loop, e.g. a submission's units, sends them in pipelined runs of this many).
const MAX_HELD: usize = 256;
/// Most prepared statements kept per connection (the store has ~150 distinct ones; a
/// statement built with a varying text would otherwise grow the map without end).
const MAX_PREPARED: usize = 1_024;

/// The writer's connection.
pub(super) struct PgSession {
    rt: Runtime,
    link: Option<Link>,
    config: tokio_postgres::Config,
    /// Statements that may have changed rows or failed (see [`Session::changes`]).
    writes: i64,
    traffic: Arc<Traffic>,
    /// The writes the open transaction excludes.
    lock: WriteLock,
}

/// A live connection with what it keeps.
struct Link {
    client: Client,
    /// By the statement's text as the store writes it (a hit neither translates nor
    /// allocates), then by its values' types (a NULL's type can differ between calls).
    prepared: HashMap<String, Vec<(Vec<Kind>, Statement)>>,
    held: Vec<Held>,
}

impl PgSession {
    /// Connects, from a thread of its own (this may be called inside another runtime).
    pub(super) fn connect(
        config: tokio_postgres::Config,
        traffic: Arc<Traffic>,
    ) -> Result<PgSession, StoreError> {
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| StoreError::Open(format!("cannot start the writer's runtime: {e}")))?;
            let link = rt.block_on(open_link(&config))?;
            Ok(PgSession {
                rt,
                link: Some(link),
                config,
                writes: 0,
                traffic,
                lock: WriteLock::All,
            })
        })
        .join()
        .map_err(|_| StoreError::Open("the writer's connection failed".into()))?
    }

    /// A new connection in place of the old (none if the server cannot be reached).
    fn reconnect(&mut self) {
        self.link = None;
        let config = self.config.clone();
        self.link = self
            .rt
            .block_on(async { tokio::time::timeout(STATEMENT_LIMIT, open_link(&config)).await })
            .map_err(|_| warn!("no answer from PostgreSQL to a new connection"))
            .ok()
            .and_then(|c| {
                c.map_err(|e| warn!(error = %e, "cannot reconnect to PostgreSQL"))
                    .ok()
            });
    }

    fn link(&mut self) -> StoreResult<&mut Link> {
        self.link
            .as_mut()
            .ok_or_else(|| StoreError::Writer("no connection to PostgreSQL".into()))
    }

    /// `sql` prepared for `params`' types (a round trip the first time on a connection;
    /// the held changes go with it).
    fn prepared(&mut self, sql: &str, params: &[Value]) -> StoreResult<Statement> {
        let same_kinds = |kinds: &[Kind]| {
            kinds.len() == params.len() && kinds.iter().zip(params).all(|(k, v)| *k == kind(v))
        };
        let known = self.link()?.prepared.get(sql).and_then(|variants| {
            variants
                .iter()
                .find(|(kinds, _)| same_kinds(kinds))
                .map(|(_, st)| st.clone())
        });
        if let Some(st) = known {
            return Ok(st);
        }
        let kinds: Vec<Kind> = params.iter().map(kind).collect();
        let types: Vec<Type> = kinds.iter().map(|k| pg_type(*k)).collect();
        let text = for_postgres(sql);
        let (rt, client, held, traffic) = self.split()?;
        let answer = round_trip(rt, traffic, client, held, 1, async {
            Ok(client.prepare_typed(&text, &types).await?)
        });
        let st = self.settle(answer)?;
        let link = self.link()?;
        if link.prepared.len() >= MAX_PREPARED {
            link.prepared.clear();
        }
        link.prepared
            .entry(sql.to_string())
            .or_default()
            .push((kinds, st.clone()));
        Ok(st)
    }

    /// What a round trip needs, borrowed apart: the runtime, the client, the held
    /// changes (taken: they are sent now) and the counters.
    #[allow(clippy::type_complexity)]
    fn split(&mut self) -> StoreResult<(&Runtime, &Client, Vec<Held>, &Traffic)> {
        let link = self
            .link
            .as_mut()
            .ok_or_else(|| StoreError::Writer("no connection to PostgreSQL".into()))?;
        let held = std::mem::take(&mut link.held);
        Ok((&self.rt, &link.client, held, &self.traffic))
    }

    /// A round trip's answer; a connection that went silent is dropped (the next batch
    /// connects again).
    fn settle<T>(&mut self, answer: Option<StoreResult<T>>) -> StoreResult<T> {
        answer.unwrap_or_else(|| {
            self.link = None;
            Err(silent())
        })
    }

    /// Runs transaction control (`BEGIN`, `COMMIT`, `ROLLBACK`) after the held changes.
    fn control(&mut self, sql: &str) -> Result<(), String> {
        let answer = match self.split() {
            Ok((rt, client, held, traffic)) => round_trip(rt, traffic, client, held, 1, async {
                Ok(client.batch_execute(sql).await?)
            }),
            Err(e) => Some(Err(e)),
        };
        self.settle(answer).map_err(|e| e.to_string())
    }
}

/// A change held for the next round trip.
type Held = (Statement, Vec<Value>);

/// Sends `held`, then what `then` sends, and waits for all of it: one round trip. The
/// held changes' first error wins. `None`: no answer in [`STATEMENT_LIMIT`].
fn round_trip<T>(
    rt: &Runtime,
    traffic: &Traffic,
    client: &Client,
    held: Vec<Held>,
    statements: u64,
    then: impl Future<Output = StoreResult<T>>,
) -> Option<StoreResult<T>> {
    traffic.exchanged(held.len() as u64 + statements);
    let all = async {
        // a request is sent when its future is first polled: `join_all` polls them in
        // order, and before `then`, so the server runs the held changes first
        let changes = join_all(
            held.iter()
                .map(|(st, params)| client.execute_raw(st, params.iter())),
        );
        let (changes, out) = futures_util::future::join(changes, then).await;
        for c in changes {
            c?;
        }
        out
    };
    rt.block_on(async { tokio::time::timeout(STATEMENT_LIMIT, all).await })
        .ok()
}

async fn open_link(config: &tokio_postgres::Config) -> Result<Link, StoreError> {
    let (client, connection) = config.connect(NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            warn!(error = %e, "the write connection to PostgreSQL ended");
        }
    });
    Ok(Link {
        client,
        prepared: HashMap::new(),
        held: Vec::new(),
    })
}

impl Session for PgSession {
    fn begin(&mut self, lock: WriteLock) -> Result<(), String> {
        if self.link.is_none() {
            self.reconnect();
        }
        self.lock = lock;
        // both locks in one order, and a lease batch never waits for the reports lock:
        // no two writes wait on each other's advisory lock
        let lock = match lock {
            WriteLock::All => format!(
                "BEGIN; SELECT pg_advisory_xact_lock({LEASES_LOCK}); SELECT pg_advisory_xact_lock({REPORTS_LOCK})"
            ),
            WriteLock::Leases => format!("BEGIN; SELECT pg_advisory_xact_lock({LEASES_LOCK})"),
            WriteLock::Reports => format!("BEGIN; SELECT pg_advisory_xact_lock({REPORTS_LOCK})"),
        };
        match self.control(&lock) {
            Ok(()) => Ok(()),
            Err(first) => {
                // the server restarted or the connection broke: one new connection
                warn!(error = %first, "the write connection failed; reconnecting");
                self.rollback();
                self.reconnect();
                self.control(&lock)
            }
        }
    }

    fn commit(&mut self) -> Result<(), String> {
        // a held change that failed fails here, before the COMMIT is believed (PostgreSQL
        // answers the COMMIT of a failed transaction with a ROLLBACK, not an error)
        self.control("COMMIT")
    }

    fn rollback(&mut self) {
        if let Some(link) = self.link.as_mut() {
            link.held.clear();
        }
        let _ = self.control("ROLLBACK");
    }

    fn changes(&mut self) -> Option<i64> {
        Some(self.writes)
    }

    fn covers(&self, held: WriteLock, next: WriteLock) -> bool {
        held == WriteLock::All || held == next
    }

    fn conn(&mut self) -> &mut dyn Conn {
        self
    }

    fn batch_time(&self) -> std::time::Duration {
        BATCH_TIME
    }
}

impl Conn for PgSession {
    fn is_postgres(&self) -> bool {
        true
    }

    fn run_alone(&mut self) -> StoreResult<bool> {
        let lacking = match self.lock {
            WriteLock::All => return Ok(true),
            WriteLock::Leases => REPORTS_LOCK,
            WriteLock::Reports => LEASES_LOCK,
        };
        // tried, never waited for: the transaction holding it may be waiting for a row
        // this one wrote
        let got: bool = self.one(
            "SELECT pg_try_advisory_xact_lock(?)",
            &[Value::Int(lacking)],
        )?;
        if got {
            self.lock = WriteLock::All;
        }
        Ok(got)
    }

    fn execute(&mut self, sql: &str, params: &[Value]) -> StoreResult<usize> {
        let st = self.prepared(sql, params)?;
        self.writes += 1;
        let (rt, client, held, traffic) = self.split()?;
        let answer = round_trip(rt, traffic, client, held, 1, async {
            Ok(client.execute_raw(&st, params.iter()).await?)
        });
        Ok(self.settle(answer)? as usize)
    }

    fn execute_deferred(&mut self, sql: &str, params: &[Value]) -> StoreResult<()> {
        let st = self.prepared(sql, params)?;
        self.writes += 1;
        let link = self.link()?;
        link.held.push((st, params.to_vec()));
        if link.held.len() >= MAX_HELD {
            let (rt, client, held, traffic) = self.split()?;
            let answer = round_trip(rt, traffic, client, held, 0, async { Ok(()) });
            self.settle(answer)?;
        }
        Ok(())
    }

    fn for_each(
        &mut self,
        sql: &str,
        params: &[Value],
        each: &mut dyn FnMut(&Row) -> StoreResult<()>,
    ) -> StoreResult<()> {
        let st = self.prepared(sql, params)?;
        if super::may_write(sql) {
            self.writes += 1;
        }
        let (rt, client, held, traffic) = self.split()?;
        let answer = round_trip(rt, traffic, client, held, 1, async {
            let rows = client.query_raw(&st, params.iter()).await?;
            futures_util::pin_mut!(rows);
            let mut row = Row::default();
            while let Some(r) = rows.next().await {
                let r = r?;
                row.0.clear();
                for i in 0..r.columns().len() {
                    row.0.push(value_at(&r, i)?);
                }
                each(&row)?;
            }
            Ok(())
        });
        let out = self.settle(answer);
        if out.is_err() {
            // a failed statement spoils the transaction (an error of `each` alone does
            // not, but the writer cannot tell them apart cheaply: it rolls back)
            self.writes += 1;
        }
        out
    }
}

fn kind(v: &Value) -> Kind {
    match v {
        Value::Null(k) => *k,
        Value::Int(_) => Kind::Int,
        Value::Real(_) => Kind::Real,
        Value::Text(_) => Kind::Text,
        Value::Blob(_) => Kind::Blob,
    }
}

fn pg_type(k: Kind) -> Type {
    match k {
        Kind::Int => Type::INT8,
        Kind::Real => Type::FLOAT8,
        Kind::Text => Type::TEXT,
        Kind::Blob => Type::BYTEA,
    }
}

impl ToSql for Value {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        match self {
            Value::Null(_) => Ok(IsNull::Yes),
            Value::Int(n) => n.to_sql(ty, out),
            Value::Real(x) => x.to_sql(ty, out),
            Value::Text(s) => s.as_str().to_sql(ty, out),
            Value::Blob(b) => b.as_slice().to_sql(ty, out),
        }
    }

    // each statement is prepared with its values' own types ([`pg_type`])
    fn accepts(ty: &Type) -> bool {
        [Type::INT8, Type::FLOAT8, Type::TEXT, Type::BYTEA].contains(ty)
    }

    to_sql_checked!();
}

/// Column `i` of a row as a [`Value`] (integers of every width, booleans as 0/1), as the
/// read connections read them.
fn value_at(row: &tokio_postgres::Row, i: usize) -> StoreResult<Value> {
    let ty = row.columns()[i].type_().clone();
    let v = match ty {
        Type::INT8 => row.try_get::<_, Option<i64>>(i)?.map(Value::Int),
        Type::INT4 => row
            .try_get::<_, Option<i32>>(i)?
            .map(|n| Value::Int(n.into())),
        Type::INT2 => row
            .try_get::<_, Option<i16>>(i)?
            .map(|n| Value::Int(n.into())),
        Type::BOOL => row
            .try_get::<_, Option<bool>>(i)?
            .map(|b| Value::Int(b.into())),
        Type::FLOAT8 => row.try_get::<_, Option<f64>>(i)?.map(Value::Real),
        Type::FLOAT4 => row
            .try_get::<_, Option<f32>>(i)?
            .map(|x| Value::Real(x.into())),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => {
            row.try_get::<_, Option<String>>(i)?.map(Value::Text)
        }
        Type::BYTEA => row.try_get::<_, Option<Vec<u8>>>(i)?.map(Value::Blob),
        other => {
            return Err(StoreError::Corrupt(format!(
                "column {} is {other}, which the store does not read (a SUM is NUMERIC: CAST it AS BIGINT)",
                row.columns()[i].name()
            )));
        }
    };
    Ok(v.unwrap_or(Value::Null(Kind::Int)))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::store::postgres::writer_config;
    use crate::store::sql::{ConnExt, args};
    use crate::store::testing::{PostgresServer, create_database};
    use crate::store::writer::Writer;

    fn count(c: &mut dyn Conn) -> StoreResult<i64> {
        c.one("SELECT COUNT(*) FROM t", &[])
    }

    /// A writer with `threads` sessions on a fresh database `name` of `server`, and the
    /// traffic its sessions count.
    async fn writer_on(
        server: &PostgresServer,
        name: &str,
        threads: usize,
    ) -> (Writer, Arc<Traffic>) {
        let url = create_database(server.url(), name).await.unwrap();
        let traffic = Arc::new(Traffic::default());
        let sessions = (0..threads)
            .map(|_| PgSession::connect(writer_config(&url).unwrap(), traffic.clone()))
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        (Writer::start_many(sessions, 16).unwrap(), traffic)
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
            let (writer, traffic) = writer_on(&server, "e2fleet_held", 1).await;
            writer
                .write(|c| c.execute("CREATE TABLE t (v BIGINT PRIMARY KEY)", &[]))
                .await
                .unwrap();
            let insert = "INSERT INTO t (v) VALUES (?)";
            // a held change is applied before the statement after it, in one round
            // trip with it (the statements are prepared by now on the second run)
            for v in [1i64, 2] {
                let before = traffic.totals();
                let n = writer
                    .write(move |c| {
                        c.execute_deferred(insert, args![v])?;
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
            // a held change that fails makes the next statement fail; the batch rolls back
            let failed = writer
                .write(move |c| {
                    c.execute_deferred(insert, args![3i64])?;
                    c.execute_deferred(insert, args![1i64])?;
                    count(c)
                })
                .await;
            assert!(matches!(failed, Err(StoreError::Postgres(_))), "{failed:?}");
            // one still held at the end fails the commit: its caller is told, nothing
            // of the batch is applied
            let failed = writer
                .write(move |c| {
                    c.execute_deferred(insert, args![4i64])?;
                    c.execute_deferred(insert, args![2i64])
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
            // a report write that holds its lock until a lease write has run beside it
            let report = writer.write_with(WriteLock::Reports, move |c| {
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
                let all = writer.write(move |_c: &mut dyn Conn| {
                    Ok::<_, StoreError>(seen.load(Ordering::SeqCst))
                });
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
}

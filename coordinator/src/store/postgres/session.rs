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
//! A lease or report batch's transaction begins with its first statement: `BEGIN` and
//! the batch's advisory lock go in the same round trip as the statement (the batch's
//! read of what it decides on), and the server takes the lock before it runs the
//! statement. Every statement of the batch runs under the lock as before; only the Rust
//! code before the first statement (which reads nothing of the database) runs before it
//! is held. Under load each round trip also costs two wake-ups on a busy machine, so a
//! batch of three round trips became one of two. A write that excludes both kinds
//! ([`WriteLock::All`]) still begins on its own round trip. If the connection turns out
//! to have died before the transaction began (the server restarted between batches),
//! nothing of that round trip ran: the session connects again, begins, and sends it once
//! more, as an explicit begin did.
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

use super::tls::WriterAddress;
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
    config: WriterAddress,
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
    /// The transaction's `BEGIN` and lock, not sent yet: they go with the next round trip.
    begin: Option<String>,
    held: Vec<Held>,
}

/// What the next round trip sends before its own statement: the transaction's begin, if
/// it is not sent yet, and the held changes.
struct Pending {
    begin: Option<String>,
    held: Vec<Held>,
}

/// How a round trip ended.
enum Trip<T> {
    /// The server answered (an error of any statement is the first error).
    Answered(StoreResult<T>),
    /// The connection had died before the transaction's begin was answered: nothing of
    /// the round trip ran.
    Dead,
    /// No answer in [`STATEMENT_LIMIT`].
    Silent,
}

impl PgSession {
    /// Connects, from a thread of its own (this may be called inside another runtime).
    pub(super) fn connect(
        config: WriterAddress,
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
        let st = loop {
            let (rt, client, pending, traffic) = self.split()?;
            let trip = round_trip(rt, traffic, client, &pending, 1, async {
                Ok(client.prepare_typed(&text, &types).await?)
            });
            if let Some(st) = self.settle(trip, pending)? {
                break st;
            }
        };
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

    /// What a round trip needs, borrowed apart: the runtime, the client, what goes
    /// before its statement (taken: it is sent now) and the counters.
    #[allow(clippy::type_complexity)]
    fn split(&mut self) -> StoreResult<(&Runtime, &Client, Pending, &Traffic)> {
        let link = self
            .link
            .as_mut()
            .ok_or_else(|| StoreError::Writer("no connection to PostgreSQL".into()))?;
        let pending = Pending {
            begin: link.begin.take(),
            held: std::mem::take(&mut link.held),
        };
        Ok((&self.rt, &link.client, pending, &self.traffic))
    }

    /// A round trip's answer (`None`: send it again, the transaction has begun anew). A
    /// connection that went silent is dropped (the next batch connects again); one found
    /// dead before its transaction began is replaced, the transaction begun on the new
    /// one and `pending`'s changes held there again.
    fn settle<T>(&mut self, trip: Trip<T>, pending: Pending) -> StoreResult<Option<T>> {
        match trip {
            Trip::Answered(answer) => answer.map(Some),
            Trip::Silent => {
                self.link = None;
                Err(silent())
            }
            Trip::Dead => {
                // (only a round trip that carries the begin finds the connection dead)
                let Some(begin) = pending.begin else {
                    self.link = None;
                    return Err(silent());
                };
                warn!("the write connection had closed; reconnecting");
                self.reconnect();
                self.control(&begin).map_err(StoreError::Writer)?;
                for (sql, params) in pending.held.into_iter().map(|h| (h.sql, h.params)) {
                    let st = self.prepared(&sql, &params)?;
                    self.link()?.held.push(Held { st, params, sql });
                }
                Ok(None)
            }
        }
    }

    /// Runs transaction control (`BEGIN`, `COMMIT`, `ROLLBACK`) after what is pending.
    fn control(&mut self, sql: &str) -> Result<(), String> {
        loop {
            let (trip, pending) = match self.split() {
                Ok((rt, client, pending, traffic)) => (
                    round_trip(rt, traffic, client, &pending, 1, async {
                        Ok(client.batch_execute(sql).await?)
                    }),
                    pending,
                ),
                Err(e) => return Err(e.to_string()),
            };
            match self.settle(trip, pending) {
                Ok(Some(())) => return Ok(()),
                Ok(None) => continue,
                Err(e) => return Err(e.to_string()),
            }
        }
    }
}

/// The statement that begins a transaction excluding `lock`'s writes. Both locks are
/// taken in one order, and a lease batch never waits for the reports lock: no two
/// writes wait on each other's advisory lock.
fn begin_text(lock: WriteLock) -> String {
    match lock {
        WriteLock::All => format!(
            "BEGIN; SELECT pg_advisory_xact_lock({LEASES_LOCK}); SELECT pg_advisory_xact_lock({REPORTS_LOCK})"
        ),
        WriteLock::Leases => format!("BEGIN; SELECT pg_advisory_xact_lock({LEASES_LOCK})"),
        WriteLock::Reports => format!("BEGIN; SELECT pg_advisory_xact_lock({REPORTS_LOCK})"),
    }
}

/// A change held for the next round trip (with its text, to prepare it again on a new
/// connection).
struct Held {
    st: Statement,
    params: Vec<Value>,
    sql: String,
}

/// Sends what is `pending` (the begin, then the held changes), then what `then` sends,
/// and waits for all of it: one round trip. The first error wins, in that order.
fn round_trip<T>(
    rt: &Runtime,
    traffic: &Traffic,
    client: &Client,
    pending: &Pending,
    statements: u64,
    then: impl Future<Output = StoreResult<T>>,
) -> Trip<T> {
    let begins = u64::from(pending.begin.is_some());
    traffic.exchanged(begins + pending.held.len() as u64 + statements);
    let all = async {
        // a request is sent when its future is first polled: `join` and `join_all` poll
        // them in order, so the server runs the begin, then the held changes, then `then`
        let begin = async {
            match &pending.begin {
                Some(sql) => client
                    .batch_execute(sql)
                    .await
                    .map_err(|e| (e, client.is_closed())),
                None => Ok(()),
            }
        };
        let changes = join_all(
            pending
                .held
                .iter()
                .map(|h| client.execute_raw(&h.st, h.params.iter())),
        );
        let (begun, changes, out) = futures_util::future::join3(begin, changes, then).await;
        match begun {
            Err((_, true)) => return Trip::Dead,
            Err((e, false)) => return Trip::Answered(Err(e.into())),
            Ok(()) => {}
        }
        for c in changes {
            if let Err(e) = c {
                return Trip::Answered(Err(e.into()));
            }
        }
        Trip::Answered(out)
    };
    rt.block_on(async { tokio::time::timeout(STATEMENT_LIMIT, all).await })
        .unwrap_or(Trip::Silent)
}

async fn open_link(address: &WriterAddress) -> Result<Link, StoreError> {
    fn watch<S, T>(connection: tokio_postgres::Connection<S, T>)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                // (as a store error: with its cause, which tokio-postgres keeps apart)
                warn!(error = %StoreError::from(e), "the write connection to PostgreSQL ended");
            }
        });
    }
    let client = match &address.tls {
        None => {
            let (client, connection) = address.config.connect(NoTls).await?;
            watch(connection);
            client
        }
        Some(tls) => {
            let (client, connection) = address.config.connect(tls.clone()).await?;
            watch(connection);
            client
        }
    };
    Ok(Link {
        client,
        prepared: HashMap::new(),
        begin: None,
        held: Vec::new(),
    })
}

impl Session for PgSession {
    fn begin(&mut self, lock: WriteLock) -> Result<(), String> {
        if self.link.is_none() {
            self.reconnect();
        }
        self.lock = lock;
        let text = begin_text(lock);
        if lock != WriteLock::All
            && let Some(link) = self.link.as_mut()
        {
            // sent with the batch's first statement (see the module docs)
            link.begin = Some(text);
            return Ok(());
        }
        match self.control(&text) {
            Ok(()) => Ok(()),
            Err(first) => {
                // the server restarted or the connection broke: one new connection
                warn!(error = %first, "the write connection failed; reconnecting");
                self.rollback();
                self.reconnect();
                self.control(&text)
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
            if link.begin.take().is_some() {
                // nothing of the transaction was sent
                return;
            }
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
        self.writes += 1;
        loop {
            let st = self.prepared(sql, params)?;
            let (rt, client, pending, traffic) = self.split()?;
            let trip = round_trip(rt, traffic, client, &pending, 1, async {
                Ok(client.execute_raw(&st, params.iter()).await?)
            });
            if let Some(n) = self.settle(trip, pending)? {
                return Ok(n as usize);
            }
        }
    }

    fn execute_deferred(&mut self, sql: &str, params: &[Value]) -> StoreResult<()> {
        let st = self.prepared(sql, params)?;
        self.writes += 1;
        let link = self.link()?;
        link.held.push(Held {
            st,
            params: params.to_vec(),
            sql: sql.to_string(),
        });
        if link.held.len() >= MAX_HELD {
            loop {
                let (rt, client, pending, traffic) = self.split()?;
                let trip = round_trip(rt, traffic, client, &pending, 0, async { Ok(()) });
                if self.settle(trip, pending)?.is_some() {
                    break;
                }
            }
        }
        Ok(())
    }

    fn for_each(
        &mut self,
        sql: &str,
        params: &[Value],
        each: &mut dyn FnMut(&Row) -> StoreResult<()>,
    ) -> StoreResult<()> {
        if super::may_write(sql) {
            self.writes += 1;
        }
        let out = loop {
            let st = self.prepared(sql, params)?;
            let (rt, client, pending, traffic) = self.split()?;
            let trip = round_trip(rt, traffic, client, &pending, 1, async {
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
            // (`None`: begun anew on a new connection before any row came: read it there)
            match self.settle(trip, pending) {
                Ok(Some(())) => break Ok(()),
                Ok(None) => continue,
                Err(e) => break Err(e),
            }
        };
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
mod tests;

//! The SQL both backends share: the [`crate::store::tx`] traits implemented once, on
//! [`SqlTx`], over a connection that runs statements ([`Conn`]). One file per table; they
//! are the only place that knows the columns and their encodings ([`codec`]).
//!
//! # One dialect
//! The statements are written in the SQL that SQLite and PostgreSQL both take:
//! - placeholders `?` or `?N` (the PostgreSQL connection turns them into `$N`);
//! - integers are 64-bit everywhere (SQLite `INTEGER`, PostgreSQL `BIGINT`); a `SUM` is
//!   cast back to `BIGINT` (PostgreSQL widens it to `NUMERIC`); flags are integers 0/1, and a
//!   comparison or `EXISTS` read as a column comes back as an integer from both;
//! - new rows name their ids with `RETURNING id`; upserts are `ON CONFLICT ... DO`;
//!   `IS DISTINCT FROM`, row values and partial indexes are in both.
//!
//! The schemas differ only in their types (`migrations/sqlite`, `migrations/postgres`):
//! what the code stores as bytes is a `BLOB` / `BYTEA`, text is `TEXT`.

mod accounts;
mod archive;
mod batch;
pub mod codec;
mod jobs;
mod leases;
mod results;
mod studies;
mod units;
mod verification;
mod workers;

use std::str::FromStr;

use e2fleet_proto::api::{JobId, UnitId};

use super::StoreError;
use super::tx::StoreResult;

/// A value bound to a statement or read from a row.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// NULL, with the type a non-null value in its place would have (PostgreSQL types
    /// every parameter).
    Null(Kind),
    /// A 64-bit integer (also a flag: 0 or 1).
    Int(i64),
    /// A double.
    Real(f64),
    /// Text.
    Text(String),
    /// Bytes.
    Blob(Vec<u8>),
}

/// The type of a [`Value`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// [`Value::Int`].
    Int,
    /// [`Value::Real`].
    Real,
    /// [`Value::Text`].
    Text,
    /// [`Value::Blob`].
    Blob,
}

/// A connection inside a transaction: runs one statement at a time.
pub trait Conn {
    /// Whether the database is PostgreSQL: the few statements whose best form differs
    /// between the two planners ask (each says why).
    fn is_postgres(&self) -> bool {
        false
    }

    /// Whether the open write transaction now excludes every other write: always where
    /// one writer runs at a time; on PostgreSQL when it holds both write locks, or takes
    /// the one it lacks without waiting ([`crate::store::WriteLock`]).
    fn run_alone(&mut self) -> StoreResult<bool> {
        Ok(true)
    }

    /// Runs a statement; the rows it changed.
    fn execute(&mut self, sql: &str, params: &[Value]) -> StoreResult<usize>;

    /// Runs a change whose row count nobody reads. A backend may hold it and send it with
    /// the next statement (PostgreSQL pipelines them: one round trip for the lot); it is
    /// applied before any later statement of the transaction runs and before its commit,
    /// and if it fails, that later statement or the commit fails, so the transaction
    /// rolls back whole. An error here is the backend's (a statement it cannot prepare).
    fn execute_deferred(&mut self, sql: &str, params: &[Value]) -> StoreResult<()> {
        self.execute(sql, params).map(|_| ())
    }
    /// Runs a query, handing its rows to `each` one at a time as they come (a
    /// certificate of millions of units never sits in memory whole).
    fn for_each(
        &mut self,
        sql: &str,
        params: &[Value],
        each: &mut dyn FnMut(&Row) -> StoreResult<()>,
    ) -> StoreResult<()>;

    /// Runs a query; its rows.
    fn query(&mut self, sql: &str, params: &[Value]) -> StoreResult<Vec<Row>> {
        let mut rows = Vec::new();
        self.for_each(sql, params, &mut |r| {
            rows.push(r.clone());
            Ok(())
        })?;
        Ok(rows)
    }
}

/// A row of values.
#[derive(Clone, Debug, Default)]
pub struct Row(pub Vec<Value>);

impl Row {
    /// Column `idx`.
    pub fn value(&self, idx: usize) -> StoreResult<&Value> {
        self.0
            .get(idx)
            .ok_or_else(|| StoreError::Corrupt(format!("no column {idx}")))
    }

    /// Column `idx` as a `T`.
    pub fn get<T: FromValue>(&self, idx: usize) -> StoreResult<T> {
        T::from_value(self.value(idx)?)
            .map_err(|why| StoreError::Corrupt(format!("column {idx}: {why}")))
    }

    /// Column `idx`, text that parses into a `T` (an enum's name, an id).
    pub fn parsed<T>(&self, idx: usize) -> StoreResult<T>
    where
        T: FromStr,
        T::Err: std::fmt::Display,
    {
        let text: String = self.get(idx)?;
        text.parse()
            .map_err(|e: T::Err| StoreError::Corrupt(format!("column {idx}: {e}")))
    }
}

/// Reading a [`Value`] as a Rust type.
pub trait FromValue: Sized {
    /// The value as `Self`, or why not.
    fn from_value(v: &Value) -> Result<Self, String>;
}

impl FromValue for i64 {
    fn from_value(v: &Value) -> Result<i64, String> {
        match v {
            Value::Int(n) => Ok(*n),
            other => Err(format!("{other:?} is not an integer")),
        }
    }
}

impl FromValue for u64 {
    fn from_value(v: &Value) -> Result<u64, String> {
        let n = i64::from_value(v)?;
        u64::try_from(n).map_err(|_| format!("{n} is negative"))
    }
}

impl FromValue for u32 {
    fn from_value(v: &Value) -> Result<u32, String> {
        let n = i64::from_value(v)?;
        u32::try_from(n).map_err(|_| format!("{n} is out of range"))
    }
}

impl FromValue for usize {
    fn from_value(v: &Value) -> Result<usize, String> {
        let n = i64::from_value(v)?;
        usize::try_from(n).map_err(|_| format!("{n} is out of range"))
    }
}

impl FromValue for i32 {
    fn from_value(v: &Value) -> Result<i32, String> {
        let n = i64::from_value(v)?;
        i32::try_from(n).map_err(|_| format!("{n} is out of range"))
    }
}

impl FromValue for Value {
    fn from_value(v: &Value) -> Result<Value, String> {
        Ok(v.clone())
    }
}

impl FromValue for bool {
    fn from_value(v: &Value) -> Result<bool, String> {
        Ok(i64::from_value(v)? != 0)
    }
}

impl FromValue for f64 {
    fn from_value(v: &Value) -> Result<f64, String> {
        match v {
            Value::Real(x) => Ok(*x),
            Value::Int(n) => Ok(*n as f64),
            other => Err(format!("{other:?} is not a number")),
        }
    }
}

impl FromValue for String {
    fn from_value(v: &Value) -> Result<String, String> {
        match v {
            Value::Text(s) => Ok(s.clone()),
            other => Err(format!("{other:?} is not text")),
        }
    }
}

impl FromValue for Vec<u8> {
    fn from_value(v: &Value) -> Result<Vec<u8>, String> {
        match v {
            Value::Blob(b) => Ok(b.clone()),
            other => Err(format!("{other:?} is not bytes")),
        }
    }
}

impl<T: FromValue> FromValue for Option<T> {
    fn from_value(v: &Value) -> Result<Option<T>, String> {
        match v {
            Value::Null(_) => Ok(None),
            v => T::from_value(v).map(Some),
        }
    }
}

/// Binding a Rust value as a statement's parameter (by reference, as `args!` takes them).
pub trait ToValue {
    /// Its kind, for a NULL in its place.
    const KIND: Kind;
    /// The value.
    fn to_value(&self) -> Value;
}

macro_rules! to_value {
    ($($t:ty => $kind:ident, |$v:ident| $make:expr;)*) => {$(
        impl ToValue for $t {
            const KIND: Kind = Kind::$kind;
            fn to_value(&self) -> Value {
                let $v = self;
                $make
            }
        }
    )*};
}

to_value! {
    i64 => Int, |v| Value::Int(*v);
    i32 => Int, |v| Value::Int((*v).into());
    u32 => Int, |v| Value::Int((*v).into());
    u64 => Int, |v| Value::Int(i64::try_from(*v).unwrap_or(i64::MAX));
    usize => Int, |v| Value::Int(i64::try_from(*v).unwrap_or(i64::MAX));
    bool => Int, |v| Value::Int((*v).into());
    f64 => Real, |v| Value::Real(*v);
    String => Text, |v| Value::Text(v.clone());
    str => Text, |v| Value::Text(v.to_string());
    Vec<u8> => Blob, |v| Value::Blob(v.clone());
    [u8] => Blob, |v| Value::Blob(v.to_vec());
}

impl ToValue for Value {
    const KIND: Kind = Kind::Int;
    fn to_value(&self) -> Value {
        self.clone()
    }
}

impl<T: ToValue + ?Sized> ToValue for &T {
    const KIND: Kind = T::KIND;
    fn to_value(&self) -> Value {
        (**self).to_value()
    }
}

impl<T: ToValue> ToValue for Option<T> {
    const KIND: Kind = T::KIND;
    fn to_value(&self) -> Value {
        match self {
            Some(v) => v.to_value(),
            None => Value::Null(T::KIND),
        }
    }
}

/// The parameters of a statement: `args![a, b, c]` binds `&a`, `&b`, `&c`.
#[macro_export]
#[doc(hidden)]
macro_rules! __store_args {
    ($($v:expr),* $(,)?) => {
        &[$($crate::store::sql::ToValue::to_value(&$v)),*][..]
    };
}
pub(crate) use __store_args as args;

/// Shorthands over [`Conn`] for the shapes of result the table files read.
pub trait ConnExt: Conn {
    /// The first row, if any.
    fn row(&mut self, sql: &str, params: &[Value]) -> StoreResult<Option<Row>> {
        Ok(self.query(sql, params)?.into_iter().next())
    }

    /// The first column of the first row, which must exist.
    fn one<T: FromValue>(&mut self, sql: &str, params: &[Value]) -> StoreResult<T> {
        match self.row(sql, params)? {
            Some(r) => r.get(0),
            None => Err(StoreError::Corrupt(format!("no row from {sql}"))),
        }
    }

    /// The first column of the first row, if there is a row.
    fn opt<T: FromValue>(&mut self, sql: &str, params: &[Value]) -> StoreResult<Option<T>> {
        self.row(sql, params)?.map(|r| r.get(0)).transpose()
    }

    /// The first column of every row.
    fn column<T: FromValue>(&mut self, sql: &str, params: &[Value]) -> StoreResult<Vec<T>> {
        self.query(sql, params)?.iter().map(|r| r.get(0)).collect()
    }

    /// Every row, each read by `f`.
    fn map<T>(
        &mut self,
        sql: &str,
        params: &[Value],
        f: impl FnMut(&Row) -> StoreResult<T>,
    ) -> StoreResult<Vec<T>> {
        self.query(sql, params)?.iter().map(f).collect()
    }

    /// The first row read by `f`; there must be one.
    fn first<T>(
        &mut self,
        sql: &str,
        params: &[Value],
        f: impl FnOnce(&Row) -> StoreResult<T>,
    ) -> StoreResult<T> {
        match self.row(sql, params)? {
            Some(r) => f(&r),
            None => Err(StoreError::Corrupt(format!("no row from {sql}"))),
        }
    }

    /// The first row read by `f`, if any.
    fn map_row<T>(
        &mut self,
        sql: &str,
        params: &[Value],
        f: impl FnOnce(&Row) -> StoreResult<T>,
    ) -> StoreResult<Option<T>> {
        self.row(sql, params)?.as_ref().map(f).transpose()
    }
}

impl<C: Conn + ?Sized> ConnExt for C {}

/// How many columns a list of them (`"a.id, a.kind, ..."`) names: where a row of one
/// record's columns ends in a statement that joins several.
pub(crate) const fn width(columns: &str) -> usize {
    let bytes = columns.as_bytes();
    let (mut n, mut i) = (1, 0);
    while i < bytes.len() {
        if bytes[i] == b',' {
            n += 1;
        }
        i += 1;
    }
    n
}

/// A transaction: the [`crate::store::tx`] traits are implemented on it, one file per
/// table, whichever backend runs its statements.
pub struct SqlTx<'c> {
    pub(crate) c: &'c mut dyn Conn,
    /// A job's accepted per-depth totals as this transaction last read or wrote them
    /// (encoded): the report path reads them with its other reads, so adding a decided
    /// unit's counts is a write without a read first. Every change to them goes through
    /// this `SqlTx` (`jobs.rs`), which keeps this copy current.
    pub(crate) accepted: Option<(JobId, String)>,
    /// `(job, unit)`: the job is known to have an unfinished unit besides `unit` (read
    /// with a report's other reads, so whether a decided unit completes its job needs
    /// no read of its own). Forgotten when any other unit becomes done or cancelled.
    pub(crate) unfinished_besides: Option<(JobId, UnitId)>,
}

impl<'c> SqlTx<'c> {
    /// A transaction on `c` (already begun).
    pub fn new(c: &'c mut dyn Conn) -> SqlTx<'c> {
        SqlTx {
            c,
            accepted: None,
            unfinished_besides: None,
        }
    }
}

/// A statement as PostgreSQL takes it: `?` and `?N` placeholders become `$N` (a bare
/// `?` takes the next number) and SQLite's planner hints (`INDEXED BY name`) go.
/// Quoted text is copied as it is.
pub fn for_postgres(sql: &str) -> String {
    let mut sql = std::borrow::Cow::Borrowed(sql);
    while let Some(at) = sql.find(" INDEXED BY ") {
        let name_end = sql[at + 12..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '{' || c == '}'))
            .map_or(sql.len(), |n| at + 12 + n);
        sql = std::borrow::Cow::Owned(format!("{}{}", &sql[..at], &sql[name_end..]));
    }
    numbered_placeholders(&sql)
}

fn numbered_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut next = 1;
    let mut quoted = false;
    let mut chars = sql.chars().peekable();
    while let Some(ch) = chars.next() {
        match ch {
            '\'' => {
                quoted = !quoted;
                out.push(ch);
            }
            '?' if !quoted => {
                out.push('$');
                if chars.peek().is_some_and(|c| c.is_ascii_digit()) {
                    while let Some(d) = chars.peek().copied().filter(char::is_ascii_digit) {
                        out.push(d);
                        chars.next();
                    }
                } else {
                    out.push_str(&next.to_string());
                    next += 1;
                }
            }
            _ => out.push(ch),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_for_postgres() {
        assert_eq!(
            numbered_placeholders("SELECT a FROM t WHERE b = ? AND c = ? AND d = 'x?'"),
            "SELECT a FROM t WHERE b = $1 AND c = $2 AND d = 'x?'"
        );
        assert_eq!(
            numbered_placeholders("UPDATE t SET a = ?2 WHERE id = ?1 OR ?12 IS NULL"),
            "UPDATE t SET a = $2 WHERE id = $1 OR $12 IS NULL"
        );
        assert_eq!(
            for_postgres("SELECT id FROM units u INDEXED BY units_decided WHERE id > ?"),
            "SELECT id FROM units u WHERE id > $1"
        );
    }

    #[test]
    fn a_column_list_is_as_wide_as_the_record_reading_it() {
        assert_eq!(width("a"), 1);
        assert_eq!(width("a.id, a.kind,\n     a.team"), 3);
        assert_eq!(width(super::leases::L_COLUMNS), 9);
        assert_eq!(width(super::units::U_COLUMNS), 15);
        assert_eq!(width(super::results::R_COLUMNS), 18);
        assert_eq!(width(super::accounts::COLUMNS), 12);
    }

    #[test]
    fn values_read_back_as_their_types() {
        let r = Row(vec![
            Value::Int(7),
            Value::Null(Kind::Text),
            Value::Text("open".into()),
            Value::Real(1.5),
        ]);
        assert_eq!(r.get::<u64>(0).unwrap(), 7);
        assert_eq!(r.get::<Option<String>>(1).unwrap(), None);
        assert_eq!(r.get::<String>(2).unwrap(), "open");
        assert_eq!(r.get::<f64>(3).unwrap(), 1.5);
        assert!(r.get::<String>(0).is_err());
        assert!(r.get::<i64>(9).is_err());
        assert_eq!(None::<i64>.to_value(), Value::Null(Kind::Int));
    }
}

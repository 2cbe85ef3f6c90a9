//! Fenced writes to PostgreSQL: a row keeps the highest fencing token that
//! wrote it, and an `UPDATE` carrying an older token changes nothing.
//!
//! Needs a running PostgreSQL. Give its connection string as the first
//! argument or in `DATABASE_URL`, as libpq's key-value form or a URL:
//!
//! ```text
//! DATABASE_URL='host=/var/run/postgresql user=postgres' cargo run --example fenced_postgres
//! cargo run --example fenced_postgres -- 'postgresql://app:secret@127.0.0.1/app'
//! ```
//!
//! It creates the table `fenced_account` if missing and writes the row
//! `id = 7`. The lock is on the embedded in-memory backend; with `REDIS_URL`
//! set it is on that Redis, as several processes would share it. The driver
//! is `tokio-postgres`, a dev-dependency of this example package only:
//! lock-runtime itself depends on no SQL driver.
//!
//! The pattern, with `$2` the caller's token:
//!
//! ```sql
//! UPDATE fenced_account SET balance = $1, fence = $2
//!  WHERE id = $3 AND fence <= $2
//! ```
//!
//! An update of no row means a newer holder of the lock wrote the row: this
//! caller lost its lock (paused past its lease). It must stop: not retry
//! with the same token, not write elsewhere on the strength of what it read;
//! take the lock again (a new token) and start over from a fresh read.

use lock_runtime::{fencing_token, LockClient, LockError, LockOptions};
use tokio_postgres::{Client, NoTls};

#[derive(Debug, thiserror::Error)]
enum AppError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Sql(#[from] tokio_postgres::Error),
    /// A newer holder wrote the row: stop, do not retry with this token.
    #[error(
        "account {id}: a newer holder wrote it (this token {token} is stale): the lock was \
         lost; stop, take the lock again and start from a fresh read"
    )]
    Fenced { id: i64, token: u64 },
}

/// The token as PostgreSQL's `bigint` (tokens stay far below 2^63).
fn fence(token: u64) -> i64 {
    i64::try_from(token).expect("fencing tokens are below 2^63")
}

/// Reads the balance and records `token` as the row's fence in one
/// statement, so that an older holder's later write is refused: a read
/// that a write depends on is fenced too.
async fn read(db: &Client, id: i64, token: u64) -> Result<i64, AppError> {
    let row = db
        .query_opt(
            "UPDATE fenced_account SET fence = $1 WHERE id = $2 AND fence <= $1 \
             RETURNING balance",
            &[&fence(token), &id],
        )
        .await?;
    let row = row.ok_or(AppError::Fenced { id, token })?;
    Ok(row.get(0))
}

/// Writes `balance` with `token`: refused (no row updated) when a newer
/// token wrote the row.
async fn write(db: &Client, id: i64, balance: i64, token: u64) -> Result<(), AppError> {
    let updated = db
        .execute(
            "UPDATE fenced_account SET balance = $1, fence = $2 \
             WHERE id = $3 AND fence <= $2",
            &[&balance, &fence(token), &id],
        )
        .await?;
    if updated == 0 {
        return Err(AppError::Fenced { id, token });
    }
    Ok(())
}

/// Adds `amount` to the account under its lock, with the lock's token:
/// the new balance and the token used.
async fn deposit(
    lock: &LockClient,
    db: &Client,
    id: i64,
    amount: i64,
) -> Result<(i64, u64), AppError> {
    let key = format!("account:{id}");
    lock.run_locked(&key, LockOptions::new(), async {
        let token = fencing_token().expect("inside a locked body");
        let balance = read(db, id, token).await? + amount;
        write(db, id, balance, token).await?;
        Ok((balance, token))
    })
    .await
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some(url) = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("DATABASE_URL").ok())
    else {
        eprintln!(
            "usage: fenced_postgres <connection string> (or DATABASE_URL), such as \
             'host=/var/run/postgresql user=postgres'"
        );
        std::process::exit(2);
    };
    let lock = match std::env::var("REDIS_URL") {
        Ok(redis) => LockClient::connect(&redis).await?,
        Err(_) => LockClient::in_memory(),
    };
    let (db, connection) = tokio_postgres::connect(&url, NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("PostgreSQL connection: {e}");
        }
    });
    db.batch_execute(
        "CREATE TABLE IF NOT EXISTS fenced_account (
             id bigint PRIMARY KEY,
             balance bigint NOT NULL,
             fence bigint NOT NULL DEFAULT 0
         );
         INSERT INTO fenced_account (id, balance) VALUES (7, 0) ON CONFLICT (id) DO NOTHING",
    )
    .await?;

    let (_, first) = deposit(&lock, &db, 7, 100).await?;
    let (balance, second) = deposit(&lock, &db, 7, 50).await?;
    println!("two holders in turn: balance {balance} (tokens {first}, then {second})");

    // The first holder, paused past its lease, wakes and writes with its
    // old token: the row refuses it, and the caller must stop there.
    match write(&db, 7, 1_000_000, first).await {
        Err(e @ AppError::Fenced { .. }) => println!("the stale write was refused: {e}"),
        Ok(()) => return Err("a stale token wrote the row".into()),
        Err(e) => return Err(e.into()),
    }
    let row = db
        .query_one(
            "SELECT balance, fence FROM fenced_account WHERE id = 7",
            &[],
        )
        .await?;
    let (balance, stored): (i64, i64) = (row.get(0), row.get(1));
    println!("the row still holds the newer holder's write: balance {balance}, fence {stored}");
    Ok(())
}

//! A campaigner for the multi-process election tests
//! (tests/election_processes.rs): one OS process that leads a key with
//! `lead`, ticks while it leads, and resigns when told to.
//!
//! `leader-worker <redis-url> <key> <lease-ms> <tick-ms> <work-ms>
//! <rest-ms>`: campaigns for `key` with a lease of `lease-ms`. Each term
//! ticks at once and then every `tick-ms`: it reads the time (wall-clock ms
//! since the UNIX epoch, one clock for every process on the machine), does
//! `work-ms` of synchronous work (a blocking sleep standing in for the
//! computation between reading a term's token and writing with it: a pause
//! from outside can land there, after the lock's lease check), then appends
//! `<pid> <token> <ms>` to the Redis list `ticks` by a fenced write on the
//! resource `ticks` with the term's token. A line `resign` on stdin makes
//! the leader (if it leads) end its term: its future returns `Ok`, and the
//! process campaigns again after `rest-ms`.
//!
//! Printed, one line each:
//! - `campaign <ms>`: `lead` is called;
//! - `elected <token> <ms>`: a term starts;
//! - `refused <token> <ms> <stored>`: a tick taken at `ms` with `token` was
//!   refused by the resource, which a newer term (`stored`) wrote;
//! - `resign <token> <ms>`: the term `token` resigns (its future returns
//!   `Ok` right after);
//! - `error <ms> <error>`: `lead` returned an error; the process
//!   campaigns again. A refused tick ends the term with its error, which
//!   `lead` counts as the term's loss (the term was lost before the
//!   refusal): it campaigns again by itself and returns nothing.
//!
//! The process exits by itself after 10 minutes at most.

use std::io::BufRead;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_runtime::{LockClient, LockError, LockOptions, Term};
use tokio::sync::watch;
use tokio::time::Instant;

type Error = Box<dyn std::error::Error>;

/// How long a worker lives at most: the tests kill it well before.
const LIFETIME: Duration = Duration::from_secs(600);

/// The shape of a worker's terms.
#[derive(Clone, Copy)]
struct Shape {
    lease: Duration,
    tick: Duration,
    work: Duration,
    rest: Duration,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, key, lease, tick, work, rest] = args.as_slice() else {
        return Err(
            "usage: leader-worker <redis-url> <key> <lease-ms> <tick-ms> <work-ms> <rest-ms>"
                .into(),
        );
    };
    let ms = |arg: &String| arg.parse().map(Duration::from_millis);
    let shape = Shape {
        lease: ms(lease)?,
        tick: ms(tick)?,
        work: ms(work)?,
        rest: ms(rest)?,
    };
    let client = LockClient::connect(url).await?;
    let resign = resign_requests();
    let end = Instant::now() + LIFETIME;
    while Instant::now() < end {
        println!("campaign {}", unix_ms());
        let options = LockOptions::new().lease(shape.lease);
        let led = client
            .lead(key, options, |term| {
                leader(client.clone(), term, shape, resign.clone())
            })
            .await;
        match led {
            Ok(()) => tokio::time::sleep(shape.rest).await,
            Err(error) => {
                println!("error {} {error}", unix_ms());
                tokio::time::sleep(shape.tick).await;
            }
        }
    }
    Ok(())
}

/// Wall-clock milliseconds since the UNIX epoch.
fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_millis()
}

/// A counter of the `resign` lines read from stdin (by a thread of its
/// own: the runtime here has no stdin of its own).
fn resign_requests() -> watch::Receiver<u64> {
    let (requests, receiver) = watch::channel(0u64);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            match line {
                Ok(line) if line.trim() == "resign" => requests.send_modify(|n| *n += 1),
                Ok(_) => {}
                Err(_) => return,
            }
        }
    });
    receiver
}

/// One term's work: ticks until told to resign (`Ok`) or a tick is refused
/// (`Err(Fenced)`); dropped at its next await when the term is lost.
async fn leader(
    client: LockClient,
    term: Term,
    shape: Shape,
    mut resign: watch::Receiver<u64>,
) -> Result<(), LockError> {
    let token = term.token();
    println!("elected {token} {}", unix_ms());
    // Only a request made during this term counts.
    resign.borrow_and_update();
    let mut listening = true;
    loop {
        let at = unix_ms();
        // The synchronous part of a tick: a pause can land here, between
        // the lock's check before this poll and the write.
        std::thread::sleep(shape.work);
        let written = tokio::spawn(tick(client.clone(), token, at)).await;
        written.expect("the tick task does not panic")?;
        tokio::select! {
            () = tokio::time::sleep(shape.tick) => {}
            changed = resign.changed(), if listening => {
                if changed.is_ok() {
                    println!("resign {token} {}", unix_ms());
                    return Ok(());
                }
                // Stdin closed: no more requests.
                listening = false;
            }
        }
    }
}

/// Writes a tick taken at `at` with `token`, in a task of its own: its
/// answer is seen (a refusal printed) even when the term's future is
/// dropped at its next await, as a stale leader's is once resumed.
async fn tick(client: LockClient, token: u64, at: u128) -> Result<(), LockError> {
    let written = client
        .fenced_write("ticks")
        .cmd(
            "RPUSH",
            ["ticks"],
            format!("{} {token} {at}", std::process::id()),
        )
        .token(token)
        .run()
        .await;
    if let Err(LockError::Fenced { stored, .. }) = &written {
        println!("refused {token} {at} {stored}");
    }
    written.map(drop)
}

//! Callers that list the same keys in random orders, for the tests of
//! several keys at once on each deployment: none may deadlock, no key may
//! have two holders, and the time to take all keys is measured against the
//! time to take one.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_runtime::{LockClient, LockError, LockOptions};

/// What a contention run found.
#[derive(Debug)]
pub struct Figures {
    /// Calls made on the whole set.
    pub calls: usize,
    /// Calls that did not get their keys within their (long) wait.
    pub timeouts: usize,
    /// Times a body entered while another body was inside.
    pub overlaps: usize,
    /// Time from the call to its body, on the whole set: p50 and p99.
    pub all_p50: Duration,
    pub all_p99: Duration,
    /// The same on the first key alone.
    pub one_p50: Duration,
    pub one_p99: Duration,
}

/// `tasks` callers (over `clients`, in turn), each making `rounds` calls
/// on `keys` in an order of its own (a shuffle per call), bodies a
/// millisecond long; then the same on the first key alone.
/// `LOCK_SEVERAL_ROUNDS` sets the rounds for a longer run.
pub async fn contention(
    clients: &[LockClient],
    keys: &[&str],
    tasks: usize,
    rounds: usize,
) -> Figures {
    // A longer run: `LOCK_SEVERAL_ROUNDS=100`.
    let rounds = std::env::var("LOCK_SEVERAL_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(rounds);
    let (all, timeouts, overlaps) = run(clients, keys, tasks, rounds).await;
    let (one, one_timeouts, one_overlaps) = run(clients, &keys[..1], tasks, rounds).await;
    assert_eq!((one_timeouts, one_overlaps), (0, 0), "the one-key baseline");
    let figures = Figures {
        calls: all.len() + timeouts,
        timeouts,
        overlaps,
        all_p50: quantile(&all, 0.5),
        all_p99: quantile(&all, 0.99),
        one_p50: quantile(&one, 0.5),
        one_p99: quantile(&one, 0.99),
    };
    eprintln!(
        "several keys ({} keys, {tasks} callers): {figures:?}",
        keys.len()
    );
    figures
}

/// The run: the time each call took to enter its body, and how many
/// timed out or overlapped.
async fn run(
    clients: &[LockClient],
    keys: &[&str],
    tasks: usize,
    rounds: usize,
) -> (Vec<Duration>, usize, usize) {
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for task in 0..tasks {
        let client = clients[task % clients.len()].clone();
        let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
        let (inside, overlaps) = (inside.clone(), overlaps.clone());
        handles.push(tokio::spawn(async move {
            let mut seed = 0x9E37_79B9_7F4A_7C15_u64 ^ (task as u64 + 1);
            let mut waits = Vec::with_capacity(rounds);
            let mut timeouts = 0;
            for _ in 0..rounds {
                let mut order = keys.clone();
                shuffle(&mut order, &mut seed);
                let start = Instant::now();
                let options = LockOptions::new().wait(Duration::from_secs(30));
                let called = client
                    .run_locked_all(&order, options, async {
                        let entered = start.elapsed();
                        if inside.fetch_add(1, Ordering::SeqCst) > 0 {
                            overlaps.fetch_add(1, Ordering::SeqCst);
                        }
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        inside.fetch_sub(1, Ordering::SeqCst);
                        Ok::<_, LockError>(entered)
                    })
                    .await;
                match called {
                    Ok(entered) => waits.push(entered),
                    Err(LockError::Timeout { .. }) => timeouts += 1,
                    Err(error) => panic!("a call failed: {error}"),
                }
            }
            (waits, timeouts)
        }));
    }
    let mut waits = Vec::new();
    let mut timeouts = 0;
    for handle in handles {
        let (w, t) = tokio::time::timeout(Duration::from_secs(120), handle)
            .await
            .expect("the callers finish")
            .expect("task");
        waits.extend(w);
        timeouts += t;
    }
    (waits, timeouts, overlaps.load(Ordering::SeqCst))
}

/// Fisher-Yates with a xorshift generator.
fn shuffle(keys: &mut [String], seed: &mut u64) {
    for i in (1..keys.len()).rev() {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        keys.swap(i, (*seed % (i as u64 + 1)) as usize);
    }
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let mut all = sorted.to_vec();
    all.sort();
    all.get(((all.len() as f64 - 1.0) * q).round() as usize)
        .copied()
        .unwrap_or_default()
}

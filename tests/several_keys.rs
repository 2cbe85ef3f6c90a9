//! Several keys at once, all or nothing (`run_locked_all`), on Redis and
//! the embedded backend: every key held while the body runs and none after;
//! a call that finds one key taken holds none; callers that list the same
//! keys in any order never deadlock; waiting wakes on the release of the
//! key that blocked; duplicates, re-entry, tokens, loss, cancellation and
//! panics; the modes and the options refused.
mod support;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_runtime::{fencing_token, fencing_token_of, LockClient, LockError, LockMode, LockOptions};
use support::{Env, Holder};

/// Whether `key` (as the caller writes it) is held, by `inspect`.
async fn held(client: &LockClient, key: &str) -> bool {
    client.inspect(key).await.expect("inspect").is_held()
}

/// The future is `Send` when its inputs are.
fn assert_send<F: Future + Send>(future: F) -> F {
    future
}

on_both_backends! {
    /// Every key is held while the body runs, the body sees each key's
    /// token, and every key is free when the call returns.
    async fn every_key_is_held_in_the_body_and_none_after(env: Env) {
        let client = &env.client;
        let keys = ["acct:1", "acct:2", "acct:3"];
        let seen = assert_send(client.run_locked_all(keys, LockOptions::new(), async {
            let tokens: Vec<Option<u64>> = keys.iter().map(|k| fencing_token_of(k)).collect();
            Ok::<_, LockError>((tokens, fencing_token()))
        }))
        .await
        .expect("all three taken");
        let (tokens, innermost) = seen;
        assert!(tokens.iter().all(Option::is_some), "{tokens:?}");
        assert_eq!(innermost, tokens[0], "fencing_token() is the first key's");
        for key in keys {
            assert!(!held(client, key).await, "{key} given back");
        }
        // Held inside the body, seen from outside.
        let (inside_tx, inside_rx) = tokio::sync::oneshot::channel();
        let (leave_tx, leave_rx) = tokio::sync::oneshot::channel::<()>();
        let holder = tokio::spawn({
            let client = client.clone();
            async move {
                client
                    .run_locked_all(["acct:1", "acct:2"], LockOptions::new(), async {
                        let _ = inside_tx.send(());
                        let _ = leave_rx.await;
                        Ok::<_, LockError>(())
                    })
                    .await
            }
        });
        inside_rx.await.expect("inside");
        assert!(held(client, "acct:1").await && held(client, "acct:2").await);
        let _ = leave_tx.send(());
        holder.await.expect("task").expect("holder");
    }
}

on_both_backends! {
    /// A zero-wait call that finds one of its keys taken fails naming that
    /// key, and holds none of the others afterwards.
    async fn a_call_that_finds_one_key_taken_holds_none(env: Env) {
        let other = env.other_client().await;
        let holder = Holder::start(&other, "stock:b", LockOptions::new()).await;
        let keys = ["stock:a", "stock:b", "stock:c"];
        let error = env
            .client
            .run_locked_all(keys, LockOptions::new().wait(Duration::ZERO), async {
                Ok::<_, LockError>(())
            })
            .await
            .expect_err("stock:b is held");
        match &error {
            LockError::Timeout { key, .. } => assert_eq!(key, "lock:stock:b"),
            other => panic!("not a timeout: {other}"),
        }
        assert!(!held(&env.client, "stock:a").await, "stock:a left held");
        assert!(!held(&env.client, "stock:c").await, "stock:c left held");
        holder.release().await.expect("holder");
    }
}

on_both_backends! {
    /// A waiting call holds none of its keys, and takes them all as soon as
    /// the key that blocked it is released, long before that holder's
    /// lease would end.
    async fn a_waiting_call_holds_nothing_and_wakes_on_the_release(env: Env) {
        let other = env.other_client().await;
        let lease = Duration::from_secs(20);
        let holder = Holder::start(&other, "room:2", LockOptions::new().lease(lease)).await;
        let client = env.client.clone();
        let waiting = tokio::spawn(async move {
            client
                .run_locked_all(["room:1", "room:2"], LockOptions::new().wait(lease), async {
                    Ok::<_, LockError>(Instant::now())
                })
                .await
        });
        // The waiter asked and was refused: room:1 stays free meanwhile.
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert!(!held(&env.client, "room:1").await, "room:1 held while waiting");
        }
        let released = Instant::now();
        holder.release().await.expect("holder");
        let entered = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("woken by the release, not the lease")
            .expect("task")
            .expect("both taken");
        assert!(entered >= released);
    }
}

on_both_backends! {
    /// Callers that list the same keys in opposite orders, many times over,
    /// all finish (no deadlock), and never share a key.
    async fn callers_listing_keys_in_any_order_never_deadlock(env: Env) {
        let inside = Arc::new(AtomicUsize::new(0));
        let overlaps = Arc::new(AtomicUsize::new(0));
        let orders = [["x", "y", "z"], ["z", "y", "x"], ["y", "x", "z"], ["x", "z", "y"]];
        let mut tasks = Vec::new();
        for (n, order) in orders.into_iter().enumerate() {
            let client = if n % 2 == 0 { env.client.clone() } else { env.other_client().await };
            let (inside, overlaps) = (inside.clone(), overlaps.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..15 {
                    let options = LockOptions::new().wait(Duration::from_secs(30));
                    client
                        .run_locked_all(order, options, async {
                            if inside.fetch_add(1, Ordering::SeqCst) > 0 {
                                overlaps.fetch_add(1, Ordering::SeqCst);
                            }
                            tokio::task::yield_now().await;
                            inside.fetch_sub(1, Ordering::SeqCst);
                            Ok::<_, LockError>(())
                        })
                        .await
                        .expect("every call gets its keys");
                }
            }));
        }
        for task in tasks {
            tokio::time::timeout(Duration::from_secs(60), task)
                .await
                .expect("no deadlock")
                .expect("task");
        }
        assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    }
}

on_both_backends! {
    /// Duplicates are one key; keys held around the call are re-entered
    /// (same token) and the others taken.
    async fn duplicates_are_one_key_and_held_keys_are_reentered(env: Env) {
        let client = &env.client;
        client
            .run_locked_all(["d", "d", "d"], LockOptions::new().wait(Duration::ZERO), async {
                Ok::<_, LockError>(())
            })
            .await
            .expect("one key, listed three times");
        client
            .run_locked("outer", LockOptions::new(), async {
                let outer = fencing_token_of("outer").expect("outer held");
                client
                    .run_locked_all(["other", "outer"], LockOptions::new().wait(Duration::ZERO), async {
                        assert_eq!(fencing_token_of("outer"), Some(outer), "re-entered");
                        assert_eq!(fencing_token(), fencing_token_of("other"), "the first key's");
                        Ok::<_, LockError>(())
                    })
                    .await?;
                assert!(!held(client, "other").await, "the inner call gave back its key");
                assert_eq!(fencing_token(), Some(outer));
                Ok::<_, LockError>(())
            })
            .await
            .expect("nested");
    }
}

on_both_backends! {
    /// A call cancelled in its body, or whose body panics, leaves none of
    /// its keys held.
    async fn cancelled_or_panicking_calls_leave_no_key_held(env: Env) {
        let (inside_tx, inside_rx) = tokio::sync::oneshot::channel();
        let client = env.client.clone();
        let call = tokio::spawn(async move {
            client
                .run_locked_all(["c:1", "c:2"], LockOptions::new(), async {
                    let _ = inside_tx.send(());
                    std::future::pending::<()>().await;
                    Ok::<_, LockError>(())
                })
                .await
        });
        inside_rx.await.expect("inside");
        call.abort();
        let _ = call.await;
        let client = env.client.clone();
        let panicking = tokio::spawn(async move {
            client
                .run_locked_all(["c:3", "c:1"], LockOptions::new().wait(Duration::from_secs(10)), async {
                    panic!("the body panics");
                    #[allow(unreachable_code)]
                    Ok::<_, LockError>(())
                })
                .await
        });
        assert!(panicking.await.is_err(), "the task panicked");
        for key in ["c:1", "c:2", "c:3"] {
            let deadline = Instant::now() + Duration::from_secs(10);
            while held(&env.client, key).await {
                assert!(Instant::now() < deadline, "{key} still held");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

on_both_backends! {
    /// The loss of any key stops the body with `Lost` naming that key, and
    /// the other keys are given back.
    async fn losing_one_key_stops_the_body_naming_it(env: Env) {
        let (inside_tx, inside_rx) = tokio::sync::oneshot::channel();
        let client = env.client.clone();
        let options = LockOptions::new().lease(Duration::from_millis(600));
        let call = tokio::spawn(async move {
            client
                .run_locked_all(["l:1", "l:2"], options, async {
                    let _ = inside_tx.send(());
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    Ok::<_, LockError>(())
                })
                .await
        });
        inside_rx.await.expect("inside");
        let other = env.other_client().await;
        assert!(other.force_unlock("l:2").await.expect("force unlock"));
        let error = tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .expect("stopped within a few renewals")
            .expect("task")
            .expect_err("lost");
        match &error {
            LockError::Lost { key, .. } => assert_eq!(key, "lock:l:2"),
            other => panic!("not a loss: {other}"),
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while held(&env.client, "l:1").await {
            assert!(Instant::now() < deadline, "l:1 still held");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

on_both_backends! {
    /// Readers of overlapping key sets share them; a writer of one of the
    /// keys waits for them.
    async fn readers_of_several_keys_share_them(env: Env) {
        let read = LockOptions::new().mode(LockMode::Read).wait(Duration::ZERO);
        let client = &env.client;
        client
            .run_locked_all(["r:1", "r:2"], read, async {
                let other = tokio::spawn({
                    let client = client.clone();
                    async move {
                        client
                            .run_locked_all(["r:2", "r:3"], read, async { Ok::<_, LockError>(()) })
                            .await
                    }
                });
                other.await.expect("task").expect("a second reader shares r:2");
                let writer = tokio::spawn({
                    let client = client.clone();
                    async move {
                        client
                            .run_locked_all(["r:3", "r:2"], LockOptions::new().wait(Duration::ZERO), async {
                                Ok::<_, LockError>(())
                            })
                            .await
                    }
                });
                let error = writer.await.expect("task").expect_err("r:2 is read");
                assert!(matches!(error, LockError::Timeout { ref key, .. } if key == "lock:r:2"), "{error}");
                Ok::<_, LockError>(())
            })
            .await
            .expect("readers");
        assert!(!held(client, "r:3").await, "the writer left r:3 free");
    }
}

on_both_backends! {
    /// Options that have no meaning over a set of keys, and an empty list,
    /// are refused with `Invalid`.
    async fn meaningless_options_and_no_keys_are_refused(env: Env) {
        let refused = [
            LockOptions::new().permits(2),
            LockOptions::new().fair(true),
            LockOptions::new().hold_at_least(Duration::from_secs(1)),
        ];
        for options in refused {
            let error = env
                .client
                .run_locked_all(["a", "b"], options, async { Ok::<_, LockError>(()) })
                .await
                .expect_err("refused");
            assert!(matches!(error, LockError::Invalid { .. }), "{error}");
        }
        let none: [&str; 0] = [];
        let error = env
            .client
            .run_locked_all(none, LockOptions::new(), async { Ok::<_, LockError>(()) })
            .await
            .expect_err("no keys");
        assert!(matches!(error, LockError::Invalid { .. }), "{error}");
    }
}

/// A zero-wait call that finds one key taken sends one request, and the
/// free function is lazy: the client is the one in use when it is polled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_zero_wait_call_sends_one_request() {
    let env = Env::new(support::Kind::Redis).await;
    let server = env.server.as_ref().expect("a Redis server");
    let other = env.other_client().await;
    other
        .run_locked_all(["warm:1", "warm:2"], LockOptions::new(), async {
            Ok::<_, LockError>(())
        })
        .await
        .expect("the script loaded");
    let holder = Holder::start(&other, "t:2", LockOptions::new()).await;
    let before = server.command_calls("evalsha");
    let call = lock_runtime::run_locked_all(
        ["t:1", "t:2", "t:3"],
        LockOptions::new().wait(Duration::ZERO),
        async { Ok::<_, LockError>(()) },
    );
    let error = lock_runtime::with_client(env.client.clone(), call)
        .await
        .expect_err("t:2 held");
    assert!(matches!(error, LockError::Timeout { .. }), "{error}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(server.command_calls("evalsha") - before, 1);
    holder.release().await.expect("holder");
}

on_both_backends! {
    /// Four callers over two clients, each listing three keys in a new
    /// random order at every call: no deadlock, no key with two holders.
    async fn random_orders_under_contention(env: Env) {
        let clients = [env.client.clone(), env.other_client().await];
        let figures = support::several::contention(&clients, &["k:a", "k:b", "k:c"], 4, 25).await;
        assert_eq!((figures.timeouts, figures.overlaps), (0, 0), "{figures:?}");
    }
}

on_both_backends! {
    /// A call cancelled while it waits (between requests, or with one in
    /// flight) leaves no key held and no place in this client's line: once
    /// the holder leaves, a zero-wait call on the same keys gets them all.
    async fn a_call_cancelled_while_it_waits_leaves_nothing_behind(env: Env) {
        let other = env.other_client().await;
        let holder = Holder::start(&other, "w:2", LockOptions::new()).await;
        for delay_ms in [0, 1, 5, 30] {
            let client = env.client.clone();
            let waiting = tokio::spawn(async move {
                client
                    .run_locked_all(["w:1", "w:2", "w:3"], LockOptions::new(), async {
                        Ok::<_, LockError>(())
                    })
                    .await
            });
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            waiting.abort();
            let _ = waiting.await;
        }
        holder.release().await.expect("holder");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let taken = env
                .client
                .run_locked_all(["w:3", "w:2", "w:1"], LockOptions::new().wait(Duration::ZERO), async {
                    Ok::<_, LockError>(())
                })
                .await;
            match taken {
                Ok(()) => break,
                // A give-back of a request cut off in flight runs in the
                // background.
                Err(LockError::Timeout { .. }) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(error) => panic!("keys left held after the cancelled calls: {error}"),
            }
        }
    }
}

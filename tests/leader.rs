//! Leader election (`lead`), on Redis and the embedded backend: a resigning
//! leader hands over to a campaigner woken by the release; tokens grow term
//! by term; a lost term signals its loss, its future is dropped and the
//! leader's function is called again with a newer term; the future's error
//! and the client's shutdown end `lead`; options a leader cannot take are
//! refused; the future is `Send`.
mod support;

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_runtime::{
    fencing_token, LockClient, LockError, LockMode, LockOptions, LossReason, Term, TermEnd,
};
use support::{eventually, Env};
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::time::{timeout, Instant};

/// Long enough for any step on a busy machine; reached only on a failure.
const LIMIT: Duration = Duration::from_secs(20);

/// The future is `Send` when its inputs are.
fn assert_send<F: Future + Send>(future: F) -> F {
    future
}

/// An error of the leader's own, beside the lock's.
#[derive(Debug)]
enum AppError {
    Lock(LockError),
    Stopped,
}

impl From<LockError> for AppError {
    fn from(error: LockError) -> Self {
        AppError::Lock(error)
    }
}

/// Whether the term's future `ended` is ready at its first poll.
async fn at_once<F: Future>(ended: F) -> Option<F::Output> {
    tokio::select! {
        biased;
        output = ended => Some(output),
        () = std::future::ready(()) => None,
    }
}

/// Waits until another owner waits for the lock `key` (full key): on Redis
/// until the holder's lock is marked waited-for and the waiter's client has
/// subscribed to its release channel, so that the release wakes it; the
/// embedded backend shows no waiter, so there the campaigner is given a
/// moment to line up (the bound below is met either way, but only a
/// campaigner that waited shows the wake-up).
async fn campaigner_waits(env: &Env, key: &str) {
    let Some(server) = &env.server else {
        tokio::time::sleep(Duration::from_millis(200)).await;
        return;
    };
    let waited = eventually(LIMIT, || {
        let marked = server
            .lock_value(key)
            .is_some_and(|(_, state, _)| state == "w");
        marked && support::release_subscribers(server, key) > 0
    })
    .await;
    assert!(waited, "the campaigner never waited for {key}");
}

/// A leader on `client` for `key` that reports each term on `terms` and
/// resigns when `resign` is notified.
fn leader(
    client: LockClient,
    key: &'static str,
    terms: mpsc::UnboundedSender<(Term, Instant)>,
    resign: Arc<Notify>,
) -> tokio::task::JoinHandle<Result<(), LockError>> {
    tokio::spawn(async move {
        client
            .lead(key, LockOptions::new(), |term| {
                let (terms, resign) = (terms.clone(), resign.clone());
                async move {
                    terms
                        .send((term, Instant::now()))
                        .expect("the test listens");
                    resign.notified().await;
                    Ok(())
                }
            })
            .await
    })
}

on_both_backends! {
    /// A leader that returns `Ok` ends its term and `lead` returns `Ok`; a
    /// second client campaigning meanwhile leads within 500 ms of the
    /// resignation (woken by the release, the lease being 30 s), with a
    /// greater token; the key is free once the second resigns too.
    async fn a_campaigner_leads_within_500_ms_of_a_resignation(env: Env) {
        let (terms, mut elected) = mpsc::unbounded_channel();
        let (resign_a, resign_b) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let a = leader(env.client.clone(), "scheduler", terms.clone(), resign_a.clone());
        let (first, _) = timeout(LIMIT, elected.recv()).await.expect("a leads").expect("a term");
        let b = leader(env.other_client().await, "scheduler", terms, resign_b.clone());
        campaigner_waits(&env, "lock:scheduler").await;
        assert!(!b.is_finished());
        let resigned = Instant::now();
        resign_a.notify_one();
        let (second, at) = timeout(LIMIT, elected.recv()).await.expect("b leads").expect("b term");
        let handover = at.duration_since(resigned);
        assert!(handover < Duration::from_millis(500), "handed over in {handover:?}");
        assert!(second.token() > first.token(), "{} then {}", first.token(), second.token());
        timeout(LIMIT, a).await.expect("a returns").expect("a task").expect("a resigned");
        assert_eq!(at_once(first.ended()).await, Some(TermEnd::Returned));
        assert_eq!(second.end(), None);
        resign_b.notify_one();
        timeout(LIMIT, b).await.expect("b returns").expect("b task").expect("b resigned");
        assert_eq!(second.end(), Some(TermEnd::Returned));
        assert!(!env.is_locked("lock:scheduler").await);
    }
}

on_both_backends! {
    /// Inside the leader's future the fencing token is the term's, a locked
    /// call on the key re-enters the term's hold (with no wait), and the
    /// key is seen held, with the term's token, by another client.
    async fn inside_a_term_the_token_is_the_term_s_and_the_key_re_enters(env: Env) {
        let other = env.other_client().await;
        let client = env.client.clone();
        env.client
            .lead("reentry", LockOptions::new(), |term| {
                let (client, other) = (client.clone(), other.clone());
                async move {
                    assert_eq!(fencing_token(), Some(term.token()));
                    let inner = LockOptions::new().wait(Duration::ZERO);
                    let token = client
                        .run_locked("reentry", inner, async { Ok::<_, LockError>(fencing_token()) })
                        .await?;
                    assert_eq!(token, Some(term.token()));
                    let info = other.inspect("reentry").await?;
                    assert!(info.is_held());
                    assert_eq!(info.fencing_token, Some(term.token()));
                    Ok::<_, LockError>(())
                }
            })
            .await
            .expect("the term ran");
    }
}

on_both_backends! {
    /// A term lost to `force_unlock` from another client: `lost()` and
    /// `ended()` complete with the loss (at once when asked again), the
    /// term's future is dropped before the leader's function is called
    /// again, and the next term has a greater token.
    async fn a_lost_term_signals_and_the_next_term_has_a_greater_token(
        env: Env = LockClient::builder().default_lease(Duration::from_millis(1500))
    ) {
        let (terms, mut elected) = mpsc::unbounded_channel();
        let dropped = Arc::new(AtomicBool::new(false));
        let calls = Arc::new(AtomicUsize::new(0));
        let client = env.client.clone();
        let leading = {
            let (dropped, calls) = (dropped.clone(), calls.clone());
            tokio::spawn(async move {
                client
                    .lead("lost", LockOptions::new(), move |term| {
                        let n = calls.fetch_add(1, Ordering::SeqCst);
                        let was_dropped = dropped.load(Ordering::SeqCst);
                        let guard = SetOnDrop(dropped.clone());
                        terms.send((term, was_dropped)).expect("the test listens");
                        async move {
                            let _guard = guard;
                            if n == 0 {
                                std::future::pending::<()>().await;
                            }
                            Ok::<_, LockError>(())
                        }
                    })
                    .await
            })
        };
        let (first, _) = timeout(LIMIT, elected.recv()).await.expect("elected").expect("term");
        let lost = tokio::spawn({
            let first = first.clone();
            async move { first.lost().await }
        });
        let ended = tokio::spawn({
            let first = first.clone();
            async move { first.ended().await }
        });
        let forced = env.other_client().await.force_unlock("lost").await.expect("force_unlock");
        assert!(forced, "the term's lock was held");
        let reason = timeout(LIMIT, lost).await.expect("lost() completed").expect("task");
        assert_eq!(reason, LossReason::ForceUnlocked);
        let end = timeout(LIMIT, ended).await.expect("ended() completed").expect("task");
        assert_eq!(end, TermEnd::Lost(LossReason::ForceUnlocked));
        assert_eq!(at_once(first.lost()).await, Some(LossReason::ForceUnlocked));
        let (second, first_dropped) =
            timeout(LIMIT, elected.recv()).await.expect("elected again").expect("term");
        assert!(first_dropped, "f was called again before the lost term's future was dropped");
        assert!(second.token() > first.token(), "{} then {}", first.token(), second.token());
        timeout(LIMIT, leading).await.expect("returns").expect("task").expect("resigned");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert_eq!(second.end(), Some(TermEnd::Returned));
        assert_eq!(at_once(second.lost()).await, None);
    }
}

/// Sets its flag when dropped.
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

on_both_backends! {
    /// A leader whose lease runs out unrenewed loses its term by the clock:
    /// `lost()` says it expired, and the next term has a greater token.
    async fn a_term_whose_lease_runs_out_is_lost_and_the_next_is_newer(env: Env) {
        let options = LockOptions::new().lease(Duration::from_millis(300)).renew(false);
        let (terms, mut elected) = mpsc::unbounded_channel();
        let client = env.client.clone();
        let leading = tokio::spawn(async move {
            let mut n = 0;
            client
                .lead("expiring", options, move |term| {
                    n += 1;
                    terms.send(term).expect("the test listens");
                    let last = n;
                    async move {
                        if last == 1 {
                            std::future::pending::<()>().await;
                        }
                        Ok::<_, LockError>(())
                    }
                })
                .await
        });
        let first = timeout(LIMIT, elected.recv()).await.expect("elected").expect("term");
        let reason = timeout(LIMIT, first.lost()).await.expect("lost");
        assert_eq!(reason, LossReason::Expired);
        let second = timeout(LIMIT, elected.recv()).await.expect("again").expect("term");
        assert!(second.token() > first.token());
        timeout(LIMIT, leading).await.expect("returns").expect("task").expect("resigned");
    }
}

on_both_backends! {
    /// The future's error ends `lead` with it, and the key is released.
    async fn the_future_s_error_is_returned_and_the_key_released(env: Env) {
        let (kept, mut term) = oneshot::channel();
        let mut kept = Some(kept);
        let result = env
            .client
            .lead("failing", LockOptions::new(), |term| {
                let _ = kept.take().map(|kept| kept.send(term));
                async { Err::<(), _>(AppError::Stopped) }
            })
            .await;
        assert!(matches!(result, Err(AppError::Stopped)), "{result:?}");
        let term = term.try_recv().expect("the term was given");
        assert_eq!(term.end(), Some(TermEnd::Returned));
        assert!(!env.is_locked("lock:failing").await);
    }
}

on_both_backends! {
    /// At shutdown a running term is stopped at the deadline and `lead`
    /// returns `ShutDown`; the term ended with `ShutDown`. A `lead` on a
    /// shut-down client returns `ShutDown` at once.
    async fn shutdown_ends_lead_with_shut_down(env: Env) {
        let (terms, mut elected) = mpsc::unbounded_channel();
        let client = env.client.clone();
        let leading = tokio::spawn(async move {
            client
                .lead("stopping", LockOptions::new(), |term| {
                    terms.send(term).expect("the test listens");
                    async {
                        std::future::pending::<()>().await;
                        Ok::<_, AppError>(())
                    }
                })
                .await
        });
        let term = timeout(LIMIT, elected.recv()).await.expect("elected").expect("term");
        env.client.shutdown(Duration::from_millis(100)).await;
        let result = timeout(LIMIT, leading).await.expect("returns").expect("task");
        assert!(
            matches!(result, Err(AppError::Lock(LockError::ShutDown { .. }))),
            "{result:?}"
        );
        assert_eq!(term.end(), Some(TermEnd::ShutDown));
        let again = env
            .client
            .lead("stopping", LockOptions::new(), |_| async { Ok::<_, LockError>(()) })
            .await;
        assert!(matches!(again, Err(LockError::ShutDown { .. })), "{again:?}");
    }
}

on_both_backends! {
    /// A leader that watches its term steps down at shutdown: the term ends
    /// with `ShutDown` when the shutdown starts, the leader returns, the
    /// shutdown finishes long before its deadline, and `lead` returns
    /// `ShutDown`; the key is free.
    async fn a_leader_steps_down_when_the_shutdown_starts(env: Env) {
        let (terms, mut elected) = mpsc::unbounded_channel();
        let client = env.client.clone();
        let leading = tokio::spawn(async move {
            client
                .lead("stepping-down", LockOptions::new(), |term| {
                    terms.send(term.clone()).expect("the test listens");
                    async move {
                        assert_eq!(term.ended().await, TermEnd::ShutDown);
                        Ok::<_, LockError>(())
                    }
                })
                .await
        });
        let term = timeout(LIMIT, elected.recv()).await.expect("elected").expect("term");
        let deadline = Duration::from_secs(60);
        timeout(LIMIT, env.client.shutdown(deadline)).await.expect("shut down before its deadline");
        let result = timeout(LIMIT, leading).await.expect("returns").expect("task");
        assert!(matches!(result, Err(LockError::ShutDown { .. })), "{result:?}");
        assert_eq!(term.end(), Some(TermEnd::ShutDown));
        if let Some(server) = &env.server {
            assert!(server.owners("lock:stepping-down").is_empty());
        }
    }
}

on_both_backends! {
    /// `permits`, `fair` and `mode = read`, and a call inside a body that
    /// holds the key, are refused before campaigning; `f` is never called.
    async fn options_a_leader_cannot_take_are_invalid(env: Env) {
        let refused = [
            LockOptions::new().permits(2),
            LockOptions::new().fair(true),
            LockOptions::new().mode(LockMode::Read),
        ];
        for options in refused {
            let result = env
                .client
                .lead("invalid", options, |_| async { panic!("f was called") })
                .await;
            let Err(LockError::Invalid { key, message, .. }) = result else {
                panic!("{options:?}: {result:?}");
            };
            assert_eq!(key, "lock:invalid");
            assert!(message.contains("permits, fair and mode = read"), "{message}");
        }
        let nested = env
            .client
            .run_locked("invalid", LockOptions::new(), async {
                env.client
                    .lead("invalid", LockOptions::new(), |_| async { panic!("f was called") })
                    .await
            })
            .await;
        assert!(matches!(nested, Err(LockError::Invalid { .. })), "{nested:?}");
    }
}

/// `lock_runtime::lead` picks its client at the first poll: made outside a
/// scope, polled inside it, it leads on the scoped client.
#[tokio::test]
async fn the_free_function_picks_its_client_at_the_first_poll() {
    let client = LockClient::in_memory();
    let call = lock_runtime::lead("lazy", LockOptions::new(), |term| async move {
        assert!(term.token() > 0);
        Ok::<_, LockError>(())
    });
    lock_runtime::with_client(client, call).await.expect("led");
    let unscoped = lock_runtime::lead("lazy", LockOptions::new(), |_| async {
        Ok::<_, LockError>(())
    });
    // This binary never calls `init`.
    let result = unscoped.await;
    assert!(
        matches!(result, Err(LockError::NotInitialized)),
        "{result:?}"
    );
}

/// Both forms of `lead` give a `Send` future when their inputs are `Send`.
#[test]
fn lead_is_send() {
    let client = LockClient::in_memory();
    let on_client = assert_send(client.lead("send", LockOptions::new(), |term| async move {
        let _ = term.token();
        Ok::<_, LockError>(())
    }));
    let free = assert_send(lock_runtime::lead("send", LockOptions::new(), |_| async {
        Ok::<_, LockError>(())
    }));
    drop((on_client, free));
}

/// Counts, on the thread it is the default on, the campaigns that failed
/// (their `warn` event), those that failed for a cause that needs fixing
/// (their `error` event) and the `lead_term` spans.
#[derive(Clone, Default)]
struct Campaigns {
    failed: Arc<AtomicUsize>,
    needs_fixing: Arc<AtomicUsize>,
    terms: Arc<AtomicUsize>,
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Campaigns {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if attrs.metadata().name() == "lead_term" {
            self.terms.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Message(bool, bool);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    let text = format!("{value:?}");
                    self.0 |= text.contains("campaign failed; retrying");
                    self.1 |= text.contains("campaign failed for a cause that needs fixing");
                }
            }
        }
        let mut message = Message(false, false);
        event.record(&mut message);
        let level = *event.metadata().level();
        if message.0 && level == tracing::Level::WARN {
            self.failed.fetch_add(1, Ordering::SeqCst);
        }
        if message.1 && level == tracing::Level::ERROR {
            self.needs_fixing.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Redis stops during a term: the term is lost when its lease runs out
/// unrenewed, the campaigns that fail meanwhile are traced and retried, not
/// returned, and once Redis is back a new term is elected. Each term has a
/// `lead_term` span. One thread, so that the subscriber sees every event.
#[tokio::test(flavor = "current_thread")]
async fn backend_errors_while_campaigning_are_retried_not_returned() {
    use tracing_subscriber::layer::SubscriberExt;
    let campaigns = Campaigns::default();
    let subscriber = tracing_subscriber::registry().with(campaigns.clone());
    let _default = tracing::subscriber::set_default(subscriber);
    let mut server = support::RedisServer::start();
    let client = LockClient::builder()
        .connect_timeout(Duration::from_millis(300))
        .command_timeout(Duration::from_millis(300))
        .default_lease(Duration::from_millis(900))
        .connect(&server.url())
        .await
        .expect("connect");
    let (terms, mut elected) = mpsc::unbounded_channel();
    let leading = tokio::spawn(async move {
        let mut n = 0;
        client
            .lead("outage", LockOptions::new(), move |term| {
                n += 1;
                terms.send(term).expect("the test listens");
                let first = n == 1;
                async move {
                    if first {
                        std::future::pending::<()>().await;
                    }
                    Ok::<_, LockError>(())
                }
            })
            .await
    });
    let first = timeout(LIMIT, elected.recv())
        .await
        .expect("elected")
        .expect("term");
    server.stop();
    timeout(LIMIT, first.lost())
        .await
        .expect("the term was lost");
    let failed = eventually(LIMIT, || campaigns.failed.load(Ordering::SeqCst) >= 2).await;
    assert!(failed, "no campaign failed while Redis was down");
    assert!(!leading.is_finished(), "lead returned while Redis was down");
    server.restart();
    timeout(LIMIT, elected.recv())
        .await
        .expect("elected again")
        .expect("term");
    timeout(LIMIT, leading)
        .await
        .expect("returns")
        .expect("task")
        .expect("resigned");
    assert_eq!(campaigns.terms.load(Ordering::SeqCst), 2);
}

/// A campaign that fails for a cause retrying does not cure (the key holds
/// a value of another kind) is retried all the same, traced at `error`;
/// once the key is fixed (deleted here), the campaign is elected.
#[tokio::test(flavor = "current_thread")]
async fn a_campaign_failing_for_a_cause_that_needs_fixing_is_traced_as_an_error() {
    use tracing_subscriber::layer::SubscriberExt;
    let campaigns = Campaigns::default();
    let subscriber = tracing_subscriber::registry().with(campaigns.clone());
    let _default = tracing::subscriber::set_default(subscriber);
    let server = support::RedisServer::start();
    let _: () = lock_runtime::redis::cmd("HSET")
        .arg(&["lock:misused", "not", "a lock"])
        .query(&mut server.connection())
        .expect("HSET");
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let leading = tokio::spawn(async move {
        client
            .lead("misused", LockOptions::new(), |_term| async {
                Ok::<_, LockError>(())
            })
            .await
    });
    let traced = eventually(LIMIT, || campaigns.needs_fixing.load(Ordering::SeqCst) >= 2).await;
    assert!(traced, "no campaign failure was traced as an error");
    assert_eq!(
        campaigns.failed.load(Ordering::SeqCst),
        0,
        "not as a warning"
    );
    assert!(!leading.is_finished(), "lead returned");
    let _: () = lock_runtime::redis::cmd("DEL")
        .arg("lock:misused")
        .query(&mut server.connection())
        .expect("DEL");
    timeout(LIMIT, leading)
        .await
        .expect("elected once the key was fixed")
        .expect("task")
        .expect("resigned");
}

/// The gauge `distributed_lock_leader`, labelled by the call's label, is 1
/// while a term runs and 0 once it ended. The only test here that installs
/// a recorder (it is process-wide); its label is its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_gauge_is_one_while_a_term_runs() {
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder of this binary");
    let series = r#"distributed_lock_leader{lock="leader:<name>"} "#;
    let gauge = || {
        let page = metrics.render();
        let value = page
            .lines()
            .find_map(|line| line.strip_prefix(series)?.parse().ok());
        value.unwrap_or(0.0_f64)
    };
    let client = LockClient::in_memory();
    let options = LockOptions::new().label("leader:<name>");
    for _ in 0..2 {
        client
            .lead("gauge:1", options, |_| async {
                assert_eq!(gauge(), 1.0);
                Ok::<_, LockError>(())
            })
            .await
            .expect("led");
        assert_eq!(gauge(), 0.0);
    }
    assert!(
        !metrics.render().contains("gauge:1"),
        "the rendered key is a label"
    );
}

/// A term's future that fails after its term was lost (another client
/// forced the lock free and took it; the loss had not reached the future
/// yet, as a refused stale write shows): `lead` counts the error as the
/// loss and campaigns again, rather than returning it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_after_the_term_was_lost_is_a_loss_and_lead_campaigns_again() {
    let keyspace = lock_runtime::EmbeddedKeyspace::new();
    let leader = LockClient::builder().in_memory_shared(&keyspace);
    let other = LockClient::builder().in_memory_shared(&keyspace);
    let (elected_tx, mut elected) = mpsc::unbounded_channel();
    let go = Arc::new(Notify::new());
    let (terms, notify) = (Arc::new(AtomicUsize::new(0)), go.clone());
    let campaign = tokio::spawn(async move {
        leader
            .lead("job", LockOptions::new(), |term| {
                let (elected_tx, go, terms) = (elected_tx.clone(), notify.clone(), terms.clone());
                async move {
                    let n = terms.fetch_add(1, Ordering::SeqCst);
                    let _ = elected_tx.send(term.token());
                    if n > 0 {
                        return Ok(());
                    }
                    go.notified().await;
                    Err(AppError::Stopped)
                }
            })
            .await
    });
    let first = timeout(LIMIT, elected.recv())
        .await
        .expect("elected")
        .expect("a term");
    // Another client frees the lock and takes it; the leader's future then
    // fails (its lease, 30 s, is far from over: nothing told it yet).
    assert!(other.force_unlock("job").await.expect("force_unlock"));
    let (taken_tx, taken) = oneshot::channel();
    let (release_tx, release) = oneshot::channel::<()>();
    let holder = other.clone();
    let holding = tokio::spawn(async move {
        let body = async move {
            let _ = taken_tx.send(());
            let _ = release.await;
            Ok::<_, LockError>(())
        };
        holder.run_locked("job", LockOptions::new(), body).await
    });
    taken.await.expect("the other client took it");
    go.notify_one();
    // The term's error is the loss's: `lead` campaigns again, and leads once
    // the other client lets go.
    assert!(
        at_once(async { elected.recv().await }).await.is_none(),
        "not elected while the other client holds it"
    );
    release_tx.send(()).expect("the holder waits");
    holding.await.expect("holder").expect("held");
    let second = timeout(LIMIT, elected.recv())
        .await
        .expect("elected again")
        .expect("a term");
    assert!(second > first, "a newer term: {first} then {second}");
    let led = timeout(LIMIT, campaign)
        .await
        .expect("lead returns")
        .expect("task");
    assert!(led.is_ok(), "the second term resigned: {led:?}");
}

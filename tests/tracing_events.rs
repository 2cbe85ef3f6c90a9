//! The tracing output of locked calls, read by a capturing subscriber: each
//! step's event at its documented level, inside the call's
//! `distributed_lock` span, inside the caller's own span; and which span is
//! outside the other when a function has both `#[distributed_lock]` and
//! `#[tracing::instrument]`.
//!
//! One test: the subscriber is process-wide (the client's own thread emits
//! some events), so the scenarios run one after another, each on its own key.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_runtime::{distributed_lock, LockClient, LockError, LockOptions};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Event, Instrument, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// A span as an event saw it: its name and fields.
#[derive(Debug, Clone)]
struct SpanSeen {
    name: &'static str,
    fields: HashMap<String, String>,
}

/// One recorded event.
#[derive(Debug, Clone)]
struct Seen {
    level: Level,
    target: String,
    message: String,
    fields: HashMap<String, String>,
    /// The spans around it, innermost first.
    scope: Vec<SpanSeen>,
}

impl Seen {
    fn in_lock_span(&self, key: &str) -> bool {
        self.scope.first().is_some_and(|span| {
            span.name == "distributed_lock"
                && span.fields.get("key").map(String::as_str) == Some(key)
        })
    }

    /// Whether the `distributed_lock` span is inside the caller's span
    /// `caller`.
    fn under_caller(&self, caller: &str) -> bool {
        self.scope.get(1).is_some_and(|span| span.name == caller)
    }
}

#[derive(Default)]
struct Fields(HashMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

/// Records every event with the spans around it.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Seen>>>);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        let span = ctx.span(id).expect("a new span is registered");
        span.extensions_mut().insert(SpanSeen {
            name: attrs.metadata().name(),
            fields: fields.0,
        });
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let message = fields.0.remove("message").unwrap_or_default();
        let scope = ctx
            .event_scope(event)
            .map(|scope| {
                scope
                    .filter_map(|span| span.extensions().get::<SpanSeen>().cloned())
                    .collect()
            })
            .unwrap_or_default();
        self.0.lock().unwrap().push(Seen {
            level: *event.metadata().level(),
            target: event.metadata().target().to_owned(),
            message,
            fields: fields.0,
            scope,
        });
    }
}

impl Capture {
    /// The one recorded event with `message`, from any target.
    fn the(&self, message: &str) -> Seen {
        let seen = self.0.lock().unwrap();
        let found: Vec<&Seen> = seen.iter().filter(|e| e.message == message).collect();
        assert_eq!(found.len(), 1, "one `{message}` event expected: {found:#?}");
        found[0].clone()
    }

    /// The library's events in the span of the lock `key`.
    fn of(&self, key: &str) -> Vec<Seen> {
        let seen = self.0.lock().unwrap();
        seen.iter()
            .filter(|e| e.in_lock_span(key))
            .cloned()
            .collect()
    }

    /// Waits (bounded) until an event with `message` appears in `key`'s span.
    async fn wait_for(&self, key: &str, message: &str) -> Seen {
        for _ in 0..500 {
            if let Some(e) = self.of(key).into_iter().find(|e| e.message == message) {
                return e;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no `{message}` event for {key}: {:#?}", self.of(key));
    }
}

/// The one event with `message` among `events`, checked for its level and
/// for sitting in the lock's span inside the caller's span `caller`.
fn expect<'a>(events: &'a [Seen], message: &str, level: Level, caller: &str) -> &'a Seen {
    let found: Vec<&Seen> = events.iter().filter(|e| e.message == message).collect();
    assert_eq!(
        found.len(),
        1,
        "one `{message}` event expected: {events:#?}"
    );
    let event = found[0];
    assert_eq!(event.level, level, "level of `{message}`");
    assert!(event.target.starts_with("lock_runtime"), "{event:?}");
    assert!(
        event.under_caller(caller),
        "`{message}` not under `{caller}`: {event:?}"
    );
    event
}

/// The names of the spans around `event`, innermost first.
fn span_names(event: &Seen) -> Vec<&'static str> {
    event.scope.iter().map(|span| span.name).collect()
}

/// `#[distributed_lock]` above `#[tracing::instrument]`: the function's span
/// is the outer one, around the lock's span.
#[distributed_lock(key = "order:<id>", client = client)]
#[tracing::instrument(skip_all)]
async fn lock_above(client: &LockClient, id: u64) -> Result<(), LockError> {
    tracing::debug!(id, "lock above: the body");
    Ok(())
}

/// `#[tracing::instrument]` above `#[distributed_lock]`: the lock's span is
/// the outer one, and the function's span opens inside it.
#[tracing::instrument(skip_all)]
#[distributed_lock(key = "order:<id>", client = client)]
async fn instrument_above(client: &LockClient, id: u64) -> Result<(), LockError> {
    tracing::debug!(id, "instrument above: the body");
    Ok(())
}

/// Runs `fut` in a caller's span named `name`, as a handler with
/// `#[instrument]` would.
async fn in_caller<F: Future>(name: &'static str, fut: F) -> F::Output {
    let span = match name {
        "handler" => tracing::info_span!("handler", request = 7),
        _ => tracing::info_span!("job"),
    };
    fut.instrument(span).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_events_nest_in_the_callers_span_at_their_levels() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
    let client = LockClient::in_memory();
    let labelled = LockOptions::new().label("stock:<sku>");

    // Acquired, re-entered, released.
    let outer = in_caller("handler", async {
        client
            .run_locked("stock:1", labelled, async {
                client
                    .run_locked("stock:1", labelled, async { Ok::<_, LockError>(()) })
                    .await
            })
            .await
    });
    outer.await.expect("the calls run");
    let events = capture.of("lock:stock:1");
    let acquired = expect(&events, "lock acquired", Level::DEBUG, "handler");
    assert_eq!(acquired.fields["attempts"], "1");
    assert!(acquired.fields.contains_key("token") && acquired.fields.contains_key("waited"));
    assert_eq!(acquired.scope[0].fields["label"], "stock:<sku>");
    assert!(acquired.scope[0].fields.contains_key("lease"));
    assert!(acquired.scope[0].fields.contains_key("wait"));
    assert_eq!(acquired.scope[1].fields["request"], "7");
    // The nested call's span is inside the outer call's.
    let reentered = events.iter().find(|e| e.message == "lock re-entered");
    let reentered = reentered.expect("a re-entered event");
    assert_eq!(reentered.level, Level::DEBUG);
    assert_eq!(reentered.scope[1].name, "distributed_lock");
    assert_eq!(reentered.scope[2].name, "handler");
    let released = expect(&events, "lock released", Level::DEBUG, "handler");
    assert!(released.fields.contains_key("held_for"));
    // A healthy call says nothing at info or above.
    let all = capture.0.lock().unwrap().clone();
    let loud: Vec<&Seen> = all.iter().filter(|e| e.level <= Level::INFO).collect();
    assert!(loud.is_empty(), "events at info or above: {loud:#?}");

    // Waiting, then a timeout.
    let (taken_tx, taken_rx) = tokio::sync::oneshot::channel();
    let (free_tx, free_rx) = tokio::sync::oneshot::channel::<()>();
    let holder = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .run_locked("stock:2", LockOptions::new(), async {
                    let _ = taken_tx.send(());
                    let _ = free_rx.await;
                    Ok::<_, LockError>(())
                })
                .await
        }
    });
    taken_rx.await.expect("the holder took the lock");
    let short = labelled.wait(Duration::from_millis(30));
    let waiter = client.run_locked("stock:2", short, async { Ok::<_, LockError>(()) });
    let outcome = in_caller("job", waiter).await;
    assert!(
        matches!(outcome, Err(LockError::Timeout { .. })),
        "{outcome:?}"
    );
    let events = capture.of("lock:stock:2");
    let waiting = events.iter().find(|e| e.message == "lock busy; waiting");
    let waiting = waiting.expect("a waiting event");
    assert_eq!(waiting.level, Level::DEBUG);
    assert!(
        waiting.fields["holder_ttl"].starts_with("Some("),
        "{waiting:?}"
    );
    let timeout = expect(&events, "lock wait timed out", Level::DEBUG, "job");
    assert!(timeout.fields.contains_key("waited"));
    // A wait cut short by the caller.
    let waiter = client.run_locked("stock:2", labelled, async { Ok::<_, LockError>(()) });
    let cut = tokio::time::timeout(Duration::from_millis(50), in_caller("job", waiter)).await;
    assert!(cut.is_err(), "the wait was cut short");
    let events = capture.of("lock:stock:2");
    let cancelled = expect(&events, "lock wait cancelled", Level::DEBUG, "job");
    assert!(cancelled.fields.contains_key("attempts"));
    free_tx.send(()).expect("the holder waits");
    holder.await.expect("no panic").expect("the holder's call");

    // Lost: a lease of 50 ms, no renewal, a body that sleeps past it. The
    // warning is in the caller's span, where the loss is seen.
    let short_lease = labelled.lease(Duration::from_millis(50)).renew(false);
    let body = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        Ok::<_, LockError>(())
    };
    let outcome = in_caller("handler", client.run_locked("stock:3", short_lease, body)).await;
    assert!(
        matches!(outcome, Err(LockError::Lost { .. })),
        "{outcome:?}"
    );
    let events = capture.of("lock:stock:3");
    let lost = expect(&events, "lock lost while held", Level::WARN, "handler");
    assert!(lost.fields["reason"].contains("lease ran out"), "{lost:?}");
    assert_eq!(lost.fields["label"], "stock:<sku>");
    assert!(lost.fields.contains_key("held_for"));

    // Cancelled while held: released in the background, still in the span.
    let (taken_tx, taken_rx) = tokio::sync::oneshot::channel();
    let cancelled = tokio::spawn({
        let client = client.clone();
        async move {
            let call = client.run_locked("stock:4", labelled, async {
                let _ = taken_tx.send(());
                std::future::pending::<Result<(), LockError>>().await
            });
            in_caller("job", call).await
        }
    });
    taken_rx.await.expect("the call took the lock");
    cancelled.abort();
    let _ = cancelled.await;
    let event = capture
        .wait_for("lock:stock:4", "lock released in the background")
        .await;
    assert_eq!(event.level, Level::DEBUG);
    assert_eq!(event.fields["freed"], "true");
    let events = capture.of("lock:stock:4");
    let dropped = expect(
        &events,
        "lock releasing in the background",
        Level::DEBUG,
        "job",
    );
    assert_eq!(dropped.fields["cause"], "the call was cancelled");

    // A body that panics: released in the background, and said so.
    let panicked = tokio::spawn({
        let client = client.clone();
        async move {
            let call = client.run_locked("stock:6", labelled, async {
                tokio::task::yield_now().await;
                if std::hint::black_box(true) {
                    panic!("the body fails");
                }
                Ok::<_, LockError>(())
            });
            in_caller("job", call).await
        }
    });
    assert!(panicked.await.expect_err("the task panicked").is_panic());
    capture
        .wait_for("lock:stock:6", "lock released in the background")
        .await;
    let events = capture.of("lock:stock:6");
    let dropped = expect(
        &events,
        "lock releasing in the background",
        Level::DEBUG,
        "job",
    );
    assert_eq!(dropped.fields["cause"], "the body panicked");

    // Lost while nobody polled the call, then dropped: reported lost there.
    let short_lease = labelled.lease(Duration::from_millis(50)).renew(false);
    let (taken_tx, mut taken_rx) = tokio::sync::oneshot::channel();
    let stalled = async {
        let call = client.run_locked("stock:7", short_lease, async {
            let _ = taken_tx.send(());
            std::future::pending::<Result<(), LockError>>().await
        });
        let mut call = Box::pin(call);
        for _ in 0..1000 {
            if taken_rx.try_recv().is_ok() {
                break;
            }
            std::future::poll_fn(|cx| {
                let _ = call.as_mut().poll(cx);
                std::task::Poll::Ready(())
            })
            .await;
            tokio::task::yield_now().await;
        }
        // Not polled past its lease, then dropped.
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(call);
    };
    in_caller("job", stalled).await;
    let events = capture.of("lock:stock:7");
    let lost = expect(&events, "lock lost while held", Level::WARN, "job");
    assert!(lost.fields["reason"].contains("lease ran out"), "{lost:?}");
    expect(
        &events,
        "lock releasing in the background",
        Level::DEBUG,
        "job",
    );

    // A fair waiter behind another one: its waiting event gives the
    // holder's lease left (30 s by default), not the place ahead's (the
    // waiter lease, 5 s), though it asks again at the latter.
    let fair = LockOptions::new().fair(true);
    let (taken_tx, taken_rx) = tokio::sync::oneshot::channel();
    let (free_tx, free_rx) = tokio::sync::oneshot::channel::<()>();
    let holder = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .run_locked("line:1", fair, async {
                    let _ = taken_tx.send(());
                    let _ = free_rx.await;
                    Ok::<_, LockError>(())
                })
                .await
        }
    });
    taken_rx.await.expect("the holder took the lock");
    let first = tokio::spawn({
        let client = client.clone();
        async move {
            let call = client.run_locked("line:1", fair, async { Ok::<_, LockError>(()) });
            in_caller("handler", call).await
        }
    });
    capture.wait_for("lock:line:1", "lock busy; waiting").await;
    let second = client.run_locked("line:1", fair.wait(Duration::from_millis(50)), async {
        Ok::<_, LockError>(())
    });
    let outcome = in_caller("job", second).await;
    assert!(
        matches!(outcome, Err(LockError::Timeout { .. })),
        "{outcome:?}"
    );
    let events = capture.of("lock:line:1");
    let waiting: Vec<&Seen> = events
        .iter()
        .filter(|e| e.message == "lock busy; waiting" && e.under_caller("job"))
        .collect();
    assert!(!waiting.is_empty(), "no waiting event: {events:#?}");
    for event in waiting {
        let ttl = &event.fields["holder_ttl"];
        let left = ttl
            .strip_prefix("Some(")
            .and_then(|ttl| ttl.strip_suffix("s)"))
            .and_then(|secs| secs.parse::<f64>().ok());
        assert!(left.is_some_and(|left| left > 20.0), "holder_ttl {ttl}");
    }
    free_tx.send(()).expect("the holder waits");
    holder.await.expect("no panic").expect("the holder's call");
    first
        .await
        .expect("no panic")
        .expect("the first waiter's call");

    // Renewals, at trace, from the client's watchdog.
    let renewing = labelled.lease(Duration::from_millis(60));
    let body = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        Ok::<_, LockError>(())
    };
    client
        .run_locked("stock:5", renewing, body)
        .await
        .expect("renewed");
    let all = capture.0.lock().unwrap().clone();
    let renewed: Vec<&Seen> = all
        .iter()
        .filter(|e| e.message == "lock renewed" && e.fields["key"] == "lock:stock:5")
        .collect();
    assert!(!renewed.is_empty(), "no renewal event");
    assert!(renewed.iter().all(|e| e.level == Level::TRACE));

    // With `#[tracing::instrument]` on the same function, the attribute
    // written nearer the `fn` wraps the other: it rewrites the function
    // after the one above it did.
    in_caller("handler", lock_above(&client, 1))
        .await
        .expect("locked");
    let body = capture.the("lock above: the body");
    assert_eq!(
        span_names(&body),
        ["distributed_lock", "lock_above", "handler"],
        "{body:#?}"
    );
    // The function's span holds the whole call: the lock's own events too.
    let events = capture.of("lock:order:1");
    expect(&events, "lock acquired", Level::DEBUG, "lock_above");
    expect(&events, "lock released", Level::DEBUG, "lock_above");

    in_caller("handler", instrument_above(&client, 2))
        .await
        .expect("locked");
    let body = capture.the("instrument above: the body");
    assert_eq!(
        span_names(&body),
        ["instrument_above", "distributed_lock", "handler"],
        "{body:#?}"
    );
    // The function's span opens inside the lock's, once the lock is held:
    // the lock's own events are outside it.
    let events = capture.of("lock:order:2");
    expect(&events, "lock acquired", Level::DEBUG, "handler");
    expect(&events, "lock released", Level::DEBUG, "handler");
}

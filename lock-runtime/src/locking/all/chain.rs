//! The chain of frames a call on several keys runs its body in, and its
//! end: the holds it took are given back when the body returns (key by
//! key, all at once), in the background when the call is dropped
//! (cancelled, or its body panicked) or a key is found lost.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::Poll;

use futures_util::future::join_all;
use tracing::Span;

use super::super::outcome::Report;
use super::super::release::{release, release_dropped, release_later, verdict};
use crate::client::LockClient;
use crate::error::LockError;
use crate::held::{Frame, HeldLock, Loss};
use crate::ownership;
use crate::route::Lane;
use crate::telemetry;

/// The frames of one call on several keys, outermost first, on top of the
/// chain around the call; while `armed`, dropping it ends the frames and
/// gives back the holds the call took.
pub(super) struct Chain<'c> {
    client: &'c LockClient,
    /// The chain around the call.
    outer: Option<Frame>,
    /// This call's frames, outermost first.
    frames: Vec<Frame>,
    /// The holds this call took (its other frames re-enter holds around it).
    taken: Vec<Arc<HeldLock>>,
    /// Set while the body is polled: dropped with it set, the body panicked.
    in_body: AtomicBool,
    armed: bool,
}

impl<'c> Chain<'c> {
    /// An empty chain on top of the running body's.
    pub(super) fn new(client: &'c LockClient) -> Self {
        Chain {
            client,
            outer: ownership::innermost(),
            frames: Vec::new(),
            taken: Vec::new(),
            in_body: AtomicBool::new(false),
            armed: true,
        }
    }

    /// The innermost frame so far.
    pub(super) fn top(&self) -> Option<Frame> {
        self.frames.last().or(self.outer.as_ref()).cloned()
    }

    /// Puts a re-entry of a hold around the call on top.
    pub(super) fn push(&mut self, frame: Frame) {
        self.frames.push(frame);
    }

    /// Puts a hold the call took on top, registered with the watchdog.
    pub(super) fn take(&mut self, held: HeldLock) {
        let held = Arc::new(held);
        self.client.inner.registry.register(held.clone());
        self.frames.push(Frame::Taken(held.clone()));
        self.taken.push(held);
    }

    /// Makes the first key listed (`first`) the innermost frame, so that
    /// `fencing_token()` in the body gives its token: when it is not on top
    /// already (it was held around the call, and others were taken inside
    /// it), a re-entry of its frame goes on top.
    pub(super) fn first_innermost(&mut self, first: &str) -> Result<(), LockError> {
        let top = self.top().expect("a call holds at least one key");
        if &*top.held().key == first {
            return Ok(());
        }
        let frame = self
            .frames
            .iter()
            .find(|frame| &*frame.held().key == first)
            .cloned()
            .expect("every key has a frame");
        // The call holds that frame's turn itself: nothing else can.
        let _ = frame.turn().try_take();
        self.frames.push(Frame::reentered(frame, top));
        Ok(())
    }

    /// Runs `body` in the chain while every key is held; then gives the
    /// keys back.
    pub(super) async fn run<O, T, E, F>(mut self, body: F) -> O::Output
    where
        F: Future<Output = Result<T, E>>,
        O: Report<T, E>,
    {
        let innermost = self.top().expect("a call holds at least one key");
        let mut scoped = Scoped {
            frame: innermost.clone(),
            body: Some(Box::pin(body)),
        };
        // Whether the body was polled: a loss found before its first poll
        // means it never began.
        let began = AtomicBool::new(false);
        let step = poll_fn(|cx| {
            for held in &self.taken {
                held.wake_on_loss(cx.waker());
            }
            for frame in self.frames.iter().rev() {
                if let Some(loss) = frame.check_now() {
                    return Poll::Ready(Err((frame.held().clone(), loss)));
                }
            }
            let body = scoped.body.as_mut().expect("polled until it returns");
            self.in_body.store(true, Ordering::Relaxed);
            let polled = ownership::within(&innermost, || body.as_mut().poll(cx));
            self.in_body.store(false, Ordering::Relaxed);
            began.store(true, Ordering::Relaxed);
            polled.map(Ok)
        })
        .await;
        drop(scoped);
        self.armed = false;
        self.end_frames();
        let result = match step {
            Ok(result) => result,
            Err((held, loss)) if began.load(Ordering::Relaxed) => {
                return O::stopped(self.lost(&held, loss))
            }
            Err((held, loss)) => return O::not_run(self.lost(&held, loss)),
        };
        // Lost while the body ran its last poll: it ran to its end.
        if let Some(held) = self.taken.iter().find(|held| held.is_lost()) {
            let held = held.clone();
            let loss = held.check_now().unwrap_or(Loss::TAKEN);
            return O::ran_but_lost(result, self.lost(&held, loss));
        }
        match self.release_all().await {
            None => O::held(result),
            Some(error) => O::ran_but_lost(result, error),
        }
    }

    /// Ends every frame, innermost first (a re-entry gives back its turn),
    /// and stops renewing the holds taken.
    fn end_frames(&self) {
        for frame in self.frames.iter().rev() {
            match frame {
                Frame::Taken(_) => frame.end(),
                Frame::Reentered(_) => frame.leave(),
            }
        }
        for held in &self.taken {
            self.client.inner.registry.unregister(held.id);
        }
    }

    /// The key of `held` found lost (`loss`) while the body ran: every hold
    /// the call took is freed in the background, and this client's waiters
    /// on the lost key try at once.
    fn lost(&self, held: &HeldLock, loss: Loss) -> LockError {
        telemetry::lost(held, loss);
        let inner = &self.client.inner;
        inner.waiters.wake_release(held.key.as_bytes(), 0);
        for taken in &self.taken {
            release_later(self.client, taken.clone(), Lane::Home);
        }
        LockError::Lost {
            key: held.key.clone(),
            reason: loss.reason,
            found_by: loss.found_by,
        }
    }

    /// Gives back every hold taken, all at once: `None` when each was held
    /// to the end, else the loss of the first key that was not.
    async fn release_all(&self) -> Option<LockError> {
        let lane = self.client.inner.backend.lane();
        let releases = self
            .taken
            .iter()
            .map(|held| release(self.client, held, &lane));
        let released = join_all(releases).await;
        let mut error = None;
        for (held, released) in self.taken.iter().zip(released) {
            if let Some(found) = verdict(held, released) {
                error.get_or_insert(found);
            }
        }
        error
    }
}

impl Drop for Chain<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.end_frames();
        let span = Span::current();
        for held in self.taken.drain(..) {
            telemetry::dropped_while_held(&held, self.in_body.load(Ordering::Relaxed));
            release_dropped(self.client, held, span.clone());
        }
    }
}

/// The body, dropped in the chain's scope, as its polls ran: what it drops
/// still sees its tokens.
struct Scoped<F> {
    frame: Frame,
    body: Option<Pin<Box<F>>>,
}

impl<F> Drop for Scoped<F> {
    fn drop(&mut self) {
        let Scoped { frame, body } = self;
        ownership::drop_within(frame, || *body = None);
    }
}

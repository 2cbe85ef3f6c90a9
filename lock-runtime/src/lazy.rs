//! A future made when it is first polled.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

pin_project! {
    /// The future that `start` makes, made when it is first polled: what
    /// `start` reads from the task's context (the client of a
    /// [`with_client`](crate::with_client) scope) is read where the future
    /// runs, not where it was made, as an `async fn` body would.
    ///
    /// Written out, not as an `async` block around the made future, so that
    /// what `start` captured (a locked call's body) is stored once: either
    /// in `start` or, from the first poll on, in the future it made.
    #[project = LazyProj]
    pub(crate) enum Lazy<S, F> {
        /// Not polled yet; `None` only while `start` runs.
        Start { start: Option<S> },
        /// Polled: the future `start` made.
        Running { #[pin] future: F },
    }
}

impl<S, F> Lazy<S, F>
where
    S: FnOnce() -> F,
    F: Future,
{
    /// A future that `start` makes at its first poll.
    pub(crate) fn new(start: S) -> Self {
        Lazy::Start { start: Some(start) }
    }
}

impl<S, F> Future for Lazy<S, F>
where
    S: FnOnce() -> F,
    F: Future,
{
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        loop {
            match self.as_mut().project() {
                LazyProj::Running { future } => return future.poll(cx),
                LazyProj::Start { start } => {
                    // Empty only if `start` panicked in an earlier poll.
                    let start = start.take().expect("polled again after it panicked");
                    let future = start();
                    self.set(Lazy::Running { future });
                }
            }
        }
    }
}

//! The task that keeps a client's connection names and registry entry (see
//! `presence.rs`) up to date.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::Backend;
use crate::io::Io;
use crate::presence::{ClientRecord, REFRESH};

/// Writes `record` every [`REFRESH`] (and first now, unless `announced`
/// already), and soon after a connection dropped, until the client closes.
/// A failed write is tried again after 1 s, then less and less often: a
/// client that starts before Redis names its connections soon after Redis
/// comes up.
pub(crate) fn start(io: &Io, backend: Backend, record: Arc<ClientRecord>, announced: bool) {
    io.spawn_until_closed(async move {
        let mut delay = if announced { REFRESH } else { Duration::ZERO };
        let mut retry = RETRY;
        loop {
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = record.again.notified() => {}
            }
            match backend.announce(&record).await {
                Ok(()) => (delay, retry) = (REFRESH, RETRY),
                Err(error) => {
                    tracing::debug!(%error, "could not name the connections or write the registry entry");
                    (delay, retry) = (retry, (retry * 2).min(REFRESH));
                }
            }
        }
    });
}

/// The first retry after a failed write.
const RETRY: Duration = Duration::from_secs(1);

//! Freeing a lock whoever holds it: an operator's last resort.

use crate::client::LockClient;
use crate::error::LockError;
use crate::held::Loss;

impl LockClient {
    /// Frees the lock `key` (without the client's prefix) whoever holds it,
    /// and wakes its waiters in every process at once; whether it was held.
    ///
    /// The prefix is added to `key` as it is given, as in
    /// [`inspect`](LockClient::inspect): `force_unlock("order:7")` frees
    /// `lock:order:7`. A held lock's full key given instead is refused:
    /// `force_unlock("lock:order:7")` answers [`LockError::Invalid`] and
    /// frees nothing when `lock:lock:order:7` held no lock and
    /// `lock:order:7` holds one (found by one more read, made only for a key
    /// that starts with the prefix and that freed nothing). Any other key
    /// that starts with the prefix is freed as given (an attribute's key
    /// may itself start with `lock:`).
    ///
    /// **Dangerous.** The holder is not told: its body goes on running,
    /// unprotected, while a waiter takes the lock and runs its own body at
    /// the same time. The holder learns at its next renewal (within a third
    /// of its lease), or at its release if that comes first, and its call
    /// then ends with [`LockError::Lost`] and
    /// [`LossReason::ForceUnlocked`](crate::LossReason::ForceUnlocked)
    /// (read from the freed value or the record of who freed the key), found by
    /// [`FoundBy::Renewal`](crate::FoundBy::Renewal) (its body is stopped at
    /// an await point) or [`FoundBy::Release`](crate::FoundBy::Release). A
    /// holder in this client is marked lost at once, found by
    /// [`FoundBy::ForceUnlock`](crate::FoundBy::ForceUnlock). Use it for a lock whose holder is known dead or stuck, after
    /// [`inspect`](LockClient::inspect) showed who that is; a store that
    /// checks fencing tokens refuses the old holder's late writes.
    ///
    /// The freed lock keeps its fencing token until its lease ends, as after
    /// a release, so tokens never go back; the release is published on the
    /// lock's channel, so waiters do not sleep until the old lease ends (as
    /// they would after a bare `DEL` from `redis-cli`). On Redlock it frees
    /// the lock on every node that answers; a quorum must answer.
    ///
    /// # Errors
    /// [`LockError::Backend`] when Redis fails or the key holds something
    /// that is not a lock of this version; [`LockError::NoQuorum`] when too
    /// few Redlock nodes answer; [`LockError::Invalid`] for an empty key,
    /// or a held lock's full key given for a key that holds none.
    pub async fn force_unlock(&self, key: &str) -> Result<bool, LockError> {
        let inner = &self.inner;
        let full = self.admin_key(key)?;
        let freed = inner
            .backend
            .force_unlock(&full, &inner.tag.id)
            .await
            .map_err(|e| inner.backend.error_on_key(e, &full, &inner.tag.place))?;
        for held in inner.registry.snapshot() {
            if held.key == full {
                held.lose(Loss::FORCED);
            }
        }
        // The notice comes back to this client too, but it skips its own.
        inner.waiters.wake_release(full.as_bytes(), 0);
        if freed.is_none() {
            self.refuse_a_held_full_key(key).await?;
        }
        Ok(freed.is_some())
    }
}

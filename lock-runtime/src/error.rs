//! The one error type of the crate.

use std::panic::Location;
use std::time::Duration;

use crate::advice;

/// Why a locked call did not run, or did not finish, under its lock.
///
/// Annotated functions return `Result<T, E>` with `E: From<LockError>`, so every
/// variant reaches the caller as `Err(E::from(lock_error))`. The variants that
/// concern one lock name its full Redis key (prefix included).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The call found no client: none was installed with [`crate::init`],
    /// and it was not polled inside a [`crate::with_client`] scope (a task
    /// spawned inside a scope is outside it). Call `init` at start-up, or
    /// wrap the call's task in `with_client`.
    #[error(
        "no lock client is installed, and this call is not inside a with_client scope: \
         call lock_runtime::init(client) at start-up, or wrap the task in \
         lock_runtime::with_client(client, task) (a task spawned inside a with_client \
         scope is not in it: wrap the spawned task too)"
    )]
    NotInitialized,

    /// [`crate::init`] was called a second time; the first client stays installed.
    #[error("a lock client is already installed: lock_runtime::init may be called once")]
    AlreadyInitialized,

    /// The lock was held by another owner for the whole `wait`.
    /// [`held_by`](LockError::Timeout::held_by) tells whether that owner was
    /// this same client, and the message says what to do then.
    #[error("timed out after {waited:?} waiting for lock `{}`{}", Shown(.key), HeldByHint(*.held_by))]
    #[non_exhaustive]
    Timeout {
        /// The lock's key.
        key: String,
        /// How long the call waited.
        waited: Duration,
        /// Who held the lock when the wait ended, as far as this client
        /// knows.
        held_by: HeldBy,
    },

    /// The lock was lost while the body ran; the body was stopped there
    /// (or, when the release found the loss, it had run to its end). The
    /// message says what showed the loss and which step found it.
    #[error("lock `{}` was lost while held: {}", Shown(.key), LossText(*.reason, *.found_by))]
    #[non_exhaustive]
    Lost {
        /// The lock's key.
        key: String,
        /// What showed the loss.
        reason: LossReason,
        /// Which step of the call found it: for [`LossReason::Taken`],
        /// [`LossReason::Gone`] and [`LossReason::ForceUnlocked`], a
        /// renewal, the release or [`force_unlock`] on this client.
        ///
        /// [`force_unlock`]: crate::LockClient::force_unlock
        found_by: FoundBy,
    },

    /// The backend failed (connection refused, timeout, server error) while
    /// acquiring, releasing or inspecting the lock. The message names the
    /// node and the cause (`NOPERM`, `WRONGPASS`, `READONLY`, connection
    /// refused, ...), never a credential, and what to do when the cause
    /// says (`NOAUTH`: where the password goes; a TLS certificate refused:
    /// which builder option gives it); [`source`] is the
    /// [`redis::RedisError`] itself. On Redis Cluster, a slot whose master
    /// is changing (a failover, a slot migration: `MOVED`, `ASK`,
    /// `TRYAGAIN`, `CLUSTERDOWN`) is followed within the call's `wait`; when
    /// the wait ends first, the message says that the slot's master is
    /// changing (not the redirect's raw text), and the error is retryable.
    ///
    /// From a locked call whose body returned, it is the release's: Redis
    /// refused it with an error that retrying does not cure (`NOPERM` from
    /// an ACL that lacks a right, say). The body ran to its end; the lock
    /// was not freed, and stays held in Redis until its lease ends (a
    /// release that could not reach Redis at all is
    /// [`LockError::Lost`] with [`LossReason::Unconfirmed`] instead).
    ///
    /// [`source`]: std::error::Error::source
    #[error("lock `{}` on {node}: {}", Shown(.key), Cause(.source))]
    #[non_exhaustive]
    Backend {
        /// The lock's key.
        key: String,
        /// Where it failed, without credentials: the node's address (and
        /// database); on Sentinel, the master in use (its address, and its
        /// name); on Redis Cluster, the node that the server's redirect
        /// (`MOVED`, `ASK`) names, else the master of the key's hash slot.
        node: String,
        /// The error the backend returned.
        #[source]
        source: redis::RedisError,
    },

    /// Too few Redlock nodes answered to decide: each failure names its node.
    #[error("lock `{}`: {reached} of the {needed} Redis nodes needed for a quorum answered; {}", Shown(.key), NodeFailure::list(.failures))]
    #[non_exhaustive]
    NoQuorum {
        /// The lock's key.
        key: String,
        /// How many nodes a quorum needs.
        needed: usize,
        /// How many answered.
        reached: usize,
        /// The nodes that did not answer, and why.
        failures: Vec<NodeFailure>,
    },

    /// Fewer replicas than [`sync_replicas`](crate::LockClientBuilder::sync_replicas)
    /// asks for acknowledged the lock's write within its timeout: the lock
    /// is given back (by a task in the background, which the call waits
    /// for; sent again if that fails, as any release is; left to its lease
    /// if Redis cannot be reached) and the body did not run.
    #[error("lock `{}`: {acked} of the {needed} replicas asked for acknowledged the lock within the {timeout:?} asked for (the call took {waited:?}); it is given back, and the body did not run", Shown(.key))]
    #[non_exhaustive]
    NotReplicated {
        /// The lock's key.
        key: String,
        /// How many replicas had to acknowledge it.
        needed: usize,
        /// How many did.
        acked: usize,
        /// How long the acknowledgements were waited for (`WAIT`'s
        /// timeout, the one given to `sync_replicas`).
        timeout: Duration,
        /// How long the call took from its start to this error (its wait
        /// for the lock, the request and the give-back included).
        waited: Duration,
    },

    /// A fenced write ([`FencedWrite::run`](crate::FencedWrite::run)) with
    /// [`sync_replicas`](crate::LockClientBuilder::sync_replicas) **ran on
    /// the master**, but fewer replicas than asked for acknowledged it in
    /// time. Its commands are not undone, and their replies are here: a
    /// failover before a replica has them may lose them (and the fence's
    /// new value). Do not send the write again as if it had not run (an
    /// increment would count twice); treat it as done, and after a failover
    /// read the resource back to settle whether it survived. Not retryable.
    #[error("fenced write to `{}` ran on the master, but {acked} of the {needed} replicas asked for acknowledged it within the {timeout:?} asked for (the call took {waited:?}): it is not undone, and a failover may lose it; do not send it again as if it had not run, and read the resource back after a failover", Shown(.resource))]
    #[non_exhaustive]
    WriteNotReplicated {
        /// The resource the write was for.
        resource: String,
        /// How many replicas had to acknowledge it.
        needed: usize,
        /// How many did.
        acked: usize,
        /// `WAIT`'s timeout (the one given to `sync_replicas`).
        timeout: Duration,
        /// How long the write's call took.
        waited: Duration,
        /// The replies of the write's commands, in order, as the master
        /// gave them.
        replies: Vec<redis::Value>,
    },

    /// A fenced write failed on its way or in Redis: [`ran`](LockError::WriteFailed::ran)
    /// says what happened to its commands (none ran, some ran and stay
    /// written, or unknown: the request may have run before its answer was
    /// lost). The message names the resource, the node and the cause.
    #[error("fenced write to `{}` on {node}: {}; {}", Shown(.resource), Cause(.source), .ran)]
    #[non_exhaustive]
    WriteFailed {
        /// The resource the write was for.
        resource: String,
        /// Where it failed, as [`LockError::Backend`] names it.
        node: String,
        /// What happened to the write's commands.
        ran: WriteRan,
        /// The error the backend returned.
        #[source]
        source: redis::RedisError,
    },

    /// A fenced write was not sent: the write itself is not valid (no
    /// token, a command that would reset the fence, keys in several
    /// Cluster slots, a Redlock client, a command the embedded backend
    /// does not carry). Nothing ran.
    #[error("invalid fenced write to `{}`: {message}; nothing was written", Shown(.resource))]
    #[non_exhaustive]
    InvalidWrite {
        /// The resource the write was for (and the command at fault, when
        /// one is).
        resource: String,
        /// What is wrong with it.
        message: &'static str,
    },

    /// The client was shut down ([`LockClient::shutdown`]): it takes no new
    /// locks. A body that was still running at the shutdown's deadline ends
    /// with [`LockError::Lost`] and [`LossReason::ShutDown`] instead.
    ///
    /// [`LockClient::shutdown`]: crate::LockClient::shutdown
    #[error("lock `{}`: the lock client is shut down and takes no new locks", Shown(.key))]
    #[non_exhaustive]
    ShutDown {
        /// The lock's key.
        key: String,
    },

    /// The client could not connect to or talk to Redis. The message names
    /// the node (without credentials) and the cause, once, and what to do
    /// when the cause says: `NOAUTH` (put the user and password in the
    /// URL), a server certificate from a CA the client does not trust
    /// ([`tls_ca_file`]/[`tls_ca_pem`]), a client certificate that the
    /// server asks for or that rustls refuses, a `redis://` URL whose
    /// server closed the connection at once (it may expect `rediss://`).
    ///
    /// [`tls_ca_file`]: crate::LockClientBuilder::tls_ca_file
    /// [`tls_ca_pem`]: crate::LockClientBuilder::tls_ca_pem
    #[error("cannot connect to Redis: {0}")]
    Connect(#[source] redis::RedisError),

    /// The key is held or waited for as another kind of lock than the one
    /// this call asks for (a read-write lock, a counted lock with some
    /// count, a fair lock), or was taken as one by an earlier call of this
    /// client: one key is one lock, so the call did not take a second one,
    /// and its body did not run. [`found_by`](LockError::KindMismatch::found_by)
    /// says what found it: the other kind's live state in Redis (or
    /// memory), a hold around the call, or the client's kind check (on by
    /// default in debug builds, see
    /// [`LockClientBuilder::kind_check`](crate::LockClientBuilder::kind_check)),
    /// which finds two calls of different kinds on one key even when they
    /// never overlap. The kinds guide ([`guide::kinds`]) has which kinds
    /// share a key. Use one kind per key, or another key.
    ///
    /// [`guide::kinds`]: crate::guide::kinds
    #[error("lock `{}` {}", Shown(.key), MismatchText(.asked, .found, .found_by))]
    #[non_exhaustive]
    KindMismatch {
        /// The lock's key.
        key: String,
        /// The kind this call asked for, as the attribute writes it
        /// (`mode = "read"`, `permits = 3`, `fair = true`, or `plain`).
        asked: String,
        /// The other kind: what the key is now, as the server (or memory)
        /// found it, or what an earlier call took it as.
        found: String,
        /// What found the other kind.
        found_by: KindFoundBy,
    },

    /// A key or an option was not valid at run time (for example an empty key
    /// or a zero lease given to the programmatic form).
    #[error("invalid lock `{}`: {message}", Shown(.key))]
    #[non_exhaustive]
    Invalid {
        /// The lock's key.
        key: String,
        /// What is wrong with it.
        message: &'static str,
    },

    /// A fenced write was refused by the resource: a newer holder of the
    /// lock (a larger fencing token) has written it since, so this caller
    /// lost its lock (its lease ran out while it was paused, or the lock
    /// was forced) and must stop writing. Nothing was written.
    #[error(
        "fenced write to `{}` refused: it was written with token {stored}, newer than \
         this write's {given}; the lock that gave {given} was lost (a newer holder took it), \
         so stop writing and let the newer holder's state stand",
        Shown(.resource)
    )]
    #[non_exhaustive]
    Fenced {
        /// The resource the write was for (as given to the write).
        resource: String,
        /// The highest token that wrote the resource.
        stored: u64,
        /// The token this write carried.
        given: u64,
    },
}

/// What happened to a fenced write's commands when it failed
/// ([`LockError::WriteFailed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WriteRan {
    /// None ran: the request never reached Redis, or Redis refused it
    /// before running any command. Sending it again is safe.
    No,
    /// A command of the write failed in Redis (a `WRONGTYPE`, say): the
    /// commands before it ran and stay written, it and those after it did
    /// not. Settle what ran before sending anything again.
    Partly,
    /// Unknown: the request was sent, and its answer was lost (a timeout,
    /// a dropped connection). It may have run in full. Read the resource
    /// back before sending it again.
    Unknown,
}

impl std::fmt::Display for WriteRan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WriteRan::No => "none of its commands ran, so it can be sent again",
            WriteRan::Partly => {
                "its commands before the failing one ran and stay written; settle them \
                 before sending it again"
            }
            WriteRan::Unknown => {
                "it was sent and its answer was lost, so it may have run: read the resource \
                 back before sending it again"
            }
        })
    }
}

/// Who held a lock that a call timed out waiting for
/// ([`LockError::Timeout`]), as far as the waiting client knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeldBy {
    /// An owner this client does not hold the lock for: another client, in
    /// this process or another one.
    Other,
    /// Another call of this same client held it: most often plain
    /// contention between two calls of one client (two tasks, two requests
    /// of one service), which exclude each other as any two owners do. Or
    /// the call was meant to re-enter the lock of a locked body and was not
    /// made inside that body's task (a task spawned inside the body, say),
    /// so it waited for the body instead: make the call inside the body
    /// (the same task), or take the lock only in the spawned task.
    ThisClient,
    /// A call on the same key run side by side with this one inside the same
    /// locked body (`join!`, `select!`) had its turn: calls on a key their
    /// body holds take turns.
    Sibling,
}

/// A key or resource as an error shows it: control characters (CR, LF,
/// ESC...) escaped, so that a value from a request cannot forge a log line
/// or a terminal's colours; everything else as it is.
struct Shown<'a>(&'a str);

impl std::fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::fmt::Write as _;
        if !self.0.chars().any(char::is_control) {
            return f.write_str(self.0);
        }
        for c in self.0.chars() {
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                f.write_char(c)?;
            }
        }
        Ok(())
    }
}

/// What a [`LockError::Timeout`]'s message adds for its [`HeldBy`].
struct HeldByHint(HeldBy);

impl std::fmt::Display for HeldByHint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            HeldBy::Other => "",
            HeldBy::ThisClient => {
                ": another call of this client holds it (calls of one client exclude each \
                 other as any two owners do; for a call meant to re-enter a locked body's \
                 lock, see lock_runtime::HeldBy::ThisClient)"
            }
            HeldBy::Sibling => {
                ": a call run side by side with it in the same locked body (join!, select!) \
                 had its turn; such calls on a key their body holds take turns"
            }
        })
    }
}

/// What found that a key is used as another kind of lock than a call asks
/// for ([`LockError::KindMismatch`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KindFoundBy {
    /// The call's request: Redis (or memory) holds the other kind's live
    /// state at the key (a holder, a waiting writer's claim, a fair
    /// waiter), so the two calls overlapped.
    Backend,
    /// The call is nested in a locked body that holds the key as the
    /// other kind, and the re-entry rules do not let it in.
    HeldAround,
    /// The client's kind check
    /// ([`LockClientBuilder::kind_check`](crate::LockClientBuilder::kind_check)):
    /// an earlier call of this client took the key as the other kind. The
    /// two calls did not meet, but would fail with this error whenever
    /// they overlap; the call sent no request. Boxed, so that every
    /// `LockError` stays as small as before.
    KindCheck(Box<KindCheckCalls>),
}

/// The two calls that the kind check found taking one key as kinds that
/// cannot share it ([`KindFoundBy::KindCheck`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KindCheckCalls {
    /// Where the earlier call was made: the annotated function (its return
    /// type), or the `run_locked` call.
    pub earlier: &'static Location<'static>,
    /// The earlier call's label: the attribute's key template (see
    /// [`LockOptions::label`](crate::LockOptions::label)), if it has one.
    pub earlier_label: Option<&'static str>,
    /// Where this call was made.
    pub this_call: &'static Location<'static>,
}

/// A [`LockError::KindMismatch`]'s message after the key: the kind asked
/// for, the kind found, and what found it.
struct MismatchText<'a>(&'a str, &'a str, &'a KindFoundBy);

impl std::fmt::Display for MismatchText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const ONE_KIND: &str = "one key is one lock of one kind";
        let (asked, found) = (self.0, self.1);
        let KindFoundBy::KindCheck(calls) = self.2 else {
            return write!(
                f,
                "is {found}, and this call asks for {asked}: {ONE_KIND}; use one kind per key \
                 (or another key)"
            );
        };
        f.write_str("was taken as ")?;
        f.write_str(found)?;
        f.write_str(" by an earlier call of this client (")?;
        if let Some(label) = calls.earlier_label {
            write!(f, "`{label}`, ")?;
        }
        let KindCheckCalls {
            earlier, this_call, ..
        } = **calls;
        write!(
            f,
            "at {earlier}), and this call (at {this_call}) asks for {asked}: {ONE_KIND}, so \
             the two calls fail with this error whenever they overlap (under load, or in two \
             processes); use one kind per key (or another key). Found by this client's kind \
             check, which sent no request; if the two calls can never overlap, turn it off \
             with LockClientBuilder::kind_check(false)"
        )
    }
}

/// What showed that a held lock was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// A renewal or the release found the lock held by another owner, or
    /// learned that another owner held it since (from the record of who
    /// freed the key, see the Redis layout), or found a value there that is
    /// not a lock. [`LockError::Lost`]'s `found_by` says which step.
    Taken,
    /// An operator freed the lock while this call held it:
    /// [`force_unlock`] from this client or any other. The renewal or the
    /// release learned it from the freed value or the record of who freed
    /// the key; on this client, `force_unlock` marks the hold at once.
    ///
    /// [`force_unlock`]: crate::LockClient::force_unlock
    ForceUnlocked,
    /// A renewal or the release found the lock gone, with nothing naming
    /// who freed it or another owner: erased (a restart without
    /// persistence, a failover to a replica that had not received it, a
    /// flush, a `DEL`, an eviction) or expired in Redis before this
    /// client's own count of its lease ran out. The hold ended before this
    /// step reached Redis.
    Gone,
    /// The lease ran out with no successful renewal (Redis unreachable, or
    /// `renew = false` and the body outran its lease).
    Expired,
    /// The body finished, but its release could not reach Redis (twice), so
    /// whether the lock was held to the end is not known: Redis may have
    /// restarted and forgotten it while the body ran.
    Unconfirmed,
    /// The body finished, and its release went unanswered (a timeout, a
    /// dropped connection, too few Redlock nodes: it may have run); sent
    /// again, it found the lock not held. The first send may well have
    /// freed it (and a waiter taken it since), or the lock was lost before:
    /// nothing tells which. Not [`LossReason::Taken`]: no other owner is
    /// known to have held it while the body ran.
    ReleaseUnanswered,
    /// The client was shut down ([`LockClient::shutdown`]) and its deadline
    /// passed while the body still ran: the body was stopped at an await
    /// point, as on any loss, and the lock was released.
    ///
    /// [`LockClient::shutdown`]: crate::LockClient::shutdown
    ShutDown,
    /// The call had re-entered a lock held around it and outlived the call
    /// that held it (the nested call's future was moved out of that body,
    /// for example spawned after a timeout): the hold it ran under ended,
    /// so its body was stopped at its next poll.
    Detached,
}

impl std::fmt::Display for LossReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LossReason::Taken => "another owner holds it or held it since",
            LossReason::ForceUnlocked => "an operator freed it (force_unlock)",
            LossReason::Gone => {
                "its hold ended before this step reached Redis: the key was gone (erased by a \
                 restart, a failover, a flush or a DEL, or expired in Redis), and nothing names \
                 who freed it"
            }
            LossReason::Expired => "its lease ran out before a renewal succeeded",
            LossReason::Unconfirmed => {
                "its release could not reach Redis, so it may not have been held to the end"
            }
            LossReason::ReleaseUnanswered => {
                "its release went unanswered and, sent again, found it not held: the first \
                 send may have freed it, or it was lost before; which is not known"
            }
            LossReason::ShutDown => {
                "the client was shut down and the body did not finish within the deadline"
            }
            LossReason::Detached => {
                "this nested call outlived the locked call whose hold it re-entered \
                 (its future was moved out of that body)"
            }
        })
    }
}

/// The step of a locked call that found its lock lost
/// ([`LockError::Lost`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FoundBy {
    /// A renewal by the client's watchdog found the lock held by another
    /// owner ([`LossReason::Taken`]), gone ([`LossReason::Gone`]) or freed
    /// by an operator ([`LossReason::ForceUnlocked`]) while the body ran.
    Renewal,
    /// The release, after the body returned ([`LossReason::Taken`],
    /// [`LossReason::Gone`], [`LossReason::ForceUnlocked`],
    /// [`LossReason::Expired`], [`LossReason::Unconfirmed`],
    /// [`LossReason::ReleaseUnanswered`]): the body ran
    /// to its end, but the lock may not have been held all the way, as no
    /// renewal had found out sooner (a body shorter than a third of its
    /// lease never renews).
    Release,
    /// [`LockClient::force_unlock`](crate::LockClient::force_unlock) on
    /// this same client freed the lock while the body ran
    /// ([`LossReason::ForceUnlocked`]).
    ForceUnlock,
    /// The lock's validity, checked against this process's clock by the
    /// watchdog and before each poll of the body, ran out with no successful
    /// renewal ([`LossReason::Expired`]).
    Clock,
    /// The client's shutdown, when its deadline passed
    /// ([`LossReason::ShutDown`]).
    ShutDown,
    /// The hold that this nested call re-entered ended while the call still
    /// ran ([`LossReason::Detached`]).
    HoldEnded,
}

/// A [`LockError::Lost`]'s cause, as its reason and the step that found it
/// say together.
struct LossText(LossReason, FoundBy);

impl std::fmt::Display for LossText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let found_in_redis = matches!(
            self.0,
            LossReason::Taken | LossReason::Gone | LossReason::ForceUnlocked
        );
        match (self.0, self.1) {
            (_, FoundBy::ForceUnlock) => f.write_str("force_unlock on this same client freed it"),
            (reason, FoundBy::Renewal) if found_in_redis => {
                write!(f, "a renewal found that {reason}")
            }
            (reason, FoundBy::Release) if found_in_redis => write!(
                f,
                "the release, after the body returned, found that {reason}: the body ran to \
                 its end, but maybe not under the lock all the way"
            ),
            (LossReason::Expired, FoundBy::Release) => write!(
                f,
                "{}, as the release after the body returned found",
                LossReason::Expired
            ),
            (reason, _) => reason.fmt(f),
        }?;
        if self.1 == FoundBy::Release {
            f.write_str(
                " (what the body returned is dropped here: run_locked_outcome and \
                 run_locked_all_outcome give it beside this error)",
            )?;
        }
        Ok(())
    }
}

impl LockError {
    /// The full key of the lock this error concerns, if it concerns one.
    pub fn key(&self) -> Option<&str> {
        match self {
            LockError::Timeout { key, .. }
            | LockError::Lost { key, .. }
            | LockError::Backend { key, .. }
            | LockError::NoQuorum { key, .. }
            | LockError::NotReplicated { key, .. }
            | LockError::Invalid { key, .. }
            | LockError::ShutDown { key } => Some(key),
            _ => None,
        }
    }

    /// The resource of the fenced write this error concerns, if it
    /// concerns one (as given to the write; with the command at fault for
    /// an [`InvalidWrite`](LockError::InvalidWrite) that names one).
    pub fn resource(&self) -> Option<&str> {
        match self {
            LockError::Fenced { resource, .. }
            | LockError::WriteNotReplicated { resource, .. }
            | LockError::WriteFailed { resource, .. }
            | LockError::InvalidWrite { resource, .. } => Some(resource),
            _ => None,
        }
    }

    /// Whether the lock stayed held by another owner for the whole `wait`
    /// ([`LockError::Timeout`]). A `wait = 0s` call on a scheduled job's
    /// key that finds it taken ends so: that is how an instance skips a
    /// period another instance runs, not a failure (see
    /// [`guide::scheduled`](crate::guide::scheduled)).
    pub fn is_timeout(&self) -> bool {
        matches!(self, LockError::Timeout { .. })
    }

    /// Whether the body started under the lock and was stopped, or its end
    /// could not be confirmed under the lock ([`LockError::Lost`], for any
    /// [`LossReason`]): its effects may be partial.
    pub fn is_lost(&self) -> bool {
        matches!(self, LockError::Lost { .. })
    }

    /// Whether the same call, made again a little later, may succeed: the
    /// body did not run, and the cause is one that passes by itself.
    ///
    /// Retryable:
    /// - [`Timeout`](LockError::Timeout): the holder will release or expire;
    /// - [`Backend`](LockError::Backend) and [`Connect`](LockError::Connect)
    ///   whose cause is transient: an IO error, a timeout, a dropped or
    ///   refused connection, or a server answer that says "not now"
    ///   (`READONLY`, `MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`, `LOADING`,
    ///   `MASTERDOWN`, `BUSY`, `NOREPLICAS`): a restart, a failover or a slot
    ///   move in progress;
    /// - [`NoQuorum`](LockError::NoQuorum): the missing Redlock nodes may
    ///   come back;
    /// - [`NotReplicated`](LockError::NotReplicated): the replicas may catch
    ///   up (the lock was released, the body did not run);
    /// - [`WriteFailed`](LockError::WriteFailed) whose commands did not run
    ///   ([`WriteRan::No`]) and whose cause is transient.
    ///
    /// Not retryable:
    /// - [`Lost`](LockError::Lost): the body ran, at least in part; whether
    ///   to run it again depends on what it did, which only the caller knows
    ///   (an idempotent body can simply be called again);
    /// - `Backend`/`Connect` with a permanent cause: `NOPERM` (ACL),
    ///   `WRONGPASS`, `WRONGTYPE` or `LOCKLAYOUT` (the key holds something
    ///   that is not a lock of this version), an invalid URL or option;
    /// - [`WriteNotReplicated`](LockError::WriteNotReplicated) (the write
    ///   ran), and [`WriteFailed`](LockError::WriteFailed) whose commands ran
    ///   in part or may have run: sending a write again that ran would apply
    ///   it twice;
    /// - [`Invalid`](LockError::Invalid), [`InvalidWrite`](LockError::InvalidWrite),
    ///   [`NotInitialized`](LockError::NotInitialized),
    ///   [`AlreadyInitialized`](LockError::AlreadyInitialized): mistakes in
    ///   the program;
    /// - [`ShutDown`](LockError::ShutDown): the client will not take locks
    ///   again.
    pub fn is_retryable(&self) -> bool {
        match self {
            LockError::Timeout { .. }
            | LockError::NoQuorum { .. }
            | LockError::NotReplicated { .. } => true,
            LockError::Backend { source, .. } | LockError::Connect(source) => is_transient(source),
            LockError::WriteFailed {
                source,
                ran: WriteRan::No,
                ..
            } => is_transient(source),
            _ => false,
        }
    }
}

/// A Redis error as Redis words it: a server error as its code and message
/// (`NOPERM this user has no permissions ...`), anything else (IO, timeout)
/// as the redis crate shows it; then what to do, when the cause says (see
/// [`advice::hint`]).
struct Cause<'a>(&'a redis::RedisError);

impl std::fmt::Display for Cause<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        CauseOnly(self.0).fmt(f)?;
        match advice::hint(self.0) {
            Some(hint) => write!(f, "; {hint}"),
            None => Ok(()),
        }
    }
}

/// [`Cause`] without what to do.
struct CauseOnly<'a>(&'a redis::RedisError);

impl std::fmt::Display for CauseOnly<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const CHANGING: &str = "is changing (a failover or a slot migration is in progress, \
                                or the cluster is down): the call may be made again";
        match (self.0.code(), self.0.detail()) {
            // Redis Cluster: said plainly, not as the redirect's raw text
            // (which may name a master that died); the answer itself is
            // the error's source.
            (Some("MOVED" | "ASK"), _) => match self.0.redirect_node() {
                Some((_, slot)) => write!(f, "the master of hash slot {slot} {CHANGING}"),
                None => write!(f, "the slot's master {CHANGING}"),
            },
            (Some("TRYAGAIN" | "CLUSTERDOWN"), _) => write!(f, "the slot's master {CHANGING}"),
            (Some(code), Some(detail)) => write!(f, "{code} {detail}"),
            _ => self.0.fmt(f),
        }
    }
}

/// Whether `error` is one that passes by itself: see
/// [`LockError::is_retryable`].
fn is_transient(error: &redis::RedisError) -> bool {
    if error.is_timeout()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_io_error()
    {
        return true;
    }
    matches!(
        error.code(),
        Some(
            "READONLY"
                | "MOVED"
                | "ASK"
                | "TRYAGAIN"
                | "CLUSTERDOWN"
                | "LOADING"
                | "MASTERDOWN"
                | "BUSY"
                | "NOREPLICAS"
        )
    )
}

/// One Redis node that failed a Redlock operation.
#[derive(Debug)]
pub struct NodeFailure {
    /// The node, as its URL without credentials.
    pub node: String,
    /// What went wrong: the error, or a timeout.
    pub error: redis::RedisError,
}

impl NodeFailure {
    /// Each failure as its node and cause, then what to do, once for all
    /// the nodes whose cause says the same.
    pub(crate) fn list(failures: &[NodeFailure]) -> String {
        let mut parts: Vec<String> = failures
            .iter()
            .map(|f| format!("{}: {}", f.node, CauseOnly(&f.error)))
            .collect();
        let mut hints: Vec<&str> = Vec::new();
        for hint in failures.iter().filter_map(|f| advice::hint(&f.error)) {
            if !hints.contains(&hint) {
                hints.push(hint);
            }
        }
        parts.extend(hints.into_iter().map(str::to_owned));
        parts.join("; ")
    }
}

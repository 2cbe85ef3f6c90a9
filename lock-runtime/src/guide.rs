//! Guides that span several items: read them as chapters.
//!
//! Each is also a Markdown file in the repository, under
//! `lock-runtime/src/guide/`.
//!
//! - [`deployments`]: which deployment to choose (one node, Sentinel and
//!   replicas, `sync_replicas`, Redis Cluster, Redlock, the embedded
//!   backend) and what each guarantees when a server fails.
//! - [`kinds`]: read-write, counted (permits) and fair locks: their
//!   semantics, data, limits per deployment, and which kinds share a key.
//! - [`security`]: passwords, the ACL rules of a least-privilege user, TLS.
//! - [`operations`]: the client and its options, errors, inspecting and
//!   force-unlocking a lock, shutdown, the key prefix, upgrading the layout.
//! - [`observability`]: the tracing span and events, the metrics, and
//!   Prometheus.
//! - [`safety`]: how a locked call works, the safety model (leases, loss,
//!   fencing tokens), how it is tested, and the limits.
//! - [`several_keys`]: several keys at once, all or nothing.
//! - [`leader`]: leader election: one leader per key, a term with a
//!   fencing token and a loss signal.
//! - [`scheduled`]: jobs that run once per period across a fleet
//!   (`hold_at_least`).
//! - [`fencing`]: how a store checks fencing tokens, in Lua and SQL.
//! - [`performance`]: the benchmarks, their targets and how they were
//!   measured.
//! - [`testing`]: testing code that uses the attribute, without Redis.

#[doc = include_str!("guide/deployments.md")]
pub mod deployments {}

#[doc = include_str!("guide/kinds.md")]
pub mod kinds {}

#[doc = include_str!("guide/security.md")]
pub mod security {}

#[doc = include_str!("guide/operations.md")]
pub mod operations {}

#[doc = include_str!("guide/observability.md")]
pub mod observability {}

#[doc = include_str!("guide/safety.md")]
pub mod safety {}

#[doc = include_str!("guide/several_keys.md")]
pub mod several_keys {}

#[doc = include_str!("guide/leader.md")]
pub mod leader {}

#[doc = include_str!("guide/scheduled.md")]
pub mod scheduled {}

#[doc = include_str!("guide/fencing.md")]
pub mod fencing {}

#[doc = include_str!("guide/performance.md")]
pub mod performance {}

#[doc = include_str!("guide/testing.md")]
pub mod testing {}

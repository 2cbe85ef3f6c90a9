//! The workspace's one way to start test servers: `redis-server` processes
//! (or the binary `LOCK_TEST_REDIS_SERVER` names) on loopback TCP ports or
//! unix sockets, each in a temporary directory of its own, stopped by pid
//! (also on drop). Single nodes ([`Server`], [`ServerOptions`]), TLS
//! ([`Certs`]), replicas and sentinels ([`replication`]), and clusters
//! ([`cluster`]); and PostgreSQL servers ([`Postgres`]), the resource of
//! the fenced-write tests; and a freezable loopback TCP proxy ([`Proxy`]),
//! a connection that stalls without a reset, or is cut. The integration tests, `lock-chaos` and
//! `lock-bench` use it; it is not published.
//!
//! A redis-server is started with no parent-death signal: a server lives
//! until it is stopped, dropped, or the test process exits and its drop
//! runs. Constructors that return `std::io::Result` are for the tools; the
//! shortcuts that panic ([`Server::tcp`], [`Server::tls`],
//! [`replication::Sentinels::start`], [`cluster::RedisCluster::start`]...)
//! are for tests.
#![warn(missing_docs)]

mod binaries;
pub mod cluster;
mod dir;
mod ports;
mod postgres;
mod proxy;
pub mod replication;
mod server;
mod tls;
mod wait;

pub use binaries::{cli_bin, not_startable, server_bin};
pub use dir::TempDir;
pub use ports::{free_cluster_port, free_port};
pub use postgres::{postgres_bin_dir, Postgres};
pub use proxy::Proxy;
pub use server::{calls_in, Paused, Server, ServerOptions};
pub use tls::Certs;
pub use wait::wait_until;

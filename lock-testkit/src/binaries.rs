//! Which binaries the servers run: the environment's choice, or PATH's.

use std::ffi::OsString;

/// The server binary every server runs (plain servers, replicas, sentinels
/// with `--sentinel`, cluster nodes): `LOCK_TEST_REDIS_SERVER`, or
/// `redis-server` from PATH. `scripts/test.sh` points it at each server
/// family in turn (Redis 7.0, Redis 6.2, Valkey).
pub fn server_bin() -> OsString {
    bin_from_env("LOCK_TEST_REDIS_SERVER", "redis-server")
}

/// The client binary (`--cluster create`): `LOCK_TEST_REDIS_CLI`, or
/// `redis-cli` from PATH.
pub fn cli_bin() -> OsString {
    bin_from_env("LOCK_TEST_REDIS_CLI", "redis-cli")
}

fn bin_from_env(var: &str, default: &str) -> OsString {
    std::env::var_os(var)
        .filter(|value| !value.is_empty())
        .unwrap_or_else(|| default.into())
}

/// What to say when `bin` cannot be started.
pub fn not_startable(bin: &OsString) -> String {
    format!(
        "cannot start {}: install redis-server (scripts/test.sh installs it) or set \
         LOCK_TEST_REDIS_SERVER / LOCK_TEST_REDIS_CLI",
        bin.to_string_lossy()
    )
}

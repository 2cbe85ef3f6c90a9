//! The client's registry entry and connection names on each deployment
//! (see `presence.rs`): written, read and deleted. Not on a lock call's
//! path.

use std::collections::HashMap;

use ::redis::RedisError;

use super::Backend;
use crate::io::polled_on;
use crate::presence::{ClientRecord, TTL};
use crate::route::cluster::ClusterBackend;
use crate::route::node::RedisBackend;
use crate::route::{millis, BackendError};

/// A registry entry's fields, as stored.
type Entry = HashMap<String, String>;

impl Backend {
    /// Names the client's connections and writes its registry entry.
    pub(crate) async fn announce(&self, record: &ClientRecord) -> Result<(), BackendError> {
        match self {
            Backend::Redis(b) => Ok(announce_node(b, record).await?),
            Backend::Sentinel(b) => Ok(announce_node(&b.current(), record).await?),
            // The registry entry only: a cluster's connections stay unnamed.
            Backend::Cluster(b) => Ok(announce_cluster(b, record).await?),
            Backend::Redlock(b) => {
                let answers =
                    polled_on(b.home(), b.on_all(|node| announce_node(node, record))).await;
                if answers.iter().any(Result::is_ok) {
                    return Ok(());
                }
                Err(BackendError::NoQuorum {
                    needed: 1,
                    reached: 0,
                    failures: b.failures(answers),
                })
            }
            #[cfg(feature = "embedded")]
            Backend::Embedded(_) => Ok(()),
        }
    }

    /// Deletes the client's registry entry (it shut down).
    pub(crate) async fn retire(&self, record: &ClientRecord) -> Result<(), BackendError> {
        match self {
            Backend::Redis(b) => Ok(retire_node(b, record).await?),
            Backend::Sentinel(b) => Ok(retire_node(&b.current(), record).await?),
            Backend::Cluster(b) => Ok(b.query(::redis::cmd("DEL").arg(&record.key)).await?),
            Backend::Redlock(b) => {
                let _ = polled_on(b.home(), b.on_all(|node| retire_node(node, record))).await;
                Ok(())
            }
            #[cfg(feature = "embedded")]
            Backend::Embedded(_) => Ok(()),
        }
    }

    /// The registry entry at `key`, if there is one (on Redlock: the first
    /// node that has it).
    pub(crate) async fn client_entry(&self, key: &str) -> Result<Option<Entry>, BackendError> {
        match self {
            Backend::Redis(b) => Ok(entry_node(b, key).await?),
            Backend::Sentinel(b) => Ok(entry_node(&b.current(), key).await?),
            Backend::Cluster(b) => {
                let entry: Entry = b.query(::redis::cmd("HGETALL").arg(key)).await?;
                Ok((!entry.is_empty()).then_some(entry))
            }
            Backend::Redlock(b) => {
                let answers = polled_on(b.home(), b.on_all(|node| entry_node(node, key))).await;
                Ok(answers.into_iter().flatten().flatten().next())
            }
            #[cfg(feature = "embedded")]
            Backend::Embedded(_) => Ok(None),
        }
    }
}

async fn announce_node(b: &RedisBackend, record: &ClientRecord) -> Result<(), RedisError> {
    if record.names_connections() {
        if let Err(error) = b.set_name(&record.name).await {
            if !record.setname_failed(&error) {
                // A connection being remade: try again soon.
                return Err(error);
            }
        }
    }
    if !record.writes_entry() {
        return Ok(());
    }
    let mut pipeline = ::redis::pipe();
    pipeline.atomic().cmd("HSET").arg(&record.key);
    for (field, value) in record.fields() {
        pipeline.arg(field).arg(value);
    }
    pipeline
        .ignore()
        .cmd("PEXPIRE")
        .arg(&record.key)
        .arg(millis(TTL))
        .ignore();
    match b.query_pipeline(&pipeline).await {
        Err(error) if record.entry_failed(&error) => Ok(()),
        answer => answer,
    }
}

/// The registry entry on Cluster: `HSET` then `PEXPIRE`, both routed to
/// the entry's slot.
async fn announce_cluster(b: &ClusterBackend, record: &ClientRecord) -> Result<(), RedisError> {
    if !record.writes_entry() {
        return Ok(());
    }
    let mut hset = ::redis::cmd("HSET");
    hset.arg(&record.key);
    for (field, value) in record.fields() {
        hset.arg(field).arg(value);
    }
    let written = async {
        b.query::<()>(&hset).await?;
        let mut expire = ::redis::cmd("PEXPIRE");
        expire.arg(&record.key).arg(millis(TTL));
        b.query::<()>(&expire).await
    };
    match written.await {
        Err(error) if record.entry_failed(&error) => Ok(()),
        answer => answer,
    }
}

async fn retire_node(b: &RedisBackend, record: &ClientRecord) -> Result<(), RedisError> {
    let mut pipeline = ::redis::pipe();
    pipeline.cmd("DEL").arg(&record.key).ignore();
    b.query_pipeline(&pipeline).await
}

async fn entry_node(b: &RedisBackend, key: &str) -> Result<Option<Entry>, RedisError> {
    let mut pipeline = ::redis::pipe();
    pipeline.cmd("HGETALL").arg(key);
    let (entry,): (Entry,) = b.query_pipeline(&pipeline).await?;
    Ok((!entry.is_empty()).then_some(entry))
}

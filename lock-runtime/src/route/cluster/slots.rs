//! Redis Cluster's slots: the master of each slot range as one node sees
//! it, read with `CLUSTER SLOTS` (a replica answers it too); the slot of a
//! key; a client for one node.

use std::sync::Arc;

use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Client, ConnectionAddr, ConnectionInfo, RedisError, Value};

/// How many slots Redis Cluster has.
const SLOTS: u16 = 16384;

/// The master (`host:port`) of each slot range, as one node answered.
#[derive(Default)]
pub(crate) struct SlotMap {
    /// `(first slot, last slot, master)`, as the node listed them.
    ranges: Vec<(u16, u16, Arc<str>)>,
}

impl SlotMap {
    /// Asks `CLUSTER SLOTS` on `con`, the connection to `asked`
    /// (`host:port`; its host stands for a master listed without one).
    pub(crate) async fn read(
        con: &mut MultiplexedConnection,
        asked: &str,
    ) -> Result<SlotMap, RedisError> {
        let answer: Value = redis::cmd("CLUSTER").arg("SLOTS").query_async(con).await?;
        Ok(SlotMap::parse(answer, asked))
    }

    /// The map in a `CLUSTER SLOTS` answer; a range whose master has no
    /// known address is left out.
    pub(crate) fn parse(answer: Value, asked: &str) -> SlotMap {
        let asked_host = asked.rsplit_once(':').map_or(asked, |(host, _)| host);
        let Value::Array(items) = answer else {
            return SlotMap { ranges: Vec::new() };
        };
        let ranges = items
            .iter()
            .filter_map(|item| {
                let Value::Array(parts) = item else {
                    return None;
                };
                let (Some(Value::Int(first)), Some(Value::Int(last)), Some(master)) =
                    (parts.first(), parts.get(1), parts.get(2))
                else {
                    return None;
                };
                let first = u16::try_from(*first).ok()?;
                let last = u16::try_from(*last).ok()?;
                Some((first, last, node_address(master, asked_host)?))
            })
            .collect();
        SlotMap { ranges }
    }

    /// Whether the answer named no master at all (a node that has not
    /// joined the cluster yet, say).
    pub(crate) fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Records that `master` serves `slot` now (a redirect said so).
    pub(crate) fn set(&mut self, slot: u16, master: Arc<str>) {
        self.ranges
            .retain(|(first, last, _)| !(*first..=*last).contains(&slot));
        self.ranges.push((slot, slot, master));
    }

    /// The master of `slot`, if the map has one.
    pub(crate) fn master_of(&self, slot: u16) -> Option<&Arc<str>> {
        self.ranges
            .iter()
            .find(|(first, last, _)| (*first..=*last).contains(&slot))
            .map(|(_, _, master)| master)
    }
}

/// `host:port` of a node in a `CLUSTER SLOTS` range (`[host, port, id,
/// ...]`). An empty or wildcard host means the asked node's host; `?`
/// means the address is unknown.
fn node_address(node: &Value, asked_host: &str) -> Option<Arc<str>> {
    let Value::Array(parts) = node else {
        return None;
    };
    let host = match parts.first()? {
        Value::BulkString(host) => String::from_utf8_lossy(host).into_owned(),
        Value::SimpleString(host) => host.clone(),
        Value::Nil => String::new(),
        _ => return None,
    };
    let host = match host.as_str() {
        "?" => return None,
        "" | "0.0.0.0" | "::" => asked_host.to_owned(),
        _ => host,
    };
    let Some(Value::Int(port)) = parts.get(1) else {
        return None;
    };
    let port = u16::try_from(*port).ok()?;
    Some(format!("{host}:{port}").into())
}

/// The hash slot of `key`: CRC16 (XMODEM) of the key, or of the text
/// between its first `{` and the next `}` when that is not empty.
pub(crate) fn slot_of(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|b| *b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|b| *b == b'}')?;
            Some(&rest[..close])
        })
        .filter(|tag| !tag.is_empty())
        .unwrap_or(key);
    crc16(hashed) % SLOTS
}

/// CRC16/XMODEM (polynomial 0x1021, initial value 0), as Redis Cluster
/// hashes keys.
fn crc16(bytes: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(bytes)
}

/// `CLUSTER SLOTS` sent through the client's cluster connection to the
/// master of `slot` (as the connection knows it), read as a map. Never to
/// a node at random: a frozen replica would hold the request (and the
/// connection's other requests with it) until it times out.
pub(crate) async fn read_through(
    commands: &ClusterConnection,
    slot: u16,
    seed_host: &str,
) -> Result<SlotMap, RedisError> {
    let mut cmd = redis::cmd("CLUSTER");
    cmd.arg("SLOTS");
    let master = SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master));
    let answer = commands
        .clone()
        .route_command(cmd, RoutingInfo::SingleNode(master))
        .await?;
    Ok(SlotMap::parse(answer, seed_host))
}

/// A client for the cluster node `node` (`host:port`) with `base`'s
/// credentials and TLS settings.
pub(crate) fn node_client(base: &ConnectionInfo, node: &str) -> Result<Client, RedisError> {
    let (host, port) = node
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h.to_owned(), p.parse().ok()?)))
        .ok_or_else(|| {
            RedisError::from((
                redis::ErrorKind::Parse,
                "a cluster node's address has no port",
                node.to_owned(),
            ))
        })?;
    let addr = match base.addr() {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host,
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => ConnectionAddr::Tcp(host, port),
    };
    Client::open(base.clone().set_addr(addr))
}

#[cfg(test)]
mod tests {
    use redis::cluster_routing::Slot;
    use redis::Value;

    use super::{slot_of, SlotMap};

    #[test]
    fn slots_are_redis_clusters() {
        // `CLUSTER KEYSLOT foo` is 12182; `{user1000}.following` hashes
        // `user1000` only.
        assert_eq!(slot_of(b"foo"), 12182);
        assert_eq!(slot_of(b"{user1000}.following"), slot_of(b"user1000"));
        assert_ne!(slot_of(b"{}x"), slot_of(b"x"));
        for key in ["lock:a", "lock:{t}:b", "lock:{}:c", "lock:{t", "", "lock:ü"] {
            assert_eq!(
                Slot::new(slot_of(key.as_bytes())),
                Some(Slot::for_key(key)),
                "{key}"
            );
        }
    }

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::BulkString(host.into()),
            Value::Int(port),
            Value::BulkString(b"id".to_vec()),
        ])
    }

    #[test]
    fn a_cluster_slots_answer_names_each_ranges_master() {
        let range = |first, last, master| {
            Value::Array(vec![
                Value::Int(first),
                Value::Int(last),
                master,
                node("10.0.0.9", 7009),
            ])
        };
        let answer = Value::Array(vec![
            range(0, 5460, node("10.0.0.1", 7000)),
            range(5461, 10922, node("", 7001)),
            range(10923, 16383, node("?", 7002)),
        ]);
        let map = SlotMap::parse(answer, "10.0.0.5:7005");
        assert_eq!(map.master_of(0).map(|m| &**m), Some("10.0.0.1:7000"));
        assert_eq!(map.master_of(5460).map(|m| &**m), Some("10.0.0.1:7000"));
        assert_eq!(map.master_of(5461).map(|m| &**m), Some("10.0.0.5:7001"));
        assert_eq!(map.master_of(16383), None);
        assert!(!map.is_empty());
        assert!(SlotMap::parse(Value::Array(Vec::new()), "h:1").is_empty());
    }
}

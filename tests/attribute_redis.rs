//! The attribute on a real Redis through the global client: the Redis key,
//! the data layout, and the round trips an annotated call costs.
mod support;

use std::time::Duration;

use lock_runtime::{distributed_lock, LockClient, LockError};
use support::{Holder, RedisServer};

struct Orders {
    server_url: String,
}

impl Orders {
    #[distributed_lock(key = "order:<id>")]
    async fn outer(&self, id: u64) -> Result<Seen, LockError> {
        let outer_token = lock_runtime::fencing_token();
        let seen = self.inner(id).await?;
        assert_eq!(outer_token, Some(seen.token), "a re-entry keeps the token");
        Ok(seen)
    }

    /// Re-enters `order:<id>`: must not wait for itself (wait is zero).
    #[distributed_lock(key = "order:<id>", wait = "0s")]
    async fn inner(&self, id: u64) -> Result<Seen, LockError> {
        let mut con = redis::Client::open(self.server_url.as_str())
            .expect("url")
            .get_connection()
            .expect("connect");
        let key = format!("lock:order:{id}");
        let value: String = redis::cmd("GET").arg(&key).query(&mut con).expect("GET");
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut con).expect("PTTL");
        let token = lock_runtime::fencing_token_of(&format!("order:{id}")).expect("held");
        Ok(Seen { value, ttl, token })
    }
}

/// What a locked body saw of its lock in Redis.
struct Seen {
    value: String,
    ttl: i64,
    token: u64,
}

#[distributed_lock(key = "plain:<id>")]
async fn plain(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotated_calls_on_redis() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    lock_runtime::init(client).expect("first init");
    let orders = Orders {
        server_url: server.url(),
    };

    // The lock is a string at prefix + rendered key, `L1:<fence>:h:<owner>`
    // (the nested call re-entered in the process: nothing changed in
    // Redis), with a lease.
    let seen = orders.outer(7).await.expect("chain");
    let (fence, state, owner) = support::parse_lock(&seen.value).expect("layout 1");
    assert_eq!(fence, seen.token, "{}", seen.value);
    assert_eq!(state, "h", "{}", seen.value);
    assert!(!owner.is_empty(), "{}", seen.value);
    assert!(seen.ttl > 25_000 && seen.ttl <= 30_000, "{}", seen.ttl);
    assert!(
        server.owners("lock:order:7").is_empty(),
        "released after the chain"
    );
    // The next holder gets a greater token.
    let next = orders.outer(7).await.expect("chain");
    assert!(
        next.token > seen.token,
        "{} then {}",
        seen.token,
        next.token
    );
    assert_eq!(
        lock_runtime::fencing_token(),
        None,
        "outside any locked body"
    );

    // Round trips: an uncontended call is exactly two EVALSHA calls
    // (acquire, release); a nested re-entry adds none.
    plain(1).await.expect("warm up: scripts loaded");
    server.reset_stats();
    assert_eq!(plain(2).await.expect("plain"), 2);
    assert_eq!(server.command_calls("evalsha"), 2);
    server.reset_stats();
    orders.outer(8).await.expect("chain");
    assert_eq!(
        server.command_calls("evalsha"),
        2,
        "re-entry costs no round trip"
    );
    assert_eq!(server.command_calls("eval"), 0);

    // A held lock is held against other processes' owners.
    let other = LockClient::connect(&server.url()).await.expect("connect");
    let holder = Holder::start(&other, "plain:3", Default::default()).await;
    let blocked = tokio::time::timeout(Duration::from_millis(300), plain(3)).await;
    assert!(
        blocked.is_err(),
        "the annotated call waits while another owner holds"
    );
    holder.release().await.expect("holder ok");
    assert_eq!(plain(3).await.expect("free again"), 3);

    assert!(matches!(
        lock_runtime::init(LockClient::in_memory()),
        Err(LockError::AlreadyInitialized)
    ));
}

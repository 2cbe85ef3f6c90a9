//! Every function shape `#[distributed_lock]` supports compiles, keeps its
//! signature, and runs its body.
#![deny(unused, unreachable_code)]

use std::fmt::Display;

use lock_runtime::{distributed_lock, LockError};

#[derive(Debug, thiserror::Error)]
enum AppError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("bad number: {0}")]
    Parse(#[from] std::num::ParseIntError),
    #[error("out of stock")]
    OutOfStock,
}

/// Installs the embedded backend once for all tests of this file.
fn setup() {
    let _ = lock_runtime::init(lock_runtime::LockClient::in_memory());
}

#[distributed_lock(key = "order:<id>", lease = "30s", wait = "5s", renew = true)]
async fn deduct(id: u64, qty: u32) -> Result<u32, AppError> {
    if qty > 10 {
        return Err(AppError::OutOfStock);
    }
    Ok(u32::try_from(id).unwrap() * 100 - qty)
}

#[tokio::test]
async fn free_function() {
    setup();
    assert_eq!(deduct(7, 3).await.unwrap(), 697);
    assert!(matches!(deduct(7, 11).await, Err(AppError::OutOfStock)));
}

/// `?` on another error type, an early `return`, and a body that only ends
/// in `return`.
#[distributed_lock(key = "parse:<text>", wait = "0s", renew = false)]
async fn parse_positive(text: String) -> Result<i64, AppError> {
    let n: i64 = text.trim().parse()?;
    if n <= 0 {
        return Ok(0);
    }
    return Ok(n);
}

#[tokio::test]
async fn question_mark_and_return() {
    setup();
    assert_eq!(parse_positive(" 42 ".to_owned()).await.unwrap(), 42);
    assert_eq!(parse_positive("-3".to_owned()).await.unwrap(), 0);
    assert!(matches!(
        parse_positive("x".to_owned()).await,
        Err(AppError::Parse(_))
    ));
}

struct Account {
    id: String,
    balance: u64,
}

impl Account {
    /// Docs and other attributes stay on the function.
    #[must_use = "the balance is the point"]
    #[distributed_lock(key = "account:<self.id>")]
    async fn balance(&self) -> Result<u64, AppError> {
        Ok(self.balance)
    }

    #[distributed_lock(key = "account:<self.id>", lease = "1m30s")]
    async fn deposit(&mut self, amount: u64) -> Result<u64, AppError> {
        self.balance += amount;
        Ok(self.balance)
    }

    /// `self` by value, its non-`Copy` field in the key and moved by the body.
    #[distributed_lock(key = "account:<self.id>:close")]
    async fn close(self) -> Result<String, AppError> {
        Ok(self.id)
    }
}

#[tokio::test]
async fn methods() {
    setup();
    let mut account = Account {
        id: "a-1".to_owned(),
        balance: 10,
    };
    assert_eq!(account.balance().await.unwrap(), 10);
    assert_eq!(account.deposit(5).await.unwrap(), 15);
    assert_eq!(account.balance().await.unwrap(), 15);
    assert_eq!(account.close().await.unwrap(), "a-1");
}

#[distributed_lock(key = "cache:<key>", lease = "250ms")]
async fn store<K, V>(key: K, value: V) -> Result<(String, V), AppError>
where
    K: Display + Send,
    V: Clone + Send,
{
    Ok((key.to_string(), value.clone()))
}

#[distributed_lock(key = "greet:<name>")]
async fn greet(name: impl Display + Send, times: usize) -> Result<String, AppError> {
    Ok(name.to_string().repeat(times))
}

#[distributed_lock(key = "len:<name>")]
async fn borrowed(name: &str) -> Result<usize, AppError> {
    Ok(name.len())
}

#[tokio::test]
async fn generics_impl_trait_and_references() {
    setup();
    assert_eq!(
        store("k", vec![1, 2]).await.unwrap(),
        ("k".to_owned(), vec![1, 2])
    );
    assert_eq!(greet("ab", 2).await.unwrap(), "abab");
    assert_eq!(borrowed("four").await.unwrap(), 4);
}

trait Inventory {
    async fn reserve(&self, sku: u64, count: u32) -> Result<u32, AppError>;
}

struct Warehouse {
    name: &'static str,
}

impl Inventory for Warehouse {
    #[distributed_lock(key = "stock:<self.name>:<sku>", lease = "10s")]
    async fn reserve(&self, sku: u64, count: u32) -> Result<u32, AppError> {
        let _ = sku;
        Ok(count)
    }
}

#[tokio::test]
async fn async_fn_in_trait_impl() {
    setup();
    let warehouse = Warehouse { name: "north" };
    assert_eq!(warehouse.reserve(9, 4).await.unwrap(), 4);
}

/// An anyhow-style alias of `Result` with one parameter.
mod aliased {
    use lock_runtime::{distributed_lock, LockError};

    #[derive(Debug)]
    pub struct MyErr;

    impl From<LockError> for MyErr {
        fn from(_: LockError) -> Self {
            MyErr
        }
    }

    pub type Result<T> = std::result::Result<T, MyErr>;

    #[distributed_lock(key = "job:<name>")]
    pub async fn run(name: &str, fail: bool) -> Result<String> {
        if fail {
            return Err(MyErr);
        }
        Ok(format!("ran {name}"))
    }
}

#[tokio::test]
async fn result_alias() {
    setup();
    assert_eq!(aliased::run("nightly", false).await.unwrap(), "ran nightly");
    assert!(aliased::run("nightly", true).await.is_err());
}

struct Customer {
    id: u32,
}

struct Order {
    customer: Customer,
    lines: (u8, u8),
}

/// Field paths, tuple indices, literal braces, `mut` and a tuple pattern.
#[distributed_lock(key = "{shop}:<order.customer.id>/<order.lines.1>:<step>")]
async fn fields(order: Order, mut step: u32, (a, b): (u8, u8)) -> Result<u32, AppError> {
    step += 1;
    Ok(order.customer.id + u32::from(order.lines.0 + a + b) + step)
}

#[distributed_lock(key = "static-{}")]
async fn constant_key() -> Result<(), AppError> {
    Ok(())
}

#[tokio::test]
async fn key_templates() {
    setup();
    let order = Order {
        customer: Customer { id: 100 },
        lines: (1, 2),
    };
    assert_eq!(fields(order, 0, (3, 4)).await.unwrap(), 109);
    constant_key().await.unwrap();
}

/// The runtime named through another path, as with a renamed dependency.
mod renamed {
    use lock_runtime as locks;

    #[locks::distributed_lock(key = "renamed:<id>", crate = "locks")]
    pub async fn run(id: u8) -> Result<u8, locks::LockError> {
        Ok(id)
    }
}

#[tokio::test]
async fn crate_option() {
    setup();
    assert_eq!(renamed::run(5).await.unwrap(), 5);
}

#[tokio::test]
async fn futures_are_send() {
    setup();
    let closing = Account {
        id: "a-2".to_owned(),
        balance: 0,
    };
    let handles = (
        tokio::spawn(parse_positive("7".to_owned())),
        tokio::spawn(closing.close()),
        tokio::spawn(greet(String::from("x"), 3)),
    );
    assert_eq!(handles.0.await.unwrap().unwrap(), 7);
    assert_eq!(handles.1.await.unwrap().unwrap(), "a-2");
    assert_eq!(handles.2.await.unwrap().unwrap(), "xxx");
}

/// The key held by the running body, as the attribute rendered it.
fn holds(key: &str) -> bool {
    lock_runtime::fencing_token_of(key).is_some()
}

/// An axum-style extractor: the argument is a pattern that binds `id`.
struct Path<T>(T);

#[distributed_lock(key = "order:<id>")]
async fn by_path(Path(id): Path<String>) -> Result<bool, AppError> {
    let held = holds(&format!("order:{id}"));
    drop(id); // The body owns what the pattern bound.
    Ok(held)
}

/// Tuple and struct patterns, `mut` and `ref` inside them.
#[distributed_lock(key = "pair:<a>:<b>:<name>")]
async fn by_patterns(
    (mut a, b): (u32, u32),
    Customer { id: ref name }: Customer,
) -> Result<bool, AppError> {
    a += 1;
    Ok(holds(&format!("pair:{}:{b}:{name}", a - 1)))
}

#[tokio::test]
async fn pattern_arguments() {
    setup();
    assert!(by_path(Path("o-1".to_owned())).await.unwrap());
    assert!(by_patterns((1, 2), Customer { id: 3 }).await.unwrap());
}

#[derive(Debug)]
struct Sku {
    #[allow(dead_code)] // Read by `Debug`.
    code: &'static str,
}

/// `<sku:?>` renders with `Debug`; braces stay literal text around a
/// placeholder (a Redis Cluster hash tag).
#[distributed_lock(key = "{<shop>}:sku:<sku:?>")]
async fn debug_form(shop: u32, sku: Sku) -> Result<bool, AppError> {
    let _ = sku;
    Ok(holds(&format!("{{{shop}}}:sku:Sku {{ code: \"x\" }}")))
}

#[tokio::test]
async fn debug_placeholder_and_hash_tag() {
    setup();
    assert!(debug_form(4, Sku { code: "x" }).await.unwrap());
}

/// Values are copied into the key as they are: `a:<x>:<y>` with `x = "1:2"`
/// and `y = "3"` is the same lock as `x = "1"`, `y = "2:3"`, as documented
/// under "Key templates". The inner call re-enters the lock the outer holds.
#[distributed_lock(key = "a:<x>:<y>", wait = "0s")]
async fn verbatim(x: &str, y: &str) -> Result<bool, AppError> {
    verbatim_inner("1", "2:3").await
}

#[distributed_lock(key = "a:<x>:<y>", wait = "0s")]
async fn verbatim_inner(x: &str, y: &str) -> Result<bool, AppError> {
    Ok(holds("a:1:2:3"))
}

#[tokio::test]
async fn values_are_rendered_verbatim() {
    setup();
    assert!(verbatim("1:2", "3").await.unwrap());
}

const LEASE: std::time::Duration = std::time::Duration::from_secs(20);

struct Configured {
    lease: std::time::Duration,
}

fn wait_for(attempts: u32) -> std::time::Duration {
    std::time::Duration::from_millis(u64::from(attempts) * 100)
}

impl Configured {
    /// `lease` and `wait` as expressions, evaluated at each call.
    #[distributed_lock(key = "cfg:<id>", lease = self.lease, wait = wait_for(id))]
    async fn run(self, id: u32) -> Result<u32, AppError> {
        let Configured { lease } = self; // The body takes `self`.
        Ok(u32::try_from(lease.as_millis()).unwrap() + id)
    }
}

/// A reference to a `Duration`, as a configuration getter may give.
fn no_wait() -> &'static std::time::Duration {
    &std::time::Duration::ZERO
}

#[distributed_lock(key = "const:<id>", lease = LEASE, wait = no_wait())]
async fn const_lease(id: u32) -> Result<u32, AppError> {
    Ok(id)
}

#[tokio::test]
async fn duration_expressions() {
    setup();
    let configured = Configured {
        lease: std::time::Duration::from_secs(1),
    };
    assert_eq!(configured.run(3).await.unwrap(), 1003);
    assert_eq!(const_lease(2).await.unwrap(), 2);
    // The expression is the lease: one too short fails at run time.
    let short = Configured {
        lease: std::time::Duration::from_millis(5),
    };
    assert!(matches!(
        short.run(1).await,
        Err(AppError::Lock(LockError::Invalid { .. }))
    ));
}

/// Methods of an `#[async_trait]` impl: the attribute sees async-trait's
/// rewritten method and locks inside its boxed future.
#[async_trait::async_trait]
trait Ledger {
    async fn post(&self, entry: u64, pair: (u32, u32)) -> Result<bool, AppError>;
    async fn adjust(&mut self, by: u64) -> Result<u64, AppError>;
    async fn close(self) -> Result<String, AppError>;
}

struct Book {
    name: String,
    total: u64,
    lease: std::time::Duration,
}

#[async_trait::async_trait]
impl Ledger for Book {
    #[distributed_lock(key = "ledger:<self.name>:<entry>:<a>", lease = self.lease)]
    async fn post(&self, entry: u64, (a, b): (u32, u32)) -> Result<bool, AppError> {
        if b == 0 {
            return Err(AppError::OutOfStock);
        }
        Ok(holds(&format!("ledger:{}:{entry}:{a}", self.name)))
    }

    #[distributed_lock(key = "ledger:<self.name>", wait = "1s")]
    async fn adjust(&mut self, by: u64) -> Result<u64, AppError> {
        self.total += by;
        Ok(self.total)
    }

    #[distributed_lock(key = "ledger:<self.name>:close")]
    async fn close(self) -> Result<String, AppError> {
        Ok(self.name)
    }
}

#[tokio::test]
async fn async_trait_methods() {
    setup();
    let mut book = Book {
        name: "b-1".to_owned(),
        total: 0,
        lease: std::time::Duration::from_secs(5),
    };
    assert!(book.post(7, (1, 2)).await.unwrap());
    assert!(matches!(
        book.post(7, (1, 0)).await,
        Err(AppError::OutOfStock)
    ));
    assert_eq!(book.adjust(3).await.unwrap(), 3);
    let closing = tokio::spawn(book.close());
    assert_eq!(closing.await.unwrap().unwrap(), "b-1");
}

/// A service with a client of its own, beside the global one.
struct Tenant {
    locks: lock_runtime::LockClient,
    id: u32,
}

impl Tenant {
    /// `client = &self.locks`: the body takes `self`, the call keeps a clone.
    #[distributed_lock(key = "tenant:<self.id>", client = &self.locks, wait = "0s")]
    async fn work(self) -> Result<usize, AppError> {
        Ok(self.locks.renewing())
    }
}

#[tokio::test]
async fn client_option() {
    setup();
    let locks = lock_runtime::LockClient::in_memory();
    let tenant = Tenant {
        locks: locks.clone(),
        id: 1,
    };
    // The lock is renewed by the tenant's client, not the global one.
    assert_eq!(tenant.work().await.unwrap(), 1);
    assert_eq!(locks.renewing(), 0);
    // Held on the tenant's client by another task, the key is busy there.
    let (taken, release) = (
        tokio::sync::oneshot::channel(),
        tokio::sync::oneshot::channel(),
    );
    let (taken_tx, taken_rx) = taken;
    let (release_tx, release_rx) = release;
    let holder = tokio::spawn({
        let locks = locks.clone();
        async move {
            locks
                .run_locked("tenant:2", lock_runtime::LockOptions::new(), async move {
                    taken_tx.send(()).unwrap();
                    release_rx.await.unwrap();
                    Ok::<_, LockError>(())
                })
                .await
        }
    });
    taken_rx.await.unwrap();
    let busy = Tenant { locks, id: 2 }.work().await;
    assert!(
        matches!(busy, Err(AppError::Lock(LockError::Timeout { .. }))),
        "{busy:?}"
    );
    release_tx.send(()).unwrap();
    holder.await.unwrap().unwrap();
}

/// The kind options: `mode`, `permits`, `fair` and `waiter_lease`, as
/// literals and as expressions. The embedded backend does not take the
/// kinds yet, so only a writer runs here; the other shapes are built (their
/// futures created, which evaluates nothing) to show that they compile and
/// are `Send`.
mod kinds {
    use std::time::Duration;

    use lock_runtime::distributed_lock;

    use super::AppError;

    const PERMITS: u32 = 4;

    #[distributed_lock(key = "doc:<id>", mode = "read")]
    pub async fn read_doc(id: u64) -> Result<u64, AppError> {
        Ok(id)
    }

    /// The same lock as no `mode`.
    #[distributed_lock(key = "doc:<id>", mode = "write", wait = "1s")]
    pub async fn write_doc(id: u64) -> Result<u64, AppError> {
        Ok(id + 1)
    }

    #[distributed_lock(key = "partner-api", permits = 8)]
    pub async fn call_partner() -> Result<(), AppError> {
        Ok(())
    }

    #[distributed_lock(key = "partner-api:<name>", permits = PERMITS)]
    pub async fn call_named(name: &str) -> Result<usize, AppError> {
        Ok(name.len())
    }

    #[distributed_lock(key = "order:<id>", fair = true)]
    pub async fn fair_order(id: u64) -> Result<u64, AppError> {
        Ok(id)
    }

    #[distributed_lock(key = "order:<id>", fair = true, waiter_lease = "2s")]
    pub async fn fair_order_short_waiters(id: u64) -> Result<u64, AppError> {
        Ok(id)
    }

    /// `fair = false` goes with the other kinds; `waiter_lease` with any.
    #[distributed_lock(key = "doc:<id>", mode = "read", fair = false, waiter_lease = "500ms")]
    pub async fn read_doc_unfair(id: u64) -> Result<u64, AppError> {
        Ok(id)
    }

    pub struct Partner {
        pub permits: u32,
        pub waiter_lease: Duration,
    }

    impl Partner {
        /// Expressions, evaluated at each call; the body takes `self`.
        #[distributed_lock(
            key = "partner:<id>",
            permits = self.permits,
            waiter_lease = self.waiter_lease
        )]
        pub async fn call(self, id: u32) -> Result<u32, AppError> {
            Ok(self.permits + id)
        }

        #[distributed_lock(key = "partner:<id>", fair = true, waiter_lease = self.waiter_lease)]
        pub async fn call_in_turn(&self, id: u32) -> Result<u32, AppError> {
            Ok(id)
        }
    }

    /// Through a renamed runtime crate, `LockMode` included.
    pub mod renamed {
        use lock_runtime as locks;

        #[locks::distributed_lock(key = "renamed-doc:<id>", mode = "read", crate = "locks")]
        pub async fn read(id: u8) -> Result<u8, locks::LockError> {
            Ok(id)
        }
    }

    /// In an `#[async_trait]` impl, where `self` is renamed.
    #[async_trait::async_trait]
    pub trait Limited {
        async fn limited(&self, id: u64) -> Result<u64, AppError>;
    }

    #[async_trait::async_trait]
    impl Limited for Partner {
        #[distributed_lock(key = "limited:<id>", permits = self.permits * 2)]
        async fn limited(&self, id: u64) -> Result<u64, AppError> {
            Ok(id + u64::from(self.permits))
        }
    }
}

/// Only checks its argument's type.
fn send<F: std::future::Future + Send>(_future: F) {}

#[tokio::test]
async fn kind_options() {
    use kinds::Limited;

    setup();
    assert_eq!(kinds::write_doc(1).await.unwrap(), 2);
    let partner = kinds::Partner {
        permits: 3,
        waiter_lease: std::time::Duration::from_secs(2),
    };
    send(kinds::read_doc(1));
    send(kinds::call_partner());
    send(kinds::call_named("x"));
    send(kinds::fair_order(1));
    send(kinds::fair_order_short_waiters(1));
    send(kinds::read_doc_unfair(1));
    send(kinds::renamed::read(1));
    send(partner.call_in_turn(1));
    send(partner.limited(1));
    send(partner.call(1));
}

/// `keys` and `hold_at_least`. The futures are only built (which evaluates
/// nothing), to show that each shape compiles and is `Send`.
mod several_keys {
    use std::time::Duration;

    use lock_runtime::{distributed_lock, LockClient};

    use super::AppError;

    pub struct Bank {
        pub name: String,
        pub locks: LockClient,
        pub period: Duration,
    }

    impl Bank {
        /// `self` fields in the templates; the body uses `self` too.
        #[distributed_lock(
            keys = ["bank:<self.name>:account:<from>", "bank:<self.name>:account:<to>"],
            lease = "30s"
        )]
        pub async fn transfer(&self, from: u64, to: u64, amount: u64) -> Result<u64, AppError> {
            Ok(from + to + amount + self.name.len() as u64)
        }

        /// On the bank's own client, every key as a reader; the body takes
        /// `self`.
        #[distributed_lock(
            keys = ["account:<from>", "account:<to:?>"],
            client = &self.locks,
            mode = "read",
            wait = "0s"
        )]
        pub async fn audit(self, from: u64, to: String) -> Result<usize, AppError> {
            Ok(self.name.len() + to.len() + from as usize)
        }

        /// Held until `self.period` after it was taken, skipped when taken.
        #[distributed_lock(key = "report:<self.name>", hold_at_least = self.period, wait = "0s")]
        pub async fn report(&self) -> Result<(), AppError> {
            Ok(())
        }
    }

    #[distributed_lock(key = "report:<period>", hold_at_least = "1s", mode = "write")]
    pub async fn report(period: u64) -> Result<u64, AppError> {
        Ok(period)
    }

    /// In an `#[async_trait]` impl, where `self` is renamed.
    #[async_trait::async_trait]
    pub trait Ledger {
        async fn post(&self, from: u64, (a, b): (u8, u8)) -> Result<u64, AppError>;
    }

    #[async_trait::async_trait]
    impl Ledger for Bank {
        #[distributed_lock(keys = ["<self.name>:<from>", "<self.name>:<a>:<b>"])]
        async fn post(&self, from: u64, (a, b): (u8, u8)) -> Result<u64, AppError> {
            Ok(from + u64::from(a) + u64::from(b))
        }
    }
}

#[test]
fn keys_and_hold_at_least_shapes() {
    use several_keys::Ledger;

    let bank = several_keys::Bank {
        name: "north".into(),
        locks: lock_runtime::LockClient::in_memory(),
        period: std::time::Duration::from_secs(60),
    };
    send(bank.transfer(1, 2, 3));
    send(bank.report());
    send(bank.post(1, (2, 3)));
    send(several_keys::report(1));
    send(bank.audit(1, "to".into()));
}

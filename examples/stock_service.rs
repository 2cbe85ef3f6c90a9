//! A small HTTP service that deducts stock kept in Redis under a
//! distributed lock, with tracing output and a Prometheus `/metrics`
//! endpoint.
//!
//! The deduction reads the stock, checks it and writes it back: three steps
//! that are not atomic on purpose, so only the lock keeps two processes
//! from selling the same unit twice.
//!
//! ```text
//! cargo run --example stock_service -- redis://127.0.0.1:6379/ 127.0.0.1:3000
//! redis-cli set stock:apple 10
//! curl -X POST localhost:3000/stock/apple/deduct/1   # 200: 9 left
//! curl localhost:3000/stock/apple                    # 9
//! curl localhost:3000/metrics                        # distributed_lock_* series
//! RUST_LOG=lock_runtime=debug cargo run --example stock_service -- ...   # every step
//! ```
//!
//! Routes:
//! - `GET /stock/{sku}`: the stock left.
//! - `POST /stock/{sku}/deduct/{qty}`: takes `qty` units. 200 with the stock
//!   left; 409 when there is not enough; 503 when the lock stayed busy for
//!   the whole wait (1 s); 500 otherwise, with a plain `internal error`
//!   (the detail, which names the Redis node, goes to the log only). With
//!   `STOCK_DEMO_PAUSE=1` in the environment (a demo knob, off by default:
//!   it lets any client hold a lock for 5 s per request), a header
//!   `x-pause-ms` (at most 5000) makes the deduction pause that long under
//!   the lock, as a slow downstream call would.
//! - `GET /metrics`: the Prometheus exposition of the recorded metrics. It
//!   shows the lock labels (the key templates, not rendered keys), call
//!   counts, waits and hold times, losses and the leader gauge: serve it
//!   on an address only your scraper reaches, or behind its own guard.
//!
//! Arguments: the Redis URL (default `redis://127.0.0.1:6379/`) and the
//! address to listen on (default `127.0.0.1:3000`; port 0 picks a free
//! one). The bound address is printed on stdout as `listening on ADDR`; logs
//! go to stderr, filtered by `RUST_LOG` (default `info`).
//!
//! On Ctrl-C or SIGTERM the service stops taking requests, lets the ones
//! under way finish, and shuts its lock client down, so that no lock stays
//! held until its lease ends after the process is gone.

use std::io::IsTerminal;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::Router;
use lock_runtime::{distributed_lock, LockClient, LockError};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use redis::AsyncCommands;
use tracing_subscriber::EnvFilter;

/// Why a deduction did not happen.
#[derive(Debug, thiserror::Error)]
enum StockError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("not enough stock: {available} left")]
    OutOfStock { available: u64 },
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
}

impl StockError {
    /// The HTTP status for this error.
    fn status(&self) -> StatusCode {
        match self {
            StockError::Lock(LockError::Timeout { .. }) => StatusCode::SERVICE_UNAVAILABLE,
            StockError::OutOfStock { .. } => StatusCode::CONFLICT,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// The service: the stock store and the metrics handle.
#[derive(Clone)]
struct Stock {
    redis: redis::aio::MultiplexedConnection,
    metrics: PrometheusHandle,
    /// Whether `x-pause-ms` is honoured (`STOCK_DEMO_PAUSE=1`).
    demo_pause: bool,
}

/// What a client is told of a failure the server logs: no node, no
/// Redis error text.
const INTERNAL: &str = "internal error\n";

impl Stock {
    /// Takes `qty` units of `sku`: read, check, pause (if asked), write. Not
    /// atomic in Redis; the lock on `stock:<sku>` makes it safe across
    /// processes.
    #[distributed_lock(key = "stock:<sku>", lease = "10s", wait = "1s")]
    async fn deduct(&self, sku: &str, qty: u64, pause: Duration) -> Result<u64, StockError> {
        let mut redis = self.redis.clone();
        let key = format!("stock:{sku}");
        let available: Option<u64> = redis.get(&key).await?;
        let available = available.unwrap_or(0);
        if available < qty {
            return Err(StockError::OutOfStock { available });
        }
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
        let left = available - qty;
        let () = redis.set(&key, left).await?;
        Ok(left)
    }
}

#[tracing::instrument(skip(stock, headers))]
async fn deduct(
    State(stock): State<Stock>,
    Path((sku, qty)): Path<(String, u64)>,
    headers: HeaderMap,
) -> (StatusCode, String) {
    let pause = headers
        .get("x-pause-ms")
        .filter(|_| stock.demo_pause)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .map_or(Duration::ZERO, |ms| Duration::from_millis(ms.min(5000)));
    match stock.deduct(&sku, qty, pause).await {
        Ok(left) => (StatusCode::OK, format!("{left}\n")),
        Err(error) => {
            let status = error.status();
            if status == StatusCode::INTERNAL_SERVER_ERROR {
                tracing::error!(%error, "deduction failed");
                return (status, INTERNAL.to_owned());
            }
            (status, format!("{error}\n"))
        }
    }
}

async fn show(State(stock): State<Stock>, Path(sku): Path<String>) -> (StatusCode, String) {
    let mut redis = stock.redis.clone();
    match redis.get::<_, Option<u64>>(format!("stock:{sku}")).await {
        Ok(left) => (StatusCode::OK, format!("{}\n", left.unwrap_or(0))),
        Err(error) => {
            tracing::error!(%error, "reading the stock failed");
            (StatusCode::INTERNAL_SERVER_ERROR, INTERNAL.to_owned())
        }
    }
}

async fn render_metrics(State(stock): State<Stock>) -> String {
    stock.metrics.render()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:6379/".into());
    let listen = args.next().unwrap_or_else(|| "127.0.0.1:3000".into());

    let metrics = PrometheusBuilder::new().install_recorder()?;
    lock_runtime::metrics::describe();
    let locks = LockClient::connect(&url).await?;
    lock_runtime::init(locks.clone())?;
    let redis = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let app = Router::new()
        .route("/stock/{sku}", get(show))
        .route("/stock/{sku}/deduct/{qty}", post(deduct))
        .route("/metrics", get(render_metrics))
        .with_state(Stock {
            redis,
            metrics,
            demo_pause: std::env::var("STOCK_DEMO_PAUSE").is_ok_and(|v| v == "1"),
        });

    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!("listening on {}", listener.local_addr()?);
    tracing::info!(addr = %listener.local_addr()?, "stock service started");
    axum::serve(listener, app)
        .with_graceful_shutdown(stop_requested())
        .await?;
    // No more requests: deductions still running get 10 s to finish and give
    // their locks back; then the client's watchdog and registry entry stop.
    locks.shutdown(Duration::from_secs(10)).await;
    tracing::info!("stock service stopped");
    Ok(())
}

/// Resolves on Ctrl-C, or on SIGTERM (what `kill` and service managers send).
async fn stop_requested() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut sigterm) => {
                sigterm.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
    tracing::info!("stopping: no new requests");
}
